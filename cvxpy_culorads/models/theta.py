"""The Lovasz theta function of a graph as an SDP, in two formulations, and graphs whose theta is known.

theta(G) = max <J, X> s.t. tr X = 1, X_ij = 0 for every edge ij, X PSD (J = 1 1', order n, m = |E| + 1): the
``low_rank`` formulation keeps -J as one :class:`~cvxpy_culorads.LowRank` term, n numbers instead of n^2. The
``sparse`` formulation lifts to order n + 1 with sparse data only, max sum_i Y_ii s.t. Y_00 = 1, Y_ii = Y_0i,
Y_ij = 0 on edges (m = 1 + n + |E|), the form cuHALLaR and SDPLIB's theta problems use for the stable set
relaxation. Both give the same value. ``hamming_graph(d, q)`` (words of length d over q letters, adjacent at
Hamming distance one) has theta = q^(d - 1) exactly (``hamming_theta``); the odd cycle C_n has
theta = n cos(pi/n) / (1 + cos(pi/n)) (``cycle_theta``). Building is O(n + |E|).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads.models.maxcut import _weight_matrix
from cvxpy_culorads.problem.lowrank import LowRank
from cvxpy_culorads.problem.sdp import SDPProblem

__all__ = ["theta_problem", "hamming_graph", "hamming_theta", "cycle_graph", "cycle_theta", "THETA_FORMULATIONS"]

THETA_FORMULATIONS = ("sparse", "low_rank")


def _edges(W) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) with i > j of every edge of the graph with adjacency ``W`` (weights are ignored)."""
    lower = sp.tril(_weight_matrix(W), k=-1, format="coo")
    order = np.lexsort((lower.col, lower.row))
    return lower.row[order].astype(np.int64), lower.col[order].astype(np.int64)


def theta_problem(W, formulation: str = "low_rank", name: str = "theta") -> SDPProblem:
    """The theta SDP of the graph with symmetric adjacency ``W`` as a minimisation: ``-result.primal_objective`` is
    theta(G). ``formulation``: ``"low_rank"`` (the default: order n, objective -J as a low-rank term; its tr X = 1
    keeps phase I on a sphere, ``phases/alm.py``, which takes far fewer steps than the sparse form: decision record
    "trace-sphere") or ``"sparse"`` (order n + 1, sparse data only); see the module's docstring."""
    if formulation not in THETA_FORMULATIONS:
        raise ValueError(f"formulation must be one of {THETA_FORMULATIONS}, got {formulation!r}")
    n = sp.csr_array(W).shape[0]
    rows, cols = _edges(W)
    edges = rows.size
    edge_constraints = np.arange(edges)
    if formulation == "low_rank":
        vertices = np.arange(n)
        con = np.concatenate([np.zeros(n, np.int64), 1 + edge_constraints])
        coefficients = (con, np.concatenate([vertices, rows]), np.concatenate([vertices, cols]),
                        np.concatenate([np.ones(n), np.full(edges, 0.5)]))
        b = np.zeros(edges + 1)
        b[0] = 1.0
        return SDPProblem(b, [-LowRank(np.ones(n))], [coefficients], block_sizes=[n], name=name)
    # Y of order n + 1, vertex i at row i + 1: Y_00 = 1 (constraint 0), Y_ii - Y_0i = 0 (1..n), Y_ij = 0 (edges)
    vertices = np.arange(1, n + 1)
    vertex_constraints = np.arange(1, n + 1)
    con = np.concatenate([[0], vertex_constraints, vertex_constraints, n + 1 + edge_constraints])
    row = np.concatenate([[0], vertices, vertices, rows + 1])
    col = np.concatenate([[0], vertices, np.zeros(n, np.int64), cols + 1])
    val = np.concatenate([[1.0], np.ones(n), np.full(n, -0.5), np.full(edges, 0.5)])
    b = np.zeros(1 + n + edges)
    b[0] = 1.0
    objective = (vertices, vertices, -np.ones(n))
    return SDPProblem(b, [objective], [(con, row, col, val)], block_sizes=[n + 1], name=name)


def hamming_graph(d: int, q: int) -> sp.csr_array:
    """The adjacency of H(d, q): q^d words, adjacent when they differ in exactly one letter (degree d (q - 1))."""
    if d < 1 or q < 2:
        raise ValueError(f"H(d, q) needs d >= 1 and q >= 2, got d = {d}, q = {q}")
    n = q ** d
    words = np.arange(n, dtype=np.int64)
    rows, cols = [], []
    for position in range(d):
        place = q ** position
        letter = (words // place) % q
        for shift in range(1, q):
            rows.append(words)
            cols.append(words + ((letter + shift) % q - letter) * place)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, n))


def hamming_theta(d: int, q: int) -> float:
    """theta(H(d, q)) = q^(d - 1): a clique cover by the q^(d - 1) lines meets the stable set of that size."""
    return float(q ** (d - 1))


def cycle_graph(n: int) -> sp.csr_array:
    """The adjacency of the cycle C_n."""
    if n < 3:
        raise ValueError(f"a cycle needs at least 3 vertices, got {n}")
    i = np.arange(n)
    j = (i + 1) % n
    return sp.csr_array((np.ones(2 * n), (np.concatenate([i, j]), np.concatenate([j, i]))), shape=(n, n))


def cycle_theta(n: int) -> float:
    """theta(C_n) for odd n: n cos(pi/n) / (1 + cos(pi/n)) (Lovasz 1979); n/2 for even n (a bipartite graph)."""
    if n % 2 == 0:
        return n / 2
    return n * math.cos(math.pi / n) / (1 + math.cos(math.pi / n))
