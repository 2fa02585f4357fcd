"""Smallest eigenvalues (dense batches and Lanczos) and the dual infeasibility measure."""
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from cvxpy_culorads import SDPProblem, Status, solve
from cvxpy_culorads.backends.backend import select_backend
from cvxpy_culorads.certify import certificates
from cvxpy_culorads.certify.certificates import DENSE_LIMIT, dual_infeasibility, smallest_eigenpairs
from cvxpy_culorads.certify.measures import ProblemNorms
from cvxpy_culorads.linalg.krylov import LANCZOS_STEPS, lanczos_cycle_steps
from cvxpy_culorads.operators.compressed import CompressedOperator

from support import DEVICES, random_maxcut


@pytest.mark.parametrize("device", DEVICES)
def test_lanczos_and_dense_blocks_match_eigvalsh(device):
    rng = np.random.default_rng(0)
    # on the host the blocks of order SUBSET_MIN_ORDER and more take the one-eigenpair driver, smaller ones a batch
    big, small, medium = DENSE_LIMIT + 200, 7, certificates.SUBSET_MIN_ORDER + 8
    sizes = [big, small, small, medium, medium]
    blocks = []
    for n in sizes:
        M = sp.random(n, n, density=4.0 / n, random_state=rng)
        blocks.append((M + M.T + sp.diags(rng.standard_normal(n))).tocsr())
    problem = SDPProblem(np.ones(1), blocks, [([0], [0], [0], [1.0])] + [None] * 4, block_sizes=sizes)
    backend = select_backend(device)
    op = CompressedOperator(problem, backend)
    matrix = op.slack_matrix(backend.xp.zeros(1))
    pairs = smallest_eigenpairs(matrix, op.layout, backend, accuracy=1e-9)
    want = [np.linalg.eigvalsh(B.toarray())[0] for B in blocks]
    assert np.allclose([pair.value for pair in pairs], want, rtol=1e-7, atol=1e-7)
    for B, (value, vector, residual) in zip(blocks, pairs):
        v = backend.to_host(vector)
        assert np.linalg.norm(B @ v - value * v) <= 1e-6 * np.abs(want).max()
        # the dense blocks' rounding allowance: n eps ||B||_2 with a safety factor, never below it
        if B.shape[0] <= DENSE_LIMIT:
            assert residual >= B.shape[0] * np.finfo(float).eps * np.linalg.norm(B.toarray(), 2)


