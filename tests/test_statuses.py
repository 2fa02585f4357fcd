"""Honest statuses at the edges: unbounded, infeasible and badly scaled models, non-finite measures, limits that
hold (time, Ctrl-C), and how each reaches CVXPY. Clarabel is the independent judge of what a model is."""
from __future__ import annotations

import math
import time

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import SDPProblem, Status, solve
from cvxpy_culorads.backends.backend import select_backend
from cvxpy_culorads.certify.certificates import smallest_eigenpairs
from cvxpy_culorads.certify.measures import worst
from cvxpy_culorads.linalg.krylov import lanczos_smallest
from cvxpy_culorads.models import maxcut_problem
from cvxpy_culorads.operators.compressed import BlockLayout
from cvxpy_culorads.problem.scaling import DiagonalScaling
from cvxpy_culorads.result import Errors, Result
from cvxpy_culorads.solver.run import Run

CPU = dict(device="cpu")


def _unbounded_sdp():
    X = cp.Variable((3, 3), PSD=True)
    return cp.Problem(cp.Minimize(-cp.trace(X)), [X[0, 0] == 1])


def _unbounded_lp():
    x = cp.Variable(2)
    return cp.Problem(cp.Minimize(-x[0] - x[1]), [x >= 0, x[0] - x[1] == 0])


def _infeasible_sdp():
    X = cp.Variable((3, 3), PSD=True)
    return cp.Problem(cp.Minimize(cp.trace(X)), [cp.diag(X) == 1, X[0, 1] == 2])


def _clarabel_status(make) -> str:
    problem = make()
    problem.solve(solver="CLARABEL")
    return problem.status


@pytest.mark.parametrize("make, expected", [(_unbounded_sdp, cp.UNBOUNDED), (_unbounded_lp, cp.UNBOUNDED),
                                            (_infeasible_sdp, cp.INFEASIBLE)])
def test_unbounded_and_infeasible_models_get_their_status_through_cvxpy(make, expected):
    assert _clarabel_status(make) == expected  # the model is what the test says it is
    problem = make()
    start = time.perf_counter()
    problem.solve(solver="CULORADS", **CPU)
    assert time.perf_counter() - start < 30  # the unbounded LP used to run past 60 s
    assert problem.status == expected  # proven: the engine's ray passed its check (verified again below)
    assert problem.value == (-math.inf if expected == cp.UNBOUNDED else math.inf)


def test_an_unbounded_sdp_through_the_direct_api_is_a_status_not_an_exception():
    # min -tr X s.t. X_00 = 1: the quartic line search used to raise LinAlgError on non-finite coefficients
    problem = SDPProblem([1.0], [-np.eye(3)], [([0], [0], [0], [1.0])])
    result = solve(problem, **CPU)
    assert result.status is Status.UNBOUNDED and not result.status.has_solution
    assert "primal ray" in result.message
    _assert_primal_ray(problem, result.certificate)


def test_infeasibility_is_proven_through_the_trace_bound():
    # diag(X) = 1 bounds tr X by 3, and no PSD matrix with unit diagonal has X_01 = 2
    idx = np.arange(3)
    A = (np.r_[idx, 3], np.r_[idx, 1], np.r_[idx, 0], np.ones(4))
    problem = SDPProblem([1.0, 1.0, 1.0, 4.0], [np.eye(3)], [A])  # 2 X_01 = 4
    result = solve(problem, **CPU)
    assert result.status is Status.INFEASIBLE
    assert "Farkas ray" in result.message
    _assert_farkas_ray(problem, result.certificate)


def _assert_farkas_ray(problem: SDPProblem, certificate, tol: float = 1e-5):
    """y proves infeasibility: b'y = 1, every A_k*(y) NSD and A_lp'y <= 0, within tol (dense, from the data)."""
    y = certificate.multipliers
    assert certificate.kind == "infeasible" and problem.b @ y == pytest.approx(1.0)
    for k in range(problem.num_blocks):
        adjoint = sum(y[i] * problem.constraint_matrix(i, k).toarray() for i in range(problem.m))
        assert np.linalg.eigvalsh(adjoint)[-1] <= tol
    assert (problem.A_lp.T @ y <= tol).all()


def _assert_primal_ray(problem: SDPProblem, certificate, tol: float = 1e-5):
    """(D, x) proves unboundedness: D PSD (D = R R'), x >= 0, A(D) + A_lp x = 0 within tol, <C, D> + c'x < 0."""
    assert certificate.kind == "unbounded" and (certificate.x_lp >= 0).all()
    D = [R @ R.T for R in certificate.factors]
    residual = problem.A_lp @ certificate.x_lp + np.array(
        [sum(np.sum(problem.constraint_matrix(i, k).toarray() * Dk) for k, Dk in enumerate(D))
         for i in range(problem.m)])
    objective = problem.c_lp @ certificate.x_lp + sum(
        np.sum(problem.objective_matrix(k).toarray() * Dk) for k, Dk in enumerate(D))
    size = sum(np.trace(Dk) for Dk in D) + certificate.x_lp.sum()
    assert np.abs(residual).max(initial=0.0) <= tol * size and objective < -1e-3 * size


