"""Compilation and launch geometry of the GPU kernels: :func:`kernel` compiles a kernel (a template instantiation,
named by its C++ name expression) from :func:`~cvxpy_culorads.backends.gpu_sources.kernel_source` with NVRTC on
first use and keeps it for the process, per device (CuPy also caches the binaries on disk); :func:`lanes_for_rank`,
:func:`row_layout` and :func:`grid` size the launches of the kernels that give a pattern entry or a row a group of
lanes. The geometry is plain arithmetic; CuPy is imported where a kernel is compiled or the device queried, so that
the geometry can be checked where CuPy is not installed.
"""
from __future__ import annotations

import functools

from cvxpy_culorads.backends.gpu_sources import kernel_source

__all__ = ["BLOCK", "kernel", "lanes_for_rank", "row_layout", "grid", "multiprocessors"]

BLOCK = 256  # threads per block; a multiple of 32 so that no lane group straddles two warps

_MODULES: dict = {}  # name expression -> cupy.RawModule, each compiled on first use (NVRTC)
_FUNCS: dict = {}  # (device id, name expression) -> cupy.RawKernel


def kernel(name: str):
    """The kernel of C++ name expression ``name`` (``"sym_sample_kernel<int, int, 32, 8, true>"``) on the current
    device, compiled on first use."""
    import cupy

    key = (cupy.cuda.Device().id, name)
    fn = _FUNCS.get(key)
    if fn is None:
        mod = _MODULES.get(name)
        if mod is None:
            mod = _MODULES[name] = cupy.RawModule(code=kernel_source(), options=("--std=c++14",),
                                                  name_expressions=[name])
        fn = _FUNCS[key] = mod.get_function(name)
    return fn


def lanes_for_rank(r: int) -> int:
    """Lanes per entry/row: the smallest power of two >= min(r, 32)."""
    t = 1
    while t < min(max(int(r), 1), 32):
        t *= 2
    return t


def row_layout(r: int, itemsize: int) -> tuple[int, int]:
    """(T, C) of the row kernels of the product of spheres: T lanes per row, each holding C columns in registers,
    T C >= r. T is :func:`lanes_for_rank`, halved for 4-byte values (a float32 row takes half the loads of a float64
    one: two rows per warp keep as many bytes in flight); C is the smallest power of two that covers the row, so that
    few template instances serve all ranks (decision record "row-kernels-in-registers")."""
    lanes = lanes_for_rank(r)
    if itemsize == 4 and lanes > 1:
        lanes //= 2
    columns = 1
    while lanes * columns < r:
        columns *= 2
    return lanes, columns


def grid(groups: int, lanes: int) -> tuple[int]:
    """The grid of ``BLOCK``-thread blocks that gives each of ``groups`` groups its ``lanes`` lanes."""
    return (-(-(groups * lanes) // BLOCK),)


@functools.cache
def multiprocessors(device_id: int) -> int:
    """The device's streaming multiprocessors (the grid caps of the grid-stride kernels are per multiprocessor)."""
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"]
