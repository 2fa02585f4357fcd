"""The GPU kernel set: :class:`GpuKernels`, the CuPy twin of :class:`~cvxpy_culorads.backends.cpu_kernels.CpuKernels`,
and the launchers of its sparse products, the sampled products on a pattern (:func:`sym_sample`,
:func:`sym_sample_pair`) and the row-major CSR x dense product (:func:`csr_matmul`, a kernel of the package's own
rather than CuPy's cuSPARSE wrapper: docs/decisions/gpu-kernels-csr-spmm.md). All three kernels give a *group* of T
lanes (T a power of two, 1..32, the smallest one with T >= min(r, 32)) to pattern entries or a matrix row and spread
the rank r over the lanes, so every access to a row of a C-ordered (n x r) factor is a contiguous, coalesced read
and a small rank doesn't leave most of a warp idle; partial sums are combined with warp shuffles restricted to the
group's lanes. The kernels are bound by the latency of dependent gathers (index -> factor row), so each lane issues
several independent gathers before it uses any: a sampling group handles E consecutive pattern entries at once
(``ENTRIES_SYM``, ``ENTRIES_UV``, ``ENTRIES_PAIR``), and ``csr_matmul`` loads a batch of (column, value) pairs of
its row cooperatively, broadcasts them with shuffles and keeps 4 to 8 gathers in flight per lane, each lane
accumulating C columns (C = 1, 2, 4, 8 from r; a rank above 32*C takes several passes over the row); a group does 4
consecutive rows when r >= 8, for L1 reuse. Element offsets into the factors are 32-bit when n * r < 2^31 (fewer
registers, more warps in flight). Index arrays may be int32 (preferred: half the index traffic) or int64; each has
its own instantiation, so no index array is converted on the fly. A CSR row much longer than the matrix's share per
lane group is cut into pieces that run as rows of their own (``row_split``). Nothing here synchronises with the
host, except that split's one-off planning on a matrix's first product: launches go to the current CuPy stream and
the argument checks read only shapes and dtypes. The CUDA sources are package data
(:mod:`~cvxpy_culorads.backends.gpu_sources`), compiled on first use (:mod:`~cvxpy_culorads.backends.gpu_launch`);
the phases' fused vector algebra is in :mod:`~cvxpy_culorads.backends.gpu_vector_algebra`.
"""
from __future__ import annotations

import dataclasses

import cupy
import cupyx.scipy.sparse
import numpy as np

from cvxpy_culorads.backends.gpu_launch import BLOCK, grid, kernel, lanes_for_rank
from cvxpy_culorads.backends.gpu_vector_algebra import (
    ADVANCE_FACTOR,
    ADVANCE_VALUES,
    CG_DIRECTION,
    CG_STEP,
    DIVIDE_BY,
    GATHER_ROWS,
    GATHER_VALUES,
    LBFGS_MAX_VECTORS,
    SCALE_ADD,
    SHIFTED_RESIDUAL,
    VALUE_TYPES,
    ensure_tickets,
    gram_schmidt_pass,
    lanczos_tridiagonals,
    lbfgs_combine,
    lbfgs_direction,
    lbfgs_gram,
    lbfgs_recursion,
    lbfgs_sphere_direction,
    line_search_products,
    norm_into,
    remove_normal,
    row_dots,
    rows_dot,
    rows_subtract,
    sphere_decrease,
    sphere_line_search_products,
    sphere_product,
    sphere_retract,
    sphere_tangent,
    wide_dot,
)
from cvxpy_culorads.backends.kernels import ALL_CAPABILITIES, RowSpace, symmetric_from_upper

__all__ = ["GpuKernels", "lanes_for_rank", "sym_sample", "sym_sample_pair", "csr_matmul", "lbfgs_direction",
           "line_search_products"]

_CHUNKS = (1, 2, 4, 8)  # columns per lane per pass of the CSR kernel (only with 32 lanes)
_CTYPES = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}


