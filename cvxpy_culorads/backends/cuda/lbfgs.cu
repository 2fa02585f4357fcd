// L-BFGS two-loop recursion on coefficients from the Gram matrix (upper triangle, row by row) of the basis
// (G, s_0, y_0, s_1, y_1, ...) of K = 1 + 2 pairs vectors, oldest pair first: the same arithmetic as on the vectors
// (in exact arithmetic); writes coef[K] (D = sum coef_j v_j) and products = (<G,G>, <D,G>)
template<int K>
__device__ void lbfgs_recursion(const double* gram, double* coef, double* products) {
    constexpr int NP = (K - 1) / 2;
    double g[K][K], c[K], inv[NP + 1], gam[NP + 1], alpha[NP + 1];
    int p = 0;
    for (int a = 0; a < K; ++a)
        for (int b = a; b < K; ++b) {
            g[a][b] = g[b][a] = gram[p];
            ++p;
        }
    for (int j = 0; j < K; ++j) c[j] = j == 0 ? 1.0 : 0.0;
    for (int i = 0; i < NP; ++i) {  // weights of the pairs, as LBFGS.push computed them
        const double sy = g[1 + 2 * i][2 + 2 * i], yy = g[2 + 2 * i][2 + 2 * i], ss = g[1 + 2 * i][1 + 2 * i];
        const bool ok = sy > 1e-12 * sqrt(ss * yy);
        inv[i] = ok ? 1.0 / sy : 0.0;
        gam[i] = ok ? sy / yy : 1.0;
    }
    for (int i = NP - 1; i >= 0; --i) {
        double d = 0.0;
        for (int j = 0; j < K; ++j) d += g[1 + 2 * i][j] * c[j];
        alpha[i] = inv[i] * d;
        c[2 + 2 * i] -= alpha[i];
    }
    if (NP > 0)
        for (int j = 0; j < K; ++j) c[j] *= gam[NP > 0 ? NP - 1 : 0];
    for (int i = 0; i < NP; ++i) {
        double d = 0.0;
        for (int j = 0; j < K; ++j) d += g[2 + 2 * i][j] * c[j];
        c[1 + 2 * i] += alpha[i] - inv[i] * d;
    }
    double dg = 0.0;
    for (int j = 0; j < K; ++j) {
        coef[j] = -c[j];
        dg -= g[0][j] * c[j];
    }
    products[0] = g[0][0];
    products[1] = dg;
}

// L-BFGS direction in the basis (G, s_0, y_0, s_1, y_1, ...) of K = 1 + 2 pairs vectors (oldest pair first): one
// pass builds their Gram matrix and the last block runs ``lbfgs_recursion`` on it. Without RECURSE it writes the Gram
// matrix's upper triangle, row by row, to coef[K (K + 1) / 2] instead (a shard's part of it, which the shards sum
// before the recursion). The vectors are F (double, or float in mixed precision); the sums are double.
template<int K, bool RECURSE, typename F>
__global__ void lbfgs_gram_kernel(const F* v0, const F* v1, const F* v2, const F* v3,
                                  const F* v4, const F* v5, const F* v6, const F* v7,
                                  const F* v8, long long L, double* partial, unsigned* ticket,
                                  double* coef, double* products) {
    constexpr int P = K * (K + 1) / 2;
    const F* v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double acc[P];
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p] = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += stride) {
        double x[K];
#pragma unroll
        for (int a = 0; a < K; ++a) x[a] = (double)v[a][i];
        int p = 0;
#pragma unroll
        for (int a = 0; a < K; ++a)
#pragma unroll
            for (int b = a; b < K; ++b) {
                acc[p] = fma(x[a], x[b], acc[p]);
                ++p;
            }
    }
    __shared__ double gram[P];
    if (!grid_sum<P>(acc, partial, ticket, gram) || threadIdx.x != 0) return;
    if (!RECURSE) {
        for (int q = 0; q < P; ++q) coef[q] = gram[q];
        return;
    }
    lbfgs_recursion<K>(gram, coef, products);
}

// the recursion alone, from a Gram matrix's upper triangle summed over shards (one thread)
template<int K>
__global__ void lbfgs_recursion_kernel(const double* __restrict__ gram, double* coef, double* products) {
    lbfgs_recursion<K>(gram, coef, products);
}

// out = sum_j coef_j v_j, summed in double and rounded once to the vectors' type F
template<int K, typename F>
__global__ void lbfgs_combine_kernel(const F* v0, const F* v1, const F* v2, const F* v3,
                                     const F* v4, const F* v5, const F* v6, const F* v7,
                                     const F* v8, long long L, const double* __restrict__ coef,
                                     F* __restrict__ out) {
    const F* v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double c[K];
#pragma unroll
    for (int j = 0; j < K; ++j) c[j] = coef[j];
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += stride) {
        double s = c[0] * (double)v[0][i];
#pragma unroll
        for (int j = 1; j < K; ++j) s = fma(c[j], (double)v[j][i], s);
        out[i] = (F)s;
    }
}
