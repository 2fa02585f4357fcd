"""SDPA reader and writer: inline files for every rule of the format, round trips, errors with line numbers,
damaged or undecodable files (for every reader, graphs included) and (when ``../shared`` is present) the real
SDPLIB files against their README table."""
import gc
import gzip
import io
import lzma
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads.hostmemory import available_bytes
from cvxpy_culorads.models import read_graph
from cvxpy_culorads.problem.io import file_stem, read_sdpa, write_sdpa
from cvxpy_culorads.problem.sdp import SDPProblem

from support import data_file

# Two PSD blocks (2 and 3) between three diagonal blocks (2, 1, 1): diagonal blocks at the start, middle
# and end, punctuation and comments in the header, an entry from the upper triangle (i > j) and a blank line.
MIXED = """\
* a comment line
"a quoted comment line
2 = mDIM
5 = nBLOCK
{-2, 2, -1, 3, -1}
{1.5, (2)}
0 1 1 1 3.0
0 2 1 2 1.0
1 1 2 2 1.0
1 2 1 1 2.0

1 3 1 1 4.0
2 4 3 2 5.0
2 4 1 1 1.0
0 4 2 3 -7.0
2 5 1 1 -1.0
"""


def write(path: Path, text: str) -> Path:
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wt") as f:
        f.write(text)
    return path


@pytest.mark.parametrize("suffix", [".dat-s", ".dat-s.gz", ".dat-s.xz"])
def test_mixed_blocks(tmp_path, suffix):
    p = read_sdpa(write(tmp_path / f"mixed{suffix}", MIXED))
    assert p.name == "mixed"
    assert p.m == 2 and p.block_sizes == (2, 3) and p.n_lp == 4
    np.testing.assert_array_equal(p.b, [1.5, 2.0])
    # C = -F0; SDPA's (i, j) and (j, i) are one symmetric entry.
    np.testing.assert_array_equal(p.objective_matrix(0).toarray(), [[0, -1], [-1, 0]])
    np.testing.assert_array_equal(p.objective_matrix(1).toarray(), [[0, 0, 0], [0, 0, 7], [0, 7, 0]])
    np.testing.assert_array_equal(p.constraint_matrix(0, 0).toarray(), [[2, 0], [0, 0]])
    np.testing.assert_array_equal(p.constraint_matrix(1, 1).toarray(), [[1, 0, 0], [0, 0, 5], [0, 5, 0]])
    assert p.constraint_matrix(1, 0).nnz == 0 and p.constraint_matrix(0, 1).nnz == 0
    # The diagonal blocks -2, -1, -1 are the variables 0-1, 2 and 3, in file order.
    np.testing.assert_array_equal(p.c_lp, [-3, 0, 0, 0])
    np.testing.assert_array_equal(p.A_lp.toarray(), [[0, 1, 4, 0], [0, 0, 0, -1]])


def test_duplicates_add_up_and_vectors_may_span_lines(tmp_path):
    text = "3\n1\n2\n1 2\n3\n0 1 1 2 1.0\n0 1 2 1 1.0\n1 1 1 1 1.0\n1 1 1 1 2.0\n2 1 2 2 1\n3 1 1 2 1\n"
    p = read_sdpa(write(tmp_path / "dup.dat-s", text))
    np.testing.assert_array_equal(p.b, [1, 2, 3])
    np.testing.assert_array_equal(p.objective_matrix(0).toarray(), [[0, -2], [-2, 0]])
    np.testing.assert_array_equal(p.constraint_matrix(0, 0).toarray(), [[3, 0], [0, 0]])


def test_only_a_diagonal_block(tmp_path):
    p = read_sdpa(write(tmp_path / "lp.dat-s", "1\n1\n-3\n1\n0 1 2 2 5\n1 1 1 1 1\n1 1 3 3 1\n"))
    assert p.block_sizes == () and p.n_lp == 3
    np.testing.assert_array_equal(p.c_lp, [0, -5, 0])
    np.testing.assert_array_equal(p.A_lp.toarray(), [[1, 0, 1]])


def random_problem(seed: int) -> SDPProblem:
    rng = np.random.default_rng(seed)
    sizes, m, n_lp = (4, 1, 6), 5, 3
    C, A = [], []
    for n in sizes:
        S = sp.random_array((n, n), density=0.5, rng=rng)
        C.append(S + S.T)
        e = 3 * n
        A.append((rng.integers(0, m, e), rng.integers(0, n, e), rng.integers(0, n, e), rng.standard_normal(e)))
    A_lp = sp.random_array((m, n_lp), density=0.6, rng=rng)
    return SDPProblem(rng.standard_normal(m), C, A, c_lp=rng.standard_normal(n_lp) * (rng.random(n_lp) < 0.7),
                      A_lp=A_lp, name="random")


