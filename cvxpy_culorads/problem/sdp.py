"""The canonical problem form solved by cvxpy_culorads, held on the host.

``SDPProblem`` stores

    minimise    sum_k <C_k, X_k> + c_lp' x
    subject to  sum_k <A_ik, X_k> + (A_lp x)_i = b_i      (i = 1..m)
                X_k PSD (k = 1..K),  x >= 0

with every symmetric matrix kept as the coordinates of its lower triangle (row >= col), so storage is
O(nnz) and never O(n^2); a C_k or A_ik may add low-rank terms U diag(d) U' (``problem/lowrank.py``), kept as
factors. It validates its input once, on construction, and raises ``ValueError`` naming the block or
constraint at fault. It knows nothing about devices or algorithms: the solver
compresses it into device operators (``operators/compressed.py``).
"""
from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads.hostpasses import abs_max, abs_sum, holds_anywhere, map_chunks, squares_sum, strictly_increasing
from cvxpy_culorads.problem.lowrank import LowRank, SparsePlusLowRank

__all__ = ["SDPProblem", "BlockCoefficients", "LowRankCoefficients", "lower_coordinates", "sum_duplicates",
           "as_index_array", "as_real_array"]


class BlockCoefficients(NamedTuple):
    """The constraint coefficients of one PSD block as coordinates.

    Entry ``e`` says ``A_{con[e], k}[row[e], col[e]] = A_{con[e], k}[col[e], row[e]] = val[e]``: each
    coordinate sets both symmetric entries, so give one triangle only (entries that name the same
    position twice are summed, as the SDPA format does). Indices are 0-based.
    """

    con: np.ndarray
    row: np.ndarray
    col: np.ndarray
    val: np.ndarray


class LowRankCoefficients(NamedTuple):
    """The low-rank constraint terms of one PSD block: column l of ``term`` (U diag(d) U') belongs to constraint
    ``con[l]``, so A_ik holds sum over {l : con[l] = i} of d_l u_l u_l' besides its coordinates."""

    con: np.ndarray
    term: LowRank | None

    @property
    def size(self) -> int:
        return self.con.size


def _split_low_rank(value):
    """(the sparse or dense part or None, the LowRank part or None) of a coefficient given as either."""
    if isinstance(value, LowRank):
        return None, value
    if isinstance(value, SparsePlusLowRank):
        return value.matrix, value.low_rank
    return value, None


def _checked_term(term: LowRank, n: int, what: str) -> LowRank:
    if not isinstance(term, LowRank):
        raise ValueError(f"{what}: expected a LowRank term, got {type(term).__name__}")
    if term.n != n:
        raise ValueError(f"{what}: the low-rank term has order {term.n}, the block {n}")
    return term


