"""Compile the GPU kernels a solve uses and store them as package data, so that a fresh machine's first solve
reads them instead of compiling them (``cvxpy_culorads/backends/kernel_cache.py`` says how they are used).

Run on a machine with the GPU architecture to build for, before a release or after a change of the CUDA sources::

    python tools/prebuild_kernels.py            # writes cvxpy_culorads/backends/cuda/prebuilt/<archive>.zip

It points CuPy's kernel cache at a new folder, solves a catalogue of small problems that together take every
route of the solver (MaxCut on the product of spheres and by ALM/ADMM at a rank in each bucket of the kernels'
instantiations, θ in both formulations, matrix completion, a problem with several blocks and nonnegative variables
by the low-rank phases and by the interior-point method on the device, one of equal-order blocks by the
interior-point method (its stacks), each in every precision; on a machine of several GPUs the split path at every
rank bucket and halo precision too) and stores the cache's entries in one archive named for the CuPy version, the
NVRTC version and the architecture. Kernels a solve needs that the catalogue did not compile are compiled on first
use, as without the archive. The build first seeds its folder from the package's current archive, as every process's
first GPU backend does, so the new archive keeps the entries of the one it replaces: ``--only NAME`` compiles the
entries whose name contains NAME and adds them (a route added on one GPU keeps the split path's entries built on two).
Every build also launches the row kernels of the product of spheres at each rank bucket directly
(:func:`exercise_row_kernels`; ``--only "row kernels"`` builds those alone). After a change of the CUDA sources every
old entry is stale (an entry's name is the key of its source): ``--fresh`` builds without the seed, so the archive
holds the current entries only (on a machine of two GPUs, for the split path).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREBUILT = ROOT / "cvxpy_culorads" / "backends" / "cuda" / "prebuilt"
# a rank in each bucket of the GPU kernels' instantiations (lanes per factor row, columns per lane)
CATALOGUE_RANKS = (1, 2, 3, 5, 9, 17, 33, 65, 129)
PRECISIONS = ("double", "mixed")  # Settings.precision


def catalogue(devices: int):
    """(name, problem, settings) of the solves whose kernels are prebuilt; the split path's too where ``devices``
    is 2 or more."""
    import numpy as np

    from cvxpy_culorads.models import (
        bundled_graph,
        completion_problem,
        hamming_graph,
        maxcut_problem,
        maxcut_problem_from_edges,
        random_low_rank_instance,
        read_graph,
        theta_problem,
    )

    maxcut = maxcut_problem(read_graph(bundled_graph("G1")))
    yield "G1", maxcut, {}
    yield "G1 alm_admm", maxcut, {"algorithm": "alm_admm"}
    for rank in CATALOGUE_RANKS:
        yield f"G1 rank {rank}", maxcut, {"rank": rank, "max_iter": 50, "algorithm": "low_rank"}
        yield f"G1 alm_admm rank {rank}", maxcut, {"rank": rank, "max_iter": 50, "algorithm": "alm_admm"}
    for formulation in ("sparse", "low_rank"):
        yield f"theta {formulation}", theta_problem(hamming_graph(6, 2), formulation), {}
    rows, cols, values, _ = random_low_rank_instance(300, 300, 3, 9000, seed=1)
    yield "completion", completion_problem(rows, cols, values, (300, 300)), {}
    rng = np.random.default_rng(0)
    mixed = _feasible_blocks((400, 300), 40, rng, "mixed")
    yield "mixed low_rank", mixed, {"algorithm": "alm_admm"}
    yield "mixed interior_point", mixed, {"algorithm": "interior_point"}
    # the interior-point method's stacks of equal orders above and below the batched decompositions' order 32, small
    # blocks held together as one matrix, and no nonnegative variables (the quantum-chemistry problems' shapes)
    stacks = _feasible_blocks((7, 7, 7, 7, 24, 24, 24, 100, 100, 100), 0, np.random.default_rng(1), "stacks")
    yield "stacks interior_point", stacks, {"algorithm": "interior_point"}
    if devices >= 2:  # a block of order above memory.DENSE_LIMIT, which the split takes
        n = 1200
        i = np.repeat(np.arange(n), 3)
        j = (i + rng.integers(1, n, i.size)) % n
        splittable = maxcut_problem_from_edges(n, i, j)
        for rank in (None, *CATALOGUE_RANKS):
            for halo in ("double", "single"):
                yield f"split rank {rank} halo {halo}", splittable, {"devices": devices, "rank": rank,
                                                                      "halo_precision": halo, "max_iter": 300}


ROW_KERNELS = "row kernels"  # the --only name of exercise_row_kernels


def exercise_row_kernels() -> None:
    """Launch the product of spheres' row kernels (gpu_launch.row_layout) directly, at a rank in each bucket, in both
    value types, with up to the default number of L-BFGS pairs and the pair's update on and off: the catalogue's solves
    reach some of these combinations only by chance (a small problem's single-precision runs stall within a few
    steps, its low-rank phases hand over to the interior-point method), a large problem reaches them all."""
    import cupy
    import cupyx.scipy.sparse
    import numpy as np

    from cvxpy_culorads import Settings
    from cvxpy_culorads.backends.gpu_kernels import GpuKernels

    n = 64
    matrix = cupyx.scipy.sparse.identity(n, dtype=np.float64, format="csr")
    squares = cupy.ones(n)
    for rank in CATALOGUE_RANKS:
        print(f"{ROW_KERNELS} at rank {rank}", flush=True)
        for dtype in (np.float64, np.float32):
            X = cupy.full((n, rank), 1.0 / np.sqrt(rank), dtype=dtype)
            G = cupy.empty_like(X)
            for product in (None, cupy.empty_like(X)):
                GpuKernels.sphere_product_gradient(matrix, X, squares, 1.0, G, product)
            GpuKernels.sphere_tangent(G, X, squares, 1.0, G)
            for out_type in (np.float64, np.float32):
                GpuKernels.sphere_retract(X, G, 0.1, squares, cupy.empty(X.shape, out_type))
            if dtype == np.float32:
                GpuKernels.sphere_decrease(X, X, G, G, squares)
            for pairs in range(Settings().lorads.lbfgs_memory + 1):
                for update in (False, True) if pairs else (False,):
                    pair_list = [(cupy.zeros_like(X), cupy.zeros_like(X)) for _ in range(pairs)]
                    GpuKernels.lbfgs_sphere_direction(G, pair_list, cupy.empty(2), X, squares, update=update)
    cupy.cuda.Device().synchronize()


def _feasible_blocks(sizes, n_lp: int, rng, name: str):
    """A random SDP with PSD blocks of the orders ``sizes`` and ``n_lp`` nonnegative variables: 30 sparse random
    constraints and a trace constraint per block (the last one with the variables' sum), feasible at the scaled
    identity and bounded by the traces."""
    import numpy as np

    from cvxpy_culorads import SDPProblem

    def block(n):
        M = rng.standard_normal((n, n)) * (rng.random((n, n)) < 0.02)
        return M + M.T

    traces = [[np.eye(n) if k == j else None for k in range(len(sizes))] for j, n in enumerate(sizes)]
    constraints = [[block(n) for n in sizes] for _ in range(30)] + traces
    start = [np.eye(n) / n for n in sizes]
    b = np.array([sum(np.sum(a * x) for a, x in zip(row, start) if a is not None) for row in constraints])
    if not n_lp:
        return SDPProblem.from_matrices([block(n) + np.eye(n) for n in sizes], constraints, b, name=name)
    A_lp = np.vstack([rng.standard_normal((30, n_lp)), np.zeros((len(sizes) - 1, n_lp)), np.ones((1, n_lp))])
    b = b + A_lp @ np.full(n_lp, 1.0 / n_lp)
    return SDPProblem.from_matrices([block(n) + np.eye(n) for n in sizes], constraints, b,
                                    c_lp=rng.random(n_lp) + 0.5, A_lp=A_lp, name=name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=PREBUILT, help="folder of the archive (default: package data)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per solve of the catalogue")
    parser.add_argument("--only", default="", help="solve only the catalogue's entries whose name contains this")
    parser.add_argument("--fresh", action="store_true", help="do not seed the build from the package's archive")
    args = parser.parse_args(argv)
    cache = Path(tempfile.mkdtemp(prefix="culorads_kernels_"))
    os.environ["CUPY_CACHE_DIR"] = str(cache)  # before CuPy is imported; seeded below (module docstring)
    os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
    import cupy

    import cvxpy_culorads
    from cvxpy_culorads.backends import kernel_cache
    from cvxpy_culorads.backends.backend import select_backend
    from cvxpy_culorads.backends.kernel_cache import archive_name

    if args.fresh:  # the seed then finds no archive to copy from
        kernel_cache.PREBUILT_FOLDER = "no-seed"
    select_backend("gpu")  # seeds the cache now: a build of the row kernels alone makes no backend that would

    for name, problem, options in catalogue(cupy.cuda.runtime.getDeviceCount()):
        if args.only not in name:
            continue
        for precision in PRECISIONS:
            start = time.perf_counter()
            result = cvxpy_culorads.solve(problem, device="gpu", time_limit=args.time_limit, precision=precision,
                                          **options)
            print(f"{name:<28} {precision:<7} {result.status.name:<15} {time.perf_counter() - start:7.2f} s "
                  f"{len(list(cache.glob('*.cubin'))):5d} entries", flush=True)
    if args.only in ROW_KERNELS:
        exercise_row_kernels()
        print(f"{ROW_KERNELS:<36} {len(list(cache.glob('*.cubin'))):5d} entries", flush=True)
    arch = f"sm_{cupy.cuda.Device().compute_capability}"
    args.out.mkdir(parents=True, exist_ok=True)
    archive = args.out / archive_name(cupy.__version__, cupy.cuda.nvrtc.getVersion(), arch)
    entries = sorted(path for path in cache.iterdir() if path.is_file() and path.suffix == ".cubin")
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as out:
        for path in entries:
            out.write(path, path.name)
    print(f"{len(entries)} kernels, {archive.stat().st_size / 2**20:.1f} MiB: {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
