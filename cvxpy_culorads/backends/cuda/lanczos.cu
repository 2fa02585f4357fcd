// ---------------------------------------------------------------- Lanczos tridiagonals of a stack of small matrices
// One block of REDUCE_THREADS threads per symmetric n x n matrix B of a stack (the interior-point method's step
// lengths): ``steps`` Lanczos steps from the matrix's unit row of ``start``, each new vector reorthogonalised twice
// against the whole basis (classical Gram-Schmidt), as CpuKernels.lanczos_tridiagonals. The basis lives in
// ``basis`` (count x (steps + 1) x n scratch); a new vector shorter than breakdown ||B||_F (an invariant subspace)
// continues as zeros. Writes alphas and betas (count x steps). One launch for the stack: its per-step kernels were
// the iteration's launch-bound share (decision record "interior-point-stacks").
constexpr int LANCZOS_MAX_STEPS = 64;  // gpu_vector_algebra.LANCZOS_MAX_STEPS
__global__ void lanczos_tridiagonal_kernel(const double* __restrict__ stack, const double* __restrict__ start,
                                           long long n, int steps, double breakdown, double* basis,
                                           double* __restrict__ alphas, double* __restrict__ betas) {
    __shared__ double sums[1];
    __shared__ double coef[LANCZOS_MAX_STEPS + 1];
    const long long matrix = blockIdx.x;
    const double* B = stack + matrix * n * n;
    double* V = basis + matrix * (steps + 1) * n;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    double acc[1] = {0.0};
    for (long long i = threadIdx.x; i < n * n; i += blockDim.x) acc[0] = fma(B[i], B[i], acc[0]);
    block_sum<1>(acc, sums);
    const double threshold = breakdown * sqrt(sums[0]);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) V[i] = start[matrix * n + i];
    __syncthreads();
    for (int j = 0; j < steps; ++j) {
        const double* v = V + (long long)j * n;
        double* w = V + (long long)(j + 1) * n;
        for (long long r = warp; r < n; r += warps) {  // w = B v, a warp per row (coalesced reads of B)
            double s = 0.0;
            for (long long c = lane; c < n; c += 32) s = fma(B[r * n + c], v[c], s);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) w[r] = s;
        }
        __syncthreads();
        double alpha = 0.0;
        for (int pass = 0; pass < 2; ++pass) {
            for (int q = warp; q <= j; q += warps) {  // c_q = <V_q, w>, a warp per basis vector
                double s = 0.0;
                for (long long i = lane; i < n; i += 32) s = fma(V[(long long)q * n + i], w[i], s);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (lane == 0) coef[q] = s;
            }
            __syncthreads();
            for (long long i = threadIdx.x; i < n; i += blockDim.x) {
                double s = w[i];
                for (int q = 0; q <= j; ++q) s -= coef[q] * V[(long long)q * n + i];
                w[i] = s;
            }
            alpha += coef[j];
            __syncthreads();
        }
        acc[0] = 0.0;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) acc[0] = fma(w[i], w[i], acc[0]);
        block_sum<1>(acc, sums);
        const double beta = sqrt(sums[0]);
        if (threadIdx.x == 0) {
            alphas[matrix * steps + j] = alpha;
            betas[matrix * steps + j] = beta;
        }
        const double scale = beta > threshold ? 1.0 / beta : 0.0;
        for (long long i = threadIdx.x; i < n; i += blockDim.x) w[i] *= scale;
        __syncthreads();
    }
}
