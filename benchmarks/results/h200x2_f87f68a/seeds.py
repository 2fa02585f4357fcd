"""n = 1e8, rank 5, tol 1e-2: whole solves on one GPU and on two from the given starts (Settings.seed).

Run from the repository root on a machine with two GPUs: ``PYTHONPATH=$PWD python3 <this file> SEED [SEED ...]``.
"""
import sys
import time

sys.path.insert(0, "benchmarks")

from multi_gpu import _warm_up_split  # noqa: E402
from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem_from_edges  # noqa: E402

from graphs import random_regular_like_edges  # noqa: E402

warm_up(select_backend("gpu"))
_warm_up_split(2, ["double"])
n = 100_000_000
rows, cols = random_regular_like_edges(n, 4, seed=1, device="gpu")
select_backend("gpu").release_cached_blocks()
problem = maxcut_problem_from_edges(n, rows, cols)
del rows, cols
for seed in map(int, sys.argv[1:]):
    for devices in (None, 2):
        began = time.perf_counter()
        r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, seed=seed,
                     time_limit=200)
        wall = time.perf_counter() - began
        steps, stages = r.iterations["riemannian"], r.stage_times
        rest = r.solve_time - r.setup_time - stages["riemannian"] - stages["certificates"]
        print(f"seed {seed} gpus {devices or 1}: {r.status.value} whole {r.solve_time:.2f} s (call {wall:.2f}), "
              f"set-up {r.setup_time:.2f}, after set-up {r.solve_time - r.setup_time:.2f}: {steps} steps "
              f"{stages['riemannian']:.2f} s ({1e3 * stages['riemannian'] / steps:.2f} ms/step), certificates "
              f"{stages['certificates']:.2f} s, rest {rest:.2f} s; certified gap {r.certified_gap:.3g}", flush=True)
