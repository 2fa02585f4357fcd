"""MaxCut: graph readers, the MaxCut SDP relaxation and Goemans-Williamson rounding, all in O(nnz).
:func:`read_graph` reads a graph as a symmetric sparse weight matrix W from Gset/rudy, Matrix Market,
METIS or SNAP edge-list files (optionally gzip- or xz-compressed). :func:`maxcut_problem` builds the SDP
``max 1/4 <L, X> s.t. diag(X) = 1, X PSD`` with ``L = Diag(W 1) - W`` in the solver's minimisation form
(``C = -L/4``), so minus the solver's primal objective is the SDP upper bound on the cut. From the factor
``R`` of ``X = R R'``, :func:`goemans_williamson` draws random hyperplanes and keeps the best cut. Nothing
here loops over vertices in Python or forms a dense n x n matrix, so graphs with millions of vertices work.
"""
from __future__ import annotations

import io
import os
import re
from importlib import resources
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from cvxpy_culorads.problem.io import open_text, read_table, row_error, uncompressed_name
from cvxpy_culorads.problem.sdp import SDPProblem, lower_coordinates, sum_duplicates

__all__ = ["read_graph", "maxcut_problem", "maxcut_problem_from_edges", "goemans_williamson", "cut_value",
           "bundled_graph", "GRAPH_FORMATS"]

GRAPH_FORMATS = ("rudy", "mtx", "metis", "snap")
_SUFFIX_FORMATS = {".mtx": "mtx", ".graph": "metis", ".metis": "metis", ".txt": "snap"}
# Rounding works on blocks of sign vectors of about this many entries (128 MiB of float64).
_ROUNDING_BLOCK = 1 << 24


# ---------------------------------------------------------------------------------------- graph files
def read_graph(path: str | os.PathLike, fmt: str | None = None) -> sp.csr_array:
    """Read a graph file into its symmetric weighted adjacency matrix W (float64 CSR, no self-loops).

    ``fmt`` is one of :data:`GRAPH_FORMATS`; by default it follows the suffix (after ``.gz`` / ``.xz``):

    - ``.mtx``: Matrix Market. A symmetric matrix is W itself; otherwise W = A + A' (and a pattern matrix
      gets weight 1 per undirected edge, however often it is listed).
    - ``.graph`` / ``.metis``: METIS adjacency lists (header ``n m [fmt [ncon]]``; edge weights honoured,
      vertex weights skipped); the lists must be symmetric and hold 2m entries.
    - ``.txt``: SNAP edge list (``#`` comments, arbitrary node ids relabelled 0..n-1 in increasing order),
      symmetrised with weight 1 per undirected edge.
    - anything else: Gset / rudy (header ``n m``, then ``i j w`` lines, 1-based, each edge once).

    Malformed files raise ``ValueError`` naming the file and, where it can, the line.
    """
    if fmt is None:
        fmt = _SUFFIX_FORMATS.get(Path(uncompressed_name(path)).suffix.lower(), "rudy")
    if fmt not in GRAPH_FORMATS:
        raise ValueError(f"unknown graph format {fmt!r}; expected one of {GRAPH_FORMATS}")
    W = {"rudy": _read_rudy, "mtx": _read_matrix_market, "metis": _read_metis, "snap": _read_snap}[fmt](path)
    return _without_diagonal(W)  # self-loops never cross a cut


def _without_diagonal(W: sp.csr_array) -> sp.csr_array:
    W = W.tocoo()
    off = W.row != W.col
    return sp.csr_array((W.data[off], (W.row[off], W.col[off])), shape=W.shape)


def _edges(n: int, i, j, w) -> sp.csr_array:
    """The symmetric W = A + A' of the edge list (i, j, w), duplicates summed."""
    A = sp.coo_array((w, (i, j)), shape=(n, n))
    return sp.csr_array(A + A.T)


