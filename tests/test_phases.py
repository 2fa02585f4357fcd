"""The pieces of the two phases: the exact line search, L-BFGS, CG, and each phase on its own."""
import math

import numpy as np
import pytest

from cvxpy_culorads import Settings, Status, solve
from cvxpy_culorads.backends.backend import CpuBackend, select_backend
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import Kernels, check_capabilities
from cvxpy_culorads.certify.measures import ProblemNorms
from cvxpy_culorads.linalg.krylov import conjugate_gradient
from cvxpy_culorads.models import completion_problem, random_low_rank_instance
from cvxpy_culorads.phases.admm import ADMMPhase
from cvxpy_culorads.phases.alm import LBFGS, ALMPhase, quartic_minimiser
from cvxpy_culorads.phases.state import PhaseOutcome, widen_factor
from cvxpy_culorads.solver.plan import plan
from cvxpy_culorads.solver.run import Run
from cvxpy_culorads.solver.tuning import DEFAULT_TUNING

from support import random_maxcut


@pytest.mark.parametrize("seed", range(20))
def test_quartic_minimiser_is_the_grid_minimum(seed):
    rng = np.random.default_rng(seed)
    a, c = rng.random() * 3, rng.standard_normal()
    b, d = rng.standard_normal(), -abs(rng.standard_normal())
    tau = quartic_minimiser(a, b, c, d, tau_max=10.0)
    grid = np.linspace(0, 10, 200001)

    def f(t):
        return ((a * t + b) * t + c) * t * t + d * t

    assert 0.0 <= tau <= 10.0
    assert f(tau) <= f(grid).min() + 1e-9


def test_quartic_minimiser_degenerate_cases():
    assert quartic_minimiser(0, 0, 1.0, -2.0) == pytest.approx(1.0)  # plain quadratic: t = -d / 2c
    assert quartic_minimiser(0, 0, 0, 1.0) == 0.0  # ascent direction: no step
    assert quartic_minimiser(0, 0, 0, -1.0, tau_max=7.0) == 7.0  # unbounded: capped


def test_lbfgs_solves_a_quadratic_faster_than_gradient_descent():
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((30, 30))
    H = Q @ Q.T + np.eye(30)
    x, target = np.zeros((30, 1)), rng.standard_normal((30, 1))
    lbfgs = LBFGS(CpuKernels(), memory=5)
    g = H @ x - target
    for _ in range(200):
        d = lbfgs.direction(g, np.empty(2))
        step = -float(np.vdot(d, g)) / float(np.vdot(d, H @ d))  # exact line search on the quadratic
        x_new = x + step * d
        g_new = H @ x_new - target
        lbfgs.push(x_new - x, g_new - g)
        x, g = x_new, g_new
        if np.linalg.norm(g) < 1e-10:
            break
    assert np.linalg.norm(H @ x - target) < 1e-8


def test_conjugate_gradient():
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((40, 40))
    H = Q @ Q.T / 40 + np.eye(40)
    rhs = rng.standard_normal((40, 2))
    x, its = conjugate_gradient(lambda Z: H @ Z, rhs, np.zeros((40, 2)), 1e-12, select_backend("cpu"))
    assert np.abs(H @ x - rhs).sum() <= 1e-12 * np.abs(rhs).sum() * 10
    assert its < 200
    # an exact preconditioner solves in one iteration; the iterations up to the next check must stay finite
    exact, one = conjugate_gradient(lambda Z: H @ Z, rhs, np.zeros((40, 2)), 1e-12, select_backend("cpu"),
                                    check_every=4, precondition=lambda Z: np.linalg.solve(H, Z))
    assert np.allclose(H @ exact, rhs, rtol=1e-10, atol=1e-10) and one == 4
    # Jacobi on a badly scaled system: same solution, fewer iterations
    scaled = np.diag(np.geomspace(1.0, 1e3, 40)) @ H @ np.diag(np.geomspace(1.0, 1e3, 40))
    plain, plain_its = conjugate_gradient(lambda Z: scaled @ Z, rhs, np.zeros((40, 2)), 1e-12, select_backend("cpu"))
    jacobi, jacobi_its = conjugate_gradient(lambda Z: scaled @ Z, rhs, np.zeros((40, 2)), 1e-12,
                                            select_backend("cpu"), precondition=lambda Z: Z / np.diag(scaled)[:, None])
    assert np.allclose(jacobi, np.linalg.solve(scaled, rhs), rtol=1e-8) and jacobi_its < plain_its


