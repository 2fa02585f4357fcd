// E entries per group of T lanes: all E*(2 or 4) factor loads of a lane are issued before the first use,
// so each lane keeps several gathers in flight (one entry per group left the kernel latency-bound)
// out[p] = (U[r].V[c] + U[c].V[r]) / 2, or U[r].U[c] when SYM (V unused)
template<typename I, typename O, int T, int E, bool SYM>
__global__ void sym_sample_kernel(const I* __restrict__ rows, const I* __restrict__ cols,
                                  const double* __restrict__ U, const double* __restrict__ V,
                                  double* __restrict__ out, long long N, int r) {
    const long long p0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T * E;
    const int lane = threadIdx.x & (T - 1);
    if (p0 >= N) return;  // uniform over the group
    const unsigned mask = group_mask<T>();
    O a[E], b[E];  // element offsets of the factor rows (O = int when n * r < 2^31: fewer registers)
    double s[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const bool ok = p0 + e < N;  // entries past the end read row 0 and are not written
        a[e] = ok ? (O)rows[p0 + e] * (O)r : (O)0;
        b[e] = ok ? (O)cols[p0 + e] * (O)r : (O)0;
        s[e] = 0.0;
    }
    for (int k = lane; k < r; k += T) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
            if (SYM) s[e] = fma(U[a[e] + k], U[b[e] + k], s[e]);
            else s[e] = fma(U[a[e] + k], V[b[e] + k], fma(U[b[e] + k], V[a[e] + k], s[e]));
        }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const double v = group_sum<T>(s[e], mask);
        if (lane == (e & (T - 1)) && p0 + e < N) out[p0 + e] = SYM ? v : 0.5 * v;
    }
}

// out[p, 0] = (R[r].D[c] + R[c].D[r]) / 2, out[p, 1] = D[r].D[c]
template<typename I, typename O, int T, int E>
__global__ void sym_sample_pair_kernel(const I* __restrict__ rows, const I* __restrict__ cols,
                                       const double* __restrict__ R, const double* __restrict__ D,
                                       double* __restrict__ out, long long N, int r) {
    const long long p0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T * E;
    const int lane = threadIdx.x & (T - 1);
    if (p0 >= N) return;
    const unsigned mask = group_mask<T>();
    O a[E], b[E];
    double s0[E], s1[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const bool ok = p0 + e < N;
        a[e] = ok ? (O)rows[p0 + e] * (O)r : (O)0;
        b[e] = ok ? (O)cols[p0 + e] * (O)r : (O)0;
        s0[e] = 0.0;
        s1[e] = 0.0;
    }
    for (int k = lane; k < r; k += T) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const double ra = R[a[e] + k], rb = R[b[e] + k], da = D[a[e] + k], db = D[b[e] + k];
            s0[e] = fma(ra, db, fma(rb, da, s0[e]));
            s1[e] = fma(da, db, s1[e]);
        }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const double v0 = group_sum<T>(s0[e], mask), v1 = group_sum<T>(s1[e], mask);
        if (p0 + e < N) {
            if (lane == ((2 * e) & (T - 1))) out[2 * (p0 + e)] = 0.5 * v0;
            if (lane == ((2 * e + 1) & (T - 1))) out[2 * (p0 + e) + 1] = v1;
        }
    }
}