def _unit_weights(W: sp.csr_array) -> sp.csr_array:
    W.sum_duplicates()
    W.data[:] = 1.0
    return W


def _integer_column(values: np.ndarray) -> np.ndarray:
    """``values`` as integers, with -1 for any value that is not one, so that range checks flag it."""
    integral = np.isfinite(values) & (values == np.round(values)) & (np.abs(values) < 2**62)
    return np.where(integral, values, -1).astype(np.int64)


def _read_rudy(path) -> sp.csr_array:
    with open_text(path) as f:
        header = f.readline().split()
        if len(header) != 2 or not all(field.isdigit() for field in header):
            raise ValueError(f"{path}:1: expected the header 'n m' (vertices, edges), found {' '.join(header)!r}")
        n, m = map(int, header)
        table = read_table(f, path, 1, 3, "i j weight")
    if table.shape[0] != m:
        raise ValueError(f"{path}:1: the header announces {m} edges but the file lists {table.shape[0]}")
    i, j = _integer_column(table[:, 0]), _integer_column(table[:, 1])
    bad = (i < 1) | (i > n) | (j < 1) | (j > n) | ~np.isfinite(table[:, 2])
    if bad.any():
        row = int(np.argmax(bad))
        raise row_error(path, 1, row, f"edge {table[row, 0]:g} {table[row, 1]:g} {table[row, 2]:g}: "
                                      f"vertices must be integers in 1..{n} and the weight finite")
    return _edges(n, i - 1, j - 1, table[:, 2])


def _read_snap(path) -> sp.csr_array:
    with open_text(path) as f:
        table = read_table(f, path, 0, 2, "FromNodeId ToNodeId", comments="#")
    ids = _integer_column(table.ravel())
    if ids.size and ids.min() < 0:
        row = int(np.argmax((ids < 0).reshape(-1, 2).any(axis=1)))
        raise row_error(path, 0, row, "node ids must be nonnegative integers", comments="#")
    labels, nodes = np.unique(ids, return_inverse=True)
    i, j = nodes.reshape(-1, 2).T
    return _unit_weights(_edges(labels.size, i, j, np.ones(i.size)))


def _read_matrix_market(path) -> sp.csr_array:
    rows, cols, _, _, field, symmetry = _parse_matrix_market(path, scipy.io.mminfo)
    if rows != cols:
        raise ValueError(f"{path}: an adjacency matrix must be square, this one is {rows} x {cols}")
    if field not in ("real", "integer", "pattern") or symmetry not in ("general", "symmetric"):
        raise ValueError(f"{path}: a {field} {symmetry} matrix is not a weighted adjacency matrix")
    matrix = _parse_matrix_market(path, lambda stream: scipy.io.mmread(stream, spmatrix=False))
    A = sp.csr_array(matrix, dtype=np.float64)
    if not np.all(np.isfinite(A.data)):
        raise ValueError(f"{path}: a weight is not finite")
    if symmetry == "symmetric" or (A != A.T).nnz == 0:
        return A
    W = sp.csr_array(A + A.T)
    return _unit_weights(W) if field == "pattern" else W


def _parse_matrix_market(path, parse):
    """``parse`` (scipy's ``mminfo`` or ``mmread``) applied to the open file, every error naming the file."""
    with open_text(path) as f:
        try:
            return parse(_ParsableText(f))
        except UnicodeDecodeError:
            raise  # open_text reports it
        except (ValueError, OverflowError) as exc:  # scipy's parse errors ("Integer out of range" overflows)
            raise ValueError(f"{path}: {exc}") from None


