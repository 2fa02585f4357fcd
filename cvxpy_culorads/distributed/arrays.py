"""Row-space arrays and matrices split by rows over the shards, and the halo exchange between them.

:class:`Shards` is the partition's runtime side: shard s holds the rows [bounds[s], bounds[s + 1]) of every
row-space array (the factor R, the gradient, the L-BFGS pairs, the Lanczos vectors) on its device, with its own
kernel set and a :class:`~cvxpy_culorads.distributed.communicator.Communicator` between them. A
:class:`ShardedRows` is the list of a row-space array's parts, each on its shard's device. A symmetric matrix such
as C is kept by each shard as its rows in two CSR parts (:class:`ShardedMatrix`): over its own rows, and over its
*halo* (:class:`HaloPart`), the rows of other shards that its rows reference; :class:`HaloExchange` says which rows
each shard sends to which, so that a product multiplies the own rows while the halo rows are in transit. Each shard
builds its rows of C on its own device from the problem's coordinates (:func:`shard_matrices`).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.backends.backend import Backend, kernels_for
from cvxpy_culorads.distributed.communicator import Communicator
from cvxpy_culorads.distributed.partition import referenced_rows
from cvxpy_culorads.hostpasses import map_chunks
from cvxpy_culorads.operators.compressed import absolute_row_sums, coordinate_csr, gershgorin_radii, index_type_for

__all__ = ["Shards", "ShardedRows", "ShardedMatrix", "HaloPart", "HaloExchange", "shard_matrices", "own_and_halo"]

COMPRESSED_HALO_ROWS = 0.5  # a halo part keeps only its rows with entries when they are fewer (``HaloPart``)
BUILD_CHUNK = 1 << 25  # coordinates (24 bytes each) moved to a device at a time while its shard's rows are picked


class Shards:
    """The partition of the row space and the shards' devices: shard s holds rows [bounds[s], bounds[s + 1]) on
    ``device_ids[s]`` (None on the CPU), with its own kernel set; ``communicator`` moves data between them."""

    def __init__(self, bounds, backend: Backend, device_ids, communicator: Communicator):
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.k, self.n = self.bounds.size - 1, int(self.bounds[-1])
        self.backend, self.device_ids, self.communicator = backend, device_ids, communicator
        self.kernels = [kernels_for(backend) for _ in range(self.k)]

    def rows(self, s: int) -> tuple[int, int]:
        return int(self.bounds[s]), int(self.bounds[s + 1])

    def size(self, s: int) -> int:
        """Shard s's number of rows."""
        return int(self.bounds[s + 1] - self.bounds[s])

    def on(self, s: int):
        """The context in which shard s's arrays are allocated and its kernels launched."""
        if self.device_ids is None:
            return contextlib.nullcontext()
        return self.backend.xp.cuda.Device(self.device_ids[s])

    def map(self, function, *arrays, axis: int = 0) -> ShardedRows:
        """:meth:`each`'s results as a ShardedRows split along ``axis``."""
        return ShardedRows(self.each(function, *arrays), self, axis)

    def each(self, function, *arrays) -> list:
        """[function(s, the parts of ``arrays`` on shard s)] over the shards; an array is a ShardedRows or a list of
        per-shard values."""
        results = []
        for s in range(self.k):
            with self.on(s):
                results.append(function(s, *(a.parts[s] if isinstance(a, ShardedRows) else a[s] for a in arrays)))
        return results

    def split(self, array) -> ShardedRows:
        """A host (or first-device) array of n rows, split by rows onto the shards."""
        host = array if isinstance(array, np.ndarray) else self.backend.to_host(array)
        return self.map(lambda s: self.backend.xp.asarray(host[slice(*self.rows(s))]))

    def to_first(self, array, out=None):
        """A device array (of any shard) as an array on the first shard's device (itself when it lives there),
        written into ``out`` (an array there) when given. Read it only: it may be the array given."""
        with self.on(0):
            if self.device_ids is not None:
                return _copy_to_current(array, out)
            if out is None:
                return self.backend.xp.asarray(array)
            out[...] = array
            return out

    def from_first(self, s: int, array):
        """A first-device array as an array on shard s's device (call within ``on(s)``; the array itself where it
        lives there already). Read it only."""
        return array if self.device_ids is None else _copy_to_current(array)

    @staticmethod
    def total(values) -> float:
        """The sum of per-shard device scalars, on the host."""
        return float(sum(float(v) for v in values))


