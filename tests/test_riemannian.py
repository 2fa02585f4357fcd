"""The Riemannian phase: which problems take it, and its answers against Clarabel and an independent certificate."""
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import LowRank, SDPProblem, Settings, Status, solve
from cvxpy_culorads.backends.backend import select_backend
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import ALL_CAPABILITIES, Capability
from cvxpy_culorads.certify.bounds import FixedDiagonals
from cvxpy_culorads.distributed import simulated_backend
from cvxpy_culorads.distributed.kernels import ShardedKernels
from cvxpy_culorads.models import maxcut_problem
from cvxpy_culorads.operators.compressed import BlockLayout, CompressedOperator
from cvxpy_culorads.phases import riemannian
from cvxpy_culorads.phases.riemannian import Spheres
from cvxpy_culorads.solver import run as solver_run
from cvxpy_culorads.solver import strategies
from cvxpy_culorads.solver.tuning import Tuning

from support import DEVICES, clarabel_value, primal_residual, random_maxcut, random_mixed_problem


def _spheres(problem):
    layout = BlockLayout.of(problem)
    op = CompressedOperator(problem, select_backend("cpu"), layout=layout)
    return Spheres.of(problem, layout, FixedDiagonals.of(problem, layout.offsets, np), op)


def _weighted_diagonal_problem(seed: int) -> SDPProblem:
    """min <C1, X1> + <C2, X2> s.t. a_j (X_k)_jj = b_j on every row of two blocks: rows fixed to norms b / a != 1,
    the constraints listed in shuffled order."""
    rng = np.random.default_rng(seed)
    C, coords, b = [], [], []
    start = 0
    for n in (9, 14):
        M = rng.standard_normal((n, n))
        C.append(M + M.T)
        a, target = rng.uniform(0.5, 2.0, n), rng.uniform(0.5, 3.0, n)
        rows = rng.permutation(n)
        coords.append((start + np.arange(n), rows, rows, a[rows]))
        b.extend(a[rows] * target[rows])
        start += n
    return SDPProblem(np.array(b), C, coords, block_sizes=[9, 14], name="diagonals")


def test_only_problems_on_a_product_of_spheres_take_it():
    maxcut, _ = random_maxcut(12, 0.5, seed=0)
    spheres = _spheres(maxcut)
    assert spheres is not None and np.array_equal(spheres.squares, np.ones(12))
    weighted = _weighted_diagonal_problem(1)
    spheres = _spheres(weighted)
    targets = np.empty(23)
    for coeff, offset in zip(weighted.A_coords, (0, 9)):
        targets[offset + coeff.row] = weighted.b[coeff.con] / coeff.val
    assert np.allclose(spheres.squares, targets)
    assert _spheres(random_mixed_problem(0)) is None  # nonnegative variables, general constraints
    n = 12  # a trace constraint beside the fixed rows: not only spheres
    idx = np.arange(n - 1)
    partly = SDPProblem(np.ones(n), [np.eye(n)], [(np.r_[idx, np.full(n, n - 1)], np.r_[idx, np.arange(n)],
                                                   np.r_[idx, np.arange(n)], np.ones(2 * n - 1))])
    assert _spheres(partly) is None
    free_row = SDPProblem(np.ones(n - 1), [np.eye(n)], [(idx, idx, idx, np.ones(n - 1))], block_sizes=[n])
    assert _spheres(free_row) is None  # row n - 1 is not fixed


@pytest.mark.parametrize("device", DEVICES)
def test_maxcut_on_the_spheres_matches_clarabel_with_an_independent_certificate(device):
    problem, L = random_maxcut(60, 0.3, seed=7)
    result = solve(problem, device=device, algorithm="low_rank")
    assert result.iterations["riemannian"] > 0 and result.iterations["alm"] == result.iterations["admm"] == 0
    assert result.status is Status.OPTIMAL, result.summary()
    reference = clarabel_value(problem)
    assert result.primal_objective == pytest.approx(reference, rel=2e-5)
    assert primal_residual(problem, result) <= 1e-12  # the rows are on their spheres
    # the certificate from the returned multipliers alone (dense eigvalsh): b'y + n min(0, lambda_min(C - Diag y))
    y = result.dual
    slack = -L / 4 - np.diag(y)
    bound = y.sum() + 60 * min(0.0, np.linalg.eigvalsh(slack)[0])
    assert bound <= reference + 1e-9 * abs(reference)
    # the certified gap's normalisation (Result.certified_gap, issue 5): |p - d| / (1 + |p| + |d|)
    assert (result.primal_objective - bound) / (1 + abs(result.primal_objective) + abs(bound)) <= 1e-5
    assert bound - 1e-5 * abs(bound) <= result.dual_bound <= bound + 1e-9  # the engine's is a lower estimate
    # stationarity holds by construction: (C - Diag y) R = 0 up to the gradient left
    R = result.factors[0]
    assert np.linalg.norm(slack @ R) <= 1e-3 * np.linalg.norm(L @ R)


