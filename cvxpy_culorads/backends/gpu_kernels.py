"""CuPy ``RawKernel`` twins of :class:`~cvxpy_culorads.backends.kernels.CpuKernels` (the hot GPU kernels).

All three kernels give a *group* of T lanes (T a power of two, 1..32, the smallest one with T >= min(r, 32))
to pattern entries or a matrix row and spread the rank r over the lanes, so every access to a row of a C-ordered
(n x r) factor is a contiguous, coalesced read and a small rank doesn't leave most of a warp idle; partial sums
are combined with warp shuffles restricted to the group's lanes. The kernels are bound by the latency of
dependent gathers (index -> factor row), so each lane issues several independent gathers before it uses any:
a sampling group handles E consecutive pattern entries at once (``ENTRIES_SYM``, ``ENTRIES_UV``,
``ENTRIES_PAIR``), and ``csr_matmul``, a row-major CSR SpMM (CuPy's cuSPARSE wrapper is 2-9x slower), loads a
batch of (column, value) pairs of its row cooperatively, broadcasts them with shuffles and keeps 4 to 8 gathers
in flight per lane, each lane accumulating C columns (C = 1, 2, 4, 8 from r; a rank above 32*C takes several
passes over the row); a group does 4 consecutive rows when r >= 8, for L1 reuse. Element offsets into the
factors are 32-bit when n * r < 2^31 (fewer registers, more warps in flight). Each instantiation is compiled
with NVRTC on first use and cached for the process (CuPy also caches binaries on disk). Index arrays may be
int32 (preferred: half the index traffic) or int64; each has its own instantiation, so no index array is
converted on the fly. A CSR row much longer than the matrix's share per lane group is cut into pieces that run as
rows of their own (``row_split``). Nothing here synchronises with the host, except that split's one-off planning
on a matrix's first product: launches go to the current CuPy stream and the argument checks read only shapes and
dtypes.
"""
from __future__ import annotations

import dataclasses
import functools

import cupy
import cupyx.scipy.sparse
import numpy as np

from cvxpy_culorads.backends.kernels import RowSpace

__all__ = ["GpuKernels", "lanes_for_rank", "sym_sample", "sym_sample_pair", "csr_matmul", "lbfgs_direction",
           "line_search_products"]

_BLOCK = 256  # threads per block; a multiple of 32 so that no lane group straddles two warps
_LANES = (1, 2, 4, 8, 16, 32)
_CHUNKS = (1, 2, 4, 8)  # columns per lane per pass of the CSR kernel (only with 32 lanes)
_CTYPES = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}

_SOURCE = r"""
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

// out = A @ V for a CSR matrix A (m rows) and a C-ordered V (ncols x r): T lanes per row, C columns per lane
// per pass; the group loads B = max(T, UNR) (column, value) pairs of the row at once (PER = B/T per lane),
// then, UNR entries at a time, broadcasts them with shuffles and issues all UNR*C gathers before the FMAs.
// A group does RPG consecutive rows one after the other (a block then covers 8*32/T*RPG consecutive rows, which
// share more of their neighbours' rows in L1 when the matrix has locality). With ADD the epilogue writes
// alpha * (A @ V) + beta * W instead (W shaped like out), which saves a pass over both when a sum is wanted.
// Row i holds the entries starts[i] .. ends[i] - 1 (indptr[:-1] and indptr[1:] for a plain CSR matrix; other
// bounds run the same kernel over pieces of long rows, or with those rows left empty).
template<typename I, typename O, typename F, int T, int C, int UNR, int RPG, bool ADD>
__global__ void csr_matmul_kernel(const I* __restrict__ starts, const I* __restrict__ ends,
                                  const I* __restrict__ indices,
                                  const double* __restrict__ data, const F* __restrict__ V,
                                  double* __restrict__ out, long long m, int r, double alpha, double beta,
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
    double* __restrict__ orow = out + row * (long long)r;
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
            if (k < r) orow[k] = ADD ? __dadd_rn(__dmul_rn(alpha, acc[j]), __dmul_rn(beta, wrow[k])) : acc[j];
        }
    }
    }
}

// out[rows[i], k] += alpha * partial[i, k] for the i-th split row (rows distinct): the sums of its pieces
template<typename I>
__global__ void add_rows_kernel(const double* __restrict__ partial, const I* __restrict__ rows, long long count,
                                int r, double alpha, double* __restrict__ out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const long long h = i / r;
    out[(long long)rows[h] * r + (i - h * r)] += alpha * partial[i];
}

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
// before the recursion).
template<int K, bool RECURSE>
__global__ void lbfgs_gram_kernel(const double* v0, const double* v1, const double* v2, const double* v3,
                                  const double* v4, const double* v5, const double* v6, const double* v7,
                                  const double* v8, long long L, double* partial, unsigned* ticket,
                                  double* coef, double* products) {
    constexpr int P = K * (K + 1) / 2;
    const double* v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double acc[P];
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p] = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += stride) {
        double x[K];
#pragma unroll
        for (int a = 0; a < K; ++a) x[a] = v[a][i];
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

template<int K>
__global__ void lbfgs_combine_kernel(const double* v0, const double* v1, const double* v2, const double* v3,
                                     const double* v4, const double* v5, const double* v6, const double* v7,
                                     const double* v8, long long L, const double* __restrict__ coef,
                                     double* __restrict__ out) {
    const double* v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double c[K];
#pragma unroll
    for (int j = 0; j < K; ++j) c[j] = coef[j];
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += stride) {
        double s = c[0] * v[0][i];
#pragma unroll
        for (int j = 1; j < K; ++j) s = fma(c[j], v[j][i], s);
        out[i] = s;
    }
}

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

// normal[0] = <Z, R> / size over L entries and, with ``multiplier``, multiplier[0] += weight normal[0]; the
// subtraction of normal[0] R from Z follows in a second launch (every block needs the finished sum)
__global__ void sphere_normal_kernel(const double* __restrict__ Z, const double* __restrict__ R, long long L,
                                     double size, double* partial, unsigned* ticket, double* normal,
                                     double* multiplier, double weight) {
    __shared__ double sums[1];
    double acc[1] = {0.0};
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += (long long)gridDim.x * blockDim.x)
        acc[0] = fma(Z[i], R[i], acc[0]);
    if (!grid_sum<1>(acc, partial, ticket, sums) || threadIdx.x != 0) return;
    normal[0] = sums[0] / size;
    if (multiplier != nullptr) multiplier[0] += weight * normal[0];
}

// Rows of the product of spheres (riemannian.py), one group of T lanes per row, lanes over the rank. A lane writes
// only the entries it read, after the group's sum, so out may be the first input (in place).
// out_i = scale (z_i - (z_i . x_i / squares_i) x_i): the tangent part of row z_i at the row x_i
template<int T>
__global__ void sphere_tangent_kernel(const double* Z, const double* __restrict__ X,
                                      const double* __restrict__ squares, double scale, double* out,
                                      long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;  // uniform over the group
    const unsigned mask = group_mask<T>();
    const double* z = Z + i * r;
    const double* x = X + i * r;
    double dot = 0.0;
    for (int j = lane; j < r; j += T) dot = fma(z[j], x[j], dot);
    const double along = group_sum<T>(dot, mask) / squares[i];
    double* o = out + i * r;
    for (int j = lane; j < r; j += T) o[j] = scale * fma(-along, x[j], z[j]);
}

// out_i = roots_i (x_i + tau d_i) / |x_i + tau d_i| (a zero row becomes roots_i e_1): the retraction
template<int T>
__global__ void sphere_retract_kernel(const double* __restrict__ X, const double* __restrict__ D, double tau,
                                      const double* __restrict__ roots, double* __restrict__ out,
                                      long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;
    const unsigned mask = group_mask<T>();
    const double* x = X + i * r;
    const double* d = D + i * r;
    double squares = 0.0;
    for (int j = lane; j < r; j += T) {
        const double y = fma(tau, d[j], x[j]);
        squares = fma(y, y, squares);
    }
    squares = group_sum<T>(squares, mask);
    double* o = out + i * r;
    if (squares > 0.0) {
        const double f = roots[i] * rsqrt(squares);
        for (int j = lane; j < r; j += T) o[j] = f * fma(tau, d[j], x[j]);
    } else {
        for (int j = lane; j < r; j += T) o[j] = j == 0 ? roots[i] : 0.0;
    }
}
"""

