"""Several devices: the stacked row space split by rows into shards, one device each, driven from one process.

Shard s holds the rows [bounds[s], bounds[s + 1]) of every row-space array (the factor R, the gradient, the L-BFGS
pairs, the Lanczos vectors): a :class:`ShardedRows` is the list of those parts, each on its shard's device. The
phases and the eigensolver are the single-device code: they touch row-space arrays only through the kernel set and
the operator, and :class:`ShardedKernels` implements that contract over shards, so the algorithm is written once
and one device is the same code with no communication. What crosses devices:

- the *halo*: C V needs, on shard s, the rows of V that C's rows in s reference elsewhere; each shard keeps its rows
  of C as two CSR matrices, over its own rows and over its halo (:class:`ShardedMatrix`), and multiplies its own rows
  while the halo rows are in transit (on GPUs, NCCL on a side stream), then adds the halo's part;
- *reductions*: inner products and the Gram-Schmidt coefficients of Lanczos are sums of per-shard parts;
- the constraint space (multipliers, A(X), b) lives on the first device, whole: on a product of spheres
  (:class:`ShardedSpheresOperator`, the Riemannian phase) only the measurements between phase runs touch it; with any
  other constraints on the one block (:class:`ShardedBlockOperator`, phases I and II) every product sends each shard
  the multipliers of the constraints it touches and brings back its partial sums of A(X).

Communication goes through a :class:`Communicator`: :class:`NcclCommunicator` on GPUs (NCCL's all-reduce and
grouped send/receive from CuPy, one communicator per device, all driven from this process) and
:class:`InProcessCommunicator` where one device holds every shard: ``device="cpu"``, the shards NumPy arrays of one
process (the same splitting and the same halo exchange, with in-process copies and sums, so that CI tests the
partitioned logic without GPUs), or the shards simulated on one GPU (the tests' check of the GPU kernels on shards).

The partition is contiguous in the problem's row order, with bounds that balance rows plus nonzeros of C; a graph
numbered along a locality-preserving order (the benchmarks' Z-order) keeps most of C inside the shards. Each shard
builds its rows of C on its own device from the problem's coordinates (:func:`shard_matrices`).
"""
from __future__ import annotations

import contextlib
import math
import threading
import weakref
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from cvxpy_culorads.backends.backend import Backend, copy_to_host, gpu_available, select_backend
from cvxpy_culorads.backends.kernels import (
    LINE_SEARCH_ROW_SCALARS,
    CpuKernels,
    hashed_uniform,
    kernels_for,
    symmetric_from_upper,
)
from cvxpy_culorads.hostpasses import abs_median, holds_anywhere, map_chunks, on_own_threads, strictly_increasing
from cvxpy_culorads.operators.compressed import (
    absolute_row_sums,
    constraint_squares,
    coordinate_csr,
    gershgorin_radii,
    index_type_for,
    median_row_norm,
    sorted_unique,
)
from cvxpy_culorads.phases.state import initial_rows, widen_factor
from cvxpy_culorads.problem.sdp import BlockCoefficients, SDPProblem

__all__ = ["SHARDED_PROBLEMS_MESSAGE", "RowOrder", "Shards", "ShardedRows", "ShardedMatrix", "HaloPart",
           "ShardedKernels", "ShardedBackend", "ShardedSpheresOperator", "ShardedBlockOperator", "position_owner",
           "InProcessCommunicator", "NcclCommunicator", "balanced_bounds", "halo_share", "coordinate_halo_share",
           "sharded_backend", "simulated_backend"]

SHARDED_PROBLEMS_MESSAGE = ("devices > 1 solves, for now, problems of one PSD block without nonnegative variables "
                            "or low-rank terms (MaxCut, matrix completion, diag(X) == d)")


HALO_SHARE_KEPT = 0.1  # shard_order="auto" keeps the given order while each shard's halo is within this share of it
COMPRESSED_HALO_ROWS = 0.5  # a halo part keeps only its rows with entries when they are fewer (``HaloPart``)
BUILD_CHUNK = 1 << 25  # coordinates (24 bytes each) moved to a device at a time while its shard's rows are picked
BOUND_BUCKETS = 1 << 12  # about as many runs of rows as the shards' bounds are balanced over (``symmetric_bounds``)
BOUND_SAMPLE = 1 << 24  # at most as many entries of each coordinate list as they are counted on


def shard_bounds(row_counts, k: int) -> np.ndarray:
    """The bounds of k shards of the rows of a matrix with ``row_counts`` entries per row: rows plus nonzeros
    balanced."""
    return balanced_bounds(1.0 + np.asarray(row_counts), k)


def halo_of(C, lo: int, hi: int) -> np.ndarray:
    """The rows outside [lo, hi) that the CSR matrix ``C``'s rows lo..hi-1 reference, ascending."""
    columns = C.indices[C.indptr[lo]:C.indptr[hi]]
    return _referenced(columns[(columns < lo) | (columns >= hi)], C.shape[0])


def _referenced(columns, n: int, xp=np):
    """The distinct entries of ``columns`` (indices below n, an array of ``xp``), ascending: a flag per row,
    O(n + entries)."""
    flags = xp.zeros(n, dtype=bool)
    flags[columns] = True
    return xp.flatnonzero(flags)


def halo_share(C, k: int) -> float:
    """The largest share, over k shards of ``C``'s rows (:func:`shard_bounds`), of a shard's halo in its rows."""
    bounds = shard_bounds(np.diff(C.indptr), k)
    return max(halo_of(C, lo, hi).size / max(hi - lo, 1) for lo, hi in zip(bounds[:-1], bounds[1:]))


def coordinate_halo_share(coords, n: int, k: int) -> float:
    """:func:`halo_share` of the symmetric n x n matrix whose lower triangle has the unique host coordinates
    ``coords`` (rows, cols, vals), from the coordinates: a flag per shard and row marks the rows each shard
    references elsewhere, set in chunks on the host's pool of threads, and no matrix is built (the check of a given
    order that ``shard_order="auto"`` keeps, as a geometric or grid graph's numbering is, costs that only)."""
    rows, cols, _ = coords
    bounds = symmetric_bounds([(rows, cols)], n, k)
    referenced = np.zeros((k, n), dtype=bool)

    def mark(s):
        r, c = rows[s], cols[s]
        shard_of_r, shard_of_c = (np.searchsorted(bounds, x, side="right") - 1 for x in (r, c))
        across = shard_of_r != shard_of_c
        referenced[shard_of_r[across], c[across]] = True  # the same flag set from several threads is still set
        referenced[shard_of_c[across], r[across]] = True
    map_chunks(mark, rows.size)
    return max(referenced[s].sum() / max(hi - lo, 1) for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])))


@dataclass(frozen=True)
class RowOrder:
    """A renumbering of a one-block problem's rows that keeps more of C inside the shards (``Settings.shard_order``):
    row p of the renumbered problem is row ``order[p]`` of the given one. Reverse Cuthill-McKee on C's pattern (O(nnz)
    on the host) puts neighbours at nearby numbers, so that contiguous shards hold them together: on a geometric
    graph numbered at random it shrinks a shard's halo from all its rows to about one per cent, on a random graph
    (no locality to find) hardly at all (91 % to 82 % of a shard's rows at n = 1e6). The renumbered problem has the
    same constraints, multipliers and optimal value; :meth:`restore` maps its factor back."""

    order: np.ndarray
    halo_before: float  # the largest shard's halo over its rows, in the given order and in this one
    halo_after: float

    @classmethod
    def of(cls, problem: SDPProblem, settings) -> RowOrder | None:
        """The renumbering a sharded solve of ``problem`` gets, or None: one device, ``shard_order="given"``, a problem
        the sharded operators do not take (they say why), one with constraints off the diagonal (the order is chosen
        from C's pattern alone), or, with ``"auto"``, a given order whose halo is already within ``HALO_SHARE_KEPT``,
        or one whose halo a renumbering would not halve (predicted from one breadth-first search before reverse
        Cuthill-McKee runs, then checked on its result). The given order's halo is measured on the coordinates
        (:func:`coordinate_halo_share`); the later checks build C on the host; the shards build their own parts on
        their devices (:func:`shard_matrices`)."""
        k = settings.device_count
        if k <= 1 or settings.shard_order == "given" or problem.num_blocks != 1 or problem.n_lp \
                or problem.has_low_rank or problem.block_sizes[0] <= k:
            return None
        coeff = problem.A_coords[0]
        if holds_anywhere(lambda s: coeff.row[s] != coeff.col[s], coeff.row.size):
            return None
        before = coordinate_halo_share(problem.C_coords[0], problem.block_sizes[0], k)
        auto = settings.shard_order == "auto"
        if auto and before <= HALO_SHARE_KEPT:
            return None
        C = problem.objective_matrix(0)
        if auto and _predicted_halo_share(C, k, before / 2) > before / 2:
            return None
        order = reverse_cuthill_mckee(C, symmetric_mode=True).astype(np.int64)
        renumbered = _renumbered(C, _inverse(order))
        del C
        after = halo_share(renumbered, k)
        if auto and after > before / 2:
            return None
        return cls(order, before, after)

    def apply(self, problem: SDPProblem) -> SDPProblem:
        """The problem with its rows renumbered."""
        inverse = _inverse(self.order)
        (rows, cols, vals), coeff = problem.C_coords[0], problem.A_coords[0]
        return SDPProblem(problem.b, [(inverse[rows], inverse[cols], vals)],
                          [BlockCoefficients(coeff.con, inverse[coeff.row], inverse[coeff.col], coeff.val)],
                          block_sizes=problem.block_sizes, name=problem.name)

    def restore(self, factors) -> tuple[np.ndarray, ...]:
        """The given problem's factor from the renumbered one's."""
        return (factors[0][_inverse(self.order)],)

    def describe(self) -> str:
        return (f"rows renumbered for the shards (reverse Cuthill-McKee): the largest halo fell from "
                f"{self.halo_before:.1%} to {self.halo_after:.1%} of its shard's rows")


