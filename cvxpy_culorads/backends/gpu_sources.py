"""The CUDA C sources of the GPU kernels, shipped as package data in ``cvxpy_culorads/backends/cuda/`` (one file per
family of kernels) and read with :mod:`importlib.resources`, once per process: :func:`kernel_source` joins the
files, in the order of :data:`CUDA_FILES`, into the one translation unit every kernel is compiled from. The files
are parts of that unit, not units of their own (a family uses the helpers of the files before it). This module
imports no CuPy, so the sources can be checked where no GPU is."""
from __future__ import annotations

import functools
from importlib.resources import files

__all__ = ["CUDA_PACKAGE", "CUDA_FILES", "cuda_file", "kernel_source"]

CUDA_PACKAGE = "cvxpy_culorads.backends.cuda"
CUDA_FILES = (  # in translation-unit order: helpers before the kernels that use them
    "lane_groups.cu",  # group_mask, group_sum: a group of T lanes within one warp
    "sampling.cu",  # sym_sample_kernel, sym_sample_pair_kernel
    "csr.cu",  # csr_matmul_kernel, add_rows_kernel (the sums of split rows' pieces)
    "grid_sum.cu",  # block_sum, grid_sum: deterministic grid-wide sums with a last-block epilogue
    "gram_schmidt.cu",  # rows_dot_kernel, rows_subtract_kernel, norm_kernel (Lanczos steps, deflations)
    "lbfgs.cu",  # lbfgs_gram_kernel, lbfgs_recursion_kernel, lbfgs_combine_kernel
    "lanczos.cu",  # lanczos_tridiagonal_kernel (the interior-point step lengths)
    "line_search.cu",  # line_search_kernel, sphere_line_search_kernel
    "sphere.cu",  # sphere_normal_kernel, sphere_tangent_kernel, sphere_retract_kernel
)


@functools.cache
def cuda_file(name: str) -> str:
    """The text of one file of :data:`CUDA_FILES`."""
    return (files(CUDA_PACKAGE) / name).read_text(encoding="utf-8")


@functools.cache
def kernel_source() -> str:
    """The translation unit: a newline, then the files with a blank line between each two. That is, to the byte,
    the text the kernels were compiled from when it was one Python string: CuPy's on-disk cache of compiled
    kernels is keyed on the text, and NVRTC's messages give line numbers in it."""
    return "\n" + "\n".join(cuda_file(name) for name in CUDA_FILES)
