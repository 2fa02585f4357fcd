"""Array backends: NumPy/SciPy on the CPU, CuPy/cupyx on the GPU, chosen OSQP-style.

A ``Backend`` bundles an array namespace (``xp``), its sparse module, and the few conversions the
solver needs, so that the algorithm is written once. ``select_backend("auto")`` takes the GPU when
CuPy imports and sees a device and the caller's ``gpu_pays`` (the driver's cost estimate, ``solver/costs.py``) agrees,
the CPU otherwise; the environment variable ``CULORADS_DEVICE`` (``cpu`` or ``gpu``) overrides ``auto``. Asking
for ``gpu`` when none is usable raises an error that says why.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import scipy.sparse

from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import Kernels
from cvxpy_culorads.hostpasses import map_chunks, on_own_threads

__all__ = ["Backend", "available_devices", "copy_to_host", "gpu_available", "kernels_for", "requested_device",
           "select_backend"]

ENV_DEVICE = "CULORADS_DEVICE"


@dataclass(frozen=True)
class Backend:
    """An array namespace and its sparse module."""

    name: str  # "cpu" or "gpu"
    xp: ModuleType
    sparse: ModuleType

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        """A NumPy copy of a device array (identity on the CPU)."""
        return a.get() if self.is_gpu else np.asarray(a)

    def to_host_together(self, arrays) -> list:
        """:meth:`to_host` of each array, the copies at once (:func:`copy_to_host`)."""
        if not self.is_gpu:
            return [np.asarray(a) for a in arrays]
        outs = [np.empty(a.shape, a.dtype) for a in arrays]
        copy_to_host(list(zip(arrays, outs)))
        return outs

    def csr(self, matrix: scipy.sparse.sparray):
        """A host ``scipy.sparse`` matrix as a CSR matrix of this backend."""
        matrix = scipy.sparse.csr_matrix(matrix)
        if not self.is_gpu:
            return matrix
        return self.sparse.csr_matrix(matrix)

    def synchronize(self) -> None:
        if self.is_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def pool_bytes(self) -> int:
        """Device bytes held by CuPy's memory pool, in use or cached for reuse (0 on the CPU)."""
        return int(self.xp.get_default_memory_pool().total_bytes()) if self.is_gpu else 0

    def release_cached_blocks(self) -> None:
        """Return the pool's cached, unused blocks to the device (no-op on the CPU)."""
        if self.is_gpu:
            self.xp.get_default_memory_pool().free_all_blocks()

    def free_memory(self) -> int | None:
        """Bytes the solver can still allocate on the device (free memory plus CuPy's cached blocks);
        None on the CPU, where the operating system manages memory."""
        if not self.is_gpu:
            return None
        free, _ = self.xp.cuda.runtime.memGetInfo()
        pool = self.xp.get_default_memory_pool()
        return int(free + pool.free_bytes())

    def kernels(self) -> Kernels:
        """A kernel set for this backend's arrays."""
        return _kernel_set(self.name)

    def describe(self) -> str:
        if not self.is_gpu:
            return "cpu (NumPy/SciPy)"
        props = self.xp.cuda.runtime.getDeviceProperties(self.xp.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"gpu ({name}, CuPy {self.xp.__version__})"


def _kernel_set(name: str) -> Kernels:
    if name == "gpu":
        from cvxpy_culorads.backends.gpu_kernels import GpuKernels  # imports CuPy: only where a GPU is used
        return GpuKernels()
    return CpuKernels()


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
        return Backend("cpu", np, scipy.sparse)
    if device == "gpu":
        usable, reason = _gpu_probe()
        if not usable:
            raise RuntimeError(f"device='gpu' was requested but {reason}; use device='cpu' or install "
                               "CuPy for your CUDA version (pip install 'cvxpy_culorads[gpu]')")
        import cupy
        import cupyx.scipy.sparse
        if gpu_ids is not None:
            visible = cupy.cuda.runtime.getDeviceCount()
            if max(gpu_ids) >= visible:
                raise ValueError(f"devices names GPU ids {list(gpu_ids)} but {visible} GPU(s) are visible")
            cupy.cuda.Device(gpu_ids[0]).use()
        return Backend("gpu", cupy, cupyx.scipy.sparse)
    raise ValueError(f"device must be 'auto', 'cpu' or 'gpu', got {device!r}")
