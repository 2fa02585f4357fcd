"""Model builders: graph readers for every format, the MaxCut SDP, hyperplane rounding, matrix completion."""
import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads.models import (
    bundled_graph,
    completion_error,
    completion_problem,
    cut_value,
    goemans_williamson,
    maxcut_problem,
    maxcut_problem_from_edges,
    random_low_rank_instance,
    read_graph,
)

# The test graph on 5 vertices (1-based): edges 1-2 (w 2), 1-3, 2-3 (w -1), 3-4; vertex 5 is isolated.
EDGES = [(1, 2, 2.0), (1, 3, 1.0), (2, 3, -1.0), (3, 4, 1.0)]


def expected_W(edges=EDGES, n=5, unit=False) -> np.ndarray:
    W = np.zeros((n, n))
    for i, j, w in edges:
        W[i - 1, j - 1] = W[j - 1, i - 1] = 1.0 if unit else w
    return W


def write(path: Path, text: str) -> Path:
    with (gzip.open(path, "wt") if path.suffix == ".gz" else open(path, "w")) as f:
        f.write(text)
    return path


# ---------------------------------------------------------------------------------------- graph readers
@pytest.mark.parametrize("name", ["graph", "graph.gz"])
def test_rudy(tmp_path, name):
    text = "5 4 \n" + "".join(f"{i} {j} {w:g}\n" for i, j, w in EDGES)  # Gset headers may end in a space
    W = read_graph(write(tmp_path / name, text))
    assert isinstance(W, sp.csr_array) and W.dtype == np.float64
    np.testing.assert_array_equal(W.toarray(), expected_W())


def test_matrix_market_symmetric_and_general(tmp_path):
    symmetric = "%%MatrixMarket matrix coordinate real symmetric\n5 5 4\n" + "".join(
        f"{j} {i} {w:g}\n" for i, j, w in EDGES)
    np.testing.assert_array_equal(read_graph(write(tmp_path / "s.mtx", symmetric)).toarray(), expected_W())
    # A general weighted matrix lists each edge once: W = A + A'.
    general = "%%MatrixMarket matrix coordinate real general\n5 5 4\n" + "".join(
        f"{i} {j} {w:g}\n" for i, j, w in EDGES)
    np.testing.assert_array_equal(read_graph(write(tmp_path / "g.mtx", general)).toarray(), expected_W())


def test_matrix_market_pattern_counts_each_edge_once(tmp_path):
    # Edge 1-2 is listed in both directions, plus a self-loop: still weight 1 and no diagonal.
    text = "%%MatrixMarket matrix coordinate pattern general\n5 5 6\n1 2\n2 1\n1 3\n2 3\n4 3\n4 4\n"
    W = read_graph(write(tmp_path / "p.mtx.gz", text))
    np.testing.assert_array_equal(W.toarray(), expected_W(unit=True))


def test_metis_with_comments_isolated_vertex_and_edge_weights(tmp_path):
    unweighted = "% comment\n5 4\n2 3\n1 3\n% inside\n1 2 4\n3\n\n"
    np.testing.assert_array_equal(read_graph(write(tmp_path / "u.graph", unweighted)).toarray(),
                                  expected_W(unit=True))
    weighted = "5 4 1\n2 2 3 1\n1 2 3 -1\n1 1 2 -1 4 1\n3 1\n\n"
    np.testing.assert_array_equal(read_graph(write(tmp_path / "w.graph", weighted)).toarray(), expected_W())
    vertex_weights = "5 4 11 1\n7 2 2 3 1\n7 1 2 3 -1\n7 1 1 2 -1 4 1\n7 3 1\n7\n"
    np.testing.assert_array_equal(read_graph(write(tmp_path / "v.graph", vertex_weights)).toarray(),
                                  expected_W())


@pytest.mark.parametrize("text, words", [
    ("3 2\n2 3\n1 3\n2\n", "announces 2 edges, so 2m = 4 list entries, but the lists hold 5"),
    ("3 2\n2\n1 3\n1\n", "not symmetric"),
    ("3 1\n4\n\n\n", "vertex 1: neighbour 4 is not an integer in 1..3"),
    ("2 1\n2\n1\n2\n", "announces 2 vertices but more vertex lines follow"),
    ("2 x\n", "expected the METIS header"),
    ("2 1\n2\nx\n", "is not a number"),
])
def test_metis_errors(tmp_path, text, words):
    with pytest.raises(ValueError, match="x.graph"):
        read_graph(write(tmp_path / "x.graph", text))
    with pytest.raises(ValueError) as info:
        read_graph(tmp_path / "x.graph")
    assert words in str(info.value)


