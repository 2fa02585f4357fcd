"""The chunked host passes: the same answers in chunks of a few entries (threads, chunk borders) as in one; device
arrays copied to the host together."""
import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import SDPProblem, hostpasses
from cvxpy_culorads.backends import backend
from cvxpy_culorads.backends.backend import gpu_available
from cvxpy_culorads.certify.bounds import FixedDiagonals, TraceBounds
from cvxpy_culorads.certify.measures import ProblemNorms
from cvxpy_culorads.models import completion_problem, maxcut_problem, theta_problem
from cvxpy_culorads.operators.compressed import BlockLayout
from cvxpy_culorads.problem.scaling import DiagonalScaling

from support import random_maxcut, random_mixed_problem


@pytest.mark.parametrize("values, expected", [
    ([], True), ([4], True), ([1, 2], True), ([2, 2], False), ([0, 1, 2, 2, 3], False),  # equal across a border
    ([0, 1, 2, 1, 5, 6, 7], False), ([0, 1, 2, 3, 4, 5, 6, 7], True), ([0, 1, 2, 3, 4, 5, 6, 0], False)])
def test_strictly_increasing_compares_across_chunk_borders(values, expected, monkeypatch):
    monkeypatch.setattr(hostpasses, "CHUNK", 3)
    assert hostpasses.strictly_increasing(np.asarray(values)) is expected
    assert expected == bool(np.all(np.diff(values) > 0))


def test_chunks_cover_the_range_in_order(monkeypatch):
    monkeypatch.setattr(hostpasses, "CHUNK", 4)
    x = np.random.default_rng(0).standard_normal(103)
    assert [s.start for s in hostpasses.map_chunks(lambda s: s, 103)] == list(range(0, 103, 4))
    assert hostpasses.abs_max(x) == np.abs(x).max()
    assert hostpasses.abs_sum(x) == pytest.approx(np.abs(x).sum(), rel=1e-14)
    assert hostpasses.squares_sum(x) == pytest.approx(x @ x, rel=1e-14)
    assert hostpasses.map_chunks(lambda s: 1 / 0, 0) == [] and hostpasses.abs_max(x[:0]) == 0.0


def test_chunks_run_on_the_caller_and_the_pool_and_their_errors_reach_the_caller(monkeypatch):
    monkeypatch.setattr(hostpasses, "CHUNK", 4)

    def nested(s):  # a chunk that maps chunks itself: the pool's workers may all be busy with its siblings
        return sum(hostpasses.map_chunks(lambda t: t.stop - t.start, 40))
    assert hostpasses.map_chunks(nested, 103) == [40] * 26

    def failing(s):
        if s.start == 48:
            raise ValueError(s.start)
        return s.start
    with pytest.raises(ValueError, match="48"):
        hostpasses.map_chunks(failing, 103)


def _problems():
    rng = np.random.default_rng(3)
    graph = sp.random_array((40, 40), density=0.15, rng=rng)
    graph = ((graph + graph.T) > 0).astype(float)
    graph.setdiag(0)
    rows, cols = np.nonzero(rng.random((9, 8)) < 0.5)
    n = 30  # one constraint that covers the diagonal (sum_j j X_jj = 5) beside diagonal ones on half of it
    half = np.arange(0, n, 2)
    covering = SDPProblem(np.r_[5.0, np.ones(half.size)], [-sp.eye_array(n)],  # C <= 0 diagonal: that rule too
                          [(np.r_[np.zeros(n, int), 1 + np.arange(half.size)], np.r_[np.arange(n), half],
                            np.r_[np.arange(n), half], np.r_[1.0 + np.arange(n), np.full(half.size, 2.0)])])
    spread = np.r_[1e8, 1e-8, rng.uniform(1, 2, 8)]  # diagonal scales 16 orders apart: rescaled
    scaled = SDPProblem(np.ones(10), [sp.diags_array(spread)], [(np.arange(10), np.arange(10), (np.arange(10) + 1) % 10,
                                                                 np.ones(10))])
    return [random_maxcut(50, 0.2, seed=1)[0], maxcut_problem(graph), random_mixed_problem(2),
            theta_problem(graph), theta_problem(graph, "sparse"),
            completion_problem(rows, cols, rng.standard_normal(rows.size), (9, 8)), covering, scaled]


def _derived(problem):
    """What the solver derives from the data on the host, as plain numbers."""
    norms, bounds = ProblemNorms.of(problem), TraceBounds.of(problem, 7.0)
    fixed = FixedDiagonals.of(problem, BlockLayout.of(problem).offsets, np)
    scaling = DiagonalScaling.of(problem)
    return (list(norms.__dict__.values()), list(bounds.blocks), bounds.lp, bounds.curvature, bounds.negative_diagonal,
            None if fixed is None else [(o, r, t) for o, r, t in fixed.blocks],
            None if scaling is None else scaling.diagonals)