class _ParsableText(io.TextIOBase):
    """The text of an open file as scipy's Matrix Market parser can take it. scipy 1.17 crashes the process
    (segmentation fault) on a NUL character, and on a last line that lacks its newline and ends in anything
    but a number: this stream refuses the first and supplies the missing newline."""

    def __init__(self, f):
        self._f = f
        self._last = "\n"

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        # Nothing to close (f is open_text's), and staying open matters: scipy's byte wrapper around this
        # stream detaches from it when collected, which may come later (a traceback keeps it), and
        # complains on stderr if the stream is closed by then.
        pass

    def read(self, size: int | None = -1) -> str:
        text = self._f.read(size)
        if "\0" in text:
            raise ValueError("the file holds a NUL character: it is not a text file")
        if not text and self._last != "\n":
            text = "\n"
        if text:
            self._last = text[-1]
        return text


_METIS_HEADER = re.compile(r"^[ \t]*[^%\s].*$", re.MULTILINE)  # the first line neither blank nor a % comment


def _read_metis(path) -> sp.csr_array:
    with open_text(path) as f:
        text = f.read()
    header = _METIS_HEADER.search(text)
    if header is None:
        raise ValueError(f"{path}: no METIS header 'n m [fmt [ncon]]' found")
    lineno = text.count("\n", 0, header.start()) + 1
    fields = header.group().split()
    if not 2 <= len(fields) <= 4 or not all(field.isdigit() for field in fields):
        raise ValueError(f"{path}:{lineno}: expected the METIS header 'n m [fmt [ncon]]', found "
                         f"{header.group().strip()!r}")
    n, m = int(fields[0]), int(fields[1])
    fmt = fields[2].zfill(3) if len(fields) > 2 else "000"
    if len(fmt) != 3 or set(fmt) - {"0", "1"}:
        raise ValueError(f"{path}:{lineno}: METIS fmt must be up to three binary digits, found {fields[2]!r}")
    has_vertex_size, has_vertex_weights, has_edge_weights = (digit == "1" for digit in fmt)
    skipped = int(has_vertex_size) + ((int(fields[3]) if len(fields) > 3 else 1) if has_vertex_weights else 0)

    # Vertex v is the v-th line after the header, comment lines aside (an empty line is an isolated vertex).
    body = text[header.end() + 1:]
    if "%" in body:
        body = "\n".join(line for line in body.split("\n") if not line.lstrip().startswith("%"))
    try:
        vertex, values = _tokens_by_line(body.encode())
    except ValueError as exc:
        raise ValueError(f"{path}: a vertex line holds something that is not a number ({exc})") from None
    if vertex.size and vertex[-1] >= n:
        raise ValueError(f"{path}: the header announces {n} vertices but more vertex lines follow")
    fields_per_line = np.bincount(vertex, minlength=n)
    place = np.arange(values.size) - (np.cumsum(fields_per_line) - fields_per_line)[vertex]
    listed = place >= skipped
    if has_edge_weights:
        odd = np.flatnonzero(np.maximum(fields_per_line - skipped, 0) % 2)
        if odd.size:
            raise ValueError(f"{path}: vertex {odd[0] + 1}: neighbour and weight fields do not pair up")
        is_neighbour = listed & ((place - skipped) % 2 == 0)
        weights = values[np.flatnonzero(is_neighbour) + 1]
    else:
        is_neighbour = listed
        weights = np.ones(int(is_neighbour.sum()))
    u, v = vertex[is_neighbour], _integer_column(values[is_neighbour])
    bad = np.flatnonzero((v < 1) | (v > n))
    if bad.size:
        raise ValueError(f"{path}: vertex {u[bad[0]] + 1}: neighbour {values[is_neighbour][bad[0]]:g} "
                         f"is not an integer in 1..{n}")
    if u.size != 2 * m:
        raise ValueError(f"{path}: the header announces {m} edges, so 2m = {2 * m} list entries, "
                         f"but the lists hold {u.size}")
    W = sp.csr_array(sp.coo_array((weights, (u, v - 1)), shape=(n, n)))
    if (W != W.T).nnz:
        raise ValueError(f"{path}: the adjacency lists are not symmetric (an edge is listed at one end only "
                         "or with two different weights)")
    return W


