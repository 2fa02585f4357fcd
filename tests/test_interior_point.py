"""The interior-point finish: its Schur complement against the definition, solves against references, the
hand-over rules, and honest statuses when it is cut short or the problem has no solution."""
import math

import numpy as np
import pytest
import scipy.linalg

from cvxpy_culorads import SDPProblem, Status, read_sdpa, solve
from cvxpy_culorads.backends.backend import CpuBackend, select_backend
from cvxpy_culorads.backends.memory import (
    INTERIOR_POINT_GROUP_ORDER,
    INTERIOR_POINT_MAX_CONSTRAINTS,
    interior_point_fits,
    interior_point_groups,
    interior_point_work_bytes,
)
from cvxpy_culorads.phases import interior_point
from cvxpy_culorads.phases.interior_point import DEVICE_MIN_ORDER, _Block
from cvxpy_culorads.solver.run import INTERIOR_POINT_MEMORY_MESSAGE
from cvxpy_culorads.solver.tuning import Tuning

from support import (
    DEVICES,
    clarabel_value,
    data_file,
    dense_blocks,
    own_errors,
    primal_residual,
    random_maxcut,
    random_mixed_problem,
    sdplib_optimum,
)


def _random_pd(n, rng):
    M = rng.standard_normal((n, n))
    return M @ M.T + n * np.eye(n)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("by_positions", [True, False])
@pytest.mark.parametrize("band_entries", [None, 40])
def test_schur_complement_is_the_trace_formula(by_positions, band_entries, device, monkeypatch):
    # M_ij = <A_i, X A_j Z> for both ways of forming it, on a block with diagonal and off-diagonal coefficients; in
    # one band, or in bands of one to a few rows of K (positions) or constraints (dense), crossing every boundary
    if band_entries is not None:
        monkeypatch.setattr(interior_point, "INTERIOR_POINT_BAND_ENTRIES", band_entries)
    problem = random_mixed_problem(3)
    backend = select_backend(device)
    rng = np.random.default_rng(0)
    _, A = dense_blocks(problem)
    for k, n in enumerate(problem.block_sizes):
        block = _Block(problem, [k], backend, by_positions=by_positions)
        assert (block.chunk < (block.rows.size if by_positions else block.constraints.size)) == bool(band_entries)
        X, Z = _random_pd(n, rng), _random_pd(n, rng)
        got = backend.to_host(block.schur(backend.asarray(X), backend.asarray(Z)))
        rows = [A[i][k] for i in block.constraints]
        expected = np.array([[np.trace(Ai @ X @ Aj @ Z) for Aj in rows] for Ai in rows])
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    # all blocks merged into one block-diagonal matrix (what memory.interior_point_groups does with small blocks)
    group = _Block(problem, range(problem.num_blocks), backend, by_positions=by_positions)
    n = sum(problem.block_sizes)
    X, Z = _random_pd(n, rng), _random_pd(n, rng)
    got = backend.to_host(group.schur(backend.asarray(X), backend.asarray(Z)))
    rows = [scipy.linalg.block_diag(*A[i]) for i in group.constraints]
    expected = np.array([[np.trace(Ai @ X @ Aj @ Z) for Aj in rows] for Ai in rows])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    blocks = [backend.to_host(B) for B in group.member_matrices(backend.asarray(X))]
    assert [B.shape for B in blocks] == [(n, n) for n in problem.block_sizes]
    np.testing.assert_array_equal(blocks[-1], X[-problem.block_sizes[-1]:, -problem.block_sizes[-1]:])


def test_small_blocks_are_grouped_up_to_the_group_order():
    order = INTERIOR_POINT_GROUP_ORDER
    assert interior_point_groups([2, 2, 2, order - 6, 1, order + 5, 3]) == [[0, 1, 2, 3], [4], [5], [6]]
    assert interior_point_groups([order] * 2) == [[0], [1]]
    assert interior_point_groups([]) == []


@pytest.mark.parametrize("device", DEVICES)
def test_interior_point_matches_clarabel(device):
    problem = random_mixed_problem(2)
    result = solve(problem, device=device, interior_point_patience=1, algorithm="low_rank")
    assert result.iterations["alm"] == 1 and result.iterations["interior_point"] > 0
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=1e-5, abs=1e-7)
    errors, primal = own_errors(problem, result)
    assert primal == pytest.approx(result.primal_objective, rel=1e-10)
    for key, value in errors.items():
        assert value == pytest.approx(getattr(result.errors, key), rel=1e-4, abs=1e-9)
    assert result.x_lp.shape == (problem.n_lp,) and np.all(result.x_lp >= 0)
    assert all(R.shape == (n, r) for R, n, r in zip(result.factors, problem.block_sizes, result.ranks))