def _whole(key, n: int) -> bool:
    """Whether the index ``key`` is a slice over all of 0..n-1."""
    return (isinstance(key, slice) and key.step in (None, 1) and (key.start or 0) == 0
            and (key.stop is None or key.stop >= n))


def _copy_to_current(array, out=None):
    """A C-contiguous CuPy array on the current device: the array itself when it lives there and no ``out`` is given,
    else a copy (a peer copy from another device) into ``out`` or new memory, queued in stream order without the host
    waiting: the current stream waits for the work queued on the array's device, and that device's stream then waits
    for the copy, so that memory freed there after this call is not handed to new work before the copy has read it
    (the pool reuses a freed block in its own stream's order)."""
    import cupy
    if array.device.id == cupy.cuda.Device().id:
        if out is None:
            return array
        out[...] = array
        return out
    out = cupy.empty(array.shape, array.dtype) if out is None else out
    stream = cupy.cuda.get_current_stream()
    with array.device:
        source = cupy.cuda.get_current_stream()
        stream.wait_event(source.record())
    out.data.copy_from_device_async(array.data, array.nbytes, stream)
    copied = stream.record()
    with array.device:
        source.wait_event(copied)
    return out


class ShardedRows:
    """A row-space array split by rows (``axis`` 0: n x ... arrays such as the factor; ``axis`` 1: a count x n stack
    of vectors such as a Lanczos basis), one part per shard on the shard's device. It supports what the phases do
    with row-space arrays outside the kernels: ``copy``, scalar arithmetic, sums of two, indexing a stack of
    vectors, and slicing the whole row range; everything else goes through :class:`ShardedKernels`."""

    __slots__ = ("parts", "shards", "axis")

    def __init__(self, parts, shards: Shards, axis: int = 0):
        self.parts, self.shards, self.axis = list(parts), shards, axis

    @property
    def shape(self) -> tuple:
        shape = list(self.parts[0].shape)
        shape[self.axis] = sum(part.shape[self.axis] for part in self.parts)
        return tuple(shape)

    @property
    def ndim(self) -> int:
        return self.parts[0].ndim

    @property
    def dtype(self):
        return self.parts[0].dtype

    def copy(self) -> ShardedRows:
        return self.shards.map(lambda s, p: p.copy(), self, axis=self.axis)

    def sum(self) -> float:
        return self.shards.total(self.shards.each(lambda s, p: p.sum(), self))

    def _elementwise(self, function) -> ShardedRows:
        return self.shards.map(lambda s, p: function(p), self, axis=self.axis)

    def __mul__(self, other) -> ShardedRows:
        """Times a scalar, or entrywise times another ShardedRows of the same split."""
        if isinstance(other, ShardedRows):
            return self.shards.map(lambda s, p, q: p * q, self, other, axis=self.axis)
        return self._elementwise(lambda p: p * other)

    __rmul__ = __mul__

    def __truediv__(self, scalar) -> ShardedRows:
        return self._elementwise(lambda p: p / scalar)

    def __add__(self, other: ShardedRows) -> ShardedRows:
        return self.shards.map(lambda s, p, q: p + q, self, other, axis=self.axis)

    def __sub__(self, other: ShardedRows) -> ShardedRows:
        return self.shards.map(lambda s, p, q: p - q, self, other, axis=self.axis)

    def __itruediv__(self, scalar) -> ShardedRows:
        self.shards.each(lambda s, p: p.__itruediv__(scalar), self)
        return self

    def __getitem__(self, key) -> ShardedRows:
        if self.axis == 1:  # a vector, or a range of vectors, of a stack
            axis = 0 if isinstance(key, (int, np.integer)) else 1
            return ShardedRows([part[key] for part in self.parts], self.shards, axis)
        if _whole(key, self.shards.n):
            return self  # the whole row range (the one PSD block of a sharded problem)
        raise IndexError(f"a row-sharded array takes the whole row range only, got {key!r}")

    def __setitem__(self, key, value: ShardedRows) -> None:
        if self.axis != 1:
            raise IndexError("only a stack of vectors takes assignments")
        for s in range(self.shards.k):
            with self.shards.on(s):
                self.parts[s][key] = value.parts[s]


