"""The hot kernels, with one NumPy reference twin each.

Two operations dominate every iteration of both phases:

- the *sampled symmetric product*: for positions p = (row_p, col_p) of the pattern Omega,
  ``w_p = (U[row_p] . V[col_p] + U[col_p] . V[row_p]) / 2``, i.e. sym(U V') sampled on Omega, in
  |Omega| * r flops instead of n^2 r (two pairs at once for the line search, which reads the
  factors once);
- the *row-major CSR times dense product* ``S @ V`` with V stored row-major (n x r, C order).

``kernels_for(backend)`` returns the implementation for a backend: NumPy/SciPy on the CPU; CuPy
``RawKernel``s on the GPU (one warp per pattern entry or matrix row, lanes over the rank, so every
access to a factor row is contiguous). The CPU versions are the references the GPU tests compare with.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CpuKernels", "kernels_for"]

_CHUNK = 1 << 16  # pattern entries per NumPy pass: bounds the |chunk| x r temporaries


class CpuKernels:
    """NumPy/SciPy implementations (also the reference for the GPU kernels)."""

    @staticmethod
    def sym_sample(rows, cols, U, V, out=None):
        """w_p = (U[r].V[c] + U[c].V[r]) / 2 over the pattern; ``V is None`` means V = U."""
        out = np.empty(rows.size) if out is None else out
        for s in range(0, rows.size, _CHUNK):
            r, c = rows[s:s + _CHUNK], cols[s:s + _CHUNK]
            if V is None:
                out[s:s + _CHUNK] = np.einsum("ij,ij->i", U[r], U[c])
            else:
                out[s:s + _CHUNK] = 0.5 * (np.einsum("ij,ij->i", U[r], V[c]) + np.einsum("ij,ij->i", U[c], V[r]))
        return out

    @staticmethod
    def sym_sample_pair(rows, cols, R, D, out=None):
        """Two columns at once: ``out[:, 0] = sym(R D')`` and ``out[:, 1] = D D'`` on the pattern."""
        out = np.empty((rows.size, 2)) if out is None else out
        for s in range(0, rows.size, _CHUNK):
            r, c = rows[s:s + _CHUNK], cols[s:s + _CHUNK]
            Dr, Dc = D[r], D[c]
            out[s:s + _CHUNK, 0] = 0.5 * (np.einsum("ij,ij->i", R[r], Dc) + np.einsum("ij,ij->i", R[c], Dr))
            out[s:s + _CHUNK, 1] = np.einsum("ij,ij->i", Dr, Dc)
        return out

    @staticmethod
    def csr_matmul(matrix, V, out=None):
        """``matrix @ V`` for a SciPy CSR matrix and a C-ordered dense V."""
        result = matrix @ V
        if out is None:
            return np.ascontiguousarray(result)
        out[...] = result
        return out


def kernels_for(backend):
    """The kernel set for a :class:`~cvxpy_culorads.backend.Backend`."""
    if backend.is_gpu:
        from .gpu_kernels import GpuKernels
        return GpuKernels()
    return CpuKernels()
