"""The backend contract: what the solver asks of the device its arrays live on.

A :class:`Backend` bundles an array namespace (``xp``), its sparse and dense linear-algebra modules, the conversions
between its arrays and the host's, the device's memory and its kernel set, so that the algorithm is written once.
What differs between devices and matters to the algorithm is stated as a capability (``on_host``,
``wide_sparse_indices``), never as the device's name. It is implemented by
:class:`~cvxpy_culorads.backends.backend.CpuBackend` (NumPy/SciPy), :class:`~cvxpy_culorads.backends.backend.GpuBackend`
(CuPy) and, with rows split over several devices, :class:`~cvxpy_culorads.distributed.ShardedBackend`.
"""
from __future__ import annotations

from types import ModuleType
from typing import Protocol, runtime_checkable

import numpy as np

from cvxpy_culorads.backends.kernels import Kernels

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """The contract of a backend, as the solver uses it. Arrays are the backend's (``xp``'s); host arrays are NumPy's.

    ``name``: the device kind, "cpu" or "gpu" (reports and the ``device`` setting; no code branches on it).
    ``on_host``: whether the arrays live in host memory and their arithmetic runs on the host's cores (BLAS
    threads then do the work, and reading a value back costs no synchronisation).
    ``wide_sparse_indices``: whether ``sparse`` takes 64-bit indices (matrices of 2^31 entries or more).
    ``memory``: what :meth:`free_memory` measures, in words for messages ("host memory", "device memory").
    """

    name: str
    xp: ModuleType
    sparse: ModuleType
    linalg: ModuleType  # SciPy's dense linear algebra for ``xp``'s arrays (scipy.linalg, cupyx.scipy.linalg)
    on_host: bool
    wide_sparse_indices: bool
    memory: str

    def asarray(self, a, dtype=None):
        """``a`` (a host or backend array, or a sequence) as an array of the backend."""

    def to_host(self, a) -> np.ndarray:
        """A NumPy array of ``a``'s values (the array itself where it lives on the host)."""

    def to_host_together(self, arrays) -> list:
        """:meth:`to_host` of each array, the copies overlapped where the device can (:meth:`to_host_into`)."""

    def to_host_into(self, pairs) -> None:
        """Each (backend array, NumPy array of its shape) pair's values into the NumPy array, the copies overlapped
        where the device can."""

    def csr(self, matrix):
        """A host ``scipy.sparse`` matrix as a CSR matrix of ``sparse``."""

    def synchronize(self) -> None:
        """Wait for the work queued on the device (nothing to wait for on the host)."""

    def pool_bytes(self) -> int:
        """Bytes the backend's memory pool holds, in use or cached for reuse (0 without a pool)."""

    def release_cached_blocks(self) -> None:
        """Hand the pool's cached, unused blocks back to the device (nothing without a pool)."""

    def free_memory(self) -> int | None:
        """Bytes the solver can still allocate for its arrays, or None where it is unknown (then every estimate
        fits: ``backends/memory.py``)."""

    def kernels(self) -> Kernels:
        """The kernel set for this backend's arrays."""

    def describe(self) -> str:
        """The device in words, for the log and ``Result.device``."""
