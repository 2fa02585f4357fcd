// out = A @ V for a CSR matrix A (m rows) and a C-ordered V (ncols x r): T lanes per row, C columns per lane
// per pass; the group loads B = max(T, UNR) (column, value) pairs of the row at once (PER = B/T per lane),
// then, UNR entries at a time, broadcasts them with shuffles and issues all UNR*C gathers before the FMAs.
// A group does RPG consecutive rows one after the other (a block then covers 8*32/T*RPG consecutive rows, which
// share more of their neighbours' rows in L1 when the matrix has locality). With ADD the epilogue writes
// alpha * (A @ V) + beta * W instead (W shaped like out), which saves a pass over both when a sum is wanted.
// Row i holds the entries starts[i] .. ends[i] - 1 (indptr[:-1] and indptr[1:] for a plain CSR matrix; other
// bounds run the same kernel over pieces of long rows, or with those rows left empty). V is F and out is Y (each
// double or float: a float V is a halo in single precision or a factor in mixed precision); the data, the sums
// and W are double, and each output entry is rounded once.
template<typename I, typename O, typename F, typename Y, int T, int C, int UNR, int RPG, bool ADD>
__global__ void csr_matmul_kernel(const I* __restrict__ starts, const I* __restrict__ ends,
                                  const I* __restrict__ indices,
                                  const double* __restrict__ data, const F* __restrict__ V,
                                  Y* __restrict__ out, long long m, int r, double alpha, double beta,
                                  const double* __restrict__ W) {
    constexpr int B = T > UNR ? T : UNR;
    constexpr int PER = B / T;
    const long long group = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    const unsigned mask = group_mask<T>();
#pragma unroll 1
    for (int rr = 0; rr < RPG; ++rr) {
    const long long row = group * RPG + rr;
    if (row >= m) return;  // uniform over the group
    const long long start = starts[row], end = ends[row];
    Y* __restrict__ orow = out + row * (long long)r;
    const double* __restrict__ wrow = W + row * (long long)r;  // read only with ADD
    for (int base = 0; base < r; base += T * C) {
        double acc[C];
#pragma unroll
        for (int j = 0; j < C; ++j) acc[j] = 0.0;
        for (long long s = start; s < end; s += B) {
            I ci[PER];
            double va[PER];
#pragma unroll
            for (int q = 0; q < PER; ++q) {  // entry q*T + lane of this batch
                const long long pos = s + q * T + lane;
                ci[q] = pos < end ? indices[pos] : (I)0;
                va[q] = pos < end ? data[pos] : 0.0;
            }
            const int cnt = (int)min((long long)B, end - s);
#pragma unroll
            for (int t0 = 0; t0 < B; t0 += UNR) {
                if (t0 >= cnt) break;  // uniform over the group
                double x[UNR][C], v[UNR];
#pragma unroll
                for (int u = 0; u < UNR; ++u) {
                    const int t = t0 + u;  // lives in lane t % T, register t / T
                    const O c = (O)__shfl_sync(mask, ci[t / T], t % T, T) * (O)r;
                    v[u] = __shfl_sync(mask, va[t / T], t % T, T);
#pragma unroll
                    for (int j = 0; j < C; ++j) {
                        const int k = base + lane + j * T;
                        x[u][j] = (t < cnt && k < r) ? (double)V[c + k] : 0.0;
                    }
                }
#pragma unroll
                for (int u = 0; u < UNR; ++u)
#pragma unroll
                    for (int j = 0; j < C; ++j) acc[j] = fma(v[u], x[u][j], acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int k = base + lane + j * T;
            if (k < r) orow[k] = (Y)(ADD ? __dadd_rn(__dmul_rn(alpha, acc[j]), __dmul_rn(beta, wrow[k])) : acc[j]);
        }
    }
    }
}

// out[rows[i], k] += alpha * partial[i, k] for the i-th split row (rows distinct): the sums of its pieces
template<typename I, typename Y>
__global__ void add_rows_kernel(const double* __restrict__ partial, const I* __restrict__ rows, long long count,
                                int r, double alpha, Y* __restrict__ out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const long long h = i / r;
    Y* entry = out + (long long)rows[h] * r + (i - h * r);
    *entry = (Y)((double)*entry + alpha * partial[i]);
}
