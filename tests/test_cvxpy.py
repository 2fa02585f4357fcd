"""Tests of the CVXPY interface (``cvxpy_culorads/cvxpy_interface.py``).

The first part needs no engine: it checks the conversion to an ``SDPProblem`` directly, and runs
``problem.solve(solver="CULORADS")`` with the engine replaced by a Clarabel stand-in that solves the
converted ``SDPProblem`` exactly, so that any disagreement with CVXPY's own Clarabel solve (values,
duals, KKT conditions) is the interface's fault. The second part runs the real engine end to end.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import clarabel
import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from cvxpy.error import SolverError
from cvxpy.reductions.solvers import defines as solver_defines
from cvxpy.tests.solver_test_helpers import SolverTestHelper, StandardTestSDPs

import cvxpy_culorads
from cvxpy_culorads import Result, SDPProblem, Settings, Status, driver
from cvxpy_culorads.cvxpy_interface import CULORADS, register, to_sdp_problem
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


@pytest.fixture
def stand_in(monkeypatch):
    """Replace the engine with ``clarabel_engine``; yields the settings of each call."""
    calls = []

    def solve(problem, settings):
        calls.append(settings)
        return clarabel_engine(problem, settings)

    monkeypatch.setattr(driver, "solve", solve)
    return calls


def without_direct_cones() -> CULORADS:
    """CULORADS as on cvxpy < 1.9.3: PSD and nonnegative variables stay in the slack rows."""
    solver = CULORADS()
    solver.DIR_CONE_KINDS = frozenset()
    return solver


# ------------------------------------------------------------------- (a) without the engine
def test_registration_is_idempotent_and_by_name():
    assert "CULORADS" in cp.installed_solvers()
    assert "CULORADS" not in cp.settings.SOLVERS  # else solve(solver=CULORADS()) is refused
    registered = solver_defines.SOLVER_MAP_CONIC["CULORADS"]
    assert register() is registered and register() is registered
    assert "arXiv:2407.15049" in registered.cite({}) and "arXiv:2403.09133" in registered.cite({})


def test_maxcut_becomes_one_block_and_n_equalities():
    n = 12
    rng = np.random.default_rng(5)
    weights = np.triu(rng.random((n, n)) < 0.5, 1).astype(float)
    laplacian = np.diag((weights + weights.T).sum(axis=1)) - weights - weights.T
    X = cp.Variable((n, n), PSD=True)
    problem = cp.Problem(cp.Maximize(cp.trace(laplacian @ X) / 4 + 2), [cp.diag(X) == 1])
    data, _, inverse_data = problem.get_problem_data("CULORADS")
    sdp, mapping = to_sdp_problem(data)
    assert sdp.block_sizes == (n,) and sdp.m == n and sdp.n_lp == 0
    np.testing.assert_allclose(sdp.objective_matrix(0).toarray(), -laplacian / 4)  # maximisation flipped
    np.testing.assert_array_equal(sdp.b, np.ones(n))
    for i in range(n):
        assert (sdp.constraint_matrix(i, 0) != sp.coo_array(([1.0], ([i], [i])), shape=(n, n))).nnz == 0
    assert inverse_data[-1]["offset"] == -2


def test_lmi_becomes_slack_block_with_free_splits():
    sdp, mapping = to_sdp_problem(lmi_form().problem.get_problem_data("CULORADS")[0])
    assert sdp.block_sizes == (6,)  # the LMI's slack
    assert sdp.m == 21 + mapping.num_row_slacks  # one equality per svec entry, one per inequality row
    assert mapping.free_x.size >= 4 and mapping.lp_x.size == 0  # x and t (and norm1's epigraph) are free
    assert sdp.n_lp == mapping.num_row_slacks + 2 * mapping.free_x.size


@pytest.mark.parametrize("name", ["maxcut", "several_blocks", "second_order_cone"])
def test_selection_rows_are_found_without_direct_cones(name):
    """Own extraction (cvxpy < 1.9.3) yields the same blocks and equalities as cvxpy's direct cones."""
    problem = ZOO[name]().problem
    with_cones, _ = to_sdp_problem(problem.get_problem_data("CULORADS")[0])
    own, mapping = to_sdp_problem(problem.get_problem_data(without_direct_cones())[0])
    assert mapping.removed_rows.size > 0
    assert sorted(own.block_sizes) == sorted(with_cones.block_sizes)
    assert (own.m, own.n_lp) == (with_cones.m, with_cones.n_lp)


@pytest.mark.parametrize("direct_cones", [True, False], ids=["direct_cones", "own_extraction"])
@pytest.mark.parametrize("name", ZOO)
def test_zoo_round_trip_matches_clarabel(stand_in, name, direct_cones):
    """Exact engine: values, unique duals and the KKT conditions of all duals agree with Clarabel."""
    case = ZOO[name]()
    reference, reference_duals = solve_with_clarabel(case)
    value = case.problem.solve(solver="CULORADS" if direct_cones else without_direct_cones())
    check_against_clarabel(name, case, value, reference, reference_duals, rel=1e-6, abs=1e-7, violation=1e-6,
                           dual_rtol=1e-4, dual_atol=1e-6, places=5)


