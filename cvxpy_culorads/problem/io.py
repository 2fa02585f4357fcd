"""Reading and writing SDPA sparse files (``.dat-s``, also gzip- or xz-compressed by suffix), and reading them from
binary streams such as standard input (compression detected by magic bytes). An SDPA file states
``max <F0, Y> s.t. <F_i, Y> = c_i, Y PSD``; :func:`read_sdpa` returns it in the solver's minimisation form
``C = -F0``, ``A_i = F_i``, ``b = c`` (so the SDPA objective is minus the reported primal objective), with every
diagonal (negative-size) block, wherever it sits in the block list, concatenated in file order into the nonnegative
variables. :func:`write_sdpa` is its exact inverse. The header is read line by line and the entry lines in one
vectorised pass; when the data are malformed the file is scanned again so that the ``ValueError`` names the
offending line as ``path:line: what``. Sizes declared beyond the host's memory are refused in the same way once the
header declares them, before anything is allocated.
The helpers :func:`open_text`, :func:`source_name`, :func:`uncompressed_name`, :func:`file_stem`, :func:`read_table`
and :func:`row_error` are shared with the graph readers of :mod:`cvxpy_culorads.models`.
"""
from __future__ import annotations

import gzip
import io
import itertools
import lzma
import os
import warnings
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads.hostmemory import available_bytes
from cvxpy_culorads.problem.sdp import SDPProblem

__all__ = ["read_sdpa", "write_sdpa", "open_text", "source_name", "uncompressed_name", "file_stem", "read_table",
           "row_error"]

_OPENERS = {".gz": gzip.open, ".xz": lzma.open}
_MAGIC_OPENERS = {b"\x1f\x8b": gzip.open, b"\xfd7zXZ\x00": lzma.open}  # streams have no suffix
# What reading raises on data that cannot be decompressed (corrupt, truncated, not gzip/xz) or decoded as UTF-8.
_DECODE_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError, UnicodeDecodeError)
# SDPA headers may wrap numbers in braces or parentheses and separate them with commas.
_PUNCTUATION = str.maketrans("{}(),'", "      ")
_ENTRY_FIELDS = "matno block i j value"
# The least a solve of any declared problem holds, whatever the settings: per variable row (a PSD block's row or a
# nonnegative variable) four float64 vectors at rank one (the factor, its gradient, a step, C times the factor), per
# constraint three (b, the multipliers, the residual). The solver's own estimates (backends/memory.py) are far
# larger; this one only refuses files that cannot be solved at all.
_BYTES_PER_ROW, _BYTES_PER_CONSTRAINT = 4 * 8, 3 * 8


# ---------------------------------------------------------------------------------------- shared helpers
@contextmanager
def open_text(path, mode: str = "rt"):
    """Open a text file for reading (``"rt"``) or writing (``"wt"``), through gzip or xz by suffix.

    ``path`` may also be a seekable binary stream (``io.BytesIO``, an open file) to read: it is read from its
    beginning, through gzip or xz when it starts with their magic bytes, and left open. Data that cannot be
    decompressed or decoded, wherever the body reads them, raise ``ValueError`` naming the file
    (:func:`source_name`); a file that cannot be opened (missing, no permission) raises ``OSError`` as usual.
    """
    if isinstance(path, (str, os.PathLike)):
        opener = _OPENERS.get(Path(path).suffix.lower(), open)
        text = opener(path, mode, encoding="utf-8")
    else:
        text = _stream_text(path)
    with text as f:
        try:
            yield f
        except _DECODE_ERRORS as exc:
            raise ValueError(f"{source_name(path)}: cannot decode the file ({exc})") from None


@contextmanager
def _stream_text(stream):
    """The text of a seekable binary stream from its beginning, decompressed by its magic bytes; the stream stays
    open."""
    stream.seek(0)
    magic = stream.read(6)
    stream.seek(0)
    decompressor = next((opener for prefix, opener in _MAGIC_OPENERS.items() if magic.startswith(prefix)), None)
    raw = stream if decompressor is None else decompressor(stream)
    text = io.TextIOWrapper(raw, encoding="utf-8")
    try:
        yield text
    finally:
        text.detach()  # closing the wrapper would close the caller's stream
        if decompressor is not None:
            raw.close()  # a decompressor over a file object leaves that object open


def source_name(path) -> str:
    """How messages name a file: its path, or a stream's ``name`` attribute (``<stdin>``), else ``<stream>``."""
    if isinstance(path, (str, os.PathLike)):
        return str(path)
    return str(getattr(path, "name", "<stream>"))


