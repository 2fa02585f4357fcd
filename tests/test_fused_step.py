"""The fused Riemannian step (decision record "fused-riemannian-step"): the kernels of ``Capability.FUSED_STEP``
against the unfused formulas they replace, on random data in float64 and float32; the phase's iterates with and
without them; and each CUDA kernel against its NumPy twin (skipped without CuPy/GPU)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import Settings, Status, solve
from cvxpy_culorads.backends.backend import gpu_available
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import ALL_CAPABILITIES, Capability
from cvxpy_culorads.solver.run import Run

from support import random_maxcut

CPU = CpuKernels()
DTYPES = (np.float64, np.float32)
TOLERANCE = {np.float64: 1e-12, np.float32: 1e-6}  # relative, of the float64 sums rounded once into the dtype
ITERATES = {"double": 1e-9, "mixed": 1e-6}  # the objective after the same steps, fused against unfused


def _data(n, r, pairs, dtype, seed=0):
    rng = np.random.default_rng(seed)
    C = sp.random(n, n, density=4.0 / n, random_state=seed, format="csr")
    C = (C + C.T).tocsr()
    X = rng.standard_normal((n, r)).astype(dtype)
    squares = CPU.row_dots(X.astype(np.float64), X.astype(np.float64))
    vectors = [rng.standard_normal((n, r)).astype(dtype) for _ in range(1 + 2 * pairs)]
    return C, X, squares, vectors


def _close(actual, expected, dtype):
    scale = max(1.0, float(np.max(np.abs(expected))))
    assert np.max(np.abs(np.asarray(actual, np.float64) - expected)) <= TOLERANCE[dtype] * scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keep", (False, True))
def test_product_gradient_is_the_product_then_the_tangent_part(dtype, keep):
    C, R, squares, _ = _data(300, 7, 0, dtype)
    gradient = np.empty_like(R)
    product = np.empty_like(R) if keep else None
    objective = CPU.sphere_product_gradient(C, R, squares, -1.5, gradient, product)
    CR = (C @ R.astype(np.float64)).astype(dtype)
    assert objective == pytest.approx(CPU.inner(R, CR), rel=1e-12)
    _close(gradient, CPU.sphere_tangent(CR, R, squares, -1.5, np.empty_like(R)), dtype)
    if keep:
        assert np.array_equal(product, CR)
    # the gradient is tangent: each row orthogonal to the row of R
    assert np.max(np.abs(CPU.row_dots(gradient.astype(np.float64), R.astype(np.float64)))) <= \
        TOLERANCE[dtype] * 10 * float(np.abs(CR).max()) * float(np.abs(R).max()) * R.shape[1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pairs", (0, 1, 4))
def test_sphere_direction_is_the_two_loop_direction_projected(dtype, pairs):
    _, X, squares, vectors = _data(250, 5, pairs, dtype, seed=pairs)
    G, pair_list = vectors[0], [(vectors[1 + 2 * j], vectors[2 + 2 * j]) for j in range(pairs)]
    expected_products, products = np.empty(2), np.empty(2)
    wide = [v.astype(np.float64) for v in vectors]
    records = [CPU.lbfgs_pair(wide[1 + 2 * j], wide[2 + 2 * j]) for j in range(pairs)]
    unfused = CPU.lbfgs_direction(wide[0], records, expected_products)
    expected = CPU.sphere_tangent(unfused, X.astype(np.float64), squares, 1.0, np.empty_like(unfused))
    D = CPU.lbfgs_sphere_direction(G, pair_list, products, X, squares)
    assert D.dtype == dtype
    _close(D, expected, dtype)
    assert products == pytest.approx(expected_products, rel=1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sphere_direction_forms_the_newest_pair_in_place(dtype):
    _, X, squares, vectors = _data(200, 6, 3, dtype, seed=5)
    G = vectors[0]
    previous_point, previous_gradient = vectors[-2].copy(), vectors[-1].copy()
    pairs = [(vectors[1 + 2 * j], vectors[2 + 2 * j]) for j in range(3)]
    expected_pairs = [(s.copy(), y.copy()) for s, y in pairs[:-1]]
    expected_pairs.append(((X.astype(np.float64) - previous_point).astype(dtype),
                           (G.astype(np.float64) - previous_gradient).astype(dtype)))
    expected_products, products = np.empty(2), np.empty(2)
    expected = CPU.lbfgs_sphere_direction(G, expected_pairs, expected_products, X, squares)
    D = CPU.lbfgs_sphere_direction(G, pairs, products, X, squares, update=True)
    assert np.array_equal(pairs[-1][0], expected_pairs[-1][0]) and np.array_equal(pairs[-1][1], expected_pairs[-1][1])
    assert np.array_equal(D, expected) and np.array_equal(products, expected_products)


@pytest.mark.parametrize("dtype", DTYPES)
def test_directions_given_memory_write_the_same_values_there(dtype):
    # the phase hands the directions the memory of arrays it dropped (``out``)
    _, X, squares, vectors = _data(250, 5, 2, dtype, seed=7)
    G, pairs = vectors[0], [(vectors[1], vectors[2]), (vectors[3], vectors[4])]
    records = [CPU.lbfgs_pair(s, y) for s, y in pairs]
    for direction in (lambda products, out=None: CPU.lbfgs_sphere_direction(G, pairs, products, X, squares, out=out),
                      lambda products, out=None: CPU.lbfgs_direction(G, records, products, out)):
        out, products, expected_products = np.full_like(G, np.nan), np.empty(2), np.empty(2)
        expected = direction(expected_products)
        assert direction(products, out) is out
        assert np.array_equal(out, expected) and np.array_equal(products, expected_products)


def _unfused(monkeypatch):
    monkeypatch.setattr(CpuKernels, "capabilities", ALL_CAPABILITIES - {Capability.FUSED_STEP})


def _no_handover(monkeypatch):
    """The low-rank phases alone: the hand-over to the interior-point method is decided by the clock."""
    monkeypatch.setattr(Run, "handover_due", lambda run: False)


@pytest.mark.parametrize("precision", ("double", "mixed"))
def test_the_phase_takes_the_same_steps_fused_and_unfused(monkeypatch, precision):
    # a fixed seed and a step budget: the same step count and the same objective to rounding
    _no_handover(monkeypatch)
    problem, _ = random_maxcut(200, 0.05, seed=3)
    options = dict(device="cpu", rank=6, max_iter=60, precision=precision, algorithm="low_rank")
    fused = solve(problem, **options)
    with monkeypatch.context() as patch:
        _unfused(patch)
        unfused = solve(problem, **options)
    assert fused.iterations["riemannian"] == unfused.iterations["riemannian"] > 20
    # float32 iterates differ in their last bits (the fused direction rounds once, the unfused twice)
    assert fused.primal_objective == pytest.approx(unfused.primal_objective, rel=ITERATES[precision])


def test_the_split_path_and_low_rank_objectives_keep_the_unfused_step():
    assert Capability.FUSED_STEP in CPU.capabilities
    from cvxpy_culorads.distributed.kernels import ShardedKernels
    assert Capability.FUSED_STEP not in ShardedKernels.capabilities


# ---------------------------------------------------------------------------------------------------- GPU twins
gpu = pytest.mark.skipif(not gpu_available(), reason="no CuPy/GPU")


def _device(*arrays):
    import cupy
    return [cupy.asarray(a) for a in arrays]


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keep", (False, True))
@pytest.mark.parametrize("r", (1, 7, 56, 70, 300))
def test_gpu_product_gradient_matches_numpy(dtype, keep, r):
    import cupy
    import cupyx.scipy.sparse

    from cvxpy_culorads.backends.gpu_kernels import GpuKernels
    C, R, squares, _ = _data(3000, r, 0, dtype, seed=r)
    gradient, product = np.empty_like(R), np.empty_like(R) if keep else None
    expected = CPU.sphere_product_gradient(C, R, squares, 0.75, gradient, product)
    dR, dsquares = _device(R, squares)
    dgradient, dproduct = cupy.empty_like(dR), cupy.empty_like(dR) if keep else None
    objective = GpuKernels.sphere_product_gradient(cupyx.scipy.sparse.csr_matrix(C), dR, dsquares, 0.75, dgradient,
                                                   dproduct)
    assert objective == pytest.approx(expected, rel=1e-12 if dtype == np.float64 else 1e-6)
    _close(dgradient.get(), gradient.astype(np.float64), dtype)
    if keep:
        _close(dproduct.get(), product.astype(np.float64), dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_product_gradient_of_a_matrix_with_a_hub_row_matches_numpy(dtype):
    """A row joined to every vertex is split by the CSR product (``row_split``): the fused call takes that route."""
    import cupy
    import cupyx.scipy.sparse

    from cvxpy_culorads.backends.gpu_kernels import GpuKernels, row_split
    C, R, squares, _ = _data(3000, 24, 0, dtype, seed=5)
    hub = sp.coo_array((np.ones(2999), (np.zeros(2999, dtype=int), np.arange(1, 3000))), shape=(3000, 3000))
    C = sp.csr_array(C + hub + hub.T)
    gradient = np.empty_like(R)
    expected = CPU.sphere_product_gradient(C, R, squares, 0.75, gradient)
    matrix = cupyx.scipy.sparse.csr_matrix(C)
    assert row_split(matrix) is not None
    dR, dsquares = _device(R, squares)
    dgradient = cupy.empty_like(dR)
    objective = GpuKernels.sphere_product_gradient(matrix, dR, dsquares, 0.75, dgradient)
    assert objective == pytest.approx(expected, rel=1e-12 if dtype == np.float64 else 1e-6)
    _close(dgradient.get(), gradient.astype(np.float64), dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pairs", (0, 1, 4))
@pytest.mark.parametrize("update", (False, True))
def test_gpu_sphere_direction_matches_numpy(dtype, pairs, update):
    from cvxpy_culorads.backends.gpu_kernels import GpuKernels
    if update and not pairs:
        pytest.skip("an update needs a pair")
    _, X, squares, vectors = _data(4000, 56, pairs, dtype, seed=11 + pairs)
    host_vectors = [v.copy() for v in vectors]
    products = np.empty(2)
    expected = CPU.lbfgs_sphere_direction(host_vectors[0], [(host_vectors[1 + 2 * j], host_vectors[2 + 2 * j])
                                                            for j in range(pairs)], products, X, squares, update)
    device = _device(X, squares, *vectors)
    dX, dsquares, dvectors = device[0], device[1], device[2:]
    dproducts = _device(np.empty(2))[0]
    D = GpuKernels.lbfgs_sphere_direction(dvectors[0], [(dvectors[1 + 2 * j], dvectors[2 + 2 * j])
                                                        for j in range(pairs)], dproducts, dX, dsquares, update)
    assert D.dtype == dtype
    _close(D.get(), expected.astype(np.float64), dtype)
    assert dproducts.get() == pytest.approx(products, rel=1e-9)
    for host, dev in zip(host_vectors, dvectors):  # the updated pair too
        _close(dev.get(), host.astype(np.float64), dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_directions_given_memory_write_the_same_values_there(dtype):
    from cvxpy_culorads.backends.gpu_kernels import GpuKernels
    _, X, squares, vectors = _data(4000, 56, 2, dtype, seed=13)
    dX, dsquares, G, *rest = _device(X, squares, *vectors)
    pairs = [(rest[0], rest[1]), (rest[2], rest[3])]
    for direction in (lambda products, out=None: GpuKernels.lbfgs_sphere_direction(G, pairs, products, dX, dsquares,
                                                                                   out=out),
                      lambda products, out=None: GpuKernels.lbfgs_direction(G, pairs, products, out)):
        out, products, expected_products = _device(np.full(G.shape, np.nan, dtype), np.empty(2), np.empty(2))
        expected = direction(expected_products)
        assert direction(products, out) is out
        assert bool((out == expected).all()) and bool((products == expected_products).all())


@gpu
def test_gpu_phase_takes_the_same_steps_fused_and_unfused(monkeypatch):
    from cvxpy_culorads.backends.gpu_kernels import GpuKernels
    _no_handover(monkeypatch)
    problem, _ = random_maxcut(2000, 0.004, seed=3)
    options = dict(device="gpu", rank=8, max_iter=60, algorithm="low_rank")
    fused = solve(problem, **options)
    monkeypatch.setattr(GpuKernels, "capabilities", ALL_CAPABILITIES - {Capability.FUSED_STEP})
    unfused = solve(problem, **options)
    assert fused.iterations["riemannian"] == unfused.iterations["riemannian"] > 20
    assert fused.primal_objective == pytest.approx(unfused.primal_objective, rel=ITERATES["double"])


@gpu
def test_gpu_mixed_precision_reaches_the_same_certified_value_fused_and_unfused(monkeypatch):
    """In float32 the fused product sums in another order than the CSR kernel, and a last-bit difference of a stored
    entry changes the later steps, so the two runs are compared where they end: both certified, at the same value."""
    from cvxpy_culorads.backends.gpu_kernels import GpuKernels
    _no_handover(monkeypatch)
    problem, _ = random_maxcut(2000, 0.004, seed=3)
    options = dict(device="gpu", precision="mixed", algorithm="low_rank", time_limit=120)
    fused = solve(problem, **options)
    monkeypatch.setattr(GpuKernels, "capabilities", ALL_CAPABILITIES - {Capability.FUSED_STEP})
    unfused = solve(problem, **options)
    assert fused.status is unfused.status is Status.OPTIMAL
    assert fused.primal_objective == pytest.approx(unfused.primal_objective, rel=2 * Settings().tol)

