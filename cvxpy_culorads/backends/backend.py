"""Array backends: NumPy/SciPy on the CPU, CuPy/cupyx on the GPU, chosen OSQP-style.

:class:`CpuBackend` and :class:`GpuBackend` implement the :class:`~cvxpy_culorads.backends.protocol.Backend` contract
(re-exported here), so that the algorithm is written once. ``select_backend("auto")`` takes the GPU when CuPy imports
and sees a device and the caller's ``gpu_pays`` (the driver's cost estimate, ``solver/costs.py``) agrees, the CPU
otherwise; the environment variable ``CULORADS_DEVICE`` (``cpu`` or ``gpu``) overrides ``auto``. Asking for ``gpu``
when none is usable raises an error that says why.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import scipy.linalg
import scipy.sparse

from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernel_cache import (
    archive_name,
    cache_directory,
    prebuilt_archive,
    seed_kernel_cache,
)
from cvxpy_culorads.backends.kernels import Kernels
from cvxpy_culorads.backends.protocol import Backend
from cvxpy_culorads.hostmemory import available_bytes
from cvxpy_culorads.hostpasses import map_chunks, on_own_threads

__all__ = ["Backend", "CpuBackend", "GpuBackend", "available_devices", "copy_to_host", "gpu_available",
           "kernels_for", "requested_device", "select_backend"]

ENV_DEVICE = "CULORADS_DEVICE"


class CpuBackend:
    """NumPy and SciPy on the host. ``free_memory`` is the host memory this process may still use
    (:func:`~cvxpy_culorads.hostmemory.available_bytes`), so the memory estimates refuse or narrow a solve on the
    CPU as they do on a GPU."""

    name = "cpu"
    xp = np
    sparse = scipy.sparse
    linalg = scipy.linalg
    on_host = True
    wide_sparse_indices = True
    memory = "host memory"

    def asarray(self, a, dtype=None):
        return np.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        return np.asarray(a)

    def to_host_together(self, arrays) -> list:
        return [np.asarray(a) for a in arrays]

    def to_host_into(self, pairs) -> None:
        for array, out in pairs:
            out[...] = array

    def csr(self, matrix: scipy.sparse.sparray):
        return scipy.sparse.csr_matrix(matrix)

    def synchronize(self) -> None:
        """Nothing is queued: NumPy's operations return when done."""

    def pool_bytes(self) -> int:
        return 0  # NumPy keeps no pool

    def release_cached_blocks(self) -> None:
        """No pool to release."""

    def free_memory(self) -> int | None:
        return available_bytes()

    def kernels(self) -> Kernels:
        return CpuKernels()

    def describe(self) -> str:
        return "cpu (NumPy/SciPy)"


@functools.cache
def _seed_kernels_for(arch: str) -> None:
    """Seed CuPy's kernel cache with the prebuilt kernels of ``arch``, once per process and architecture."""
    import cupy
    name = archive_name(cupy.__version__, cupy.cuda.nvrtc.getVersion(), arch)
    seed_kernel_cache(prebuilt_archive(name), cache_directory())


