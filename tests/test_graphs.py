"""The synthetic benchmark graphs (benchmarks/graphs.py): structure, and rgg edges against brute force."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
import scipy.sparse

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "graphs.py"
_spec = importlib.util.spec_from_file_location("_culorads_bench_graphs", _PATH)
graphs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(graphs)


def _check_adjacency(A, n):
    assert A.shape == (n, n)
    assert scipy.sparse.issparse(A) and A.format == "csr"
    assert A.has_sorted_indices
    assert np.all(A.data == 1.0)
    assert A.diagonal().sum() == 0, "self loop"
    assert (A != A.T).nnz == 0, "not symmetric"
    B = A.copy()
    B.sum_duplicates()
    assert B.nnz == A.nnz, "duplicate entries"


def _brute_force_edges(points, radius):
    d = points[:, None, :] - points[None, :, :]
    d2 = d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]
    i, j = np.nonzero(np.triu(d2 <= radius * radius, k=1))
    return set(zip(i.tolist(), j.tolist()))


def _edges(A):
    i, j = graphs.edge_list(A)
    return set(zip(np.asarray(i).tolist(), np.asarray(j).tolist()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rgg_matches_brute_force(seed):
    n = 500
    points = np.random.default_rng(seed).random((n, 2))
    radius = graphs.rgg_radius(n)
    A = graphs.random_geometric_graph(points, radius)
    _check_adjacency(A, n)
    expected = _brute_force_edges(points, radius)
    assert len(expected) > n  # the test means something
    assert _edges(A) == expected


@pytest.mark.parametrize("radius", [0.013, 0.1, 0.3, 0.5, 0.9, 1.5])
def test_rgg_other_radii_and_cell_boundaries(radius):
    rng = np.random.default_rng(7)
    # random points plus points exactly on cell boundaries and at exact distance `radius` from each other
    g = max(1, int(np.floor(1.0 / radius)))
    lattice = np.array([(i / g, j / g) for i in range(min(g, 12)) for j in range(min(g, 12))])
    pts = np.concatenate([rng.random((300, 2)), lattice, [[0.0, 0.0], [0.0, min(radius, 0.999)]]])
    pts = pts[(pts >= 0).all(1) & (pts < 1).all(1)]
    A = graphs.random_geometric_graph(pts, radius)
    _check_adjacency(A, len(pts))
    assert _edges(A) == _brute_force_edges(pts, radius)


def test_rgg_graph_k():
    A = graphs.rgg_graph(12, seed=3)
    n = 1 << 12
    _check_adjacency(A, n)
    # expected degree of the DIMACS recipe: n * pi * radius^2 = 0.3025 * pi * ln n (less at the border)
    avg = A.nnz / n
    assert 0.8 * 0.3025 * np.pi * np.log(n) < avg < 1.05 * 0.3025 * np.pi * np.log(n)
    assert (graphs.rgg_graph(12, seed=3) != A).nnz == 0  # fixed seed, fixed graph


def test_rgg_tiny():
    for n in (0, 1, 2):
        A = graphs.random_geometric_graph(np.random.default_rng(0).random((n, 2)), 0.5)
        assert A.shape == (n, n)


@pytest.mark.parametrize("k", [8, 11])
def test_delaunay_edge_count(k):
    from scipy.spatial import Delaunay
    n = 1 << k
    A = graphs.delaunay_graph(k, seed=5)
    _check_adjacency(A, n)
    edges = A.nnz // 2
    hull = np.unique(Delaunay(np.random.default_rng(5).random((n, 2))).convex_hull).size
    assert edges == 3 * n - 3 - hull  # Euler's formula for a triangulation
    assert 2.9 * n < edges < 3 * n
    assert A.indices.dtype == np.int32


def test_geometric_graphs_are_numbered_with_locality():
    # like the DIMACS10 files the paper used: most edges join vertices with nearby numbers
    n = 1 << 12
    for A in (graphs.rgg_graph(12, seed=0), graphs.delaunay_graph(12, seed=0)):
        i, j = graphs.edge_list(A)
        assert np.median(j - i) < 0.02 * n
    points = np.random.default_rng(0).random((1000, 2))
    order = graphs.spatial_order(points)
    assert sorted(order) == list(range(1000))
    steps = np.linalg.norm(np.diff(points[order], axis=0), axis=1)
    assert np.median(steps) < 0.1 * np.median(np.linalg.norm(np.diff(points, axis=0), axis=1))


@pytest.mark.parametrize("maker", ["random", "banded"])
def test_random_graphs(maker):
    n, degree = 20000, 10
    if maker == "random":
        A = graphs.random_regular_like(n, degree, seed=1)
    else:
        A = graphs.banded_graph(n, degree, bandwidth=50, seed=1)
        i, j = graphs.edge_list(A)
        assert np.all(j - i <= 50)
    _check_adjacency(A, n)
    assert 0.95 * degree < A.nnz / n <= degree


def _require_gpu() -> None:
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"no CUDA device ({exc})")


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_random_edges_are_the_lower_triangle_of_the_random_graph(device):
    if device == "gpu":
        _require_gpu()
    n = 3000
    rows, cols = graphs.random_regular_like_edges(n, 4, seed=2, device=device)
    assert isinstance(rows, np.ndarray) and isinstance(cols, np.ndarray)
    lower = scipy.sparse.tril(graphs.random_regular_like(n, 4, seed=2), -1, format="csr")
    expected_rows = np.repeat(np.arange(n), np.diff(lower.indptr))
    np.testing.assert_array_equal(rows, expected_rows)  # row-major, as the CSR stores it
    np.testing.assert_array_equal(cols, lower.indices)


def test_gpu_versions_match_cpu():
    _require_gpu()
    for cpu, gpu in (
        (graphs.rgg_graph(13, seed=2), graphs.rgg_graph(13, seed=2, device="gpu")),
        (graphs.random_regular_like(5000, 8, seed=2), graphs.random_regular_like(5000, 8, seed=2, device="gpu")),
        (graphs.banded_graph(5000, 8, 30, seed=2), graphs.banded_graph(5000, 8, 30, seed=2, device="gpu")),
    ):
        host = gpu.get()
        assert (host != cpu).nnz == 0
        assert np.array_equal(host.indptr, cpu.indptr) and np.array_equal(host.indices, cpu.indices)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("height, width", [(3, 3), (5, 4), (7, 12)])
def test_toroidal_grid_is_the_grid_on_a_torus(height, width, device):
    if device == "gpu":
        _require_gpu()
    n = height * width
    rows, cols, weights = graphs.toroidal_grid_edges(height, width, seed=3, device=device)
    expected = set()
    for r in range(height):
        for c in range(width):
            v = r * width + c
            for u in (r * width + (c + 1) % width, ((r + 1) % height) * width + c):
                expected.add((max(u, v), min(u, v)))
    assert set(zip(rows.tolist(), cols.tolist())) == expected and rows.size == 2 * n
    keys = rows * n + cols
    assert np.all(np.diff(keys) > 0)  # the strict lower triangle, row-major
    assert np.array_equal(np.bincount(rows, minlength=n) + np.bincount(cols, minlength=n), np.full(n, 4))
    assert set(np.unique(weights).tolist()) <= {-1.0, 1.0}


def test_toroidal_grid_weights_are_balanced_and_seeded():
    _, _, weights = graphs.toroidal_grid_edges(100, 200, seed=1)
    assert abs(weights.mean()) < 0.02  # 40000 edges: four standard deviations of a fair sign's mean
    assert np.array_equal(weights, graphs.toroidal_grid_edges(100, 200, seed=1)[2])
    assert not np.array_equal(weights, graphs.toroidal_grid_edges(100, 200, seed=2)[2])
    with pytest.raises(ValueError, match="3 x 3"):
        graphs.toroidal_grid_edges(2, 10)
