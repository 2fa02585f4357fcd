"""What the sharded C·V product costs on one GPU: the whole product against its own/halo split, and the halo gather.

Usage::

    python benchmarks/studies/halo_split.py [--n 1e7] [--ranks 64,65] [--shards 2] [--knobs]

C is MaxCut's objective for ``graphs.random_regular_like(n, 4, seed=1)`` (the ``sparse`` suite; about 5 entries
per row with the diagonal), V an n x r standard normal factor. For each r it times, with CUDA events over 10 calls:
the whole product (``gpu_kernels.csr_matmul``, default knobs, or every ``loads`` x ``rows`` pair with ``--knobs``);
the k shards' own parts and halo parts (``sharding.shard_matrices``, the halo part added into the own part's output as
``ShardedKernels.csr_matmul`` does), summed over the shards; the gathers of the rows a shard sends (``cupy.take``
of as many rows as its halo has, from its own rows); and a copy of V for the device's bandwidth. Printed last, a
table of milliseconds.
"""
from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

from cvxpy_culorads.backends import gpu_kernels  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.distributed import shard_bounds, shard_matrices  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402

from graphs import random_regular_like  # noqa: E402

REPEATS = 10


def milliseconds(call) -> float:
    call()
    cupy.cuda.Device().synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(REPEATS):
        call()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / REPEATS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="1e7")
    parser.add_argument("--ranks", default="64,65")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--knobs", action="store_true", help="time every loads x rows pair of the whole product")
    args = parser.parse_args(argv)
    n, backend = int(float(args.n)), select_backend("gpu")
    problem = maxcut_problem(random_regular_like(n, 4, seed=1, device="gpu").get())
    C = problem.objective_matrix(0)
    whole = backend.csr(C)
    bounds = shard_bounds(np.diff(C.indptr), args.shards)
    shards = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        own, across, halo = shard_matrices(backend, problem.C_coords[0], n, int(lo), int(hi))
        sent = np.sort(np.random.default_rng(0).choice(hi - lo, min(halo.size, hi - lo), replace=False))
        shards.append((int(lo), int(hi), own, across, cupy.asarray(halo), cupy.asarray(sent)))
    print(f"n = {n:.3g}, {C.nnz / n:.2f} entries per row, {args.shards} shards, halo rows per shard "
          f"{[s[4].size for s in shards]}", flush=True)
    rows = []
    for r in (int(x) for x in args.ranks.split(",")):
        V, out = cupy.random.standard_normal((n, r)), cupy.empty((n, r))
        knobs = [(loads, per_group) for loads in (1, 2, 4, 8, 16) for per_group in (1, 2, 4)] if args.knobs \
            else [(None, None)]
        for loads, per_group in knobs:
            label = "whole" if loads is None else f"whole, loads {loads}, rows {per_group}"
            rows.append((r, label, milliseconds(partial(gpu_kernels.csr_matmul, whole, V, out, loads=loads,
                                                        rows=per_group))))
        own_total = halo_total = gather_total = 0.0
        for lo, hi, own, across, halo, sent in shards:
            part, target = V[lo:hi], out[lo:hi]
            buffer = cupy.ascontiguousarray(V[halo])
            own_total += milliseconds(partial(gpu_kernels.csr_matmul, own, part, target))
            halo_total += milliseconds(partial(across.add_product, gpu_kernels.GpuKernels, buffer, target))
            gather_total += milliseconds(partial(cupy.take, part, sent, axis=0))
        rows += [(r, "own parts", own_total), (r, "halo parts", halo_total),
                 (r, "own + halo", own_total + halo_total), (r, "halo gathers", gather_total),
                 (r, "copy of V", milliseconds(V.copy))]
    print("\n| r | operation | ms |\n|---|---|---|")
    for r, label, ms in rows:
        print(f"| {r} | {label} | {ms:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
