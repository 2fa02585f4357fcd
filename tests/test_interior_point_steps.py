"""The interior-point method's step lengths: the distances to the boundary of the cone that ``StepBounds`` estimates
(exact eigenvalues for small orders, Lanczos above) against eigvalsh, one transfer to the host per estimate, the check
that catches an overshooting estimate, and solves that keep their optimum with the estimates."""
import math

import numpy as np
import pytest

from cvxpy_culorads import Status, read_sdpa, solve
from cvxpy_culorads.backends.backend import CpuBackend
from cvxpy_culorads.phases import interior_point, step_lengths
from cvxpy_culorads.phases.step_lengths import StepBounds

from support import data_file, sdplib_optimum

ORDERS = (6, 40, 97, 150)  # the first below the exact order, the others estimated by Lanczos


class _Stack:
    """What ``StepBounds`` reads of a stack: its members and their order."""

    def __init__(self, count, n):
        self.blocks, self.n = [None] * count, n


def _positive_definite(k, n, rng, smallest=0.1):
    G = rng.standard_normal((k, n, n))
    return G @ G.swapaxes(1, 2) / n + smallest * np.eye(n)


def _symmetric(k, n, rng):
    D = rng.standard_normal((k, n, n))
    return D + D.swapaxes(1, 2)


def _exact_distance(X, dX):
    """max alpha with X + alpha dX positive semidefinite, from the generalised eigenvalues of (dX, X)."""
    smallest = min(np.linalg.eigvals(np.linalg.solve(Xk, dXk)).real.min() for Xk, dXk in zip(X, dX))
    return math.inf if smallest >= 0 else -1.0 / smallest


NO_LP = ((np.zeros(0), np.zeros(0)),) * 2


def _distances(bounds, X, dX, S, dS, lp=NO_LP):
    factors = tuple([np.linalg.inv(np.linalg.cholesky(M)) for M in side] for side in (X, S))
    return bounds.distances(factors, (dX, dS), lp)


@pytest.fixture
def lanczos_above_32(monkeypatch):
    """The device's rule on the host: exact eigenvalues up to order 32, Lanczos above."""
    monkeypatch.setattr(step_lengths, "EXACT_STEP_ORDER_HOST", step_lengths.BATCHED_EIGEN_ORDER)


@pytest.mark.parametrize("case", ["indefinite", "nearly singular X", "positive semidefinite"])
def test_the_estimated_distance_is_the_exact_one_and_never_past_the_boundary(case, lanczos_above_32):
    rng = np.random.default_rng(ORDERS.index(6) + len(case))
    counts = (3, 2, 1, 2)
    bounds = StepBounds([_Stack(k, n) for k, n in zip(counts, ORDERS)], CpuBackend())
    assert bounds.exact == [True, False, False, False] and bounds.steps == step_lengths.LANCZOS_STEPS
    assert len(bounds.groups) == 1  # orders 40, 97 padded to 150 in one product
    X = [_positive_definite(k, n, rng, 1e-7 if case == "nearly singular X" else 0.1) for k, n in zip(counts, ORDERS)]
    S = [_positive_definite(k, n, rng) for k, n in zip(counts, ORDERS)]
    if case == "positive semidefinite":  # dX = G G' of rank 2: X + alpha dX stays definite for every alpha
        dX = [(lambda G: G @ G.swapaxes(1, 2))(rng.standard_normal((k, n, 2))) for k, n in zip(counts, ORDERS)]
    else:
        dX = [_symmetric(k, n, rng) for k, n in zip(counts, ORDERS)]
    dS = [_symmetric(k, n, rng) for k, n in zip(counts, ORDERS)]
    primal, dual = _distances(bounds, X, dX, S, dS)
    expected_primal = min(_exact_distance(*pair) for pair in zip(X, dX))
    expected_dual = min(_exact_distance(*pair) for pair in zip(S, dS))
    if case == "positive semidefinite":  # no boundary: eigenvalues 0 to rounding leave a huge distance at most
        assert primal > 1e9 and expected_primal > 1e9
    else:
        assert primal == pytest.approx(expected_primal, rel=1e-6)
    assert dual == pytest.approx(expected_dual, rel=1e-6)
    for M, dM, distance in ((X, dX, primal), (S, dS, dual)):
        for Mk, dMk in zip(M, dM):  # the longest step the method takes, 0.99 of the distance up to 1, stays inside
            np.linalg.cholesky(Mk + min(1.0, 0.99 * distance) * dMk)