def _predicted_halo_share(C, k: int, enough: float = math.inf) -> float:
    """What a renumbering along breadth-first levels can make of a shard's halo, from one breadth-first search (a
    tenth of reverse Cuthill-McKee's time): a cut between contiguous shards of such a numbering leaves at most the
    two levels beside it in the halo, so twice the largest level over a shard's rows. A random graph (levels of
    ~40 % of n) has no locality to find; a geometric one has levels of ~sqrt(n). The search stops at the first level
    whose prediction exceeds ``enough`` (the caller's answer is known then; on a random graph that level comes after
    about a sixth of the rows: 0.2 s instead of 2.1 s at n = 1e7 on two cores) and returns that prediction; run to its
    end, it returns 0 when it reached less than half of the rows (several components: only reverse Cuthill-McKee
    itself can tell)."""
    n = C.shape[0]
    indptr, indices = C.indptr, C.indices
    seen = np.zeros(n, dtype=bool)
    slot = np.empty(n, dtype=np.int64)  # a scratch index per row, to keep one of each row's repeats in a level
    seen[0] = True
    level, reached, largest = np.zeros(1, dtype=np.int64), 1, 1
    while level.size:
        starts = indptr[level]
        counts = indptr[level + 1] - starts
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        neighbours = indices[np.repeat(starts, counts) + within]
        fresh = neighbours[~seen[neighbours]]
        slot[fresh] = np.arange(fresh.size)  # repeats of a row: the last write wins, and only that one is kept
        level = fresh[slot[fresh] == np.arange(fresh.size)]
        seen[level] = True
        reached += level.size
        largest = max(largest, level.size)
        if 2.0 * largest * k / n > enough:
            return 2.0 * largest * k / n
    return 0.0 if 2 * reached < n else 2.0 * largest * k / n


