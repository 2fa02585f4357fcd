"""CuPy ``RawKernel`` twins of :class:`~cvxpy_culorads.kernels.CpuKernels` (the hot GPU kernels).

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
converted on the fly. Nothing here synchronises with the host: launches go to the current CuPy stream and the
argument checks read only shapes and dtypes.
"""
from __future__ import annotations

import numpy as np

import cupy

__all__ = ["GpuKernels", "lanes_for_rank", "sym_sample", "sym_sample_pair", "csr_matmul"]

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
// share more of their neighbours' rows in L1 when the matrix has locality).
template<typename I, typename O, int T, int C, int UNR, int RPG>
__global__ void csr_matmul_kernel(const I* __restrict__ indptr, const I* __restrict__ indices,
                                  const double* __restrict__ data, const double* __restrict__ V,
                                  double* __restrict__ out, long long m, int r) {
    constexpr int B = T > UNR ? T : UNR;
    constexpr int PER = B / T;
    const long long group = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    const unsigned mask = group_mask<T>();
#pragma unroll 1
    for (int rr = 0; rr < RPG; ++rr) {
    const long long row = group * RPG + rr;
    if (row >= m) return;  // uniform over the group
    const long long start = indptr[row], end = indptr[row + 1];
    double* __restrict__ orow = out + row * (long long)r;
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
                        x[u][j] = (t < cnt && k < r) ? V[c + k] : 0.0;
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
            if (k < r) orow[k] = acc[j];
        }
    }
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


def csr_matmul(matrix, V, out=None, *, loads=None, rows=None, wide=None):
    """:meth:`GpuKernels.csr_matmul` with its tuning knobs.

    ``loads``: gathers in flight per lane (UNR * C; 1..16); ``rows``: consecutive rows per lane group (1..8);
    ``wide``: as for :func:`sym_sample`.
    """
    m, ncols = matrix.shape
    V = cupy.asarray(V)
    vector = V.ndim == 1
    V2 = _factor(V.reshape(-1, 1) if vector else V, "V")
    if V2.shape[0] != ncols:
        raise ValueError(f"dimension mismatch: matrix is {matrix.shape}, V is {V.shape}")
    r = V2.shape[1]
    out = _check_out(out, (m,) if vector else (m, r))
    if m == 0 or r == 0:
        return out
    indptr, indices, ctype = _index_pair(matrix.indptr, matrix.indices)
    data = cupy.ascontiguousarray(matrix.data, dtype=np.float64)
    t = lanes_for_rank(r)
    c = _chunks_for_rank(r) if t == 32 else 1
    default_loads, default_rows = _csr_defaults(t, c)
    unr = max(1, _check_knob(loads or default_loads, "loads") // c)
    rpg = _check_knob(rows or default_rows, "rows")
    fn = _kernel(f"csr_matmul_kernel<{ctype}, {_offset_type(ncols, r, wide)}, {t}, {c}, {unr}, {rpg}>")
    fn(_grid(-(-m // rpg), t), (_BLOCK,), (indptr, indices, data, V2, out, np.int64(m), np.int32(r)))
    return out


class GpuKernels:
    """CuPy ``RawKernel`` implementations with the semantics of :class:`~cvxpy_culorads.kernels.CpuKernels`.

    Factors are C-ordered float64 device arrays (converted when not); ``out`` arrays, when given, must be
    C-contiguous float64 of the right shape and must not alias an input. Calls are asynchronous on the current
    stream and never synchronise with the host (they can be captured in a CUDA graph).
    """

    @staticmethod
    def sym_sample(rows, cols, U, V, out=None):
        """w_p = (U[r].V[c] + U[c].V[r]) / 2 over the pattern; ``V is None`` means V = U (then w_p = U[r].U[c])."""
        return sym_sample(rows, cols, U, V, out)

    @staticmethod
    def sym_sample_pair(rows, cols, R, D, out=None):
        """Two columns at once: ``out[:, 0] = sym(R D')`` and ``out[:, 1] = D D'`` on the pattern."""
        return sym_sample_pair(rows, cols, R, D, out)

    @staticmethod
    def csr_matmul(matrix, V, out=None):
        """``matrix @ V`` for a ``cupyx.scipy.sparse.csr_matrix`` and a C-ordered dense V (1-D V gives 1-D)."""
        return csr_matmul(matrix, V, out)