def _tokens_by_line(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The 0-based line of every whitespace-separated token of ``raw``, and the tokens as numbers."""
    chars = np.frombuffer(raw, dtype=np.uint8)
    blank = np.isin(chars, np.frombuffer(b" \t\r\n\v\f", dtype=np.uint8))  # what bytes.split() splits on
    newline = chars == ord("\n")
    token_start = ~blank & np.concatenate([[True], blank[:-1]])
    line = (np.cumsum(newline) - newline)[token_start]
    return line, (np.array(raw.split()).astype(np.float64) if line.size else np.zeros(0))


def bundled_graph(name: str = "G1") -> Path:
    """The path of a graph shipped with the package (``"G1"``: Gset G1, 800 vertices, 19176 edges)."""
    data = resources.files("cvxpy_culorads") / "data"
    graph = data / name
    if not graph.is_file():
        available = sorted(entry.name for entry in data.iterdir() if entry.is_file())
        raise ValueError(f"no bundled graph {name!r}; available: {', '.join(available)}")
    return Path(str(graph))


# ---------------------------------------------------------------------------------------- the SDP
def _weight_matrix(W) -> sp.csr_array:
    """W as a float64 CSR array, checked square and symmetric, without its diagonal."""
    W = sp.csr_array(W, dtype=np.float64)
    if W.shape[0] != W.shape[1]:
        raise ValueError(f"W must be square, got shape {W.shape}")
    W.sum_duplicates()
    if not np.all(np.isfinite(W.data)):
        raise ValueError("W contains a weight that is not finite")
    asymmetry = abs(W - W.T)
    if asymmetry.nnz and asymmetry.max() > 1e-12 * max(1.0, float(np.abs(W.data).max())):
        raise ValueError("W must be symmetric (give each undirected edge at both (i, j) and (j, i))")
    return _without_diagonal(W)


def maxcut_problem(W, name: str = "maxcut") -> SDPProblem:
    """The MaxCut SDP of the symmetric weight matrix ``W`` as a minimisation :class:`SDPProblem`.

    ``max 1/4 <L, X> s.t. X_ii = 1, X PSD`` with ``L = Diag(W 1) - W`` becomes one PSD block with
    ``C = -L/4``, ``A_i = e_i e_i'`` and ``b = 1``; ``-result.primal_objective`` is the SDP bound on the
    maximum cut. The diagonal of ``W`` (self-loops) is ignored. Time and memory are O(n + nnz(W)).
    """
    W = _weight_matrix(W)
    all_rows = np.repeat(np.arange(W.shape[0]), np.diff(W.indptr))
    left = W.indices < all_rows  # the strict lower triangle, row-major as the canonical CSR stores it
    return _maxcut_of_lower(W.shape[0], all_rows[left], W.indices[left].astype(np.int64), W.data[left], name)


def maxcut_problem_from_edges(n: int, i, j, w=None, name: str = "maxcut") -> SDPProblem:
    """The MaxCut SDP of the graph on ``n`` vertices with the undirected edges (i_e, j_e) of weights w_e (1 where
    ``w`` is None), each edge listed once: :func:`maxcut_problem` of the symmetric W of these edges, built without
    W. An edge listed more than once counts with the sum of its weights; self-loops are ignored.

    For graphs too large for a symmetric matrix on the host: no symmetric copy, no transpose and no symmetry check
    (an edge list is symmetric by construction); at 6e8 edges these are tens of GB and minutes. Time O(n + edges)
    when the pairs come as the strict lower triangle in row-major order (i_e > j_e, (i_e, j_e) increasing), a sort
    otherwise.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer (the number of vertices), got {n!r}")
    n = int(n)
    i = np.asarray(i)
    rows, cols, weights = lower_coordinates(i, j, np.ones(i.size) if w is None else w, "edges", n)
    loops = rows == cols
    if loops.any():
        rows, cols, weights = rows[~loops], cols[~loops], weights[~loops]
    rows, cols, weights = sum_duplicates(rows * n + cols, rows, cols, vals=weights)
    return _maxcut_of_lower(n, rows, cols, weights, name)


def _maxcut_of_lower(n: int, rows, cols, weights, name: str) -> SDPProblem:
    """The MaxCut SDP of the graph whose edges are the strict lower triangle (rows > cols) in row-major order."""
    vertices = np.arange(n)
    diagonal_constraints = (vertices, vertices, vertices, np.ones(n))  # X_ii = 1 is constraint i
    return SDPProblem(np.ones(n), [_objective_lower(n, rows, cols, weights)], [diagonal_constraints],
                      block_sizes=[n], name=name)


def _objective_lower(n: int, rows, cols, weights):
    """The lower triangle of C = (W - Diag(W 1)) / 4 as coordinates in row-major order (so SDPProblem needs no
    sort), from W's strict lower triangle in row-major order: row i's entries left of the diagonal, then (i, i)."""
    degree = np.bincount(rows, weights, minlength=n) + np.bincount(cols, weights, minlength=n)
    # entry e of the strict lower triangle (row-major) moves past the i diagonal entries of the rows above it
    diagonal = np.cumsum(np.bincount(rows, minlength=n) + 1) - 1
    size = rows.size + n
    out_rows, out_cols, out_vals = np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size)
    shifted = np.arange(rows.size) + rows
    out_rows[shifted], out_cols[shifted], out_vals[shifted] = rows, cols, weights / 4
    out_rows[diagonal], out_cols[diagonal], out_vals[diagonal] = np.arange(n), np.arange(n), -degree / 4
    return out_rows, out_cols, out_vals


