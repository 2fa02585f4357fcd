"""The column-compressed constraint operator: A(U V'), A*(y) V, C V and the dual slack on a device.

All PSD blocks and the nonnegative variables are stacked into one row space: block k owns rows
[offset_k, offset_k + n_k), and each nonnegative variable x_j owns one row whose factor is a
scalar (x_j = r_j^2 is a 1 x 1 PSD block of rank one). Every matrix the solver touches is then
block diagonal in that space and supported on the positions of C or of some A_i (the nonnegative
variables on the diagonal), so the operator is stored as

- ``A_fold``: CSR (m x |Omega_A|) over the positions Omega_A some A_i touches, entries of A_i with
  weight 2 off the diagonal, so that A(X) = A_fold @ X_{Omega_A} for a symmetric X given by its
  values there (all sparse products go through the kernel set's row-major CSR kernel, ``Kernels.csr_matmul`` in
  ``backends/kernels.py``: on the GPU it avoids cuSPARSE's per-call set-up, which dominates at Gset sizes);
- ``C``: the symmetric block-diagonal C in CSR (both triangles, its own pattern, fixed values), so
  that <C, U V'> = <U, C V> is a sparse product (no sampling on C's positions, which is most of
  Omega for MaxCut);
- ``At_raw``: CSR (|Omega_A| x m), the plain values of the transpose, so that At_raw @ y gives the
  values of sum_i y_i A_i on Omega_A;
- ``S``: the symmetric pattern of Omega_A (both triangles) and ``S_gather``, the position in
  Omega_A of each of its entries, so that A*(y) V is one SpMV, one gather and one row-major
  sparse x dense product over the constraints' positions only.

C and A*(y) are kept apart because the phases need them apart: phase I updates C R along the line
search (C (R + tau D) = C R + tau C D, and C D is needed for the step anyway), so a step touches C's
pattern once; the CG of phase II applies A*(.) alone. For MaxCut, where C has all the edges and
A*(y) is diagonal, a step then reads the edges once instead of three times. Memory is
O(nnz(A) + nnz(C)), never O(n^2); sym(U V') is only ever formed on Omega_A by the
sampled-product kernel. The operator knows nothing about phases or stopping rules.

Low-rank terms U diag(d) U' (``problem/lowrank.py``) stay factored: their columns, placed in the stacked row space, form
one n_rows x K factor per kind (:class:`FactoredTerms`). For the objective's, C V gains U (d * (U'V)). A
constraint's column l is one more "position" of the sampled vector, with value (U'R)_l . (U'R)_l = u_l'RR'u_l, and
one more column of ``A_fold`` (entry d_l in row con_l), so A(X) = A_fold @ w still holds; the adjoint's values
gain one entry per column (y_{con_l} d_l), which :meth:`CompressedOperator.adjoint_times` applies as U (t * (U'V)).
Without such terms every array is exactly as above.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads.backends.backend import kernels_for
from cvxpy_culorads.hostpasses import extremes, map_chunks, strictly_increasing
from cvxpy_culorads.phases.state import initial_rows, widen_factor

__all__ = ["CompressedOperator", "BlockLayout", "FactoredTerms", "LowRankUpdate", "coordinate_csr",
           "distinct_positions", "gershgorin_radii", "index_type_for", "prepare_products", "sorted_unique",
           "symmetric_times"]

DENSE_FACTOR_FILL = 0.25  # a factor of low-rank terms at least this full is kept dense (BLAS products)


@dataclass(frozen=True)
class BlockLayout:
    """Where the PSD blocks and the nonnegative variables sit in the stacked row space."""

    sizes: tuple[int, ...]
    offsets: tuple[int, ...]
    n_lp: int
    lp_offset: int
    constraints_touching: tuple[int, ...]  # m_k: constraints with a nonzero A_ik, per PSD block

    @property
    def n_rows(self) -> int:
        return self.lp_offset + self.n_lp

    @classmethod
    def of(cls, problem) -> BlockLayout:
        sizes = problem.block_sizes
        offsets = tuple(int(o) for o in np.concatenate([[0], np.cumsum(sizes)[:-1]])) if sizes else ()
        # counted with bincount, as np.unique hashes; constraints that increase (MaxCut's diagonal, completion's
        # entries) are distinct without it (decision record "host-passes-numpy")
        touching = tuple(c.con.size if strictly_increasing(c.con) else
                         int(np.count_nonzero(np.bincount(c.con, minlength=problem.m))) for c in problem.A_coords)
        return cls(sizes, offsets, problem.n_lp, int(sum(sizes)), touching)


def _joined(parts: list) -> np.ndarray:
    """np.concatenate(parts), or the one part with entries itself."""
    filled = [part for part in parts if part.size]
    return filled[0] if len(filled) == 1 else np.concatenate(parts)


def _folded_squares(rows, cols, vals) -> np.ndarray:
    """vals^2, twice where off the diagonal (the coordinate stands for two entries)."""
    out = np.empty(vals.size)
    map_chunks(lambda s: np.multiply(np.where(rows[s] == cols[s], 1.0, 2.0), np.square(vals[s]), out=out[s]), vals.size)
    return out


def constraint_squares(cons, rows, cols, vals, m: int) -> np.ndarray:
    """||A_i||_F^2 per constraint from its lower-triangle coordinates (host arrays; off-diagonals count twice).
    Where the constraints are 0..m-1 with one coordinate each (completion's), the folded squares are the answer
    (a bincount of them runs on one core: decision record "host-passes-numpy")."""
    folded = _folded_squares(rows, cols, vals)
    if cons.size == m and strictly_increasing(cons):
        return folded
    return np.bincount(cons, folded, minlength=m)


def median_row_norm(squares: np.ndarray) -> float:
    """The median of the nonzero row norms whose squares are given (1 when all are zero): the scalar by which the
    operators divide A and b (``CompressedOperator``). A chunked pass first: where the positive squares are all
    equal (completion's, MaxCut's) their root is the median, without NumPy's partial sort on one core (decision
    record "host-passes-numpy")."""
    low, high = extremes(lambda s: squares[s][squares[s] > 0], squares.size)
    if low > high:  # no positive square
        return 1.0
    return math.sqrt(low) if low == high else float(np.median(np.sqrt(squares[squares > 0])))


def index_type_for(largest: int):
    """int32 for indices and offsets up to ``largest`` where it fits (cupyx.scipy.sparse has no other), else int64."""
    return np.int32 if largest < np.iinfo(np.int32).max else np.int64


def coordinate_csr(backend, rows, cols, vals, shape, index_dtype):
    """A CSR matrix of the backend from unique coordinates (in any order), each row's entries by column."""
    xp = backend.xp
    # 64-bit keys (n^2 overflows int32), unique, so any sort gives the same order; NumPy's stable one (timsort) is
    # the fastest where keys come in sorted runs, as a row-major lower triangle does (CuPy's sorts are all stable).
    # Coordinates given in that order already (one entry per constraint, or permuted by ``distinct_positions``) skip
    # the sort: one pass instead of a sort and two gathers
    keys = rows.astype(np.int64) * shape[1] + cols
    if not bool(xp.all(keys[1:] > keys[:-1])):
        order = xp.argsort(keys, kind="stable")
        cols, vals = cols[order], vals[order]
    del keys
    counts = xp.bincount(rows, minlength=shape[0]) if rows.size else xp.zeros(shape[0], np.int64)
    indptr = xp.concatenate([xp.zeros(1, counts.dtype), xp.cumsum(counts)])
    if max(shape[1], int(indptr[-1])) >= np.iinfo(np.int32).max and not backend.wide_sparse_indices:
        raise ValueError(f"a sparse operator of shape {shape} with {int(indptr[-1])} nonzeros needs 64-bit "
                         f"indices, which the {backend.name} backend's sparse module does not support")
    return backend.sparse.csr_matrix((vals, cols.astype(index_dtype), indptr.astype(index_dtype)), shape=shape)