class GpuBackend:
    """CuPy and cupyx on the current CUDA device. Operations are queued on the device's stream; ``free_memory`` is
    the device's free memory plus the blocks CuPy's pool caches for reuse."""

    name = "gpu"
    on_host = False
    wide_sparse_indices = False  # cupyx.scipy.sparse takes 32-bit indices only
    memory = "device memory"

    def __init__(self):
        import cupy
        import cupyx.scipy.linalg
        import cupyx.scipy.sparse
        self.xp, self.sparse, self.linalg = cupy, cupyx.scipy.sparse, cupyx.scipy.linalg
        _seed_kernels_for(f"sm_{cupy.cuda.Device().compute_capability}")

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        return a.get()

    def to_host_together(self, arrays) -> list:
        outs = [np.empty(a.shape, a.dtype) for a in arrays]
        self.to_host_into(list(zip(arrays, outs)))
        return outs

    def to_host_into(self, pairs) -> None:
        """The copies at once, each on a thread of its own (:func:`copy_to_host`)."""
        copy_to_host(pairs)

    def csr(self, matrix: scipy.sparse.sparray):
        return self.sparse.csr_matrix(scipy.sparse.csr_matrix(matrix))

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def pool_bytes(self) -> int:
        return int(self.xp.get_default_memory_pool().total_bytes())

    def release_cached_blocks(self) -> None:
        self.xp.get_default_memory_pool().free_all_blocks()

    def free_memory(self) -> int | None:
        free, _ = self.xp.cuda.runtime.memGetInfo()
        return int(free + self.xp.get_default_memory_pool().free_bytes())

    def kernels(self) -> Kernels:
        from cvxpy_culorads.backends.gpu_kernels import GpuKernels  # compiles CUDA sources: only where a GPU is used
        return GpuKernels()

    def describe(self) -> str:
        props = self.xp.cuda.runtime.getDeviceProperties(self.xp.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"gpu ({name}, CuPy {self.xp.__version__})"


def kernels_for(backend) -> Kernels:
    """The kernel set of ``backend`` (one device's or a split backend's)."""
    return backend.kernels()


STAGE_BYTES = 64 << 20  # a pinned staging buffer of copy_to_host; each array copied takes two


def copy_to_host(pairs) -> None:
    """Copies each (CuPy array, NumPy array of its shape) pair's device array into the host array, each pair on a
    thread of its own, queued on the stream current for its array's device here (after the work that wrote it).

    A copy into fresh pageable memory has the CUDA driver map and fill the pages on one thread, and more threads
    copying pieces of one array do not help. So an array larger than a staging buffer goes through two pinned ones
    of ``STAGE_BYTES`` (CuPy's pinned pool keeps them for the next copy): the device fills one while the host's pool
    of threads copies the other into place, mapping the pages in parallel (decision record
    "answer-copy-and-communicators")."""
    import cupy
    streams = []
    for device_array, _ in pairs:
        with device_array.device:
            streams.append(cupy.cuda.get_current_stream())

    def copy(pair_and_stream):
        (device_array, host), stream = pair_and_stream
        with device_array.device:
            contiguous = host.flags.c_contiguous and device_array.flags.c_contiguous
            if contiguous and device_array.nbytes > STAGE_BYTES:
                _staged_copy(device_array.reshape(-1), host.reshape(-1), stream)
            elif contiguous:
                device_array.get(stream=stream, out=host)
            else:
                host[...] = device_array.get(stream=stream)

    on_own_threads(copy, zip(pairs, streams))


def _staged_copy(source, target: np.ndarray, stream) -> None:
    """The flat contiguous device array ``source`` into the flat host array ``target`` through two pinned buffers."""
    import cupyx
    piece = max(1, STAGE_BYTES // source.itemsize)
    buffers = [cupyx.empty_pinned(piece, source.dtype) for _ in range(2)]
    starts = range(0, source.size, piece)
    done = []

    def queue(i):
        lo = starts[i]
        hi = min(lo + piece, source.size)
        source[lo:hi].get(stream=stream, out=buffers[i % 2][:hi - lo], blocking=False)
        done.append(stream.record())

    for i in range(min(2, len(starts))):
        queue(i)
    for i, lo in enumerate(starts):
        done[i].synchronize()
        staged = buffers[i % 2]
        map_chunks(lambda s, lo=lo, staged=staged: np.copyto(target[lo + s.start:lo + s.stop], staged[s]),
                   min(piece, source.size - lo))
        if i + 2 < len(starts):
            queue(i + 2)


@functools.lru_cache(maxsize=1)
def _gpu_probe() -> tuple[bool, str]:
    """(usable, reason) for the CuPy backend; cached because probing initialises CUDA."""
    try:
        import cupy
        import cupyx.scipy.sparse  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return False, f"CuPy is not importable ({exc.__class__.__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"CuPy sees no CUDA device ({exc.__class__.__name__}: {exc})"
    if count < 1:
        return False, "CuPy sees no CUDA device"
    return True, ""


def gpu_available() -> bool:
    return _gpu_probe()[0]


def available_devices() -> tuple[str, ...]:
    return ("gpu", "cpu") if gpu_available() else ("cpu",)


def requested_device(device: str = "auto") -> str:
    """``device`` ("auto", "cpu" or "gpu") with ``CULORADS_DEVICE`` in place of "auto" where it is set."""
    if device == "auto":
        device = os.environ.get(ENV_DEVICE, "auto").strip().lower() or "auto"
        if device not in ("auto", "cpu", "gpu"):
            raise ValueError(f"{ENV_DEVICE}={device!r}: expected 'cpu' or 'gpu'")
    return device


def select_backend(device: str = "auto", gpu_pays=None, gpu_ids: tuple[int, ...] | None = None) -> Backend:
    """The backend for ``device`` in {"auto", "cpu", "gpu"}; for "auto" (after ``CULORADS_DEVICE``), the GPU when
    one is usable and ``gpu_pays()`` is true (or ``gpu_pays`` is None). ``gpu_ids``: the GPUs the solve will use (a
    ValueError when one is not visible), the first made current; None: the current one."""
    device = requested_device(device)
    if device == "auto":
        device = "gpu" if gpu_available() and (gpu_pays is None or gpu_pays()) else "cpu"
    if device == "cpu":
        return CpuBackend()
    if device == "gpu":
        usable, reason = _gpu_probe()
        if not usable:
            raise RuntimeError(f"device='gpu' was requested but {reason}; use device='cpu' or install "
                               "CuPy for your CUDA version (pip install 'cvxpy_culorads[gpu]')")
        import cupy
        if gpu_ids is not None:
            visible = cupy.cuda.runtime.getDeviceCount()
            if max(gpu_ids) >= visible:
                raise ValueError(f"devices names GPU ids {list(gpu_ids)} but {visible} GPU(s) are visible")
            cupy.cuda.Device(gpu_ids[0]).use()
        return GpuBackend()
    raise ValueError(f"device must be 'auto', 'cpu' or 'gpu', got {device!r}")