# ---------------------------------------------------------------------------------------- rounding
def cut_value(W, signs) -> float:
    """The weight of the cut of the sign vector ``signs`` (+-1): sum over edges ij of w_ij (1 - s_i s_j) / 2."""
    W = sp.csr_array(W, dtype=np.float64)
    s = np.asarray(signs, dtype=np.float64).ravel()
    if s.size != W.shape[0]:
        raise ValueError(f"signs has {s.size} entries but W has {W.shape[0]} vertices")
    # Summing over ordered pairs counts every edge twice, hence 1/4; self-loops cancel out (s_i^2 = 1).
    return float((W.sum() - s @ (W @ s)) / 4)


def goemans_williamson(R, W, trials: int = 64, seed: int = 0) -> tuple[float, np.ndarray]:
    """Goemans-Williamson hyperplane rounding of the factor ``R`` (n x r, ``X = R R'``) of the MaxCut SDP.

    Draws ``trials`` Gaussian directions g, takes the signs of ``R g`` (zero counts as +1) and returns the
    best ``(cut value, signs)``, signs as an int8 vector of +-1. Trials run in blocks, each costing
    O(nnz(W) + n r) per trial.
    """
    R = np.asarray(R, dtype=np.float64)
    W = sp.csr_array(W, dtype=np.float64)
    if R.ndim != 2 or R.shape[0] != W.shape[0]:
        raise ValueError(f"R must be n x r with n = {W.shape[0]} vertices, got shape {R.shape}")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    rng = np.random.default_rng(seed)
    total = W.sum()
    block = max(1, min(trials, _ROUNDING_BLOCK // max(1, R.shape[0])))
    best_cut, best_signs = -np.inf, None
    for start in range(0, trials, block):
        S = np.where(R @ rng.standard_normal((R.shape[1], min(block, trials - start))) >= 0, 1.0, -1.0)
        cuts = (total - np.einsum("ij,ij->j", S, W @ S)) / 4
        t = int(np.argmax(cuts))
        if cuts[t] > best_cut:
            best_cut, best_signs = float(cuts[t]), S[:, t].astype(np.int8)
    return best_cut, best_signs
