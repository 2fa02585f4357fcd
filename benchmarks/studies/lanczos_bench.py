"""GPU benchmark of one Lanczos step of the certificates' eigensolver: launch overhead against device time.

Usage (GPU machine): ``python benchmarks/studies/lanczos_bench.py [--sizes 1e4,1e5,1e6,1e7] [--out DIR]``.
Writes ``lanczos/<device>.csv`` and its ``.meta.json`` under ``--out`` and prints the table last (about 30 s on an
H100).

Setup. S is a random symmetric sparse matrix of order n with about 8 nonzeros per row (CuPy CSR); the basis holds
21 orthonormal vectors, and each timed cycle runs the 40 steps that extend it to 61, as a thick-restarted cycle of
``krylov.lanczos_smallest`` does (product with S, two passes of classical Gram-Schmidt, normalisation). Variants:
``cublas``: the Gram-Schmidt passes as CuPy matrix-vector products (cuBLAS gemv) and CuPy norms;
``kernels``: ``GpuKernels.lanczos_extend`` (this package's Gram-Schmidt kernels) launched step by step;
``replayed``: the same steps captured once into a CUDA graph and replayed (``GpuKernels.lanczos_cycle``).
Time per step: the median over 5 cycles (after 2 untimed ones), the device synchronised around each cycle.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from report import device_slug, write_tables  # noqa: E402

KEPT, STEPS = 20, 60  # kept Ritz vectors and basis size of a cycle, as krylov.lanczos_smallest uses them


def _cycle_seconds(run_cycle, cupy, repeat: int = 5, warmup: int = 2) -> float:
    times = []
    for index in range(warmup + repeat):
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        run_cycle()
        cupy.cuda.Device().synchronize()
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(n: int) -> dict:
    import cupy
    import cupyx.scipy.sparse as csp

    from cvxpy_culorads.backends import gpu_kernels
    from cvxpy_culorads.backends.gpu_kernels import GpuKernels

    rng = np.random.default_rng(0)
    half = sp.random(n, n, density=4.0 / n, random_state=rng, format="csr")
    S = csp.csr_matrix((half + half.T).tocsr())
    basis = cupy.zeros((STEPS + 1, n))
    basis[:KEPT + 1] = cupy.asarray(np.linalg.qr(rng.standard_normal((n, KEPT + 1)))[0].T)
    projection = cupy.zeros((STEPS + 1, STEPS))

    def cublas_step(j):
        w, V = GpuKernels.csr_matmul(S, basis[j]), basis[:j + 1]
        first = V @ w
        w -= V.T @ first
        second = V @ w
        w -= V.T @ second
        projection[:j + 1, j] = first + second
        norm = cupy.linalg.norm(w)
        projection[j + 1, j] = norm
        cupy.divide(w, norm, out=basis[j + 1])

    def kernel_step(j):
        GpuKernels.lanczos_extend(basis, j, GpuKernels.csr_matmul(S, basis[j]), projection, lambda w: w)

    def steps(step):
        for j in range(KEPT, STEPS):
            step(j)

    recorded: dict = {}
    limit = gpu_kernels.REPLAY_MAX_ROWS
    gpu_kernels.REPLAY_MAX_ROWS = n  # replay at every size here, to show where it stops paying
    try:
        replayed = _cycle_seconds(lambda: GpuKernels.lanczos_cycle(kernel_step, KEPT, STEPS, n, np.inf, recorded),
                                  cupy)
    finally:
        gpu_kernels.REPLAY_MAX_ROWS = limit
    per_step = 1e3 / (STEPS - KEPT)
    cublas_ms = _cycle_seconds(lambda: steps(cublas_step), cupy) * per_step
    return {"n": n, "nnz": int(S.nnz), "cublas_ms": cublas_ms,
            "kernels_ms": _cycle_seconds(lambda: steps(kernel_step), cupy) * per_step,
            "replayed_ms": replayed * per_step, "replay_used": recorded.get((KEPT, STEPS)) is not None,
            "speed_up": cublas_ms / (replayed * per_step)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[1] / "results")
    args = parser.parse_args(argv)
    import cupy
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = [measure(int(float(size))) for size in args.sizes.split(",")]
    print(write_tables(rows, args.out / "lanczos" / device_slug(device), f"Lanczos step on {device}, "
                       f"{time.strftime('%Y-%m-%d')}", device=device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
