"""The interior-point route: the plan starts the route the cost model expects cheaper (the low-rank phases on problems
whose constraints they keep exact, the interior-point method on small problems they serve badly), and what the method
gained for those problems (the shifted factorisation refined against M, the stack of equal blocks whose Schur parts are
formed together) is right; the Schur complement in bands: ``test_interior_point.py``."""
import numpy as np
import pytest
import scipy.linalg

from cvxpy_culorads import SDPProblem, Status, read_sdpa, solve
from cvxpy_culorads.backends.backend import CpuBackend, select_backend
from cvxpy_culorads.backends.memory import interior_point_groups
from cvxpy_culorads.phases.interior_point import InteriorPointPhase, _Block, _Stack
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.costs import LOW_RANK_HARD_STEPS, LOW_RANK_STEPS, RouteCosts, low_rank_steps
from cvxpy_culorads.solver.plan import LowRankPhases, plan

from support import (
    DEVICES,
    clarabel_value,
    data_file,
    dense_blocks,
    random_maxcut,
    random_mixed_problem,
    sdplib_optimum,
)


def _theta(n: int, seed: int) -> SDPProblem:
    """Lovasz theta of a random graph: max <J, X>, tr X = 1, X_ij = 0 on edges (a trace constraint on one block)."""
    rng = np.random.default_rng(seed)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.3]
    con = [0] * n + list(range(1, len(edges) + 1))
    rows = list(range(n)) + [j for _, j in edges]
    cols = list(range(n)) + [i for i, _ in edges]
    b = np.zeros(len(edges) + 1)
    b[0] = 1.0
    return SDPProblem(b, [-np.ones((n, n))], [(con, rows, cols, [1.0] * (n + len(edges)))], block_sizes=[n])


def _route_kinds():
    """Small problems of both kinds: (problem, whether the low-rank phases keep its constraints exact)."""
    return [(random_maxcut(300, 0.05, seed=5)[0], True), (_theta(60, 2), True),
            (random_mixed_problem(1), False), (read_sdpa(data_file("sdplib", "truss5.dat-s")), False)]


def test_the_step_estimate_follows_the_phases_the_plan_chooses_and_decides_the_route():
    for problem, exact in _route_kinds():
        planned = plan(problem, Settings())
        assert (planned.phases is not LowRankPhases.ALM_ADMM) == exact
        assert low_rank_steps(problem) == (LOW_RANK_STEPS if exact else LOW_RANK_HARD_STEPS)
        # on these sizes that decides the route: the low-rank phases where they keep the constraints exact
        assert RouteCosts.of(problem, planned.cost_ranks, on_gpu=False).interior_point_first == (not exact)


@pytest.mark.parametrize("kind", range(4))
def test_the_solve_starts_the_route_the_cost_model_predicts(kind):
    problem, _ = _route_kinds()[kind]
    predicted = RouteCosts.of(problem, plan(problem, Settings()).cost_ranks, on_gpu=False)
    result = solve(problem, device="cpu", time_limit=10.0)
    first = "interior-point method first" if predicted.interior_point_first else "low-rank phases first"
    assert result.route == f"{first} (by estimated cost): {predicted.describe()}"
    assert (result.iterations["alm"] + result.iterations["riemannian"] == 0) == predicted.interior_point_first
    assert result.status is Status.OPTIMAL, result.summary()


def test_a_degenerate_truss_problem_takes_the_interior_point_method_first():
    # truss8: LoRADS's ALM needs over a thousand steps before it hands over; the method alone takes 16 iterations
    problem = read_sdpa(data_file("sdplib", "truss8.dat-s"))
    result = solve(problem, device="cpu", time_limit=30.0)
    assert result.route.startswith("interior-point method first (by estimated cost)")
    assert result.iterations["alm"] == 0 and result.status is Status.OPTIMAL, result.summary()
    assert -result.primal_objective == pytest.approx(sdplib_optimum("truss8"), rel=1e-5)


def _linear_algebra_of(m: int) -> InteriorPointPhase:
    """The method's Schur-complement solves on ``m`` constraints, without a problem."""
    phase = InteriorPointPhase.__new__(InteriorPointPhase)
    phase.backend, phase.xp, phase.m = CpuBackend(), np, m
    return phase