@pytest.mark.parametrize("device", DEVICES)
def test_interior_point_agrees_with_the_low_rank_phases(device):
    # a block of order >= DEVICE_MIN_ORDER, so on a GPU the method runs there; two independent methods, one optimum
    problem, _ = random_maxcut(DEVICE_MIN_ORDER + 6, 0.2, seed=3)
    low_rank = solve(problem, device=device, interior_point_handover=False)
    interior = solve(problem, device=device, interior_point_patience=1)
    assert interior.iterations["interior_point"] > 0 and low_rank.iterations["interior_point"] == 0
    for result in (low_rank, interior):
        assert result.status is Status.OPTIMAL, result.summary()
    assert interior.primal_objective == pytest.approx(low_rank.primal_objective, rel=2e-5)
    errors, _ = own_errors(problem, interior)
    assert max(errors.values()) <= 1e-5


@pytest.mark.parametrize("name", ["truss5", "arch0", "control1", "qap5"])
def test_problems_where_the_low_rank_method_stalls(name):
    # LoRADS (ours before the hand-over, and the C code) ends far from tol or at a limit here; default settings
    problem = read_sdpa(data_file("sdplib", f"{name}.dat-s"))
    result = solve(problem, device="cpu")
    assert result.iterations["interior_point"] > 0
    assert result.status is Status.OPTIMAL, result.summary()
    assert primal_residual(problem, result) <= 1e-5
    assert -result.primal_objective == pytest.approx(sdplib_optimum(name), rel=1e-4)


def test_switched_off_it_never_runs():
    result = solve(random_mixed_problem(2), device="cpu", interior_point_handover=False, interior_point_patience=1)
    assert result.iterations["interior_point"] == 0
    assert result.stage_times["interior_point"] == 0.0


def test_a_limit_inside_it_returns_its_point_with_an_honest_status():
    problem = random_mixed_problem(2)
    result = solve(problem, device="cpu", interior_point_patience=1, max_iter=4, algorithm="low_rank")
    assert result.status is Status.ITERATION_LIMIT
    assert result.iterations == {"alm": 1, "admm": 0, "riemannian": 0, "interior_point": 3}
    errors, _ = own_errors(problem, result)
    for key, value in errors.items():  # the errors describe the returned point, whichever phase made it
        assert value == pytest.approx(getattr(result.errors, key), rel=1e-4, abs=1e-9)


def test_an_infeasible_problem_is_not_reported_optimal():
    # x1 + x2 = -1 with x >= 0 and tr X = 1: no feasible point
    problem = SDPProblem(np.array([1.0, -1.0]), [np.eye(2)], [([0, 0], [0, 1], [0, 1], [1.0, 1.0])],
                         c_lp=np.ones(2), A_lp=np.array([[0.0, 0.0], [1.0, 1.0]]))
    result = solve(problem, device="cpu", interior_point_patience=1)
    assert result.iterations["interior_point"] > 0
    assert result.status is not Status.OPTIMAL


def test_only_small_problems_fit():
    n = INTERIOR_POINT_MAX_CONSTRAINTS + 1
    idx = np.arange(n)
    diagonal = SDPProblem(np.ones(n), [None], [(idx, idx, idx, np.ones(n))], block_sizes=[n])
    assert not interior_point_fits(diagonal) and interior_point_work_bytes(diagonal) is None
    assert interior_point_fits(random_mixed_problem(0))


def test_it_is_skipped_without_device_memory_for_it(monkeypatch, caplog):
    free = iter([math.inf])  # room for the low-rank phases' set-up, none for the dense work arrays
    monkeypatch.setattr(CpuBackend, "free_memory", lambda self: next(free, 0))
    result = solve(random_mixed_problem(2), device="cpu", interior_point_patience=1, max_iter=200, verbose=True)
    assert result.iterations["interior_point"] == 0
    assert INTERIOR_POINT_MEMORY_MESSAGE in caplog.text  # the log: logging's records, which pytest captures


def _maxcut_of_order(n: int):
    problem, _ = random_maxcut(n, 4.0 / n, seed=11)
    return problem


