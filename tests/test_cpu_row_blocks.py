"""The CPU kernels that work in row blocks (``cpu_kernels._map_rows``) against plain NumPy formulas on whole arrays,
on factors whose rows span several blocks with a short last one, in float64 and float32: the blocks' borders, their
scratch memory and the threads that take them change nothing beyond rounding."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads.backends import cpu_kernels
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import lbfgs_coefficients

K = CpuKernels()
DTYPES = (np.float64, np.float32)
TOLERANCE = {np.float64: 1e-12, np.float32: 1e-6}  # relative, of the float64 formula rounded once into the dtype
N, R = 3001, 47  # 141,047 entries: three blocks of _BLOCK = 2^16 entries, the last one short


@pytest.fixture(params=["blocks", "rows"])
def block(request, monkeypatch):
    """The kernels' own block size (a few blocks here), or blocks of a single row of the factors (thousands)."""
    if request.param == "rows":
        monkeypatch.setattr(cpu_kernels, "_BLOCK", R)
    return request.param


def _random(dtype, count, seed=0, n=N):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, R)).astype(dtype) for _ in range(count)]


def _wide(x):
    return np.asarray(x, dtype=np.float64)


def _close(actual, expected, dtype):
    assert actual.dtype == dtype
    scale = max(1.0, float(np.max(np.abs(expected))))
    assert np.max(np.abs(_wide(actual) - expected)) <= TOLERANCE[dtype] * scale


def _tangent(Z, X, squares):
    return Z - ((Z * X).sum(1) / squares)[:, None] * X


def test_there_are_several_blocks_and_a_short_last_one():
    rows = cpu_kernels._BLOCK // R
    assert N // rows >= 2 and N % rows


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keep", (False, True))
@pytest.mark.parametrize("scipy_kernel", (True, False))
def test_product_gradient(dtype, keep, scipy_kernel, block, monkeypatch):
    if not scipy_kernel:  # the public product, where SciPy no longer has its private CSR kernel
        monkeypatch.setattr(cpu_kernels, "_csr_matvecs", None)
    (X,) = _random(dtype, 1)
    C = sp.random(N, N, density=5.0 / N, random_state=1, format="csr")
    C = (C + C.T).tocsr()
    squares = (_wide(X) ** 2).sum(1)
    gradient, product = np.empty_like(X), np.empty_like(X) if keep else None
    objective = K.sphere_product_gradient(C, X, squares, -1.5, gradient, product)
    CR = _wide((C @ _wide(X)).astype(dtype))  # summed in float64, rounded once to the factor's type
    assert objective == pytest.approx(float((CR * _wide(X)).sum()), rel=1e-12)
    _close(gradient, -1.5 * _tangent(CR, _wide(X), squares), dtype)
    if keep:
        assert np.array_equal(product, CR.astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("update", (False, True))
def test_sphere_direction(dtype, update, block):
    G, X, *pair_arrays = _random(dtype, 2 + 2 * 3, seed=2)
    squares = (_wide(X) ** 2).sum(1)
    pairs = [(pair_arrays[2 * j], pair_arrays[2 * j + 1]) for j in range(3)]
    vectors = [_wide(G)] + [_wide(v) for pair in pairs for v in pair]
    if update:  # the newest pair holds the previous point and gradient
        vectors[-2] = _wide((_wide(X) - vectors[-2]).astype(dtype))
        vectors[-1] = _wide((_wide(G) - vectors[-1]).astype(dtype))
    stacked = np.stack([v.reshape(-1) for v in vectors])
    coefficients, gg, dg = lbfgs_coefficients(stacked @ stacked.T)
    combined = np.tensordot(coefficients, np.stack(vectors), axes=1)
    products = np.empty(2)
    D = K.lbfgs_sphere_direction(G, pairs, products, X, squares, update=update)
    _close(D, _tangent(combined, _wide(X), squares), dtype)
    assert products == pytest.approx([gg, dg], rel=1e-10)
    if update:
        assert np.array_equal(_wide(pairs[-1][0]), vectors[-2]) and np.array_equal(_wide(pairs[-1][1]), vectors[-1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_retraction_with_a_zero_row(dtype, block):
    X, D = _random(dtype, 2, seed=3)
    D[7] = -X[7] / 0.5  # x + tau d = 0 on row 7: it becomes roots_7 e_1
    roots = np.random.default_rng(4).uniform(0.5, 2.0, N)
    out = K.sphere_retract(X, D, 0.5, roots, np.empty_like(X))
    moved = _wide(X) + 0.5 * _wide(D)
    norms = np.linalg.norm(moved, axis=1)
    moved[7], norms[7] = np.eye(R)[0], 1.0
    _close(out, moved * (roots / norms)[:, None], dtype)
    wide = K.sphere_retract(X, X, 0.0, roots, np.empty(X.shape))  # projected into float64
    _close(wide, _wide(X) * (roots / np.linalg.norm(_wide(X), axis=1))[:, None], np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tangent_in_place(dtype, block):
    Z, X = _random(dtype, 2, seed=5)
    squares = (_wide(X) ** 2).sum(1)
    expected = 2.0 * _tangent(_wide(Z), _wide(X), squares)
    assert K.sphere_tangent(Z, X, squares, 2.0, Z) is Z
    _close(Z, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_decrease(dtype, block):
    R_new, R, CR_new, CR = (_wide(v) for v in _random(dtype, 4, seed=6))
    squares = np.random.default_rng(7).uniform(0.5, 2.0, N)
    got = K.sphere_decrease(*(v.astype(dtype) for v in (R_new, R, CR_new, CR)), squares)
    projected = (R_new * CR_new).sum(1) @ (2.0 - (R_new ** 2).sum(1) / squares)
    kept = (R * CR).sum(1) @ (2.0 - (R ** 2).sum(1) / squares)
    decrease = projected - kept + (R_new * CR).sum() - (R * CR_new).sum()
    assert got == pytest.approx([projected, decrease, (CR_new ** 2).sum()], rel=1e-11, abs=1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ((N, R), (N * R,)))
def test_scale_add_combination_and_gram(dtype, shape, block):
    x, y, z = (v.reshape(shape) for v in _random(dtype, 3, seed=8))
    expected = -0.3 * _wide(x) + 2.7 * _wide(y)
    coefficients = np.array([0.5, -1.25, 2.0])
    _close(K.lbfgs_combine([x, y, z], coefficients), 0.5 * _wide(x) - 1.25 * _wide(y) + 2.0 * _wide(z), dtype)
    stacked = np.stack([_wide(v).reshape(-1) for v in (x, y, z)])
    gram = stacked @ stacked.T
    assert np.max(np.abs(K.gram([x, y, z]) - gram)) <= 1e-13 * np.max(gram)  # float64 sums
    assert K.scale_add(x, -0.3, y, 2.7) is x
    _close(x, expected, dtype)
