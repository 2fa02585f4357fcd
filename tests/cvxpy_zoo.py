"""Models shared by the CVXPY tests (``test_cvxpy.py``, ``test_cvxpy_structured.py``): a zoo of small SDPs with
the constraints whose duals are unique, an engine stand-in that solves an ``SDPProblem`` exactly with Clarabel
(so that a disagreement with CVXPY's own Clarabel solve is the interface's fault), and the checks against
Clarabel's answer."""
from __future__ import annotations

from typing import NamedTuple

import clarabel
import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from cvxpy.tests.solver_test_helpers import SolverTestHelper, StandardTestSDPs

from cvxpy_culorads import Result, SDPProblem, Settings, Status
from cvxpy_culorads.cvxpy.conic import to_sdp_problem
from cvxpy_culorads.result import Errors


# ---------------------------------------------------------------------------------------------- zoo
class Case(NamedTuple):
    problem: cp.Problem
    unique_duals: list  # constraints whose dual is unique, so must match Clarabel's


def maxcut(n: int = 20, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    weights = np.triu((rng.random((n, n)) < 0.3) * rng.integers(1, 4, (n, n)), 1)
    weights = weights + weights.T
    laplacian = np.diag(weights.sum(axis=1)) - weights
    X = cp.Variable((n, n), PSD=True)
    diagonal = cp.diag(X) == 1
    return Case(cp.Problem(cp.Maximize(cp.trace(laplacian @ X) / 4), [diagonal]), [diagonal])


def matrix_completion(n: int = 8, seed: int = 1) -> Case:
    rng = np.random.default_rng(seed)
    target = rng.standard_normal((n, 2)) @ rng.standard_normal((2, n))
    known = rng.random((n, n)) < 0.6
    Z = cp.Variable((n, n))
    return Case(cp.Problem(cp.Minimize(cp.normNuc(Z)), [cp.multiply(known, Z) == known * target]), [])


def petersen_edges() -> list[tuple[int, int]]:
    outer = [(i, (i + 1) % 5) for i in range(5)]
    inner = [(5 + i, 5 + (i + 2) % 5) for i in range(5)]
    return outer + inner + [(i, i + 5) for i in range(5)]


def lovasz_theta(n: int, edges) -> Case:
    X = cp.Variable((n, n), PSD=True)
    unit_trace = cp.trace(X) == 1
    constraints = [unit_trace] + [X[i, j] == 0 for i, j in edges]
    return Case(cp.Problem(cp.Maximize(cp.sum(X)), constraints), [unit_trace])


def random_graph_theta(n: int = 12, seed: int = 3) -> Case:
    rng = np.random.default_rng(seed)
    rows, cols = np.triu_indices(n, 1)
    edges = [(i, j) for i, j, keep in zip(rows, cols, rng.random(rows.size) < 0.3) if keep]
    return lovasz_theta(n, edges)


def several_blocks() -> Case:
    """PSD and symmetric variables, a small LMI, a nonnegative vector, a free scalar, an offset."""
    X1 = cp.Variable((3, 3), PSD=True)
    X2 = cp.Variable((4, 4), symmetric=True)
    y = cp.Variable()
    z = cp.Variable(2, nonneg=True)
    C1 = np.array([[2.0, 1, 0], [1, 3, -1], [0, -1, 1]])
    C2 = np.diag([1.0, 2, 3, 4]) + 0.5
    column = cp.reshape(z, (2, 1), order="F")
    total_trace = cp.trace(X1) + cp.trace(X2) == 2
    constraints = [total_trace, X2 >> 0, X1[0, 1] + y >= 0.3, z[0] - y <= 1, y <= 2, cp.sum(z) >= 0.5,
                   cp.bmat([[X1[:2, :2], column], [column.T, cp.reshape(y + 2, (1, 1), order="F")]]) >> 0]
    objective = cp.Minimize(cp.trace(C1 @ X1) + cp.trace(C2 @ X2) + 3 * y + z[1] + 7.5)
    return Case(cp.Problem(objective, constraints), [total_trace])


def lmi_form(seed: int = 2) -> Case:
    """min t s.t. t I - F0 - sum_i x_i F_i PSD, ||x||_1 <= 1: free scalars and a general LMI."""
    rng = np.random.default_rng(seed)
    F = [G + G.T for G in rng.standard_normal((4, 6, 6))]
    x, t = cp.Variable(3), cp.Variable()
    lmi = t * np.eye(6) - F[0] - sum(x[i] * F[i + 1] for i in range(3)) >> 0
    return Case(cp.Problem(cp.Minimize(t), [lmi, cp.norm1(x) <= 1]), [])


def second_order_cone() -> Case:
    """A maximisation with an offset and an SOC, which cvxpy hands over as an LMI."""
    x = cp.Variable(3)
    X = cp.Variable((3, 3), PSD=True)
    constraints = [cp.norm(x, 2) <= X[0, 0], X[1, 1] + X[2, 2] >= 1, X[0, 0] <= 2]
    return Case(cp.Problem(cp.Maximize(4 - cp.sum(x) - cp.trace(X)), constraints), [])


ZOO = {
    "maxcut": maxcut,
    "matrix_completion": matrix_completion,
    "theta_petersen": lambda: lovasz_theta(10, petersen_edges()),
    "theta_random": random_graph_theta,
    "several_blocks": several_blocks,
    "lmi_form": lmi_form,
    "second_order_cone": second_order_cone,
}


# cvxpy's own SDP tests, with the default places of its SCS tests; test_sdp_batched has two PSD cones
# under one constraint.
CVXPY_SDP_TESTS = [StandardTestSDPs.test_sdp_1min, StandardTestSDPs.test_sdp_1max, StandardTestSDPs.test_sdp_2,
                   StandardTestSDPs.test_sdp_batched]


def solve_with_clarabel(case: Case) -> tuple[float, list]:
    value = case.problem.solve(solver="CLARABEL")
    return value, [np.copy(constraint.dual_value) for constraint in case.unique_duals]


def max_violation(problem: cp.Problem) -> float:
    return max(float(np.max(constraint.violation())) for constraint in problem.constraints)


def kkt_helper(problem: cp.Problem) -> SolverTestHelper:
    """cvxpy's checks of complementarity, dual cones and stationarity on the values already set."""
    return SolverTestHelper((problem.objective, None), [(v, None) for v in problem.variables()],
                            [(c, None) for c in problem.constraints])


# ------------------------------------------------------------------------- an engine stand-in
def clarabel_engine(problem: SDPProblem, settings: Settings) -> Result:
    """Solve ``problem`` with Clarabel and report it as the engine does.

    The unknowns are the √2-scaled upper-triangle svecs of the blocks, then the LP variables:
    ``min q'u s.t. M u = b, u in PSD x ... x R+`` as Clarabel's ``[M; -I] u + s = [b; 0]``.
    """
    assert isinstance(settings, Settings)
    problem = problem.expanded() if problem.has_low_rank else problem  # Clarabel takes the terms as coordinates
    svec_sizes = [n * (n + 1) // 2 for n in problem.block_sizes]
    starts = np.concatenate([[0], np.cumsum(svec_sizes)]).astype(np.int64)
    num_u = starts[-1] + problem.n_lp

    def svec_index(k, row, col):  # coordinates are lower (row >= col): the upper entry (col, row)
        return starts[k] + row * (row + 1) // 2 + col, np.where(row == col, 1.0, np.sqrt(2.0))

    con, column, value = [], [], []
    q = np.zeros(num_u)
    for k, coefficients in enumerate(problem.A_coords):
        index, scale = svec_index(k, coefficients.row, coefficients.col)
        con.append(coefficients.con), column.append(index), value.append(coefficients.val * scale)
        rows, cols, vals = problem.C_coords[k]
        index, scale = svec_index(k, rows, cols)
        q[index] = vals * scale
    A_lp = sp.coo_array(problem.A_lp)
    con.append(A_lp.row), column.append(starts[-1] + A_lp.col), value.append(A_lp.data)
    q[starts[-1]:] = problem.c_lp
    M = sp.csc_array((np.concatenate(value), (np.concatenate(con), np.concatenate(column))),
                     shape=(problem.m, num_u))
    cones = [clarabel.ZeroConeT(problem.m)] + [clarabel.PSDTriangleConeT(n) for n in problem.block_sizes]
    if problem.n_lp:
        cones.append(clarabel.NonnegativeConeT(problem.n_lp))
    options = clarabel.DefaultSettings()
    options.verbose = False
    solution = clarabel.DefaultSolver(sp.csc_array((num_u, num_u)), q,
                                      sp.vstack([M, -sp.eye_array(num_u)], format="csc"),
                                      np.concatenate([problem.b, np.zeros(num_u)]), cones, options).solve()
    assert str(solution.status) == "Solved"
    u, lam = np.asarray(solution.x), -np.asarray(solution.z[:problem.m])
    factors = []
    for k, n in enumerate(problem.block_sizes):
        lower_rows, lower_cols = np.tril_indices(n)
        index, scale = svec_index(k, lower_rows, lower_cols)
        X = np.zeros((n, n))
        X[lower_rows, lower_cols] = u[index] / scale
        eigenvalues, vectors = np.linalg.eigh(X + np.tril(X, -1).T)
        factors.append(vectors * np.sqrt(np.maximum(eigenvalues, 0.0)))
    return Result(status=Status.OPTIMAL, primal_objective=float(q @ u), dual_objective=float(problem.b @ lam),
                  errors=Errors(*(0.0,) * 6),
                  criteria={"gap": 0.0}, dual_bound=None, certified_gap=None,
                  factors=factors, x_lp=u[starts[-1]:], dual=lam, iterations={"admm": solution.iterations},
                  ranks=list(problem.block_sizes), solve_time=solution.solve_time, device="clarabel")


def check_against_clarabel(name, case, value, reference, reference_duals, *, rel, abs, violation, dual_rtol,
                           dual_atol, places):
    """Status, objective, constraint violation, unique duals and cvxpy's KKT checks at the given tolerances."""
    assert case.problem.status == cp.OPTIMAL
    assert value == pytest.approx(reference, rel=rel, abs=abs)
    assert max_violation(case.problem) <= violation
    for constraint, expected in zip(case.unique_duals, reference_duals):
        np.testing.assert_allclose(constraint.dual_value, expected, rtol=dual_rtol, atol=dual_atol)
    helper = kkt_helper(case.problem)
    helper.check_dual_domains(places=places)
    helper.check_complementarity(places=places)
    if name != "matrix_completion":  # cvxpy cannot differentiate normNuc
        helper.check_stationary_lagrangian(places=places)


def engine_tol(problem: cp.Problem) -> float:
    """The tol at which status OPTIMAL means violations <= 1e-5: the engine's primal error is
    ||A(X) - b||_2 / (1 + ||b||_1)."""
    sdp, _ = to_sdp_problem(problem.get_problem_data("CULORADS")[0])
    return 1e-5 / (1 + sdp.b_norm_1)