def test_weighted_diagonals_in_several_blocks_match_clarabel():
    problem = _weighted_diagonal_problem(2)
    result = solve(problem, device="cpu", algorithm="low_rank")
    assert result.iterations["riemannian"] > 0 and result.iterations["alm"] == 0
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=2e-5)
    assert primal_residual(problem, result) <= 1e-12


@pytest.mark.parametrize("max_iter", [15, 1_000_000])
def test_its_multipliers_are_the_least_squares_ones(max_iter):
    # snapshots after the Riemannian phase skip the stationary-multiplier refinement because of this: the returned
    # multipliers minimise ||(C - A*(lambda)) R||_F, here solved as one dense least-squares problem
    problem = _weighted_diagonal_problem(3)
    result = solve(problem, device="cpu", algorithm="low_rank", max_iter=max_iter)
    assert result.iterations["riemannian"] > 0
    columns, target = [], []
    for k, R in enumerate(result.factors):
        C = problem.objective_matrix(k)
        coeff = problem.A_coords[k]
        target.append((C @ R).ravel())
        block = np.zeros((R.size, problem.m))
        for con, row, val in zip(coeff.con, coeff.row, coeff.val):
            block[:, con] += (sp.coo_array(([val], ([row], [row])), shape=C.shape) @ R).ravel()
        columns.append(block)
    least_squares = np.linalg.lstsq(np.vstack(columns), np.concatenate(target), rcond=None)[0]
    assert np.allclose(result.dual, least_squares, rtol=1e-8, atol=1e-10 * np.abs(least_squares).max())


def test_the_paper_phases_give_the_same_answer():  # the spheres are the default
    problem, _ = random_maxcut(80, 0.2, seed=11)
    spheres = solve(problem, device="cpu", algorithm="low_rank")
    phases = solve(problem, device="cpu", algorithm="alm_admm")
    assert spheres.iterations["riemannian"] > 0 and spheres.iterations["alm"] == 0
    assert phases.iterations["riemannian"] == 0 and phases.iterations["alm"] > 0
    assert spheres.status is phases.status is Status.OPTIMAL
    assert spheres.primal_objective == pytest.approx(phases.primal_objective, rel=2e-5)


def test_a_rank_one_start_escapes_through_the_zero_gradient():
    # on rank 1 every row is +-1: the tangent space is {0}, the gradient is zero, and only an escape can descend
    problem, _ = random_maxcut(30, 0.5, seed=4)
    result = solve(problem, device="cpu", rank=1, algorithm="low_rank")
    assert result.status is Status.OPTIMAL and result.ranks[0] > 1
    assert result.primal_objective == pytest.approx(clarabel_value(problem), rel=2e-5)


def test_a_narrow_start_escapes_from_a_fresh_start_and_is_certified(monkeypatch):
    # too few columns for the optimum: the runs stall, and each wider factor starts afresh
    problem, L = random_maxcut(120, 0.1, seed=11)
    restarts = []
    escape = strategies._escape

    def recorded(run, directions, restart_seed=None):
        restarts.append(restart_seed)
        return escape(run, directions, restart_seed)

    monkeypatch.setattr(strategies, "_escape", recorded)
    result = solve(problem, device="cpu", rank=2, algorithm="low_rank")
    assert result.status is Status.OPTIMAL and result.ranks[0] > 2
    assert restarts and all(seed is not None for seed in restarts)
    # a feasible point whose value the bound from the returned multipliers alone (dense eigvalsh) brackets: the
    # optimum lies between them (Clarabel is slow at this order)
    assert primal_residual(problem, result) <= 1e-12
    y = result.dual
    bound = y.sum() + 120 * min(0.0, np.linalg.eigvalsh(-L / 4 - np.diag(y))[0])
    assert (result.primal_objective - bound) / (1 + abs(result.primal_objective) + abs(bound)) <= 1e-5


def test_an_objective_with_a_low_rank_term_stays_on_the_spheres():
    rng = np.random.default_rng(5)
    n = 40
    U = rng.standard_normal((n, 2))
    W = sp.random(n, n, density=0.2, random_state=rng)
    C = (W + W.T).toarray()
    idx = np.arange(n)
    factored = SDPProblem(np.ones(n), [sp.csr_array(C) + LowRank(U, [1.0, -0.5])], [(idx, idx, idx, np.ones(n))])
    result = solve(factored, device="cpu", algorithm="low_rank")
    assert result.iterations["riemannian"] > 0 and result.status is Status.OPTIMAL
    assert result.primal_objective == pytest.approx(clarabel_value(factored.expanded()), rel=2e-5)


def test_an_iteration_limit_inside_it_is_honest():
    problem, _ = random_maxcut(200, 0.1, seed=2)
    result = solve(problem, device="cpu", algorithm="low_rank", max_iter=3)
    assert result.status is Status.ITERATION_LIMIT and result.iterations["riemannian"] == 3
    assert primal_residual(problem, result) <= 1e-12  # still on the spheres