def test_snap_relabels_symmetrises_and_drops_self_loops(tmp_path):
    # Ids 10, 20, 30, 40, 99 become 0..4; 20 -> 10 repeats 10 -> 20; 99 only has a self-loop.
    text = "# Directed graph\n# FromNodeId\tToNodeId\n10\t20\n20\t10\n10\t30\n20\t30\n40\t30\n99\t99\n"
    W = read_graph(write(tmp_path / "edges.txt", text))
    np.testing.assert_array_equal(W.toarray(), expected_W(unit=True))


def test_format_override_and_errors(tmp_path):
    path = write(tmp_path / "gset.txt", "5 4\n" + "".join(f"{i} {j} {w:g}\n" for i, j, w in EDGES))
    np.testing.assert_array_equal(read_graph(path, fmt="rudy").toarray(), expected_W())
    with pytest.raises(ValueError, match="unknown graph format"):
        read_graph(path, fmt="dimacs")
    with pytest.raises(ValueError, match=r"gset.txt:2: expected 2 fields"):
        read_graph(path)  # as SNAP, the 3-field lines are malformed
    bad = write(tmp_path / "bad", "5 2\n1 2 1\n1 7 1\n")
    with pytest.raises(ValueError, match=r"bad:3: edge 1 7 1: vertices must be integers in 1..5"):
        read_graph(bad)
    short = write(tmp_path / "short", "5 3\n1 2 1\n1 3 1\n")
    with pytest.raises(ValueError, match=r"short:1: the header announces 3 edges but the file lists 2"):
        read_graph(short)


def test_bundled_graph():
    W = read_graph(bundled_graph("G1"))
    assert W.shape == (800, 800) and W.nnz == 2 * 19176
    with pytest.raises(ValueError, match="no bundled graph 'G99'; available: G1"):
        bundled_graph("G99")


# ---------------------------------------------------------------------------------------- MaxCut SDP
def test_maxcut_problem_matches_dense_construction():
    W = expected_W()
    p = maxcut_problem(sp.csr_array(W), name="five")
    L = np.diag(W.sum(axis=1)) - W
    assert p.name == "five" and p.m == 5 and p.block_sizes == (5,) and p.n_lp == 0
    np.testing.assert_array_equal(p.objective_matrix(0).toarray(), -L / 4)
    np.testing.assert_array_equal(p.b, np.ones(5))
    for i in range(5):
        np.testing.assert_array_equal(p.constraint_matrix(i, 0).toarray(), np.diag(np.eye(5)[i]))


def test_maxcut_problem_ignores_self_loops_and_rejects_asymmetry():
    W = expected_W() + np.diag([3.0, 0, 0, 0, 1])
    np.testing.assert_array_equal(maxcut_problem(W).objective_matrix(0).toarray(),
                                  maxcut_problem(expected_W()).objective_matrix(0).toarray())
    with pytest.raises(ValueError, match="W must be symmetric"):
        maxcut_problem(np.triu(expected_W()))


def test_maxcut_problem_from_edges_in_any_order_is_that_of_the_symmetric_matrix():
    rng = np.random.default_rng(3)
    n, count = 40, 150
    i, j = rng.integers(0, n, count), rng.integers(0, n, count)  # duplicates, both orientations, self-loops
    w = rng.uniform(0.5, 2.0, count)
    W = sp.coo_array((w, (i, j)), shape=(n, n)).toarray()
    W = W + W.T
    np.fill_diagonal(W, 0.0)
    built = maxcut_problem_from_edges(n, i, j, w, name="edges")
    assert built.name == "edges" and built.m == n and built.block_sizes == (n,)
    np.testing.assert_allclose(built.objective_matrix(0).toarray(), maxcut_problem(W).objective_matrix(0).toarray(),
                               rtol=1e-15, atol=1e-15)
    for k in range(n):
        np.testing.assert_array_equal(built.constraint_matrix(k, 0).toarray(), np.diag(np.eye(n)[k]))
    # unit weights by default; the sorted strict lower triangle (the fast path) gives the same problem
    lower = sp.coo_array(np.tril(W != 0, -1))
    unit = maxcut_problem_from_edges(n, lower.row, lower.col)
    np.testing.assert_array_equal(unit.objective_matrix(0).toarray(),
                                  maxcut_problem((W != 0).astype(float)).objective_matrix(0).toarray())