def assert_same_problem(p: SDPProblem, q: SDPProblem):
    assert (p.block_sizes, p.n_lp, p.m) == (q.block_sizes, q.n_lp, q.m)
    np.testing.assert_array_equal(p.b, q.b)
    np.testing.assert_array_equal(p.c_lp, q.c_lp)
    for a, b in zip(p.C_coords + p.A_coords, q.C_coords + q.A_coords):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert (p.A_lp != q.A_lp).nnz == 0


@pytest.mark.parametrize("suffix", [".dat-s", ".dat-s.gz", ".dat-s.xz"])
def test_write_read_round_trip_is_exact(tmp_path, suffix):
    p = random_problem(0)
    path = tmp_path / f"random{suffix}"
    write_sdpa(p, path)
    q = read_sdpa(path)
    assert_same_problem(p, q)
    assert q.name == "random"
    write_sdpa(q, tmp_path / "again.dat-s")
    assert_same_problem(p, read_sdpa(tmp_path / "again.dat-s"))


def test_write_puts_the_nonnegative_variables_last(tmp_path):
    p = read_sdpa(write(tmp_path / "mixed.dat-s", MIXED))
    write_sdpa(p, tmp_path / "out.dat-s")
    lines = (tmp_path / "out.dat-s").read_text().splitlines()
    assert lines[1:4] == ["2", "3", "2 3 -4"]
    assert_same_problem(p, read_sdpa(tmp_path / "out.dat-s"))


def test_file_stem():
    assert file_stem("a/b/mcp100.dat-s.xz") == "mcp100"
    assert file_stem("G1") == "G1"
    assert file_stem("graph.mtx.gz") == "graph"


HEADER = "2\n1\n2\n1 1\n"  # m = 2, one 2x2 block, c = (1, 1): entries start on line 5


@pytest.mark.parametrize("text, lineno, words", [
    ("2\n", 2, "unexpected end of file"),
    ("2.5\n1\n2\n1 1\n", 1, "must be integers"),
    ("2\nblocks\n", 2, "expected the number of blocks"),
    ("2\n1\n0\n1 1\n", 3, "block size is 0"),
    ("2\n2\n2\n1 1\n", 3, "found 3 on lines 3-4"),
    ("2\n1\n2\n1\n1 1 1 1 1.0\n", 4, "found 6 on lines 4-5"),
    ("2\n1\n2\n1 nan\n", 4, "not finite"),
    ("* only\n2\n1\n2\n1\n", 6, "unexpected end of file: expected the c vector"),
    (HEADER + "1 1 1 1 1.0\n1 1 1 1\n", 6, "expected 5 fields"),
    (HEADER + "1 1 1 1 1.0\n\n1 1 one 1 1.0\n", 7, "'one' is not a number"),
    (HEADER + "1 1 1 1 1.0\n\n3 1 1 1 1.0\n", 7, "matrix number 3 is outside 0..2"),
    (HEADER + "1 2 1 1 1.0\n", 5, "block 2 is outside 1..1"),
    (HEADER + "1 1 1 1 1.0\n1 1 3 1 1.0\n", 6, "entry (3, 1) lies outside block 1 of size 2"),
    (HEADER + "1 1 1.5 1 1.0\n", 5, "must be integers"),
    (HEADER + "1 1 1 1 1.0\n2 1 2 2 inf\n", 6, "not finite"),
    ("1\n2\n1 -2\n1\n1 1 1 1 1\n1 2 1 2 1.0\n", 6, "off the diagonal of block 2"),
    ("1e20\n1\n2\n1\n", 1, "the number of constraints m: 1e+20 is too large"),
    ("2\n1\n-1e30\n1 1\n", 3, "the block sizes: -1e+30 is too large"),
])
def test_malformed_files_name_the_line(tmp_path, text, lineno, words):
    path = write(tmp_path / "bad.dat-s", text)
    with pytest.raises(ValueError) as info:
        read_sdpa(path)
    assert str(info.value).startswith(f"{path}:{lineno}: "), str(info.value)
    assert words in str(info.value)


def test_infeasible_constraint_names_the_file(tmp_path):
    path = write(tmp_path / "empty_row.dat-s", "2\n1\n2\n1 1\n1 1 1 1 1.0\n")
    with pytest.raises(ValueError, match=r"empty_row.dat-s: constraint 1 has no coefficients"):
        read_sdpa(path)


GiB = 2**30
# Issue 49's files on its 24 GB machine: sizes far beyond memory declared in a few lines. The c vector and the
# entries follow, so only the declared sizes can say the file cannot be solved.
HUGE_FILES = {
    "LP block of 3e9 variables": ("1\n1\n-3000000000\n1\n0 1 1 1 1\n1 1 1 1 1\n",
                                  "3000000000 nonnegative variables"),
    "PSD block of order 1e9": ("1\n1\n1000000000\n1\n0 1 1 1 1\n1 1 1 1 1\n",
                               "PSD blocks of total order 1000000000"),
    "m = 1e12 without its c vector": ("1000000000000\n1\n2\n", "m = 1000000000000"),
}