def test_dual_infeasibility_of_a_known_multiplier():
    # min <C, X> s.t. tr X = 1 with C = diag(1, 2, 3), plus x >= 0 with c_lp = -1 in the same constraint:
    # S = C - lam I has lambda_min = 1 - lam and the LP slack is -1 - lam.
    C = np.diag([1.0, 2.0, 3.0])
    problem = SDPProblem([1.0], [C], [([0, 0, 0], [0, 1, 2], [0, 1, 2], [1.0, 1.0, 1.0])], c_lp=[-1.0],
                         A_lp=np.ones((1, 1)))
    op = CompressedOperator(problem, select_backend("cpu"))
    norms = ProblemNorms.of(problem)
    value, pairs, lp_slacks = dual_infeasibility(op, np.array([3.0]), norms, accuracy=1e-10)
    assert pairs[0].value == pytest.approx(-2.0)
    assert lp_slacks == pytest.approx([-4.0])
    assert value == pytest.approx((2.0 + 4.0) / (1.0 + norms.C_1))
    value, _, _ = dual_infeasibility(op, np.array([-1.5]), norms, accuracy=1e-10)
    assert value == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_lanczos_from_a_misleading_guess_still_finds_the_smallest_eigenvalue(device):
    # a start vector that is exactly an eigenvector of a larger eigenvalue spans an invariant subspace; the
    # noise added to guesses keeps Lanczos from stopping there
    n = DENSE_LIMIT + 100
    values = np.linspace(-1.0, 5.0, n)
    matrix = sp.diags(values).tocsr()
    problem = SDPProblem(np.ones(1), [matrix], [([0], [0], [0], [1.0])], block_sizes=[n])
    backend = select_backend(device)
    op = CompressedOperator(problem, backend)
    slack = op.slack_matrix(backend.xp.zeros(1))
    misleading = np.zeros(n)
    misleading[n // 2] = 1.0
    for guess in (misleading, np.eye(n)[0], np.full(n, np.nan), np.zeros(n)):  # unusable guesses are ignored
        (value, _, _), = smallest_eigenpairs(slack, op.layout, backend, accuracy=1e-9,
                                             guesses=[backend.xp.asarray(guess)])
        assert value == pytest.approx(-1.0, abs=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_lanczos_with_a_short_basis_when_memory_is_scarce(device, monkeypatch):
    # with room for one vector only, cycles shrink to MIN_LANCZOS_STEPS basis vectors and restart more often
    from cvxpy_culorads.backends.memory import MIN_LANCZOS_STEPS, affordable_lanczos_steps
    n = DENSE_LIMIT + 300
    rng = np.random.default_rng(4)
    M = sp.random(n, n, density=4.0 / n, random_state=rng)
    block = (M + M.T + sp.diags(rng.standard_normal(n))).tocsr()
    backend = select_backend(device)
    op = CompressedOperator(SDPProblem(np.ones(1), [block], [([0], [0], [0], [1.0])]), backend)
    monkeypatch.setattr(type(backend), "free_memory", lambda self: 8 * n)
    assert affordable_lanczos_steps(backend, n) == MIN_LANCZOS_STEPS
    (value, _, _), = smallest_eigenpairs(op.slack_matrix(backend.xp.zeros(1)), op.layout, backend, accuracy=1e-9)
    assert value == pytest.approx(np.linalg.eigvalsh(block.toarray())[0], abs=1e-7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cycles", [1, 2])
def test_lanczos_out_of_cycles_returns_a_consistent_ritz_pair(device, cycles):
    # with an unreachable accuracy every cycle restarts: the value and the vector must still belong together
    from cvxpy_culorads.linalg.krylov import lanczos_smallest
    n = 400
    rng = np.random.default_rng(6)
    M = sp.random(n, n, density=5.0 / n, random_state=rng)
    matrix = (M + M.T + sp.diags(rng.standard_normal(n))).tocsr()
    backend = select_backend(device)
    value, vector, residual = lanczos_smallest(backend.csr(matrix), n, backend, accuracy=0.0, seed=1, steps=30,
                                                cycles=cycles)
    v = backend.to_host(vector)
    assert np.linalg.norm(v) == pytest.approx(1.0)
    assert v @ (matrix @ v) == pytest.approx(value, abs=1e-10)
    assert value >= np.linalg.eigvalsh(matrix.toarray())[0] - 1e-10
    # the reported residual is the Ritz pair's own, which is what makes value - residual a lower estimate
    assert residual == pytest.approx(np.linalg.norm(matrix @ v - value * v), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_lanczos_stops_once_its_ritz_value_fails_the_callers_test(device):
    # the Ritz value only falls towards lambda_min: below the caller's threshold it decides the test (fails) long
    # before the residual reaches the accuracy, and the value is known to within DECIDED_RESIDUAL_SHARE of itself
    from cvxpy_culorads.linalg.krylov import DECIDED_RESIDUAL_SHARE, lanczos_smallest
    n = 600
    rng = np.random.default_rng(8)
    M = sp.random(n, n, density=4.0 / n, random_state=rng)
    matrix = (M + M.T).tocsr()
    smallest = np.linalg.eigvalsh(matrix.toarray())[0]
    backend = select_backend(device)
    options = dict(accuracy=1e-12, seed=0, steps=20, cycles=200)
    value, vector, residual = lanczos_smallest(backend.csr(matrix), n, backend, **options,
                                               fails_below=0.5 * smallest)
    assert smallest - 1e-10 <= value < 0.5 * smallest
    assert 1e-12 < residual <= DECIDED_RESIDUAL_SHARE * abs(value)
    v = backend.to_host(vector)
    assert residual == pytest.approx(np.linalg.norm(matrix @ v - value * v), rel=1e-6)
    # a threshold the Ritz value never passes leaves the run to its accuracy
    converged, _, converged_residual = lanczos_smallest(backend.csr(matrix), n, backend, **options,
                                                        fails_below=smallest - 1.0)
    assert converged_residual <= 1e-12 and converged == pytest.approx(smallest, abs=1e-10)


@pytest.mark.parametrize("device", DEVICES)
def test_lanczos_goes_on_past_its_cycles_while_the_callers_test_is_undecided(device):
    # after one cycle the Ritz value passes the threshold and the value less its residual does not: the answer
    # hangs on the eigensolver, which goes on (up to UNDECIDED_CYCLES_FACTOR times its cycles) until it decides
    from cvxpy_culorads.linalg.krylov import lanczos_smallest
    n = 400
    rng = np.random.default_rng(6)
    M = sp.random(n, n, density=5.0 / n, random_state=rng)
    matrix = (M + M.T + sp.diags(rng.standard_normal(n))).tocsr()
    smallest = np.linalg.eigvalsh(matrix.toarray())[0]
    backend = select_backend(device)
    options = dict(accuracy=0.0, seed=1, steps=30, cycles=1)
    value, _, residual = lanczos_smallest(backend.csr(matrix), n, backend, **options)
    assert value - residual < value - 0.5 * residual < value  # undecided for the threshold below
    threshold = value - 0.5 * residual
    decided, _, decided_residual = lanczos_smallest(backend.csr(matrix), n, backend, **options, fails_below=threshold)
    assert decided_residual < 1e-3 * residual
    assert threshold <= decided - decided_residual <= smallest + 1e-12


def _planted_cluster(n: int, cluster: int, seed: int):
    """A symmetric matrix with ``cluster`` eigenvalues within 1e-6 of zero (one of them -1e-6) and the rest in
    [0.05, 3], with its eigenvectors."""
    rng = np.random.default_rng(seed)
    vectors, _ = np.linalg.qr(rng.standard_normal((n, n)))
    values = np.concatenate([rng.uniform(-1e-6, 1e-6, cluster - 1), [-1e-6], rng.uniform(0.05, 3.0, n - cluster)])
    return (vectors * values) @ vectors.T, vectors


@pytest.mark.parametrize("device", DEVICES)
def test_lanczos_deflated_solves_the_problem_on_the_complement(device):
    from cvxpy_culorads.linalg.krylov import lanczos_smallest
    n, q = 300, 6
    matrix, vectors = _planted_cluster(n, q, seed=1)
    Q = vectors[:, :q]
    complement = scipy.linalg.null_space(Q.T)
    want = np.linalg.eigvalsh(complement.T @ matrix @ complement)[0]
    backend = select_backend(device)
    xp = backend.xp
    value, vector, residual = lanczos_smallest(backend.csr(sp.csr_matrix(matrix)), n, backend, accuracy=1e-10,
                                                seed=0, deflate=xp.asarray(Q))
    assert value == pytest.approx(want, abs=1e-9)
    assert np.abs(Q.T @ backend.to_host(vector)).max() <= 1e-10


@pytest.mark.parametrize("device", DEVICES)
def test_deflated_bound_brackets_the_smallest_eigenvalue(device):
    # R spans the near-null cluster up to 1e-7, plus two small fresh columns (as an escape seeds them) that are
    # no eigenvectors: the bound must hold, be tight, and come from the deflated problem
    from cvxpy_culorads.certify.certificates import DEFLATION_LOSS, _deflated_eigenpair
    n, cluster = 400, 8
    matrix, vectors = _planted_cluster(n, cluster, seed=2)
    rng = np.random.default_rng(3)
    factor = vectors[:, :cluster] @ rng.standard_normal((cluster, cluster)) + 1e-7 * rng.standard_normal((n, cluster))
    factor = np.hstack([factor, 1e-3 * rng.standard_normal((n, 2))])
    backend = select_backend(device)
    true_min = np.linalg.eigvalsh(matrix)[0]
    accuracy = 1e-7
    pair = _deflated_eigenpair(backend.csr(sp.csr_matrix(matrix)), backend.xp.asarray(factor), backend, accuracy,
                               0, None, np.inf)
    assert pair is not None
    assert pair.lower <= true_min
    assert true_min - pair.lower <= DEFLATION_LOSS * accuracy
    # the public entry point takes the deflated route and reports the same bound
    (value, _, residual), = smallest_eigenpairs(backend.csr(sp.csr_matrix(matrix)), _layout(n), backend, accuracy,
                                                subspaces=[backend.xp.asarray(factor)])
    assert value - residual == pytest.approx(pair.lower, abs=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_deflation_with_a_cluster_wider_than_the_range_is_refused_or_still_a_bound(device):
    # 30 near-zero eigenvalues, R spans 8 of them: the complement's cluster leaves the coupling unaffordable
    from cvxpy_culorads.certify.certificates import _deflated_eigenpair
    n = 400
    matrix, vectors = _planted_cluster(n, 30, seed=4)
    rng = np.random.default_rng(5)
    factor = vectors[:, :8] @ rng.standard_normal((8, 8)) + 1e-4 * rng.standard_normal((n, 8))
    backend = select_backend(device)
    true_min = np.linalg.eigvalsh(matrix)[0]
    for accuracy in (1e-3, 1e-8):
        pair = _deflated_eigenpair(backend.csr(sp.csr_matrix(matrix)), backend.xp.asarray(factor), backend,
                                   accuracy, 0, None, np.inf)
        assert pair is None or pair.lower <= true_min
    (value, _, residual), = smallest_eigenpairs(backend.csr(sp.csr_matrix(matrix)), _layout(n), backend, 1e-8,
                                                subspaces=[backend.xp.asarray(factor)])
    assert true_min - 1e-7 <= value - residual <= true_min


def _layout(n: int):
    from cvxpy_culorads.operators.compressed import BlockLayout
    return BlockLayout((n,), (0,), 0, n, (1,))


def test_certificate_cycles_follow_the_factors_rank(monkeypatch):
    # a 5-column factor gets cycles of 30 steps (their restarts keep 10 Ritz vectors for a bottom cluster of about
    # 5), and the bound from the shorter cycles is still below the slack's exact one
    problem, L = random_maxcut(DENSE_LIMIT + 400, 0.004, seed=3)
    lengths = []
    lanczos = certificates.lanczos_smallest

    def recorded(*args, steps, **kwargs):
        lengths.append(steps)
        return lanczos(*args, steps=steps, **kwargs)
    monkeypatch.setattr(certificates, "lanczos_smallest", recorded)
    result = solve(problem, device="cpu", rank=5, tol=1e-2)
    assert result.status is Status.OPTIMAL and lengths[0] == 30
    assert lanczos_cycle_steps(15) == lanczos_cycle_steps(40) == LANCZOS_STEPS
    y = result.dual
    exact = float(y.sum()) + L.shape[0] * min(0.0, np.linalg.eigvalsh(-L / 4 - np.diag(y))[0])  # trace X = n
    assert result.dual_bound <= exact + 1e-9 * abs(exact)
    assert (result.primal_objective - exact) / (1 + abs(result.primal_objective) + abs(exact)) <= 1e-2


def _products(monkeypatch) -> list:
    """A list that counts the products with the slack that Lanczos runs make from now on."""
    from cvxpy_culorads.linalg import krylov
    counted, times = [], krylov.symmetric_times

    def counting(kernels, matrix, x):
        counted.append(1)
        return times(kernels, matrix, x)
    monkeypatch.setattr(krylov, "symmetric_times", counting)
    return counted


def test_a_point_that_fails_without_its_eigenvalue_gets_a_short_eigensolve(monkeypatch):
    # the paper's criterion: the gap is a criterion of its own, so a point whose gap exceeds tol fails whatever
    # lambda_min is, and its eigensolver stops once it knows the value to within DECIDED_RESIDUAL_SHARE; the same
    # slack with the threshold the dual infeasibility alone sets runs on to its accuracy (a cycle more)
    from cvxpy_culorads.settings import Settings
    from cvxpy_culorads.solver.plan import plan
    from cvxpy_culorads.solver.run import Run
    side = 36  # a grid graph: the slack's bottom eigenvalues are close together, so Lanczos converges slowly
    path = sp.diags([1.0, 1.0], [-1, 1], shape=(side, side))
    W = (sp.kron(path, sp.eye(side)) + sp.kron(sp.eye(side), path)).toarray()
    L = np.diag(W.sum(1)) - W
    idx = np.arange(side * side)
    problem = SDPProblem(np.ones(idx.size), [-L / 4], [(idx, idx, idx, np.ones(idx.size))])
    settings = Settings.from_options(device="cpu", criterion="dimacs", tol=1e-5)
    run = Run(problem, settings, plan(problem, settings))
    n, op = L.shape[0], run.op
    R = np.random.default_rng(1).standard_normal((n, 4))
    R /= np.linalg.norm(R, axis=1, keepdims=True)  # diag(R R') = 1: no primal residual
    # S = -L/4 - c I with lambda_min(S) at a third of what the dual criterion allows, and its dual measure tol / 3
    allowed = settings.tol * (1.0 + run.norms.C_1)
    c = np.linalg.eigvalsh(-L / 4)[0] + allowed / 3
    lam = np.full(n, c) * op.row_scale  # the operator's rows are rescaled
    slack = op.slack_matrix(lam)
    exact = np.linalg.eigvalsh(slack.toarray())[0]
    assert exact == pytest.approx(-allowed / 3, rel=1e-9)
    counted = _products(monkeypatch)
    evaluation = run.evaluate(lam, R, run.primal_measures(R))
    short = len(counted)
    assert evaluation.errors.gap > settings.tol and evaluation.worst > settings.tol
    assert evaluation.errors.primal_infeasibility <= 1e-14
    (value, _, residual), = evaluation.eigenpairs
    assert exact - 1e-12 <= value <= exact / 3 and residual <= 2 * abs(value)
    counted.clear()
    (full, _, full_residual), = smallest_eigenpairs(slack, op.layout, run.backend, accuracy=0.1 * allowed,
                                                    subspaces=[R], failing=[-allowed])
    assert full_residual <= 0.1 * allowed and full - full_residual <= exact + 1e-12 * abs(exact)
    assert 0 < short < len(counted)


def test_failing_eigenvalues_of_a_point_whose_residual_fails():
    # certified criterion with trace bounds (MaxCut): the gap's share of tol is spent first; a primal residual
    # above tol leaves no value of lambda_min that passes
    from cvxpy_culorads.certify.measures import relative_gap
    from cvxpy_culorads.settings import Settings
    from cvxpy_culorads.solver.plan import plan
    from cvxpy_culorads.solver.run import Run
    problem, _ = random_maxcut(50, 0.3, seed=2)
    settings = Settings.from_options(device="cpu", tol=1e-5)
    run = Run(problem, settings, plan(problem, settings))
    primal, dual, weights = -30.0, -30.0002, [0.4]
    budget = settings.tol - relative_gap(primal, dual)
    assert run.failing_eigenvalues(primal, dual, weights, residual=0.0) == [pytest.approx(-budget / 0.4)]
    too_large = 2 * settings.tol * (1.0 + run.norms.b_2)
    assert run.failing_eigenvalues(primal, dual, weights, residual=too_large) == [np.inf]
