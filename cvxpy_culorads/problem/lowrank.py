"""Low-rank data terms: a symmetric matrix U diag(d) U' kept as its factors (host, data model).

Some SDPs have dense data of low rank: the Lovasz theta function's objective <J, X> (J = 1 1', rank one), the
all-ones constraint of graph partitioning (gpp in SDPLIB), a sum of a few outer products. As coordinates such a
term costs n^2 entries, and every product with it n^2 r flops; as factors it costs O(nnz(U)) memory and the
operator never expands it: <U D U', R R'> = tr(D (U'R)'(U'R)), (U D U') V = U (D (U'V)). ``LowRank(U, d)`` is
such a term; ``matrix + LowRank(...)`` (a sparse or dense matrix plus terms) is a :class:`SparsePlusLowRank`.
:class:`~cvxpy_culorads.SDPProblem` accepts either wherever a block's objective matrix or a constraint's
coefficient matrix goes. This is a leaf module: it knows nothing of problems, devices or algorithms.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

__all__ = ["LowRank", "SparsePlusLowRank"]


def _finite_real(values, what: str) -> np.ndarray:
    if np.iscomplexobj(values):
        raise ValueError(f"{what}: complex values are not supported")
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected real numbers") from None
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: contains a value that is not finite")
    return array


class LowRank:
    """The symmetric n x n matrix U diag(d) U' = sum_l d_l u_l u_l', kept as its factors.

    **Arguments:**

    - ``U``: the n x k factor, a dense array or a ``scipy.sparse`` matrix (a vector is one column, k = 1);
    - ``d``: the k weights (signs allowed), default all ones.

    ``U`` is held as a ``scipy.sparse`` CSC array with its zeros dropped, so the memory is O(nnz(U) + k) whatever
    n. Non-finite or complex values, k = 0 and a ``d`` of the wrong length raise ``ValueError``. Terms add
    (``LowRank + LowRank`` stacks the factors), scale by a number (``-LowRank(ones)``), and add to a matrix
    (``C + LowRank(...)`` or ``C - LowRank(...)``, a :class:`SparsePlusLowRank`).
    """

    __array_ufunc__ = None  # ``ndarray + LowRank`` defers to __radd__ instead of broadcasting over the object

    def __init__(self, U, d=None):
        if sp.issparse(U):
            _finite_real(U.data, "LowRank: U")
            factor = sp.csc_array(U, dtype=np.float64)
        else:
            dense = _finite_real(U, "LowRank: U")
            if dense.ndim == 1:
                dense = dense[:, None]
            if dense.ndim != 2:
                raise ValueError(f"LowRank: U must be an n x k matrix or a vector, got shape {dense.shape}")
            factor = sp.csc_array(dense)
        n, k = factor.shape
        if k == 0 or n == 0:
            raise ValueError(f"LowRank: U has shape {factor.shape}; it needs at least one row and one column")
        weights = np.ones(k) if d is None else _finite_real(d, "LowRank: d").ravel()
        if weights.size != k:
            raise ValueError(f"LowRank: d has {weights.size} entries but U has {k} columns")
        factor.eliminate_zeros()
        self.U = factor
        self.d = weights.copy()

    @property
    def n(self) -> int:
        return self.U.shape[0]

    @property
    def rank(self) -> int:
        """k, the number of columns (an upper bound on the rank)."""
        return self.U.shape[1]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, other):
        if isinstance(other, LowRank):
            if other.n != self.n:
                raise ValueError(f"LowRank: cannot add terms of orders {self.n} and {other.n}")
            return LowRank(sp.hstack([self.U, other.U], format="csc"), np.concatenate([self.d, other.d]))
        if isinstance(other, SparsePlusLowRank):
            return other + self
        if isinstance(other, numbers.Number) or other is None:
            return NotImplemented
        return SparsePlusLowRank(other, self)

    __radd__ = __add__

    def __sub__(self, other):
        return self + (-other) if isinstance(other, LowRank) else NotImplemented

    def __rsub__(self, other):
        return other + (-self)

    def __mul__(self, scale):
        if not isinstance(scale, numbers.Real):
            return NotImplemented
        return LowRank(self.U, float(scale) * self.d)

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1.0

    # ------------------------------------------------------------------ views of the matrix
    def diagonal(self) -> np.ndarray:
        """The diagonal, sum_l d_l u_il^2."""
        return np.asarray(self.U.multiply(self.U) @ self.d).ravel()

    def toarray(self) -> np.ndarray:
        """The dense n x n matrix (for small n: tests, the interior-point method, SDPA files)."""
        U = self.U.toarray()
        return (U * self.d) @ U.T

    def lower_coordinates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, col, val) of the nonzero entries on and below the diagonal: the term expanded, O(n^2) for a
        dense U; only for the places that need coordinates (SDPA files, the interior-point method)."""
        dense = sp.coo_array(np.tril(self.toarray()))
        return dense.row.astype(np.int64), dense.col.astype(np.int64), dense.data

    def max_abs_entry(self) -> float:
        """An upper bound on the largest |entry|, max_i sum_l |d_l| u_il^2 (Cauchy-Schwarz; exact when d >= 0)."""
        return float(np.abs(self.U.multiply(self.U) @ np.abs(self.d)).max(initial=0.0))

    def abs_sum_bound(self) -> float:
        """An upper bound on the sum of |entries|, sum_l |d_l| (sum_i |u_il|)^2 (exact for one column)."""
        column_sums = np.asarray(abs(self.U).sum(axis=0)).ravel()
        return float(np.abs(self.d) @ column_sums ** 2)

    def frobenius_squared(self) -> float:
        """||U diag(d) U'||_F^2 = sum_jl d_j d_l (u_j'u_l)^2, from the k x k Gram matrix."""
        gram = (self.U.T @ self.U).toarray()
        return float(self.d @ (gram ** 2) @ self.d)

    def __repr__(self) -> str:
        return f"LowRank(n={self.n}, k={self.rank}, nnz(U)={self.U.nnz})"


class SparsePlusLowRank:
    """A matrix (dense or ``scipy.sparse``, symmetric) plus a :class:`LowRank` term, as ``matrix + LowRank(U, d)``
    writes it; adding further terms stacks their factors."""

    __array_ufunc__ = None

    def __init__(self, matrix, low_rank: LowRank):
        if not isinstance(low_rank, LowRank):
            raise ValueError(f"SparsePlusLowRank: expected a LowRank term, got {type(low_rank).__name__}")
        self.matrix = matrix
        self.low_rank = low_rank

    def __add__(self, other):
        if isinstance(other, LowRank):
            return SparsePlusLowRank(self.matrix, self.low_rank + other)
        return NotImplemented

    __radd__ = __add__

    def __repr__(self) -> str:
        shape = getattr(self.matrix, "shape", "?")
        return f"SparsePlusLowRank(matrix of shape {shape}, {self.low_rank!r})"
