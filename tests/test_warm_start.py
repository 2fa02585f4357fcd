"""Warm starts (``solve(..., warm_start=result)``, CVXPY's ``warm_start=True``): a re-solve after a change of about
1 % of the data takes at most half the low-rank iterations of a cold solve and ends at the same certified answer.

Each test solves the changed problem cold and warm and compares what both return: the status, the iterations, the
objective (within tol of each other) and the returned point's residual, recomputed from the problem's data. Both
solves run the low-rank phases (``algorithm="low_rank"`` where the interior-point method would start by estimated
cost), so the iteration counts measure the same method.
"""
import dataclasses

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

import cvxpy_culorads  # noqa: F401  (registers the solver and the solve method)
from cvxpy_culorads import SDPProblem, Status, solve
from cvxpy_culorads.models import hamming_graph, maxcut_problem, theta_problem

from support import clarabel_value, primal_residual, random_mixed_problem

TOL = 1e-5


def _iterations(result) -> int:
    return sum(result.iterations.values())


def _same_answer(cold, warm):
    """Both OPTIMAL, at objectives within tol of each other (relative, as the certified gap measures them), and the
    warm point feasible by the problem's own data."""
    assert cold.status is Status.OPTIMAL, cold.summary()
    assert warm.status is Status.OPTIMAL, warm.summary()
    scale = 1.0 + abs(cold.primal_objective) + abs(warm.primal_objective)
    assert abs(warm.primal_objective - cold.primal_objective) <= TOL * scale


def _random_graph(n: int, density: float, seed: int) -> sp.csr_array:
    upper = sp.triu(sp.random(n, n, density=density, random_state=seed, data_rvs=np.ones), 1)
    return sp.csr_array(upper + upper.T)


def test_maxcut_weights_changed_by_one_percent():
    W = _random_graph(400, 0.02, seed=0)
    previous = solve(maxcut_problem(W), device="cpu")
    changed = W.copy()
    changed.data = changed.data * (1.0 + 0.01 * np.random.default_rng(1).uniform(-1.0, 1.0, changed.data.size))
    changed = sp.csr_array((changed + changed.T) / 2)
    problem = maxcut_problem(changed)
    cold = solve(problem, device="cpu")
    warm = solve(problem, device="cpu", warm_start=previous)
    _same_answer(cold, warm)
    assert _iterations(warm) <= _iterations(cold) / 2, (cold.iterations, warm.iterations)
    assert any("warm start" in reason for reason in warm.plan)
    R = warm.factors[0]
    assert np.allclose(np.einsum("ij,ij->i", R, R), 1.0, atol=1e-8)  # diag(X) = 1
    L = sp.diags_array(np.asarray(changed.sum(axis=1)).ravel()) - changed
    assert -np.sum(R * (L @ R)) / 4 == pytest.approx(warm.primal_objective, rel=1e-9)  # min -<L, X>/4


def test_theta_with_an_edge_added_fits_the_multipliers_afresh():
    G = hamming_graph(2, 12)
    previous = solve(theta_problem(G), device="cpu")
    grown = G.tolil()
    grown[0, 13] = grown[13, 0] = 1.0  # vertices 0 and 13 differ in both letters: not adjacent before
    problem = theta_problem(sp.csr_array(grown))
    assert problem.m == previous.dual.size + 1
    cold = solve(problem, device="cpu")
    warm = solve(problem, device="cpu", warm_start=previous)
    _same_answer(cold, warm)
    assert _iterations(warm) <= _iterations(cold) / 2, (cold.iterations, warm.iterations)
    assert any("multipliers fitted to the factors" in reason for reason in warm.plan)
    assert primal_residual(problem, warm) <= TOL


def test_sdplib_like_problem_with_b_changed():
    """Two PSD blocks and nonnegative variables (``support.random_mixed_problem``), b moved by 1 %: phases I and
    II from the previous factors, multipliers, penalty and objective scale; the answer against Clarabel's."""
    original = random_mixed_problem(seed=2)
    b = original.b * (1.0 + 0.01 * np.random.default_rng(3).uniform(-1.0, 1.0, original.m))
    problem = SDPProblem(b, original.C_coords, original.A_coords, block_sizes=original.block_sizes,
                         c_lp=original.c_lp, A_lp=original.A_lp)
    options = dict(device="cpu", algorithm="low_rank", interior_point_handover=False)
    previous = solve(original, **options)
    cold = solve(problem, **options)
    warm = solve(problem, warm_start=previous, **options)
    _same_answer(cold, warm)
    assert warm.iterations["interior_point"] == 0
    assert _iterations(warm) <= _iterations(cold) / 2, (cold.iterations, warm.iterations)
    assert primal_residual(problem, warm) <= TOL
    reference = clarabel_value(problem)
    assert abs(warm.primal_objective - reference) <= TOL * (1.0 + abs(reference))


def test_other_variables_start_cold_and_say_why():
    previous = solve(maxcut_problem(_random_graph(60, 0.1, seed=0)), device="cpu")
    problem = maxcut_problem(_random_graph(61, 0.1, seed=0))
    cold = solve(problem, device="cpu", algorithm="low_rank")
    refused = solve(problem, device="cpu", algorithm="low_rank", warm_start=previous)
    assert refused.status is Status.OPTIMAL
    assert "warm start not used" in refused.message and "started cold" in refused.message
    assert any("warm start not used" in reason for reason in refused.plan)
    assert refused.iterations == cold.iterations  # the same start: the same run
    assert refused.primal_objective == cold.primal_objective


