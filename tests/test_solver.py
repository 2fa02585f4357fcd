"""End-to-end solves against independent references, the statuses, and what a Result promises."""
import numpy as np
import pytest

import cvxpy_culorads as cl
from cvxpy_culorads import Status, solve

from conftest import DEVICES, dense_blocks, random_maxcut, random_mixed_problem

cp = pytest.importorskip("cvxpy")


def _clarabel_value(problem):
    """The optimal value of a small SDPProblem from Clarabel through CVXPY (the reference)."""
    C, A = dense_blocks(problem)
    X = [cp.Variable((n, n), PSD=True) for n in problem.block_sizes]
    x = cp.Variable(problem.n_lp, nonneg=True) if problem.n_lp else None
    A_lp = problem.A_lp.toarray()
    lhs = [sum(cp.sum(cp.multiply(A[i][k], X[k])) for k in range(problem.num_blocks)) for i in range(problem.m)]
    if x is not None:
        lhs = [lhs[i] + A_lp[i] @ x for i in range(problem.m)]
    objective = sum(cp.sum(cp.multiply(C[k], X[k])) for k in range(problem.num_blocks))
    if x is not None:
        objective = objective + problem.c_lp @ x
    prob = cp.Problem(cp.Minimize(objective), [cp.hstack(lhs) == problem.b])
    prob.solve(solver="CLARABEL")
    return prob.value


def _own_errors(problem, result):
    """DIMACS errors recomputed densely from the returned factors and multipliers."""
    C, A = dense_blocks(problem)
    X = [R @ R.T for R in result.factors]
    Ax = np.array([sum(np.sum(A[i][k] * X[k]) for k in range(problem.num_blocks)) for i in range(problem.m)])
    Ax += problem.A_lp @ result.x_lp
    lam = result.dual
    primal = sum(np.sum(C[k] * X[k]) for k in range(problem.num_blocks)) + problem.c_lp @ result.x_lp
    dual = problem.b @ lam
    violation = sum(max(0.0, -np.linalg.eigvalsh(C[k] - sum(lam[i] * A[i][k] for i in range(problem.m)))[0])
                    for k in range(problem.num_blocks))
    violation += np.maximum(0.0, -(problem.c_lp - problem.A_lp.T @ lam)).sum()
    return dict(primal_infeasibility=np.linalg.norm(Ax - problem.b) / (1 + np.abs(problem.b).sum()),
                dual_infeasibility=violation / (1 + problem.C_norm_1),
                gap=abs(primal - dual) / (1 + abs(primal) + abs(dual))), primal


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1])
def test_maxcut_matches_clarabel(device, seed):
    problem, _ = random_maxcut(25, 0.3, seed)
    result = solve(problem, device=device)
    assert result.status is Status.OPTIMAL
    assert result.primal_objective == pytest.approx(_clarabel_value(problem), rel=1e-4)
    errors, primal = _own_errors(problem, result)
    assert primal == pytest.approx(result.primal_objective, rel=1e-10)
    C, A = dense_blocks(problem)
    slack = C[0] - sum(lam * A_i[0] for lam, A_i in zip(result.dual, A))
    assert result.min_eigenvalues[0] == pytest.approx(np.linalg.eigvalsh(slack)[0], abs=1e-8)
    for key, value in errors.items():
        assert value == pytest.approx(result.errors[key], rel=1e-4, abs=1e-9)
        assert value <= 1e-5
    assert (result.peak_device_bytes > 0) == (device == "gpu")  # what the device's memory pool held


@pytest.mark.parametrize("device", DEVICES)
def test_blocks_and_nonnegative_variables_match_clarabel(device):
    problem = random_mixed_problem(2)
    result = solve(problem, device=device)
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.primal_objective == pytest.approx(_clarabel_value(problem), rel=1e-4, abs=1e-6)
    errors, _ = _own_errors(problem, result)
    assert max(errors.values()) <= 1e-5
    assert [R.shape[0] for R in result.factors] == list(problem.block_sizes)
    assert result.x_lp.shape == (problem.n_lp,) and np.all(result.x_lp >= 0)


def test_result_fields_and_rank_bound():
    problem, _ = random_maxcut(20, 0.4, seed=3)
    result = solve(problem, device="cpu", rank=2)
    assert result.status is Status.OPTIMAL
    assert result.ranks[0] == result.factors[0].shape[1] >= 2
    assert result.iterations["alm"] > 0
    assert result.dual.shape == (problem.m,)
    assert result.X(0).shape == (20, 20)
    assert "optimal" in result.summary()


def test_reoptimisation_levels_give_the_same_optimum():
    problem, _ = random_maxcut(30, 0.3, seed=6)
    values = [solve(problem, device="cpu", reopt_level=level) for level in (0, 2)]
    assert values[1].status is Status.OPTIMAL
    assert values[0].primal_objective == pytest.approx(values[1].primal_objective, rel=1e-4)


@pytest.mark.parametrize("options, status", [(dict(max_iter=5), Status.ITERATION_LIMIT),
                                            (dict(time_limit=1e-9), Status.TIME_LIMIT)])
def test_limits_give_honest_statuses(options, status):
    problem, _ = random_maxcut(30, 0.3, seed=7)
    result = solve(problem, device="cpu", **options)
    assert result.status is status
    assert result.max_error > 1e-5  # the status is a limit only because the point is not optimal
    assert result.factors[0].shape[0] == 30


def test_tighter_tolerance_is_met():
    problem, _ = random_maxcut(25, 0.3, seed=8)
    result = solve(problem, device="cpu", tol=1e-7)
    assert result.status is Status.OPTIMAL
    assert result.max_error <= 1e-7


def test_unknown_setting_is_rejected():
    problem, _ = random_maxcut(5, 0.5, seed=0)
    with pytest.raises(ValueError, match="unknown setting"):
        solve(problem, tolerance=1e-3)


def test_public_api():
    for name in ("SDPProblem", "solve", "Settings", "Result", "Status", "read_sdpa", "write_sdpa"):
        assert hasattr(cl, name)


def test_a_problem_that_does_not_fit_is_refused_before_allocating(monkeypatch):
    from cvxpy_culorads.backend import Backend

    problem, _ = random_maxcut(20, 0.3, seed=9)
    monkeypatch.setattr(Backend, "free_memory", lambda self: 1000)
    with pytest.raises(MemoryError, match="needs about .* GiB of device memory"):
        solve(problem, device="cpu")