def _direct(model: cp.Problem) -> SDPProblem:
    """The SDPProblem CVXPY's chain makes of a model (the direct API's input), in its primal form (a model in LMI form
    reaches the engine through CVXPY as its dual, whose statuses swap: the CVXPY solves below cover that)."""
    from cvxpy_culorads.cvxpy.conic import to_sdp_problem
    return to_sdp_problem(model.get_problem_data("CULORADS")[0], dualize=False)[0]


def _plain_models():
    """The issue's plain infeasible and unbounded models, with what Clarabel says they are."""
    X2, X3, x = cp.Variable((2, 2)), cp.Variable((3, 3), PSD=True), cp.Variable()
    Y = cp.Variable((2, 2), PSD=True)
    return {
        "psd_entry_negative": (cp.Problem(cp.Minimize(0), [X2 >> 0, X2[0, 0] == -1]), cp.INFEASIBLE),
        "lmi_below_its_bound": (cp.Problem(cp.Minimize(x), [x * np.eye(2) + np.diag([1.0, 2.0]) >> 0, x <= -10]),
                                cp.INFEASIBLE),
        "two_traces": (cp.Problem(cp.Minimize(cp.trace(X3)), [cp.trace(X3) == 1, cp.trace(X3) == 2]),
                       cp.INFEASIBLE),
        "difference_of_diagonals": (cp.Problem(cp.Minimize(Y[0, 0] - Y[1, 1])), cp.UNBOUNDED),
        "indefinite_objective_no_constraint": (cp.Problem(cp.Minimize(cp.trace(np.diag([1.0, -1.0, 2.0]) @ X3))),
                                               cp.UNBOUNDED),
        "free_variable_running_away": (cp.Problem(cp.Minimize(x + cp.trace(Y)), [Y[0, 0] == 1]), cp.UNBOUNDED),
    }


@pytest.mark.parametrize("name", list(_plain_models()))
def test_plain_infeasible_and_unbounded_models_end_in_proven_statuses(name):
    model, expected = _plain_models()[name]
    assert _clarabel_status(lambda: model) == expected
    problem = _direct(model)
    result = solve(problem, **CPU)
    if expected == cp.INFEASIBLE:
        assert result.status is Status.INFEASIBLE
        _assert_farkas_ray(problem, result.certificate)
    else:
        assert result.status is Status.UNBOUNDED
        _assert_primal_ray(problem, result.certificate)
    for entry in ({"solver": "CULORADS"}, {"method": "culorads"}):
        model.solve(**entry, **CPU)
        assert model.status == expected


def test_a_badly_scaled_model_is_solved_after_diagonal_scaling():
    # min 1e8 X_00 + 1e-8 X_11 s.t. X_01 = 1: optimum 2 at X_00 = 1e-8, X_11 = 1e8. It used to come back
    # optimal_inaccurate at 1.08e7 (or 2.48)
    def model():
        X = cp.Variable((2, 2), PSD=True)
        return cp.Problem(cp.Minimize(1e8 * X[0, 0] + 1e-8 * X[1, 1]), [X[0, 1] == 1]), X

    reference, _ = model()
    reference.solve(solver="CLARABEL")
    problem, X = model()
    problem.solve(solver="CULORADS", **CPU)
    assert problem.status == cp.OPTIMAL
    assert problem.value == pytest.approx(reference.value, rel=1e-5)
    assert X.value[0, 1] == pytest.approx(1.0, rel=1e-5) and np.linalg.eigvalsh(X.value)[0] >= -1e-12
    assert "X = D Y D" in problem.solver_stats.extra_stats.message


def test_diagonal_scaling_is_an_equivalent_problem_and_leaves_well_scaled_blocks_alone():
    rng = np.random.default_rng(2)
    n = 5
    d_true = 10.0 ** rng.uniform(-5, 5, n)
    C = np.diag(1.0 / d_true**2) + 0.1 * np.ones((n, n))
    rows, cols = np.tril_indices(n, -1)
    problem = SDPProblem(np.ones(rows.size), [C], [(np.arange(rows.size), rows, cols, np.ones(rows.size))])
    scaling = DiagonalScaling.of(problem)
    assert scaling is not None
    scaled = scaling.apply(problem)
    Y = rng.standard_normal((n, 3))
    (X_factor,) = scaling.unscale_factors((Y,))
    X, Yfull = X_factor @ X_factor.T, Y @ Y.T
    for i in range(problem.m):  # same constraint values and objective for X = D Y D
        assert np.sum(problem.constraint_matrix(i, 0).toarray() * X) == pytest.approx(
            np.sum(scaled.constraint_matrix(i, 0).toarray() * Yfull), rel=1e-12)
    assert np.sum(C * X) == pytest.approx(np.sum(scaled.objective_matrix(0).toarray() * Yfull), rel=1e-12)
    diagonal = np.diag(scaled.objective_matrix(0).toarray())
    assert diagonal.max() / diagonal.min() < 1e3  # spread 1e20 before
    assert DiagonalScaling.of(_small_maxcut()) is None