def distinct_positions(xp, keys):
    """(the distinct values of ``keys`` in increasing order, the index in them of each key, the stable order that
    sorts ``keys``), by one sort: a binary search of every key in the distinct values reads them at random, most of a
    CPU build's time (decision record "completion-setup")."""
    order = xp.argsort(keys, kind="stable")
    ordered = keys[order]
    first = xp.ones(keys.size, dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    index = xp.empty(keys.size, dtype=np.int64)
    index[order] = xp.cumsum(first) - 1
    return ordered[first], index, order


def sorted_unique(xp, keys):
    """The distinct values of ``keys`` in increasing order, by one sort (NumPy's ``unique`` hashes, which is slower
    on integer keys: decision record "host-passes-numpy")."""
    keys = xp.sort(keys)
    first = xp.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return keys[first]


def _symmetric_csr(backend, rows, cols, vals, n: int, index_dtype):
    """The symmetric n x n CSR matrix with the lower-triangle entries (rows >= cols) given."""
    xp = backend.xp
    off = xp.flatnonzero(rows != cols)
    return coordinate_csr(backend, xp.concatenate([rows, cols[off]]), xp.concatenate([cols, rows[off]]),
                xp.concatenate([vals, vals[off]]), (n, n), index_dtype)


class FactoredTerms:
    """The columns u_1..u_K of the low-rank terms of one kind, as an n_rows x K factor U on a backend: dense when at
    least ``DENSE_FACTOR_FILL`` of it is nonzero (theta's all-ones column: U'V is a BLAS product), else CSR with its
    transpose. Only products with U and U' are needed: sum_l t_l u_l u_l' V = U (t * (U'V))."""

    def __init__(self, backend, U, Ut=None):
        self.backend, self.U, self.Ut = backend, U, Ut
        self.dense = Ut is None
        self.shape = U.shape

    @classmethod
    def of(cls, backend, rows, cols, vals, count: int, n_rows: int) -> FactoredTerms | None:
        """From host coordinates in the stacked row space (None when there are no columns)."""
        if not count:
            return None
        factor = sp.csr_array((vals, (rows, cols)), shape=(n_rows, count))
        if factor.nnz >= DENSE_FACTOR_FILL * n_rows * count:
            return cls(backend, backend.xp.asarray(factor.toarray()))
        return cls(backend, backend.csr(factor), backend.csr(sp.csr_array(factor.T)))

    def project(self, V):
        """U' V."""
        return self.U.T @ V if self.dense else self.Ut @ V

    def expand(self, W):
        """U W."""
        return self.U @ W

    def times(self, weights, V):
        """U diag(weights) U' V."""
        projected = self.project(V)
        projected *= weights[:, None] if projected.ndim == 2 else weights
        return self.expand(projected)

    def squares(self):
        """U * U (elementwise), in U's form."""
        return self.U * self.U if self.dense else self.U.multiply(self.U)

    def absolute(self):
        return abs(self.U)

    def rows(self, start: int, stop: int) -> FactoredTerms:
        """The rows [start, stop) of U (itself when that is all of them: a one-block problem's slack)."""
        if start == 0 and stop == self.shape[0]:
            return self
        part = self.U[start:stop]
        return FactoredTerms(self.backend, part, None if self.dense else part.T.tocsr())


class LowRankUpdate:
    """A symmetric matrix on a backend given as a sparse part plus low-rank parts U diag(w) U' (``parts``: pairs of a
    :class:`FactoredTerms` and its weights w): the dual slack and the Farkas matrix of a problem with low-rank terms,
    in the few forms the eigensolvers use (products, diagonal blocks, the diagonal, dense copies of small blocks,
    Gershgorin's bound)."""

    def __init__(self, sparse, parts: list):
        self.sparse, self.parts = sparse, parts
        self.shape = sparse.shape

    def times(self, V, kernels):
        out = kernels.csr_matmul(self.sparse, V)
        for terms, weights in self.parts:
            out += terms.times(weights, V)
        return out

    def __getitem__(self, index):
        rows, cols = index
        if rows != cols or not isinstance(rows, slice) or rows.step not in (None, 1):
            raise IndexError("a LowRankUpdate gives diagonal blocks only")
        start, stop, _ = rows.indices(self.shape[0])
        return LowRankUpdate(self.sparse[rows, cols],
                             [(terms.rows(start, stop), weights) for terms, weights in self.parts])

    def diagonal(self):
        diagonal = self.sparse.diagonal()
        for terms, weights in self.parts:
            diagonal += terms.squares() @ weights
        return diagonal

    def toarray(self):
        dense = self.sparse.toarray()
        for terms, weights in self.parts:
            U = terms.U if terms.dense else terms.U.toarray()
            dense += (U * weights) @ U.T
        return dense

    def gershgorin_lower(self) -> float:
        """min_i (S_ii - r_i) with r_i >= sum_{j != i} |S_ij|: the low-rank parts' entries are bounded by
        |L_ij| <= sum_l |w_l| |u_il| |u_jl| (row sums of |U| diag(|w|) |U|')."""
        xp = self.parts[0][0].backend.xp
        ones = xp.ones(self.shape[0])
        radius = gershgorin_radii(self.sparse, xp)
        for terms, weights in self.parts:
            magnitudes, sizes = terms.absolute(), xp.abs(weights)
            radius += magnitudes @ (sizes * (magnitudes.T @ ones)) - terms.squares() @ sizes
        return float(xp.min(self.diagonal() - radius))


def gershgorin_radii(matrix, xp):
    """sum_{j != i} |M_ij| for every row i of a CSR matrix of either backend (row i's diagonal entry in column i; the
    matrix may have more columns than rows, as a shard's rows with its halo columns do)."""
    return absolute_row_sums(matrix, xp) - xp.abs(matrix.diagonal())


def absolute_row_sums(matrix, xp):
    """sum_j |M_ij| for every row i of a CSR matrix of either backend."""
    absolute = matrix.copy()
    absolute.data = xp.abs(absolute.data)
    return absolute @ xp.ones(matrix.shape[1])


def prepare_products(kernels, matrix) -> None:
    """``kernels.prepare_products`` for the eigensolvers' matrices (a :class:`LowRankUpdate`'s sparse part)."""
    kernels.prepare_products(matrix.sparse if isinstance(matrix, LowRankUpdate) else matrix)


def symmetric_times(kernels, matrix, V):
    """``matrix @ V`` for the eigensolvers' matrices: a backend CSR matrix or a :class:`LowRankUpdate`."""
    if isinstance(matrix, LowRankUpdate):
        return matrix.times(V, kernels)
    return kernels.csr_matmul(matrix, V)


def _term_squares(rows, cols, vals, count: int, con, weights, m: int) -> np.ndarray:
    """Per constraint, ||sum over its columns l of d_l u_l u_l'||_F^2 = sum_jl d_j d_l (u_j'u_l)^2 (host)."""
    if not count:
        return np.zeros(m)
    factor = sp.csr_array((vals, (rows, cols)), shape=(int(rows.max(initial=0)) + 1, count))
    gram = sp.coo_array(factor.T @ factor)
    same = con[gram.row] == con[gram.col]
    return np.bincount(con[gram.row[same]], weights[gram.row[same]] * weights[gram.col[same]] * gram.data[same] ** 2,
                       minlength=m)


def _stacked_terms(offsets, terms) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]:
    """((rows, columns, values, column count) of the low-rank terms' factors in the stacked row space, columns
    numbered block after block; their weights d) for one LowRank or None per block."""
    rows, cols, vals, weights, count = [], [], [], [], 0
    for offset, term in zip(offsets, terms):
        if term is None:
            continue
        coo = sp.coo_array(term.U)
        rows.append(coo.row.astype(np.int64) + offset), cols.append(coo.col.astype(np.int64) + count)
        vals.append(coo.data), weights.append(term.d)
        count += term.rank
    if not count:
        return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), 0), np.zeros(0)
    return (np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), count), np.concatenate(weights)