def _assert_close(a, b):
    """a == b up to the rounding of sums taken in another order (None, numbers, arrays, nested sequences)."""
    if a is None or b is None:
        assert a is None and b is None
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_close(x, y)
    else:
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-13)


@pytest.mark.parametrize("index", range(8))
def test_what_the_host_derives_from_the_data_does_not_depend_on_the_chunks(index, monkeypatch):
    problem = _problems()[index]
    whole = _derived(problem)
    monkeypatch.setattr(hostpasses, "CHUNK", 3)
    chunked = _derived(problem)
    _assert_close(whole, chunked)
    norms = ProblemNorms.of(problem)
    # and against the definitions, from dense matrices
    dense = [problem.objective_matrix(k).toarray() for k in range(problem.num_blocks)]
    assert norms.C_1 == pytest.approx(sum(np.abs(C).sum() for C in dense) + np.abs(problem.c_lp).sum(),
                                           rel=1e-12)
    assert norms.b_2 == pytest.approx(np.linalg.norm(problem.b), rel=1e-13)
    # the constraints touching each block, counted without the bincount where they increase
    assert BlockLayout.of(problem).constraints_touching == tuple(np.unique(c.con).size for c in problem.A_coords)


@pytest.mark.skipif(not gpu_available(), reason="no CuPy/GPU")
@pytest.mark.parametrize("stage_bytes", [40, 64 << 20])
def test_device_arrays_reach_the_host_together(stage_bytes, monkeypatch):
    """``backend.copy_to_host``: several arrays on threads, each queued after the work that wrote it, those larger
    than a staging buffer in pieces through two pinned ones (five entries a piece: three pieces, the last short, and
    a buffer refilled); a strided array or target goes through a copy of its own."""
    import cupy
    monkeypatch.setattr(backend, "STAGE_BYTES", stage_bytes)
    parts = [cupy.arange(12.0).reshape(4, 3), cupy.full((2, 3), 2.0), cupy.arange(12.0).reshape(3, 4)[:, ::2]]
    parts[0] *= 3.0  # queued just before the copy
    out, strided = np.zeros((6, 3)), np.zeros((3, 4))
    backend.copy_to_host([(parts[0], out[:4]), (parts[1], out[4:]), (parts[2], strided[:, 1::2])])
    assert np.array_equal(out, np.vstack([3.0 * np.arange(12.0).reshape(4, 3), np.full((2, 3), 2.0)]))
    assert np.array_equal(strided[:, 1::2], np.arange(12.0).reshape(3, 4)[:, ::2]) and not strided[:, ::2].any()


@pytest.mark.parametrize("values", [[-2.0, 2.0, 2.0, -2.0, 2.0], [1.0, -3.0, 2.0, 5.0], [4.0], [-1.0, 0.0, 1.0, 1.0]])
def test_the_median_of_magnitudes_in_chunks(values, monkeypatch):
    monkeypatch.setattr(hostpasses, "CHUNK", 2)
    assert hostpasses.abs_median(np.asarray(values)) == np.median(np.abs(values))


@pytest.mark.parametrize("squares", [[0.5, 0.5, 0.5, 0.5, 0.5], [0.0, 2.0, 0.0, 2.0, 2.0], [0.0, 0.0, 0.0],
                                     [1.0, 4.0, 0.0, 9.0, 4.0, 0.0, 2.0], [3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0]])
def test_the_median_row_norm_in_chunks_is_numpys(squares, monkeypatch):
    from cvxpy_culorads.operators.compressed import median_row_norm
    monkeypatch.setattr(hostpasses, "CHUNK", 2)  # chunks with no positive square among them
    x = np.asarray(squares)
    assert median_row_norm(x) == (float(np.median(np.sqrt(x[x > 0]))) if np.any(x > 0) else 1.0)


@pytest.mark.parametrize("cons", [[0, 1, 2, 3, 4], [0, 0, 1, 3, 4], [4, 3, 2, 1, 0]])
def test_constraint_squares_of_one_coordinate_per_constraint_are_bincounts(cons, monkeypatch):
    from cvxpy_culorads.operators.compressed import constraint_squares
    monkeypatch.setattr(hostpasses, "CHUNK", 2)
    cons, rows, cols = np.asarray(cons), np.array([3, 4, 5, 6, 7]), np.array([0, 1, 5, 3, 3])
    vals = -np.arange(1.0, 6.0)
    expected = np.bincount(cons, np.where(rows == cols, 1.0, 2.0) * vals ** 2, minlength=6)
    assert np.array_equal(constraint_squares(cons, rows, cols, vals, 6), expected)
    if cons.size == 5 and np.all(np.diff(cons) > 0):
        assert np.array_equal(constraint_squares(cons, rows, cols, vals, 5), expected[:5])
