"""Synthetic MaxCut graphs for the scaling benchmarks, with fixed seeds (the recipes of the paper's test set).

Every generator returns a symmetric adjacency matrix with unit weights, no self loops and no duplicate
entries, as a ``scipy.sparse.csr_array`` (float64 data, int32 indices when they fit, sorted column
indices) or, with ``device="gpu"``, as a ``cupyx.scipy.sparse.csr_matrix`` holding the *same* graph (the
random numbers are always drawn on the CPU with ``numpy.random.default_rng(seed)``; only the bookkeeping
moves to the GPU).

Recipes (the points of the geometric graphs are numbered along a Z-order curve, ``spatial_order``: the DIMACS10
files the paper solved are numbered with locality too (SuiteSparse delaunay_n13: median |i - j| over the edges
20, against 2417 for a random numbering), and the numbering decides how well the solver's gathers of factor rows
hit the caches, so a random numbering would benchmark a harder problem than the paper's):

- ``delaunay_graph(k, seed)``: the Delaunay triangulation of n = 2^k points drawn uniformly in the unit square
  (``rng.random((n, 2))``, renumbered by ``spatial_order``), computed by Qhull (``scipy.spatial.Delaunay``);
  the edges are the three sides of every triangle, deduplicated (each interior edge belongs to two triangles).
  A planar triangulation has exactly 3n - 3 - h edges, h the number of points on the convex hull, so the
  average degree is just under 6. CPU only. Measured on a 2-core development VM (2026-11-22, ``python
  benchmarks/graphs.py 14 16 18 20``): k = 14: 0.4 s, k = 16: 0.9 s, k = 18: 2.7 s, k = 20: 17.5 s; Qhull
  grows a little faster than linearly, so expect k = 22 in ~1.5 min and k = 24 in ~7 min (not run).
- ``rgg_graph(k, seed)``: the random geometric graph on n = 2^k points drawn uniformly in the unit square
  (``rng.random((n, 2))``, renumbered by ``spatial_order``), an edge between i != j when ``dx*dx + dy*dy <=
  radius*radius`` with ``radius = 0.55 * sqrt(ln n / n)`` (the DIMACS10 rgg_n_2_k recipe; expected degree
  about 0.95 ln n). The neighbour search bins the points into a g x g grid of cells of side 1/g >= radius,
  sorts them by cell, and for each point visits only its own cell (later points only) and the four cells
  (1,-1), (1,0), (1,1), (0,1) to the "east"/"north", so every pair within the radius is examined exactly once:
  O(n + candidates) = O(n + edges) time and memory, processed in chunks of points to bound temporaries.
  ``random_geometric_graph(points, radius)`` is the same on any given points. ``device="gpu"`` runs the same
  vectorised code with CuPy (same points, same floating-point comparison, hence the same edges). Measured: CPU
  (2-core VM) k = 20: 2.6 s (6.9M edges; DIMACS10 rgg_n_2_20_s0 has 6.89M), k = 22: 13 s, k = 23: 28 s and 4.7
  GB peak memory, so k = 24 needs about 1 min and 10 GB; GPU (H100) k = 22: 0.14 s, k = 24: 0.7 s (132.5M
  edges; DIMACS10 rgg_n_2_24_s0 has 132.6M).
- ``random_regular_like(n, degree, seed)``: every vertex draws ``degree // 2`` partners uniformly at random
  (self loops dropped, repeated pairs merged), so the average degree is about ``degree`` with a Poisson-like
  spread: a quick random graph with no locality, for scaling tests.
- ``toroidal_grid_edges(height, width, seed)``: Gset's toroidal grids (G62-G81) at any size, as the edge list of
  the lower triangle: degree 4, weights +-1, numbered row by row (the locality case for several GPUs).
- ``banded_graph(n, degree, bandwidth, seed)``: every vertex i draws ``degree // 2`` partners
  i + U{1..bandwidth} (dropped past n - 1): the same degree as above but with good locality, the best
  case for gathers of factor rows.
"""
from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse

