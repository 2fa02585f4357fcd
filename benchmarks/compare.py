"""Side-by-side runs: the same :class:`~cvxpy_culorads.SDPProblem` solved through CVXPY by another solver.

``to_cvxpy(problem)`` states the problem with one PSD variable per block and one nonnegative vector,
each block's objective and constraints as a sparse matrix acting on ``vec(X_k)`` (so canonicalisation
costs O(nnz), not a Python loop over constraints); ``solve_with(problem, solver)`` times the solve and
returns the objective in the solver's minimisation form. CVXPY and the solver must be installed.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

__all__ = ["to_cvxpy", "solve_with", "PEER_MAX_N"]

# The largest PSD order each peer is asked to solve. Clarabel, an interior-point method, factors a
# dense block of the PSD cone's scaling, (n(n+1)/2)^2 doubles: 1 GB at n = 150, 800 GB at n = 800 (Gset
# G1, measured: "memory allocation of 821249280000 bytes failed"). SCS needs O(n^2) memory and an
# eigendecomposition of an n x n matrix per iteration.
PEER_MAX_N = {"scs": 2000, "clarabel": 150}


def _vec_operator(rows, cols, vals, cons, n: int, m: int) -> sp.csr_array:
    """The m x n^2 matrix M with (M vec(X))_i = <A_i, X> for symmetric A_i given by one triangle."""
    off = rows != cols
    positions = np.concatenate([rows + cols * n, (cols + rows * n)[off]])
    return sp.csr_array((np.concatenate([vals, vals[off]]), (np.concatenate([cons, cons[off]]), positions)),
                        shape=(m, n * n))


def to_cvxpy(problem):
    """The CVXPY problem of ``problem`` and its variables (PSD blocks, then the nonnegative vector or None)."""
    import cvxpy as cp
    blocks = [cp.Variable((n, n), PSD=True) for n in problem.block_sizes]
    x = cp.Variable(problem.n_lp, nonneg=True) if problem.n_lp else None
    objective, lhs = 0, 0
    for X, n, (cr, cc, cv), A in zip(blocks, problem.block_sizes, problem.C_coords, problem.A_coords):
        vec = cp.vec(X, order="F")
        objective += _vec_operator(cr, cc, cv, np.zeros(cr.size, dtype=np.int64), n, 1) @ vec
        lhs += _vec_operator(A.row, A.col, A.val, A.con, n, problem.m) @ vec
    if x is not None:
        objective += problem.c_lp @ x
        lhs += sp.csr_array(problem.A_lp) @ x
    return cp.Problem(cp.Minimize(cp.sum(objective)), [lhs == problem.b]), blocks + [x]


def solve_with(problem, solver: str, **options) -> dict:
    """Solve ``problem`` with a CVXPY solver; returns seconds (canonicalisation included), value, status."""
    cvx, _ = to_cvxpy(problem)
    start = time.perf_counter()
    try:
        cvx.solve(solver=solver, **options)
        status, value = cvx.status, cvx.value
    except Exception as exc:  # a failing peer is a result to report, not a reason to stop the benchmark
        status, value = f"error: {type(exc).__name__}", float("nan")
    return dict(seconds=time.perf_counter() - start, value=value, status=status)
