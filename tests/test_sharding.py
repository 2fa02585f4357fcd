"""Several devices (``cvxpy_culorads.distributed``): the row space split into k shards, checked against one device
(k = 2, 3) operation by operation, step by step and on whole certified solves, on the CPU simulation and, where there
is a GPU, with the shards simulated on it (the GPU kernels on shards; NCCL only with two GPUs, the last tests)."""
import time

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import SDPProblem, Settings, Status, hostpasses, solve
from cvxpy_culorads.backends.backend import gpu_available, select_backend
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import LINE_SEARCH_ROW_SCALARS, hashed_uniform, lbfgs_coefficients
from cvxpy_culorads.certify.certificates import smallest_eigenpairs
from cvxpy_culorads.distributed import (
    RowOrder,
    ShardedBlockOperator,
    ShardedSpheresOperator,
    arrays,
    balanced_bounds,
    partition,
    sharded_backend,
    simulated_backend,
)
from cvxpy_culorads.distributed.arrays import HaloExchange, shard_matrices
from cvxpy_culorads.distributed.partition import (
    _predicted_halo_share,
    coordinate_halo_share,
    halo_share,
    shard_bounds,
    symmetric_bounds,
)
from cvxpy_culorads.linalg.krylov import conjugate_gradient
from cvxpy_culorads.models import completion_problem, maxcut_problem, random_low_rank_instance
from cvxpy_culorads.operators.compressed import BlockLayout, CompressedOperator
from cvxpy_culorads.solver import run as solver_run
from cvxpy_culorads.solver.tuning import Tuning

from support import DEVICES, primal_residual, random_mixed_problem


@pytest.fixture(params=DEVICES)
def device(request, monkeypatch):
    """The device of one-device solves; with devices=k, k shards simulated on it."""
    monkeypatch.setattr(solver_run, "sharded_backend", simulated_backend)
    return request.param


