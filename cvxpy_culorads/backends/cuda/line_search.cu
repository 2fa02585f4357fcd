// the line-search scalars (CpuKernels.line_search_products): 6 sums over the m constraints, b'lambda, and
// <R, CD>, <D, CD> over the L = n r factor entries
__global__ void line_search_kernel(const double* __restrict__ aw, const double* __restrict__ a,
                                   const double* __restrict__ b, const double* __restrict__ lam, double rho,
                                   long long m, const double* __restrict__ R, const double* __restrict__ D,
                                   const double* __restrict__ cd, long long L, double* partial, unsigned* ticket,
                                   double* out) {
    double acc[9];
#pragma unroll
    for (int p = 0; p < 9; ++p) acc[p] = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = start; i < m; i += stride) {
        const double res = a[i] - b[i], q0 = lam[i] / rho - res, q1 = 2.0 * aw[2 * i], q2 = aw[2 * i + 1];
        acc[0] = fma(q0, q1, acc[0]);
        acc[1] = fma(q0, q2, acc[1]);
        acc[2] = fma(q1, q1, acc[2]);
        acc[3] = fma(q1, q2, acc[3]);
        acc[4] = fma(q2, q2, acc[4]);
        acc[5] = fma(res, res, acc[5]);
        acc[8] = fma(b[i], lam[i], acc[8]);
    }
    for (long long i = start; i < L; i += stride) {
        acc[6] = fma(R[i], cd[i], acc[6]);
        acc[7] = fma(D[i], cd[i], acc[7]);
    }
    __shared__ double sums[9];
    if (grid_sum<9>(acc, partial, ticket, sums) && threadIdx.x < 9) out[threadIdx.x] = sums[threadIdx.x];
}

// the line-search scalars on the trace sphere (CpuKernels.sphere_line_search_products): the 15 distinct entries
// of the Gram matrix of (lambda, b, a, 2 aw_0, aw_1) over the m constraints, written to both halves of the 5 x 5
// matrix, then <R, CD>, <D, CD>, <D, D> over the L = n r factor entries
__global__ void sphere_line_search_kernel(const double* __restrict__ aw, const double* __restrict__ a,
                                          const double* __restrict__ b, const double* __restrict__ lam, long long m,
                                          const double* __restrict__ R, const double* __restrict__ D,
                                          const double* __restrict__ cd, long long L, double* partial,
                                          unsigned* ticket, double* out) {
    double acc[18];
#pragma unroll
    for (int p = 0; p < 18; ++p) acc[p] = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = start; i < m; i += stride) {
        const double q[5] = {lam[i], b[i], a[i], 2.0 * aw[2 * i], aw[2 * i + 1]};
        int p = 0;
#pragma unroll
        for (int j = 0; j < 5; ++j)
#pragma unroll
            for (int k = j; k < 5; ++k) {
                acc[p] = fma(q[j], q[k], acc[p]);
                ++p;
            }
    }
    for (long long i = start; i < L; i += stride) {
        const double d = D[i], c = cd[i];
        acc[15] = fma(R[i], c, acc[15]);
        acc[16] = fma(d, c, acc[16]);
        acc[17] = fma(d, d, acc[17]);
    }
    __shared__ double sums[18];
    if (!grid_sum<18>(acc, partial, ticket, sums) || threadIdx.x != 0) return;
    int p = 0;
    for (int j = 0; j < 5; ++j)
        for (int k = j; k < 5; ++k) {
            out[5 * j + k] = out[5 * k + j] = sums[p];
            ++p;
        }
    for (int t = 0; t < 3; ++t) out[25 + t] = sums[15 + t];
}
