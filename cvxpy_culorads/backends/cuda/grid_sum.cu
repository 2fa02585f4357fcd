// ---------------------------------------------------------------- fused reductions of the phases' vector algebra
// Deterministic grid-wide sums: each block reduces its threads' P partial sums in a fixed order, the last block to
// finish (an atomic ticket) adds the per-block sums in block order and runs the kernel's epilogue; it also resets
// the ticket, so the next launch finds it at zero. Blocks are REDUCE_THREADS (256) threads.
template<int P>
__device__ void block_sum(const double (&acc)[P], double* __restrict__ result) {
    __shared__ double warp_sums[P][8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int p = 0; p < P; ++p) {
        double v = acc[p];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) warp_sums[p][warp] = v;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        double s = 0.0;
        for (int k = 0; k < (int)(blockDim.x >> 5); ++k) s += warp_sums[p][k];
        result[p] = s;
    }
    __syncthreads();
}

// true in the last block, whose shared ``sums`` then hold the grid-wide totals
template<int P>
__device__ bool grid_sum(double (&acc)[P], double* __restrict__ partial, unsigned* ticket, double* sums) {
    __shared__ bool last;
    block_sum<P>(acc, sums);
    if (threadIdx.x < P) partial[(long long)blockIdx.x * P + threadIdx.x] = sums[threadIdx.x];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return false;
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p] = 0.0;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
#pragma unroll
        for (int p = 0; p < P; ++p) acc[p] += __ldcg(partial + (long long)b * P + p);
    block_sum<P>(acc, sums);
    if (threadIdx.x == 0) *ticket = 0u;
    return true;
}