def _chunks_for_rank(r: int) -> int:
    """Columns per lane per pass for the 32-lane CSR kernel: the power of two >= ceil(r/32), at most 8."""
    need = -(-int(r) // 32)
    c = 1
    while c < min(need, _CHUNKS[-1]):
        c *= 2
    return c


# Tuning knobs: pattern entries per lane group in the sampling kernels (1 when a group is a single lane, r = 1), and
# for the CSR kernel the gathers in flight per lane (UNR * C) and the consecutive rows per lane group (4 for groups of
# >= 8 lanes and C = 1: more L1 reuse of the gathered rows; smaller groups lose parallelism instead). Why these
# values: docs/decisions/gpu-kernels-tuning-knobs.md.
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


def _check_out(out, shape: tuple, dtypes=(np.float64,)):
    if out is None:
        return cupy.empty(shape, dtype=np.float64)
    if not isinstance(out, cupy.ndarray) or out.dtype not in dtypes or tuple(out.shape) != shape \
            or not out.flags.c_contiguous:
        kinds = " or ".join(np.dtype(d).name for d in dtypes)
        raise ValueError(f"out must be a C-contiguous {kinds} cupy array of shape {shape}, got "
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
    if _nothing_to_launch(out, N, r):
        return out
    t = lanes_for_rank(r)
    e = _check_knob(entries or _entries_default(t, ENTRIES_SYM if sym else ENTRIES_UV), "entries")
    otype = _offset_type(U.shape[0], r, wide)
    fn = kernel(f"sym_sample_kernel<{ctype}, {otype}, {t}, {e}, {'true' if sym else 'false'}>")
    fn(grid(-(-N // e), t), (BLOCK,), (rows, cols, U, U if sym else V, out, np.int64(N), np.int32(r)))
    return out


def _nothing_to_launch(out, N: int, r: int) -> bool:
    """Whether a sampling kernel has nothing to do: no entries, or rank 0 (then the samples are zero, written)."""
    if N and not r:
        out.fill(0.0)
    return not (N and r)


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
    if _nothing_to_launch(out, N, r):
        return out
    t = lanes_for_rank(r)
    e = _check_knob(entries or _entries_default(t, ENTRIES_PAIR), "entries")
    fn = kernel(f"sym_sample_pair_kernel<{ctype}, {_offset_type(R.shape[0], r, wide)}, {t}, {e}>")
    fn(grid(-(-N // e), t), (BLOCK,), (rows, cols, R, D, out, np.int64(N), np.int32(r)))
    return out


def csr_matmul(matrix, V, out=None, *, alpha=1.0, addend=None, beta=0.0, loads=None, rows=None, wide=None):
    """:meth:`GpuKernels.csr_matmul` with its tuning knobs.

    ``loads``: gathers in flight per lane (UNR * C; 1..16); ``rows``: consecutive rows per lane group (1..8);
    ``wide``: as for :func:`sym_sample`. Long rows are split (:func:`row_split`). V may be float32 (a halo, a factor
    in mixed precision); the sums are float64, returned in float64 without ``out`` and rounded once into a float32
    ``out`` (a float32 V's product in mixed precision).
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
    out = _check_out(out, (m,) if vector else (m, r), (np.float64, np.float32) if V2.dtype == np.float32
                     else (np.float64,))
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
    name = f"csr_matmul_kernel<{pattern.ctype}, {_offset_type(ncols, r, wide)}, {VALUE_TYPES[V2.dtype]}, "

    def launch(starts, ends, target, combine, per_group):
        count = starts.size
        template = f"{VALUE_TYPES[target.dtype]}, {t}, {c}, {unr}, {per_group}, {'true' if combine else 'false'}>"
        kernel(name + template)(
            grid(-(-count // per_group), t), (BLOCK,), (starts, ends, pattern.indices, data, V2, target,
                                                        np.int64(count), np.int32(r), np.float64(alpha),
                                                        np.float64(beta), addend if combine else target))

    launch(pattern.starts, pattern.ends, out, add, rpg)  # split rows are empty here: 0, or beta * addend
    split = pattern.split
    if split is not None:
        pieces = cupy.empty((split.piece_starts.size, r))
        launch(split.piece_starts, split.piece_ends, pieces, False, 1)  # a group per piece: all run at once
        partial = csr_matmul(split.gather, pieces)
        count = split.rows.size * r
        kernel(f"add_rows_kernel<{pattern.ctype}, {VALUE_TYPES[out.dtype]}>")(
            (-(-count // BLOCK),), (BLOCK,), (partial, split.rows, np.int64(count), np.int32(r),
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


# Lanczos cycles on blocks up to this order are replayed from a CUDA graph: below it a step's device time is a
# fraction of the host's time to launch it, above it the graph's own workspace is not worth holding
# (docs/decisions/gpu-kernels-lanczos-replay.md)
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
        ensure_tickets()  # created outside: an array of the recording's pool would die with it
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
    """CuPy ``RawKernel`` implementations with the semantics of
    :class:`~cvxpy_culorads.backends.cpu_kernels.CpuKernels`.

    Factors are C-ordered float64 device arrays (converted when not), or float32 where the Riemannian phase's kernels
    take them in mixed precision (the sparse product, the L-BFGS passes, the sphere kernels, ``scale_add`` and the
    inner products: float32 stored, float64 sums); ``out`` arrays, when given, must be C-contiguous float64 (or
    float32 where a method says so) of the right shape and must not alias an input. Calls are asynchronous on the
    current stream and never synchronise with the host (they can be captured in a CUDA graph), but for the first
    :meth:`csr_matmul` with a matrix of over ``SPLIT_MIN`` entries (:func:`row_split`) and the host results
    (:meth:`inner`, :meth:`norm`, :meth:`gram`)."""

    capabilities = ALL_CAPABILITIES
    max_lbfgs_memory = (LBFGS_MAX_VECTORS - 1) // 2
    xp = cupy

    @staticmethod
    def inner(x, y) -> float:
        """<x, y>, summed in float64 (synchronises): a float32 array's by :func:`wide_dot`, as cuBLAS would sum it in
        single precision."""
        return float(cupy.vdot(x, y)) if x.dtype == y.dtype == np.float64 else float(wide_dot(x, y))

    def norm(self, x) -> float:
        """||x||_2, summed in float64 (synchronises)."""
        return float(cupy.linalg.norm(x)) if x.dtype == np.float64 else float(cupy.sqrt(wide_dot(x, x)))

    @staticmethod
    def gram(vectors) -> np.ndarray:
        """The Gram matrix of ``vectors`` (at most 9 arrays of one shape) on the host, in one pass summed in
        float64."""
        count = len(vectors)
        return symmetric_from_upper(lbfgs_gram(vectors, cupy.empty(count * (count + 1) // 2)).get(), count)

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
        ``alpha * (matrix @ V) + beta * addend`` when an addend is given; float64 sums, rounded into a float32 ``out``
        where V is float32 (:func:`csr_matmul`)."""
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

    # the L-BFGS step's and the line search's kernels (``gpu_vector_algebra``)
    lbfgs_direction = staticmethod(lbfgs_direction)
    lbfgs_sphere_direction = staticmethod(lbfgs_sphere_direction)
    lbfgs_gram = staticmethod(lbfgs_gram)
    lbfgs_recursion = staticmethod(lbfgs_recursion)
    lbfgs_combine = staticmethod(lbfgs_combine)
    line_search_products = staticmethod(line_search_products)

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
        ADVANCE_FACTOR(tau, D, R)
        ADVANCE_VALUES(AW, tau, tau * tau, Avals)
        return D

    @staticmethod
    def shifted_residual(Avals, b, lam, rho):
        """rho (Avals - b) - lam."""
        return SHIFTED_RESIDUAL(Avals, b, lam, rho)

    @staticmethod
    def gather_values(t, gather, weight):
        """weight * t[gather]."""
        return GATHER_VALUES(t, gather, float(weight))

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
            GATHER_ROWS(cupy.ascontiguousarray(V), index, np.int64(out.size // index.size), out)
        return out

    @staticmethod
    def scale_add(x, a, y, b):
        """x = a x + b y in place (returns x)."""
        SCALE_ADD(float(a), y, float(b), x)
        return x

    @staticmethod
    def cg_step(x, r, p, Ap, rr, pAp):
        """x += alpha p, r -= alpha Ap in place, with alpha = rr / pAp (0-d device arrays)."""
        CG_STEP(rr, pAp, p, Ap, x, r)

    @staticmethod
    def cg_direction(p, r, rr_new, rr):
        """p = (rr_new / rr) p + r in place."""
        CG_DIRECTION(rr_new, rr, r, p)

    @staticmethod
    def row_dots(U, V):
        """u_i . v_i for every row i (C-contiguous float64 of one n x r shape)."""
        return row_dots(U, V)

    @staticmethod
    def sphere_tangent(Z, X, squares, scale, out):
        """out_i = scale (z_i - (z_i . x_i / squares_i) x_i) row by row (Z, X and out of one type, float64 or
        float32); ``out`` may be Z."""
        return sphere_tangent(Z, X, squares, scale, out)

    @staticmethod
    def sphere_retract(X, D, tau, roots, out):
        """out_i = roots_i (x_i + tau d_i) / |x_i + tau d_i| row by row (a zero row: roots_i e_1); X and D of one
        type, out float64 or float32 (a factor projected into the other precision)."""
        return sphere_retract(X, D, tau, roots, out)

    @staticmethod
    def sphere_decrease(R_new, R, CR_new, CR, squares) -> np.ndarray:
        """:meth:`CpuKernels.sphere_decrease` in one pass (synchronises: the host array of three sums)."""
        return sphere_decrease(R_new, R, CR_new, CR, squares).get()

    @staticmethod
    def sphere_product_gradient(matrix, R, squares, scale, gradient, product=None) -> float:
        """:meth:`CpuKernels.sphere_product_gradient` in one pass (synchronises: the objective). A group of lanes walks
        each row of the matrix alone, so a matrix with rows long enough for :func:`csr_matmul` to split them (a hub
        joined to every vertex: Mittelmann's image problems, 3-6 times slower per solve fused) takes the split
        product, then the rows' dots and the projection, in three passes as the unfused step does."""
        if row_split(matrix) is not None:
            CR = csr_matmul(matrix, R, cupy.empty_like(R) if product is None else product)
            objective = GpuKernels.inner(R, CR)
            sphere_tangent(CR, R, squares, scale, gradient)
            return objective
        indptr, indices, ctype = _index_pair(matrix.indptr, matrix.indices)
        data = cupy.ascontiguousarray(matrix.data, dtype=np.float64)
        return float(sphere_product(indptr, indices, ctype, data, R, squares, scale, gradient, product)[0])

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
        """:meth:`CpuKernels.lanczos_extend` in six launches of the package's own kernels (no cuBLAS, whose CuPy
        wrappers refuse a capturing stream), so that :meth:`lanczos_cycle` can replay them
        (docs/decisions/gpu-kernels-lanczos-replay.md)."""
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
        DIVIDE_BY(w, norm, basis[j + 1])

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
    def lanczos_tridiagonals(stack, start, steps, breakdown):
        """:meth:`CpuKernels.lanczos_tridiagonals` in one launch (a block of threads per matrix)."""
        return lanczos_tridiagonals(stack, start, steps, breakdown)

    @staticmethod
    def project_out(V, w):
        """w -= V' (V w) in place (returns w)."""
        gram_schmidt_pass(V, V.shape[0], w, cupy.empty(V.shape[0]))
        return w