def test_a_singular_schur_complement_is_factorised_shifted_and_solved_refined():
    # M = B B' of rank 5 < 8 (a degenerate problem's Schur complement near its optimum): Cholesky fails on it
    rng = np.random.default_rng(3)
    B = rng.standard_normal((8, 5))
    M = B @ B.T
    phase = _linear_algebra_of(8)
    factor = phase._factorise(M.copy())
    assert factor is not None
    kept, L = factor
    np.testing.assert_allclose(kept, M, atol=1e-14)  # the shift is not left in the M the solves refine against
    assert not np.allclose(L @ L.T, M, rtol=0, atol=1e-15)  # the factor is of a shifted M
    h = M @ rng.standard_normal(8)  # a right-hand side in M's range, as r_p - A(...) is for a feasible problem
    dy = phase._solve(factor, h)
    assert np.linalg.norm(M @ dy - h) <= 1e-9 * np.linalg.norm(h)
    assert phase._factorise(-np.eye(8)) is None  # no small shift makes a negative definite M positive


def test_a_mixed_problem_through_the_interior_point_route_matches_clarabel():
    problem = random_mixed_problem(6)
    result = solve(problem, device="cpu", algorithm="interior_point", time_limit=10.0)
    assert result.iterations["alm"] == 0 and result.status is Status.OPTIMAL, result.summary()
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_a_stack_of_equal_blocks_forms_the_schur_complement_of_its_members(device):
    # truss5's ten groups of order 30 on the dense route, each in one band: the stack forms their Schur parts
    # together, as batched products; the sum must be the members' own, each scattered to its constraints
    problem = read_sdpa(data_file("sdplib", "truss5.dat-s")).expanded()
    backend, rng = select_backend(device), np.random.default_rng(1)
    groups = [members for members in interior_point_groups(problem.block_sizes)
              if sum(problem.block_sizes[k] for k in members) == 30]
    blocks = [_Block(problem, members, backend, by_positions=False) for members in groups]
    X = np.stack([_random_positive_definite(30, rng) for _ in blocks])
    Z = np.stack([_random_positive_definite(30, rng) for _ in blocks])
    expected = np.zeros((problem.m, problem.m))
    for block, Xb, Zb in zip(blocks, X, Z):
        part = block.schur(backend.asarray(Xb), backend.asarray(Zb))
        expected[np.ix_(block.constraints, block.constraints)] += backend.to_host(part)
    stack = _Stack(blocks, backend)
    assert len(blocks) == 10 and stack.batched
    got = np.zeros_like(expected)
    index = backend.to_host(stack.constraint_index)
    got[np.ix_(index, index)] = backend.to_host(stack.schur(backend.asarray(X), backend.asarray(Z)))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    # and A(X), A*(y) of the stack are the members' (<A_i, X_b> summed; sum_i y_i A_ib per member)
    y = rng.standard_normal(problem.m)
    adjoint = backend.to_host(stack.adjoint(backend.asarray(y)))
    applied = backend.xp.zeros(problem.m)
    stack.apply(backend.asarray(X), applied)
    applied = backend.to_host(applied)
    _, A = dense_blocks(problem)
    for b, members in enumerate(groups):
        dense = [scipy.linalg.block_diag(*(A[i][k] for k in members)) for i in range(problem.m)]
        np.testing.assert_allclose(adjoint[b], sum(y_i * Ai for y_i, Ai in zip(y, dense)), atol=1e-12)
    expected_applied = [sum(np.vdot(scipy.linalg.block_diag(*(A[i][k] for k in members)), Xb)
                            for members, Xb in zip(groups, X)) for i in range(problem.m)]
    np.testing.assert_allclose(applied, expected_applied, rtol=1e-12, atol=1e-9)


def _random_positive_definite(n, rng):
    M = rng.standard_normal((n, n))
    return M @ M.T + n * np.eye(n)


@pytest.mark.parametrize("name", ["hinf3", "hinf7"])
def test_an_interior_point_start_that_stalls_within_reduced_tol_is_not_handed_to_the_low_rank_phases(name):
    """SDPLIB's hinf3 and hinf7 are ill-posed: the interior-point start stalls within ``reduced_tol`` but short of
    OPTIMAL (a criterion or the residual share above tol), where the low-rank phases never improved on its point
    (decision record "exact-statuses-and-cvxpy-duals"). None of their steps is spent and the point is the answer,
    INACCURATE, with its value near the known optimum."""
    settings = Settings()
    result = solve(read_sdpa(data_file("sdplib", f"{name}.dat-s")), time_limit=30)
    assert result.route.startswith("interior-point method first")
    assert result.iterations["alm"] + result.iterations["admm"] + result.iterations["riemannian"] == 0
    assert result.status is Status.INACCURATE
    assert max(result.criteria.values()) <= settings.inaccurate_tol
    optimum = sdplib_optimum(name)
    assert abs(-result.primal_objective - optimum) <= settings.inaccurate_tol * (1.0 + abs(optimum))
