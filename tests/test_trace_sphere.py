"""Phase I on the trace sphere (``alm.py``, ``bounds.FixedTrace``): the line search, the detection, and whole solves
checked against known optima, the other route, and certificates recomputed densely from the returned data."""
import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import LowRank, SDPProblem, solve
from cvxpy_culorads.certify.bounds import FixedTrace
from cvxpy_culorads.models import cycle_graph, cycle_theta, hamming_graph, hamming_theta, theta_problem
from cvxpy_culorads.phases.alm import sphere_minimiser

from support import DEVICES


@pytest.mark.parametrize("seed", range(6))
def test_sphere_minimiser_against_a_dense_grid(seed):
    rng = np.random.default_rng(seed)
    quadratic, quartic = rng.standard_normal(3), rng.standard_normal(5)
    quartic[4] = abs(quartic[4])
    size, kappa = rng.uniform(0.5, 2.0), rng.uniform(0.1, 3.0)

    def merit(t):
        u = size / (size + kappa * t * t)
        return u * np.polyval(quadratic[::-1], t) + u * u * np.polyval(quartic[::-1], t)
    grid = np.linspace(0.0, 50.0, 500001)
    tau = sphere_minimiser(quadratic, quartic, size, kappa, tau_max=50.0)
    assert merit(tau) <= merit(grid).min() + 1e-9
    assert 0.0 <= tau <= 50.0


def test_fixed_trace_is_found_only_where_it_holds():
    W = cycle_graph(5)
    assert FixedTrace.of(theta_problem(W, "low_rank")) == FixedTrace(constraint=0, size=1.0)
    assert FixedTrace.of(theta_problem(W, "sparse")) is None  # Y_00 = 1 fixes one entry, not the trace
    n = 4
    diagonal = np.arange(n)
    # 2 tr X = 6 as the second constraint: the sphere |R|_F^2 = 3
    scaled = SDPProblem(np.array([1.0, 6.0]), [(np.array([0]), np.array([1]), np.array([1.0]))],
                        [(np.concatenate([[0], np.ones(n, int)]), np.concatenate([[1], diagonal]),
                          np.concatenate([[0], diagonal]), np.concatenate([[0.5], np.full(n, 2.0)]))],
                        block_sizes=[n])
    assert FixedTrace.of(scaled) == FixedTrace(constraint=1, size=3.0)
    unequal = SDPProblem(np.array([1.0]), [(np.array([0]), np.array([1]), np.array([1.0]))],
                         [(np.zeros(n, int), diagonal, diagonal, np.arange(1.0, n + 1))], block_sizes=[n])
    assert FixedTrace.of(unequal) is None
    two_blocks = SDPProblem(np.array([1.0]), [(np.array([0]), np.array([1]), np.array([1.0]))] * 2,
                            [(np.zeros(n, int), diagonal, diagonal, np.ones(n)), None], block_sizes=[n, n])
    assert FixedTrace.of(two_blocks) is None


def _independent_bound(problem, result) -> float:
    """b'y + tr X lambda_min(C - A*(y)) with tr X = 1, from the returned multipliers, dense."""
    slack = problem.slack_matrix(0, result.dual)
    slack = slack.toarray() if sp.issparse(slack) else np.asarray(slack)
    return float(problem.b @ result.dual) + float(np.linalg.eigvalsh(slack)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d, q", [(6, 2), (3, 4), (2, 6)])
def test_theta_on_the_sphere_is_certified_independently(device, d, q):
    """Hamming graphs are regular, so theta's first subproblems meet the critical point X = J / n (the perturbation
    in ``alm.py``); the answer must match theta = q^(d-1), with the bound recomputed from the multipliers."""
    problem = theta_problem(hamming_graph(d, q), "low_rank")
    result = solve(problem, device=device, interior_point_handover=False)
    assert result.status.name == "OPTIMAL", result.message
    assert result.iterations["alm"] > 0 and result.iterations["admm"] == 0  # phase I alone, on the sphere
    theta = hamming_theta(d, q)
    assert -result.primal_objective == pytest.approx(theta, rel=1e-4)
    R = result.factors[0]
    assert np.sum(R * R) == pytest.approx(1.0, abs=1e-12)  # tr X = 1 held by the iterate, not by a penalty
    bound = _independent_bound(problem, result)
    assert bound <= -theta + 1e-9
    assert bound == pytest.approx(-theta, rel=1e-4)


@pytest.mark.parametrize("n", [7, 11])
def test_theta_of_cycles_agrees_with_the_route_without_the_sphere(n):
    problem = theta_problem(cycle_graph(n), "low_rank")
    on = solve(problem, device="cpu", interior_point_handover=False)
    off = solve(problem, device="cpu", interior_point_handover=False, algorithm="alm_admm")
    for result in (on, off):
        assert result.status.name == "OPTIMAL", result.message
        assert -result.primal_objective == pytest.approx(cycle_theta(n), rel=1e-4)
    assert off.iterations["admm"] > 0 and on.iterations["admm"] == 0
    assert _independent_bound(problem, on) <= -cycle_theta(n) + 1e-9


def test_scaled_trace_with_a_dense_objective_matches_the_interior_point_method():
    """min <C, X> s.t. 2 tr X = 6, X_ij = 0 on a path's edges, with C = -(u u') + a sparse part: the sphere
    |R|_F^2 = 3 with a coefficient other than one, against the interior-point route."""
    rng = np.random.default_rng(3)
    n = 12
    u = rng.standard_normal((n, 1))
    diagonal = np.arange(n)
    edges = np.arange(n - 1)
    constraints = (np.concatenate([np.zeros(n, int), 1 + edges]), np.concatenate([diagonal, edges + 1]),
                   np.concatenate([diagonal, edges]), np.concatenate([np.full(n, 2.0), np.full(n - 1, 0.5)]))
    b = np.zeros(n)
    b[0] = 6.0
    objective = -LowRank(u) + sp.diags_array(rng.uniform(-1.0, 1.0, n)).tocsr()
    problem = SDPProblem(b, [objective], [constraints], block_sizes=[n])
    assert FixedTrace.of(problem) == FixedTrace(constraint=0, size=3.0)
    sphere = solve(problem, device="cpu", interior_point_handover=False)
    reference = solve(problem, device="cpu", algorithm="interior_point")
    assert sphere.status.name == "OPTIMAL" and reference.status.name == "OPTIMAL"
    assert sphere.iterations["admm"] == 0
    assert sphere.primal_objective == pytest.approx(reference.primal_objective, rel=1e-4, abs=1e-4)
    R = sphere.factors[0]
    assert np.sum(R * R) == pytest.approx(3.0, rel=1e-12)