def _graph(n: int, degree: int, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    a = np.repeat(np.arange(n), degree // 2)
    b = rng.integers(0, n, a.size)
    keep = a != b
    W = sp.csr_array((rng.choice([1.0, 2.0], keep.sum()), (a[keep], b[keep])), shape=(n, n))
    return (W + W.T).tocsr()


def _banded_graph(n: int, seed: int) -> sp.csr_array:
    """Each vertex i joined to i + 1, ..., i + 3 with weights 1 or 2: cut into shards, only the rows beside a cut have
    halo entries (the compressed halo part, ``arrays.HaloPart``)."""
    rng = np.random.default_rng(seed)
    a = np.repeat(np.arange(n), 3)
    b = a + np.tile([1, 2, 3], n)
    keep = b < n
    W = sp.csr_array((rng.choice([1.0, 2.0], keep.sum()), (a[keep], b[keep])), shape=(n, n))
    return (W + W.T).tocsr()


def _weighted_diagonals(n: int, seed: int, graph: str = "random", shuffled: bool = True) -> SDPProblem:
    """min <C, X> s.t. a_i X_jj = b_i, the constraints in a shuffled order (or constraint i on row i) and rows of
    norms b / a != 1."""
    rng = np.random.default_rng(seed)
    W = _graph(n, 6, seed) if graph == "random" else _banded_graph(n, seed)
    C = sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W
    rows = rng.permutation(n) if shuffled else np.arange(n)
    a = rng.uniform(0.5, 2.0, n)
    b = rng.uniform(0.5, 3.0, n)
    return SDPProblem(b, [C], [(np.arange(n), rows, rows, a)], name="weighted")


def _dense_bound(problem: SDPProblem, result) -> float:
    """b'y + (sum_j b_j / a_j) min(0, lambda_min(C - A*(y))): the certified bound from the returned multipliers and a
    dense eigenvalue problem (the trace of every feasible X is sum_j b_j / a_j)."""
    coeff = problem.A_coords[0]
    y = result.dual
    n = problem.block_sizes[0]
    slack = problem.objective_matrix(0).toarray()
    slack[coeff.row, coeff.col] -= coeff.val * y[coeff.con]
    trace = float(np.sum(problem.b[coeff.con] / coeff.val))
    return float(problem.b @ y) + trace * min(0.0, np.linalg.eigvalsh(slack)[0]) if n else 0.0


def _operators(problem, k: int, device: str, split_over=simulated_backend):
    """The one-device operator and the split one, on the backend ``split_over(device, k, bounds)`` makes (by default
    k shards simulated on ``device``) at the bounds the operator chooses."""
    layout = BlockLayout.of(problem)
    single = CompressedOperator(problem, select_backend(device), rescale=True, layout=layout)
    backend = split_over(device, k, ShardedSpheresOperator.bounds(problem, layout, k))
    return single, ShardedSpheresOperator(problem, backend, True, layout)


def test_balanced_bounds_split_the_weight_evenly():
    bounds = balanced_bounds(np.ones(10), 3)
    assert bounds[0] == 0 and bounds[-1] == 10 and np.all(np.diff(bounds) >= 3)
    heavy = np.ones(100)
    heavy[:10] = 9.0  # the first ten rows hold as much as the other 90 together
    assert balanced_bounds(heavy, 2)[1] == 10
    few = balanced_bounds(np.ones(2), 4)  # more shards than rows: some are empty
    assert few[0] == 0 and few[-1] == 2 and np.all(np.diff(few) >= 0)


@pytest.mark.parametrize("shuffled", [True, False])
@pytest.mark.parametrize("graph", ["random", "banded"])
@pytest.mark.parametrize("k", [2, 3])
def test_sharded_operator_matches_one_device(k, graph, shuffled, device):
    problem = _weighted_diagonals(1100, seed=3, graph=graph, shuffled=shuffled)
    single, sharded = _operators(problem, k, device)
    compressed = [part.rows is not None for part in sharded.C.halo]
    assert compressed == [graph == "banded"] * k  # every row or only those beside a cut
    _check_operator_matches(problem, single, sharded)


def _check_operator_matches(problem, single, sharded):
    """The split operator's products, constraint values, adjoint, slack, start and widening against the one-device
    operator's."""
    backend, host, xp = sharded.backend, single.backend.to_host, single.backend.xp
    rng, n = np.random.default_rng(0), problem.block_sizes[0]
    V = rng.standard_normal((n, 5))
    parts, V = sharded.split(V), xp.asarray(V)
    assert np.allclose(backend.to_host(sharded.objective_times(parts)), host(single.objective_times(V)), atol=1e-12)
    assert sharded.objective(parts) == pytest.approx(float(single.objective(V)), rel=1e-13)
    assert np.allclose(host(sharded.constraints(sharded.sample(parts))), host(single.constraints(single.sample(V))),
                       atol=1e-12)
    y = rng.standard_normal(problem.m)
    assert np.allclose(backend.to_host(sharded.adjoint_times(sharded.adjoint_data(xp.asarray(y)), parts)),
                       host(single.adjoint_times(single.adjoint_data(xp.asarray(y)), V)), atol=1e-12)
    # the dual slack, applied by the eigensolver's products (halo exchanged), and its Gershgorin bound
    slack, reference = sharded.slack_matrix(xp.asarray(y)), CompressedOperator(
        problem, select_backend("cpu"), rescale=True).slack_matrix(y)
    v = rng.standard_normal(n)
    assert np.allclose(backend.to_host(sharded.kernels.csr_matmul(slack, sharded.split(v))), reference @ v, atol=1e-12)
    radii = np.asarray(abs(reference).sum(axis=1)).ravel() - np.abs(reference.diagonal())
    assert slack.gershgorin_lower() == pytest.approx(float(np.min(reference.diagonal() - radii)))
    # the start and a widened factor, shard by shard, are the rows of the one-device arrays
    start = backend.to_host(sharded.initial_factor(6, [4], seed=5))
    assert np.array_equal(start, host(single.initial_factor(6, [4], seed=5)))
    direction = rng.standard_normal(n)
    wide = backend.to_host(sharded.widen(parts, [5], [7], [sharded.split(direction)]))
    assert np.array_equal(wide, host(single.widen(V, [5], [7], [xp.asarray(direction)])))


def _completion(n1: int, m: int, seed: int) -> SDPProblem:
    rows, cols, values, _ = random_low_rank_instance(n1, n1, 1, m, seed=seed)
    return completion_problem(rows, cols, values, (n1, n1))


def _trace_and_edges(n: int, seed: int) -> SDPProblem:
    """min <C, X> s.t. X_ij = 0 on the edges of a random graph and tr X = 1 (Lovasz theta's sparse form, with C the
    negated adjacency of a second graph plus -I): a constraint on every shard's rows, and C with a halo."""
    graph, other = sp.tril(_graph(n, 6, seed), k=-1).tocoo(), _graph(n, 4, seed + 1)
    C = -(other + sp.eye(n))
    edges = graph.row.size
    cons = np.concatenate([np.arange(edges), np.full(n, edges)])
    rows, cols = np.concatenate([graph.row, np.arange(n)]), np.concatenate([graph.col, np.arange(n)])
    vals = np.concatenate([np.full(edges, 0.5), np.ones(n)])
    return SDPProblem(np.concatenate([np.zeros(edges), [1.0]]), [C], [(cons, rows, cols, vals)], name="edges")


@pytest.mark.parametrize("kind", ["completion", "trace and edges", "diagonal"])
@pytest.mark.parametrize("k", [2, 3])
def test_block_operator_matches_one_device(k, kind, device):
    problem = {"completion": lambda: _completion(600, 12000, seed=1),
               "trace and edges": lambda: _trace_and_edges(1300, seed=2),
               "diagonal": lambda: _weighted_diagonals(1100, seed=3)}[kind]()
    _check_block_operator_matches(problem, k, device)


def _check_block_operator_matches(problem, k, device, split_over=simulated_backend):
    """:func:`_check_operator_matches` for the block operator (on the backend ``split_over(device, k, bounds)`` makes
    at the bounds the operator chooses), and its sampling of two factors, its line search's samples, the gradient's
    product and A*(y) as a matrix."""
    layout = BlockLayout.of(problem)
    single = CompressedOperator(problem, select_backend(device), rescale=True, layout=layout)
    backend = split_over(device, k, ShardedBlockOperator.bounds(problem, layout, k))
    sharded = ShardedBlockOperator(problem, backend, True, layout)
    assert sharded.row_scale == pytest.approx(single.row_scale, rel=1e-15)
    if problem.name == "completion":  # bipartite: every position lies between two shards, and both sample
        sampled = [rows.size for rows, _ in sharded._extended]
        assert sum(sampled) == problem.m and min(sampled) > 0.2 * problem.m
    _check_operator_matches(problem, single, sharded)
    host, xp = single.backend.to_host, single.backend.xp
    rng = np.random.default_rng(4)
    n = layout.n_rows
    U, V = rng.standard_normal((n, 4)), rng.standard_normal((n, 4))
    split = [sharded.split(U), sharded.split(V)]
    U, V = xp.asarray(U), xp.asarray(V)
    for values, reference in ((sharded.sample(*split), single.sample(U, V)),
                              (sharded.sample_pair(*split), single.sample_pair(U, V))):
        np.testing.assert_allclose(host(sharded.constraints(values)), host(single.constraints(reference)),
                                   rtol=1e-13, atol=1e-12)
    y = xp.asarray(rng.standard_normal(problem.m))
    np.testing.assert_allclose(sharded.backend.to_host(sharded.slack_times(y, 2.0, split[0], weight=3.0)),
                               host(single.slack_times(y, 2.0, U, weight=3.0)), rtol=1e-13, atol=1e-11)
    v = rng.standard_normal(n)
    reference = CompressedOperator(problem, select_backend("cpu"), rescale=True).adjoint_matrix(host(y), weight=2.0)
    product = sharded.kernels.csr_matmul(sharded.adjoint_matrix(y, weight=2.0), sharded.split(v))
    np.testing.assert_allclose(sharded.backend.to_host(product), reference @ v, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_phase_one_kernels_on_split_rows_are_the_whole_arrays_kernels(k, device):
    shards = simulated_backend(device, k, np.array([0, 40, 90, 130]) if k == 3 else np.array([0, 55, 130]))
    kernels, xp = shards.kernels(), shards.xp
    rng = np.random.default_rng(k)
    R, D, CD = (rng.standard_normal((130, 3)) for _ in range(3))
    AW, Avals, b, lam = rng.standard_normal((20, 2)), *rng.standard_normal((3, 20))
    expected = CpuKernels.line_search_products(AW, Avals, b, lam, 2.5, R, D, CD, np.empty(9))
    split = [shards.shards.split(a.copy()) for a in (R, D, CD)]  # (on the CPU the parts are views of a)
    AW_d, Avals_d, b_d, lam_d = (xp.array(a) for a in (AW, Avals, b, lam))
    got = shards.to_host(kernels.line_search_products(AW_d, Avals_d, b_d, lam_d, 2.5, *split, xp.empty(9)))
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    assert np.abs(got[LINE_SEARCH_ROW_SCALARS]).min() > 0  # the rows' sums, from every shard
    step = kernels.advance(split[0], split[1], 0.3, Avals_d, AW_d)
    np.testing.assert_allclose(shards.to_host(step), 0.3 * D, rtol=1e-15)
    np.testing.assert_allclose(shards.to_host(split[0]), R + 0.3 * D, rtol=1e-15)
    np.testing.assert_allclose(shards.to_host(Avals_d), Avals + 0.3 * 2 * AW[:, 0] + 0.09 * AW[:, 1], rtol=1e-14)
    np.testing.assert_allclose(shards.to_host(kernels.shifted_residual(Avals_d, b_d, lam_d, 2.0)),
                               2.0 * (shards.to_host(Avals_d) - b) - lam, rtol=1e-14)
    np.testing.assert_allclose(shards.to_host(kernels.average(split[1], split[2], split[0])), (0.3 * D + CD) / 2)


@pytest.mark.parametrize("k", [2, 3])
def test_conjugate_gradients_on_split_rows_are_the_whole_arrays_ones(k, device):
    # phase II's solves: (I + diag(w)) X = B on split rows, as on the whole arrays
    shards = simulated_backend(device, k, balanced_bounds(np.ones(300), k))
    rng = np.random.default_rng(0)
    w, B = rng.uniform(0.0, 5.0, (300, 1)), rng.standard_normal((300, 2))
    whole = select_backend(device)
    w_whole, w_split = whole.xp.asarray(w), shards.shards.split(w)
    expected, count = conjugate_gradient(lambda X: X + w_whole * X, whole.xp.asarray(B), whole.xp.zeros((300, 2)),
                                         1e-12, whole)
    got, split_count = conjugate_gradient(lambda X: X + w_split * X, shards.shards.split(B),
                                          shards.shards.split(np.zeros((300, 2))), 1e-12, shards)
    assert split_count == count
    np.testing.assert_allclose(shards.to_host(got), whole.to_host(expected), rtol=1e-10)
    np.testing.assert_allclose(shards.to_host(got), B / (1.0 + w), rtol=1e-8)


@pytest.mark.parametrize("k", [2, 3])
def test_split_phase_one_and_two_steps_are_the_one_device_steps(k, device):
    problem = _completion(600, 20000, seed=2)
    for steps in (5, 40, 57):  # phase I, then into phase II (after 54 ALM steps), and each measurement
        # a split solve takes the low-rank phases only; on one GPU the plan may start the interior-point method
        one = solve(problem, device=device, max_iter=steps, interior_point_handover=False)
        split = solve(problem, device=device, devices=k, max_iter=steps)
        assert split.iterations == one.iterations and (split.iterations["admm"] > 0) == (steps == 57)
        assert np.abs(split.factors[0] - one.factors[0]).max() <= 1e-9 * np.abs(one.factors[0]).max()
        assert split.primal_objective == pytest.approx(one.primal_objective, rel=1e-12)
        np.testing.assert_allclose(split.dual, one.dual, rtol=1e-8, atol=1e-10 * np.abs(one.dual).max())


def test_constraints_off_the_diagonal_keep_the_given_order():
    # the renumbering is chosen from C's pattern, which says nothing of completion's constraints (C = I / 2)
    assert RowOrder.of(_completion(600, 12000, seed=1), Settings.from_options(devices=2, shard_order="rcm")) is None
    rcm = Settings.from_options(devices=2, shard_order="rcm")
    assert RowOrder.of(_weighted_diagonals(1100, seed=3), rcm) is not None


def _completion_bound(problem: SDPProblem, result) -> float:
    """The certified bound of completion from the returned multipliers, recomputed densely: C = I/2 gives
    tr X = 2 <C, X>, so <C, X> = b'y + <C - A*(y), X> >= b'y + lambda_min (2 <C, X>) for every feasible X."""
    coeff = problem.A_coords[0]
    slack = problem.objective_matrix(0).toarray()
    np.add.at(slack, (coeff.row, coeff.col), -coeff.val * result.dual[coeff.con])
    np.add.at(slack, (coeff.col, coeff.row), -coeff.val * result.dual[coeff.con])
    smallest = min(0.0, np.linalg.eigvalsh(slack)[0])
    return float(problem.b @ result.dual) / (1.0 - 2.0 * smallest)


@pytest.mark.parametrize("k", [2, 3])
def test_split_phases_one_and_two_solve_completion_like_one_device(k, device):
    problem = _completion(600, 20000, seed=1)
    one = solve(problem, device=device, interior_point_handover=False)  # the split's route (low-rank phases only)
    split = solve(problem, device=device, devices=k)
    assert one.status is split.status is Status.OPTIMAL, split.summary()
    assert split.iterations["alm"] > 0 and split.iterations["admm"] > 0 and split.iterations["riemannian"] == 0
    assert split.primal_objective == pytest.approx(one.primal_objective, rel=1e-7)
    R = split.factors[0]
    assert 0.5 * float(np.sum(R * R)) == pytest.approx(split.primal_objective, rel=1e-12)
    assert primal_residual(problem, split) <= 1e-5
    bound = _completion_bound(problem, split)
    assert split.dual_bound <= bound + 1e-9 * abs(bound)  # the reported bound holds, recomputed densely
    assert (split.primal_objective - bound) / (1 + abs(split.primal_objective) + abs(bound)) <= 1e-5


def test_split_phases_one_and_two_solve_maxcut_like_the_riemannian_phase(device):
    problem = maxcut_problem(_graph(1200, 6, seed=3))
    riemannian_one = solve(problem, device=device)
    split = solve(problem, device=device, devices=2, algorithm="alm_admm")
    assert riemannian_one.status is split.status is Status.OPTIMAL, split.summary()
    assert split.iterations["alm"] > 0 and split.iterations["riemannian"] == 0
    assert split.primal_objective == pytest.approx(riemannian_one.primal_objective, rel=2e-5)
    assert primal_residual(problem, split) <= 1e-5
    bound = _dense_bound(problem, split)
    assert split.dual_bound <= bound + 1e-9 * abs(bound)
    assert (split.primal_objective - bound) / (1 + abs(split.primal_objective) + abs(bound)) <= 1e-5


@pytest.mark.parametrize("graph", ["random", "banded"])
@pytest.mark.parametrize("k", [2, 3])
def test_rounded_products_round_only_the_rows_from_other_shards(k, graph, device):
    problem = _weighted_diagonals(1100, seed=3, graph=graph)
    layout = BlockLayout.of(problem)
    backend = simulated_backend(device, k, ShardedSpheresOperator.bounds(problem, layout, k))
    sharded = ShardedSpheresOperator(problem, backend, True, layout, halo_precision="single")
    C = problem.objective_matrix(0)
    V = np.random.default_rng(1).standard_normal((1100, 5))
    expected = np.empty_like(V)
    for s in range(k):
        lo, hi = sharded.shards.rows(s)
        seen = V.astype(np.float32).astype(np.float64)  # the rows that shard s receives ...
        seen[lo:hi] = V[lo:hi]  # ... and its own
        expected[lo:hi] = C[lo:hi] @ seen
    got = backend.to_host(sharded.rounded_objective_times(sharded.split(V)))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    error = np.abs(got - C @ V).max()
    assert 0 < error <= 2.0 ** -24 * (abs(C) @ abs(V)).max()
    # the exact product, and the rounded one of an operator set to double precision, are C V
    exact = ShardedSpheresOperator(problem, backend, True, layout, halo_precision="double")
    for op, times in ((sharded, sharded.objective_times), (exact, exact.rounded_objective_times)):
        np.testing.assert_allclose(backend.to_host(times(op.split(V))), C @ V, rtol=0, atol=1e-12)


@pytest.mark.parametrize("pairs", [0, 1, 3])
def test_lbfgs_recursion_on_the_gram_matrix_is_the_recursion_on_vectors(pairs):
    # what the sharded L-BFGS computes from the shards' summed Gram parts, against the two-loop recursion on vectors
    rng = np.random.default_rng(pairs)
    G = rng.standard_normal((40, 3))
    history = [(rng.standard_normal(G.shape), rng.standard_normal(G.shape)) for _ in range(pairs)]
    if pairs == 3:
        history[1] = (history[1][0], -history[1][0])  # negative curvature: the pair gets weight zero
    products = np.empty(2)
    expected = CpuKernels.lbfgs_direction(G, [CpuKernels.lbfgs_pair(s, y) for s, y in history], products)
    vectors = [G] + [v for pair in history for v in pair]
    upper = CpuKernels.lbfgs_gram(vectors, np.empty(len(vectors) * (len(vectors) + 1) // 2))
    gram = np.zeros((len(vectors), len(vectors)))
    gram[np.triu_indices(len(vectors))] = upper
    gram = gram + np.triu(gram, 1).T
    coefficients, gg, dg = lbfgs_coefficients(gram)
    np.testing.assert_allclose(CpuKernels.lbfgs_combine(vectors, coefficients), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose([gg, dg], products, rtol=1e-12)
    from_upper = np.empty(2)  # the kernel set's recursion, from the triangle as the shards sum it
    np.testing.assert_array_equal(CpuKernels.lbfgs_recursion(upper, len(vectors), from_upper), coefficients)
    np.testing.assert_array_equal(from_upper, [gg, dg])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [2, 3])
def test_sharded_lanczos_finds_the_smallest_eigenvalue(k, device):
    # on the GPU the shards' Gram-Schmidt passes and reductions are GpuKernels' and stay on the device
    problem = _weighted_diagonals(1200, seed=4)
    single, _ = _operators(problem, k, "cpu")
    sharded = _operators(problem, k, device)[1]
    y = np.random.default_rng(1).standard_normal(problem.m)
    exact = np.linalg.eigvalsh(single.slack_matrix(y).toarray())[0]
    pair, = smallest_eigenpairs(sharded.slack_matrix(sharded.backend.asarray(y)), sharded.layout, sharded.backend,
                                accuracy=1e-8, seed=2)
    rounding = 1e-12 * abs(exact)
    assert pair.lower - rounding <= exact <= pair.value + rounding and pair.value - exact <= 1e-6
    vector = sharded.backend.to_host(pair.vector)
    assert np.linalg.norm(single.slack_matrix(y) @ vector - pair.value * vector) <= 1.01 * pair.residual + 1e-12


@pytest.mark.parametrize("device", DEVICES)
def test_the_start_vector_is_the_same_on_every_device_and_split(device):
    problem = _weighted_diagonals(1200, seed=4)
    single, sharded = _operators(problem, 3, device)
    reference = hashed_uniform(np, 0, 1200, 7)
    assert np.all(np.abs(reference) <= 1.0) and abs(reference.mean()) < 0.1 and abs(reference.std() - 3**-0.5) < 0.05
    assert not np.allclose(reference, hashed_uniform(np, 0, 1200, 8))  # the seed matters
    np.testing.assert_array_equal(single.backend.to_host(single.kernels.random_vector(1200, 7)), reference)
    np.testing.assert_array_equal(sharded.backend.to_host(sharded.kernels.random_vector(1200, 7)), reference)


@pytest.mark.parametrize("k", [2, 3])
def test_sharded_steps_are_the_one_device_steps(k, device):
    problem = maxcut_problem(_graph(1500, 6, seed=1))
    for steps in (5, 40):  # the Riemannian phase and the measurement after it, to rounding
        one = solve(problem, device=device, max_iter=steps)
        split = solve(problem, device=device, devices=k, max_iter=steps, shard_order="given")
        assert split.iterations == one.iterations
        assert np.abs(split.factors[0] - one.factors[0]).max() <= 1e-9
        assert split.primal_objective == pytest.approx(one.primal_objective, rel=1e-12)
        # Lanczos stops at the accuracy the criteria need, so its Ritz values agree to that, not to rounding
        assert split.min_eigenvalues[0] == pytest.approx(one.min_eigenvalues[0], rel=1e-3, abs=1e-9)


@pytest.mark.parametrize("k", [2, 3])
def test_sharded_solves_are_certified_like_one_device(k, device):
    problem = _weighted_diagonals(1500, seed=5)
    one = solve(problem, device=device)
    # rank 1 is a saddle: escapes widen the shards
    split = solve(problem, device=device, devices=k, rank=1, shard_order="given")
    assert one.status is split.status is Status.OPTIMAL, split.summary()
    assert split.ranks[0] > 1 and (f"{k} shards" in split.device or f"{k} GPUs" in split.device)
    assert split.primal_objective == pytest.approx(one.primal_objective, rel=1e-5)
    bound = _dense_bound(problem, split)
    gap = (split.primal_objective - bound) / (1 + abs(split.primal_objective) + abs(bound))
    assert 0.0 <= gap <= 1e-5  # the dual bound holds, recomputed densely from the returned multipliers
    assert bound - 1e-6 * abs(bound) <= split.dual_bound <= bound + 1e-9
    assert primal_residual(problem, split) <= 1e-12


def test_rounded_runs_reach_tight_targets_and_the_answer_is_measured_in_double(monkeypatch):
    # every run rounds the halo rows (no margin), and still reaches tol = 1e-8: the line search judges the decrease
    # by a formula whose rounding error shrinks with the step
    sent = set()
    start = HaloExchange.start

    def recorded(exchange, V, dtype=np.float64):
        sent.add(np.dtype(dtype))
        return start(exchange, V, dtype)
    monkeypatch.setattr(HaloExchange, "start", recorded)
    problem = maxcut_problem(_graph(3000, 6, seed=2))
    one = solve(problem, device="cpu", tol=1e-8)
    split = solve(problem, device="cpu", devices=2, tol=1e-8, shard_order="given", halo_precision="single",
                  tuning=Tuning(rounded_halo_target=0.0))
    assert one.status is split.status is Status.OPTIMAL, split.summary()
    assert sent == {np.dtype(np.float32), np.dtype(np.float64)}  # the phase's products, and the measurements'
    R = split.factors[0]
    assert float(np.sum(R * (problem.objective_matrix(0) @ R))) == pytest.approx(split.primal_objective, rel=1e-13)
    assert split.primal_objective == pytest.approx(one.primal_objective, rel=1e-7)
    bound = _dense_bound(problem, split)
    assert 0.0 <= (split.primal_objective - bound) / (1 + abs(split.primal_objective) + abs(bound)) <= 1e-8


def _geometric_graph(n: int, seed: int) -> sp.csr_array:
    """Points uniform in the unit square joined within a radius (about 8 neighbours each), numbered at random."""
    from scipy.spatial import cKDTree
    points = np.random.default_rng(seed).random((n, 2))
    pairs = cKDTree(points).query_pairs(np.sqrt(8.0 / (np.pi * n)), output_type="ndarray")
    W = sp.csr_array((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    return (W + W.T).tocsr()


@pytest.mark.parametrize("k", [2, 3])
def test_renumbered_shards_return_the_given_problems_answer(k):
    problem = maxcut_problem(_geometric_graph(3000, seed=6))
    order = RowOrder.of(problem, Settings(devices=k))
    assert order.halo_before > 0.5 and order.halo_after < 0.2  # numbered at random, nearly every row is a halo row
    assert RowOrder.of(problem, Settings.from_options(devices=k, shard_order="given")) is None
    assert RowOrder.of(problem, Settings()) is None
    one = solve(problem, device="cpu")
    split = solve(problem, device="cpu", devices=k)
    assert one.status is split.status is Status.OPTIMAL, split.summary()
    assert "renumbered" in split.message and "renumbered" not in one.message
    assert split.primal_objective == pytest.approx(one.primal_objective, rel=1e-5)
    # the factor is the given problem's: its rows meet the given constraints and it has the objective reported
    assert primal_residual(problem, split) <= 1e-12
    R = split.factors[0]
    objective = float(np.sum(R * (problem.objective_matrix(0) @ R)))
    assert objective == pytest.approx(split.primal_objective, rel=1e-12)
    bound = _dense_bound(problem, split)
    assert 0.0 <= (objective - bound) / (1 + abs(objective) + abs(bound)) <= 1e-5
    # the reported bound is valid (at most the dense one) and certifies the recomputed objective to the tolerance
    assert split.dual_bound <= bound + 1e-9
    assert (objective - split.dual_bound) / (1 + abs(objective) + abs(split.dual_bound)) <= 1e-5


@pytest.mark.parametrize("graph", ["geometric", "cycle"])
def test_renumbered_and_kept_orders_solve_as_one_device(graph):
    # the geometric graph is renumbered, the cycle (already local) kept
    W = _geometric_graph(3000, seed=8) if graph == "geometric" else sp.csr_array(
        sp.diags([np.ones(2999), np.ones(2999)], [-1, 1]))
    problem = maxcut_problem(W)
    split = solve(problem, device="cpu", devices=2)
    assert split.status is Status.OPTIMAL
    assert ("renumbered" in split.message) is (graph == "geometric")
    one = solve(problem, device="cpu")
    assert split.primal_objective == pytest.approx(one.primal_objective, rel=1e-5)


@pytest.mark.parametrize("graph", ["random", "path"])
@pytest.mark.parametrize("chunk", [7, 1 << 25])
def test_shard_matrices_are_the_rows_of_c_split_at_the_shard(chunk, graph, device, monkeypatch):
    # every shard's own and halo parts, built from the lower triangle in chunks, against slices of the whole matrix;
    # on the path only the rows beside a cut have halo entries, and the halo part keeps only those
    monkeypatch.setattr(arrays, "BUILD_CHUNK", chunk)
    path = sp.csr_array(sp.diags([np.full(59, 2.5), np.full(59, 2.5)], [-1, 1]))  # weights other than 1
    problem = maxcut_problem(_graph(60, 4, seed=2) + path if graph == "random" else path)
    C = problem.objective_matrix(0).tocsr()
    backend = select_backend(device)
    for lo, hi in [(0, 60), (0, 17), (17, 41), (41, 60)]:
        own, across, halo = shard_matrices(backend, problem.C_coords[0], 60, lo, hi)
        rows = C[lo:hi]
        outside = np.setdiff1d(np.arange(60), np.arange(lo, hi))
        expected_halo = outside[np.abs(rows[:, outside]).sum(axis=0) > 0]
        np.testing.assert_array_equal(halo, expected_halo)
        assert (across is None) is (expected_halo.size == 0)
        parts = [(own, rows[:, lo:hi])]
        if across is not None:
            in_halo = rows[:, expected_halo].tocsr()
            if graph == "path":  # the rows beside the cuts
                kept = backend.to_host(across.rows)
                np.testing.assert_array_equal(kept, np.flatnonzero(np.diff(in_halo.indptr)))
            else:
                assert across.rows is None
                kept = np.arange(hi - lo)
            parts.append((across.matrix, in_halo[kept]))
        for got, expected in parts:
            got = sp.csr_array((backend.to_host(got.data), backend.to_host(got.indices), backend.to_host(got.indptr)),
                               shape=got.shape)
            assert got.shape == expected.shape and got.has_sorted_indices
            np.testing.assert_array_equal(got.toarray(), expected.toarray())
            assert got.nnz == expected.nnz  # no entry dropped or added (C's explicit entries, each once)


def _summed_row_counts(pairs, n: int) -> np.ndarray:
    """Entry by entry: an entry counts in its row and, off the diagonal, in its column's."""
    counts = np.zeros(n, np.int64)
    for rows, cols in pairs:
        for r, c in zip(rows, cols):
            counts[r] += 1
            if r != c:
                counts[c] += 1
    return counts


def test_bounds_from_the_coordinates_are_those_of_the_row_counts(monkeypatch):
    """Every entry sampled and every run one row: the bounds are those balanced over exact row counts, those of the
    symmetric matrix SciPy builds from C's coordinates, and with a second list summed in (a few rows holding most
    entries, repeats, diagonal entries) those counted entry by entry. Chunked passes on the pool."""
    monkeypatch.setattr(hostpasses, "CHUNK", 97)
    problem = maxcut_problem(_graph(300, 6, seed=5))
    rows, cols, _ = problem.C_coords[0]
    counts = np.diff(problem.objective_matrix(0).tocsr().indptr)
    hub = (np.concatenate([np.full(400, 7), np.full(400, 150), np.arange(300)]),
           np.concatenate([np.arange(400) % 300, (np.arange(400) * 7) % 300, np.arange(300)]))
    for k in (2, 3, 7, 300):
        np.testing.assert_array_equal(symmetric_bounds([(rows, cols)], 300, k, buckets=512),
                                      shard_bounds(counts, k))
        np.testing.assert_array_equal(symmetric_bounds([(rows, cols), hub], 300, k, buckets=512),
                                      shard_bounds(counts + _summed_row_counts([hub], 300), k))


@pytest.mark.parametrize("buckets, sample", [(16, 10 ** 9), (4096, 3000), (16, 3000)])
def test_bounds_from_runs_and_samples_balance_the_shards(buckets, sample, monkeypatch):
    """Runs of many rows and a strided sample of each list (the sizes where counting every entry costs seconds; the
    lists' strides differ): each shard's rows plus entries stay within 3 % of an even share."""
    monkeypatch.setattr(hostpasses, "CHUNK", 997)
    n = 4000
    rows, cols, _ = maxcut_problem(_graph(n, 8, seed=7)).C_coords[0]
    hub = np.repeat(np.arange(3000, 4000, 100), 300), np.tile(np.arange(0, 3000, 10), 10)
    weights = 1 + _summed_row_counts([(rows, cols), hub], n)
    for k in (2, 3, 5):
        bounds = symmetric_bounds([(rows, cols), hub], n, k, buckets, sample)
        shares = np.array([weights[lo:hi].sum() for lo, hi in zip(bounds[:-1], bounds[1:])]) / weights.sum()
        assert np.all(np.abs(shares - 1 / k) <= 0.03 / k), (bounds, shares)


def test_renumbering_counts_towards_the_time_limit(monkeypatch):
    problem = maxcut_problem(_geometric_graph(3000, seed=8))
    renumber = RowOrder.of

    def slow(*args):
        time.sleep(0.3)
        return renumber(*args)
    monkeypatch.setattr(RowOrder, "of", slow)
    result = solve(problem, device="cpu", devices=2, time_limit=0.2)
    assert result.status is Status.TIME_LIMIT
    assert result.solve_time >= result.setup_time >= 0.3 and "renumbered" in result.message
    assert primal_residual(problem, result) <= 1e-12  # the start, in the given numbering, on its spheres


def test_a_local_numbering_is_kept(monkeypatch):
    W = _geometric_graph(3000, seed=7)
    problem = maxcut_problem(W)
    order = RowOrder.of(problem, Settings(devices=2))
    local = RowOrder(order.order, order.halo_before, order.halo_after).apply(problem)
    with monkeypatch.context() as patched:  # the given order's halo is judged without building C
        patched.setattr(SDPProblem, "objective_matrix", lambda *args: pytest.fail("C was built"))
        assert RowOrder.of(local, Settings(devices=2)) is None
    forced = RowOrder.of(local, Settings.from_options(devices=2, shard_order="rcm"))
    assert forced is not None and forced.halo_after < 0.1


@pytest.mark.parametrize("k", [2, 3, 7])
def test_the_halo_share_from_coordinates_is_the_matrix_one(k, monkeypatch):
    monkeypatch.setattr(hostpasses, "CHUNK", 5)  # many chunks, marked by several threads
    graphs = [_graph(400, 6, seed=4), _banded_graph(400, seed=4), _geometric_graph(400, seed=4),
              sp.csr_array(sp.diags([np.ones(399), np.ones(399)], [-1, 1]))]
    for W in graphs:
        problem = maxcut_problem(W)
        expected = halo_share(problem.objective_matrix(0), k)
        assert coordinate_halo_share(problem.C_coords[0], 400, k) == expected
    assert 0 < expected < 0.1  # the path's halo: a row or two beside each cut


def test_the_order_check_predicts_from_breadth_first_levels(monkeypatch):
    from scipy.sparse.csgraph import shortest_path
    geometric = maxcut_problem(_geometric_graph(3000, seed=5)).objective_matrix(0)
    distances = shortest_path(abs(geometric), method="D", unweighted=True, indices=0)
    reached = distances[np.isfinite(distances)].astype(int)
    assert 2 * reached.size > 3000  # the search from row 0 reaches most rows: its levels make the prediction
    assert _predicted_halo_share(geometric, 2) == pytest.approx(2 * np.bincount(reached).max() * 2 / 3000)
    # a random graph: the search stops at the first level above the bound, and reverse Cuthill-McKee never runs
    problem = maxcut_problem(_graph(20000, 4, seed=3))
    random = problem.objective_matrix(0)
    assert 0.25 < _predicted_halo_share(random, 2, 0.25) < _predicted_halo_share(random, 2)
    monkeypatch.setattr(partition, "reverse_cuthill_mckee", None)
    assert RowOrder.of(problem, Settings(devices=2)) is None


def test_devices_setting_is_checked():
    for bad in (0, -1, 1.5, True, [], (0, 0), (-1,), "2"):
        with pytest.raises(ValueError, match="devices"):
            Settings(devices=bad)
    with pytest.raises(ValueError, match="shard_order"):
        Settings.from_options(shard_order="metis")
    assert Settings(devices=[1, 0]).devices == (1, 0) and Settings(devices=[1, 0]).device_count == 2
    assert Settings(devices=2, algorithm="alm_admm").device_count == 2  # phases I and II on split rows


def test_devices_solve_what_the_split_does_not_take_on_one_device_and_say_why():
    two_blocks = SDPProblem(np.ones(4), [sp.eye(2), sp.eye(2)],
                            [(np.arange(2), np.arange(2), np.arange(2), np.ones(2)),
                             (np.arange(2, 4), np.arange(2), np.arange(2), np.ones(2))])
    for problem, why in [(random_mixed_problem(0), "one PSD block"), (two_blocks, "one PSD block"),
                         (maxcut_problem(_graph(500, 4, seed=0)), "order up to 1000")]:
        for devices in (2, [1, 0]):
            result = solve(problem, device="cpu", devices=devices)
            assert why in result.device and "shards" not in result.device
            assert any(why in reason for reason in result.plan)
            alone = solve(problem, device="cpu")
            assert result.status is alone.status is Status.OPTIMAL
            assert result.primal_objective == pytest.approx(alone.primal_objective, rel=1e-9)


def test_one_device_named_is_the_single_device_path():
    problem = maxcut_problem(_graph(300, 4, seed=2))
    assert "shards" not in solve(problem, device="cpu", devices=1).device
    assert "shards" not in solve(problem, device="cpu", devices=[0]).device


def _two_gpus() -> bool:
    if not gpu_available():
        return False
    import cupy
    return cupy.cuda.runtime.getDeviceCount() >= 2


def _two_gpus_at(device: str, k: int, bounds):
    """GPUs 0 and 1, split at ``bounds`` (``_operators``' ``split_over``)."""
    return sharded_backend(device, (0, 1), bounds)


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
def test_a_solve_takes_the_nccl_communicators_an_earlier_one_left():
    """Two live backends never share communicators; a collected backend's are the next one's."""
    bounds = np.array([0, 5, 10])
    first = sharded_backend("gpu", (0, 1), bounds)
    second = sharded_backend("gpu", (0, 1), bounds)
    communicators = [b.shards.communicator for b in (first, second)]
    assert communicators[0] is not communicators[1]
    del first
    third = sharded_backend("gpu", (0, 1), bounds)
    assert third.shards.communicator is communicators[0]


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
@pytest.mark.parametrize("shuffled", [True, False])
def test_the_operator_on_two_gpus_matches_one_device(shuffled):
    """Through NCCL and peer copies: the constraint values gathered on the first GPU, the multipliers sent back."""
    problem = _weighted_diagonals(1100, seed=3, shuffled=shuffled)
    _check_operator_matches(problem, *_operators(problem, 2, "gpu", _two_gpus_at))


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
@pytest.mark.parametrize("kind", ["completion", "trace and edges"])
def test_the_block_operator_on_two_gpus_matches_one_device(kind):
    problem = _completion(600, 12000, seed=1) if kind == "completion" else _trace_and_edges(1300, seed=2)
    _check_block_operator_matches(problem, 2, "gpu", _two_gpus_at)


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
def test_two_gpus_solve_completion_like_one():
    problem = _completion(600, 20000, seed=1)
    one = solve(problem, device="gpu")
    two = solve(problem, device="gpu", devices=2)
    assert one.status is two.status is Status.OPTIMAL, two.summary()
    # each answer is certified to tol = 1e-5; the devices' sums differ in their order, so the two paths agree to
    # that tolerance, not to the last digits
    assert two.primal_objective == pytest.approx(one.primal_objective, rel=1e-5)
    assert "2 GPUs" in two.device and two.iterations["admm"] > 0


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
def test_two_gpus_match_one():
    problem = maxcut_problem(_graph(20000, 6, seed=3))
    one = solve(problem, device="gpu")
    two = solve(problem, device="gpu", devices=2)
    assert one.status is two.status is Status.OPTIMAL, two.summary()
    assert two.primal_objective == pytest.approx(one.primal_objective, rel=1e-5)
    assert "2 GPUs" in two.device
    # halo rows sent in single precision through NCCL: the send buffers must outlive the exchange
    rounded = solve(problem, device="gpu", devices=2, halo_precision="single")
    assert rounded.status is Status.OPTIMAL, rounded.summary()
    assert rounded.primal_objective == pytest.approx(one.primal_objective, rel=1e-5)
    early = [solve(problem, device="gpu", devices=d, max_iter=10) for d in (None, 2)]
    assert np.abs(early[0].factors[0] - early[1].factors[0]).max() <= 1e-9
