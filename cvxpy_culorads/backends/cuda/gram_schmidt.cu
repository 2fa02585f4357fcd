// Gram-Schmidt against the k rows of a C-ordered k x n array V (a Lanczos basis, a deflation's Q'): the
// coefficients c_j = V[j] . w, rows in tiles of ROWS over blockIdx.y, each tile a deterministic grid sum of its own
// (its slice of ``partial``, its own ticket); the last block writes c_j to out[j * stride]
template<int ROWS>
__global__ void rows_dot_kernel(const double* __restrict__ V, const double* __restrict__ w, long long n, int k,
                                double* partial, unsigned* tickets, double* out, long long stride) {
    __shared__ double sums[ROWS];
    const int j0 = blockIdx.y * ROWS;
    double acc[ROWS];
#pragma unroll
    for (int t = 0; t < ROWS; ++t) acc[t] = 0.0;
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;
    for (long long i = start; i < n; i += step) {
        const double wi = w[i];
#pragma unroll
        for (int t = 0; t < ROWS; ++t)
            if (j0 + t < k) acc[t] = fma(V[(long long)(j0 + t) * n + i], wi, acc[t]);
    }
    if (!grid_sum<ROWS>(acc, partial + (long long)blockIdx.y * gridDim.x * ROWS, tickets + blockIdx.y, sums)) return;
    if (threadIdx.x < ROWS && j0 + (int)threadIdx.x < k)
        out[(long long)(j0 + threadIdx.x) * stride] = sums[threadIdx.x];
}

// w -= V' c (c_j at c[j * stride]); and, with ``add``, add[j * add_stride] += c_j for j < k
__global__ void rows_subtract_kernel(const double* __restrict__ V, const double* __restrict__ c, long long stride,
                                     long long n, int k, double* __restrict__ w, double* add, long long add_stride) {
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x, step = (long long)gridDim.x * blockDim.x;
    for (long long i = start; i < n; i += step) {
        double s = 0.0;
        for (int j = 0; j < k; ++j) s = fma(V[(long long)j * n + i], c[(long long)j * stride], s);
        w[i] -= s;
    }
    if (add != nullptr)
        for (long long j = start; j < k; j += step) add[j * add_stride] += c[j * stride];
}

// out[0] = ||w||_2, deterministic
__global__ void norm_kernel(const double* __restrict__ w, long long n, double* partial, unsigned* ticket,
                            double* out) {
    __shared__ double sums[1];
    double acc[1] = {0.0};
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc[0] = fma(w[i], w[i], acc[0]);
    if (grid_sum<1>(acc, partial, ticket, sums) && threadIdx.x == 0) out[0] = sqrt(sums[0]);
}
