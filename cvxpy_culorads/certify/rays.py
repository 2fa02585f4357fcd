"""Rays that prove a problem infeasible or unbounded: the auxiliary problems whose solutions are the rays, and the
independent check a ray passes before a solve may claim INFEASIBLE or UNBOUNDED.

For ``min <C, X> + c'x s.t. A(X) + A_lp x = b, X PSD, x >= 0`` (``SDPProblem``):

- a **Farkas ray** y has b'y > 0, -A*(y) PSD and -A_lp'y >= 0: every feasible point would have b'y =
  <A*(y), X> + (A_lp'y)'x <= 0, so none exists. :func:`farkas_problem` is the problem's phase-one form,
  min ||r||_1 over A(X) + A_lp x + r = b (r = u - v, u, v >= 0, C = 0): always feasible and bounded below, and its
  multipliers solve max b'y s.t. -A*(y) PSD, -A_lp'y >= 0, |y_i| <= 1, so a positive optimum is a Farkas ray.
- a **primal ray** (D, x) has D PSD, x >= 0, A(D) + A_lp x = 0 and <C, D> + c'x < 0: added to any feasible point it
  lowers the objective without end (CVXPY's ``unbounded``, as Clarabel's and SCS's, means this dual infeasibility).
  :func:`ray_problem` minimises <C, D> + c'x over those rays with sum tr D + sum x <= 1: always feasible (D = 0)
  and compact, so a negative optimum is a primal ray.

:func:`check_farkas` and :func:`check_ray` measure a candidate on the host from the problem's data alone (dense
eigenvalues of each A_k*(y), products of the factor's rows), whoever produced it. A Farkas ray, scaled to b'y = 1,
passes when the worst negative eigenvalue of -A_k*(y) and the worst positive entry of A_lp'y, times the problem's
natural size 1 + ||b||_inf / ||A||_inf, are within ``tol``: a feasible point would need tr X + sum x beyond 1/tol
times that size. A primal ray, scaled to unit size, passes when ||A(D) + A_lp x||_inf <= tol ||A||_inf while
<C, D> + c'x <= -``descent`` ||C||_inf (the caller passes ``reduced_tol``: the objective must fall by a clear margin,
not by rounding).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.certify.measures import ProblemNorms
from cvxpy_culorads.problem.lowrank import SparsePlusLowRank
from cvxpy_culorads.problem.sdp import SDPProblem
from cvxpy_culorads.result import Certificate

__all__ = ["farkas_problem", "ray_problem", "check_farkas", "check_ray", "CHECK_MAX_ORDER"]

# blocks up to this order get the dense eigenvalues the Farkas check rests on (a ray of larger blocks is not checked)
CHECK_MAX_ORDER = 2000


def farkas_problem(problem: SDPProblem) -> SDPProblem:
    """min sum(u + v) s.t. A(X) + A_lp x + u - v = b, X PSD, x, u, v >= 0: its multipliers are the Farkas ray."""
    m = problem.m
    identity = sp.identity(m, format="csr")
    return SDPProblem(problem.b, [None] * problem.num_blocks, _coefficients(problem), block_sizes=problem.block_sizes,
                      c_lp=np.concatenate([np.zeros(problem.n_lp), np.ones(2 * m)]),
                      A_lp=sp.hstack([problem.A_lp, identity, -identity], format="csr"),
                      A_low_rank=problem.low_rank_constraint_terms(), name=f"farkas({problem.name})")


def ray_problem(problem: SDPProblem) -> SDPProblem:
    """min <C, D> + c'x s.t. A(D) + A_lp x = 0, sum tr D + sum x + t = 1, D PSD, x, t >= 0: a negative optimum is
    a primal ray (the last constraint is number m)."""
    m = problem.m
    coefficients = []
    for (con, row, col, val), n in zip(_coefficients(problem), problem.block_sizes):
        diagonal = np.arange(n)
        coefficients.append((np.concatenate([con, np.full(n, m)]), np.concatenate([row, diagonal]),
                             np.concatenate([col, diagonal]), np.concatenate([val, np.ones(n)])))
    objectives = [coords if term is None else SparsePlusLowRank(coords, term)
                  for coords, term in zip(problem.C_coords, problem.C_low_rank)]
    A_lp = sp.vstack([sp.hstack([problem.A_lp, sp.csr_array((m, 1))]), np.ones((1, problem.n_lp + 1))], format="csr")
    return SDPProblem(np.append(np.zeros(m), 1.0), objectives, coefficients, block_sizes=problem.block_sizes,
                      c_lp=np.append(problem.c_lp, 0.0), A_lp=A_lp, A_low_rank=problem.low_rank_constraint_terms(),
                      name=f"ray({problem.name})")


def _coefficients(problem: SDPProblem) -> list[tuple]:
    return [(c.con, c.row, c.col, c.val) for c in problem.A_coords]


def check_farkas(problem: SDPProblem, y, tol: float) -> Certificate | None:
    """The :class:`Certificate` of the Farkas ray ``y`` scaled to b'y = 1 when it passes (module docstring), else
    None (also when b'y <= 0, y is not finite, or a block is larger than ``CHECK_MAX_ORDER``)."""
    y = np.asarray(y, dtype=np.float64)
    reach = float(problem.b @ y) if y.size else 0.0
    if not (y.size and math.isfinite(reach) and reach > 0.0 and np.isfinite(y).all()):
        return None
    if any(n > CHECK_MAX_ORDER for n in problem.block_sizes):
        return None
    y = y / reach
    worst = 0.0
    for k in range(problem.num_blocks):
        adjoint = (problem.objective_matrix(k) - problem.slack_matrix(k, y)).toarray()  # A_k*(y)
        worst = max(worst, float(np.linalg.eigvalsh(0.5 * (adjoint + adjoint.T))[-1]))
    if problem.n_lp:
        worst = max(worst, float((problem.A_lp.T @ y).max()))
    norms = ProblemNorms.of(problem)
    violation = worst * (1.0 + norms.b_inf / max(norms.A_inf, np.finfo(float).tiny))
    if not violation <= tol:
        return None
    return Certificate("infeasible", y, (), np.zeros(0), max(violation, 0.0))


def check_ray(problem: SDPProblem, factors, x_lp, tol: float, descent: float) -> Certificate | None:
    """The :class:`Certificate` of the primal ray D_k = R_k R_k', x (``factors``, ``x_lp``) scaled to unit size when
    it passes (module docstring), else None."""
    factors = [np.asarray(R, dtype=np.float64) for R in factors]
    x_lp = np.asarray(x_lp, dtype=np.float64)
    size = sum(float(np.sum(R * R)) for R in factors) + float(x_lp.sum())
    if not (math.isfinite(size) and size > 0.0) or (x_lp < 0.0).any():
        return None
    scale = 1.0 / math.sqrt(size)
    factors, x_lp = [R * scale for R in factors], x_lp / size
    residual = np.asarray(problem.A_lp @ x_lp, dtype=np.float64)
    objective = float(problem.c_lp @ x_lp)
    for k, R in enumerate(factors):
        rows, cols, vals = problem.C_coords[k]
        objective += _pairing(rows, cols, vals, R) + _low_rank_pairing(problem.C_low_rank[k], R)
        coeff = problem.A_coords[k]
        residual = residual + np.bincount(coeff.con, _entry_products(coeff.row, coeff.col, coeff.val, R),
                                          minlength=problem.m)
        terms = problem.A_low_rank[k]
        if terms.term is not None:
            residual = residual + np.bincount(terms.con, terms.term.d * _column_squares(terms.term.U, R),
                                              minlength=problem.m)
    norms = ProblemNorms.of(problem)
    violation = float(np.abs(residual).max(initial=0.0)) / max(norms.A_inf, np.finfo(float).tiny)
    if not (violation <= tol and objective <= -descent * max(norms.C_inf, np.finfo(float).tiny)):
        return None
    return Certificate("unbounded", np.zeros(0), tuple(factors), x_lp, violation, objective)


def _entry_products(rows, cols, vals, R) -> np.ndarray:
    """val * (R R')_{row, col}, counted twice off the diagonal (each coordinate sets both symmetric entries)."""
    return vals * CpuKernels.sym_sample(rows, cols, R, None) * np.where(rows == cols, 1.0, 2.0)


def _pairing(rows, cols, vals, R) -> float:
    return float(_entry_products(rows, cols, vals, R).sum())


def _column_squares(U, R) -> np.ndarray:
    """||R'u_j||^2 per column u_j of U: <u_j u_j', R R'>."""
    projected = np.asarray(sp.csc_array(U).T @ R) if sp.issparse(U) else np.asarray(U).T @ R
    return np.sum(projected * projected, axis=1)


def _low_rank_pairing(term, R) -> float:
    return 0.0 if term is None else float(term.d @ _column_squares(term.U, R))