def test_the_cheaper_route_starts():
    small = solve(random_mixed_problem(2), device="cpu")  # blocks of order 6 and 4: milliseconds of IPM
    assert small.route.startswith("interior-point method first (by estimated cost)")
    assert small.iterations["alm"] == 0 and small.iterations["interior_point"] > 0
    assert small.status is Status.OPTIMAL
    assert small.primal_objective == pytest.approx(clarabel_value(random_mixed_problem(2)), rel=1e-5, abs=1e-7)
    large = solve(_maxcut_of_order(400), device="cpu")  # n^3 dense work against a few hundred cheap steps
    assert large.route.startswith("low-rank phases first (by estimated cost)")
    assert large.iterations["interior_point"] == 0 and large.status is Status.OPTIMAL
    too_large = solve(random_maxcut(30, 0.3, seed=1)[0], device="cpu", interior_point_handover=False)
    assert too_large.route == "low-rank phases only: interior_point_handover=False"


def test_an_interior_point_start_that_misses_tol_hands_over_to_the_low_rank_phases():
    problem = random_mixed_problem(2)
    result = solve(problem, device="cpu", tuning=Tuning(interior_point_max_iterations=2))  # it cannot converge in two
    assert result.route.startswith("interior-point method first")
    assert result.iterations["interior_point"] == 2 and result.iterations["alm"] > 0
    assert result.status is Status.OPTIMAL
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=1e-4, abs=1e-6)


def test_low_rank_phases_hand_over_once_they_used_the_interior_point_estimate():
    problem = _maxcut_of_order(400)
    # their share is used after one step
    result = solve(problem, device="cpu", algorithm="alm_admm", tuning=Tuning(handover_factor=0.0))
    assert result.route.startswith("low-rank phases first")
    assert result.iterations["alm"] == 1 and result.iterations["interior_point"] > 0
    assert result.status is Status.OPTIMAL
    assert result.primal_objective == pytest.approx(solve(problem, device="cpu").primal_objective, rel=1e-5)


@pytest.mark.parametrize("route, first", [("low_rank", "low-rank phases first"),
                                          ("interior_point", "interior-point method first")])
def test_the_route_setting_chooses_the_start(route, first):
    problem = random_mixed_problem(2)
    result = solve(problem, device="cpu", algorithm=route)
    assert result.route.startswith(f"{first} (algorithm={route!r})")
    assert result.status is Status.OPTIMAL
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=1e-4, abs=1e-6)


def _pretend_a_gpu(monkeypatch) -> list:
    """Make ``device='auto'`` see a GPU on this machine; the returned list records each backend it builds."""
    import cvxpy_culorads.backends.backend as backend_module
    monkeypatch.setattr(backend_module, "_gpu_probe", lambda: (True, ""))
    monkeypatch.setattr("cvxpy_culorads.solver.run.gpu_available", lambda: True)
    monkeypatch.delenv("CULORADS_DEVICE", raising=False)
    built = []
    real = backend_module.select_backend

    def recording(device="auto", gpu_pays=None, gpu_ids=None):
        requested = backend_module.requested_device(device)
        gpu = requested == "gpu" or (requested == "auto" and (gpu_pays is None or gpu_pays()))
        built.append("gpu" if gpu else "cpu")
        return real("cpu")  # no CuPy here: the CPU stands in for the GPU

    monkeypatch.setattr("cvxpy_culorads.solver.run.select_backend", recording)
    return built


def test_auto_device_takes_the_cpu_for_small_problems_and_the_gpu_for_large(monkeypatch):
    from cvxpy_culorads.operators.compressed import BlockLayout
    from cvxpy_culorads.phases.state import block_ranks
    from cvxpy_culorads.solver.costs import DeviceCosts
    built = _pretend_a_gpu(monkeypatch)
    small = solve(_maxcut_of_order(60))
    assert built == ["cpu"] and small.status is Status.OPTIMAL
    assert small.device.startswith("cpu") and "device='auto' chose the cpu" in small.device
    # a graph of n = 1e5 (MaxCut, ranks as the solver starts them) is a GPU problem; its step estimates say why
    import scipy.sparse as sp

    from cvxpy_culorads.models import maxcut_problem
    n, rng = 100000, np.random.default_rng(3)
    edges = sp.coo_matrix((np.ones(4 * n), (rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n))), shape=(n, n))
    large = maxcut_problem(edges + edges.T)
    ranks = block_ranks(BlockLayout.of(large), None, 2.0)[0]
    costs = DeviceCosts.of(large, ranks)
    assert costs.gpu_pays and costs.cpu_step > 2 * costs.gpu_step
    assert not DeviceCosts.of(_maxcut_of_order(60), ranks=[8]).gpu_pays
    # an explicit device is obeyed, whatever the estimate
    solve(_maxcut_of_order(60), device="gpu")
    assert built[-1] == "gpu"
    monkeypatch.setenv("CULORADS_DEVICE", "gpu")
    result = solve(_maxcut_of_order(60))
    assert built[-1] == "gpu" and "device='auto'" not in result.device