_MODULES: dict = {}  # name expression -> cupy.RawModule, each compiled on first use (NVRTC, ~0.3 s)
_FUNCS: dict = {}  # (device id, name expression) -> cupy.RawKernel


def _kernel(name: str):
    key = (cupy.cuda.Device().id, name)
    fn = _FUNCS.get(key)
    if fn is None:
        mod = _MODULES.get(name)
        if mod is None:
            mod = _MODULES[name] = cupy.RawModule(code=_SOURCE, options=("--std=c++14",), name_expressions=[name])
        fn = _FUNCS[key] = mod.get_function(name)
    return fn


def lanes_for_rank(r: int) -> int:
    """Lanes per entry/row: the smallest power of two >= min(r, 32)."""
    t = 1
    while t < min(max(int(r), 1), 32):
        t *= 2
    return t


def _chunks_for_rank(r: int) -> int:
    """Columns per lane per pass for the 32-lane CSR kernel: the power of two >= ceil(r/32), at most 8."""
    need = -(-int(r) // 32)
    c = 1
    while c < min(need, _CHUNKS[-1]):
        c *= 2
    return c


# Tuning knobs, chosen from H100 measurements (benchmarks/NOTES.md, run 3): pattern entries per lane group in the
# sampling kernels (1 when a group is a single lane, r = 1), and for the CSR kernel the gathers in flight per lane
# (UNR * C) and the consecutive rows per lane group (4 for groups of >= 8 lanes and C = 1: more L1 reuse of the
# gathered rows, 1.3x on a banded matrix; smaller groups lose parallelism instead).
ENTRIES_SYM = 8  # sym_sample with V = U
ENTRIES_UV = 4  # sym_sample with V != U
ENTRIES_PAIR = 4


def _entries_default(lanes: int, per_group: int) -> int:
    return 1 if lanes == 1 else per_group


def _csr_defaults(lanes: int, chunks: int) -> tuple[int, int]:
    """(loads, rows) for the CSR kernel."""
    loads = 8 if chunks == 2 or lanes == 1 else 4
    rows = 4 if lanes >= 8 and chunks == 1 else 1
    return loads, rows


_KNOBS = {"entries": (1, 2, 4, 8), "loads": (1, 2, 4, 8, 16), "rows": (1, 2, 4, 8)}  # larger ones spill registers
_INT32_MAX = 2**31 - 1


def _offset_type(rows: int, r: int, wide) -> str:
    """C type of element offsets into an (rows x r) array: int when they fit (or ``wide`` says so)."""
    if wide is None:
        wide = rows * r > _INT32_MAX
    return "long long" if wide else "int"


def _check_knob(x: int, what: str) -> int:
    if x not in _KNOBS[what]:
        raise ValueError(f"{what} must be one of {_KNOBS[what]}, got {x}")
    return x


def _grid(groups: int, lanes: int) -> tuple[int]:
    return (-(-(groups * lanes) // _BLOCK),)


def _index_pair(a, b):
    """Two index arrays as contiguous 1-D arrays of one supported dtype (int32 or int64) and its C type."""
    a = cupy.asarray(a)
    b = cupy.asarray(b)
    if a.dtype != b.dtype or a.dtype not in _CTYPES:
        wide = any(x.dtype.itemsize > 4 or x.dtype == np.uint32 for x in (a, b))
        dt = np.int64 if wide else np.int32
        a, b = a.astype(dt), b.astype(dt)
    return cupy.ascontiguousarray(a.ravel()), cupy.ascontiguousarray(b.ravel()), _CTYPES[a.dtype]


def _factor(X, name: str):
    X = cupy.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (n x r) array, got shape {X.shape}")
    return cupy.ascontiguousarray(X, dtype=np.float64)


def _check_out(out, shape: tuple):
    if out is None:
        return cupy.empty(shape, dtype=np.float64)
    if not isinstance(out, cupy.ndarray) or out.dtype != np.float64 or tuple(out.shape) != shape \
            or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float64 cupy array of shape {shape}, got "
                         f"{type(out).__name__} {getattr(out, 'dtype', None)} {getattr(out, 'shape', None)}")
    return out


def sym_sample(rows, cols, U, V, out=None, *, entries=None, wide=None):
    """:meth:`GpuKernels.sym_sample` with its tuning knobs.

    ``entries``: pattern entries per lane group (1, 2, 4 or 8); ``wide``: force 64-bit (True) or 32-bit (False)
    factor offsets instead of choosing from n * r (for tests).
    """
    rows, cols, ctype = _index_pair(rows, cols)
    if rows.size != cols.size:
        raise ValueError(f"rows and cols differ in length ({rows.size} vs {cols.size})")
    U = _factor(U, "U")
    sym = V is None
    if not sym:
        V = _factor(V, "V")
        if V.shape != U.shape:
            raise ValueError(f"U and V differ in shape ({U.shape} vs {V.shape})")
    N, r = rows.size, U.shape[1]
    out = _check_out(out, (N,))
    if N == 0:
        return out
    if r == 0:
        out.fill(0.0)
        return out
    t = lanes_for_rank(r)
    e = _check_knob(entries or _entries_default(t, ENTRIES_SYM if sym else ENTRIES_UV), "entries")
    otype = _offset_type(U.shape[0], r, wide)
    fn = _kernel(f"sym_sample_kernel<{ctype}, {otype}, {t}, {e}, {'true' if sym else 'false'}>")
    fn(_grid(-(-N // e), t), (_BLOCK,), (rows, cols, U, U if sym else V, out, np.int64(N), np.int32(r)))
    return out


def sym_sample_pair(rows, cols, R, D, out=None, *, entries=None, wide=None):
    """:meth:`GpuKernels.sym_sample_pair` with its tuning knobs (as for :func:`sym_sample`)."""
    rows, cols, ctype = _index_pair(rows, cols)
    if rows.size != cols.size:
        raise ValueError(f"rows and cols differ in length ({rows.size} vs {cols.size})")
    R = _factor(R, "R")
    D = _factor(D, "D")
    if R.shape != D.shape:
        raise ValueError(f"R and D differ in shape ({R.shape} vs {D.shape})")
    N, r = rows.size, R.shape[1]
    out = _check_out(out, (N, 2))
    if N == 0:
        return out
    if r == 0:
        out.fill(0.0)
        return out
    t = lanes_for_rank(r)
    e = _check_knob(entries or _entries_default(t, ENTRIES_PAIR), "entries")
    fn = _kernel(f"sym_sample_pair_kernel<{ctype}, {_offset_type(R.shape[0], r, wide)}, {t}, {e}>")
    fn(_grid(-(-N // e), t), (_BLOCK,), (rows, cols, R, D, out, np.int64(N), np.int32(r)))
    return out


def csr_matmul(matrix, V, out=None, *, alpha=1.0, addend=None, beta=0.0, loads=None, rows=None, wide=None):
    """:meth:`GpuKernels.csr_matmul` with its tuning knobs.

    ``loads``: gathers in flight per lane (UNR * C; 1..16); ``rows``: consecutive rows per lane group (1..8);
    ``wide``: as for :func:`sym_sample`. Long rows are split (:func:`row_split`).
    """
    m, ncols = matrix.shape
    V = cupy.asarray(V)
    vector = V.ndim == 1
    V2 = V.reshape(-1, 1) if vector else V
    # V in single precision is read as such (a halo received in single precision, ``sharding.HaloExchange``)
    V2 = cupy.ascontiguousarray(V2) if V2.dtype == np.float32 and V2.ndim == 2 else _factor(V2, "V")
    if V2.shape[0] != ncols:
        raise ValueError(f"dimension mismatch: matrix is {matrix.shape}, V is {V.shape}")
    r = V2.shape[1]
    out = _check_out(out, (m,) if vector else (m, r))
    add = addend is not None
    if add:
        addend = cupy.asarray(addend)
        if addend.shape != out.shape or addend.dtype != np.float64 or not addend.flags.c_contiguous:
            raise ValueError(f"addend must be a C-contiguous float64 array of shape {out.shape}")
    if m == 0 or r == 0:
        if add:
            cupy.multiply(addend, beta, out=out)
        else:
            out.fill(0.0)
        return out
    pattern = _pattern(matrix)
    data = cupy.ascontiguousarray(matrix.data, dtype=np.float64)
    t = lanes_for_rank(r)
    c = _chunks_for_rank(r) if t == 32 else 1
    default_loads, default_rows = _csr_defaults(t, c)
    unr = max(1, _check_knob(loads or default_loads, "loads") // c)
    rpg = _check_knob(rows or default_rows, "rows")
    vtype = "float" if V2.dtype == np.float32 else "double"
    name = f"csr_matmul_kernel<{pattern.ctype}, {_offset_type(ncols, r, wide)}, {vtype}, {t}, {c}, {unr}, "

    def launch(starts, ends, target, combine, per_group):
        count = starts.size
        _kernel(f"{name}{per_group}, {'true' if combine else 'false'}>")(
            _grid(-(-count // per_group), t), (_BLOCK,), (starts, ends, pattern.indices, data, V2, target,
                                                         np.int64(count), np.int32(r), np.float64(alpha),
                                                         np.float64(beta), addend if combine else target))

    launch(pattern.starts, pattern.ends, out, add, rpg)  # split rows are empty here: 0, or beta * addend
    split = pattern.split
    if split is not None:
        pieces = cupy.empty((split.piece_starts.size, r))
        launch(split.piece_starts, split.piece_ends, pieces, False, 1)  # a group per piece: all run at once
        partial = csr_matmul(split.gather, pieces)
        count = split.rows.size * r
        _kernel(f"add_rows_kernel<{pattern.ctype}>")(
            (-(-count // _BLOCK),), (_BLOCK,), (partial, split.rows, np.int64(count), np.int32(r),
                                                np.float64(alpha if add else 1.0), out))
    return out


# Long rows: one lane group walks a row alone, so a row of n entries (theta's row 0, a hub of a power-law graph)
# takes n dependent gathers while the rest of the product is long done. A row longer than max(SPLIT_MIN,
# nnz / SPLIT_SHARE) -- about four times a lane group's share of the entries on a full H100 (~8k groups of 32
# lanes in flight) -- is cut into pieces of ROW_PIECE entries, which run as rows of their own.
ROW_PIECE = 256
SPLIT_MIN = 2 * ROW_PIECE
SPLIT_SHARE = 2048
_PATTERN_ATTRIBUTE = "_culorads_csr_pattern"


@dataclasses.dataclass(frozen=True)
class RowSplit:
    """How :func:`csr_matmul` runs a matrix with long rows: the bounds of the long ``rows``' pieces, and ``gather``,
    the CSR matrix of ones that sums each long row's pieces (its own long rows are split in turn)."""

    piece_starts: object
    piece_ends: object
    rows: object
    gather: object


@dataclasses.dataclass(frozen=True)
class _Pattern:
    """What :func:`csr_matmul` keeps of a matrix's pattern between products (kept on the matrix, checked against
    its index arrays): the column indices in the kernels' index type (``ctype``), each row's bounds (the long rows
    left empty) and the :class:`RowSplit`, so that a product does no conversions and allocates no index arrays."""

    indptr_source: object
    indices_source: object
    indices: object
    ctype: str
    starts: object
    ends: object
    split: RowSplit | None


def _pattern(matrix) -> _Pattern:
    cached = getattr(matrix, _PATTERN_ATTRIBUTE, None)
    if cached is not None and cached.indptr_source is matrix.indptr and cached.indices_source is matrix.indices:
        return cached
    indptr, indices, ctype = _index_pair(matrix.indptr, matrix.indices)
    may_split = matrix.shape[0] > 0 and indices.size > SPLIT_MIN
    capturing = may_split and cupy.cuda.get_current_stream().is_capturing()
    split = _split_long_rows(indptr, indices.size) if may_split and not capturing else None
    ends = indptr[1:]
    if split is not None:
        ends = ends.copy()
        ends[split.rows] = indptr[split.rows]
    pattern = _Pattern(matrix.indptr, matrix.indices, indices, ctype, indptr[:-1], ends, split)
    if not capturing:  # planned without the split: the next product outside the capture plans it
        setattr(matrix, _PATTERN_ATTRIBUTE, pattern)
    return pattern


def _split_long_rows(indptr, nnz: int) -> RowSplit | None:
    """The pieces of the rows longer than max(SPLIT_MIN, nnz / SPLIT_SHARE) (one synchronisation)."""
    long_rows = cupy.flatnonzero(cupy.diff(indptr) > max(SPLIT_MIN, nnz // SPLIT_SHARE)).astype(indptr.dtype)
    if not long_rows.size:
        return None
    firsts, lasts = indptr[long_rows].get(), indptr[long_rows + 1].get()
    counts = -(-(lasts - firsts) // ROW_PIECE)
    piece_starts = np.concatenate([np.arange(a, b, ROW_PIECE) for a, b in zip(firsts, lasts)])
    piece_ends = np.minimum(piece_starts + ROW_PIECE, np.repeat(lasts, counts))
    pieces = int(counts.sum())
    gather = cupyx.scipy.sparse.csr_matrix(
        (cupy.ones(pieces), cupy.arange(pieces, dtype=indptr.dtype),
         cupy.asarray(np.concatenate([[0], np.cumsum(counts)]), dtype=indptr.dtype)), shape=(long_rows.size, pieces))
    return RowSplit(cupy.asarray(piece_starts, dtype=indptr.dtype), cupy.asarray(piece_ends, dtype=indptr.dtype),
                    long_rows, gather)


def row_split(matrix) -> RowSplit | None:
    """The :class:`RowSplit` of ``matrix`` (None: no row is long), computed on its first product -- one
    synchronisation, so never while the stream captures a graph (the product then runs unsplit) -- and kept with
    the matrix for as long as its ``indptr`` and ``indices`` are the same arrays (new values are fine; index arrays
    changed in place are not noticed)."""
    return _pattern(matrix).split


# ---------------------------------------------------------------- fused vector algebra of the phases
# Elementwise updates spell out the unfused rounding (__dmul_rn / __dadd_rn: no contraction into an FMA), so they
# give bit for bit what the separate array operations of CpuKernels give.
_ADVANCE_FACTOR = cupy.ElementwiseKernel(
    "float64 tau", "float64 d, float64 r", "d = __dmul_rn(tau, d); r = __dadd_rn(r, d);", "culorads_advance_factor")
_ADVANCE_VALUES = cupy.ElementwiseKernel(
    "raw float64 aw, float64 tau, float64 tau2", "float64 a",
    "a = __dadd_rn(a, __dadd_rn(__dmul_rn(tau, 2.0 * aw[2 * i]), __dmul_rn(tau2, aw[2 * i + 1])));",
    "culorads_advance_values")
_SHIFTED_RESIDUAL = cupy.ElementwiseKernel(
    "float64 a, float64 b, float64 lam, float64 rho", "float64 y",
    "y = __dsub_rn(__dmul_rn(rho, __dsub_rn(a, b)), lam);", "culorads_shifted_residual")
_GATHER_VALUES = cupy.ElementwiseKernel(
    "raw float64 t, I g, float64 weight", "float64 out", "out = weight * t[g];", "culorads_gather_values")
_GATHER_ROWS = cupy.ElementwiseKernel(
    "raw T v, raw I index, int64 width", "F out", "out = (F)v[index[i / width] * width + i % width];",
    "culorads_gather_rows")
_SCALE_ADD = cupy.ElementwiseKernel(
    "float64 a, float64 y, float64 b", "float64 x", "x = __dadd_rn(__dmul_rn(a, x), __dmul_rn(b, y));",
    "culorads_scale_add")
_CG_STEP = cupy.ElementwiseKernel(
    "raw float64 rr, raw float64 pap, float64 p, float64 ap", "float64 x, float64 r",
    "const double alpha = pap[0] > 0.0 ? rr[0] / pap[0] : 0.0;"  # p = 0: the solve was exact already
    "x = __dadd_rn(x, __dmul_rn(alpha, p)); r = __dsub_rn(r, __dmul_rn(alpha, ap));",
    "culorads_cg_step")
_CG_DIRECTION = cupy.ElementwiseKernel(
    "raw float64 rr_new, raw float64 rr, float64 r", "float64 p",
    "p = __dadd_rn(__dmul_rn(p, rr[0] > 0.0 ? rr_new[0] / rr[0] : 0.0), r);", "culorads_cg_direction")
# a thread per row: at 5 columns a warp's reads share cache lines (5e7 x 5 in 1.65 ms on an H100, einsum 46.6), at
# 34 columns they do not (1e7 x 34 in 11.2 ms, einsum 12.5); the split spheres sample at narrow ranks
_ROW_DOTS = cupy.ElementwiseKernel(
    "raw float64 u, raw float64 v, int64 width", "float64 out",
    "const long long base = i * width; double s = 0.0;"
    "for (long long j = 0; j < width; ++j) s += u[base + j] * v[base + j];"
    "out = s;", "culorads_row_dots")
_SUBTRACT_ALONG = cupy.ElementwiseKernel(
    "raw float64 c, float64 r", "float64 z", "z = z - c[0] * r;", "culorads_subtract_along")
_DIVIDE_BY = cupy.ElementwiseKernel(
    "float64 w, raw float64 norm", "float64 out", "out = w / norm[0];", "culorads_divide_by")

REDUCE_THREADS = 256  # the reduction kernels' block size (their warp_sums table assumes 8 warps)
REDUCE_BLOCKS_PER_SM = 2  # grid cap of the grid-stride reductions: enough loads in flight, few partial sums
LBFGS_MAX_VECTORS = 9  # G and up to 4 (s, y) pairs: the kernels take that many pointers
LINE_SEARCH_SCALARS = 9
SPHERE_SCALARS, SPHERE_SUMS = 28, 18  # entries written by sphere_line_search_products, distinct sums among them
_TICKETS: dict = {}  # device id -> the uint32 ticket of the last-block reductions (always left at zero)


def _ticket():
    device = cupy.cuda.Device()
    ticket = _TICKETS.get(device.id)
    if ticket is None:
        ticket = _TICKETS[device.id] = cupy.zeros(1, dtype=np.uint32)
    return ticket


@functools.cache
def _multiprocessors(device_id: int) -> int:
    return cupy.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"]


def _reduce_grid(length: int) -> int:
    cap = REDUCE_BLOCKS_PER_SM * _multiprocessors(cupy.cuda.Device().id)
    return max(1, min(-(-length // REDUCE_THREADS), cap))


def _vector_args(vectors):
    """The kernels' nine pointer arguments: the vectors, padded with the first one (never read)."""
    return tuple(vectors) + (vectors[0],) * (LBFGS_MAX_VECTORS - len(vectors))


def _checked_lbfgs_vectors(vectors):
    if len(vectors) > LBFGS_MAX_VECTORS:
        raise ValueError(f"the GPU L-BFGS keeps at most {(LBFGS_MAX_VECTORS - 1) // 2} pairs, "
                         f"got {(len(vectors) - 1) // 2}")
    if any(not v.flags.c_contiguous or v.shape != vectors[0].shape for v in vectors):
        raise ValueError("L-BFGS vectors must be C-contiguous arrays of one shape")
    return len(vectors), vectors[0].size


def _lbfgs_gram_pass(vectors, recurse: bool, coef, products):
    K, L = _checked_lbfgs_vectors(vectors)
    blocks = _reduce_grid(L)
    partial = cupy.empty(blocks * K * (K + 1) // 2)
    _kernel(f"lbfgs_gram_kernel<{K}, {'true' if recurse else 'false'}>")(
        (blocks,), (REDUCE_THREADS,), _vector_args(vectors) + (np.int64(L), partial, _ticket(), coef, products))


def lbfgs_recursion(upper, count: int, products):
    """:meth:`GpuKernels.lbfgs_recursion`: one thread on the device, nothing read back."""
    if not 1 <= count <= LBFGS_MAX_VECTORS or count % 2 == 0 or upper.size != count * (count + 1) // 2 \
            or products.size != 2 or upper.dtype != np.float64 or products.dtype != np.float64:
        raise ValueError("lbfgs_recursion: inconsistent arguments")
    coef = cupy.empty(count)
    _kernel(f"lbfgs_recursion_kernel<{count}>")((1,), (1,), (cupy.ascontiguousarray(upper), coef, products))
    return coef


def lbfgs_combine(vectors, coef):
    """sum_j coef[j] vectors[j] (``coef`` a device vector) in one pass."""
    K, L = _checked_lbfgs_vectors(vectors)
    out = cupy.empty_like(vectors[0])
    _kernel(f"lbfgs_combine_kernel<{K}>")((_reduce_grid(L),), (REDUCE_THREADS,), _vector_args(vectors) + (
        np.int64(L), coef, out))
    return out


def lbfgs_direction(G, pairs, products):
    """:meth:`GpuKernels.lbfgs_direction`: one Gram pass with the recursion in its epilogue, one combination."""
    vectors = [G] + [v for pair in pairs for v in pair]
    coef = cupy.empty(len(vectors))
    _lbfgs_gram_pass(vectors, True, coef, products)
    return lbfgs_combine(vectors, coef)


def lbfgs_gram(vectors, out):
    """:meth:`GpuKernels.lbfgs_gram`: the upper triangle of the vectors' Gram matrix, row by row, in one pass."""
    _lbfgs_gram_pass(vectors, False, out, out)  # without the recursion the kernel writes no products
    return out


def _line_search_pass(what: str, kernel: str, scalars: int, sums: int, AW, Avals, b, lam, R, D, CD, out,
                      constants=()):
    """Checks the arguments of a line search's scalars and launches ``kernel``: one reduction over the m constraints
    and the n r factor entries, ``sums`` partial sums per block, ``scalars`` entries written to ``out``;
    ``constants`` go between lam and m (the ALM line search's rho)."""
    m, L = Avals.size, R.size
    arrays = (AW, Avals, b, lam, R, D, CD, out)
    if any(not x.flags.c_contiguous or x.dtype != np.float64 for x in arrays) or AW.shape != (m, 2) \
            or D.size != L or CD.size != L or b.size != m or lam.size != m or out.size != scalars:
        raise ValueError(f"{what}: inconsistent or non-contiguous float64 arguments")
    blocks = _reduce_grid(max(m, L))
    partial = cupy.empty(blocks * sums)
    _kernel(kernel)((blocks,), (REDUCE_THREADS,), (
        AW, Avals, b, lam, *constants, np.int64(m), R, D, CD, np.int64(L), partial, _ticket(), out))
    return out


def line_search_products(AW, Avals, b, lam, rho, R, D, CD, out):
    """:meth:`GpuKernels.line_search_products` as one reduction kernel."""
    return _line_search_pass("line_search_products", "line_search_kernel", LINE_SEARCH_SCALARS, LINE_SEARCH_SCALARS,
                             AW, Avals, b, lam, R, D, CD, out, constants=(np.float64(rho),))


def sphere_line_search_products(AW, Avals, b, lam, R, D, CD, out):
    """:meth:`GpuKernels.sphere_line_search_products` as one reduction kernel."""
    return _line_search_pass("sphere_line_search_products", "sphere_line_search_kernel", SPHERE_SCALARS, SPHERE_SUMS,
                             AW, Avals, b, lam, R, D, CD, out)


def remove_normal(Z, R, size, normal, multiplier=None, weight=0.0):
    """:meth:`GpuKernels.remove_normal`: one reduction (with the multiplier's update in its epilogue), one update."""
    if any(not x.flags.c_contiguous or x.dtype != np.float64 for x in (Z, R, normal)) or Z.shape != R.shape \
            or normal.size != 1 or (multiplier is not None and multiplier.size != 1):
        raise ValueError("remove_normal: inconsistent or non-contiguous float64 arguments")
    blocks = _reduce_grid(Z.size)
    _kernel("sphere_normal_kernel")((blocks,), (REDUCE_THREADS,), (
        Z, R, np.int64(Z.size), np.float64(size), cupy.empty(blocks), _ticket(), normal, multiplier,
        np.float64(weight)))
    _SUBTRACT_ALONG(normal, R, Z)
    return Z


ROWS_PER_TILE = 8  # rows of V per tile of the Gram-Schmidt coefficients (sums held in registers per thread)
MAX_ROW_TILES = 1024  # tickets kept per device: V of up to 8192 rows
ROW_BLOCKS_PER_SM = 8  # the Gram-Schmidt kernels' grid cap: their loads in flight, not their partial sums, limit them
_ROW_TICKETS: dict = {}  # device id -> MAX_ROW_TILES uint32 tickets (always left at zero; never reallocated,
#                           as recorded graphs hold their address)


def _row_tickets():
    device_id = cupy.cuda.Device().id
    if device_id not in _ROW_TICKETS:
        _ROW_TICKETS[device_id] = cupy.zeros(MAX_ROW_TILES, dtype=np.uint32)
    return _ROW_TICKETS[device_id]


def _row_grid(n: int, tiles: int = 1) -> int:
    """Blocks per tile of the Gram-Schmidt kernels over vectors of n entries."""
    cap = ROW_BLOCKS_PER_SM * _multiprocessors(cupy.cuda.Device().id) // tiles
    return max(1, min(-(-n // REDUCE_THREADS), cap))


def rows_dot(V, k: int, w, out, stride: int = 1):
    """out[j * stride] = V[j] . w for j < k (V C-ordered, n columns; ``out`` a view whose pointer is entry 0)."""
    n = V.shape[1]
    tiles = -(-k // ROWS_PER_TILE)
    if tiles > MAX_ROW_TILES:
        raise ValueError(f"rows_dot: at most {MAX_ROW_TILES * ROWS_PER_TILE} rows, got {k}")
    blocks = _row_grid(n, tiles)
    partial = cupy.empty(tiles * blocks * ROWS_PER_TILE)
    _kernel(f"rows_dot_kernel<{ROWS_PER_TILE}>")((blocks, tiles), (REDUCE_THREADS,), (
        V, w, np.int64(n), np.int32(k), partial, _row_tickets(), out, np.int64(stride)))


def rows_subtract(V, k: int, c, w, stride: int = 1, add=None, add_stride: int = 1):
    """w -= V[:k]' c (c_j at c[j * stride]) in place; with ``add``, also add[j * add_stride] += c_j."""
    n = V.shape[1]
    _kernel("rows_subtract_kernel")((_row_grid(n),), (REDUCE_THREADS,), (
        V, c, np.int64(stride), np.int64(n), np.int32(k), w, add, np.int64(add_stride)))


def gram_schmidt_pass(V, k: int, w, coefficients, stride: int = 1, add=None, add_stride: int = 1):
    """One classical Gram-Schmidt pass against V[:k]: ``coefficients`` (entry j at j * stride) = V[:k] w, then
    w -= V[:k]' coefficients; with ``add``, add[j * add_stride] += coefficient j as well."""
    rows_dot(V, k, w, coefficients, stride)
    rows_subtract(V, k, coefficients, w, stride, add, add_stride)


def norm_into(w, out):
    """out[0] = ||w||_2 (deterministic)."""
    blocks = _reduce_grid(w.size)
    partial = cupy.empty(blocks)
    _kernel("norm_kernel")((blocks,), (REDUCE_THREADS,), (w, np.int64(w.size), partial, _ticket(), out))


def _row_arrays(X, *others):
    """Check that the factors of a row kernel are C-contiguous float64 device arrays of one 2-D shape."""
    for A in (X, *others):
        if not isinstance(A, cupy.ndarray) or A.dtype != np.float64 or not A.flags.c_contiguous \
                or A.shape != X.shape or A.ndim != 2:
            raise ValueError("the row kernels take C-contiguous float64 cupy arrays of one (n x r) shape")
    return X.shape


def row_dots(U, V):
    """:meth:`GpuKernels.row_dots` in one pass."""
    U, V = cupy.ascontiguousarray(U), cupy.ascontiguousarray(V)
    n, r = _row_arrays(U, V)
    out = cupy.empty(n)
    return _ROW_DOTS(U, V, np.int64(r), out) if n else out


def sphere_tangent(Z, X, squares, scale, out):
    """:meth:`GpuKernels.sphere_tangent`."""
    n, r = _row_arrays(Z, X, out)
    lanes = lanes_for_rank(r)
    _kernel(f"sphere_tangent_kernel<{lanes}>")(_grid(n, lanes), (_BLOCK,), (
        Z, X, squares, np.float64(scale), out, np.int64(n), np.int32(r)))
    return out


def sphere_retract(X, D, tau, roots, out):
    """:meth:`GpuKernels.sphere_retract`."""
    n, r = _row_arrays(X, D, out)
    lanes = lanes_for_rank(r)
    _kernel(f"sphere_retract_kernel<{lanes}>")(_grid(n, lanes), (_BLOCK,), (
        X, D, np.float64(tau), roots, out, np.int64(n), np.int32(r)))
    return out


# Lanczos cycles on blocks up to this order are replayed from a CUDA graph: below it a step's device time is a
# fraction of the host's ~0.2 ms of launches, above it the graph's own workspace is not worth holding
REPLAY_MAX_ROWS = 1 << 22
_CAPTURE_STREAMS: dict[int, cupy.cuda.Stream] = {}


class Recording:
    """Launches captured once into a CUDA graph, replayed by :meth:`launch`, with the private memory pool that
    served the allocations made while capturing: freed temporaries were reused in stream order there as in an
    eager run, and the pool, kept with the graph, reserves that memory for every replay."""

    def __init__(self, graph, pool):
        self.graph, self.pool = graph, pool

    @classmethod
    def of(cls, body) -> Recording | None:
        """The recording of ``body()``'s launches, captured on a side stream (blocking, so ordered with the
        default stream), or None where the capture failed (nothing of ``body`` has run then)."""
        _ticket(), _row_tickets()  # created outside: an array of the recording's pool would die with it
        stream = _CAPTURE_STREAMS.setdefault(cupy.cuda.Device().id, cupy.cuda.Stream())
        pool = cupy.cuda.MemoryPool()
        try:
            with stream, cupy.cuda.using_allocator(pool.malloc):
                stream.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)  # the pool may cudaMalloc
                try:
                    body()
                finally:
                    graph = stream.end_capture()
        except (cupy.cuda.runtime.CUDARuntimeError, NotImplementedError):  # CuPy's cuBLAS calls refuse capture
            return None
        return cls(graph, pool)

    def launch(self) -> None:
        self.graph.launch(cupy.cuda.get_current_stream())


class GpuKernels(RowSpace):
    """CuPy ``RawKernel`` implementations with the semantics of :class:`~cvxpy_culorads.backends.kernels.CpuKernels`.

    Factors are C-ordered float64 device arrays (converted when not); ``out`` arrays, when given, must be
    C-contiguous float64 of the right shape and must not alias an input. Calls are asynchronous on the current
    stream and never synchronise with the host (they can be captured in a CUDA graph), but for the first
    :meth:`csr_matmul` with a matrix of over ``SPLIT_MIN`` entries (:func:`row_split`).
    """

    max_lbfgs_memory = (LBFGS_MAX_VECTORS - 1) // 2
    xp = cupy

    @staticmethod
    def sym_sample(rows, cols, U, V, out=None):
        """w_p = (U[r].V[c] + U[c].V[r]) / 2 over the pattern; ``V is None`` means V = U (then w_p = U[r].U[c])."""
        return sym_sample(rows, cols, U, V, out)

    @staticmethod
    def sym_sample_pair(rows, cols, R, D, out=None):
        """Two columns at once: ``out[:, 0] = sym(R D')`` and ``out[:, 1] = D D'`` on the pattern."""
        return sym_sample_pair(rows, cols, R, D, out)

    @staticmethod
    def csr_matmul(matrix, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """``matrix @ V`` for a ``cupyx.scipy.sparse.csr_matrix`` and a C-ordered dense V (1-D V gives 1-D), or
        ``alpha * (matrix @ V) + beta * addend`` when an addend is given."""
        return csr_matmul(matrix, V, out, alpha=alpha, addend=addend, beta=beta)

    @staticmethod
    def prepare_products(matrix) -> None:
        """Splits ``matrix``'s long rows now (:func:`row_split`), so that a recorded graph of its products has them
        split too (the split is not computed while a graph is captured)."""
        _pattern(matrix)

    @staticmethod
    def lbfgs_pair(s, y):
        """The record of one L-BFGS pair: the pair itself (the weights come out of the Gram pass)."""
        return s, y

    @staticmethod
    def lbfgs_direction(G, pairs, products):
        """D = -H G by the two-loop recursion; writes (<G, G>, <D, G>) to ``products`` (at most 4 pairs)."""
        return lbfgs_direction(G, pairs, products)

    @staticmethod
    def lbfgs_gram(vectors, out):
        """The upper triangle of the Gram matrix of ``vectors`` (at most 9), row by row, in ``out``."""
        return lbfgs_gram(vectors, out)

    @staticmethod
    def lbfgs_recursion(upper, count, products):
        """The recursion's coefficients from a Gram matrix's upper triangle, on the device (at most 9 vectors)."""
        return lbfgs_recursion(upper, count, products)

    @staticmethod
    def lbfgs_combine(vectors, coefficients):
        """sum_j coefficients[j] vectors[j] (at most 9 vectors; ``coefficients`` a device vector)."""
        return lbfgs_combine(vectors, coefficients)

    @staticmethod
    def line_search_products(AW, Avals, b, lam, rho, R, D, CD, out):
        """The 9 scalars of the exact line search in ``out`` (see ``CpuKernels``)."""
        return line_search_products(AW, Avals, b, lam, rho, R, D, CD, out)

    @staticmethod
    def sphere_line_search_products(AW, Avals, b, lam, R, D, CD, out):
        """:meth:`CpuKernels.sphere_line_search_products` (28 scalars) in one pass."""
        return sphere_line_search_products(AW, Avals, b, lam, R, D, CD, out)

    @staticmethod
    def remove_normal(Z, R, size, normal, multiplier=None, weight=0.0):
        """:meth:`CpuKernels.remove_normal` without a synchronisation."""
        return remove_normal(Z, R, size, normal, multiplier, weight)

    @staticmethod
    def advance(R, D, tau, Avals, AW):
        """D *= tau (the step), R += D and Avals += tau (2 AW[:, 0]) + tau^2 AW[:, 1] in place; returns D."""
        _ADVANCE_FACTOR(tau, D, R)
        _ADVANCE_VALUES(AW, tau, tau * tau, Avals)
        return D

    @staticmethod
    def shifted_residual(Avals, b, lam, rho):
        """rho (Avals - b) - lam."""
        return _SHIFTED_RESIDUAL(Avals, b, lam, rho)

    @staticmethod
    def gather_values(t, gather, weight):
        """weight * t[gather]."""
        return _GATHER_VALUES(t, gather, float(weight))

    @staticmethod
    def scatter_add(out, index, values):
        """out[index] += values in place (atomic adds: repeated indices add up; CuPy 14 deprecates
        ``cupyx.scatter_add`` for this)."""
        cupy.add.at(out, index, values)

    @staticmethod
    def gather_rows(V, index, dtype):
        """The rows ``index`` of V (C-ordered) in a new array of ``dtype``, rounded in the same pass."""
        out = cupy.empty((index.size,) + V.shape[1:], dtype)
        if out.size:
            _GATHER_ROWS(cupy.ascontiguousarray(V), index, np.int64(out.size // index.size), out)
        return out

    @staticmethod
    def scale_add(x, a, y, b):
        """x = a x + b y in place (returns x)."""
        _SCALE_ADD(float(a), y, float(b), x)
        return x

    @staticmethod
    def cg_step(x, r, p, Ap, rr, pAp):
        """x += alpha p, r -= alpha Ap in place, with alpha = rr / pAp (0-d device arrays)."""
        _CG_STEP(rr, pAp, p, Ap, x, r)

    @staticmethod
    def cg_direction(p, r, rr_new, rr):
        """p = (rr_new / rr) p + r in place."""
        _CG_DIRECTION(rr_new, rr, r, p)

    @staticmethod
    def row_dots(U, V):
        """u_i . v_i for every row i (C-contiguous float64 of one n x r shape)."""
        return row_dots(U, V)

    @staticmethod
    def sphere_tangent(Z, X, squares, scale, out):
        """out_i = scale (z_i - (z_i . x_i / squares_i) x_i) row by row; ``out`` may be Z."""
        return sphere_tangent(Z, X, squares, scale, out)

    @staticmethod
    def sphere_retract(X, D, tau, roots, out):
        """out_i = roots_i (x_i + tau d_i) / |x_i + tau d_i| row by row (a zero row: roots_i e_1)."""
        return sphere_retract(X, D, tau, roots, out)

    @staticmethod
    def lanczos_cycle(step, first, stop, rows, deadline, recorded):
        """:meth:`CpuKernels.lanczos_cycle`, its launches captured into a :class:`Recording` (kept in the caller's
        dict ``recorded`` by (first, stop)) and replayed: one graph launch per cycle instead of ~10 launches per
        step from the host. The deadline is not consulted inside the cycle (the host could only read a clock that
        runs ahead of the device); blocks of more than ``REPLAY_MAX_ROWS`` rows run the steps directly."""
        if rows <= REPLAY_MAX_ROWS and (first, stop) not in recorded:
            recorded[first, stop] = Recording.of(lambda: [step(j) for j in range(first, stop)])
        recording = recorded.get((first, stop))
        if recording is None:
            for j in range(first, stop):
                step(j)
        else:
            recording.launch()
        return stop

    @staticmethod
    def lanczos_extend(basis, j, w, projection, complement):
        """:meth:`CpuKernels.lanczos_extend` in six launches of this module's kernels (no cuBLAS, whose CuPy
        wrappers refuse a capturing stream): through CuPy's array operations a Lanczos step took 0.44 ms at
        n = 1e4 and 2e4 on the H100, most of it host overhead; :meth:`lanczos_cycle` replays the launches."""
        n, k, stride = basis.shape[1], j + 1, projection.shape[1]
        if not (basis.flags.c_contiguous and projection.flags.c_contiguous and w.flags.c_contiguous
                and basis.dtype == projection.dtype == w.dtype == np.float64 and w.shape == (n,)):
            raise ValueError("lanczos_extend: basis, projection and w must be C-contiguous float64, w of length n")
        column = projection[:, j]
        gram_schmidt_pass(basis, k, w, column, stride)
        w = complement(w)
        gram_schmidt_pass(basis, k, w, cupy.empty(k), add=column, add_stride=stride)
        norm = projection[j + 1, j:j + 1]
        norm_into(w, norm)
        _DIVIDE_BY(w, norm, basis[j + 1])

    @staticmethod
    def basis_dot(V, k, w, out):
        """:meth:`CpuKernels.basis_dot` (one pass over V[:k], whatever k: cuBLAS' gemv spreads a few long dot
        products over few blocks)."""
        rows_dot(V, k, w, out)
        return out

    @staticmethod
    def basis_subtract(V, k, c, w):
        """:meth:`CpuKernels.basis_subtract`."""
        rows_subtract(V, k, c, w)
        return c

    @staticmethod
    def project_out(V, w):
        """w -= V' (V w) in place (returns w)."""
        gram_schmidt_pass(V, V.shape[0], w, cupy.empty(V.shape[0]))
        return w
