"""Tests of the CVXPY interface (``cvxpy_culorads/cvxpy_interface.py``).

The first part needs no engine: it checks the conversion to an ``SDPProblem`` directly, and runs
``problem.solve(solver="CULORADS")`` with the engine replaced by a Clarabel stand-in that solves the
converted ``SDPProblem`` exactly, so that any disagreement with CVXPY's own Clarabel solve (values,
duals, KKT conditions) is the interface's fault. The second part runs the real engine end to end.
"""
from __future__ import annotations

import dataclasses

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from cvxpy.error import SolverError
from cvxpy.reductions.solvers import defines as solver_defines
from cvxpy_zoo import (
    CVXPY_SDP_TESTS,
    ZOO,
    check_against_clarabel,
    clarabel_engine,
    engine_tol,
    kkt_helper,
    lmi_form,
    maxcut,
    solve_with_clarabel,
)

import cvxpy_culorads
from cvxpy_culorads import Result, Status
from cvxpy_culorads.cvxpy.conic import CULORADS, register, to_sdp_problem
from cvxpy_culorads.solver import driver


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
    sdp, mapping = to_sdp_problem(lmi_form().problem.get_problem_data("CULORADS")[0], dualize=False)
    assert sdp.block_sizes == (6,)  # the LMI's slack
    assert sdp.m == 21 + mapping.num_row_slacks  # one equality per svec entry, one per inequality row
    assert mapping.free_x.size >= 4 and mapping.lp_x.size == 0  # x and t (and norm1's epigraph) are free
    assert sdp.n_lp == mapping.num_row_slacks + 2 * mapping.free_x.size


def test_lmi_form_is_solved_as_its_dual():
    """Every variable free: one equality per entry of x, the LMI's dual as the block, no free splits."""
    data = lmi_form().problem.get_problem_data("CULORADS")[0]
    sdp, _ = to_sdp_problem(data)
    num_x, dims = data["A"].shape[1], data["dims"]
    assert sdp.name == "cvxpy dual" and sdp.block_sizes == (6,)
    assert sdp.m == num_x < data["A"].shape[0] and sdp.n_lp == dims.nonneg + 2 * dims.zero
    np.testing.assert_array_equal(sdp.b, -data["c"])


def test_dual_form_maps_back_to_the_models_point_and_duals(stand_in):
    """Exact engine on the dual: x is its multiplier, the LMI's dual its block (unique here: diag(1, 0))."""
    x = cp.Variable()
    lmi = x * np.eye(2) + np.diag([1.0, 2.0]) >> 0
    problem = cp.Problem(cp.Minimize(x), [lmi, x <= 3])
    assert problem.solve(solver="CULORADS") == pytest.approx(-1.0, abs=1e-7)
    assert x.value == pytest.approx(-1.0, abs=1e-7)
    np.testing.assert_allclose(lmi.dual_value, np.diag([1.0, 0.0]), atol=1e-7)
    helper = kkt_helper(problem)
    helper.check_dual_domains(places=6)
    helper.check_complementarity(places=6)
    helper.check_stationary_lagrangian(places=6)


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
    monkeypatch.setattr(driver, "solve", lambda problem, settings, warm_start=None: dataclasses.replace(
        clarabel_engine(problem, settings), status=status))
    case = maxcut(n=6)
    with pytest.warns(UserWarning):
        value = case.problem.solve(solver="CULORADS")
    assert case.problem.status == cvxpy_status and np.isfinite(value)


def test_numerical_error_raises(monkeypatch):
    monkeypatch.setattr(driver, "solve", lambda problem, settings, warm_start=None: dataclasses.replace(
        clarabel_engine(problem, settings), status=Status.NUMERICAL_ERROR))
    with pytest.raises(SolverError, match="CULORADS"):
        maxcut(n=6).problem.solve(solver="CULORADS")


def exponential_cone() -> cp.Problem:
    x = cp.Variable(3)
    return cp.Problem(cp.Maximize(cp.sum(cp.log(x))), [cp.sum(x) <= 1])


def integer_variable() -> cp.Problem:
    x = cp.Variable(2, integer=True)
    return cp.Problem(cp.Minimize(cp.sum(x)), [x >= 0.5])


@pytest.mark.parametrize("make, part, advice", [
    (exponential_cone, "exponential cones", "use Clarabel or SCS"),
    (integer_variable, "integer or boolean variables", "use a mixed-integer solver"),
])
def test_unsupported_problems_are_refused_before_solving(stand_in, make, part, advice):
    with pytest.raises(SolverError, match=f"CULORADS cannot solve this problem: it has {part}.*{advice}"):
        make().solve(solver="CULORADS")
    with pytest.raises(SolverError, match="CULORADS"):  # for integers, cvxpy's own MIP check speaks first
        make().solve(solver=CULORADS())
    assert not stand_in


# ------------------------------------------------------------------------ (b) with the engine
def quadratic_objectives() -> list[cp.Problem]:
    """sum_squares, quad_form and matrix_frac objectives: CVXPY rewrites them into cones the engine has."""
    x = cp.Variable(3)
    P = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.5]])
    return [cp.Problem(cp.Minimize(cp.sum_squares(x - 1)), [cp.sum(x) == 1]),
            cp.Problem(cp.Minimize(cp.quad_form(x, P) + x[0]), [x >= -1]),
            cp.Problem(cp.Minimize(cp.matrix_frac(x, P)), [cp.sum(x) == 2])]


@pytest.mark.parametrize("index", range(3), ids=["sum_squares", "quad_form", "matrix_frac"])
@pytest.mark.parametrize("entry", [{"solver": "CULORADS"}, {"method": "culorads"}], ids=["solver", "method"])
def test_quadratic_objectives_match_clarabel(index, entry):
    reference = quadratic_objectives()[index]
    reference.solve(solver="CLARABEL")
    problem = quadratic_objectives()[index]
    problem.solve(**entry)
    assert problem.status == cp.OPTIMAL
    assert problem.value == pytest.approx(reference.value, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("check", CVXPY_SDP_TESTS, ids=lambda check: check.__name__)
def test_cvxpy_standard_sdps(check):
    check("CULORADS")


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
