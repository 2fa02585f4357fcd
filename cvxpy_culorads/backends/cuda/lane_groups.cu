template<int T>
__device__ __forceinline__ unsigned group_mask() {
    // the T lanes of this thread's group; T divides 32 and groups never straddle warps
    return (0xffffffffu >> (32 - T)) << ((threadIdx.x & 31u) & ~(unsigned)(T - 1));
}

template<int T>
__device__ __forceinline__ double group_sum(double v, unsigned mask) {
#pragma unroll
    for (int o = T / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, T);
    return v;
}
