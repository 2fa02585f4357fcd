"""Units do not change the answer: the same small SDPs (known optima) written with C, or A and b together, scaled by
10^k for k = -12..12 end with the same status and the same objective relative to the scale, with the dual bound,
the multipliers and the residuals checked in the user's units; data that are zero or subnormal say so."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import LowRank, SDPProblem, Status, solve
from cvxpy_culorads.models import cycle_graph, cycle_theta

TOL = 1e-5
# the certified gap is relative to 1 + |primal| + |bound| in the scaled units, where the objective lies between a
# quarter and a few times its unit: the objective relative to its optimum is within a few tol
RELATIVE = 10 * TOL
SMALL = np.array([[1.0, 0.2], [0.2, 2.0]])
SMALL_OPTIMUM = 1.5 - math.sqrt(0.25 + 0.04)  # lambda_min of SMALL: min <C, X> s.t. tr X = 1


def _small(c, a):
    return SDPProblem.from_matrices([c * SMALL], [[a * np.eye(2)]], [a])


def _maxcut_cycle(c, a, n=9):
    """MaxCut SDP of C_n (odd n): max 1/4 <L, X>, diag X = 1, whose value is n/2 (1 + cos(pi/n))."""
    L = sp.diags(np.full(n, 2.0)) - cycle_graph(n)
    A = [[sp.coo_array(([a], ([i], [i])), shape=(n, n))] for i in range(n)]
    return SDPProblem.from_matrices([-c / 4 * L], A, np.full(n, a))


def _theta_cycle(c, a, n=7):
    """Lovasz theta of C_n: min -<J, X> (a low-rank objective) s.t. tr X = 1, X_ij = 0 on the edges."""
    rows, cols = sp.triu(cycle_graph(n)).nonzero()
    A = [[a * sp.eye_array(n)]] + [[sp.coo_array(([a, a], ([i, j], [j, i])), shape=(n, n))]
                                   for i, j in zip(rows, cols)]
    return SDPProblem.from_matrices([LowRank(np.ones(n), [-c])], A, np.r_[a, np.zeros(rows.size)])


def _lp_with_block(c, a):
    """min <SMALL, X> + x0 + 2 x1 + 3 x2 s.t. tr X + x0 + x1 + x2 = 2, x0 - x1 = 0: X = 0 costs 1.5 per unit of x,
    while tr X = 2 costs 2 * 0.9615, so x = 0."""
    A_lp = a * np.array([[1.0, 1.0, 1.0], [1.0, -1.0, 0.0]])
    return SDPProblem.from_matrices([c * SMALL], [[a * np.eye(2)], [None]], [2 * a, 0.0],
                                    c_lp=c * np.array([1.0, 2.0, 3.0]), A_lp=A_lp)


def _lp(c, a):
    """An LP block alone: min x0 + 2 x1 + 3 x2 s.t. x0 + x1 + x2 = 1, x0 - x1 = 0; optimum 1.5 at x = (1/2, 1/2, 0)."""
    return SDPProblem([a, 0.0], [], [], c_lp=c * np.array([1.0, 2.0, 3.0]),
                      A_lp=a * np.array([[1.0, 1.0, 1.0], [1.0, -1.0, 0.0]]))


PROBLEMS = {
    "2x2": (_small, SMALL_OPTIMUM),
    "maxcut": (_maxcut_cycle, -9 / 2 * (1 + math.cos(math.pi / 9))),
    "theta": (_theta_cycle, -cycle_theta(7)),
    "block and lp": (_lp_with_block, 2 * SMALL_OPTIMUM),
    "lp": (_lp, 1.5),
}
SCALES = {  # (objective, constraints) scales of the data for 10^k
    "objective": lambda s: (s, 1.0),
    "constraints": lambda s: (1.0, s),
    "opposite": lambda s: (s, 1.0 / s),
}


def _residual(problem: SDPProblem, result) -> float:
    """||A(X) + A_lp x - b||_2 / ||b||_2 from the problem's matrices (dense: the problems are tiny)."""
    Ax = problem.A_lp @ result.x_lp
    for k, R in enumerate(result.factors):
        X = R @ R.T
        Ax = Ax + np.array([(problem.constraint_matrix(i, k).toarray() * X).sum() for i in range(problem.m)])
    return float(np.linalg.norm(Ax - problem.b) / np.linalg.norm(problem.b))


def _slack_eigenvalue(problem: SDPProblem, dual) -> float:
    """The smallest eigenvalue of C - A*(y) over the PSD blocks and of c_lp - A_lp'y, in the user's units."""
    values = [float(np.min(problem.c_lp - problem.A_lp.T @ dual, initial=np.inf))]
    values += [float(np.linalg.eigvalsh(problem.slack_matrix(k, dual).toarray())[0]) for k in range(problem.num_blocks)]
    return min(values)


@pytest.mark.parametrize("scaled", list(SCALES))
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_units_change_neither_status_nor_answer(name, scaled):
    build, optimum = PROBLEMS[name]
    for k in range(-12, 13):
        c, a = SCALES[scaled](10.0 ** k)
        problem = build(c, a)
        result = solve(problem, device="cpu", tol=TOL)
        where = f"{name}, {scaled} scaled by 1e{k}: {result.summary()}"
        assert result.status is Status.OPTIMAL, where
        assert result.primal_objective / c == pytest.approx(optimum, rel=RELATIVE), where
        # the certificates in the user's units: a lower bound, multipliers whose b'y is the dual objective and whose
        # slack is PSD up to what the bound allowed for
        assert result.dual_bound / c <= optimum + RELATIVE * abs(optimum), where
        assert problem.b @ result.dual / c == pytest.approx(result.dual_objective / c, rel=1e-8, abs=1e-10), where
        assert _slack_eigenvalue(problem, result.dual) / c >= -RELATIVE, where
        assert _residual(problem, result) <= 3 * TOL, where
        if abs(k) == 12:
            assert "solved in the data's units" in result.message, where


def test_a_warm_start_carries_its_units():
    # the previous multipliers and penalty are in the user's units; the low-rank phases start from them in the
    # scaled ones
    problem = _maxcut_cycle(1e-9, 1e6)
    first = solve(problem, device="cpu", algorithm="alm_admm")
    again = solve(problem, device="cpu", algorithm="alm_admm", warm_start=first)
    assert again.status is Status.OPTIMAL, again.summary()
    assert again.primal_objective / 1e-9 == pytest.approx(PROBLEMS["maxcut"][1], rel=RELATIVE)
    assert np.abs(again.dual - first.dual).max() <= 1e-3 * np.abs(first.dual).max()


def test_a_zero_objective_says_every_feasible_point_is_optimal():
    result = solve(_small(0.0, 1e-9), device="cpu")
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.primal_objective == 0.0
    assert _residual(_small(0.0, 1e-9), result) <= 3 * TOL
    assert "the objective is zero: every feasible point is optimal" in result.message


def test_subnormal_data_are_solved_and_named():
    scale = 1e-310  # below the smallest normal double: about 13 significant digits left
    result = solve(_small(scale, scale), device="cpu")
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.primal_objective / scale == pytest.approx(SMALL_OPTIMUM, rel=RELATIVE)
    assert "subnormal" in result.message