@pytest.mark.parametrize("check", CVXPY_SDP_TESTS, ids=lambda check: check.__name__)
def test_cvxpy_standard_sdps_with_exact_engine(stand_in, check):
    check("CULORADS")


def test_factors_and_stats_reach_the_user(stand_in):
    case = maxcut(n=10)
    case.problem.solve(solver="CULORADS")
    stats = case.problem.solver_stats
    result = stats.extra_stats
    assert isinstance(result, Result) and stats.solver_name == "CULORADS"
    assert stats.num_iters == sum(result.iterations.values()) and stats.setup_time >= 0
    X = case.problem.variables()[0].value
    np.testing.assert_allclose(result.factors[0] @ result.factors[0].T, X, atol=1e-8)


def test_options_and_verbose_reach_the_settings(stand_in):
    case = maxcut(n=6)
    case.problem.solve(solver="CULORADS", verbose=True, tol=1e-7, device="cpu")
    assert stand_in[-1].verbose and stand_in[-1].tol == 1e-7 and stand_in[-1].device == "cpu"


def test_instance_works_like_the_name(stand_in):
    case = maxcut(n=6)
    by_name = case.problem.solve(solver="CULORADS")
    by_instance = case.problem.solve(solver=cvxpy_culorads.CULORADS())
    assert by_instance == pytest.approx(by_name, rel=1e-9)


def test_unknown_option_is_named(stand_in):
    with pytest.raises(ValueError, match="toll"):
        maxcut(n=6).problem.solve(solver="CULORADS", toll=1e-6)
    assert not stand_in


@pytest.mark.parametrize("status, cvxpy_status", [(Status.INACCURATE, cp.OPTIMAL_INACCURATE),
                                                  (Status.TIME_LIMIT, cp.USER_LIMIT),
                                                  (Status.ITERATION_LIMIT, cp.USER_LIMIT)])
def test_stopped_solves_keep_their_point(monkeypatch, status, cvxpy_status):
    monkeypatch.setattr(driver, "solve", lambda problem, settings: dataclasses.replace(
        clarabel_engine(problem, settings), status=status))
    case = maxcut(n=6)
    with pytest.warns(UserWarning):
        value = case.problem.solve(solver="CULORADS")
    assert case.problem.status == cvxpy_status and np.isfinite(value)


def test_numerical_error_raises(monkeypatch):
    monkeypatch.setattr(driver, "solve", lambda problem, settings: dataclasses.replace(
        clarabel_engine(problem, settings), status=Status.NUMERICAL_ERROR))
    with pytest.raises(SolverError, match="CULORADS"):
        maxcut(n=6).problem.solve(solver="CULORADS")


def exponential_cone() -> cp.Problem:
    x = cp.Variable(3)
    return cp.Problem(cp.Maximize(cp.sum(cp.log(x))), [cp.sum(x) <= 1])


def integer_variable() -> cp.Problem:
    x = cp.Variable(2, integer=True)
    return cp.Problem(cp.Minimize(cp.sum(x)), [x >= 0.5])


def quadratic_objective() -> cp.Problem:
    x = cp.Variable(3)
    return cp.Problem(cp.Minimize(cp.sum_squares(x - 1)), [cp.sum(x) == 1])


@pytest.mark.parametrize("make, part, advice", [
    (exponential_cone, "exponential cones", "use Clarabel or SCS"),
    (integer_variable, "integer or boolean variables", "use a mixed-integer solver"),
    (quadratic_objective, "a quadratic objective", "use Clarabel or SCS"),
])
def test_unsupported_problems_are_refused_before_solving(stand_in, make, part, advice):
    with pytest.raises(SolverError, match=f"CULORADS cannot solve this problem: it has {part}.*{advice}"):
        make().solve(solver="CULORADS")
    with pytest.raises(SolverError, match="CULORADS"):  # for integers, cvxpy's own MIP check speaks first
        make().solve(solver=CULORADS())
    assert not stand_in


# ------------------------------------------------------------------------ (b) with the engine
@pytest.mark.parametrize("check", CVXPY_SDP_TESTS, ids=lambda check: check.__name__)
def test_cvxpy_standard_sdps(check):
    check("CULORADS")


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


@pytest.mark.parametrize("name", ZOO)
def test_zoo_matches_clarabel(name):
    case = ZOO[name]()
    reference, reference_duals = solve_with_clarabel(case)
    value = case.problem.solve(solver="CULORADS", tol=engine_tol(case.problem))
    check_against_clarabel(name, case, value, reference, reference_duals, rel=1e-4, abs=0.0, violation=1e-5,
                           dual_rtol=1e-3, dual_atol=1e-4, places=3)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_objective_matches_scs(name):
    # a second, first-order reference (at tight tolerances) next to Clarabel's interior point
    if "SCS" not in cp.installed_solvers():  # the test extra installs it; the GPU image lacks it
        pytest.skip("SCS is not installed")
    case = ZOO[name]()
    reference = case.problem.solve(solver="SCS", eps_abs=1e-9, eps_rel=1e-9, max_iters=200_000)
    value = case.problem.solve(solver="CULORADS", tol=engine_tol(case.problem))
    assert case.problem.status == cp.OPTIMAL
    assert value == pytest.approx(reference, rel=1e-4, abs=1e-6)