def _numeric_array(values, what: str) -> np.ndarray:
    """``values`` as a NumPy array of booleans, integers or floats; complex or non-numeric data raise a
    ``ValueError`` naming ``what`` (NumPy would drop imaginary parts and parse strings)."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError):  # ragged nesting
        raise ValueError(f"{what}: expected an array of numbers, got {reprlib.repr(values)}") from None
    if array.dtype == object and all(isinstance(v, numbers.Real) for v in array.flat):
        try:
            array = array.astype(np.float64)  # Python numbers that NumPy keeps as objects (Fraction, huge ints)
        except OverflowError:
            raise ValueError(f"{what}: contains a value that is not finite") from None
    complex_objects = array.dtype == object and any(
        isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real) for v in array.flat)
    if array.dtype.kind == "c" or complex_objects:
        raise ValueError(f"{what}: complex values are not supported")
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{what}: expected real numbers, got {reprlib.repr(values)}")
    return array


def as_real_array(values, what: str) -> np.ndarray:
    """``values`` as a float64 array of its own shape, every value finite (booleans count as 0 and 1)."""
    array = np.asarray(_numeric_array(values, what), dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: contains a value that is not finite")
    return array


def as_index_array(values, what: str) -> np.ndarray:
    """``values`` as an int64 array of its own shape. Integral floats such as 3.0 are accepted (file readers
    and arithmetic produce them); fractional or non-finite floats and booleans (a mask, not indices) are not."""
    array = _numeric_array(values, what)
    if array.dtype.kind == "b":
        raise ValueError(f"{what}: expected integers, got booleans")
    if array.dtype.kind == "f":
        integral = np.isfinite(array) & (array == np.round(array))
        if not integral.all():
            raise ValueError(f"{what}: {array[~integral][0]:g} is not an integer")
        array = np.clip(array, -1, 2**62)  # keeps the cast defined; indices that large are out of range anyway
    return array.astype(np.int64, copy=False)


def _as_real_matrix(values, what: str, shape: tuple[int, int] | None = None) -> sp.coo_array:
    """A dense or ``scipy.sparse`` matrix of finite real numbers as a COO array, of ``shape`` when given."""
    if sp.issparse(values):
        matrix = sp.coo_array(values)
        matrix.data = as_real_array(matrix.data, what)
    elif isinstance(values, (np.ndarray, list)) or hasattr(values, "__array__"):
        dense = as_real_array(values, what)
        if dense.ndim != 2:
            raise ValueError(f"{what}: expected a matrix, got an array of shape {dense.shape}")
        matrix = sp.coo_array(dense)
    else:
        raise ValueError(f"{what}: expected a dense array or a scipy.sparse matrix, got {type(values).__name__}")
    if shape is not None and matrix.shape != shape:
        raise ValueError(f"{what}: shape {matrix.shape}, expected {shape}")
    return matrix


def _per_block(values, what: str) -> list:
    """C or A as a list with one entry per PSD block."""
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{what}: expected a list with one entry per PSD block, got {type(values).__name__}")
    return list(values)


def lower_coordinates(rows, cols, vals, what: str, n: int):
    """Fold coordinates onto the lower triangle; checks types, lengths, range and finiteness."""
    rows = as_index_array(rows, f"{what} (row)").ravel()
    cols = as_index_array(cols, f"{what} (col)").ravel()
    vals = as_real_array(vals, f"{what} (val)").ravel()
    if not (rows.size == cols.size == vals.size):
        raise ValueError(f"{what}: row, col and val must have the same length")
    if rows.size and (rows.min() < 0 or cols.min() < 0 or rows.max() >= n or cols.max() >= n):
        raise ValueError(f"{what}: an index lies outside the block of size {n}")
    if not holds_anywhere(lambda s: rows[s] < cols[s], rows.size):
        return rows, cols, vals  # in the lower triangle already (large builders give them so): no new arrays
    return np.maximum(rows, cols), np.minimum(rows, cols), vals


def _without_zeros(*columns: np.ndarray, vals: np.ndarray, copy: bool = True):
    """The coordinates whose value is not zero, in new arrays (the arrays themselves when none is and not ``copy``)."""
    if not holds_anywhere(lambda s: vals[s] == 0.0, vals.size):
        return tuple(c.copy() for c in columns + (vals,)) if copy else columns + (vals,)
    keep = vals != 0.0
    return tuple(c[keep] for c in columns) + (vals[keep],)


def sum_duplicates(keys: np.ndarray, *columns: np.ndarray, vals: np.ndarray):
    """Sort by ``keys``, sum values of equal keys and drop exact zeros."""
    if keys.size and np.all(keys[1:] > keys[:-1]):  # already sorted and unique (builders that scale)
        return _without_zeros(*columns, vals=vals)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(first)
    summed = np.add.reduceat(vals[order], starts) if keys.size else vals[:0]
    keep = summed != 0.0
    picked = order[starts][keep]
    return tuple(c[picked] for c in columns) + (summed[keep],)


def _entry_keys(con: np.ndarray, row: np.ndarray, col: np.ndarray, n: int, m: int) -> np.ndarray:
    """int64 keys that order constraint entries by (con, row, col) and are equal only for equal entries."""
    if m * n * n < 2**63:
        return (con * n + row) * n + col
    # The packed key would overflow, and wrapped keys of distinct entries can coincide (n = 2**24: constraints
    # 0 and 65536 on one position): rank the entries instead.
    position = row * n + col
    ascending = (con[1:] > con[:-1]) | ((con[1:] == con[:-1]) & (position[1:] > position[:-1]))
    if ascending.all():  # already sorted and unique (MaxCut's diagonal constraints)
        return np.arange(con.size)
    order = np.lexsort((position, con))
    new = np.ones(con.size, dtype=bool)
    new[1:] = (np.diff(con[order]) != 0) | (np.diff(position[order]) != 0)
    keys = np.empty(con.size, dtype=np.int64)
    keys[order] = np.cumsum(new)
    return keys


class SDPProblem:
    r"""An SDP with PSD blocks and an optional nonnegative block, in the solver's minimisation form.

    **Arguments:**

    - ``b``: right-hand side, shape ``(m,)``.
    - ``C``: one objective matrix per PSD block, a symmetric ``scipy.sparse`` or dense ``(n_k, n_k)``
      array, or coordinates ``(row, col, val)`` of one triangle (each sets both symmetric entries, as
      in ``A``; no symmetry check is needed, so large builders use this form), or ``None`` for a zero
      objective. Its length fixes the number of PSD blocks.
    - ``A``: one :class:`BlockCoefficients` (or 4-tuple ``(con, row, col, val)``) per PSD block:
      coordinates of the constraint matrices A_ik, one triangle, 0-based.
    - ``block_sizes``: the order n_k of each PSD block (needed when a block's C is ``None``; checked
      against C otherwise).
    - ``c_lp``: objective of the nonnegative variables, shape ``(n_lp,)``, optional.
    - ``A_lp``: their constraint matrix, ``scipy.sparse`` or dense ``(m, n_lp)``, optional.
    - ``A_low_rank``: low-rank constraint terms, an iterable of ``(i, k, LowRank(U, d))``: A_ik gains U diag(d) U'
      (several terms on one (i, k) add), optional.
    - ``name``: a label used in logs.
    - ``copy``: False for a builder that hands over the coordinate arrays of ``A`` (see below).

    A C_k may also be a :class:`~cvxpy_culorads.LowRank` term or a matrix plus one (``C + LowRank(U, d)``): the
    terms stay factored (theta's objective -J = -1 1' costs n numbers, not n^2).

    Values must be finite real numbers: integer, float or boolean arrays (or Python numbers); complex data
    raise ``ValueError`` rather than losing their imaginary part. Indices and block sizes must be integers;
    integral floats such as ``3.0`` are accepted (readers and arithmetic produce them), fractional floats,
    booleans and strings are not. Errors name the block or argument at fault.

    The problem keeps its own copy of the data. A builder that hands over constraint coordinates it made for the
    problem passes ``copy=False``: where they are in the stored form already (int64 indices of the lower triangle, one
    coordinate per constraint in increasing order, no zero value: completion's observations), they are checked and
    kept as they are, neither sorted nor copied.

    Small problems can be built from lists of matrices with :meth:`from_matrices`.
    """

    def __init__(
        self,
        b,
        C: Sequence,
        A: Sequence,
        block_sizes: Sequence[int] | None = None,
        c_lp=None,
        A_lp=None,
        name: str = "sdp",
        A_low_rank=None,
        *,
        copy: bool = True,
    ):
        self.name = str(name)
        self.b = as_real_array(b, "b").ravel().copy()
        m = self.b.size
        C, A = _per_block(C, "C"), _per_block(A, "A")
        if len(A) != len(C):
            raise ValueError(f"C has {len(C)} blocks but A has {len(A)}")
        C, C_terms = map(list, zip(*(_split_low_rank(c) for c in C))) if C else ([], [])
        if block_sizes is None:
            if any(c is None and t is None or isinstance(c, tuple) for c, t in zip(C, C_terms)):
                raise ValueError("block_sizes is required when some C_k is None or given as coordinates")
            C = [c if c is None else _as_real_matrix(c, f"C of PSD block {k}") for k, c in enumerate(C)]
            block_sizes = [t.n if c is None else c.shape[0] for c, t in zip(C, C_terms)]
        sizes = as_index_array(block_sizes, "block_sizes")
        if sizes.ndim != 1:
            raise ValueError(f"block_sizes: expected one size per PSD block, got {reprlib.repr(block_sizes)}")
        if sizes.size != len(C):
            raise ValueError(f"block_sizes has {sizes.size} entries but C has {len(C)} blocks")
        self.block_sizes = tuple(sizes.tolist())
        for k, n in enumerate(self.block_sizes):
            if n < 1:
                raise ValueError(f"PSD block {k}: size must be at least 1, got {n}")

        self.C_coords: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.A_coords: list[BlockCoefficients] = []
        for k, (Ck, Ak, n) in enumerate(zip(C, A, self.block_sizes)):
            self.C_coords.append(self._objective_block(Ck, n, k))
            self.A_coords.append(self._constraint_block(Ak, n, m, k, copy))
        self.C_low_rank: list[LowRank | None] = [
            None if t is None else _checked_term(t, n, f"C of PSD block {k}") for k, (t, n) in
            enumerate(zip(C_terms, self.block_sizes))]
        self.A_low_rank: list[LowRankCoefficients] = self._low_rank_constraints(A_low_rank, m)
        self._expanded: SDPProblem | None = None  # built on first request (``expanded``)

        self.c_lp = np.zeros(0) if c_lp is None else as_real_array(c_lp, "c_lp").ravel().copy()
        self.n_lp = self.c_lp.size
        if A_lp is None and self.n_lp and m:
            raise ValueError("c_lp is given but A_lp is not")
        if A_lp is None:
            self.A_lp = sp.csr_array((m, self.n_lp))
        else:
            self.A_lp = sp.csr_array(_as_real_matrix(A_lp, "A_lp", (m, self.n_lp)))
            self.A_lp.sum_duplicates()
            self.A_lp.eliminate_zeros()
        if not self.block_sizes and not self.n_lp:
            raise ValueError("the problem has no variables: give at least one PSD or nonnegative block")
        self._check_constraints_nonempty()

    # ------------------------------------------------------------------ construction helpers
    @staticmethod
    def _objective_block(Ck, n: int, k: int):
        what = f"C of PSD block {k}"
        if Ck is None:
            empty = np.zeros(0, np.int64)
            return empty, empty.copy(), np.zeros(0)
        if isinstance(Ck, tuple):
            if len(Ck) != 3:
                raise ValueError(f"{what}: coordinates must be (row, col, val)")
            rows, cols, vals = lower_coordinates(*Ck, what, n)
            return sum_duplicates(rows * n + cols, rows, cols, vals=vals)
        Cs = _as_real_matrix(Ck, what, (n, n))
        Cs.sum_duplicates()
        asym = abs(sp.csr_array(Cs) - sp.csr_array(Cs).T)
        scale = max(1.0, float(np.abs(Cs.data).max(initial=0.0)))
        if asym.nnz and asym.max() > 1e-12 * scale:
            raise ValueError(f"{what}: the matrix is not symmetric")
        lower = Cs.row >= Cs.col
        rows, cols, vals = Cs.row[lower].astype(np.int64), Cs.col[lower].astype(np.int64), Cs.data[lower]
        keys = rows * n + cols
        return sum_duplicates(keys, rows, cols, vals=vals)

    @staticmethod
    def _constraint_block(Ak, n: int, m: int, k: int, copy: bool) -> BlockCoefficients:
        what = f"A of PSD block {k}"
        if Ak is None:
            z = np.zeros(0, np.int64)
            return BlockCoefficients(z, z.copy(), z.copy(), np.zeros(0))
        try:
            con, row, col, val = Ak
        except (TypeError, ValueError):
            raise ValueError(f"{what}: expected (con, row, col, val) coordinates") from None
        con = as_index_array(con, f"{what} (con)").ravel()
        row, col, val = lower_coordinates(row, col, val, what, n)
        if con.size != val.size:
            raise ValueError(f"{what}: con has {con.size} entries, val has {val.size}")
        if con.size and (con.min() < 0 or con.max() >= m):
            bad = int(con[(con < 0) | (con >= m)][0])
            raise ValueError(f"{what}: constraint index {bad} is outside 0..{m - 1}")
        if strictly_increasing(con):  # one coordinate per constraint (observations, diagonals): sorted and distinct
            return BlockCoefficients(*_without_zeros(con, row, col, vals=val, copy=copy))
        con, row, col, val = sum_duplicates(_entry_keys(con, row, col, n, m), con, row, col, vals=val)
        return BlockCoefficients(con, row, col, val)

    def _low_rank_constraints(self, terms, m: int) -> list[LowRankCoefficients]:
        """The terms ``(i, k, LowRank)`` grouped by block, columns stacked with their constraint index."""
        per_block: list[list] = [[] for _ in self.block_sizes]
        for entry in terms if terms is not None else ():
            try:
                i, k, term = entry
            except (TypeError, ValueError):
                raise ValueError(f"A_low_rank: expected (constraint, block, LowRank) triples, got "
                                 f"{reprlib.repr(entry)}") from None
            i, k = int(as_index_array(i, "A_low_rank (constraint)")), int(as_index_array(k, "A_low_rank (block)"))
            if not 0 <= k < self.num_blocks:
                raise ValueError(f"A_low_rank: PSD block {k} does not exist ({self.num_blocks} blocks)")
            what = f"constraint {i}, PSD block {k}"
            if not 0 <= i < m:
                raise ValueError(f"{what}: constraint index {i} is outside 0..{m - 1}")
            per_block[k].append((i, _checked_term(term, self.block_sizes[k], what)))
        empty = np.zeros(0, np.int64)
        return [LowRankCoefficients(np.concatenate([np.full(t.rank, i) for i, t in items]),
                                    LowRank(sp.hstack([t.U for _, t in items], format="csc"),
                                            np.concatenate([t.d for _, t in items])))
                if items else LowRankCoefficients(empty, None) for items in per_block]

    def _check_constraints_nonempty(self) -> None:
        touched = np.zeros(self.m, dtype=bool)
        for coeff in self.A_coords:
            touched[coeff.con] = True
        for terms in self.A_low_rank:
            touched[terms.con] = True
        if self.A_lp.nnz:
            touched[np.flatnonzero(np.diff(sp.csc_array(self.A_lp.T).indptr))] = True
        empty = np.flatnonzero(~touched & (self.b != 0))
        if empty.size:
            raise ValueError(f"constraint {int(empty[0])} has no coefficients but b = {self.b[empty[0]]}: "
                             "the problem is infeasible")

    @classmethod
    def from_matrices(cls, C: Sequence, A: Sequence[Sequence], b, c_lp=None, A_lp=None, name="sdp"):
        """Build from dense or sparse matrices: ``A[i][k]`` is A_ik (``None`` for zero); for small problems. A C_k or
        an A_ik may be a :class:`~cvxpy_culorads.LowRank` term or a matrix plus one."""
        C_parts = [_split_low_rank(c) for c in _per_block(C, "C")]
        sizes = [t.n if c is None and t is not None else _as_real_matrix(c, f"C of PSD block {k}").shape[0]
                 for k, (c, t) in enumerate(C_parts)]
        C = [c if t is None else (t if c is None else SparsePlusLowRank(c, t)) for c, t in C_parts]
        low_rank = []
        A = [_per_block(row, f"A[{i}]") for i, row in enumerate(_per_block(A, "A"))]
        for i, row in enumerate(A):
            if len(row) != len(C):
                raise ValueError(f"A[{i}] has {len(row)} entries but C has {len(C)} blocks")
        m = len(A)
        coords = []
        for k, n in enumerate(sizes):
            parts = [[], [], [], []]
            for i in range(m):
                matrix, term = _split_low_rank(A[i][k])
                if term is not None:
                    low_rank.append((i, k, term))
                if matrix is None:
                    continue
                Aik = _as_real_matrix(matrix, f"constraint {i}, PSD block {k}", (n, n))
                dense_check = sp.csr_array(Aik)
                if dense_check.nnz and abs(dense_check - dense_check.T).max() > 1e-12 * max(
                        1.0, np.abs(Aik.data).max()):
                    raise ValueError(f"constraint {i}, PSD block {k}: the matrix is not symmetric")
                lower = Aik.row >= Aik.col
                parts[0].append(np.full(int(lower.sum()), i))
                parts[1].append(Aik.row[lower])
                parts[2].append(Aik.col[lower])
                parts[3].append(Aik.data[lower])
            coords.append(tuple(np.concatenate(p) if p else np.zeros(0) for p in parts))
        return cls(b, C, coords, block_sizes=sizes, c_lp=c_lp, A_lp=A_lp, name=name, A_low_rank=low_rank)

    # ------------------------------------------------------------------ sizes and norms
    @property
    def m(self) -> int:
        return self.b.size

    @property
    def num_blocks(self) -> int:
        return len(self.block_sizes)

    @property
    def nnz(self) -> int:
        """Stored constraint coefficients: coordinates, and the factors' entries of low-rank terms."""
        return (sum(c.val.size for c in self.A_coords) + self.A_lp.nnz
                + sum(t.term.U.nnz for t in self.A_low_rank if t.term is not None))

    @property
    def has_low_rank(self) -> bool:
        return any(t is not None for t in self.C_low_rank) or any(t.term is not None for t in self.A_low_rank)

    def objective_matrix(self, k: int) -> sp.csr_array:
        """C_k as a full symmetric sparse matrix (low-rank terms expanded)."""
        return self._symmetric(*self.C_coords[k], self.block_sizes[k]) + self._expanded_term(self.C_low_rank[k])

    def constraint_matrix(self, i: int, k: int) -> sp.csr_array:
        """A_ik as a full symmetric sparse matrix (low-rank terms expanded; for tests and small problems)."""
        c = self.A_coords[k]
        pick = c.con == i
        return (self._symmetric(c.row[pick], c.col[pick], c.val[pick], self.block_sizes[k])
                + self._expanded_term(self._constraint_term(i, k)))

    def slack_matrix(self, k: int, lam) -> sp.csr_array:
        """S_k = C_k - sum_i lam_i A_ik as a full symmetric sparse matrix (low-rank terms expanded)."""
        rows, cols, vals = self.C_coords[k]
        c = self.A_coords[k]
        lam = np.asarray(lam)
        sparse = self._symmetric(np.concatenate([rows, c.row]), np.concatenate([cols, c.col]),
                                 np.concatenate([vals, -lam[c.con] * c.val]), self.block_sizes[k])
        terms = self.A_low_rank[k]
        weighted = None if terms.term is None else LowRank(terms.term.U, -lam[terms.con] * terms.term.d)
        return sparse + self._expanded_term(self.C_low_rank[k]) + self._expanded_term(weighted)

    def _constraint_term(self, i: int, k: int) -> LowRank | None:
        terms = self.A_low_rank[k]
        pick = np.flatnonzero(terms.con == i)
        return LowRank(terms.term.U[:, pick], terms.term.d[pick]) if pick.size else None

    def low_rank_constraint_terms(self) -> list[tuple[int, int, LowRank]]:
        """The low-rank constraint terms as the constructor's ``A_low_rank`` takes them: (i, k, LowRank) per
        constraint and block."""
        out = []
        for k, terms in enumerate(self.A_low_rank):
            order = np.argsort(terms.con, kind="stable")  # one sort, not one scan of the columns per constraint
            starts = np.flatnonzero(np.r_[True, np.diff(terms.con[order]) != 0]) if order.size else order
            for columns in np.split(order, starts[1:]) if order.size else ():
                out.append((int(terms.con[columns[0]]), k, LowRank(terms.term.U[:, columns], terms.term.d[columns])))
        return out

    @staticmethod
    def _expanded_term(term: LowRank | None):
        return 0 if term is None else sp.csr_array(term.toarray())

    def expanded(self) -> SDPProblem:
        """The same problem with every low-rank term expanded into coordinates (itself when it has none): O(n^2)
        entries per term, for the methods that need explicit entries (the interior-point method, SDPA files)."""
        if not self.has_low_rank:
            return self
        if self._expanded is not None:
            return self._expanded
        C, A = [], []
        for k in range(self.num_blocks):
            C.append(self._with_term(self.C_coords[k], self.C_low_rank[k]))
            coeff = self.A_coords[k]
            A.append([(coeff.con, coeff.row, coeff.col, coeff.val)])
        for i, k, term in self.low_rank_constraint_terms():
            rows, cols, vals = term.lower_coordinates()
            A[k].append((np.full(rows.size, i), rows, cols, vals))
        A = [tuple(map(np.concatenate, zip(*parts))) for parts in A]
        self._expanded = SDPProblem(self.b, C, A, block_sizes=self.block_sizes, c_lp=self.c_lp, A_lp=self.A_lp,
                                    name=self.name)
        return self._expanded

    @staticmethod
    def _with_term(coords, term: LowRank | None):
        if term is None:
            return coords
        return tuple(map(np.concatenate, zip(coords, term.lower_coordinates())))

    @staticmethod
    def _symmetric(rows, cols, vals, n) -> sp.csr_array:
        off = rows != cols
        r = np.concatenate([rows, cols[off]])
        c = np.concatenate([cols, rows[off]])
        v = np.concatenate([vals, vals[off]])
        return sp.csr_array((v, (r, c)), shape=(n, n))

    @property
    def b_norm_1(self) -> float:
        return abs_sum(self.b)

    @property
    def b_norm_2(self) -> float:
        return math.sqrt(squares_sum(self.b))

    @property
    def b_norm_inf(self) -> float:
        return abs_max(self.b)

    @property
    def C_norm_1(self) -> float:
        """Sum of |entries| of all C_k (full symmetric matrices) plus ||c_lp||_1; low-rank terms add the bound of
        :meth:`LowRank.abs_sum_bound` (exact for one column, as theta's J)."""
        def full(r, c, v):  # the lower triangle's entries off the diagonal count twice
            return sum(map_chunks(lambda s: 2.0 * float(np.abs(v[s]).sum()) - float(np.abs(v[s][r[s] == c[s]]).sum()),
                                  v.size))
        terms = sum(t.abs_sum_bound() for t in self.C_low_rank if t is not None)
        return sum(full(*coords) for coords in self.C_coords) + terms + abs_sum(self.c_lp)

    @property
    def C_norm_inf(self) -> float:
        """The largest |entry| of the C_k and c_lp; a block with a low-rank term counts the sum of its parts' largest
        entries (an upper bound that never expands the term)."""
        vals = [abs_max(v) + (0.0 if t is None else t.max_abs_entry())
                for (_, _, v), t in zip(self.C_coords, self.C_low_rank)] + [abs_max(self.c_lp)]
        return float(max(vals))

    @property
    def A_norm_inf(self) -> float:
        """The largest |coefficient| of the constraints (a low-rank term counts its largest entry, unexpanded)."""
        return float(max([abs_max(c.val) for c in self.A_coords] + [abs_max(self.A_lp.data)]
                         + [t.term.max_abs_entry() for t in self.A_low_rank if t.term is not None]))

    def __repr__(self) -> str:
        return (f"SDPProblem(name={self.name!r}, m={self.m}, psd_blocks={list(self.block_sizes)}, "
                f"n_lp={self.n_lp}, nnz(A)={self.nnz}{', low-rank terms' if self.has_low_rank else ''})")