__all__ = ["delaunay_graph", "rgg_graph", "rgg_radius", "random_geometric_graph", "random_regular_like",
           "random_regular_like_edges", "toroidal_grid_edges", "banded_graph", "edge_list", "spatial_order"]

_CHUNK = 1 << 21  # points per pass of the neighbour search (bounds the candidate-pair temporaries)


def _xp(device: str):
    if device == "cpu":
        return np
    if device == "gpu":
        import cupy
        return cupy
    raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


def _csr_from_pairs(a, b, n: int, xp, *, unique: bool = False):
    """Symmetric unit-weight CSR from undirected pairs (a_e, b_e), a_e != b_e; duplicates merged.

    ``unique=True`` promises that no unordered pair occurs twice (skips the merge on the CPU).
    """
    idx = np.int32 if n < 2**31 - 1 else np.int64
    if xp is np:
        rows = np.concatenate([a, b]).astype(idx, copy=False)
        cols = np.concatenate([b, a]).astype(idx, copy=False)
        m = scipy.sparse.coo_array((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()  # O(nnz) bucketing
        if not unique:
            m.sum_duplicates()
        m.sort_indices()
        m.data[:] = 1.0
        return m
    import cupyx.scipy.sparse
    keys = xp.concatenate([a.astype(np.int64) * n + b, b.astype(np.int64) * n + a])
    keys = xp.unique(keys)  # sorted by (row, col), duplicates merged
    rows = keys // n
    cols = (keys - rows * n).astype(idx)
    indptr = xp.searchsorted(rows, xp.arange(n + 1, dtype=np.int64)).astype(idx)
    del keys, rows
    return cupyx.scipy.sparse.csr_matrix((xp.ones(cols.size), cols, indptr), shape=(n, n))


def spatial_order(points) -> np.ndarray:
    """The permutation that sorts points of [0, 1)^2 along a Z-order (Morton) curve of a 2^16 x 2^16 grid."""
    grid = np.minimum((np.asarray(points) * 65536.0).astype(np.uint64), np.uint64(65535))

    def spread(v):  # the 16 bits of v to the even bit positions
        for shift, mask in ((8, 0x00FF00FF), (4, 0x0F0F0F0F), (2, 0x33333333), (1, 0x55555555)):
            v = (v | (v << np.uint64(shift))) & np.uint64(mask)
        return v

    return np.argsort(spread(grid[:, 0]) | (spread(grid[:, 1]) << np.uint64(1)), kind="stable")


def _uniform_points(n: int, seed: int) -> np.ndarray:
    points = np.random.default_rng(seed).random((n, 2))
    return points[spatial_order(points)]


def delaunay_graph(k: int, seed: int = 0):
    """Delaunay triangulation of 2^k uniform random points in the unit square (CPU, scipy's Qhull)."""
    from scipy.spatial import Delaunay
    n = 1 << k
    tri = Delaunay(_uniform_points(n, seed)).simplices
    a = np.concatenate([tri[:, 0], tri[:, 1], tri[:, 2]])
    b = np.concatenate([tri[:, 1], tri[:, 2], tri[:, 0]])
    del tri
    return _csr_from_pairs(a, b, n, np)


def rgg_radius(n: int) -> float:
    """The DIMACS10 rgg radius 0.55 * sqrt(ln n / n)."""
    return 0.55 * math.sqrt(math.log(n) / n)


def rgg_graph(k: int, seed: int = 0, *, device: str = "cpu"):
    """Random geometric graph on 2^k uniform points of the unit square, radius 0.55 sqrt(ln n / n)."""
    n = 1 << k
    return random_geometric_graph(_uniform_points(n, seed), rgg_radius(n), device=device)


def random_geometric_graph(points, radius: float, *, device: str = "cpu"):
    """Edges {i, j}, i != j, with dx*dx + dy*dy <= radius^2, for points in [0, 1)^2 (an (n, 2) array)."""
    xp = _xp(device)
    points = np.asarray(points, dtype=np.float64)
    n = points.shape[0]
    src, dst = _rgg_pairs(xp.asarray(points), float(radius), xp)
    return _csr_from_pairs(src, dst, n, xp, unique=True)


def _expand(counts, xp):
    """For counts c_i, the owner i of each of the sum(c) slots and each slot's offset within its owner."""
    ends = xp.cumsum(counts)
    total = int(ends[-1]) if counts.size else 0
    starts = ends - counts
    if xp is np:
        owner = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    else:
        owner = xp.searchsorted(ends, xp.arange(total, dtype=np.int64), side="right")
    return owner, xp.arange(total, dtype=np.int64) - starts[owner]


def _rgg_pairs(P, radius: float, xp):
    n = P.shape[0]
    empty = xp.zeros(0, dtype=np.int64)
    if n < 2:
        return empty, empty
    r2 = radius * radius
    # cells of side 1/g >= radius (with a relative margin far above rounding, so points within the radius
    # always sit in the same or adjacent cells)
    g = max(1, int(math.floor(1.0 / (radius * (1.0 + 1e-9))))) if radius > 0 else 1
    g = min(g, 1 << 15)  # g*g cells must stay an array we can afford
    cx = xp.minimum((P[:, 0] * g).astype(np.int64), g - 1)
    cy = xp.minimum((P[:, 1] * g).astype(np.int64), g - 1)
    cell = cx * g + cy
    del cx, cy
    order = xp.argsort(cell)
    cell = cell[order]
    Ps = P[order]
    start = xp.zeros(g * g + 1, dtype=np.int64)
    start[1:] = xp.cumsum(xp.bincount(cell, minlength=g * g))
    cxs, cys = cell // g, cell % g
    out_src, out_dst = [], []
    for dx, dy in ((0, 0), (1, -1), (1, 0), (1, 1), (0, 1)):
        for s in range(0, n, _CHUNK):
            i = xp.arange(s, min(s + _CHUNK, n), dtype=np.int64)  # positions in cell order
            nx, ny = cxs[i] + dx, cys[i] + dy
            valid = (nx < g) & (ny >= 0) & (ny < g)
            ncell = xp.where(valid, nx * g + ny, 0)
            lo = i + 1 if (dx, dy) == (0, 0) else start[ncell]
            cnt = xp.where(valid, start[ncell + 1] - lo, 0)
            owner, off = _expand(cnt, xp)
            if owner.size == 0:
                continue
            si = i[owner]
            dj = lo[owner] + off
            del owner, off
            ddx = Ps[si, 0] - Ps[dj, 0]
            ddy = Ps[si, 1] - Ps[dj, 1]
            keep = ddx * ddx + ddy * ddy <= r2
            del ddx, ddy
            out_src.append(order[si[keep]])
            out_dst.append(order[dj[keep]])
    if not out_src:
        return empty, empty
    return xp.concatenate(out_src), xp.concatenate(out_dst)


def _random_partners(n: int, degree: int, seed: int):
    """Each vertex a and ``degree // 2`` uniform random partners b (a != b), as the pairs (a, b)."""
    rng = np.random.default_rng(seed)
    a = np.repeat(np.arange(n, dtype=np.int64), max(1, degree // 2))
    b = rng.integers(0, n, size=a.size, dtype=np.int64)
    keep = a != b
    return a[keep], b[keep]


def random_regular_like(n: int, degree: int = 10, seed: int = 0, *, device: str = "cpu"):
    """Each vertex picks ``degree // 2`` uniform random partners; self loops dropped, duplicates merged."""
    xp = _xp(device)
    return _csr_from_pairs(*map(xp.asarray, _random_partners(n, degree, seed)), n, xp)


def _lower_triangle(a, b, n: int, xp):
    """The pairs {a_e, b_e} (arrays of ``xp``, a_e != b_e) as host arrays (i, j) of the strict lower triangle in
    row-major order, repeats merged (``models.maxcut_problem_from_edges``'s fast path)."""
    keys = xp.maximum(a, b) * n + xp.minimum(a, b)
    del a, b
    keys = xp.unique(keys)  # sorted by (row, col)
    rows = keys // n
    cols = keys - rows * n
    del keys
    return (rows, cols) if xp is np else (rows.get(), cols.get())


def random_regular_like_edges(n: int, degree: int = 10, seed: int = 0, *, device: str = "cpu"):
    """The edges of ``random_regular_like(n, degree, seed)`` once each, as host arrays (i, j) of the strict lower
    triangle in row-major order: at n = 3e8 the symmetric matrix would be 14 GB and its transpose for the symmetry
    check minutes of the host. Sorted on the GPU for "gpu"."""
    xp = _xp(device)
    return _lower_triangle(*map(xp.asarray, _random_partners(n, degree, seed)), n, xp)


def toroidal_grid_edges(height: int, width: int, seed: int = 0, *, device: str = "cpu"):
    """The toroidal grid of Gset's G62-G81 at any size: vertex r * width + c (numbered row by row) joined to its right
    neighbour (r, c + 1 mod width) and the one below, (r + 1 mod height, c), each edge weighted +1 or -1 with equal
    probability (a two-dimensional spin glass; G81 is this graph at 200 x 100). As host arrays (i, j, w) of the strict
    lower triangle in row-major order, the weights drawn in that order by ``numpy.random.default_rng(seed)``. Every
    vertex has degree 4 and the numbering keeps neighbours close: contiguous shards of the rows share only the grid
    rows beside their cuts and the wrap-around row. Sorted on the GPU for "gpu"."""
    if min(height, width) < 3:
        raise ValueError(f"a toroidal grid needs at least 3 x 3 vertices (fewer repeat edges), got {height} x {width}")
    xp, n = _xp(device), height * width
    vertex = xp.arange(n, dtype=np.int64)
    right = vertex - vertex % width + (vertex + 1) % width
    below = (vertex + width) % n
    rows, cols = _lower_triangle(xp.concatenate([vertex, vertex]), xp.concatenate([right, below]), n, xp)
    weights = 2.0 * np.random.default_rng(seed).integers(0, 2, rows.size) - 1.0
    return rows, cols, weights


def banded_graph(n: int, degree: int = 10, bandwidth: int = 64, seed: int = 0, *, device: str = "cpu"):
    """Each vertex i picks ``degree // 2`` partners i + U{1..bandwidth} (< n): random graph with locality."""
    rng = np.random.default_rng(seed)
    half = max(1, degree // 2)
    a = np.repeat(np.arange(n, dtype=np.int64), half)
    b = a + rng.integers(1, bandwidth + 1, size=a.size, dtype=np.int64)
    keep = b < n
    xp = _xp(device)
    return _csr_from_pairs(xp.asarray(a[keep]), xp.asarray(b[keep]), n, xp)


def edge_list(adjacency):
    """(i, j) with i < j for every edge of a symmetric CSR adjacency (NumPy or CuPy arrays, as stored)."""
    coo = adjacency.tocoo()
    upper = coo.row < coo.col
    return coo.row[upper], coo.col[upper]


if __name__ == "__main__":  # quick timing: python benchmarks/graphs.py [k ...]
    import sys
    ks = [int(x) for x in sys.argv[1:]] or [14, 16, 18]
    for k in ks:
        for name, fn in (("rgg", rgg_graph), ("delaunay", delaunay_graph)):
            t0 = time.perf_counter()
            g = fn(k)
            print(f"{name:9s} k={k:2d} n={1 << k:9d} edges={g.nnz // 2:11d} avg_deg={g.nnz / (1 << k):6.2f} "
                  f"{time.perf_counter() - t0:7.2f} s", flush=True)