def test_a_warm_start_must_be_a_result():
    problem = maxcut_problem(_random_graph(20, 0.2, seed=0))
    with pytest.raises(ValueError, match="warm_start must be a Result"):
        solve(problem, device="cpu", warm_start=np.zeros((20, 3)))


def test_a_zero_block_can_leave_zero():
    """A block that was X = 0 at the previous optimum, then is needed: exact zeros have a zero gradient, so the warm
    start adds a little of the cold start's noise (``warm.WARM_NOISE``) and the block moves off zero."""
    idx = np.arange(3)
    # min <I, X1> + <I, X2> s.t. tr X1 + tr X2 = 1 (X2 free of cost first, then costlier than X1)
    A = [(np.zeros(3, np.int64), idx, idx, np.ones(3))] * 2

    def problem(cost_2):
        return SDPProblem(np.ones(1), [sp.eye_array(3) * 2.0, sp.eye_array(3) * cost_2], A, block_sizes=[3, 3])

    options = dict(device="cpu", algorithm="low_rank", interior_point_handover=False)
    previous = solve(problem(1.0), **options)
    assert np.linalg.norm(previous.factors[0]) <= 1e-3  # all of the trace in the cheaper block 2
    changed = problem(3.0)
    warm = solve(changed, warm_start=previous, **options)
    assert warm.status is Status.OPTIMAL, warm.summary()
    assert warm.primal_objective == pytest.approx(2.0, abs=1e-4)  # all of it in block 1 now
    assert np.sum(warm.factors[0] ** 2) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("path", [dict(solver="CULORADS"), dict(method="culorads")])
def test_cvxpy_re_solves_warm_after_a_parameter_change(path):
    """CVXPY's ``warm_start`` (True by default) on both entry points: the right-hand side diag(X) = d moved by 1 %
    re-solves from the last answer; ``warm_start=False`` solves it cold."""
    n = 100
    rng = np.random.default_rng(0)
    W = np.triu(rng.random((n, n)) < 0.1, 1).astype(float)
    W = W + W.T
    L = np.diag(W.sum(1)) - W
    d = cp.Parameter(n, value=np.ones(n))
    X = cp.Variable((n, n), PSD=True)
    problem = cp.Problem(cp.Maximize(cp.trace(L @ X) / 4), [cp.diag(X) == d])
    options = dict(device="cpu", algorithm="low_rank", **path)
    problem.solve(**options)
    d.value = 1.0 + 0.01 * rng.uniform(-1.0, 1.0, n)
    warm_value = problem.solve(**options)
    warm = problem.solver_stats.extra_stats
    assert any("warm start" in reason for reason in warm.plan)
    assert np.allclose(np.diag(X.value), d.value, atol=1e-6)
    cold_value = problem.solve(warm_start=False, **options)
    cold = problem.solver_stats.extra_stats
    assert not any("warm start" in reason for reason in cold.plan)
    assert problem.status == cp.OPTIMAL and warm.status is Status.OPTIMAL
    assert abs(warm_value - cold_value) <= TOL * (1.0 + abs(warm_value) + abs(cold_value))
    assert _iterations(warm) <= _iterations(cold) / 2, (cold.iterations, warm.iterations)


def _objective(problem, factors) -> float:
    """sum_k <C_k, R_k R_k'> from the problem's own matrices."""
    return sum(float(np.sum(R * (problem.objective_matrix(k) @ R))) for k, R in enumerate(factors))


def test_the_start_maps_into_renumbered_and_rescaled_coordinates():
    """The previous factors are the user's X = R R': a solve in renumbered rows (``RowOrder``) or in Y = D^-1 X D^-1
    (``DiagonalScaling``) starts from the same X, so the objective and residual of the mapped start in the solved
    problem are those of the factors in the user's."""
    from cvxpy_culorads.distributed import RowOrder
    from cvxpy_culorads.problem.scaling import DiagonalScaling
    from cvxpy_culorads.settings import Settings
    from cvxpy_culorads.solver.warm import WarmStart

    problem = maxcut_problem(_random_graph(300, 0.03, seed=4))
    previous = solve(problem, device="cpu")
    warm, refusal = WarmStart.of(problem, previous)
    assert refusal == "" and warm.dual is not None
    order = RowOrder.of(problem, Settings.from_options(devices=2, shard_order="rcm"))
    renumbered = order.apply(problem)
    mapped = warm.reordered(order.order)
    assert _objective(renumbered, mapped.factors) == pytest.approx(previous.primal_objective, rel=1e-12)
    assert primal_residual(renumbered, dataclasses.replace(previous, factors=mapped.factors)) <= 1e-12

    n = 40
    d = np.logspace(-4, 4, n)
    idx = np.arange(n)
    badly_scaled = SDPProblem(np.ones(n), [sp.diags_array(d * d)], [(idx, idx, idx, d * d)])
    scaling = DiagonalScaling.of(badly_scaled)
    assert scaling is not None
    R = np.random.default_rng(0).standard_normal((n, 3)) / d[:, None]  # X_jj d_j^2 of order one
    start = WarmStart(factors=(R,), x_lp=np.zeros(0), dual=None, penalty=None, objective_scale=1.0, kept="")
    scaled = scaling.apply(badly_scaled)
    Y = start.scaled(scaling.diagonals).factors[0]
    assert _objective(scaled, [Y]) == pytest.approx(_objective(badly_scaled, [R]), rel=1e-12)