def uncompressed_name(path: str | os.PathLike) -> str:
    """The file name without folder and without a ``.gz`` / ``.xz`` suffix."""
    name = Path(path)
    return name.stem if name.suffix.lower() in _OPENERS else name.name


def file_stem(path: str | os.PathLike) -> str:
    """The file name without folder, compression suffix and extension (``mcp100`` for ``mcp100.dat-s.xz``)."""
    return Path(uncompressed_name(path)).stem


def _data_lines(path, skip: int, comments: str | None):
    """``(line number, fields)`` of the non-blank lines after the first ``skip``, comments removed."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if lineno <= skip:
                continue
            if comments is not None:
                line = line.split(comments, 1)[0]
            fields = line.split()
            if fields:
                yield lineno, fields


def read_table(f, path, skip: int, columns: int, description: str, comments: str | None = None) -> np.ndarray:
    """The rest of the open text file ``f`` as a float array of ``columns`` columns, one row per data line.

    ``skip`` is the number of lines already consumed from ``f``; blank lines (and, with ``comments``, what
    follows that character) are ignored. The fast path is ``np.loadtxt``; when it fails, the file is read
    again line by line to raise a ``ValueError`` that names the first malformed line and what it should
    hold (``description`` of the fields).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="loadtxt: input contained no data")
        try:
            table = np.loadtxt(f, ndmin=2, comments=comments)
        except ValueError:
            table = None
    if table is not None and table.size == 0:
        return np.empty((0, columns))
    if table is not None and table.shape[1] == columns:
        return table
    name = source_name(path)
    for lineno, fields in _data_lines(path, skip, comments):
        if len(fields) != columns:
            raise ValueError(f"{name}:{lineno}: expected {columns} fields ({description}), found {len(fields)}")
        for field in fields:
            try:
                float(field)
            except ValueError:
                raise ValueError(f"{name}:{lineno}: {field!r} is not a number") from None
    raise ValueError(f"{name}: the data lines after line {skip} cannot be parsed as numbers")


def row_error(path, skip: int, row: int, message: str, comments: str | None = None) -> ValueError:
    """A ``ValueError`` for row ``row`` of a table from :func:`read_table`, naming its line in the file."""
    lineno, _ = next(itertools.islice(_data_lines(path, skip, comments), row, None))
    return ValueError(f"{source_name(path)}:{lineno}: {message}")


def _leading_numbers(text: str) -> list[float]:
    """The numbers that start a header line; whatever follows them (SDPA allows a comment) is ignored."""
    numbers = []
    for token in text.translate(_PUNCTUATION).split():
        try:
            numbers.append(float(token))
        except ValueError:
            break
    return numbers


class _HeaderReader:
    """Reads the SDPA header from an open file, keeping the line number for error messages."""

    def __init__(self, f, path):
        self._f = f
        self.path = source_name(path)
        self.lineno = 0
        self._in_leading_comments = True

    def error(self, message: str, lineno: int | None = None) -> ValueError:
        return ValueError(f"{self.path}:{self.lineno if lineno is None else lineno}: {message}")

    def _next_line(self, what: str) -> str:
        # readline, not iteration, so that np.loadtxt can take over the file where the header ends.
        while line := self._f.readline():
            self.lineno += 1
            text = line.strip()
            if not text or (self._in_leading_comments and text[0] in '*"'):
                continue
            self._in_leading_comments = False
            return text
        raise self.error(f"unexpected end of file: expected {what}", self.lineno + 1)

    def numbers(self, count: int, what: str) -> np.ndarray:
        """``count`` numbers, from one line or from several consecutive lines."""
        numbers: list[float] = []
        first = None
        while len(numbers) < count:
            text = self._next_line(what)
            if first is None:
                first = self.lineno
            found = _leading_numbers(text)
            if not found:
                raise self.error(f"expected {what}, found {text[:60]!r}")
            numbers += found
        if len(numbers) > count:
            lines = f"line {first}" if first == self.lineno else f"lines {first}-{self.lineno}"
            raise self.error(f"expected {count} number(s) for {what}, found {len(numbers)} on {lines}", first)
        values = np.array(numbers)
        if not np.all(np.isfinite(values)):
            raise self.error(f"{what} contains a value that is not finite")
        return values

    def integers(self, count: int, what: str) -> np.ndarray:
        values = self.numbers(count, what)
        if not np.all(values == np.round(values)):
            raise self.error(f"{what} must be integers, found {values[values != np.round(values)][0]:g}")
        too_large = np.abs(values) >= 2**62  # beyond int64 arithmetic, and far beyond any memory
        if too_large.any():
            raise self.error(f"{what}: {values[too_large][0]:g} is too large")
        return values.astype(np.int64)