@pytest.mark.parametrize("n, i, j, w, words", [
    (0, [], [], None, "positive integer"),
    (2.0, [1], [0], None, "positive integer"),
    (3, [3], [0], None, "outside"),
    (3, [1, 2], [0], None, "same length"),
    (3, [1], [0], [np.nan], "not finite"),
    (3, [0.5], [1], None, "not an integer"),
])
def test_maxcut_problem_from_edges_rejects_bad_input(n, i, j, w, words):
    with pytest.raises(ValueError, match=words):
        maxcut_problem_from_edges(n, i, j, w)


def test_cut_value():
    triangle = sp.csr_array(expected_W([(1, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)], n=3))
    assert cut_value(triangle, [1, 1, -1]) == 2.0
    assert cut_value(triangle, [1, 1, 1]) == 0.0
    assert cut_value(sp.csr_array(expected_W()), [1, -1, 1, -1, 1]) == 2.0 - 1.0 + 1.0


def test_goemans_williamson_on_a_random_graph():
    rng = np.random.default_rng(1)
    n = 60
    upper = sp.triu(sp.random_array((n, n), density=0.2, rng=rng), k=1)
    upper.data[:] = 1.0
    W = sp.csr_array(upper + upper.T)
    R = rng.standard_normal((n, 4))
    R /= np.linalg.norm(R, axis=1, keepdims=True)
    cut, signs = goemans_williamson(R, W, trials=32, seed=3)
    assert signs.shape == (n,) and set(np.unique(signs)) <= {-1, 1}
    assert cut == cut_value(W, signs)
    total = W.sum() / 2
    assert 0.5 * total <= cut <= total
    assert goemans_williamson(R, W, trials=32, seed=3)[0] == cut  # reproducible


def test_goemans_williamson_recovers_a_bipartition():
    # The complete bipartite graph K_{3,4}: the rank-1 factor of the exact bipartition cuts every edge.
    side = np.array([1, 1, 1, -1, -1, -1, -1])
    W = sp.csr_array((side[:, None] != side[None, :]).astype(float))
    cut, signs = goemans_williamson(side[:, None].astype(float), W, trials=4)
    assert cut == 12 and abs(signs @ side) == 7


# ---------------------------------------------------------------------------------------- completion
def test_completion_constraints_read_the_observed_entries():
    n1, n2, rank = 3, 4, 2
    rows, cols, values, (P, Q) = random_low_rank_instance(n1, n2, rank, 7, seed=2)
    p = completion_problem(rows, cols, values, (n1, n2), name="tiny")
    assert p.name == "tiny" and p.block_sizes == (n1 + n2,) and p.m == 7
    np.testing.assert_array_equal(p.objective_matrix(0).toarray(), np.eye(n1 + n2) / 2)
    np.testing.assert_array_equal(p.b, values)
    F = np.vstack([P, Q])
    X = F @ F.T  # [[P P', P Q'], [Q P', Q Q']]
    for e in range(p.m):
        np.testing.assert_allclose(np.sum(p.constraint_matrix(e, 0).toarray() * X), values[e], rtol=1e-13)


def test_completion_problem_rejects_bad_entries():
    with pytest.raises(ValueError, match=r"entry \(1, 2\) is observed more than once"):
        completion_problem([1, 0, 1], [2, 0, 2], [1.0, 2.0, 1.0], (3, 3))
    with pytest.raises(ValueError, match=r"observation 1 at \(3, 0\) lies outside the 3 x 3 matrix"):
        completion_problem([0, 3], [0, 0], [1.0, 2.0], (3, 3))