class CompressedOperator:
    """The problem's data on one backend, in the column-compressed layout described above."""

    rounds_halo = False  # see rounded_objective_times

    def __init__(self, problem, backend, rescale: bool = False, layout: BlockLayout | None = None):
        self.backend = backend
        self.kernels = kernels_for(backend)
        self.layout = layout = layout or BlockLayout.of(problem)
        self.m = problem.m
        n_rows = layout.n_rows

        # Coordinates of C and A in the stacked row space (row >= col everywhere).
        c_rows, c_cols, c_vals, a_cons, a_rows, a_cols, a_vals = [], [], [], [], [], [], []
        for off, (cr, cc, cv), coeff in zip(layout.offsets, problem.C_coords, problem.A_coords):
            c_rows.append(cr + off if off else cr), c_cols.append(cc + off if off else cc), c_vals.append(cv)
            a_cons.append(coeff.con), a_rows.append(coeff.row + off if off else coeff.row)
            a_cols.append(coeff.col + off if off else coeff.col), a_vals.append(coeff.val)
        lp_rows = np.arange(layout.lp_offset, n_rows, dtype=np.int64)
        c_rows.append(lp_rows), c_cols.append(lp_rows), c_vals.append(problem.c_lp)
        A_lp = sp.coo_array(problem.A_lp)
        a_cons.append(A_lp.row.astype(np.int64)), a_rows.append(lp_rows[A_lp.col])
        a_cols.append(lp_rows[A_lp.col]), a_vals.append(A_lp.data)
        # (one block and no nonnegative variables, as every large problem: the problem's own arrays, not copies of
        # them; nothing below writes to them)
        c_rows, c_cols, c_vals = map(_joined, (c_rows, c_cols, c_vals))
        a_cons, a_rows, a_cols, a_vals = map(_joined, (a_cons, a_rows, a_cols, a_vals))
        # l2 rescaling by one scalar, the median row norm s of A (off-diagonals count twice): A <- A / s and
        # b <- b / s keep the penalty commensurate with the objective when the coefficients are large (arch*:
        # ||A_i|| ~ 1e4, b_i ~ 2). One scalar keeps the relative row weights, which per-row scaling would change
        # (decision record "l2-rescaling-one-scalar"). The multipliers of the scaled rows are s * lambda,
        # C - A*(lambda) is unchanged, residuals need ``row_scale``.
        constraint_terms, term_weights = _stacked_terms(layout.offsets, [t.term for t in problem.A_low_rank])
        term_count = constraint_terms[3]
        term_con = np.concatenate([t.con for t in problem.A_low_rank] + [np.zeros(0, np.int64)])  # no PSD block: none
        self.row_scale = 1.0
        if rescale:
            squares = constraint_squares(a_cons, a_rows, a_cols, a_vals, self.m)
            self.row_scale = median_row_norm(squares + _term_squares(*constraint_terms, term_con, term_weights, self.m))

        # The scaling, sorting and indexing below run on the backend (on the GPU for large problems); the
        # coordinates are unique per position already (SDPProblem sums duplicates, blocks are disjoint).
        xp = backend.xp
        c_rows, c_cols, c_vals, a_cons, a_rows, a_cols, a_vals = (
            xp.asarray(v) for v in (c_rows, c_cols, c_vals, a_cons, a_rows, a_cols, a_vals))
        if rescale:
            a_vals, term_weights = a_vals / self.row_scale, term_weights / self.row_scale
        key = lambda r, c: r * n_rows + c  # noqa: E731  (a position's sort key, row-major)
        idx = index_type_for(max(n_rows, 2 * c_vals.size, 2 * a_vals.size))  # symmetric patterns
        self.C = _symmetric_csr(backend, c_rows, c_cols, c_vals, n_rows, idx)
        del c_rows, c_cols, c_vals
        objective_terms, objective_weights = _stacked_terms(layout.offsets, problem.C_low_rank)
        self.objective_terms = FactoredTerms.of(backend, *objective_terms, n_rows)
        self.objective_weights = xp.asarray(objective_weights)
        self.constraint_terms = FactoredTerms.of(backend, *constraint_terms, n_rows)

        # Omega_A, the positions some A_i touches: the only place where sym(U V') is ever sampled.
        omega, a_pos, by_position = distinct_positions(xp, key(a_rows, a_cols))
        self.rows, self.cols = (omega // n_rows).astype(idx), (omega % n_rows).astype(idx)
        del a_rows, a_cols, omega
        fold = xp.where(self.rows == self.cols, 1.0, 2.0)
        # the sampled vector: the positions of Omega_A, then one entry per low-rank constraint column
        self.positions = self.rows.size
        sampled = self.positions + term_count
        term_con, term_weights = xp.asarray(term_con), xp.asarray(term_weights)
        term_pos = self.positions + xp.arange(term_count)
        self.A_fold = coordinate_csr(backend, xp.concatenate([a_cons, term_con]), xp.concatenate([a_pos, term_pos]),
                           xp.concatenate([a_vals * fold[a_pos], term_weights]), (self.m, sampled), idx)
        # in the order that sorts the positions, ties in the problem's order (by constraint within a block): the
        # transpose's order, which coordinate_csr then need not sort again
        self.At_raw = coordinate_csr(backend, xp.concatenate([a_pos[by_position], term_pos]),
                                     xp.concatenate([a_cons[by_position], term_con]),
                                     xp.concatenate([a_vals[by_position], term_weights]), (sampled, self.m), idx)
        del a_cons, a_pos, a_vals, fold, by_position
        # w_p = sum_i A_fold[i, p]^2 per position, for phase II's preconditioner when every A_i is diagonal
        self.diagonal_weights = (xp.bincount(self.A_fold.indices, weights=self.A_fold.data ** 2,
                                             minlength=self.positions)
                                 if not term_count and bool(xp.all(self.rows == self.cols)) else None)

        # Symmetric pattern of A*(y): each off-diagonal position of Omega_A appears in both triangles.
        positions = xp.arange(self.positions)
        self.S = _symmetric_csr(backend, self.rows, self.cols, positions.astype(np.float64), n_rows, idx)
        self.pattern_size = int(self.S.data.size)
        # position in Omega_A of each entry (exact in float64), then the low-rank columns' entries
        self.S_gather = xp.concatenate([self.S.data.astype(idx), term_pos.astype(idx)])
        self.b = xp.asarray(problem.b) / self.row_scale

    # ------------------------------------------------------------------ row-space arrays
    def split(self, array):
        """A host array of the row space on the device (``distributed.ShardedSpheresOperator`` splits it)."""
        return self.backend.asarray(array)

    def initial_factor(self, width: int, ranks, seed: int):
        """The start of the low-rank phases (``state.initial_rows``)."""
        return initial_rows(self.layout, ranks, width, seed, self.backend.xp)

    def widen(self, R, ranks, new_ranks, directions=None):
        """R widened to ``new_ranks`` columns (``state.widen_factor``)."""
        return widen_factor(R, self.layout, ranks, new_ranks, self.backend.xp, directions)

    # ------------------------------------------------------------------ forward operator
    def sample(self, U, V=None):
        """sym(U V') at the positions the constraints touch (U U' when V is None), then the low-rank constraint
        columns' u_l'U V'u_l."""
        if self.constraint_terms is None:
            return self.kernels.sym_sample(self.rows, self.cols, U, V)
        out = self.backend.xp.empty(self.A_fold.shape[1])
        self.kernels.sym_sample(self.rows, self.cols, U, V, out=out[:self.positions])
        projected = self.constraint_terms.project(U)
        other = projected if V is None else self.constraint_terms.project(V)
        out[self.positions:] = (projected * other).sum(axis=1)
        return out

    def sample_pair(self, R, D):
        """Columns sym(R D') and D D' at the positions the constraints touch (then the low-rank columns'), for the
        line search."""
        if self.constraint_terms is None:
            return self.kernels.sym_sample_pair(self.rows, self.cols, R, D)
        out = self.backend.xp.empty((self.A_fold.shape[1], 2))
        self.kernels.sym_sample_pair(self.rows, self.cols, R, D, out=out[:self.positions])
        projected_R, projected_D = self.constraint_terms.project(R), self.constraint_terms.project(D)
        out[self.positions:, 0] = (projected_R * projected_D).sum(axis=1)
        out[self.positions:, 1] = (projected_D * projected_D).sum(axis=1)
        return out

    def residual_norm(self, residual) -> float:
        """||A(X) - b||_2 of the unscaled problem, from the residual of the scaled rows."""
        return self.row_scale * float(self.backend.xp.linalg.norm(residual))

    def constraints(self, w):
        """A(X) for X given by :meth:`sample` (a vector, or an N x k block of such vectors)."""
        return self.kernels.csr_matmul(self.A_fold, w)

    def objective_times(self, V, out=None):
        """C V, stored as V is: a float32 V (mixed precision) gets a float32 product whose sums were float64. C's
        values stay float64 (one copy of the data; on the GPU they are 1/r of the bytes the product reads)."""
        if out is None and V.dtype != np.float64:
            out = self.backend.xp.empty(V.shape, V.dtype)
        out = self.kernels.csr_matmul(self.C, V, out=out)
        if self.objective_terms is not None:
            out += self.objective_terms.times(self.objective_weights, V)
        return out

    def rounded_objective_times(self, V, out=None):
        """C V where a split operator may round the halo rows it exchanges (``distributed.ShardedSpheresOperator``); on
        one device there is no halo, so the exact product (``rounds_halo`` is False)."""
        return self.objective_times(V, out=out)

    def objective(self, R):
        """<C, R R'> = <R, C R> (a device scalar)."""
        return self.backend.xp.vdot(R, self.objective_times(R))

    # ------------------------------------------------------------------ adjoint
    def adjoint_data(self, y, weight=1.0):
        """The CSR values of weight * A*(y) in the symmetric pattern ``S`` of the constraints' positions."""
        return self.kernels.gather_values(self.kernels.csr_matmul(self.At_raw, y), self.S_gather, weight)

    def adjoint_times(self, data, V, out=None, **combine):
        """A*(y) V for the CSR values ``data`` of A*(y) (from :meth:`adjoint_data`); ``combine`` passes
        ``alpha``, ``addend``, ``beta`` on to the kernel for alpha A*(y) V + beta addend."""
        if self.constraint_terms is None:
            self.S.data = data
            return self.kernels.csr_matmul(self.S, V, out=out, **combine)
        self.S.data = data[:self.pattern_size]
        out = self.kernels.csr_matmul(self.S, V, out=out, **combine)
        terms = self.constraint_terms.times(data[self.pattern_size:], V)
        alpha = combine.get("alpha", 1.0)
        if alpha != 1.0:
            terms *= alpha
        out += terms
        return out

    def slack_times(self, y, c_scale, V, CV=None, weight=1.0):
        """weight * (c_scale C + A*(y)) V; ``CV`` is C V when the caller has it already."""
        if CV is None:
            CV = self.objective_times(V)
        return self.adjoint_times(self.adjoint_data(y), V, alpha=weight, addend=CV, beta=weight * c_scale)

    def normal_preconditioner(self, F):
        """The inverse of the row-block-diagonal part of I + J'J with J(Z) = A(sym(Z F')), as a function of an
        n_rows x r block, or None when some constraint has an off-diagonal entry.

        With every A_i diagonal, J(Z)_i = sum_p A_fold[i, p] <z_p, f_p> over the diagonal positions p, so the
        block of row p is I + w_p f_p f_p' (``diagonal_weights``) and Sherman-Morrison inverts it:
        z_p = v_p - f_p w_p <f_p, v_p> / (1 + w_p ||f_p||^2). When each constraint has one entry (MaxCut) these
        blocks are all of J'J, and the preconditioned CG of phase II is exact in one iteration.
        """
        if self.diagonal_weights is None:
            return None
        weights = self.diagonal_weights
        shrink = weights / (1.0 + weights * self.sample(F))

        def apply(V):
            coefficients = self.sample(V, F)
            coefficients *= shrink
            data = self.kernels.gather_values(coefficients, self.S_gather, 1.0)
            return self.adjoint_times(data, F, alpha=-1.0, addend=V, beta=1.0)
        return apply

    def slack_matrix(self, lam):
        """C - A*(lam) as an explicit symmetric block-diagonal CSR matrix (for the eigensolvers), or a
        :class:`LowRankUpdate` of one when the problem has low-rank terms."""
        data = self.adjoint_data(lam, weight=-1.0)
        self.S.data = data[:self.pattern_size]
        sparse = (self.S + self.C).tocsr()
        parts = [(terms, weights) for terms, weights in ((self.objective_terms, self.objective_weights),
                                                         (self.constraint_terms, data[self.pattern_size:]))
                 if terms is not None]
        return LowRankUpdate(sparse, parts) if parts else sparse

    def adjoint_matrix(self, y, weight=1.0):
        """weight * A*(y) as an explicit symmetric block-diagonal CSR matrix on the constraints' pattern, or a
        :class:`LowRankUpdate` of one when some constraint has low-rank terms."""
        data = self.adjoint_data(y, weight=weight)
        self.S.data = data[:self.pattern_size]
        if self.constraint_terms is None:
            return self.S.copy()
        return LowRankUpdate(self.S.copy(), [(self.constraint_terms, data[self.pattern_size:])])