def _crippled(**extra):
    """Settings that stop a solve long before tol: one ALM outer iteration, one ADMM sweep, nothing else (and not
    the Riemannian phase, which MaxCut would take)."""
    return dict(CPU, max_alm_outer=1, max_admm_iter=1, reopt_level=0, interior_point_handover=False,
                algorithm="alm_admm",
                **extra)


def _small_maxcut():
    rng = np.random.default_rng(3)
    W = sp.random(40, 40, density=0.2, random_state=rng)
    return maxcut_problem((W + W.T).tocsr())


@pytest.mark.parametrize("reduced_tol, expected", [(None, Status.STALLED), (0.9, Status.INACCURATE)])
def test_reduced_tol_separates_inaccurate_from_stalled(reduced_tol, expected):
    result = solve(_small_maxcut(), **_crippled(reduced_tol=reduced_tol))
    assert result.status is expected
    assert result.status.has_solution == (expected is Status.INACCURATE)


def _cvxpy_maxcut():
    rng = np.random.default_rng(3)
    L = sp.random(12, 12, density=0.4, random_state=rng).toarray()
    L = -(L + L.T)
    L += np.diag(-L.sum(axis=1))
    X = cp.Variable((12, 12), PSD=True)
    return cp.Problem(cp.Maximize(cp.trace(L @ X) / 4), [cp.diag(X) == 1])


def test_a_stalled_solve_is_a_solver_error_in_cvxpy_unless_accept_unknown():
    with pytest.raises(cp.SolverError):
        _cvxpy_maxcut().solve(solver="CULORADS", **_crippled())
    problem = _cvxpy_maxcut()
    problem.solve(solver="CULORADS", accept_unknown=True, **_crippled())
    assert problem.status == cp.OPTIMAL_INACCURATE and problem.value is not None
    assert problem.solver_stats.extra_stats.status is Status.STALLED
    with pytest.raises(ValueError, match="accept_unknown"):
        _cvxpy_maxcut().solve(solver="CULORADS", accept_unknown="yes", **CPU)


def test_a_nan_among_the_measures_is_the_worst():
    assert worst([1e-9, math.nan, 1e-3]) == math.inf  # max() would say 1e-3
    result = Result(status=Status.INACCURATE, primal_objective=0.0, dual_objective=0.0, errors=Errors.unmeasured(),
                    criteria={"primal_residual": 1e-9, "certified_gap": math.nan}, dual_bound=None,
                    certified_gap=None, factors=[], x_lp=np.zeros(0), dual=np.zeros(0), iterations={}, ranks=[],
                    solve_time=0.0, device="cpu")
    assert result.max_error == math.inf


def test_an_eigensolve_cut_short_by_its_deadline_still_gives_a_lower_bound():
    rng = np.random.default_rng(0)
    n = 3000
    M = sp.random(n, n, density=5.0 / n, random_state=rng)
    M = (M + M.T).tocsr()
    backend = select_backend("cpu")
    true_min = float(np.linalg.eigvalsh(M.toarray())[0])
    value, _, residual = lanczos_smallest(M, n, backend, accuracy=0.0, seed=0, deadline=time.perf_counter())
    assert residual > 1e-3 and value > true_min + 1.0  # it stopped after one step, far from converged
    layout = BlockLayout(sizes=(n,), offsets=(0,), n_lp=0, lp_offset=n, constraints_touching=(0,))
    (pair,) = smallest_eigenpairs(M, layout, backend, accuracy=1e-6, deadline=time.perf_counter())
    assert pair.lower <= true_min  # the Ritz value less its residual would not be: Gershgorin's bound is


def _random_maxcut(n: int, degree: int = 4):
    rng = np.random.default_rng(1)
    i, j = rng.integers(0, n, (2, n * degree // 2))
    W = sp.coo_array((np.ones(i.size), (i, j)), shape=(n, n)).tocsr()
    return maxcut_problem(((W + W.T) > 0).astype(float))


def test_ctrl_c_returns_the_best_point_with_status_interrupted(monkeypatch):
    record = Run.record

    def interrupt_late(run, progress, force=False):
        record(run, progress, force)
        if run.best is not None and run.inner_iterations > 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(Run, "record", interrupt_late)
    result = solve(_small_maxcut(), algorithm="alm_admm", **CPU)  # phase I: a row per step
    assert result.status is Status.INTERRUPTED and result.status.has_solution
    R = result.factors[0]
    assert R.shape[0] == 40 and np.all(np.isfinite(R))
    assert result.primal_objective == pytest.approx(float(np.sum((_small_maxcut().objective_matrix(0) @ R) * R)))
