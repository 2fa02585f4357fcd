"""Small complex models through CVXPY (issue 48): the fidelity SDP of a pure state, whose LMI has no Slater point,
against its closed-form value; the dual form CVXPY's chain gives such models; the residual-share rule that keeps a
point whose objective rests on its infeasibility from being called OPTIMAL; and an interior-point start that stalls
just above tol ending the solve without a low-rank hand-over."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest

import cvxpy_culorads  # noqa: F401  (registers the solver and the solve method)
from cvxpy_culorads import Settings, Status, solve
from cvxpy_culorads.cvxpy.conic import to_sdp_problem
from cvxpy_culorads.result import Errors
from cvxpy_culorads.solver.evaluation import Evaluation, criteria_of
from cvxpy_culorads.solver.outcome import status_of

TOL = Settings().tol


def _study():
    """The study's module (``benchmarks/studies/complex_models.py``): its models are the ones measured there."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "complex_models.py"
    spec = importlib.util.spec_from_file_location("_culorads_study_complex_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fidelity(d: int, seed: int):
    """max Re tr(Y) s.t. [[rho, Y], [Y^H, sigma]] PSD with rho of rank one; its value, the fidelity
    sqrt(psi^H sigma psi), is computed by the study apart from any solver."""
    return _study().fidelity(d, seed)


@pytest.mark.parametrize("entry", [{"solver": "CULORADS"}, {"method": "culorads"}], ids=["solver", "method"])
@pytest.mark.parametrize("seed", [0, 1])
def test_fidelity_of_a_pure_state_is_within_tol_or_flagged(entry, seed):
    model, truth = fidelity(2, seed)
    model.solve(**entry, time_limit=20)
    assert model.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)
    assert model.constraints[0].violation() <= 1e-7  # the LMI's most negative eigenvalue at the returned Y
    assert model.value == pytest.approx(np.trace(model.variables()[0].value).real, abs=1e-9)
    if model.status == cp.OPTIMAL:  # the promise of tol on the value (it was 3e-5 to 5e-5 off before the dual form)
        assert abs(model.value - truth) <= TOL * (1.0 + truth)
    else:
        assert abs(model.value - truth) <= math.sqrt(TOL) * (1.0 + truth)


def test_lmi_form_models_reach_the_engine_as_their_dual():
    model, _ = fidelity(4, 0)
    data = model.get_problem_data("CULORADS")[0]
    dual, _ = to_sdp_problem(data)
    primal, _ = to_sdp_problem(data, dualize=False)
    num_rows, num_x = data["A"].shape  # 136 svec rows of the 8 x 8 real LMI, 32 real entries of Y
    assert (dual.m, dual.n_lp, dual.block_sizes) == (num_x, 0, (16,))
    assert (primal.m, primal.n_lp, primal.block_sizes) == (num_rows, 2 * num_x, (16,))


@pytest.mark.parametrize("d, seed", [(2, 2), (4, 1)])
def test_a_point_whose_objective_rests_on_its_residual_is_not_optimal(d, seed):
    """The primal form stalls without a Slater point; where its gap is within tol only because a complementarity of
    1e-4 cancels against the residual's share, the point is INACCURATE and says why."""
    model, truth = fidelity(d, seed)
    problem, _ = to_sdp_problem(model.get_problem_data("CULORADS")[0], dualize=False)
    result = solve(problem, time_limit=20)
    error = abs(-result.primal_objective - truth)  # the primal form minimises -Re tr(Y)
    if result.status is Status.OPTIMAL:
        assert error <= TOL * (1.0 + truth)
    if all(value <= TOL for value in result.criteria.values()) and result.status is not Status.OPTIMAL:
        assert "residual share" in result.message


@pytest.mark.parametrize("seed", [1, 2])
def test_the_fidelity_sdp_at_d4_ends_optimal_from_the_interior_point_start_alone(seed):
    """At d = 4 (seeds 1, 2) the interior-point start used to stall just above tol and hand over to thousands of
    low-rank steps; with its directions corrected against the operator it meets tol by itself."""
    model, truth = fidelity(4, seed)
    problem, _ = to_sdp_problem(model.get_problem_data("CULORADS")[0])
    result = solve(problem, time_limit=20)
    assert result.route.startswith("interior-point method first")
    assert result.iterations["alm"] + result.iterations["admm"] + result.iterations["riemannian"] == 0
    assert result.status is Status.OPTIMAL
    assert abs(result.primal_objective - truth) <= TOL * (1.0 + truth)


def _evaluation(gap: float) -> Evaluation:
    errors = Errors(primal_infeasibility=1e-7, dual_infeasibility=0.0, gap=gap, primal_residual=1e-7,
                    max_violation=1e-7, dual_slack_violation=0.0)
    return Evaluation(-1.0, -1.0, errors, [], None, None, criteria_of("certified", errors, None), [])


def test_the_residual_share_decides_between_optimal_and_inaccurate():
    settings = Settings()
    within = _evaluation(gap=1e-6)
    assert status_of(within, None, settings, share=0.5 * settings.tol) is Status.OPTIMAL
    assert status_of(within, None, settings, share=2.0 * settings.tol) is Status.INACCURATE
    assert status_of(within, None, settings, share=2.0 * settings.inaccurate_tol) is Status.STALLED
    assert status_of(_evaluation(gap=2e-5), None, settings, share=0.0) is Status.INACCURATE
