"""The backend of a split solve: :class:`ShardedBackend` stands where a one-device backend does, its row-space
arrays split over shards, and the factories that make it.

The constraint space and the small arrays live on the first device, whole; row-space arrays are
:class:`~cvxpy_culorads.distributed.arrays.ShardedRows` and its kernel set is
:class:`~cvxpy_culorads.distributed.kernels.ShardedKernels`. :func:`sharded_backend` makes one over GPUs (NCCL
between them) or, on the CPU, simulated shards of one process; :func:`simulated_backend` holds every shard on one
device, exchanging in-process.
"""
from __future__ import annotations

import weakref

import numpy as np

from cvxpy_culorads.backends.backend import Backend, copy_to_host, gpu_available, select_backend
from cvxpy_culorads.distributed.arrays import ShardedRows, Shards
from cvxpy_culorads.distributed.communicator import InProcessCommunicator, idle_communicator, keep_idle
from cvxpy_culorads.distributed.kernels import ShardedKernels

__all__ = ["ShardedBackend", "sharded_backend", "simulated_backend"]


class ShardedBackend:
    """A backend whose row-space arrays are split over :class:`Shards`: the constraint space and the small arrays
    live on the first device (``xp``), row-space arrays are :class:`ShardedRows`. It is made unpartitioned: the split
    operator it serves chooses the bounds from the problem's coordinates and calls :meth:`partition` once, which
    makes ``shards`` and the kernel set (None before)."""

    def __init__(self, backend: Backend, device_ids, shards_of):
        self.base, self.name, self.xp, self.sparse = backend, backend.name, backend.xp, backend.sparse
        self.device_ids = device_ids
        self._shards_of = shards_of
        self.shards: Shards | None = None
        self.kernel_set: ShardedKernels | None = None

    @property
    def is_gpu(self) -> bool:
        return self.base.is_gpu

    def kernels(self) -> ShardedKernels:
        """The split kernel set (made by :meth:`partition`; None before)."""
        return self.kernel_set

    def partition(self, bounds: np.ndarray) -> Shards:
        """Split the row space at ``bounds`` (one shard per device) and make this backend's shards and kernel set."""
        self.shards = self._shards_of(bounds)
        self.kernel_set = ShardedKernels(self.shards)
        return self.shards

    @property
    def count(self) -> int:
        return len(self.device_ids)

    def asarray(self, a, dtype=None):
        return self.base.asarray(a, dtype)

    def to_host(self, a) -> np.ndarray:
        if not isinstance(a, ShardedRows):  # a small array of the first device (each step's scalars): one copy
            return self.base.to_host(a)
        return self.to_host_together([a])[0]

    def to_host_together(self, arrays) -> list:
        """NumPy copies of device arrays and ShardedRows, all copied at once (``backend.copy_to_host``); each part of a
        ShardedRows into its rows, so that no second copy joins them."""
        if not self.is_gpu:
            return [np.concatenate([np.asarray(p) for p in a.parts], axis=a.axis) if isinstance(a, ShardedRows)
                    else np.asarray(a) for a in arrays]
        outs, pairs = [], []
        for a in arrays:
            outs.append(np.empty(a.shape, a.dtype))
            if not isinstance(a, ShardedRows):
                pairs.append((a, outs[-1]))
                continue
            for s, part in enumerate(a.parts):
                rows = [slice(None)] * a.ndim
                rows[a.axis] = slice(*a.shards.rows(s))
                pairs.append((part, outs[-1][tuple(rows)]))
        copy_to_host(pairs)
        return outs

    def csr(self, matrix):
        return self.base.csr(matrix)

    def _on_each(self, function) -> list:
        if not self.is_gpu:
            return [function()]
        results = []
        for device in self.device_ids:
            with self.xp.cuda.Device(device):
                results.append(function())
        return results

    def synchronize(self) -> None:
        self._on_each(self.base.synchronize)

    def pool_bytes(self) -> int:
        """The largest memory pool of the devices (what has to fit on one)."""
        return max(self._on_each(self.base.pool_bytes))

    def release_cached_blocks(self) -> None:
        self._on_each(self.base.release_cached_blocks)

    def free_memory(self) -> int | None:
        """The bytes of a row-space array that would still fit when split like the rows: the smallest, over the
        devices, of free memory times n over the shard's rows (None on the CPU)."""
        if not self.is_gpu:
            return None
        free = self._on_each(self.base.free_memory)
        if self.shards is None:
            return self.count * min(free)
        sizes = np.diff(self.shards.bounds)
        return int(min(f * self.shards.n / max(int(size), 1) for f, size in zip(free, sizes)))

    def describe(self) -> str:
        if not self.is_gpu:
            return f"{self.count} shards on the cpu (simulated devices, NumPy/SciPy)"
        with self.xp.cuda.Device(self.device_ids[0]):
            first = self.base.describe()
        return f"{self.count} GPUs {list(self.device_ids)}, NCCL, each {first}"


def simulated_backend(device: str, devices) -> ShardedBackend:
    """As many shards as ``devices`` counts (a count, or ids whose number counts), all held by one device and exchanging
    in-process: NumPy arrays for "cpu", or all on the current GPU for "gpu" (to test and time the sharded kernels where
    only one GPU is at hand; it stands in for :func:`sharded_backend`)."""
    count = devices if isinstance(devices, int) else len(devices)
    base = select_backend(device)
    return ShardedBackend(base, (0,) * count if base.is_gpu else tuple(range(count)),
                          lambda bounds: Shards(bounds, base, None, InProcessCommunicator()))


def sharded_backend(device: str, ids: tuple[int, ...]) -> ShardedBackend:
    """The backend for the GPU ``ids`` of ``Settings.gpu_ids`` on ``device``: as many simulated shards of one process
    for "cpu", those GPUs otherwise (an error when one is not visible); the first GPU becomes current, as the
    constraint space and the small arrays live there."""
    if device == "cpu" or (device == "auto" and not gpu_available()):
        return simulated_backend("cpu", ids)
    base = select_backend("gpu", gpu_ids=ids)
    communicator = idle_communicator(ids)
    backend = ShardedBackend(base, ids, lambda bounds: Shards(bounds, base, ids, communicator))
    # not at the interpreter's exit, where there is no next solve to keep it for
    weakref.finalize(backend, keep_idle, ids, communicator).atexit = False
    return backend