def test_each_congruence_is_estimated_alone_in_the_padded_batch(lanczos_above_32):
    # the stacks run Lanczos together, vectors padded to the largest order, in two products (padding 40 to 150 would
    # more than double the entries): the distance limited by one member of one stack is found there, and a stack whose
    # direction is zero (a Lanczos breakdown at once) limits nothing
    rng = np.random.default_rng(5)
    orders, counts = (40, 150), (2, 1)
    bounds = StepBounds([_Stack(k, n) for k, n in zip(counts, orders)], CpuBackend())
    assert [n for _, n, _ in bounds.groups] == [150, 40]
    X = [_positive_definite(k, n, rng) for k, n in zip(counts, orders)]
    S = [_positive_definite(k, n, rng) for k, n in zip(counts, orders)]
    dX = [np.zeros((2, 40, 40)), _symmetric(1, 150, rng)]
    dS = [_symmetric(2, 40, rng), np.zeros((1, 150, 150))]
    primal, dual = _distances(bounds, X, dX, S, dS)
    assert primal == pytest.approx(_exact_distance(X[1], dX[1]), rel=1e-6)
    assert dual == pytest.approx(_exact_distance(S[0], dS[0]), rel=1e-6)


def test_the_lp_part_and_lost_definiteness_limit_the_distance(lanczos_above_32):
    rng = np.random.default_rng(2)
    bounds = StepBounds([_Stack(2, 50)], CpuBackend())
    X, S = [_positive_definite(2, 50, rng)], [_positive_definite(2, 50, rng)]
    dX, dS = [0.01 * _symmetric(2, 50, rng)], [0.01 * _symmetric(2, 50, rng)]
    lp = ((np.array([1.0, 2.0, 3.0]), np.array([0.5, -4.0, -1.0])), (np.ones(2), np.ones(2)))
    primal, dual = _distances(bounds, X, dX, S, dS, lp)
    assert primal == 0.5  # x_2 + alpha dx_2 = 2 - 4 alpha reaches 0 first
    assert dual == pytest.approx(_exact_distance(S[0], dS[0]), rel=1e-6)
    factors = ([np.full((2, 50, 50), np.nan)], [np.linalg.inv(np.linalg.cholesky(S[0]))])
    assert bounds.distances(factors, (dX, dS), lp)[0] == 0.0  # X's factor not finite: it cannot move


def test_one_transfer_to_the_host_per_estimate(lanczos_above_32, monkeypatch):
    transfers = []
    backend = CpuBackend()
    monkeypatch.setattr(backend, "to_host", lambda a: transfers.append(a) or np.asarray(a))
    rng = np.random.default_rng(4)
    counts = (3, 2, 1, 2)
    bounds = StepBounds([_Stack(k, n) for k, n in zip(counts, ORDERS)], backend)
    M = [_positive_definite(k, n, rng) for k, n in zip(counts, ORDERS)]
    D = [_symmetric(k, n, rng) for k, n in zip(counts, ORDERS)]
    _distances(bounds, M, D, M, D, ((np.ones(3), -np.ones(3)),) * 2)
    assert len(transfers) == 1


@pytest.mark.parametrize("name", ["theta1", "theta2", "control5"])
def test_solves_with_estimated_step_lengths_keep_their_optimum(name, lanczos_above_32):
    problem = read_sdpa(data_file("sdplib", f"{name}.dat-s"))
    assert max(problem.block_sizes) > step_lengths.BATCHED_EIGEN_ORDER
    result = solve(problem, device="cpu", algorithm="interior_point", time_limit=60.0)
    assert result.status is Status.OPTIMAL, result.summary()
    # on control5 the method ends 2e-6 from the reference optimum with exact eigenvalues too
    assert -result.primal_objective == pytest.approx(sdplib_optimum(name), rel=1e-5)


def test_a_step_past_the_boundary_is_caught_and_taken_from_exact_eigenvalues(lanczos_above_32, monkeypatch):
    # estimates three times the true distance: the factorisation of the moved iterates fails and the side takes
    # its exact distance; the solve still ends at the optimum
    estimate, exact = StepBounds.distances, interior_point.exact_distance
    fallbacks = []
    monkeypatch.setattr(StepBounds, "distances", lambda self, *args: tuple(3 * d for d in estimate(self, *args)))
    monkeypatch.setattr(interior_point, "exact_distance", lambda *args: fallbacks.append(1) or exact(*args))
    result = solve(read_sdpa(data_file("sdplib", "theta1.dat-s")), device="cpu", algorithm="interior_point")
    assert fallbacks and result.status is Status.OPTIMAL, result.summary()
    assert -result.primal_objective == pytest.approx(sdplib_optimum("theta1"), rel=1e-6)


def test_without_matrices_only_the_lp_part_limits_the_distance():
    bounds = StepBounds([], CpuBackend())
    lp = ((np.array([1.0, 2.0]), np.array([-4.0, 1.0])), (np.ones(2), np.ones(2)))
    assert bounds.distances(([], []), ([], []), lp) == (0.25, math.inf)