def test_random_instance():
    n1, n2, rank, k = 50, 80, 3, 900
    rows, cols, values, (P, Q) = random_low_rank_instance(n1, n2, rank, k, seed=5)
    assert P.shape == (n1, rank) and Q.shape == (n2, rank)
    keys = rows * n2 + cols
    assert keys.size == k and np.all(np.diff(keys) > 0)  # distinct, sorted row-major
    assert rows.min() >= 0 and rows.max() < n1 and cols.min() >= 0 and cols.max() < n2
    M = P @ Q.T
    np.testing.assert_allclose(values, M[rows, cols], rtol=1e-12)
    assert 0.5 < M.std() < 2  # entries are O(1)
    with pytest.raises(ValueError, match="num_observed"):
        random_low_rank_instance(2, 2, 1, 5)


def test_completion_error_dense_and_factored():
    n1 = 30
    _, _, _, (P, Q) = random_low_rank_instance(n1, 40, 2, 10, seed=7)
    exact = np.vstack([P, Q])
    assert completion_error(exact, n1, (P, Q)) == 0.0
    assert completion_error(exact, n1, (P, Q), dense_limit=0) < 1e-7
    # The factors are determined up to an orthogonal rotation only.
    rotation = np.linalg.qr(np.random.default_rng(0).standard_normal((2, 2)))[0]
    assert completion_error(exact @ rotation, n1, (P, Q)) < 1e-14
    noisy = exact + 0.01 * np.random.default_rng(1).standard_normal(exact.shape)
    dense, factored = completion_error(noisy, n1, (P, Q)), completion_error(noisy, n1, (P, Q), dense_limit=0)
    assert 1e-3 < dense < 0.1 and factored == pytest.approx(dense, rel=1e-6)
    with pytest.raises(ValueError, match="R must have n1 \\+ n2 = 70 rows"):
        completion_error(exact[:-1], n1, (P, Q))


def test_completion_problem_keeps_the_observations_without_a_copy_of_its_own_arrays_and_none_of_the_callers():
    rows, cols, values, _ = random_low_rank_instance(6, 5, 2, 12, seed=4)
    problem = completion_problem(rows, cols, values, (6, 5))
    coeff = problem.A_coords[0]
    np.testing.assert_array_equal(coeff.con, np.arange(12))
    np.testing.assert_array_equal(coeff.row, 6 + cols)
    np.testing.assert_array_equal(coeff.col, rows)
    assert not any(np.shares_memory(a, given) for a in coeff for given in (rows, cols, values))
    rows[:], values[:] = 0, 9.0
    np.testing.assert_array_equal(coeff.col, random_low_rank_instance(6, 5, 2, 12, seed=4)[0])
    assert not np.any(problem.b == 9.0)


def test_completion_problem_accepts_observations_in_any_order_and_rejects_non_integers():
    rows, cols, values, _ = random_low_rank_instance(6, 5, 2, 12, seed=4)
    shuffled = np.random.default_rng(0).permutation(12)
    problem = completion_problem(rows[shuffled], cols[shuffled], values[shuffled], (6, 5))
    np.testing.assert_array_equal(problem.b, values[shuffled])
    np.testing.assert_array_equal(problem.A_coords[0].col, rows[shuffled])
    with pytest.raises(ValueError, match="rows: 1.5 is not an integer"):
        completion_problem([1.5], [0], [1.0], (3, 3))
    with pytest.raises(ValueError, match="values: contains a value that is not finite"):
        completion_problem([1], [0], [np.nan], (3, 3))


def test_completion_optimum_matches_cvxpy():
    """The least nuclear norm of a completion, from the SDP and from CVXPY's normNuc (Clarabel)."""
    cp = pytest.importorskip("cvxpy")
    from cvxpy_culorads import solve
    n1, n2 = 9, 7
    rows, cols, values, _ = random_low_rank_instance(n1, n2, 2, 40, seed=6)
    result = solve(completion_problem(rows, cols, values, (n1, n2)), device="cpu", tol=1e-7)
    Y = cp.Variable((n1, n2))
    reference = cp.Problem(cp.Minimize(cp.normNuc(Y)), [Y[rows, cols] == values])
    reference.solve(solver="CLARABEL")
    assert result.status.value == "optimal"
    assert result.primal_objective == pytest.approx(reference.value, rel=1e-5)