def test_the_spheres_start_wider_than_the_alm_phases():
    # ceil(4 ln 500) = 25 columns on the spheres, LoRADS's ceil(2 ln 500) = 13 for the ALM phases; a rank_factor
    # that is set holds for both
    problem, _ = random_maxcut(500, 0.02, seed=3)

    def first_ranks(**options):
        options = {"algorithm": "low_rank", **options}
        return solve(problem, device="cpu", max_iter=1, keep_log=True, **options).log[0].ranks

    assert first_ranks() == (25,)
    assert first_ranks(algorithm="alm_admm") == (13,)
    assert first_ranks(rank_factor=3.0) == first_ranks(rank_factor=3.0, algorithm="alm_admm") == (19,)


# the step's variants: fused (one device, double or mixed precision), unfused, and split over simulated shards (halo
# rows exchanged in double or, in every run, in single precision)
STEP_VARIANTS = {"fused": {}, "mixed": {"precision": "mixed"}, "unfused": {"unfused": True},
                 "shards": {"devices": 2, "shard_order": "given"},
                 "rounded shards": {"devices": 2, "shard_order": "given", "halo_precision": "single",
                                    "tuning": Tuning(rounded_halo_target=0.0)}}


def _step_variant(monkeypatch, name: str) -> dict:
    """The solve's options of a step variant (``STEP_VARIANTS``), with the patches it needs."""
    options = dict(STEP_VARIANTS[name])
    if options.pop("unfused", False):
        monkeypatch.setattr(CpuKernels, "capabilities", ALL_CAPABILITIES - {Capability.FUSED_STEP})
    monkeypatch.setattr(solver_run, "sharded_backend", simulated_backend)
    return options


@pytest.mark.parametrize("variant", STEP_VARIANTS)
def test_its_peak_holds_few_factor_sized_arrays(monkeypatch, variant):
    # NumPy reports its allocations to tracemalloc: the most the phase held beyond its start, in n x r float64 arrays.
    # The point's C R goes before the line search and D with it before the next gradient (NumPy's temporaries count
    # too: 10.2 at this size; 12.2 when both were kept); the memory a step drops waits for the next step's arrays
    # only, never more of it than they take. The CPU kernels' row blocks keep scratch arrays of a fixed size per
    # thread (1.5 MB, 0.4 of these arrays): a solve before tracing makes them, so that only arrays that grow with the
    # factor are counted
    options = _step_variant(monkeypatch, variant)
    n, r = 100_000, 5
    rng = np.random.default_rng(4)
    edges = rng.integers(0, n, (2, 2 * n))
    W = sp.csr_array((np.ones(2 * n), edges), shape=(n, n))
    problem = maxcut_problem(((W + W.T) > 0).astype(float))
    peaks = []
    run = riemannian.RiemannianPhase.run

    def traced(phase):
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        try:
            yield from run(phase)
        finally:
            peaks.append((tracemalloc.get_traced_memory()[1] - start) / (8 * n * r))
    solve(problem, device="cpu", rank=r, max_iter=20, **options)
    monkeypatch.setattr(riemannian.RiemannianPhase, "run", traced)
    tracemalloc.start()
    try:
        solve(problem, device="cpu", rank=r, max_iter=20, **options)
    finally:
        tracemalloc.stop()
    assert peaks and max(peaks) <= 11.0


@pytest.mark.parametrize("variant", STEP_VARIANTS)
def test_its_steps_take_the_memory_that_earlier_steps_dropped(monkeypatch, variant):
    # once L-BFGS holds its pairs, a step's direction, trial point, C R and gradient take the memory of what the steps
    # before dropped (a direction, a C R, the pair given up), so that a CPU step maps no new pages: a run's new
    # factor-sized arrays (``empty_like`` of its kernel set, which the phase asks for them) all come in its first
    # steps, before its pairs are full
    options = _step_variant(monkeypatch, variant)
    active, fresh = [], []  # the phase whose loop runs (not its last products, ``_finish``); its steps at new arrays
    run, finish = riemannian.RiemannianPhase.run, riemannian.RiemannianPhase._finish

    def traced(phase):
        active.append(phase)
        yield from run(phase)

    def finishing(phase):
        active.clear()
        finish(phase)

    for kernels in (CpuKernels, ShardedKernels):
        def counted(self, x, new=kernels.empty_like):
            if active:
                fresh.append(active[-1].steps)
            return new(self, x)
        monkeypatch.setattr(kernels, "empty_like", counted)
    monkeypatch.setattr(riemannian.RiemannianPhase, "run", traced)
    monkeypatch.setattr(riemannian.RiemannianPhase, "_finish", finishing)
    problem, _ = random_maxcut(1500, 0.004, seed=3)
    result = solve(problem, device="cpu", rank=6, max_iter=80, algorithm="low_rank", **options)
    assert result.iterations["riemannian"] == 80
    assert fresh and max(fresh) <= Settings().lorads.lbfgs_memory + 2