def _run_for(problem, **options):
    settings = Settings.from_options(device="cpu", **options)
    return Run(problem, settings, plan(problem, settings))


def test_alm_reaches_the_switch_tolerance():
    problem, _ = random_maxcut(40, 0.3, seed=3)
    run = _run_for(problem)
    alm = ALMPhase(run.op, run.state, run.settings, run.norms, run.max_ranks, outer_budget=200)
    rows = list(alm.run())
    assert alm.outcome is PhaseOutcome.CONVERGED
    assert rows[-1].primal_infeasibility_inf <= run.settings.lorads.phase1_tol
    assert rows[0].primal_infeasibility_inf > rows[-1].primal_infeasibility_inf


def test_alm_hands_over_once_the_final_primal_tests_hold_at_a_stationary_point():
    # phase1_tol so small that LoRADS's two exits cannot fire first: the third one, gap and primal infeasibility
    # within the final tol at a point that solves its subproblem, ends phase I; the gradient of the augmented
    # Lagrangian there, recomputed from the dense matrices, is within the subproblem's tolerance 0.1 / rho
    problem, _ = random_maxcut(40, 0.3, seed=3)
    run = _run_for(problem, phase1_tol=1e-12, tol=1e-4)
    alm = ALMPhase(run.op, run.state, run.settings, run.norms, run.max_ranks, outer_budget=200)
    rows = list(alm.run())
    assert alm.outcome is PhaseOutcome.CONVERGED and alm.exit == "tol"
    last = rows[-1]
    assert last.gap <= 1e-4 and last.primal_infeasibility <= 1e-4
    assert last.primal_infeasibility_inf > 1e-12
    st, scale = run.state, run.op.row_scale
    X = st.R @ st.R.T
    residual = np.array([np.sum(problem.constraint_matrix(i, 0).toarray() * X) for i in range(problem.m)]) - problem.b
    multipliers = (st.lam - st.rho * residual / scale) / (scale * st.c_scale)  # of the next update, unscaled rows
    gradient = 2.0 * st.c_scale * problem.slack_matrix(0, multipliers).toarray() @ st.R
    assert np.linalg.norm(gradient) / (1.0 + st.c_scale * problem.C_norm_inf) <= 0.1 / st.rho


def test_widen_factor_keeps_blocks_apart():
    problem, _ = random_maxcut(30, 0.5, seed=4)
    run = _run_for(problem, rank=2)
    R = run.state.R
    direction = np.ones(30) / math.sqrt(30)
    wide = widen_factor(R, run.op.layout, [2], [4], np, [direction])
    assert wide.shape == (30, 4)
    assert np.array_equal(wide[:, :2], R)
    assert np.array_equal(wide[:, 2], direction)  # the escape direction seeds the first new column
    assert wide[1, 3] == pytest.approx(1 / math.sqrt(2)) and np.count_nonzero(wide[:, 3]) == 1


def test_rank_one_start_escapes_to_the_optimum():
    # rank 1 cannot represent this optimum: the dual certificate's negative eigenvector grows the rank
    problem, _ = random_maxcut(30, 0.5, seed=4)
    result = solve(problem, device="cpu", rank=1)
    assert result.status is Status.OPTIMAL
    assert result.ranks[0] > 1


def test_no_rank_growth_without_device_memory_for_it(monkeypatch, caplog):
    # the problem of the test above needs rank > 1; with no memory to spare, neither phase I's rank trigger nor
    # a saddle escape may widen the factor, and the status says the point is not optimal
    problem, _ = random_maxcut(30, 0.5, seed=4)
    free = iter([math.inf])  # the set-up check finds room for the initial rank; nothing is left after it
    monkeypatch.setattr(CpuBackend, "free_memory", lambda self: next(free, 0))
    result = solve(problem, device="cpu", rank=1, max_iter=5000, verbose=True)
    assert result.ranks == (1,)
    assert "rank increase skipped" in caplog.text
    assert result.status is not Status.OPTIMAL
    assert max(result.errors.as_dict().values()) > 1e-5