# ---------------------------------------------------------------------------------------- SDPA reader
def read_sdpa(path) -> SDPProblem:
    """Read an SDPA sparse file (``.dat-s``, ``.dat-s.gz`` or ``.dat-s.xz``) into an :class:`SDPProblem`.

    ``path`` may also be a binary stream (``sys.stdin.buffer``, ``io.BytesIO``), plain or gzip/xz-compressed; one
    that cannot seek is read into memory first. The problem is returned in minimisation form (``C = -F0``,
    ``A_i = F_i``, ``b = c``); diagonal blocks become the nonnegative variables ``x_lp``, concatenated in file
    order. Its name is the file stem (a stream's name, e.g. ``<stdin>``). Malformed files raise
    ``ValueError("path:line: what is wrong")``, and so do files whose declared sizes need more memory than the
    host has available (:func:`~cvxpy_culorads.hostmemory.available_bytes`), before the c vector is read.
    """
    path = _rereadable(path)
    with open_text(path) as f:
        header = _HeaderReader(f, path)
        (m,) = header.integers(1, "the number of constraints m")
        if m < 1:
            raise header.error(f"the number of constraints m must be at least 1, got {m}")
        (nblock,) = header.integers(1, "the number of blocks nBLOCK")
        if nblock < 1:
            raise header.error(f"the number of blocks nBLOCK must be at least 1, got {nblock}")
        sizes = header.integers(nblock, "the block sizes")
        if np.any(sizes == 0):
            raise header.error("a block size is 0")
        _check_memory(header, m, sizes)
        b = header.numbers(m, "the c vector")
        table = read_table(f, path, header.lineno, 5, _ENTRY_FIELDS)
    invalid = _first_invalid_entry(table, m, sizes)
    if invalid is not None:
        row, message = invalid
        raise row_error(path, header.lineno, row, message)
    try:
        return _assemble(table, sizes, b, file_stem(source_name(path)))
    except ValueError as exc:
        raise ValueError(f"{source_name(path)}: {exc}") from None


def _rereadable(path):
    """``path``, or a stream that cannot seek (a pipe) read into memory under its name: errors read a file twice."""
    if isinstance(path, (str, os.PathLike)) or path.seekable():
        return path
    buffer = io.BytesIO(path.read())
    buffer.name = source_name(path)
    return buffer


def _check_memory(header: _HeaderReader, m: int, sizes: np.ndarray) -> None:
    """Refuse, as bad input at the sizes' line, declared sizes whose least memory (``_BYTES_PER_ROW``,
    ``_BYTES_PER_CONSTRAINT``) exceeds what the host has available; nothing is refused when that is unknown."""
    # Python integers: products of declared sizes may overflow int64
    psd_order = sum(int(size) for size in sizes if size > 0)
    n_lp = sum(-int(size) for size in sizes if size < 0)
    need = _BYTES_PER_ROW * (psd_order + n_lp) + _BYTES_PER_CONSTRAINT * int(m)
    available = available_bytes()
    if available is not None and need > available:
        raise header.error(
            f"the declared sizes (m = {m}, PSD blocks of total order {psd_order}, {n_lp} nonnegative variables) "
            f"need at least {need / 2**30:.3g} GiB of memory to solve, but {available / 2**30:.3g} GiB are available")


def _first_invalid_entry(table: np.ndarray, m: int, sizes: np.ndarray) -> tuple[int, str] | None:
    """The row of the first entry line that breaks the format and what is wrong with it, or ``None``."""
    index = table[:, :4]
    integral = np.all(np.isfinite(index) & (index == np.round(index)), axis=1)
    # Clipping keeps the integer conversion defined; rows that needed it are flagged as non-integral or
    # out of range anyway.
    matno, blk, i, j = np.clip(np.where(integral[:, None], index, 0), -1, 2**62).astype(np.int64).T
    value = table[:, 4]
    known_block = (blk >= 1) & (blk <= sizes.size)
    block_size = sizes[np.where(known_block, blk - 1, 0)]
    size = np.abs(block_size)
    checks = (
        (~integral, "matno, block, i and j must be integers"),
        ((matno < 0) | (matno > m), "matrix number {matno} is outside 0..{m}"),
        (~known_block, "block {blk} is outside 1..{nblock}"),
        ((i < 1) | (i > size) | (j < 1) | (j > size), "entry ({i}, {j}) lies outside block {blk} of size {size}"),
        ((block_size < 0) & (i != j), "entry ({i}, {j}) is off the diagonal of block {blk}, a diagonal (LP) block"),
        (~np.isfinite(value), "value {value} is not finite"),
    )
    bad = np.logical_or.reduce([mask for mask, _ in checks])
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    message = next(message for mask, message in checks if mask[row])
    return row, message.format(matno=matno[row], blk=blk[row], i=i[row], j=j[row], size=size[row],
                               value=value[row], m=m, nblock=sizes.size)


