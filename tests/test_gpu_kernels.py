"""GpuKernels (CuPy RawKernels) against the NumPy reference CpuKernels; skipped where no GPU is usable.

Fresh random data for every case, poisoned (NaN) outputs so that an unwritten element fails, and a
relative error ||gpu - cpu|| / ||cpu|| <= 1e-12 in float64.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

cp = pytest.importorskip("cupy")
try:
    _NDEV = cp.cuda.runtime.getDeviceCount()
except Exception as exc:  # CuPy installed but no driver/device
    pytest.skip(f"no CUDA device ({exc.__class__.__name__}: {exc})", allow_module_level=True)
if _NDEV < 1:
    pytest.skip("no CUDA device", allow_module_level=True)
import cupyx.scipy.sparse  # noqa: E402

from cvxpy_culorads import SDPProblem, Settings, solve  # noqa: E402
from cvxpy_culorads.backends import gpu_kernels as gk  # noqa: E402
from cvxpy_culorads.backends.cpu_kernels import CpuKernels  # noqa: E402
from cvxpy_culorads.backends.gpu_kernels import GpuKernels  # noqa: E402
from cvxpy_culorads.backends.kernels import Kernels, check_capabilities  # noqa: E402


def test_the_gpu_kernel_set_meets_the_contract_and_refuses_more_lbfgs_pairs_than_it_takes():
    assert isinstance(GpuKernels(), Kernels)
    with pytest.raises(ValueError, match="lbfgs_memory must be at most 4"):
        check_capabilities(GpuKernels(), Settings.from_options(lbfgs_memory=5), "gpu")
    problem = SDPProblem([1.0], [None], [([0], [0], [0], [1.0])], block_sizes=[2])
    with pytest.raises(ValueError, match="lbfgs_memory"):
        solve(problem, device="gpu", lbfgs_memory=8)


RTOL = 1e-12
RANKS = [1, 2, 3, 5, 8, 17, 32, 33, 64, 100, 257]


def _rel(gpu, ref):
    gpu = cp.asnumpy(gpu)
    assert gpu.shape == ref.shape
    assert np.all(np.isfinite(gpu)), "unwritten (NaN-poisoned) or non-finite output"
    den = np.linalg.norm(ref)
    assert den > 0
    return np.linalg.norm(gpu - ref) / den


def _sym_pattern(rng, n, density):
    """Lower-triangle (row >= col) positions of a random symmetric pattern with its full diagonal, CSR order."""
    A = scipy.sparse.random(n, n, density=density, random_state=rng, format="csr")
    S = (A + A.T + scipy.sparse.identity(n)).tocoo()
    keep = S.row >= S.col
    rows, cols = S.row[keep], S.col[keep]
    order = np.lexsort((cols, rows))
    return rows[order].astype(np.int64), cols[order].astype(np.int64)


def _poison(shape):
    return cp.full(shape, cp.nan, dtype=cp.float64)


SIZES = [(1, 1.0), (7, 0.5), (300, 0.05), (4000, 0.002)]


@pytest.mark.parametrize("n,density", SIZES)
@pytest.mark.parametrize("r", RANKS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_sym_sample(n, density, r, index_dtype):
    rng = np.random.default_rng(1000 * n + r)
    rows, cols = _sym_pattern(rng, n, density)
    if index_dtype is np.int32 and n == 300:  # the kernels must not rely on the CSR order
        perm = rng.permutation(rows.size)
        rows, cols = rows[perm], cols[perm]
    U = rng.standard_normal((n, r))
    V = rng.standard_normal((n, r))
    grows, gcols = cp.asarray(rows, dtype=index_dtype), cp.asarray(cols, dtype=index_dtype)
    for Vh, Vd in ((None, None), (V, cp.asarray(V))):
        ref = CpuKernels.sym_sample(rows, cols, U, Vh)
        out = _poison(rows.size)
        got = GpuKernels.sym_sample(grows, gcols, cp.asarray(U), Vd, out=out)
        assert got is out
        assert _rel(got, ref) <= RTOL
        fresh = GpuKernels.sym_sample(grows, gcols, cp.asarray(U), Vd)  # allocates its own output
        assert _rel(fresh, ref) <= RTOL


@pytest.mark.parametrize("n,density", SIZES)
@pytest.mark.parametrize("r", RANKS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_sym_sample_pair(n, density, r, index_dtype):
    rng = np.random.default_rng(7 + 1000 * n + r)
    rows, cols = _sym_pattern(rng, n, density)
    R = rng.standard_normal((n, r))
    D = rng.standard_normal((n, r))
    ref = CpuKernels.sym_sample_pair(rows, cols, R, D)
    out = _poison((rows.size, 2))
    got = GpuKernels.sym_sample_pair(cp.asarray(rows, dtype=index_dtype), cp.asarray(cols, dtype=index_dtype),
                                     cp.asarray(R), cp.asarray(D), out=out)
    assert got is out
    assert _rel(got[:, 0], ref[:, 0]) <= RTOL
    assert _rel(got[:, 1], ref[:, 1]) <= RTOL


@pytest.mark.parametrize("m,n,density", [(1, 1, 1.0), (9, 9, 0.4), (500, 500, 0.02), (3000, 3000, 0.005),
                                         (200, 350, 0.05), (2000, 2000, 0.0003)])
@pytest.mark.parametrize("r", RANKS)
def test_csr_matmul(m, n, density, r):
    rng = np.random.default_rng(11 + 1000 * n + r)
    A = scipy.sparse.random(m, n, density=density, random_state=rng, format="csr")
    if m > 1:  # a long row (several batches of 32 (column, value) pairs) and empty rows
        A = A.tolil()
        A[0, :] = rng.standard_normal(n)
        A[m // 2, :] = 0.0
        A = A.tocsr()
        A.eliminate_zeros()
    V = rng.standard_normal((n, r))
    ref = CpuKernels.csr_matmul(A, V)
    G = cupyx.scipy.sparse.csr_matrix(A)
    out = _poison((m, r))
    got = GpuKernels.csr_matmul(G, cp.asarray(V), out=out)
    assert got is out
    assert _rel(got, ref) <= RTOL
    assert _rel(GpuKernels.csr_matmul(G, cp.asarray(V)), ref) <= RTOL
    W = rng.standard_normal((m, r))
    combined = CpuKernels.csr_matmul(A, V, alpha=-0.5, addend=W, beta=3.0)
    assert np.allclose(combined, -0.5 * (A @ V) + 3.0 * W)
    got = GpuKernels.csr_matmul(G, cp.asarray(V), out=_poison((m, r)), alpha=-0.5, addend=cp.asarray(W), beta=3.0)
    assert _rel(got, combined) <= RTOL


@pytest.mark.parametrize("r", [1, 3, 8, 17, 32, 64, 100])
def test_tuning_knobs(r):
    """Every value of the kernels' tuning knobs computes the same function (tails: N not a multiple of E)."""
    rng = np.random.default_rng(40 + r)
    n = 700
    rows, cols = _sym_pattern(rng, n, 0.01)
    if rows.size % 8 == 0:
        rows, cols = rows[:-1], cols[:-1]
    U, V = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    g = [cp.asarray(x) for x in (rows.astype(np.int32), cols.astype(np.int32), U, V)]
    ref_uu = CpuKernels.sym_sample(rows, cols, U, None)
    ref_uv = CpuKernels.sym_sample(rows, cols, U, V)
    ref_pair = CpuKernels.sym_sample_pair(rows, cols, U, V)
    # 64-bit offsets are chosen automatically only past 2^31 elements: force them here
    for kw in [dict(entries=e) for e in gk._KNOBS["entries"]] + [dict(wide=True)]:
        assert _rel(gk.sym_sample(g[0], g[1], g[2], None, out=_poison(rows.size), **kw), ref_uu) <= RTOL, kw
        assert _rel(gk.sym_sample(g[0], g[1], g[2], g[3], out=_poison(rows.size), **kw), ref_uv) <= RTOL, kw
        got = gk.sym_sample_pair(g[0], g[1], g[2], g[3], out=_poison((rows.size, 2)), **kw)
        assert _rel(got, ref_pair) <= RTOL, kw
    A = scipy.sparse.random(n, n, density=0.02, random_state=rng, format="lil")
    A[3, :] = rng.standard_normal(n)  # a row of 700 entries: many batches
    A[5, :200] = rng.standard_normal(200)
    A = A.tocsr()
    G = cupyx.scipy.sparse.csr_matrix(A)
    knobs = [dict(loads=x) for x in gk._KNOBS["loads"]] + [dict(rows=x) for x in gk._KNOBS["rows"]] + [dict(wide=True)]
    for kw in knobs:
        assert _rel(gk.csr_matmul(G, g[3], out=_poison((n, r)), **kw), A @ V) <= RTOL, kw
    with pytest.raises(ValueError):
        gk.sym_sample(g[0], g[1], g[2], None, entries=3)