@pytest.mark.parametrize("n, reserved", [(1500, True), (600, False)])
def test_a_wider_factor_leaves_room_for_the_certificates_shortest_lanczos_cycle(monkeypatch, n, reserved):
    from cvxpy_culorads.backends.memory import FACTOR_ARRAYS, MIN_LANCZOS_STEPS, POOL_MARGIN, widening_fits
    from cvxpy_culorads.operators.compressed import BlockLayout

    layout = BlockLayout.of(random_maxcut(n, 3.0 / n, seed=1)[0])
    old, new = 4, 6
    arrays = POOL_MARGIN * FACTOR_ARRAYS * 8 * n * new - 8 * n * old  # the wider phases' arrays, less the factor
    lanczos = MIN_LANCZOS_STEPS * 8 * n * 4 / 3  # 20 basis vectors and the Ritz vectors a restart keeps
    backend = select_backend("cpu")
    monkeypatch.setattr(CpuBackend, "free_memory", lambda self: arrays + 1.0)
    assert widening_fits(backend, layout, old, new) is not reserved  # a block of order <= 1000 is decomposed densely
    monkeypatch.setattr(CpuBackend, "free_memory", lambda self: arrays + lanczos + 1.0)
    assert widening_fits(backend, layout, old, new)
    monkeypatch.setattr(CpuBackend, "free_memory", lambda self: arrays + lanczos - 1.0)
    assert widening_fits(backend, layout, old, new) is not reserved



def test_admm_cg_tolerance_factor_sets_the_inner_accuracy():
    # completion: off-diagonal constraints, so phase II's CG is unpreconditioned and its iterations depend on the
    # tolerance; from one hand-over point both factors reach tol, the tighter with more CG iterations per sweep
    rows, cols, values, _ = random_low_rank_instance(30, 30, 2, 400, seed=1)
    problem = completion_problem(rows, cols, values, (30, 30))
    run = _run_for(problem)
    for _ in ALMPhase(run.op, run.state, run.settings, run.norms, run.max_ranks, outer_budget=200).run():
        pass
    hand_over = (run.state.R.copy(), run.state.lam.copy(), run.state.Avals.copy(), run.state.rho)
    per_sweep = {}
    for factor in (1e-1, 1e-4):
        run.state.R, run.state.lam, run.state.Avals, run.state.rho = (hand_over[0].copy(), hand_over[1].copy(),
                                                                      hand_over[2].copy(), hand_over[3])
        admm = ADMMPhase(run.op, run.state, run.settings, run.norms, max_sweeps=2000, reopt=False,
                         rho_max=run.settings.lorads.rho_max, cg_factor=factor)
        last = list(admm.run())[-1]
        assert admm.outcome is PhaseOutcome.CONVERGED
        assert last.primal_infeasibility <= run.settings.tol and last.gap <= run.settings.tol
        per_sweep[factor] = admm.cg_iterations / admm.sweeps
    assert per_sweep[1e-4] > per_sweep[1e-1]

def test_admm_reaches_tol_from_the_alm_point():
    problem, _ = random_maxcut(40, 0.3, seed=5)
    run = _run_for(problem)
    alm = ALMPhase(run.op, run.state, run.settings, run.norms, run.max_ranks, outer_budget=200)
    for _ in alm.run():
        pass
    admm = ADMMPhase(run.op, run.state, run.settings, ProblemNorms.of(problem), max_sweeps=2000, reopt=False,
                     rho_max=run.settings.lorads.rho_max, cg_factor=DEFAULT_TUNING.admm_cg_tolerance[0])
    rows = list(admm.run())
    assert admm.outcome is PhaseOutcome.CONVERGED
    last = rows[-1]
    assert last.primal_infeasibility_inf <= run.settings.tol or (
        last.primal_infeasibility <= run.settings.tol and last.gap <= run.settings.tol)


def test_kernel_sets_meet_the_contract_and_settings_are_checked_against_their_capabilities():
    assert isinstance(CpuKernels(), Kernels) and CpuKernels.max_lbfgs_memory is None
    check_capabilities(CpuKernels(), Settings.from_options(lbfgs_memory=50), "cpu")

    class FourPairs(CpuKernels):
        max_lbfgs_memory = 4

    with pytest.raises(ValueError, match="lbfgs_memory must be at most 4 on gpu, got 8"):
        check_capabilities(FourPairs(), Settings.from_options(lbfgs_memory=8), "gpu")
    check_capabilities(FourPairs(), Settings.from_options(lbfgs_memory=4), "gpu")

