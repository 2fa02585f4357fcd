"""End-to-end solves against independent references, the statuses, and what a Result promises."""
import numpy as np
import pytest

import cvxpy_culorads as cl
from cvxpy_culorads import Status, solve

from support import (
    DEVICES,
    clarabel_value,
    dense_blocks,
    own_errors,
    primal_residual,
    random_maxcut,
    random_mixed_problem,
)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1])
def test_maxcut_matches_clarabel(device, seed):
    problem, _ = random_maxcut(25, 0.3, seed)
    result = solve(problem, device=device)
    assert result.status is Status.OPTIMAL
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=1e-4)
    errors, primal = own_errors(problem, result)
    assert primal == pytest.approx(result.primal_objective, rel=1e-10)
    C, A = dense_blocks(problem)
    slack = C[0] - sum(lam * A_i[0] for lam, A_i in zip(result.dual, A))
    assert result.min_eigenvalues[0] == pytest.approx(np.linalg.eigvalsh(slack)[0], abs=1e-8)
    for key, value in errors.items():
        assert value == pytest.approx(getattr(result.errors, key), rel=1e-4, abs=1e-9)
        assert value <= 1e-5
    assert (result.peak_device_bytes > 0) == (device == "gpu")  # what the device's memory pool held


@pytest.mark.skipif(not cl.gpu_available(), reason="no CuPy/GPU")
def test_peak_device_memory_leaves_out_blocks_cached_before_the_solve():
    import cupy
    problem, _ = random_maxcut(25, 0.3, 0)
    cached = 1 << 30
    block = cupy.empty(cached, dtype=cupy.uint8)
    del block  # the pool keeps it cached
    assert cupy.get_default_memory_pool().total_bytes() >= cached
    result = solve(problem, device="gpu")
    assert 0 < result.peak_device_bytes < cached


@pytest.mark.parametrize("device", DEVICES)
def test_blocks_and_nonnegative_variables_match_clarabel(device):
    problem = random_mixed_problem(2)
    result = solve(problem, device=device)
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=1e-4, abs=1e-6)
    errors, _ = own_errors(problem, result)
    assert max(errors.values()) <= 1e-5
    assert [R.shape[0] for R in result.factors] == list(problem.block_sizes)
    assert result.x_lp.shape == (problem.n_lp,) and np.all(result.x_lp >= 0)


def test_result_fields_and_rank_bound():
    problem, _ = random_maxcut(20, 0.4, seed=3)
    result = solve(problem, device="cpu", rank=2, algorithm="alm_admm")
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
    # the measures describe the point returned, whichever phase left it
    assert result.errors.primal_residual == pytest.approx(primal_residual(problem, result), rel=1e-6, abs=1e-14)
    assert result.factors[0].shape[0] == 30


def test_tighter_tolerance_is_met():
    problem, _ = random_maxcut(25, 0.3, seed=8)
    result = solve(problem, device="cpu", tol=1e-7)
    assert result.status is Status.OPTIMAL
    assert primal_residual(problem, result) <= 1e-7
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=1e-6)


def test_unknown_setting_is_rejected():
    problem, _ = random_maxcut(5, 0.5, seed=0)
    with pytest.raises(ValueError, match="unknown setting"):
        solve(problem, tolerance=1e-3)


def test_public_api():
    for name in ("SDPProblem", "solve", "Settings", "Result", "Status", "read_sdpa", "write_sdpa"):
        assert hasattr(cl, name)


def test_a_problem_that_does_not_fit_is_refused_before_allocating(monkeypatch):
    from cvxpy_culorads.backends.backend import CpuBackend

    problem, _ = random_maxcut(20, 0.3, seed=9)
    monkeypatch.setattr(CpuBackend, "free_memory", lambda self: 1000)
    with pytest.raises(MemoryError, match="needs about .* of host memory .* but .* are free"):
        solve(problem, device="cpu")


def test_a_default_rank_that_does_not_fit_is_narrowed_a_set_one_is_refused(monkeypatch, caplog):
    from cvxpy_culorads.backends.backend import CpuBackend
    from cvxpy_culorads.backends.memory import estimate_device_bytes
    from cvxpy_culorads.operators.compressed import BlockLayout

    # the spheres' default start is ceil(4 ln 300) = 23 columns; it may be narrowed down to ceil(2 ln 300) = 12
    problem, _ = random_maxcut(300, 0.01, seed=9)
    room = estimate_device_bytes(problem, BlockLayout.of(problem), 15)
    monkeypatch.setattr(CpuBackend, "free_memory", lambda self: room)
    result = solve(problem, device="cpu", max_iter=1, keep_log=True, verbose=True)
    assert result.log[0].ranks == (15,)
    assert "start narrowed to fit in host memory; initial ranks [15]" in caplog.text
    assert result.plan[-1] == "start narrowed to fit in host memory"
    with pytest.raises(MemoryError, match="at its initial rank 16"):
        solve(problem, device="cpu", rank=16)
    room = estimate_device_bytes(problem, BlockLayout.of(problem), 11)
    with pytest.raises(MemoryError, match="at its initial rank 12"):  # below LoRADS's start: refused as before
        solve(problem, device="cpu")


def test_running_out_of_memory_mid_solve_is_a_status(monkeypatch):
    from cvxpy_culorads.phases.riemannian import RiemannianPhase

    problem, _ = random_maxcut(40, 0.3, seed=2)
    steps = {"left": 10}
    line_search = RiemannianPhase._line_search

    def failing_after_a_while(self, *args):
        steps["left"] -= 1
        if steps["left"] < 0:
            raise MemoryError("out of memory allocating 8 bytes")
        return line_search(self, *args)

    monkeypatch.setattr(RiemannianPhase, "_line_search", failing_after_a_while)
    result = solve(problem, device="cpu", interior_point_handover=False)
    assert result.status in (Status.INACCURATE, Status.STALLED)
    assert "ran out of memory" in result.message
    assert result.iterations["riemannian"] == 11 and result.factors[0].shape[0] == 40


def test_the_log_is_opt_in_and_the_counters_do_not_need_it():
    problem, _ = random_maxcut(30, 0.3, seed=5)
    plain = solve(problem, device="cpu")
    logged = solve(problem, device="cpu", keep_log=True)
    assert plain.log == () and plain.iterations == logged.iterations
    assert len(logged.log) == sum(logged.iterations.values())
    assert {row.phase for row in logged.log} <= {"ALM", "ADMM", "IPM"}
    assert sum(row.phase == "ALM" for row in logged.log) == logged.iterations["alm"]