@pytest.mark.parametrize("r", [1, 5, 40])
def test_long_rows_are_split_into_pieces_and_summed_back(r):
    """A row of 2e5 entries (782 pieces, whose sum is itself split) and one of 600 among short rows: the split
    product equals SciPy's, with and without an addend, for new values on the same pattern, and unsplit inside a
    CUDA graph capture (no synchronisation allowed there)."""
    rng = np.random.default_rng(70 + r)
    n = 200_000
    A = scipy.sparse.random(50, n, density=2e-4, random_state=rng, format="lil")
    A[1, :] = rng.standard_normal(n)
    A[7, :600] = rng.standard_normal(600)
    A = A.tocsr()
    V, W = rng.standard_normal((n, r)), rng.standard_normal((50, r))
    G, Vd = cupyx.scipy.sparse.csr_matrix(A), cp.asarray(V)
    split = gk.row_split(G)
    assert cp.asnumpy(split.rows).tolist() == [1, 7]
    assert split.piece_starts.size == -(-n // gk.ROW_PIECE) + 3
    assert gk.row_split(split.gather) is not None  # the 782 pieces' sum is split in turn
    assert _rel(GpuKernels.csr_matmul(G, Vd, out=_poison((50, r))), A @ V) <= RTOL
    got = GpuKernels.csr_matmul(G, Vd, out=_poison((50, r)), alpha=-0.5, addend=cp.asarray(W), beta=3.0)
    assert _rel(got, -0.5 * (A @ V) + 3.0 * W) <= RTOL
    assert _rel(GpuKernels.csr_matmul(G, Vd[:, 0]), A @ V[:, 0]) <= RTOL
    A.data = rng.standard_normal(A.nnz)
    G.data = cp.asarray(A.data)
    assert gk.row_split(G) is split
    assert _rel(GpuKernels.csr_matmul(G, Vd), A @ V) <= RTOL

    fresh, out = cupyx.scipy.sparse.csr_matrix(A), cp.empty((50, r))
    recording = gk.Recording.of(lambda: GpuKernels.csr_matmul(fresh, Vd, out=out))
    assert recording is not None and getattr(fresh, gk._PATTERN_ATTRIBUTE, None) is None
    out.fill(cp.nan)
    recording.launch()
    assert _rel(out, A @ V) <= RTOL
    GpuKernels.prepare_products(fresh)
    assert getattr(fresh, gk._PATTERN_ATTRIBUTE).split is not None


def test_csr_matmul_vector_and_noncontiguous():
    rng = np.random.default_rng(3)
    A = scipy.sparse.random(400, 400, density=0.03, random_state=rng, format="csr")
    G = cupyx.scipy.sparse.csr_matrix(A)
    v = rng.standard_normal(400)
    got = GpuKernels.csr_matmul(G, cp.asarray(v))
    assert got.shape == (400,)
    assert _rel(got, A @ v) <= RTOL
    V = rng.standard_normal((400, 12))
    Vf = cp.asfortranarray(cp.asarray(V))  # converted to C order internally
    assert _rel(GpuKernels.csr_matmul(G, Vf), A @ V) <= RTOL


@pytest.mark.parametrize("r", [1, 5, 33, 65])
def test_csr_matmul_reads_a_single_precision_factor(r):
    # the halo part of a sharded product multiplies rows received in single precision, accumulating in double
    rng = np.random.default_rng(r)
    A = scipy.sparse.random(3000, 2500, density=0.004, random_state=rng, format="csr").tolil()
    A[7, :] = rng.standard_normal(2500)  # a row long enough to be split
    A = A.tocsr()
    V = rng.standard_normal((2500, r)).astype(np.float32)
    W = rng.standard_normal((3000, r))
    G = cupyx.scipy.sparse.csr_matrix(A)
    exact = A @ V.astype(np.float64)
    assert _rel(GpuKernels.csr_matmul(G, cp.asarray(V), out=_poison((3000, r))), exact) <= RTOL
    got = GpuKernels.csr_matmul(G, cp.asarray(V), out=_poison((3000, r)), alpha=2.0, addend=cp.asarray(W), beta=1.0)
    assert _rel(got, 2.0 * exact + W) <= RTOL


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(1000,), (1000, 7)])
def test_gather_rows(dtype, shape):
    rng = np.random.default_rng(len(shape))
    V = rng.standard_normal(shape)
    index = np.sort(rng.choice(shape[0], 300, replace=False))
    got = GpuKernels.gather_rows(cp.asarray(V), cp.asarray(index), dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(cp.asnumpy(got), CpuKernels.gather_rows(V, index, dtype))
    assert GpuKernels.gather_rows(cp.asarray(V), cp.asarray(index[:0]), dtype).shape == (0,) + shape[1:]


def test_large_rows_and_entries():
    """A bigger case that spans many blocks: n = 200k, ~2M nonzeros, r = 8 and 24."""
    rng = np.random.default_rng(5)
    n = 200_000
    A = scipy.sparse.random(n, n, density=5e-5, random_state=rng, format="csr")
    S = (A + A.T).tocsr()
    lower = scipy.sparse.tril(S, format="coo")
    rows, cols = lower.row.astype(np.int32), lower.col.astype(np.int32)
    G = cupyx.scipy.sparse.csr_matrix(S)
    for r in (8, 24):
        U = rng.standard_normal((n, r))
        D = rng.standard_normal((n, r))
        assert _rel(GpuKernels.csr_matmul(G, cp.asarray(U), out=_poison((n, r))), S @ U) <= RTOL
        gr, gc = cp.asarray(rows), cp.asarray(cols)
        assert _rel(GpuKernels.sym_sample(gr, gc, cp.asarray(U), None, out=_poison(rows.size)),
                    CpuKernels.sym_sample(rows, cols, U, None)) <= RTOL
        ref = CpuKernels.sym_sample_pair(rows, cols, U, D)
        got = GpuKernels.sym_sample_pair(gr, gc, cp.asarray(U), cp.asarray(D), out=_poison((rows.size, 2)))
        assert _rel(got, ref) <= RTOL


def test_empty_pattern_and_zero_rank():
    U = cp.asarray(np.random.default_rng(0).standard_normal((5, 3)))
    e32 = cp.zeros(0, dtype=cp.int32)
    assert GpuKernels.sym_sample(e32, e32, U, None).shape == (0,)
    assert GpuKernels.sym_sample(e32, e32, U, U).shape == (0,)
    assert GpuKernels.sym_sample_pair(e32, e32, U, U).shape == (0, 2)
    rows = cp.asarray([0, 1, 4], dtype=cp.int32)
    z = cp.zeros((5, 0))
    assert cp.all(GpuKernels.sym_sample(rows, rows, z, None, out=_poison(3)) == 0)
    assert cp.all(GpuKernels.sym_sample_pair(rows, rows, z, z, out=_poison((3, 2))) == 0)
    empty = cupyx.scipy.sparse.csr_matrix((0, 5))
    assert GpuKernels.csr_matmul(empty, U).shape == (0, 3)
    allzero = cupyx.scipy.sparse.csr_matrix((6, 5))  # rows with no entries at all: output must be written
    got = GpuKernels.csr_matmul(allzero, U, out=_poison((6, 3)))
    assert cp.all(got == 0)


def test_bad_out_is_rejected():
    U = cp.ones((4, 2))
    rows = cp.asarray([0, 3], dtype=cp.int32)
    with pytest.raises(ValueError):
        GpuKernels.sym_sample(rows, rows, U, None, out=cp.empty(3))
    with pytest.raises(ValueError):
        GpuKernels.sym_sample_pair(rows, rows, U, U, out=cp.empty((2, 2), order="F"))
    with pytest.raises(ValueError):
        GpuKernels.csr_matmul(cupyx.scipy.sparse.csr_matrix((4, 5)), U)


def test_no_host_sync():
    """The kernels only enqueue work: they run inside CUDA-graph capture (which forbids synchronisation)."""
    rng = np.random.default_rng(9)
    n, r = 1000, 6
    A = scipy.sparse.random(n, n, density=0.01, random_state=rng, format="csr")
    S = (A + A.T).tocsr()
    lower = scipy.sparse.tril(S, format="coo")
    rows, cols = cp.asarray(lower.row.astype(np.int32)), cp.asarray(lower.col.astype(np.int32))
    G = cupyx.scipy.sparse.csr_matrix(S)
    U = cp.asarray(rng.standard_normal((n, r)))
    D = cp.asarray(rng.standard_normal((n, r)))
    out1, out2, out3 = _poison(rows.size), _poison((rows.size, 2)), _poison((n, r))

    def enqueue():
        GpuKernels.sym_sample(rows, cols, U, None, out=out1)
        GpuKernels.sym_sample_pair(rows, cols, U, D, out=out2)
        GpuKernels.csr_matmul(G, U, out=out3)

    enqueue()  # compiles and loads the kernels outside the capture
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        enqueue()
        graph = stream.end_capture()
        for o in (out1, out2, out3):
            o.fill(cp.nan)
        graph.launch(stream)
    stream.synchronize()
    Uh, Dh = cp.asnumpy(U), cp.asnumpy(D)
    rh, ch = cp.asnumpy(rows), cp.asnumpy(cols)
    assert _rel(out1, CpuKernels.sym_sample(rh, ch, Uh, None)) <= RTOL
    assert _rel(out2, CpuKernels.sym_sample_pair(rh, ch, Uh, Dh)) <= RTOL
    assert _rel(out3, S @ Uh) <= RTOL


# ---------------------------------------------------------------- fused vector algebra of the phases
@pytest.mark.parametrize("npairs", [0, 1, 2, 4])
@pytest.mark.parametrize("shape", [(7, 3), (3001, 13)])
def test_lbfgs_direction(npairs, shape):
    rng = np.random.default_rng(npairs + shape[0])
    G = rng.standard_normal(shape)
    pairs = [(rng.standard_normal(shape), rng.standard_normal(shape)) for _ in range(npairs)]
    if npairs >= 2:
        pairs[0] = (pairs[0][0], -pairs[0][0])  # no curvature: weight zero
    products = np.empty(2)
    ref = CpuKernels.lbfgs_direction(G, [CpuKernels.lbfgs_pair(s, y) for s, y in pairs], products)
    got_products = _poison(2)
    got = GpuKernels.lbfgs_direction(cp.asarray(G), [GpuKernels.lbfgs_pair(cp.asarray(s), cp.asarray(y))
                                                     for s, y in pairs], got_products)
    assert _rel(got, ref) <= RTOL
    assert _rel(got_products, products) <= RTOL


@pytest.mark.parametrize("count", [1, 5, 9])
def test_lbfgs_gram_and_combination(count):
    # a shard's parts of the sharded L-BFGS (sharding.ShardedKernels.lbfgs_direction)
    rng = np.random.default_rng(count)
    vectors = [rng.standard_normal((3001, 13)) for _ in range(count)]
    coefficients = rng.standard_normal(count)
    ref = CpuKernels.lbfgs_gram(vectors, np.empty(count * (count + 1) // 2))
    got = GpuKernels.lbfgs_gram([cp.asarray(v) for v in vectors], _poison(count * (count + 1) // 2))
    assert _rel(got, ref) <= RTOL
    got = GpuKernels.lbfgs_combine([cp.asarray(v) for v in vectors], cp.asarray(coefficients))
    assert _rel(got, CpuKernels.lbfgs_combine(vectors, coefficients)) <= RTOL
    if count >= 5:  # the recursion on the summed triangle, on the device; a pair without curvature gets weight zero
        vectors[2] = -vectors[1]
    upper = CpuKernels.lbfgs_gram(vectors, np.empty(count * (count + 1) // 2))
    products, got_products = np.empty(2), _poison(2)
    ref = CpuKernels.lbfgs_recursion(upper, count, products)
    assert _rel(GpuKernels.lbfgs_recursion(cp.asarray(upper), count, got_products), ref) <= RTOL
    assert _rel(got_products, products) <= RTOL


@pytest.mark.parametrize("m, n, r", [(5, 3, 1), (1000, 7000, 10), (100000, 10, 3)])
def test_line_search_products(m, n, r):
    rng = np.random.default_rng(m)
    AW = rng.standard_normal((m, 2))
    Avals, b, lam = (rng.standard_normal(m) for _ in range(3))
    R, D, CD = (rng.standard_normal((n, r)) for _ in range(3))
    ref = CpuKernels.line_search_products(AW, Avals, b, lam, 0.7, R, D, CD, np.empty(9))
    for _ in range(2):  # the second launch checks that the first left its ticket at zero
        got = GpuKernels.line_search_products(*(cp.asarray(x) for x in (AW, Avals, b, lam)), 0.7,
                                              *(cp.asarray(x) for x in (R, D, CD)), _poison(9))
        assert np.max(np.abs(cp.asnumpy(got) - ref) / np.abs(ref)) <= 1e-11


@pytest.mark.parametrize("m, n, r", [(5, 3, 1), (1000, 7000, 10), (100000, 10, 3)])
def test_sphere_line_search_products(m, n, r):
    rng = np.random.default_rng(m + 1)
    AW = rng.standard_normal((m, 2))
    Avals, b, lam = (rng.standard_normal(m) for _ in range(3))
    R, D, CD = (rng.standard_normal((n, r)) for _ in range(3))
    ref = CpuKernels.sphere_line_search_products(AW, Avals, b, lam, R, D, CD, np.empty(28))
    for _ in range(2):  # the second launch checks that the first left its ticket at zero
        got = GpuKernels.sphere_line_search_products(*(cp.asarray(x) for x in (AW, Avals, b, lam, R, D, CD)),
                                                     _poison(28))
        assert np.max(np.abs(cp.asnumpy(got) - ref) / np.abs(ref)) <= 1e-11


@pytest.mark.parametrize("with_multiplier", [False, True])
def test_remove_normal_matches_the_numpy_projection(with_multiplier):
    rng = np.random.default_rng(5)
    Z, R, lam = rng.standard_normal((3001, 7)), rng.standard_normal((3001, 7)), rng.standard_normal(4)
    size = float(np.vdot(R, R))  # R on the sphere: the result is orthogonal to it
    gZ, glam, gnormal = cp.asarray(Z), cp.asarray(lam), _poison(1)
    normal = np.empty(1)
    ref = CpuKernels.remove_normal(Z.copy(), R, size, normal, lam[2:3] if with_multiplier else None, 0.3)
    got = GpuKernels.remove_normal(gZ, cp.asarray(R), size, gnormal, glam[2:3] if with_multiplier else None, 0.3)
    assert got is gZ  # in place
    assert _rel(got, ref) <= RTOL
    assert abs(float(gnormal[0]) - normal[0]) <= 1e-12 * abs(normal[0])
    np.testing.assert_allclose(cp.asnumpy(glam), lam, rtol=1e-12, atol=0)  # lam[2] moved on both, or on neither
    assert abs(float(cp.vdot(got, cp.asarray(R)))) <= 1e-10 * np.linalg.norm(Z) * np.linalg.norm(R)  # tangent


def test_elementwise_updates_are_bitwise_the_numpy_formulas():
    rng = np.random.default_rng(3)
    R, D, Avals, AW = rng.standard_normal((50, 4)), rng.standard_normal((50, 4)), rng.standard_normal(9), \
        rng.standard_normal((9, 2))
    gR, gA = cp.asarray(R), cp.asarray(Avals)
    step = GpuKernels.advance(gR, cp.asarray(D), 0.37, gA, cp.asarray(AW))
    ref_step = CpuKernels.advance(R, D, 0.37, Avals, AW)
    for got, ref in ((step, ref_step), (gR, R), (gA, Avals)):
        assert np.array_equal(cp.asnumpy(got), ref)
    b, lam = rng.standard_normal(9), rng.standard_normal(9)
    assert np.array_equal(cp.asnumpy(GpuKernels.shifted_residual(gA, cp.asarray(b), cp.asarray(lam), 3.3)),
                          CpuKernels.shifted_residual(Avals, b, lam, 3.3))
    t, gather = rng.standard_normal(20), rng.integers(0, 20, 45).astype(np.int32)
    for weight in (1.0, -2.0):
        got = GpuKernels.gather_values(cp.asarray(t), cp.asarray(gather), weight)
        assert np.array_equal(cp.asnumpy(got), CpuKernels.gather_values(t, gather, weight))
    x, y = rng.standard_normal((30, 3)), rng.standard_normal((30, 3))
    gx = cp.asarray(x)
    GpuKernels.scale_add(gx, -0.3, cp.asarray(y), 2.7)
    assert np.array_equal(cp.asnumpy(gx), CpuKernels.scale_add(x, -0.3, y, 2.7))
    x, r, p, Ap = (rng.standard_normal((30, 3)) for _ in range(4))
    gx, gr, gp = cp.asarray(x), cp.asarray(r), cp.asarray(p)
    rr, pAp, rr_new = np.float64(2.5), np.float64(1.3), np.float64(0.4)
    GpuKernels.cg_step(gx, gr, gp, cp.asarray(Ap), cp.asarray(rr), cp.asarray(pAp))
    CpuKernels.cg_step(x, r, p, Ap, rr, pAp)
    GpuKernels.cg_direction(gp, gr, cp.asarray(rr_new), cp.asarray(rr))
    CpuKernels.cg_direction(p, r, rr_new, rr)
    for got, ref in ((gx, x), (gr, r), (gp, p)):
        assert np.array_equal(cp.asnumpy(got), ref)


@pytest.mark.parametrize("deflated", [False, True])
def test_lanczos_extend_matches_the_numpy_step(deflated):
    rng = np.random.default_rng(4)
    n, steps, q = 700, 12, 3
    basis = np.full((steps + 1, n), np.nan)
    Q = np.linalg.qr(rng.standard_normal((n, q)))[0]
    start = rng.standard_normal(n)
    basis[0] = (start - Q @ (Q.T @ start)) if deflated else start
    basis[0] /= np.linalg.norm(basis[0])
    matrix = rng.standard_normal((n, n))
    matrix += matrix.T

    def projector(Qx):
        def complement(w):
            if deflated:
                w -= Qx @ (Qx.T @ w)
            return w
        return complement

    cpu_complement, gpu_complement = projector(Q), projector(cp.asarray(Q))
    projection, g_basis, g_projection = np.zeros((steps + 1, steps)), cp.asarray(basis), cp.zeros((steps + 1, steps))
    for j in range(steps):
        CpuKernels.lanczos_extend(basis, j, cpu_complement(matrix @ basis[j]), projection, cpu_complement)
        GpuKernels.lanczos_extend(g_basis, j, gpu_complement(cp.asarray(matrix) @ g_basis[j]), g_projection,
                                  gpu_complement)
    assert _rel(cp.asnumpy(g_projection), projection) <= 1e-11
    assert _rel(cp.asnumpy(g_basis), basis) <= 1e-11
    # the basis is orthonormal (and orthogonal to Q when deflated): the step is a Lanczos step, not just a twin
    assert np.abs(basis @ basis.T - np.eye(steps + 1)).max() <= 1e-12
    if deflated:
        assert np.abs(basis @ Q).max() <= 1e-12


@pytest.mark.parametrize("k", [1, 5, 61])
def test_basis_passes_match_the_numpy_ones(k):
    # the sharded Lanczos step's pieces: a part of a Gram-Schmidt pass on each shard
    rng = np.random.default_rng(k)
    V, w, c = rng.standard_normal((64, 3001)), rng.standard_normal(3001), rng.standard_normal(k)
    g_out, g_w = GpuKernels.basis_dot(cp.asarray(V), k, cp.asarray(w), cp.empty(k)), cp.asarray(w)
    assert _rel(cp.asnumpy(g_out), V[:k] @ w) <= 1e-12
    GpuKernels.basis_subtract(cp.asarray(V), k, cp.asarray(c), g_w)
    assert _rel(cp.asnumpy(g_w), w - V[:k].T @ c) <= 1e-12


def test_a_recording_replays_its_launches_without_running_them_at_capture():
    x = cp.zeros(5)

    def body():
        y = x + 1.0  # a temporary from the recording's own pool
        x[...] = 2.0 * y

    recording = gk.Recording.of(body)
    assert recording is not None
    assert cp.asnumpy(x).tolist() == [0.0] * 5
    for _ in range(3):
        recording.launch()
    assert cp.asnumpy(x).tolist() == [14.0] * 5  # 0 -> 2 -> 6 -> 14


@pytest.mark.parametrize("deflated", [False, True])
@pytest.mark.parametrize("replayed", [False, True])
def test_lanczos_cycles_on_the_gpu_match_the_numpy_run(deflated, replayed, monkeypatch):
    # many restarts, so that the steady cycle is captured once and replayed; the direct path above the row limit
    from cvxpy_culorads.backends.backend import select_backend
    from cvxpy_culorads.linalg.krylov import lanczos_smallest
    recordings = []
    record = gk.Recording.of
    monkeypatch.setattr(gk.Recording, "of", lambda body: recordings.append(record(body)) or recordings[-1])
    monkeypatch.setattr(gk, "REPLAY_MAX_ROWS", gk.REPLAY_MAX_ROWS if replayed else 0)
    rng = np.random.default_rng(9)
    n, q = 1500, 4
    M = scipy.sparse.random(n, n, density=5.0 / n, random_state=rng)
    matrix = (M + M.T).tocsr()
    Q = np.linalg.qr(rng.standard_normal((n, q)))[0] if deflated else None
    options = dict(accuracy=1e-9, seed=3, steps=16, cycles=60)
    cpu, gpu = select_backend("cpu"), select_backend("gpu")
    want, _, want_residual = lanczos_smallest(cpu.csr(matrix), n, cpu, deflate=Q, **options)
    got, vector, residual = lanczos_smallest(gpu.csr(matrix), n, gpu, deflate=None if Q is None else cp.asarray(Q),
                                             **options)
    assert want_residual <= 1e-9 and residual <= 1e-9
    assert got == pytest.approx(want, abs=1e-9)
    v = cp.asnumpy(vector)
    if deflated:  # the run solves P S P with P = I - Q Q'
        assert np.abs(Q.T @ v).max() <= 1e-10
        Sv = matrix @ v
        Sv -= Q @ (Q.T @ Sv)
    else:
        Sv = matrix @ v
    assert np.linalg.norm(Sv - got * v) <= residual + 1e-11
    # two recordings (the first cycle and the steady one), every one captured, or none at all above the limit
    assert len(recordings) == (2 if replayed else 0) and all(recordings)


@pytest.mark.parametrize("n, r", [(0, 3), (1, 1), (1000, 5), (777, 64), (300, 130)])
def test_row_dots_match_the_numpy_rows(n, r):
    rng = np.random.default_rng(n + r)
    U, V = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    ref = CpuKernels.row_dots(U, V)
    assert ref.shape == (n,) and np.allclose(ref, (U * V).sum(axis=1), rtol=1e-13, atol=1e-13)
    for u, v in ((cp.asarray(U), cp.asarray(V)), (cp.asfortranarray(cp.asarray(U)), cp.asarray(V))):
        out = cp.asnumpy(GpuKernels.row_dots(u, v))
        assert out.shape == (n,) and np.allclose(out, ref, rtol=1e-13, atol=1e-12 * max(r, 1))


@pytest.mark.parametrize("r", [1, 3, 8, 33, 70, 130, 300])
def test_sphere_row_kernels_match_the_numpy_rows(r):
    rng = np.random.default_rng(r)
    n = 1000
    X, D, Z = (rng.standard_normal((n, r)) for _ in range(3))
    X[7] = 0.0
    D[7] = 0.0  # a zero row of X + tau D: the retraction puts it on e_1
    squares = rng.uniform(0.5, 2.0, n)
    roots = np.sqrt(squares)
    cpu = CpuKernels()
    for tau in (0.0, 0.3):
        ref = cpu.sphere_retract(X, D, tau, roots, np.empty_like(X))
        out = cp.full((n, r), np.nan)
        GpuKernels.sphere_retract(cp.asarray(X), cp.asarray(D), tau, cp.asarray(roots), out)
        assert _rel(out, ref) <= RTOL
        assert np.allclose(np.einsum("ij,ij->i", ref, ref), squares)  # the reference is on the spheres
    X = cpu.sphere_retract(X, D, 0.0, roots, np.empty_like(X))  # rows on their spheres
    ref = cpu.sphere_tangent(Z, X, squares, -2.5, np.empty_like(Z))
    out = cp.full((n, r), np.nan)
    GpuKernels.sphere_tangent(cp.asarray(Z), cp.asarray(X), cp.asarray(squares), -2.5, out)
    in_place = cp.asarray(Z)
    GpuKernels.sphere_tangent(in_place, cp.asarray(X), cp.asarray(squares), -2.5, in_place)
    for gpu in (out, in_place):  # on the scale of Z: at r = 1 the tangent part is rounding alone
        gpu = cp.asnumpy(gpu)
        assert np.all(np.isfinite(gpu)) and np.linalg.norm(gpu - ref) <= RTOL * 2.5 * np.linalg.norm(Z)
    assert np.abs(np.einsum("ij,ij->i", ref, X)).max() <= 1e-12 * np.abs(Z).max() * r  # tangent to the spheres


@pytest.mark.parametrize("n, steps", [(40, 30), (150, 30), (490, 12)])
def test_lanczos_tridiagonals(n, steps):
    """The one-launch Lanczos runs (a block of threads per matrix) against the NumPy twin, on indefinite matrices and
    on one of rank 2, whose run breaks down after two steps and continues as zeros."""
    rng = np.random.default_rng(n)
    stack = rng.standard_normal((3, n, n))
    stack = stack + stack.transpose(0, 2, 1)
    low = rng.standard_normal((n, 2))
    stack[2] = low @ np.diag([1.0, -2.0]) @ low.T
    start = rng.standard_normal((3, n))
    start /= np.linalg.norm(start, axis=1, keepdims=True)
    expected = CpuKernels.lanczos_tridiagonals(stack, start, steps, 1e-12)
    got = GpuKernels.lanczos_tridiagonals(cp.asarray(stack), cp.asarray(start), steps, 1e-12)
    scale = np.linalg.norm(stack, axis=(1, 2))[:, None]
    for mine, reference in zip(got, expected):
        np.testing.assert_allclose(cp.asnumpy(mine) / scale, reference / scale, rtol=0, atol=1e-9)
    assert np.all(cp.asnumpy(got[1])[2, 2:] <= 1e-12 * scale[2])  # the rank-2 matrix's invariant subspace