class ShardedMatrix:
    """Shard s's rows of a symmetric matrix in two parts: ``own[s]``, a CSR matrix over the shard's own rows (local
    numbering), and ``halo[s]``, a :class:`HaloPart` over its halo (``exchange.halo_rows[s]``, global rows ascending;
    None for an empty halo), so that a product runs on the own rows while the halo rows are in transit, and adds the
    halo's part when they have arrived. The halo rows travel as ``halo_dtype`` (float32 rounds them: half the bytes,
    and a relative error of at most 2^-24 on each term of the halo's part)."""

    def __init__(self, own: list, halo: list, exchange: HaloExchange, shape: tuple[int, int],
                 halo_dtype=np.float64):
        self.own, self.halo, self.exchange, self.shape = own, halo, exchange, shape
        self.halo_dtype = np.dtype(halo_dtype)

    def with_halo_dtype(self, halo_dtype) -> ShardedMatrix:
        """The same matrix (its parts shared) with its halo rows travelling as ``halo_dtype``."""
        return ShardedMatrix(self.own, self.halo, self.exchange, self.shape, halo_dtype)

    def __getitem__(self, key) -> ShardedMatrix:
        if not all(_whole(k, self.shape[0]) for k in key):
            raise IndexError("a row-sharded matrix takes the whole block only")
        return self

    def gershgorin_lower(self) -> float:
        """min_i (S_ii - sum_{j != i} |S_ij|): a lower bound on the eigenvalues."""
        shards = self.exchange.shards

        def lower(s, own, halo):
            xp = shards.backend.xp
            diagonal = own.diagonal()
            if not diagonal.size:
                return math.inf
            outside = 0.0 if halo is None else halo.absolute_row_sums(diagonal.size, xp)
            return float(xp.min(diagonal - gershgorin_radii(own, xp) - outside))
        return min(shards.each(lower, self.own, self.halo))


class HaloExchange:
    """Which rows each shard sends to which: shard s receives ``halo_rows[s]`` (ascending), of which those in shard t
    form the contiguous slice ``receive[s][t]`` of its halo buffer; shard t sends them from its local rows
    ``send[t][s]``."""

    def __init__(self, shards: Shards, halo_rows: list):
        self.shards, self.halo_rows = shards, halo_rows
        self.receive, self.send = [], [dict() for _ in range(shards.k)]
        for s in range(shards.k):
            slices = {}
            for t in range(shards.k):
                lo, hi = shards.rows(t)
                start, stop = np.searchsorted(halo_rows[s], [lo, hi])
                if t != s and stop > start:
                    slices[t] = slice(int(start), int(stop))
                    with shards.on(t):
                        self.send[t][s] = shards.backend.xp.asarray(halo_rows[s][start:stop] - lo)
            self.receive.append(slices)

    def start(self, V: ShardedRows, dtype=np.float64):
        """Starts moving each shard's halo rows of V, as ``dtype``, into a buffer of its own: returns (the buffers,
        the exchange's handle); the buffers hold the rows once ``handle.wait()`` was called (in stream order on
        GPUs)."""
        shards, xp = self.shards, self.shards.backend.xp
        buffers, sends = [], {}
        for s in range(shards.k):
            with shards.on(s):
                own = V.parts[s]
                buffers.append(xp.empty((self.halo_rows[s].size,) + own.shape[1:], dtype))
                for target, index in self.send[s].items():
                    sends[s, target] = shards.kernels[s].gather_rows(own, index, dtype)
        transfers = [(source, sends[source, s], s, buffers[s][where])
                     for s in range(shards.k) for source, where in self.receive[s].items()]
        return buffers, shards.communicator.start_exchange(transfers)


@dataclass(frozen=True)
class HaloPart:
    """A shard's entries in its halo columns: ``matrix``, a CSR matrix over the halo buffer's columns, holds the
    shard's rows ``rows`` (local numbers, ascending, on the shard's device), or every row of the shard when ``rows``
    is None. Kept to the rows that have a halo entry when they are fewer than ``COMPRESSED_HALO_ROWS`` of the
    shard's: the product then reads and writes only those rows of its output, where the whole form walks every row
    and reads and writes the output once more (on a graph with locality few rows have a halo entry, on a random one
    nearly all: docs/decisions/distributed-shard-build.md)."""

    matrix: object
    rows: object = None

    def add_product(self, kernels, buffer, out, alpha=1.0) -> None:
        """out += alpha * (these entries) @ buffer, ``buffer`` holding the halo rows."""
        if self.rows is None:
            kernels.csr_matmul(self.matrix, buffer, out=out, alpha=alpha, addend=out, beta=1.0)
        else:
            out[self.rows] = kernels.csr_matmul(self.matrix, buffer, alpha=alpha, addend=out[self.rows], beta=1.0)

    def absolute_row_sums(self, size: int, xp):
        """sum_j |M_ij| over the halo columns, for each of the shard's ``size`` rows."""
        sums = absolute_row_sums(self.matrix, xp)
        if self.rows is None:
            return sums
        whole = xp.zeros(size)
        whole[self.rows] = sums
        return whole


