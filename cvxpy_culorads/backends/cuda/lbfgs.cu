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

// acc += the upper triangle, row by row, of x x' (one entry of each of K vectors)
template<int K>
__device__ __forceinline__ void lbfgs_gram_add(const double (&x)[K], double (&acc)[K * (K + 1) / 2]) {
    int p = 0;
#pragma unroll
    for (int a = 0; a < K; ++a)
#pragma unroll
        for (int b = a; b < K; ++b) {
            acc[p] = fma(x[a], x[b], acc[p]);
            ++p;
        }
}

// What lbfgs_gram_kernel does after its Gram pass, and whether the pass first updates the newest pair
enum LbfgsGramMode { LBFGS_WRITE_GRAM = 0, LBFGS_RECURSE = 1, LBFGS_UPDATE_RECURSE = 2 };

// L-BFGS direction in the basis (G, s_0, y_0, s_1, y_1, ...) of K = 1 + 2 pairs vectors (oldest pair first): one
// pass builds their Gram matrix and the last block runs ``lbfgs_recursion`` on it (LBFGS_RECURSE). LBFGS_WRITE_GRAM
// writes the Gram matrix's upper triangle, row by row, to coef[K (K + 1) / 2] instead (a shard's part of it, which the
// shards sum before the recursion). LBFGS_UPDATE_RECURSE (the Riemannian step's fused direction,
// CpuKernels.lbfgs_sphere_direction with update) first updates the newest pair in the same pass: its arrays
// v[K-2] = s_new and v[K-1] = y_new still hold the previous point and gradient and become s = X - s_new and
// y = v0 - y_new (X the current point, v0 = G its gradient), each difference taken in double and rounded once to F, as
// scale_add rounds it, before the Gram matrix uses it; other modes never touch s_new, y_new, X. The vectors are F
// (double, or float in mixed precision); the sums are double.
template<int K, int MODE, typename F>
__global__ void lbfgs_gram_kernel(const F* v0, const F* v1, const F* v2, const F* v3,
                                  const F* v4, const F* v5, const F* v6, const F* v7,
                                  const F* v8, F* s_new, F* y_new, const F* __restrict__ X, long long L,
                                  double* partial, unsigned* ticket, double* coef, double* products) {
    constexpr int P = K * (K + 1) / 2;
    const F* v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double acc[P];
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p] = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += stride) {
        double x[K];
        if (MODE == LBFGS_UPDATE_RECURSE) {
#pragma unroll
            for (int a = 0; a < K - 2; ++a) x[a] = (double)v[a][i];
            const F s = (F)((double)X[i] - (double)s_new[i]);
            const F y = (F)(x[0] - (double)y_new[i]);
            s_new[i] = s;
            y_new[i] = y;
            x[K - 2] = (double)s;
            x[K - 1] = (double)y;
        } else {
#pragma unroll
            for (int a = 0; a < K; ++a) x[a] = (double)v[a][i];
        }
        lbfgs_gram_add<K>(x, acc);
    }
    __shared__ double gram[P];
    if (!grid_sum<P>(acc, partial, ticket, gram) || threadIdx.x != 0) return;
    if (MODE == LBFGS_WRITE_GRAM) {
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

// sum_j c_j v_j[i] in double
template<int K, typename F>
__device__ __forceinline__ double lbfgs_combination(const F* const (&v)[9], const double (&c)[K], long long i) {
    double s = c[0] * (double)v[0][i];
#pragma unroll
    for (int j = 1; j < K; ++j) s = fma(c[j], (double)v[j][i], s);
    return s;
}

// out = sum_j coef_j v_j, summed in double and rounded once to the vectors' type F
template<int K, typename F>
__global__ void lbfgs_combine_kernel(const F* v0, const F* v1, const F* v2, const F* v3,
                                     const F* v4, const F* v5, const F* v6, const F* v7,
                                     const F* v8, long long L, const double* __restrict__ coef,
                                     F* __restrict__ out) {
    const F* const v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double c[K];
#pragma unroll
    for (int j = 0; j < K; ++j) c[j] = coef[j];
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += stride)
        out[i] = (F)lbfgs_combination<K, F>(v, c, i);
}

// out_i = P_{x_i}(sum_j coef_j v_j[i]): the combination of lbfgs_combine_kernel projected onto the tangent space at
// the rows x_i of X (squared norms squares_i), as sphere_tangent_kernel projects: one group of T lanes per row, C
// columns per lane held in registers (sphere.cu's row layout); the combination is taken in double and rounded once
// to F
template<int K, int T, int C, typename F>
__global__ void lbfgs_tangent_combine_kernel(const F* v0, const F* v1, const F* v2, const F* v3,
                                             const F* v4, const F* v5, const F* v6, const F* v7,
                                             const F* v8, const F* __restrict__ X,
                                             const double* __restrict__ squares, const double* __restrict__ coef,
                                             F* __restrict__ out, long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;  // uniform over the group
    const unsigned mask = group_mask<T>();
    const F* const v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double c[K];
#pragma unroll
    for (int j = 0; j < K; ++j) c[j] = coef[j];
    const long long base = i * r;
    double y[C], x[C], dot = 0.0;
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) {
            y[k] = lbfgs_combination<K, F>(v, c, base + lane + k * T);
            x[k] = (double)X[base + lane + k * T];
            dot = fma(y[k], x[k], dot);
        }
    const double along = group_sum<T>(dot, mask) / squares[i];
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) out[base + lane + k * T] = (F)fma(-along, x[k], y[k]);
}
