"""The backend of a split solve: :class:`ShardedBackend` implements the
:class:`~cvxpy_culorads.backends.protocol.Backend` contract with its row-space arrays split over shards, and the
factories that make it, already partitioned.

The constraint space and the small arrays live on the first device, whole; row-space arrays are
:class:`~cvxpy_culorads.distributed.arrays.ShardedRows` and its kernel set is
:class:`~cvxpy_culorads.distributed.kernels.ShardedKernels`. The partition (the shards' bounds) is an argument of the
factories: the split operators say which bounds suit a problem (``ShardedSpheresOperator.bounds``,
``ShardedBlockOperator.bounds``) and then serve the backend as it is. :func:`sharded_backend` makes one over GPUs
(NCCL between them) or, on the CPU, simulated shards of one process; :func:`simulated_backend` holds every shard on
one device, exchanging in-process.
"""
from __future__ import annotations

import weakref

import numpy as np

from cvxpy_culorads.backends.backend import gpu_available, select_backend
from cvxpy_culorads.backends.protocol import Backend
from cvxpy_culorads.distributed.arrays import ShardedRows, Shards
from cvxpy_culorads.distributed.communicator import InProcessCommunicator, idle_communicator, keep_idle
from cvxpy_culorads.distributed.kernels import ShardedKernels

__all__ = ["ShardedBackend", "sharded_backend", "simulated_backend"]


class ShardedBackend:
    """The :class:`~cvxpy_culorads.backends.protocol.Backend` of rows split over ``shards``: the constraint space and
    the small arrays live on the first device (``xp`` and the modules are those of ``base``, its backend), row-space
    arrays are :class:`ShardedRows`, the kernel set is :class:`ShardedKernels` over the shards. It implements the
    whole contract; what its kernel set lacks, that set declares (``ShardedKernels.capabilities``)."""

    def __init__(self, base: Backend, shards: Shards):
        self.base, self.shards = base, shards
        self.name, self.xp, self.sparse, self.linalg = base.name, base.xp, base.sparse, base.linalg
        self.on_host, self.wide_sparse_indices, self.memory = base.on_host, base.wide_sparse_indices, base.memory
        self._kernels = ShardedKernels(shards)

    def kernels(self) -> ShardedKernels:
        return self._kernels

    def asarray(self, a, dtype=None):
        """A first-device array (the constraint space's and the small arrays' home)."""
        return self.base.asarray(a, dtype)

    def to_host(self, a) -> np.ndarray:
        if not isinstance(a, ShardedRows):  # a small array of the first device (each step's scalars): one copy
            return self.base.to_host(a)
        return self.to_host_together([a])[0]

    def to_host_together(self, arrays) -> list:
        """NumPy copies of first-device arrays and ShardedRows, all copied at once (:meth:`to_host_into`)."""
        outs = [np.empty(a.shape, a.dtype) for a in arrays]
        self.to_host_into(list(zip(arrays, outs)))
        return outs

    def to_host_into(self, pairs) -> None:
        """Each (first-device array or ShardedRows, host array of its shape) pair's values into the host array, all
        at once (``base.to_host_into``); each part of a ShardedRows into its rows, so that no second copy joins
        them."""
        parts = []
        for a, out in pairs:
            if not isinstance(a, ShardedRows):
                parts.append((a, out))
                continue
            for s, part in enumerate(a.parts):
                rows = [slice(None)] * a.ndim
                rows[a.axis] = slice(*a.shards.rows(s))
                parts.append((part, out[tuple(rows)]))
        self.base.to_host_into(parts)

    def csr(self, matrix):
        """A first-device CSR matrix."""
        return self.base.csr(matrix)

    def _on_each_device(self, function) -> list:
        """function() on each shard's device, or once where the shards share the current device."""
        if self.shards.device_ids is None:
            return [function()]
        return self.shards.each(lambda s: function())

    def synchronize(self) -> None:
        self._on_each_device(self.base.synchronize)

    def pool_bytes(self) -> int:
        """The largest memory pool of the devices (what has to fit on one)."""
        return max(self._on_each_device(self.base.pool_bytes))

    def release_cached_blocks(self) -> None:
        self._on_each_device(self.base.release_cached_blocks)

    def free_memory(self) -> int | None:
        """The bytes of a row-space array that would still fit when split like the rows: on devices of their own, the
        smallest over the shards of the device's free memory times n over the shard's rows; where the shards share
        one device, its free memory (None where unknown)."""
        free = self._on_each_device(self.base.free_memory)
        if any(f is None for f in free):
            return None
        if self.shards.device_ids is None:
            return free[0]
        sizes = np.diff(self.shards.bounds)
        return int(min(f * self.shards.n / max(int(size), 1) for f, size in zip(free, sizes)))

    def describe(self) -> str:
        if self.shards.device_ids is None:
            return f"{self.shards.k} shards simulated on one device, exchanging in-process: {self.base.describe()}"
        with self.xp.cuda.Device(self.shards.device_ids[0]):
            first = self.base.describe()
        return f"{self.shards.k} GPUs {list(self.shards.device_ids)}, NCCL, each {first}"


def simulated_backend(device: str, devices, bounds) -> ShardedBackend:
    """The rows split at ``bounds`` into as many shards as ``devices`` counts (a count, or ids whose number counts),
    all held by one device and exchanging in-process: NumPy arrays for "cpu", or all on the current GPU for "gpu" (to
    test and time the sharded kernels where only one GPU is at hand; it stands in for :func:`sharded_backend`)."""
    count = devices if isinstance(devices, int) else len(devices)
    bounds = np.asarray(bounds)
    if bounds.size != count + 1:
        raise ValueError(f"{count} shards need {count + 1} bounds, got {bounds.size}")
    base = select_backend(device)
    return ShardedBackend(base, Shards(bounds, base, None, InProcessCommunicator()))


def sharded_backend(device: str, ids: tuple[int, ...], bounds) -> ShardedBackend:
    """The backend for the GPU ``ids`` of ``Settings.gpu_ids`` on ``device``, its rows split at ``bounds`` (one shard
    per id): as many simulated shards of one process for "cpu", those GPUs otherwise (an error when one is not
    visible); the first GPU becomes current, as the constraint space and the small arrays live there."""
    if device == "cpu" or (device == "auto" and not gpu_available()):
        return simulated_backend("cpu", ids, bounds)
    if len(bounds) != len(ids) + 1:
        raise ValueError(f"{len(ids)} GPUs need {len(ids) + 1} bounds, got {len(bounds)}")
    base = select_backend("gpu", gpu_ids=ids)
    communicator = idle_communicator(ids)
    backend = ShardedBackend(base, Shards(bounds, base, ids, communicator))
    # not at the interpreter's exit, where there is no next solve to keep it for
    weakref.finalize(backend, keep_idle, ids, communicator).atexit = False
    return backend