def symmetric_bounds(pairs, n: int, k: int, buckets: int = BOUND_BUCKETS, sample: int = BOUND_SAMPLE) -> np.ndarray:
    """The bounds of k shards of the rows of the sum of the symmetric n x n matrices whose lower triangles have the
    host coordinates ``pairs`` [(rows, cols), ...] (an entry counts in its row and, off the diagonal, in its column's),
    balanced as :func:`shard_bounds` balances them (rows plus entries), without a count per row: the entries of an
    evenly strided sample of at most ``sample`` of each list are counted in runs of 2^j consecutive rows (about
    ``buckets`` runs), in chunks on the host's pool of threads, and a bound is interpolated in the run it falls in.
    Exact where every entry is sampled and every run is one row. (Whole-array bincounts took 6 s of one core at
    n = 1e8; all 2·10^8 entries counted in chunks, 1.1-1.4 s beside the set-up's other host passes; counted on the
    GPUs, the coordinates' transfers took 0.8 s. A bound off by a run or by the sample's error moves a few
    thousandths of a shard's work.)"""
    shift = max(0, (max(n, 1) - 1).bit_length() - max(buckets, 1).bit_length() + 1)
    runs = ((max(n, 1) - 1) >> shift) + 1
    starts = np.minimum(np.arange(runs + 1, dtype=np.int64) << shift, n)
    past = runs << shift  # the diagonal's columns go to a bin past the last: counted once, in their rows
    counts = np.zeros(runs, np.int64)
    for rows, cols in pairs:
        stride = max(1, -(-rows.size // max(sample, 1)))
        sampled_rows, sampled_cols = rows[::stride], cols[::stride]

        def count(s, rows=sampled_rows, cols=sampled_cols):
            r, c = rows[s], cols[s]
            return (np.bincount(r >> shift, minlength=runs + 1)[:runs]
                    + np.bincount(np.where(r == c, past, c) >> shift, minlength=runs + 1)[:runs])
        counts += stride * sum(map_chunks(count, sampled_rows.size), np.zeros(runs, np.int64))
    cumulative = starts + np.concatenate([[0], np.cumsum(counts)])  # rows and entries before each run
    bounds = [0]
    for target in float(cumulative[-1]) * np.arange(1, k) / k:
        run = int(np.searchsorted(cumulative, target, side="left"))  # the first run start at or past the target
        if run == 0:
            bounds.append(0)
            continue
        lo, hi = int(starts[run - 1]), int(starts[run])
        share = (target - cumulative[run - 1]) / (cumulative[run] - cumulative[run - 1])
        bounds.append(min(hi, lo + max(1, math.ceil(share * (hi - lo)))))
    return np.array(bounds + [n], dtype=np.int64)


@dataclass(frozen=True)
class HaloPart:
    """A shard's entries in its halo columns: ``matrix``, a CSR matrix over the halo buffer's columns, holds the
    shard's rows ``rows`` (local numbers, ascending, on the shard's device), or every row of the shard when ``rows``
    is None. Kept to the rows that have a halo entry when they are fewer than ``COMPRESSED_HALO_ROWS`` of the
    shard's: the product then reads and writes only those rows of its output, where the whole form walks every row
    and reads and writes the output once more (on a 10^4 x 10^4 torus cut in two, 2·10^4 rows of 5·10^7 have a
    halo entry; on a random graph of degree 4, 94 %)."""

    matrix: object
    rows: object = None

    def add_product(self, kernels, buffer, out, alpha=1.0) -> None:
        """out += alpha * (these entries) @ buffer, ``buffer`` holding the halo rows."""
        if self.rows is None:
            kernels.csr_matmul(self.matrix, buffer, out=out, alpha=alpha, addend=out, beta=1.0)
        else:
            out[self.rows] = kernels.csr_matmul(self.matrix, buffer, alpha=alpha, addend=out[self.rows], beta=1.0)

    def absolute_row_sums(self, size: int, xp):
        """sum_j |M_ij| over the halo columns, for each of the shard's ``size`` rows."""
        sums = absolute_row_sums(self.matrix, xp)
        if self.rows is None:
            return sums
        whole = xp.zeros(size)
        whole[self.rows] = sums
        return whole


def shard_matrices(backend: Backend, coords, n: int, lo: int, hi: int):
    """Rows lo..hi-1 of the symmetric n x n matrix whose lower triangle has the unique host coordinates ``coords``
    (rows, cols, vals), built on the current device: (their own columns, their halo columns, the halo rows), a CSR
    matrix of ``backend`` over the local numbering of [lo, hi), a :class:`HaloPart` over the halo rows (every outside
    row these rows reference, ascending, on the host; None for no halo), each row's entries by column. Only the
    entries these rows are made of travel (:func:`_shard_pieces`), in chunks of ``BUILD_CHUNK``, so that neither the
    host nor any device holds the whole matrix: at n = 1e8 building it on the host and splitting it there took 57 s
    of set-up, this 16.5 s (2 x H100)."""
    xp = backend.xp
    local, column, value = [], [], []
    for piece in _shard_pieces(coords, lo, hi):
        r, c, v = (xp.asarray(a) for a in piece)
        lower = (r >= lo) & (r < hi)  # entries of the lower triangle in these rows, and the mirrors of the others
        mirrored = (c >= lo) & (c < hi) & (r != c)
        local += [r[lower] - lo, c[mirrored] - lo]
        column += [c[lower], r[mirrored]]
        value += [v[lower], v[mirrored]]
    local, column, value = (xp.concatenate(parts) if parts else xp.empty(0, dtype)
                            for parts, dtype in ((local, np.int64), (column, np.int64), (value, np.float64)))
    return own_and_halo(backend, local, column, value, n, lo, hi)


def own_and_halo(backend: Backend, local, column, value, n: int, lo: int, hi: int):
    """The unique entries (local row, global column, value) of rows lo..hi-1 of an n x n matrix, arrays of
    ``backend`` on the current device, as :func:`shard_matrices` returns them: (own columns, :class:`HaloPart` or
    None, the halo rows on the host)."""
    xp = backend.xp
    size = hi - lo
    inside = (column >= lo) & (column < hi)
    outside = ~inside
    across_columns = column[outside]
    halo = _referenced(across_columns, n, xp)
    index_type = index_type_for(max(size, halo.size, value.size))
    position = xp.empty(n, index_type)  # a halo row's place in the halo buffer
    position[halo] = xp.arange(halo.size, dtype=index_type)
    own = coordinate_csr(backend, local[inside], column[inside] - lo, value[inside], (size, size), index_type)
    if not halo.size:
        return own, None, backend.to_host(halo)
    across_rows, touched = local[outside], None
    with_halo = _referenced(across_rows, size, xp)
    if with_halo.size < COMPRESSED_HALO_ROWS * size:
        touched = with_halo.astype(index_type)
        row_position = xp.empty(size, index_type)
        row_position[touched] = xp.arange(touched.size, dtype=index_type)
        across_rows = row_position[across_rows]
    across = coordinate_csr(backend, across_rows, position[across_columns], value[outside],
                            (size if touched is None else touched.size, halo.size), index_type)
    return own, HaloPart(across, touched), backend.to_host(halo)


def _shard_pieces(coords, lo: int, hi: int):
    """The host coordinates (rows, cols, vals) of the lower triangle, sorted by row (``SDPProblem``'s order), that
    rows lo..hi-1 of the symmetric matrix are made of, in pieces of at most ``BUILD_CHUNK`` entries: the run of
    entries in these rows, then the entries of later rows whose column lies in [lo, hi) (mirrored, they are entries
    of these rows), picked on the host's pool of threads. Only these go to the device: the last shard's pieces begin
    at its first row, and on a graph numbered with locality the other shards pick few of the later rows' entries."""
    rows, cols, vals = coords
    start, stop = (int(i) for i in np.searchsorted(rows, [lo, hi]))
    for begin in range(start, stop, BUILD_CHUNK):
        piece = slice(begin, min(begin + BUILD_CHUNK, stop))
        yield rows[piece], cols[piece], vals[piece]
    for begin in range(stop, rows.size, BUILD_CHUNK):
        piece = slice(begin, min(begin + BUILD_CHUNK, rows.size))
        later = cols[piece]
        picked = np.concatenate(map_chunks(lambda s, c=later: s.start + np.flatnonzero((c[s] >= lo) & (c[s] < hi)),
                                           later.size))
        if picked.size:
            yield rows[piece][picked], later[picked], vals[piece][picked]


def _inverse(order: np.ndarray) -> np.ndarray:
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return inverse


def _renumbered(C, inverse: np.ndarray) -> sp.csr_array:
    """P C P' where row i moves to ``inverse[i]``."""
    coo = C.tocoo()
    return sp.csr_array((coo.data, (inverse[coo.row], inverse[coo.col])), shape=C.shape)


def balanced_bounds(weights, k: int) -> np.ndarray:
    """Bounds 0 = b_0 <= ... <= b_k = n of k contiguous ranges of about equal total ``weights`` (one per row)."""
    n = weights.size
    cumulative = np.concatenate([[0.0], np.cumsum(weights, dtype=np.float64)])
    targets = float(cumulative[-1]) * np.arange(1, k) / k
    inner = np.searchsorted(cumulative, targets, side="left")
    return np.concatenate([[0], np.clip(inner, 0, n), [n]]).astype(np.int64)


class InProcessCommunicator:
    """Reductions and halo exchanges between shards whose arrays one device holds (NumPy arrays for the CPU
    simulation, or CuPy arrays of one GPU): copies and sums of this process."""

    def all_reduce(self, parts) -> None:
        """Every part (same shape) replaced by the sum of all parts, in place."""
        total = parts[0].copy()
        for part in parts[1:]:
            total += part
        for part in parts:
            part[...] = total

    def start_exchange(self, transfers):
        """For each (source shard, send buffer, target shard, receive buffer): receive = send, done at once (the
        handle's ``wait`` has nothing left to wait for)."""
        for _, send, _, receive in transfers:
            receive[...] = send
        return _Done()


class _Done:
    """The handle of an exchange that has already completed."""

    @staticmethod
    def wait() -> None:
        return None


# CUDA clamps a stream priority beyond the device's range to its highest
HIGHEST_STREAM_PRIORITY = -(2 ** 16)


class NcclCommunicator:
    """NCCL communicators of the shards' GPUs, all driven from this process (calls grouped, so one thread can post
    every device's part of a collective).

    The exchanges run on a side stream of each device, at the highest priority: an exchange and the own rows' product
    become ready together (both wait for the gathers of the rows to send), and at equal priority the block scheduler
    handed the SMs to the product's grid first, so that NCCL's kernels started only as it drained (2 x H200, n = 1e7:
    the exchange with the product behind it took 13.1 ms, their sum; 9.1 ms at the highest priority)."""

    def __init__(self, device_ids):
        import cupy
        from cupy.cuda import nccl
        self.nccl, self.device_ids = nccl, tuple(device_ids)
        self.comms = nccl.NcclCommunicator.initAll(list(self.device_ids))
        self.side = []  # per device, the stream of the exchanges, so that products overlap them
        for device in self.device_ids:
            with cupy.cuda.Device(device):
                try:
                    self.side.append(cupy.cuda.Stream(non_blocking=True, priority=HIGHEST_STREAM_PRIORITY))
                except TypeError:  # CuPy 13 makes no streams with priorities: the exchange waits for the product
                    self.side.append(cupy.cuda.Stream(non_blocking=True))

    def _stream(self):
        import cupy
        return cupy.cuda.get_current_stream().ptr

    def healthy(self) -> bool:
        """Whether NCCL reports no asynchronous error in any of the communicators."""
        try:
            for comm in self.comms:
                comm.check_async_error()
        except self.nccl.NcclError:
            return False
        return True

    def all_reduce(self, parts) -> None:
        import cupy
        nccl = self.nccl
        nccl.groupStart()
        for comm, device, part in zip(self.comms, self.device_ids, parts):
            with cupy.cuda.Device(device):
                comm.allReduce(part.data.ptr, part.data.ptr, part.size, nccl.NCCL_FLOAT64, nccl.NCCL_SUM,
                               self._stream())
        nccl.groupEnd()

    def start_exchange(self, transfers):
        """Posts the grouped sends and receives on each device's side stream, after the work already queued on its
        current stream (which wrote the send buffers); the handle's ``wait`` makes the current streams wait for them.
        The buffers come from the current streams' pools: the handle holds them until ``wait`` has queued that, for
        a buffer freed earlier goes back to its stream's pool at once, where the next allocation may take it while
        NCCL still sends from it (two H100, single-precision halos: the iterates went wrong until the handle held
        the buffers)."""
        import cupy
        nccl = self.nccl
        types = {np.dtype(np.float64): nccl.NCCL_FLOAT64, np.dtype(np.float32): nccl.NCCL_FLOAT32}
        involved = sorted({shard for source, _, target, _ in transfers for shard in (source, target)})
        for shard in involved:
            with cupy.cuda.Device(self.device_ids[shard]):
                self.side[shard].wait_event(cupy.cuda.get_current_stream().record())
        nccl.groupStart()
        for source, send, target, receive in transfers:
            with cupy.cuda.Device(self.device_ids[source]):
                self.comms[source].send(send.data.ptr, send.size, types[send.dtype], target, self.side[source].ptr)
            with cupy.cuda.Device(self.device_ids[target]):
                self.comms[target].recv(receive.data.ptr, receive.size, types[receive.dtype], source,
                                        self.side[target].ptr)
        nccl.groupEnd()
        done = []
        for shard in involved:
            with cupy.cuda.Device(self.device_ids[shard]):
                done.append((shard, self.side[shard].record()))
        return _Posted(self.device_ids, done, transfers)


class _Posted:
    """The handle of an exchange posted on the side streams: ``wait`` queues, on each device's current stream, a wait
    for its part (the host does not block), and only then lets the exchange's buffers go."""

    def __init__(self, device_ids, done, transfers):
        self.device_ids, self.done, self.transfers = device_ids, done, transfers

    def wait(self) -> None:
        import cupy
        for shard, event in self.done:
            with cupy.cuda.Device(self.device_ids[shard]):
                cupy.cuda.get_current_stream().wait_event(event)
        self.transfers = None


class Shards:
    """The partition of the row space and the shards' devices: shard s holds rows [bounds[s], bounds[s + 1]) on
    ``device_ids[s]`` (None on the CPU), with its own kernel set; ``communicator`` moves data between them."""

    def __init__(self, bounds, backend: Backend, device_ids, communicator):
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.k, self.n = self.bounds.size - 1, int(self.bounds[-1])
        self.backend, self.device_ids, self.communicator = backend, device_ids, communicator
        self.kernels = [kernels_for(backend) for _ in range(self.k)]

    def rows(self, s: int) -> tuple[int, int]:
        return int(self.bounds[s]), int(self.bounds[s + 1])

    def size(self, s: int) -> int:
        """Shard s's number of rows."""
        return int(self.bounds[s + 1] - self.bounds[s])

    def on(self, s: int):
        """The context in which shard s's arrays are allocated and its kernels launched."""
        if self.device_ids is None:
            return contextlib.nullcontext()
        return self.backend.xp.cuda.Device(self.device_ids[s])

    def map(self, function, *arrays, axis: int = 0) -> ShardedRows:
        """:meth:`each`'s results as a ShardedRows split along ``axis``."""
        return ShardedRows(self.each(function, *arrays), self, axis)

    def each(self, function, *arrays) -> list:
        """[function(s, the parts of ``arrays`` on shard s)] over the shards; an array is a ShardedRows or a list of
        per-shard values."""
        results = []
        for s in range(self.k):
            with self.on(s):
                results.append(function(s, *(a.parts[s] if isinstance(a, ShardedRows) else a[s] for a in arrays)))
        return results

    def split(self, array) -> ShardedRows:
        """A host (or first-device) array of n rows, split by rows onto the shards."""
        host = array if isinstance(array, np.ndarray) else self.backend.to_host(array)
        return self.map(lambda s: self.backend.xp.asarray(host[slice(*self.rows(s))]))

    def to_first(self, array, out=None):
        """A device array (of any shard) as an array on the first shard's device (itself when it lives there),
        written into ``out`` (an array there) when given. Read it only: it may be the array given."""
        with self.on(0):
            if self.device_ids is not None:
                return _copy_to_current(array, out)
            if out is None:
                return self.backend.xp.asarray(array)
            out[...] = array
            return out

    def from_first(self, s: int, array):
        """A first-device array as an array on shard s's device (call within ``on(s)``; the array itself where it
        lives there already). Read it only."""
        return array if self.device_ids is None else _copy_to_current(array)

    @staticmethod
    def total(values) -> float:
        """The sum of per-shard device scalars, on the host."""
        return float(sum(float(v) for v in values))


def _whole(key, n: int) -> bool:
    """Whether the index ``key`` is a slice over all of 0..n-1."""
    return (isinstance(key, slice) and key.step in (None, 1) and (key.start or 0) == 0
            and (key.stop is None or key.stop >= n))


def _copy_to_current(array, out=None):
    """A C-contiguous CuPy array on the current device: the array itself when it lives there and no ``out`` is given,
    else a copy (a peer copy from another device) into ``out`` or new memory, queued in stream order without the host
    waiting: the current stream waits for the work queued on the array's device, and that device's stream then waits
    for the copy, so that memory freed there after this call is not handed to new work before the copy has read it
    (the pool reuses a freed block in its own stream's order)."""
    import cupy
    if array.device.id == cupy.cuda.Device().id:
        if out is None:
            return array
        out[...] = array
        return out
    out = cupy.empty(array.shape, array.dtype) if out is None else out
    stream = cupy.cuda.get_current_stream()
    with array.device:
        source = cupy.cuda.get_current_stream()
        stream.wait_event(source.record())
    out.data.copy_from_device_async(array.data, array.nbytes, stream)
    copied = stream.record()
    with array.device:
        source.wait_event(copied)
    return out


class ShardedRows:
    """A row-space array split by rows (``axis`` 0: n x ... arrays such as the factor; ``axis`` 1: a count x n stack
    of vectors such as a Lanczos basis), one part per shard on the shard's device. It supports what the phases do
    with row-space arrays outside the kernels: ``copy``, scalar arithmetic, sums of two, indexing a stack of
    vectors, and slicing the whole row range; everything else goes through :class:`ShardedKernels`."""

    __slots__ = ("parts", "shards", "axis")

    def __init__(self, parts, shards: Shards, axis: int = 0):
        self.parts, self.shards, self.axis = list(parts), shards, axis

    @property
    def shape(self) -> tuple:
        shape = list(self.parts[0].shape)
        shape[self.axis] = sum(part.shape[self.axis] for part in self.parts)
        return tuple(shape)

    @property
    def ndim(self) -> int:
        return self.parts[0].ndim

    @property
    def dtype(self):
        return self.parts[0].dtype

    def copy(self) -> ShardedRows:
        return self.shards.map(lambda s, p: p.copy(), self, axis=self.axis)

    def sum(self) -> float:
        return self.shards.total(self.shards.each(lambda s, p: p.sum(), self))

    def _elementwise(self, function) -> ShardedRows:
        return self.shards.map(lambda s, p: function(p), self, axis=self.axis)

    def __mul__(self, other) -> ShardedRows:
        """Times a scalar, or entrywise times another ShardedRows of the same split."""
        if isinstance(other, ShardedRows):
            return self.shards.map(lambda s, p, q: p * q, self, other, axis=self.axis)
        return self._elementwise(lambda p: p * other)

    __rmul__ = __mul__

    def __truediv__(self, scalar) -> ShardedRows:
        return self._elementwise(lambda p: p / scalar)

    def __add__(self, other: ShardedRows) -> ShardedRows:
        return self.shards.map(lambda s, p, q: p + q, self, other, axis=self.axis)

    def __sub__(self, other: ShardedRows) -> ShardedRows:
        return self.shards.map(lambda s, p, q: p - q, self, other, axis=self.axis)

    def __itruediv__(self, scalar) -> ShardedRows:
        self.shards.each(lambda s, p: p.__itruediv__(scalar), self)
        return self

    def __getitem__(self, key) -> ShardedRows:
        if self.axis == 1:  # a vector, or a range of vectors, of a stack
            axis = 0 if isinstance(key, (int, np.integer)) else 1
            return ShardedRows([part[key] for part in self.parts], self.shards, axis)
        if _whole(key, self.shards.n):
            return self  # the whole row range (the one PSD block of a sharded problem)
        raise IndexError(f"a row-sharded array takes the whole row range only, got {key!r}")

    def __setitem__(self, key, value: ShardedRows) -> None:
        if self.axis != 1:
            raise IndexError("only a stack of vectors takes assignments")
        for s in range(self.shards.k):
            with self.shards.on(s):
                self.parts[s][key] = value.parts[s]


class ShardedMatrix:
    """Shard s's rows of a symmetric matrix in two parts: ``own[s]``, a CSR matrix over the shard's own rows (local
    numbering), and ``halo[s]``, a :class:`HaloPart` over its halo (``exchange.halo_rows[s]``, global rows ascending;
    None for an empty halo), so that a product runs on the own rows while the halo rows are in transit, and adds the
    halo's part when they have arrived. The halo rows travel as ``halo_dtype`` (float32 rounds them: half the bytes,
    and a relative error of at most 2^-24 on each term of the halo's part)."""

    def __init__(self, own: list, halo: list, exchange: HaloExchange, shape: tuple[int, int],
                 halo_dtype=np.float64):
        self.own, self.halo, self.exchange, self.shape = own, halo, exchange, shape
        self.halo_dtype = np.dtype(halo_dtype)

    def with_halo_dtype(self, halo_dtype) -> ShardedMatrix:
        """The same matrix (its parts shared) with its halo rows travelling as ``halo_dtype``."""
        return ShardedMatrix(self.own, self.halo, self.exchange, self.shape, halo_dtype)

    def __getitem__(self, key) -> ShardedMatrix:
        if not all(_whole(k, self.shape[0]) for k in key):
            raise IndexError("a row-sharded matrix takes the whole block only")
        return self

    def gershgorin_lower(self) -> float:
        """min_i (S_ii - sum_{j != i} |S_ij|): a lower bound on the eigenvalues."""
        shards = self.exchange.shards

        def lower(s, own, halo):
            xp = shards.backend.xp
            diagonal = own.diagonal()
            if not diagonal.size:
                return math.inf
            outside = 0.0 if halo is None else halo.absolute_row_sums(diagonal.size, xp)
            return float(xp.min(diagonal - gershgorin_radii(own, xp) - outside))
        return min(shards.each(lower, self.own, self.halo))


class HaloExchange:
    """Which rows each shard sends to which: shard s receives ``halo_rows[s]`` (ascending), of which those in shard t
    form the contiguous slice ``receive[s][t]`` of its halo buffer; shard t sends them from its local rows
    ``send[t][s]``."""

    def __init__(self, shards: Shards, halo_rows: list):
        self.shards, self.halo_rows = shards, halo_rows
        self.receive, self.send = [], [dict() for _ in range(shards.k)]
        for s in range(shards.k):
            slices = {}
            for t in range(shards.k):
                lo, hi = shards.rows(t)
                start, stop = np.searchsorted(halo_rows[s], [lo, hi])
                if t != s and stop > start:
                    slices[t] = slice(int(start), int(stop))
                    with shards.on(t):
                        self.send[t][s] = shards.backend.xp.asarray(halo_rows[s][start:stop] - lo)
            self.receive.append(slices)

    def start(self, V: ShardedRows, dtype=np.float64):
        """Starts moving each shard's halo rows of V, as ``dtype``, into a buffer of its own: returns (the buffers,
        the exchange's handle); the buffers hold the rows once ``handle.wait()`` was called (in stream order on
        GPUs)."""
        shards, xp = self.shards, self.shards.backend.xp
        buffers, sends = [], {}
        for s in range(shards.k):
            with shards.on(s):
                own = V.parts[s]
                buffers.append(xp.empty((self.halo_rows[s].size,) + own.shape[1:], dtype))
                for target, index in self.send[s].items():
                    sends[s, target] = shards.kernels[s].gather_rows(own, index, dtype)
        transfers = [(source, sends[source, s], s, buffers[s][where])
                     for s in range(shards.k) for source, where in self.receive[s].items()]
        return buffers, shards.communicator.start_exchange(transfers)


class ShardedKernels:
    """The part of the kernel contract (``kernels.Kernels``) that the Riemannian phase, L-BFGS, the eigensolver and the
    stationary multipliers use, over :class:`ShardedRows`: row-wise kernels run shard by shard with each shard's own
    kernel set, reductions sum the shards' parts, sparse products multiply the own rows while the halo is exchanged.
    L-BFGS sums the shards' parts of one Gram matrix per step; Lanczos' Gram-Schmidt passes are written here with
    one reduction per pass (the fused single-device versions keep everything on one device). Phase I's fused kernels
    over the constraint space run on the first device, where it lives, with that shard's rows."""

    lanczos_cycle = staticmethod(CpuKernels.lanczos_cycle)  # a plain loop: no recording across devices
    prepare_products = staticmethod(CpuKernels.prepare_products)  # nothing is recorded, so the products plan lazily

    def __init__(self, shards: Shards):
        self.shards = shards
        self.max_lbfgs_memory = shards.kernels[0].max_lbfgs_memory  # the shards' Gram and combination passes

    # ------------------------------------------------------------------ row space
    def inner(self, x, y) -> float:
        return self.shards.total(self.shards.each(lambda s, p, q: self.shards.backend.xp.vdot(p, q), x, y))

    def norm(self, x) -> float:
        return math.sqrt(self.inner(x, x))

    def all_finite(self, x) -> bool:
        return all(bool(v) for v in self.shards.each(lambda s, p: self.shards.backend.xp.isfinite(p).all(), x))

    def empty_like(self, x):
        return self.shards.map(lambda s, p: self.shards.backend.xp.empty_like(p), x, axis=x.axis)

    def random_vector(self, n: int, seed: int):
        """The single device's random vector (``kernels.hashed_uniform``), each shard's rows made on its device."""
        return self.shards.map(lambda s: hashed_uniform(self.shards.backend.xp, *self.shards.rows(s), seed))

    def vectors(self, count: int, n: int):
        xp = self.shards.backend.xp
        return self.shards.map(lambda s: xp.empty((count, self.shards.size(s))), axis=1)

    def combine(self, coefficients, vectors):
        xp = self.shards.backend.xp
        return self.shards.map(lambda s, p: xp.asarray(coefficients) @ p, vectors,
                               axis=0 if np.ndim(coefficients) == 1 else 1)

    def _reduced(self, parts):
        """The shards' partial sums (device arrays of one shape) summed, on the host."""
        self.shards.communicator.all_reduce(parts)
        return self.shards.backend.to_host(parts[0])

    def dot(self, x, y):
        """<x, y>: on the host for split arrays, a device scalar of the first device for the constraint space's."""
        if isinstance(x, ShardedRows):
            return self.inner(x, y)
        return self.shards.kernels[0].dot(x, y)

    def abs_sum(self, x) -> float:
        if isinstance(x, ShardedRows):
            return self.shards.total(self.shards.each(lambda s, p: self.shards.kernels[s].abs_sum(p), x))
        return self.shards.kernels[0].abs_sum(x)

    def average(self, x, y, out):
        self.shards.each(lambda s, p, q, o: self.shards.kernels[s].average(p, q, o), x, y, out)
        return out

    # ------------------------------------------------------------------ conjugate gradients (rows or constraints)
    def cg_step(self, x, r, p, Ap, rr, pAp) -> None:
        """x += alpha p, r -= alpha Ap for split arrays (``rr`` and ``pAp`` on the host) or the constraint space's."""
        if not isinstance(x, ShardedRows):
            self.shards.kernels[0].cg_step(x, r, p, Ap, rr, pAp)
            return
        xp = self.shards.backend.xp
        self.shards.each(lambda s, *parts: self.shards.kernels[s].cg_step(*parts, xp.asarray(rr), xp.asarray(pAp)),
                         x, r, p, Ap)

    def cg_direction(self, p, r, rr_new, rr) -> None:
        if not isinstance(p, ShardedRows):
            self.shards.kernels[0].cg_direction(p, r, rr_new, rr)
            return
        xp = self.shards.backend.xp
        self.shards.each(lambda s, q, z: self.shards.kernels[s].cg_direction(q, z, xp.asarray(rr_new), xp.asarray(rr)),
                         p, r)

    # ------------------------------------------------------------------ phase I's step (constraints: first device)
    def line_search_products(self, AW, Avals, b, lam, rho, R, D, CD, out):
        """The first device's kernel on the constraint space and its shard's rows; the other shards' parts of
        <R, CD> and <D, CD> added there (``kernels.LINE_SEARCH_ROW_SCALARS``)."""
        shards, xp = self.shards, self.shards.backend.xp
        with shards.on(0):
            shards.kernels[0].line_search_products(AW, Avals, b, lam, rho, R.parts[0], D.parts[0], CD.parts[0], out)
        rest = shards.each(lambda s, r, d, cd: xp.stack([xp.vdot(r, cd), xp.vdot(d, cd)]) if s else None, R, D, CD)
        with shards.on(0):
            for part in rest[1:]:
                out[LINE_SEARCH_ROW_SCALARS] += shards.to_first(part)
        return out

    def advance(self, R, D, tau, Avals, AW):
        """D *= tau, R += D on every shard, A(X)'s update on the first device; returns D."""
        shards = self.shards
        with shards.on(0):
            shards.kernels[0].advance(R.parts[0], D.parts[0], tau, Avals, AW)
        for s in range(1, shards.k):
            with shards.on(s):
                D.parts[s] *= tau
                R.parts[s] += D.parts[s]
        return D

    def shifted_residual(self, Avals, b, lam, rho):
        with self.shards.on(0):
            return self.shards.kernels[0].shifted_residual(Avals, b, lam, rho)

    # ------------------------------------------------------------------ row-wise kernels
    def scale_add(self, x, a, y, b):
        self.shards.each(lambda s, p, q: self.shards.kernels[s].scale_add(p, a, q, b), x, y)
        return x

    def sphere_tangent(self, Z, X, squares, scale, out):
        self.shards.each(lambda s, z, x, q, o: self.shards.kernels[s].sphere_tangent(z, x, q, scale, o),
                         Z, X, squares, out)
        return out

    def sphere_retract(self, X, D, tau, roots, out):
        self.shards.each(lambda s, x, d, q, o: self.shards.kernels[s].sphere_retract(x, d, tau, q, o),
                         X, D, roots, out)
        return out

    # ------------------------------------------------------------------ sparse products
    def csr_matmul(self, matrix: ShardedMatrix, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """The own rows' product while the halo is exchanged (as ``matrix.halo_dtype``), then the halo's part added
        in place."""
        shards = self.shards
        buffers, pending = matrix.exchange.start(V, matrix.halo_dtype)
        out = self.empty_like(V) if out is None else out
        for s in range(shards.k):
            with shards.on(s):
                shards.kernels[s].csr_matmul(matrix.own[s], V.parts[s], out=out.parts[s], alpha=alpha,
                                             addend=None if addend is None else addend.parts[s], beta=beta)
        pending.wait()
        for s in range(shards.k):
            if matrix.halo[s] is not None:
                with shards.on(s):
                    matrix.halo[s].add_product(shards.kernels[s], buffers[s], out.parts[s], alpha)
        return out

    # ------------------------------------------------------------------ L-BFGS
    def lbfgs_pair(self, s, y):
        """The record of one pair: the pair itself (its weights come out of the next direction's Gram matrix)."""
        return s, y

    def lbfgs_direction(self, G, pairs, products):
        """The recursion on coefficients (:func:`kernels.lbfgs_coefficients`) without the host: each shard's part of
        the Gram matrix of (G, s_0, y_0, ...) in one pass, one all-reduce of those few sums into every device, the
        recursion on each device (``products`` written by the first), each shard's combination in one pass. (Read
        back to the host, the Gram matrix left the devices idle while the host ran the recursion and sent the
        coefficients: 0.8 ms of a 32 ms step at n = 1e8 on two H200.)"""
        shards, xp = self.shards, self.shards.backend.xp
        vectors = [G] + [v for pair in pairs for v in pair]
        upper = self._gram_parts(vectors)
        shards.communicator.all_reduce(upper)
        coefficients = shards.each(lambda s, gram: shards.kernels[s].lbfgs_recursion(
            gram, len(vectors), products if s == 0 else xp.empty(2)), upper)
        return shards.map(lambda s, c, *parts: shards.kernels[s].lbfgs_combine(parts, c), coefficients, *vectors)

    def _gram_parts(self, vectors) -> list:
        """Each shard's part of the upper triangle of the Gram matrix of ``vectors``, row by row, on its device."""
        shards, size = self.shards, len(vectors) * (len(vectors) + 1) // 2
        return shards.each(lambda s, *parts: shards.kernels[s].lbfgs_gram(parts, shards.backend.xp.empty(size)),
                           *vectors)

    def gram(self, vectors) -> np.ndarray:
        """The Gram matrix of ``vectors`` on the host: each shard's part in one pass, one all-reduce (also the
        Riemannian line search's products when the halo rows are rounded, which only a split operator does)."""
        return symmetric_from_upper(self._reduced(self._gram_parts(vectors)), len(vectors))

    # ------------------------------------------------------------------ Lanczos
    def lanczos_extend(self, basis, j, w, projection, complement):
        """:meth:`CpuKernels.lanczos_extend` over shards (no deflation: ``complement`` is the identity here), with
        no transfer to the host: each pass's coefficients and the norm are all-reduced into every shard's device and
        used there, so a step is queued on the devices without waiting for them (2 x H200, n = 1e8: 23 ms per step, 27
        ms with cuBLAS' passes and three reductions to the host per step; one device's fused step took about 34)."""
        shards, xp, k = self.shards, self.shards.backend.xp, j + 1
        column = None
        for _ in range(2):  # classical Gram-Schmidt, twice
            passed = shards.each(lambda s, V, x: shards.kernels[s].basis_dot(V, k, x, xp.empty(k)), basis, w)
            shards.communicator.all_reduce(passed)
            shards.each(lambda s, V, x, c: shards.kernels[s].basis_subtract(V, k, c, x), basis, w, passed)
            with shards.on(0):
                column = passed[0] if column is None else column + passed[0]
        squares = shards.each(lambda s, x: xp.vdot(x, x).reshape(1), w)
        shards.communicator.all_reduce(squares)
        with shards.on(0):  # the projection lives on the first device
            projection[:k, j] = column
            projection[j + 1, j] = xp.sqrt(squares[0][0])
        with np.errstate(divide="ignore", invalid="ignore"):
            shards.each(lambda s, V, x, q: xp.divide(x, xp.sqrt(q), out=V[j + 1]), basis, w, squares)

    def project_out(self, V, w):
        raise NotImplementedError("deflated eigenvalue problems are not sharded")


class ShardedBackend:
    """A backend whose row-space arrays are split over :class:`Shards`: the constraint space and the small arrays
    live on the first device (``xp``), row-space arrays are :class:`ShardedRows`."""

    def __init__(self, backend: Backend, device_ids, shards_of):
        self.base, self.name, self.xp, self.sparse = backend, backend.name, backend.xp, backend.sparse
        self.device_ids = device_ids
        self._shards_of = shards_of
        self.shards: Shards | None = None
        self.kernel_set: ShardedKernels | None = None

    @property
    def is_gpu(self) -> bool:
        return self.base.is_gpu

    def partition(self, bounds: np.ndarray) -> Shards:
        """Split the row space at ``bounds`` (one shard per device) and make this backend's shards and kernel set."""
        self.shards = self._shards_of(bounds)
        self.kernel_set = ShardedKernels(self.shards)
        return self.shards

    @property
    def count(self) -> int:
        return len(self.device_ids)

    def asarray(self, a, dtype=None):
        return self.base.asarray(a, dtype)

    def to_host(self, a) -> np.ndarray:
        if not isinstance(a, ShardedRows):  # a small array of the first device (each step's scalars): one copy
            return self.base.to_host(a)
        return self.to_host_together([a])[0]

    def to_host_together(self, arrays) -> list:
        """NumPy copies of device arrays and ShardedRows, all copied at once (``backend.copy_to_host``); each part of a
        ShardedRows into its rows, so that no second copy joins them."""
        if not self.is_gpu:
            return [np.concatenate([np.asarray(p) for p in a.parts], axis=a.axis) if isinstance(a, ShardedRows)
                    else np.asarray(a) for a in arrays]
        outs, pairs = [], []
        for a in arrays:
            outs.append(np.empty(a.shape, a.dtype))
            if not isinstance(a, ShardedRows):
                pairs.append((a, outs[-1]))
                continue
            for s, part in enumerate(a.parts):
                rows = [slice(None)] * a.ndim
                rows[a.axis] = slice(*a.shards.rows(s))
                pairs.append((part, outs[-1][tuple(rows)]))
        copy_to_host(pairs)
        return outs

    def csr(self, matrix):
        return self.base.csr(matrix)

    def _on_each(self, function) -> list:
        if not self.is_gpu:
            return [function()]
        results = []
        for device in self.device_ids:
            with self.xp.cuda.Device(device):
                results.append(function())
        return results

    def synchronize(self) -> None:
        self._on_each(self.base.synchronize)

    def pool_bytes(self) -> int:
        """The largest memory pool of the devices (what has to fit on one)."""
        return max(self._on_each(self.base.pool_bytes))

    def release_cached_blocks(self) -> None:
        self._on_each(self.base.release_cached_blocks)

    def free_memory(self) -> int | None:
        """The bytes of a row-space array that would still fit when split like the rows: the smallest, over the
        devices, of free memory times n over the shard's rows (None on the CPU)."""
        if not self.is_gpu:
            return None
        free = self._on_each(self.base.free_memory)
        if self.shards is None:
            return self.count * min(free)
        sizes = np.diff(self.shards.bounds)
        return int(min(f * self.shards.n / max(int(size), 1) for f, size in zip(free, sizes)))

    def describe(self) -> str:
        if not self.is_gpu:
            return f"{self.count} shards on the cpu (simulated devices, NumPy/SciPy)"
        with self.xp.cuda.Device(self.device_ids[0]):
            first = self.base.describe()
        return f"{self.count} GPUs {list(self.device_ids)}, NCCL, each {first}"


def simulated_backend(device: str, devices) -> ShardedBackend:
    """As many shards as ``devices`` counts (a count, or ids whose number counts), all held by one device and exchanging
    in-process: NumPy arrays for "cpu", or all on the current GPU for "gpu" (to test and time the sharded kernels where
    only one GPU is at hand; it stands in for :func:`sharded_backend`)."""
    count = devices if isinstance(devices, int) else len(devices)
    base = select_backend(device)
    return ShardedBackend(base, (0,) * count if base.is_gpu else tuple(range(count)),
                          lambda bounds: Shards(bounds, base, None, InProcessCommunicator()))


def sharded_backend(device: str, ids: tuple[int, ...]) -> ShardedBackend:
    """The backend for the GPU ``ids`` of ``Settings.gpu_ids`` on ``device``: as many simulated shards of one process
    for "cpu", those GPUs otherwise (an error when one is not visible); the first GPU becomes current, as the
    constraint space and the small arrays live there."""
    if device == "cpu" or (device == "auto" and not gpu_available()):
        return simulated_backend("cpu", ids)
    base = select_backend("gpu", gpu_ids=ids)
    communicator = _idle_communicator(ids)
    backend = ShardedBackend(base, ids, lambda bounds: Shards(bounds, base, ids, communicator))
    # not at the interpreter's exit, where there is no next solve to keep it for
    weakref.finalize(backend, _keep_idle, ids, communicator).atexit = False
    return backend


# NCCL communicators of the process that no solve holds, by their GPUs: made and destroyed with each solve, they took
# 0.04 s and 0.52 s of it (2 x H200), so a solve's goes back here when its backend is collected
_IDLE_COMMUNICATORS: dict[tuple[int, ...], list[NcclCommunicator]] = {}
_IDLE_LOCK = threading.Lock()


def _idle_communicator(ids: tuple[int, ...]) -> NcclCommunicator:
    """A communicator of these GPUs that no other solve holds: one kept from an earlier solve, else a new one."""
    with _IDLE_LOCK:
        idle = _IDLE_COMMUNICATORS.get(tuple(ids))
        if idle:
            return idle.pop()
    return NcclCommunicator(ids)


def _keep_idle(ids: tuple[int, ...], communicator: NcclCommunicator) -> None:
    """Keeps a collected backend's communicator for the next solve, unless NCCL reported an error in it."""
    if communicator.healthy():
        with _IDLE_LOCK:
            _IDLE_COMMUNICATORS.setdefault(tuple(ids), []).append(communicator)


class _ShardedOperator:
    """What the operators of a split problem share: the shards, C as a :class:`ShardedMatrix` (built by each shard on
    its device), the row-space arrays' start and widening shard by shard, the objective's products, and the
    constraint space (b, the multipliers, A(X)) whole on the first device."""

    def __init__(self, problem, backend: ShardedBackend, layout, shards: Shards, row_scale: float, build,
                 halo_precision: str):
        """``build(s)``: shard s's parts beyond C (a tuple), made on its device (called on a thread per shard);
        ``halo_precision``: that of the halo rows in :meth:`rounded_objective_times` (``Settings.halo_precision``)."""
        n, coords, xp = layout.n_rows, problem.C_coords[0], backend.xp
        self.backend, self.layout, self.m, self.shards = backend, layout, problem.m, shards
        self.kernels = backend.kernel_set
        self.row_scale = row_scale
        self.b = xp.asarray(problem.b) / row_scale

        def build_all(s):
            with shards.on(s):
                return (*shard_matrices(backend.base, coords, n, *shards.rows(s)), *build(s))

        own, halo, halo_rows, *self._parts = (list(parts) for parts in zip(*on_own_threads(build_all, range(shards.k))))
        self.C = ShardedMatrix(own, halo, HaloExchange(shards, halo_rows), (n, n))
        self.rounds_halo = halo_precision == "single"
        self.rounded_C = self.C.with_halo_dtype(np.float32 if self.rounds_halo else np.float64)

    # ------------------------------------------------------------------ rows
    def split(self, array) -> ShardedRows:
        """A host array of the row space, split onto the shards."""
        return self.shards.split(array)

    def initial_factor(self, width: int, ranks, seed: int) -> ShardedRows:
        """The start of the low-rank phases, each shard's rows drawn as in the whole factor (``state.initial_rows``)."""
        xp = self.backend.xp
        return self.shards.map(lambda s: initial_rows(self.layout, ranks, width, seed, xp, *self.shards.rows(s)))

    def widen(self, R, ranks, new_ranks, directions) -> ShardedRows:
        """R widened to ``new_ranks`` (``state.widen_factor`` on each shard's rows)."""
        xp = self.backend.xp
        parts = [None if d is None else d.parts for d in directions]
        return self.shards.map(lambda s, part: widen_factor(part, self.layout, ranks, new_ranks, xp,
                                                            [None if p is None else p[s] for p in parts],
                                                            first_row=self.shards.rows(s)[0]), R)

    def residual_norm(self, residual) -> float:
        return self.row_scale * float(self.backend.xp.linalg.norm(residual))

    def objective_times(self, V, out=None):
        return self.kernels.csr_matmul(self.C, V, out=out)

    def rounded_objective_times(self, V, out=None):
        """C V with the halo rows exchanged in single precision when ``rounds_halo``: for the Riemannian phase's
        trial points, never for a measurement or a certificate."""
        return self.kernels.csr_matmul(self.rounded_C, V, out=out)

    def objective(self, R) -> float:
        return self.kernels.inner(R, self.objective_times(R))

    def slack_times(self, y, c_scale, V, CV=None, weight=1.0):
        """weight * (c_scale C + A*(y)) V; ``CV`` is C V when the caller has it already."""
        if CV is None:
            CV = self.objective_times(V)
        return self.adjoint_times(self.adjoint_data(y), V, alpha=weight, addend=CV, beta=weight * c_scale)

    def normal_preconditioner(self, F):
        """None: phase II's conjugate gradients run unpreconditioned on split rows."""
        return None


class ShardedSpheresOperator(_ShardedOperator):
    """The operator of a problem on a product of spheres (one PSD block, every constraint a_i X_jj = b_i on its own
    row j, every row fixed so: ``riemannian.Spheres``), split over the shards of a :class:`ShardedBackend`. It offers
    what the Riemannian phase and the driver's measurements use of ``layout.CompressedOperator``: C V with the halo
    exchanged, sym(U V') on the diagonal (the positions the constraints touch), A(X), A*(y) V, the dual slack as a
    :class:`ShardedMatrix` for the eigensolver, the start and the widening of the factor shard by shard."""

    def __init__(self, problem, backend: ShardedBackend, rescale: bool, layout, halo_precision: str = "double"):
        if len(layout.sizes) != 1 or layout.n_lp or problem.A_low_rank[0].size or problem.C_low_rank[0] is not None:
            raise ValueError(SHARDED_PROBLEMS_MESSAGE)
        n, coeff = layout.n_rows, problem.A_coords[0]
        # one diagonal entry per constraint (the constraints are sorted: then they increase), each row once
        if not (coeff.row.size == n == problem.m and strictly_increasing(coeff.con)
                and not holds_anywhere(lambda s: coeff.row[s] != coeff.col[s], n)):
            raise ValueError("a product of spheres has one constraint a_i X_jj = b_i per row j")
        # per row of the block: its constraint and coefficient. n increasing constraint indices below m = n are
        # 0..n-1, so rows that increase are in constraint order (MaxCut's): a shard's constraints are then its rows
        row_coef, row_con = coeff.val, None
        if not strictly_increasing(coeff.row):
            if np.bincount(coeff.row, minlength=n).max() != 1:
                raise ValueError("a product of spheres has one constraint a_i X_jj = b_i per row j")
            row_con, row_coef = np.empty(n, index_type_for(n)), np.empty(n)
            row_con[coeff.row], row_coef[coeff.row] = coeff.con, coeff.val
        rows, cols, _ = problem.C_coords[0]
        xp = backend.xp
        shards = backend.partition(symmetric_bounds([(rows, cols)], n, backend.count))
        row_scale = abs_median(coeff.val) if rescale else 1.0

        def build(s):
            """Shard s's constraints (None: its rows' own range) and coefficients."""
            lo, hi = shards.rows(s)
            return (None if row_con is None else xp.asarray(row_con[lo:hi]), xp.asarray(row_coef[lo:hi]) / row_scale)

        super().__init__(problem, backend, layout, shards, row_scale, build, halo_precision)
        self._con, self._coef = self._parts
        with shards.on(0):  # and the constraints on the first device, where the constraint space lives
            self._con_first = [None if row_con is None else xp.asarray(row_con[slice(*shards.rows(s))])
                               for s in range(shards.k)]

    # ------------------------------------------------------------------ forward operator
    def sample(self, U, V=None):
        """sym(U V') on the diagonal: the row dots u_j . v_j, shard by shard."""
        kernels = self.shards.kernels
        return self.shards.map(lambda s, u, v: kernels[s].row_dots(u, v), U, U if V is None else V)

    def constraints(self, w):
        """A(X) from :meth:`sample`'s values, as one m-vector on the first device."""
        out = self.backend.xp.empty(self.m)
        for s in range(self.shards.k):
            with self.shards.on(s):
                values = w.parts[s] * self._coef[s]
            if self._con_first[s] is None:
                self.shards.to_first(values, out[slice(*self.shards.rows(s))])
            else:
                out[self._con_first[s]] = self.shards.to_first(values)
        return out

    # ------------------------------------------------------------------ adjoint
    def adjoint_data(self, y, weight=1.0):
        """The diagonal of weight * A*(y), per shard."""
        def part(s):  # within on(s)
            if self._con[s] is not None:
                return weight * self._coef[s] * self.shards.from_first(s, y)[self._con[s]]
            with self.shards.on(0):
                mine = y[slice(*self.shards.rows(s))]  # only the shard's own constraints travel
            return weight * self._coef[s] * self.shards.from_first(s, mine)
        return self.shards.map(part)

    def adjoint_times(self, data, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """A*(y) V for the diagonal ``data`` of :meth:`adjoint_data` (alpha A*(y) V + beta addend with an addend)."""
        def times(s, d, v, *rest):
            result = alpha * d[:, None] * v if v.ndim == 2 else alpha * d * v
            if rest:
                result += beta * rest[0]
            return result
        product = self.shards.map(times, data, V, *([addend] if addend is not None else []))
        if out is None:
            return product
        self.shards.each(lambda s, o, p: o.__setitem__(Ellipsis, p), out, product)
        return out

    def slack_matrix(self, lam):
        """C - A*(lam) as a :class:`ShardedMatrix`."""
        return ShardedMatrix(self._plus_diagonal(self.adjoint_data(lam, weight=-1.0), self.C.own), self.C.halo,
                             self.C.exchange, self.C.shape)

    def adjoint_matrix(self, y, weight=1.0):
        """weight * A*(y) (diagonal) as a :class:`ShardedMatrix` with an empty halo."""
        zero = [self.backend.sparse.csr_matrix(part.shape) for part in self.C.own]
        no_halo = HaloExchange(self.shards, [np.empty(0, np.int64)] * self.shards.k)
        return ShardedMatrix(self._plus_diagonal(self.adjoint_data(y, weight=weight), zero), [None] * self.shards.k,
                             no_halo, self.C.shape)

    def _plus_diagonal(self, diagonal: ShardedRows, parts: list) -> list:
        """parts[s] + Diag(diagonal) on the shard's own columns."""
        sparse = self.backend.sparse
        return self.shards.each(lambda s, d, part: (part + sparse.diags(d, shape=part.shape, format="csr")).tocsr(),
                                diagonal, parts)


def position_owner(rows, cols, bounds, xp=np):
    """The shard that samples each position (rows >= cols and ``bounds``, arrays of ``xp``): that of its row or of
    its column, alternately by the parity of row + col, so that the positions between two shards (on a bipartite
    pattern such as completion's, all of them) are shared between both."""
    row_shard = xp.searchsorted(bounds, rows, side="right") - 1
    col_shard = xp.searchsorted(bounds, cols, side="right") - 1
    return xp.where((rows + cols) % 2 == 0, row_shard, col_shard)


class ShardedBlockOperator(_ShardedOperator):
    """The operator of a one-block problem with any constraints on the block (matrix completion, MaxCut by phases I and
    II, edge constraints with a trace constraint), split over the shards of a :class:`ShardedBackend` for phases I and
    II and the measurements.

    Each shard keeps, built on its device from the coordinates of A:
    - its rows of the pattern of A*(y) as a :class:`ShardedMatrix` ``S`` (own columns and halo), whose values come
      from the multipliers through ``At`` (the pattern's entries x the constraints touching them) and a gather into
      the CSR order of its two parts: A*(y) V then runs as C V does, the halo rows exchanged beside the own product;
    - the positions it samples (:func:`position_owner`), numbered in its *extended* rows (its own rows, then its halo
      rows in the order of S's halo buffer), and ``A``, the constraints x those positions: sym(U V') is sampled on
      the shard's own rows and halo rows put side by side, and A(X) is the sum over the shards of A times the
      samples, each shard's values scattered into the m-vector on the first device at its constraints.
    The constraint space (y, A(X), b, the multipliers) is whole on the first device: what crosses devices per
    product is y at the constraints each shard touches, the samples' partial sums, and halo rows."""

    def __init__(self, problem, backend: ShardedBackend, rescale: bool, layout, halo_precision: str = "double"):
        if len(layout.sizes) != 1 or layout.n_lp or problem.A_low_rank[0].size or problem.C_low_rank[0] is not None:
            raise ValueError(SHARDED_PROBLEMS_MESSAGE)
        n, coeff, xp = layout.n_rows, problem.A_coords[0], backend.xp
        (c_rows, c_cols, _), m = problem.C_coords[0], problem.m
        # rows balanced by their entries of C and of A's coordinates (both are a shard's work per product)
        shards = backend.partition(symmetric_bounds([(c_rows, c_cols), (coeff.row, coeff.col)], n, backend.count))
        row_scale = (median_row_norm(constraint_squares(coeff.con, coeff.row, coeff.col, coeff.val, m))
                     if rescale else 1.0)
        index = index_type_for(max(n, m, 2 * coeff.row.size))

        def build(s):
            """Shard s's pattern of A*(y) and its constraints' parts (on its device)."""
            lo, hi = shards.rows(s)
            bounds = xp.asarray(shards.bounds)
            adjoint, sampled = ([], [], [], []), ([], [], [], [])
            for start in range(0, max(coeff.row.size, 1), BUILD_CHUNK):  # one piece at least: the arrays' types
                piece = slice(start, start + BUILD_CHUNK)
                con, row, col, val = (xp.asarray(a[piece]) for a in (coeff.con, coeff.row, coeff.col, coeff.val))
                lower, mirrored = (row >= lo) & (row < hi), (col >= lo) & (col < hi) & (row != col)
                for part, values in zip(adjoint, ((row[lower] - lo, col[mirrored] - lo), (col[lower], row[mirrored]),
                                                  (con[lower], con[mirrored]), (val[lower], val[mirrored]))):
                    part.extend(values)
                mine = position_owner(row, col, bounds, xp) == s
                fold = xp.where(row[mine] == col[mine], 1.0, 2.0)  # A_i's off-diagonal entries count twice in <A_i, X>
                for part, values in zip(sampled, (con[mine], row[mine], col[mine], val[mine] * fold / row_scale)):
                    part.append(values)
            local, column, con, val = (xp.concatenate(p) for p in adjoint)
            # the entries of the shard's rows of A*(y), by row then column, and which constraints each is made of
            keys = local * n + column
            entries = sorted_unique(xp, keys)
            # the first shard, beside the constraint space, reads y itself: its columns are the constraints
            touched = None if s == 0 else sorted_unique(xp, con)
            columns, width = (con, m) if touched is None else (xp.searchsorted(touched, con), touched.size)
            At = coordinate_csr(backend.base, xp.searchsorted(entries, keys).astype(index), columns, val / row_scale,
                                (entries.size, width), index)
            del keys, local, column, con, val
            own, halo, halo_rows = own_and_halo(backend.base, entries // n, entries % n,
                                                xp.arange(entries.size, dtype=np.float64), n, lo, hi)
            gather = (own.data.astype(index), None if halo is None else halo.matrix.data.astype(index))
            del entries
            # the sampled positions in the extended rows, and the constraints x positions
            con, row, col, val = (xp.concatenate(p) for p in sampled)
            place = xp.empty(n, index)  # a row's place in the extended rows
            place[lo:hi] = xp.arange(hi - lo, dtype=index)
            place[xp.asarray(halo_rows)] = xp.arange(hi - lo, hi - lo + halo_rows.size, dtype=index)
            keys = row * n + col
            positions = sorted_unique(xp, keys)
            owned = sorted_unique(xp, con)
            A = coordinate_csr(backend.base, xp.searchsorted(owned, con),
                               xp.searchsorted(positions, keys).astype(index), val, (owned.size, positions.size), index)
            extended = (place[positions // n], place[positions % n])
            return (own, halo, halo_rows, gather, At, None if touched is None else touched.astype(index), A,
                    owned.astype(index), extended)

        super().__init__(problem, backend, layout, shards, row_scale, build, halo_precision)
        own, halo, halo_rows, self._gather, self._At, touched, self._A, owned, self._extended = self._parts
        self.S = ShardedMatrix(own, halo, HaloExchange(shards, halo_rows), (n, n))
        with shards.on(0):  # the constraints each shard touches and samples, where the constraint space lives
            self._touched_first = [None if t is None else shards.to_first(t) for t in touched]
            self._owned_first = [shards.to_first(o) for o in owned]
        # the dual slack's halo: the rows C's or A*(y)'s entries reference, and where each part's halo rows lie in it
        # (np.union1d hashes: 17.7 s for completion's two halos of 1e7 rows, m = 6e8 on 2 x H200)
        self._slack_rows = [(a if not c.size else c if not a.size else sorted_unique(np, np.concatenate((c, a))))
                            for c, a in zip(self.C.exchange.halo_rows, halo_rows)]
        self._slack_exchange = (self.S.exchange if not any(c.size for c in self.C.exchange.halo_rows)
                                else HaloExchange(shards, self._slack_rows))
        self._slack_columns = shards.each(lambda s, union, c, a: tuple(xp.asarray(np.searchsorted(union, rows))
                                                                       for rows in (c, a)),
                                          self._slack_rows, self.C.exchange.halo_rows, halo_rows)

    # ------------------------------------------------------------------ forward operator
    def _extended_rows(self, V) -> list:
        """Per shard, its rows of V and then its halo rows (those of S), side by side in one array."""
        buffers, pending = self.S.exchange.start(V)
        pending.wait()
        xp = self.backend.xp
        return self.shards.each(lambda s, own, halo: xp.concatenate((own, halo)), V, buffers)

    def sample(self, U, V=None):
        """sym(U V') at each shard's sampled positions (U U' when V is None)."""
        extended = [self._extended_rows(U)] + ([] if V is None else [self._extended_rows(V)])
        return self.shards.map(lambda s, where, u, *v: self.shards.kernels[s].sym_sample(
            *where, u, v[0] if v else None), self._extended, *extended)

    def sample_pair(self, R, D):
        """Columns sym(R D') and D D' at each shard's sampled positions, for the line search."""
        return self.shards.map(lambda s, where, r, d: self.shards.kernels[s].sym_sample_pair(*where, r, d),
                               self._extended, self._extended_rows(R), self._extended_rows(D))

    def constraints(self, w):
        """A(X) from :meth:`sample`'s (or :meth:`sample_pair`'s) values, as an m-vector (m x 2) on the first device:
        each shard's partial sums over its positions, added at its constraints."""
        shards, xp = self.shards, self.backend.xp
        parts = shards.each(lambda s, A, values: shards.kernels[s].csr_matmul(A, values), self._A, w)
        with shards.on(0):
            out = xp.zeros((self.m,) + parts[0].shape[1:])
            for s, part in enumerate(parts):
                shards.kernels[0].scatter_add(out, self._owned_first[s], shards.to_first(part))
        return out

    # ------------------------------------------------------------------ adjoint
    def adjoint_data(self, y, weight=1.0) -> list:
        """Per shard, the values of weight * A*(y) in the CSR order of S's own and halo parts (None for no halo)."""
        shards = self.shards

        def part(s, At, touched, gather):  # within on(s)
            if touched is None:  # the first shard's columns are the constraints themselves
                mine = y
            else:
                with shards.on(0):
                    gathered = y[touched]  # only the constraints the shard touches travel
                mine = shards.from_first(s, gathered)
            kernels = shards.kernels[s]
            values = kernels.csr_matmul(At, mine)
            return tuple(None if g is None else kernels.gather_values(values, g, weight) for g in gather)
        return shards.each(part, self._At, self._touched_first, self._gather)

    def adjoint_times(self, data, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """A*(y) V for the values ``data`` of :meth:`adjoint_data` (alpha A*(y) V + beta addend with an addend): S's
        parts take the values, so that the products' plans, kept with S's index arrays, stay."""
        for s, values in enumerate(data):
            self.S.own[s].data = values[0]
            if values[1] is not None:
                self.S.halo[s].matrix.data = values[1]
        return self.kernels.csr_matmul(self.S, V, out=out, alpha=alpha, addend=addend, beta=beta)

    def adjoint_matrix(self, y, weight=1.0) -> ShardedMatrix:
        """weight * A*(y) as a :class:`ShardedMatrix` of its own (S's index arrays shared)."""
        sparse = self.backend.sparse

        def parts(s, own, halo, values):
            own = sparse.csr_matrix((values[0], own.indices, own.indptr), shape=own.shape)
            if halo is None:
                return own, None
            matrix = halo.matrix
            return own, HaloPart(sparse.csr_matrix((values[1], matrix.indices, matrix.indptr), shape=matrix.shape),
                                 halo.rows)
        own, halo = zip(*self.shards.each(parts, self.S.own, self.S.halo, self.adjoint_data(y, weight=weight)))
        return ShardedMatrix(list(own), list(halo), self.S.exchange, self.S.shape)

    def slack_matrix(self, lam) -> ShardedMatrix:
        """C - A*(lam) as a :class:`ShardedMatrix` over the union of C's and A*(y)'s halos."""
        adjoint, base = self.adjoint_matrix(lam, weight=-1.0), self.backend.base
        xp = base.xp

        def parts(s, c_own, a_own, c_halo, a_halo):
            own = (c_own + a_own).tocsr()
            if c_halo is None or a_halo is None:  # the union is the other part's halo
                return own, a_halo if c_halo is None else c_halo
            pieces = []
            for part, in_union in zip((c_halo, a_halo), self._slack_columns[s]):
                coo = part.matrix.tocoo()
                local = coo.row if part.rows is None else part.rows[coo.row]
                pieces.append((local, in_union[coo.col], coo.data))
            local, columns, values = (xp.concatenate(p) for p in zip(*pieces))
            shape = (c_own.shape[0], self._slack_rows[s].size)
            matrix = base.sparse.coo_matrix((values, (local, columns)), shape=shape).tocsr()
            matrix.sum_duplicates()  # an entry of both C and A*(y) becomes one
            return own, HaloPart(matrix)
        own, halo = zip(*self.shards.each(parts, self.C.own, adjoint.own, self.C.halo, adjoint.halo))
        return ShardedMatrix(list(own), list(halo), self._slack_exchange, self.C.shape)