@pytest.mark.parametrize("name", HUGE_FILES)
def test_sizes_declared_beyond_memory_are_refused_before_allocating(tmp_path, monkeypatch, name):
    text, words = HUGE_FILES[name]
    monkeypatch.setattr("cvxpy_culorads.problem.io.available_bytes", lambda: 24 * GiB)
    path = write(tmp_path / "huge.dat-s", text)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as info:
            read_sdpa(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert message.startswith(f"{path}:3: the declared sizes ("), message  # the line of the block sizes
    assert words in message and "GiB of memory to solve, but 24 GiB are available" in message
    need = float(message.split("need at least ")[1].split(" GiB")[0])
    assert need > 24  # the estimate named is the one that was refused
    assert peak < 2**20  # refused before anything was allocated


def test_the_memory_check_sits_at_the_least_a_solve_needs(tmp_path, monkeypatch):
    # Order 10**5 and m = 10: four float64 vectors per row and three per constraint, 3,200,240 bytes.
    path = write(tmp_path / "wide.dat-s", "10\n1\n100000\n" + "1 " * 10 + "\n"
                 + "".join(f"{k} 1 {k} {k} 1.0\n" for k in range(1, 11)))
    monkeypatch.setattr("cvxpy_culorads.problem.io.available_bytes", lambda: 3_200_239)
    with pytest.raises(ValueError, match="need at least 0.00298 GiB"):
        read_sdpa(path)
    monkeypatch.setattr("cvxpy_culorads.problem.io.available_bytes", lambda: 3_200_240)
    assert read_sdpa(path).block_sizes == (100000,)
    monkeypatch.setattr("cvxpy_culorads.problem.io.available_bytes", lambda: None)  # unknown: nothing is refused
    assert read_sdpa(path).m == 10


def test_sizes_beyond_any_memory_are_refused_with_the_hosts_own_figure(tmp_path):
    if available_bytes() is None:
        pytest.skip("this host reports no memory figure")
    path = write(tmp_path / "huge.dat-s", "1\n1\n-1000000000000000000\n1\n0 1 1 1 1\n1 1 1 1 1\n")
    with pytest.raises(ValueError, match=r"huge.dat-s:3: .* GiB of memory to solve, but [0-9.e+]+ GiB are available"):
        read_sdpa(path)


@pytest.mark.parametrize("compress", [None, gzip.compress, lzma.compress])
def test_streams_are_read_from_their_start_and_decompressed_by_their_magic_bytes(tmp_path, compress):
    data = MIXED.encode() if compress is None else compress(MIXED.encode())
    stream = io.BytesIO(b"skipped" + data)
    stream.seek(len(b"skipped"))
    with pytest.raises(ValueError):  # read from the beginning, not from where the stream stands
        read_sdpa(stream)
    stream = io.BytesIO(data)
    stream.read(3)
    p = read_sdpa(stream)
    assert_same_problem(p, read_sdpa(write(tmp_path / "mixed.dat-s", MIXED)))
    assert p.name == "<stream>" and not stream.closed


class Pipe(io.BytesIO):
    """A stream that cannot seek, as standard input is when it is a pipe."""

    name = "<stdin>"

    def seekable(self):
        return False


def test_a_stream_that_cannot_seek_is_read_once_and_named_in_errors():
    assert read_sdpa(Pipe(gzip.compress(MIXED.encode()))).name == "<stdin>"
    with pytest.raises(ValueError, match=r"^<stdin>:6: entry \(3, 1\) lies outside block 1 of size 2$"):
        read_sdpa(Pipe(f"{HEADER}1 1 1 1 1.0\n1 1 3 1 1.0\n".encode()))
    with pytest.raises(ValueError, match=r"^<stdin>: cannot decode the file"):
        read_sdpa(Pipe(gzip.compress(MIXED.encode())[:-12]))


# One small valid file per reader: SDPA and the four graph formats (a triangle).
FILES = {
    "p.dat-s": MIXED,
    "g.rudy": "3 3\n1 2 1\n2 3 1\n1 3 1\n",
    "g.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 1\n2 3 1\n1 3 1\n",
    "g.graph": "3 3\n2 3\n1 3\n1 2\n",
    "g.txt": "# snap\n0 1\n1 2\n0 2\n",
}
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
DAMAGES = {  # name: (suffix, the damaged file's bytes from the text's), each raising another decoding error
    "gz truncated": (".gz", lambda data: gzip.compress(data)[:-12]),  # EOFError
    "gz wrong checksum": (".gz", lambda data: gzip.compress(data)[:-8] + bytes(8)),  # gzip.BadGzipFile
    "gz invalid deflate block": (".gz", lambda data: GZIP_HEADER + b"\xff" * 16),  # zlib.error
    "gz not gzip": (".gz", lambda data: data),
    "xz truncated": (".xz", lambda data: lzma.compress(data)[:-30]),
    "xz not xz": (".xz", lambda data: data),  # lzma.LZMAError
    "not UTF-8": ("", lambda data: data + "\xe9\n".encode("latin-1")),  # UnicodeDecodeError
    "gz not UTF-8": (".gz", lambda data: gzip.compress(b"\xe9" + data)),
}


def read_any(path: Path):
    return read_sdpa(path) if ".dat-s" in path.name else read_graph(path)


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("name", FILES)
def test_undecodable_files_are_value_errors_naming_the_file(tmp_path, name, damage):
    suffix, damaged = DAMAGES[damage]
    path = tmp_path / f"{name}{suffix}"
    path.write_bytes(damaged(FILES[name].encode()))
    with pytest.raises(ValueError) as info:
        read_any(path)
    assert str(info.value).startswith(f"{path}: cannot decode the file ("), str(info.value)
    assert str(info.value).count(str(path)) == 1


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_files_read_and_missing_files_are_os_errors(tmp_path, name, suffix):
    read_any(write(tmp_path / f"{name}{suffix}", FILES[name]))  # the valid file behind each damage
    with pytest.raises(FileNotFoundError):
        read_any(tmp_path / f"missing-{name}{suffix}")


MTX_HEADER = "%%MatrixMarket matrix coordinate real general\n3 3 2\n"


@pytest.mark.parametrize("body, words", [
    ("1 2 1\x00\n2 3 1\n", "NUL character"),  # crashed scipy 1.17 (segmentation fault)
    ("1 2 1\n99999999999999999999 3 1\n", "Integer out of range"),  # scipy raises OverflowError
    ("1 2 1\n2 x 1\n", "Invalid integer value"),
])
def test_matrix_market_parse_errors_name_the_file(tmp_path, body, words):
    path = write(tmp_path / "bad.mtx", MTX_HEADER + body)
    with pytest.raises(ValueError, match=words) as info:
        read_graph(path)
    assert str(info.value).startswith(f"{path}: ") and str(info.value).count(str(path)) == 1


@pytest.mark.parametrize("ending", [" ", " \t"])
def test_matrix_market_last_line_without_newline(tmp_path, ending):
    # scipy 1.17 crashes on such a last line; the reader supplies the newline.
    W = read_graph(write(tmp_path / "open.mtx", MTX_HEADER + "1 2 1\n2 3 1" + ending))
    np.testing.assert_array_equal(W.toarray(), [[0, 1, 0], [1, 0, 1], [0, 1, 0]])


@pytest.mark.parametrize("name, data", [
    ("nul.mtx", (MTX_HEADER + "1 2 1\x00\n").encode()),
    ("truncated.mtx.gz", gzip.compress((MTX_HEADER + "1 2 1\n2 3 1\n").encode())[:-12]),
])
def test_matrix_market_errors_leave_no_complaint_on_stderr(tmp_path, monkeypatch, name, data):
    complaints = []  # exceptions in __del__ methods, which Python prints as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", complaints.append)
    path = tmp_path / name
    path.write_bytes(data)

    def fail_to_read():
        # info, the error's traceback and this frame hold each other: scipy's reader of the file, which
        # the traceback keeps, lives until the garbage collector runs, long after the file was closed.
        with pytest.raises(ValueError) as info:
            read_graph(path)
        return info

    fail_to_read()
    gc.collect()
    assert complaints == []


@pytest.mark.parametrize("name, m, sizes, n_lp", [
    ("mcp100.dat-s", 100, (100,), 0),
    ("arch0.dat-s", 174, (161,), 174),
    ("control1.dat-s", 21, (10, 5), 0),
    ("truss1.dat-s", 6, (2, 2, 2, 2, 2, 2, 1), 0),
    ("control10.dat-s.xz", 1326, (100, 50), 0),
])
def test_sdplib_files(name, m, sizes, n_lp):
    p = read_sdpa(data_file("sdplib", name))
    assert (p.m, p.block_sizes, p.n_lp) == (m, sizes, n_lp)
    assert p.name == name.split(".")[0]


def test_sdplib_mcp100_is_a_maxcut_sdp():
    p = read_sdpa(data_file("sdplib", "mcp100.dat-s"))
    C = p.objective_matrix(0).toarray()  # -L/4 for a Laplacian L: zero row sums, nonpositive diagonal
    np.testing.assert_allclose(C.sum(axis=1), 0, atol=1e-12)
    assert np.all(np.diag(C) <= 0)
    np.testing.assert_array_equal(p.b, np.ones(100))