def _symmetric(rows, cols, vals, n: int) -> sp.coo_array:
    """The symmetric matrix with these entries of one triangle (entries named twice add up)."""
    off = rows != cols
    return sp.coo_array((np.concatenate([vals, vals[off]]),
                         (np.concatenate([rows, cols[off]]), np.concatenate([cols, rows[off]]))), shape=(n, n))


def _assemble(table: np.ndarray, sizes: np.ndarray, b: np.ndarray, name: str) -> SDPProblem:
    """The :class:`SDPProblem` of validated SDPA entries (SDPA signs turned into the minimisation form)."""
    m = b.size
    matno, blk, i, j = table[:, :4].astype(np.int64).T
    blk, i, j = blk - 1, i - 1, j - 1
    value = table[:, 4]
    objective = matno == 0

    order = np.argsort(blk, kind="stable")
    bounds = np.searchsorted(blk[order], np.arange(sizes.size + 1))
    C, A = [], []
    for k in np.flatnonzero(sizes > 0):
        rows = order[bounds[k]:bounds[k + 1]]
        obj, con = rows[objective[rows]], rows[~objective[rows]]
        C.append(_symmetric(i[obj], j[obj], -value[obj], int(sizes[k])))
        A.append((matno[con] - 1, i[con], j[con], value[con]))

    lp_sizes = np.where(sizes < 0, -sizes, 0)
    n_lp = int(lp_sizes.sum())
    c_lp = A_lp = None
    if n_lp:
        lp = sizes[blk] < 0
        variable = (np.cumsum(lp_sizes) - lp_sizes)[blk[lp]] + i[lp]
        obj = objective[lp]
        c_lp = np.bincount(variable[obj], weights=-value[lp][obj], minlength=n_lp)
        A_lp = sp.coo_array((value[lp][~obj], (matno[lp][~obj] - 1, variable[~obj])), shape=(m, n_lp))
    return SDPProblem(b, C, A, block_sizes=sizes[sizes > 0], c_lp=c_lp, A_lp=A_lp, name=name)


# ---------------------------------------------------------------------------------------- SDPA writer
def write_sdpa(problem: SDPProblem, path: str | os.PathLike) -> None:
    """Write ``problem`` as an SDPA sparse file (gzip or xz by the suffix ``.gz`` / ``.xz``).

    The inverse of :func:`read_sdpa`: ``F0 = -C``, ``F_i = A_i``, ``c = b``, values with 17 significant
    digits so that reading the file back reproduces the problem exactly. The PSD blocks come first, then
    the nonnegative variables as one diagonal block. The format has no low-rank terms: they are written expanded
    (n^2 entries per term).
    """
    if problem.m == 0:
        raise ValueError("the SDPA format needs at least one constraint")
    problem = problem.expanded()
    sizes = list(problem.block_sizes) + ([-problem.n_lp] if problem.n_lp else [])
    entries = []
    for k, ((rows, cols, vals), coeff) in enumerate(zip(problem.C_coords, problem.A_coords), start=1):
        # The problem keeps the lower triangle; SDPA files customarily list the upper one.
        entries.append(_entry_rows(0, k, cols, rows, -vals))
        entries.append(_entry_rows(coeff.con + 1, k, coeff.col, coeff.row, coeff.val))
    if problem.n_lp:
        variable = np.flatnonzero(problem.c_lp)
        entries.append(_entry_rows(0, len(sizes), variable, variable, -problem.c_lp[variable]))
        A_lp = problem.A_lp.tocoo()
        entries.append(_entry_rows(A_lp.row + 1, len(sizes), A_lp.col, A_lp.col, A_lp.data))
    table = np.concatenate(entries)
    table = table[np.argsort(table[:, 0], kind="stable")]  # matrix by matrix, as SDPA files are laid out
    with open_text(path, "wt") as f:
        f.write(f"\"{' '.join(problem.name.split())}: written by cvxpy_culorads (F0 = -C, F_i = A_i, c = b)\n")
        f.write(f"{problem.m}\n{len(sizes)}\n{' '.join(map(str, sizes))}\n")
        f.write(" ".join(f"{v:.17g}" for v in problem.b) + "\n")
        np.savetxt(f, table, fmt="%d %d %d %d %.17g")


def _entry_rows(matno, block, i, j, vals) -> np.ndarray:
    """SDPA entry rows ``matno block i j value`` (1-based ``i``, ``j``) from 0-based indices."""
    return np.column_stack(np.broadcast_arrays(matno, block, i + 1, j + 1, vals)).astype(np.float64)
