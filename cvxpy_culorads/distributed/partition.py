"""The partition of the row space into shards: contiguous ranges of the problem's row order, and how much of C
crosses them.

Shard s holds the rows [bounds[s], bounds[s + 1]) of every row-space array. The bounds balance rows plus nonzeros
(:func:`shard_bounds` from counts per row, :func:`symmetric_bounds` from the coordinates without a count per row,
:func:`balanced_bounds` for any weights). A shard's *halo* is the set of rows of other shards that its rows of C
reference (:func:`halo_of`, :func:`halo_share`, :func:`coordinate_halo_share`): a graph numbered along a
locality-preserving order (the benchmarks' Z-order) keeps most of C inside the shards, and :class:`RowOrder`
renumbers a problem whose given order does not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from cvxpy_culorads.hostpasses import holds_anywhere, map_chunks
from cvxpy_culorads.problem.sdp import BlockCoefficients, SDPProblem

__all__ = ["RowOrder", "balanced_bounds", "coordinate_halo_share", "halo_of", "halo_share", "referenced_rows",
           "shard_bounds", "symmetric_bounds"]

HALO_SHARE_KEPT = 0.1  # shard_order="auto" keeps the given order while each shard's halo is within this share of it
BOUND_BUCKETS = 1 << 12  # about as many runs of rows as the shards' bounds are balanced over (``symmetric_bounds``)
BOUND_SAMPLE = 1 << 24  # at most as many entries of each coordinate list as they are counted on


def shard_bounds(row_counts, k: int) -> np.ndarray:
    """The bounds of k shards of the rows of a matrix with ``row_counts`` entries per row: rows plus nonzeros
    balanced."""
    return balanced_bounds(1.0 + np.asarray(row_counts), k)


def halo_of(C, lo: int, hi: int) -> np.ndarray:
    """The rows outside [lo, hi) that the CSR matrix ``C``'s rows lo..hi-1 reference, ascending."""
    columns = C.indices[C.indptr[lo]:C.indptr[hi]]
    return referenced_rows(columns[(columns < lo) | (columns >= hi)], C.shape[0])


def referenced_rows(columns, n: int, xp=np):
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
    """A renumbering of a one-block problem's rows that keeps more of C inside the shards
    (``SplitSettings.shard_order``): row p of the renumbered problem is row ``order[p]`` of the given one. Reverse
    Cuthill-McKee on C's pattern (O(nnz) on the host) puts neighbours at nearby numbers, so that contiguous shards hold
    them together; a graph with no locality to find (a random one) gains little, and the checks of :meth:`of` then
    keep the given order (why and what it gains: docs/decisions/distributed-row-order.md). The renumbered problem has
    the same constraints, multipliers and optimal value; :meth:`restore` maps its factor back."""

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
        if k <= 1 or settings.split.shard_order == "given" or problem.num_blocks != 1 or problem.n_lp \
                or problem.has_low_rank or problem.block_sizes[0] <= k:
            return None
        coeff = problem.A_coords[0]
        if holds_anywhere(lambda s: coeff.row[s] != coeff.col[s], coeff.row.size):
            return None
        before = coordinate_halo_share(problem.C_coords[0], problem.block_sizes[0], k)
        auto = settings.split.shard_order == "auto"
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
    """What a renumbering along breadth-first levels can make of a shard's halo, from one breadth-first search (far
    cheaper than reverse Cuthill-McKee: docs/decisions/distributed-row-order.md): a cut between contiguous shards of
    such a numbering leaves at most the two levels beside it in the halo, so twice the largest level over a shard's
    rows. A random graph (levels of ~40 % of n) has no locality to find; a geometric one has levels of ~sqrt(n). The
    search stops at the first level whose prediction exceeds ``enough`` (the caller's answer is known then; on a
    random graph that level comes early) and returns that prediction; run to its end, it returns 0 when it reached
    less than half of the rows (several components: only reverse Cuthill-McKee itself can tell)."""
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
    Exact where every entry is sampled and every run is one row; a bound off by a run or by the sample's error moves a
    few thousandths of a shard's work. (Why a sample on the host: docs/decisions/distributed-shard-bounds.md.)"""
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