def shard_matrices(backend: Backend, coords, n: int, lo: int, hi: int):
    """Rows lo..hi-1 of the symmetric n x n matrix whose lower triangle has the unique host coordinates ``coords``
    (rows, cols, vals), built on the current device: (their own columns, their halo columns, the halo rows), a CSR
    matrix of ``backend`` over the local numbering of [lo, hi), a :class:`HaloPart` over the halo rows (every outside
    row these rows reference, ascending, on the host; None for no halo), each row's entries by column. Only the
    entries these rows are made of travel (:func:`_shard_pieces`), in chunks of ``BUILD_CHUNK``, so that neither the
    host nor any device holds the whole matrix (why not built on the host and split there:
    docs/decisions/distributed-shard-build.md)."""
    xp = backend.xp
    local, column, value = [], [], []
    for piece in _shard_pieces(coords, lo, hi):
        r, c, v = (xp.asarray(a) for a in piece)
        lower = (r >= lo) & (r < hi)  # entries of the lower triangle in these rows, and the mirrors of the others
        mirrored = (c >= lo) & (c < hi) & (r != c)
        local += [r[lower] - lo, c[mirrored] - lo]
        column += [c[lower], r[mirrored]]
        value += [v[lower], v[mirrored]]
    local, column, value = (xp.concatenate(parts) if parts else xp.empty(0, dtype)
                            for parts, dtype in ((local, np.int64), (column, np.int64), (value, np.float64)))
    return own_and_halo(backend, local, column, value, n, lo, hi)


def own_and_halo(backend: Backend, local, column, value, n: int, lo: int, hi: int):
    """The unique entries (local row, global column, value) of rows lo..hi-1 of an n x n matrix, arrays of
    ``backend`` on the current device, as :func:`shard_matrices` returns them: (own columns, :class:`HaloPart` or
    None, the halo rows on the host)."""
    xp = backend.xp
    size = hi - lo
    inside = (column >= lo) & (column < hi)
    outside = ~inside
    across_columns = column[outside]
    halo = referenced_rows(across_columns, n, xp)
    index_type = index_type_for(max(size, halo.size, value.size))
    position = xp.empty(n, index_type)  # a halo row's place in the halo buffer
    position[halo] = xp.arange(halo.size, dtype=index_type)
    own = coordinate_csr(backend, local[inside], column[inside] - lo, value[inside], (size, size), index_type)
    if not halo.size:
        return own, None, backend.to_host(halo)
    across_rows, touched = local[outside], None
    with_halo = referenced_rows(across_rows, size, xp)
    if with_halo.size < COMPRESSED_HALO_ROWS * size:
        touched = with_halo.astype(index_type)
        row_position = xp.empty(size, index_type)
        row_position[touched] = xp.arange(touched.size, dtype=index_type)
        across_rows = row_position[across_rows]
    across = coordinate_csr(backend, across_rows, position[across_columns], value[outside],
                            (size if touched is None else touched.size, halo.size), index_type)
    return own, HaloPart(across, touched), backend.to_host(halo)


def _shard_pieces(coords, lo: int, hi: int):
    """The host coordinates (rows, cols, vals) of the lower triangle, sorted by row (``SDPProblem``'s order), that
    rows lo..hi-1 of the symmetric matrix are made of, in pieces of at most ``BUILD_CHUNK`` entries: the run of
    entries in these rows, then the entries of later rows whose column lies in [lo, hi) (mirrored, they are entries
    of these rows), picked on the host's pool of threads. Only these go to the device: the last shard's pieces begin
    at its first row, and on a graph numbered with locality the other shards pick few of the later rows' entries."""
    rows, cols, vals = coords
    start, stop = (int(i) for i in np.searchsorted(rows, [lo, hi]))
    for begin in range(start, stop, BUILD_CHUNK):
        piece = slice(begin, min(begin + BUILD_CHUNK, stop))
        yield rows[piece], cols[piece], vals[piece]
    for begin in range(stop, rows.size, BUILD_CHUNK):
        piece = slice(begin, min(begin + BUILD_CHUNK, rows.size))
        later = cols[piece]
        picked = np.concatenate(map_chunks(lambda s, c=later: s.start + np.flatnonzero((c[s] >= lo) & (c[s] < hi)),
                                           later.size))
        if picked.size:
            yield rows[piece][picked], later[picked], vals[piece][picked]
