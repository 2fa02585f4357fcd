"""CVXPY's own standard solver tests (``cvxpy.tests.solver_test_helpers``), the ones that apply to a solver of linear,
second-order and PSD cones, on both entry points at default settings: ``solver="CULORADS"`` (CVXPY's chain) and
``method="culorads"`` (the structured reader; a model it does not read falls back to the chain). The helpers check
values, duals, complementarity, and for infeasible models the status, the value's sign and the Farkas certificate
returned as the constraints' duals."""
from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from cvxpy.tests import solver_test_helpers as helpers

import cvxpy_culorads  # noqa: F401  (registers the solver and the solve method)

STANDARD = [
    *[(helpers.StandardTestLPs, f"test_lp_{i}", {}) for i in range(7)],
    (helpers.StandardTestQPs, "test_qp_0", {}),
    (helpers.StandardTestQPs, "test_qp_0", {"use_quad_obj": False}),
    (helpers.StandardTestQPs, "test_qp_parameter_update", {}),
    *[(helpers.StandardTestSOCPs, f"test_socp_{name}", {}) for name in ("0", "1", "2", "3ax0", "3ax1", "4")],
    (helpers.StandardTestSOCPs, "test_socp_bounds_attr", {}),
    *[(helpers.StandardTestSDPs, f"test_sdp_{name}", {}) for name in ("1min", "1max", "2", "batched")],
    *[(helpers.StandardTestInfeasibleProblems, f"test_{name}", None)
      for name in ("lp_ineq_constraints", "lp_eq_constraints", "soc", "psd_cone")],
]


@pytest.fixture(params=["solver", "method"])
def entry_point(request, monkeypatch):
    """The helpers call ``problem.solve(solver=...)``: for the structured entry point, the first such call becomes
    ``solve(method="culorads")`` (its own fallback to the chain is left alone)."""
    if request.param == "method":
        solve = cp.Problem.solve
        depth = [0]

        def structured(problem, *args, **kwargs):
            if kwargs.get("solver") != "CULORADS" or depth[0]:
                return solve(problem, *args, **kwargs)
            kwargs.pop("solver")
            depth[0] += 1
            try:
                return solve(problem, *args, method="culorads", **kwargs)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(cp.Problem, "solve", structured)
    return request.param


@pytest.mark.parametrize("suite, name, options", STANDARD,
                         ids=[name + ("_no_quad_obj" if options else "") for _, name, options in STANDARD])
def test_cvxpy_standard_test(entry_point, suite, name, options):
    if options is None:  # the infeasibility tests take the solver's name only
        getattr(suite, name)("CULORADS")
    else:
        getattr(suite, name)("CULORADS", **options)


@pytest.mark.parametrize("sense", [cp.Minimize, cp.Maximize])
def test_infeasible_and_unbounded_values_carry_the_senses_sign(entry_point, sense):
    x = cp.Variable()
    infeasible = cp.Problem(sense(x), [x * np.eye(2) + np.diag([1.0, 2.0]) >> 0, x <= -10])
    infeasible.solve(solver="CULORADS")
    assert infeasible.status == cp.INFEASIBLE
    assert infeasible.value == (np.inf if sense is cp.Minimize else -np.inf)
    X = cp.Variable((2, 2), PSD=True)
    unbounded = cp.Problem(sense(X[0, 0] - X[1, 1] if sense is cp.Minimize else X[1, 1] - X[0, 0]))
    unbounded.solve(solver="CULORADS")
    assert unbounded.status == cp.UNBOUNDED
    assert unbounded.value == (-np.inf if sense is cp.Minimize else np.inf)


def test_verbose_1_is_accepted_and_solver_stats_are_complete(entry_point, capsys):
    X = cp.Variable((3, 3), PSD=True)
    problem = cp.Problem(cp.Minimize(cp.trace(X)), [X[0, 0] == 1, X[1, 2] == 0.5])
    problem.solve(solver="CULORADS", verbose=1)
    assert problem.status == cp.OPTIMAL and problem.value == pytest.approx(2.0, rel=1e-5)
    stats = problem.solver_stats
    result = stats.extra_stats
    assert stats.solver_name == "CULORADS" and stats.num_iters == sum(result.iterations.values()) > 0
    assert stats.solve_time == result.solve_time > 0 and stats.setup_time >= 0
    first = problem.compilation_time
    assert first is not None and first > 0
    problem.solve(solver="CULORADS")
    assert problem.compilation_time is not None and problem.compilation_time != first  # this solve's own


def test_a_solver_error_carries_the_engines_reason(entry_point, monkeypatch):
    import dataclasses

    from cvxpy_culorads import Status
    from cvxpy_culorads.solver import driver

    solve = driver.solve

    def failing(problem, settings=None, **options):
        return dataclasses.replace(solve(problem, settings, **options), status=Status.NUMERICAL_ERROR,
                                   message="the iterates diverged (a reason only the engine knows)")

    monkeypatch.setattr(driver, "solve", failing)
    X = cp.Variable((2, 2), PSD=True)
    with pytest.raises(cp.error.SolverError, match="a reason only the engine knows"):
        cp.Problem(cp.Minimize(cp.trace(X)), [X[0, 1] == 1]).solve(solver="CULORADS")
