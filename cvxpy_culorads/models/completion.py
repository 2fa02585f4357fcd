"""Nuclear-norm matrix completion as an SDP, with random low-rank test instances, all in O(observed entries).
Given the observed entries ``M_ij`` of an ``n1 x n2`` matrix, :func:`completion_problem` builds the SDP
``min (tr W1 + tr W2) / 2 s.t. [[W1, Y], [Y', W2]] PSD, Y_ij = M_ij`` (whose optimal value is the least
nuclear norm of a completion) as one PSD block of order ``n1 + n2``. The solver's factor ``R`` gives the
completion ``Y = R[:n1] R[n1:]'``. :func:`random_low_rank_instance` samples a rank-r matrix in factored form
with distinct observed entries, and :func:`completion_error` measures the recovery from the factors
without forming an ``n1 x n2`` matrix.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.hostpasses import strictly_increasing
from cvxpy_culorads.operators.compressed import sorted_unique
from cvxpy_culorads.problem.sdp import SDPProblem, as_index_array, as_real_array

__all__ = ["completion_problem", "random_low_rank_instance", "completion_error"]

# Above this many entries the error is computed from the factors' Gram matrices instead of densely.
_DENSE_LIMIT = 1 << 22


def completion_problem(rows, cols, values, shape: tuple[int, int], name: str = "completion") -> SDPProblem:
    """The nuclear-norm completion SDP of the entries ``M[rows[e], cols[e]] = values[e]`` (0-based).

    One PSD block ``X = [[W1, Y], [Y', W2]]`` of order ``n1 + n2`` with ``C = I/2``; observation e is the
    constraint ``X[rows[e], n1 + cols[e]] = values[e]``, stored as the coordinate ``(n1 + cols[e], rows[e])``
    with value 1/2 (its symmetric matrix has 1/2 at both mirrored positions). Entries must be distinct.
    """
    n1, n2 = (int(d) for d in shape)
    if n1 < 1 or n2 < 1:
        raise ValueError(f"shape must be two positive sizes, got {shape}")
    rows, cols = as_index_array(rows, "rows").ravel(), as_index_array(cols, "cols").ravel()
    values = as_real_array(values, "values").ravel()
    if not rows.size == cols.size == values.size:
        raise ValueError(f"rows, cols and values have {rows.size}, {cols.size} and {values.size} entries")
    if rows.size and (rows.min() < 0 or rows.max() >= n1 or cols.min() < 0 or cols.max() >= n2):
        e = int(np.argmax((rows < 0) | (rows >= n1) | (cols < 0) | (cols >= n2)))
        raise ValueError(f"observation {e} at ({rows[e]}, {cols[e]}) lies outside the {n1} x {n2} matrix")
    keys = rows * n2 + cols
    if not strictly_increasing(keys):  # entries in row-major order (as sampled here) are distinct without a sort
        keys = np.sort(keys)
        repeated = np.flatnonzero(keys[1:] == keys[:-1])
        if repeated.size:
            key = int(keys[repeated[0]])
            raise ValueError(f"entry ({key // n2}, {key % n2}) is observed more than once")
    del keys
    # coordinates made here, in the problem's stored form (lower triangle, one per constraint, in order): handed
    # over without a copy or a sort of the m entries
    C = sp.diags_array(np.full(n1 + n2, 0.5))
    A = (np.arange(values.size), n1 + cols, rows.copy(), np.full(values.size, 0.5))
    return SDPProblem(values, [C], [A], name=name, copy=False)


def _observed_entries(P: np.ndarray, Q: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``(P Q')[rows[e], cols[e]]`` for every e: the entries ``(rows[e], n1 + cols[e])`` of ``R R'`` with
    ``R = [P; Q]``, as the completion SDP's factor holds them, sampled in chunks by the CPU kernels."""
    return CpuKernels.sym_sample(rows, P.shape[0] + cols, np.vstack([P, Q]), None)


def random_low_rank_instance(n1: int, n2: int, rank: int, num_observed: int, seed: int = 0):
    """A random rank-``rank`` matrix ``M = P Q'`` and ``num_observed`` distinct entries sampled uniformly.

    The factors are Gaussian, scaled by ``rank**-1/4`` so that the entries of M have unit variance. Returns
    ``(rows, cols, values, (P, Q))`` with the entries sorted row-major; M is never formed.
    """
    if min(n1, n2, rank) < 1:
        raise ValueError(f"n1, n2 and rank must be positive, got {n1}, {n2}, {rank}")
    if not 0 <= num_observed <= n1 * n2:
        raise ValueError(f"num_observed must lie in 0..{n1 * n2}, got {num_observed}")
    rng = np.random.default_rng(seed)
    scale = rank ** -0.25
    P = scale * rng.standard_normal((n1, rank))
    Q = scale * rng.standard_normal((n2, rank))
    rows, cols = np.divmod(_distinct_sorted(rng, n1 * n2, num_observed), n2)
    return rows, cols, _observed_entries(P, Q, rows, cols), (P, Q)


def _distinct_sorted(rng, total: int, count: int) -> np.ndarray:
    """``count`` distinct integers of 0..total-1, uniformly at random, sorted. A sparse sample is drawn with
    replacement and its repeats dropped (rare: m entries of an n1 x n2 matrix), topped up and trimmed at random,
    which is uniform over the subsets by symmetry and needs one sort instead of ``choice``'s hash set (minutes
    at 3.2e8 entries)."""
    if 4 * count >= total:
        return np.sort(rng.choice(total, size=count, replace=False))
    keys = np.zeros(0, dtype=np.int64)
    while keys.size < count:
        drawn = rng.integers(0, total, size=int(1.01 * (count - keys.size)) + 16, dtype=np.int64)
        keys = sorted_unique(np, np.concatenate([keys, drawn]))
    surplus = rng.choice(keys.size, size=keys.size - count, replace=False)
    return np.delete(keys, surplus)


def completion_error(R, n1: int, M_factors, *, dense_limit: int = _DENSE_LIMIT) -> float:
    """Relative Frobenius error ``||Y - M|| / ||M||`` of the completion ``Y = R[:n1] R[n1:]'``, ``M = P Q'``.

    Matrices of at most ``dense_limit`` entries are compared densely; larger ones through
    ``||U V' - P Q'||^2 = <U'U, V'V> - 2 <U'P, V'Q> + <P'P, Q'Q>`` in O((n1 + n2) r^2) time, whose
    cancellation limits the accuracy to about 1e-8 relative.
    """
    R = np.asarray(R, dtype=np.float64)
    P, Q = (np.asarray(F, dtype=np.float64) for F in M_factors)
    if R.ndim != 2 or R.shape[0] != P.shape[0] + Q.shape[0] or P.shape[0] != n1:
        raise ValueError(f"R must have n1 + n2 = {P.shape[0] + Q.shape[0]} rows with n1 = {P.shape[0]}, "
                         f"got R of shape {R.shape} and n1 = {n1}")
    U, V = R[:n1], R[n1:]
    if P.shape[0] * Q.shape[0] <= dense_limit:
        M = P @ Q.T
        return float(np.linalg.norm(U @ V.T - M) / np.linalg.norm(M))
    norm_M2 = np.sum((P.T @ P) * (Q.T @ Q))
    error2 = np.sum((U.T @ U) * (V.T @ V)) - 2 * np.sum((U.T @ P) * (V.T @ Q)) + norm_M2
    return float(np.sqrt(max(error2, 0.0) / norm_M2))
