"""n = 1e8, rank 5, tol 1e-2: one GPU against two from other starts (Settings.seed), whole solves.

Run from the repository root on a machine with two GPUs: ``PYTHONPATH=$PWD python3 <this file>``.
"""
import sys

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
for seed in (1, 2):
    for devices in (None, 2):
        r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, seed=seed,
                     time_limit=200)
        steps = r.iterations["riemannian"]
        print(f"seed {seed} gpus {devices or 1}: {r.status.value} {r.solve_time - r.setup_time:.2f} s after set-up "
              f"(set-up {r.setup_time:.1f}), {steps} steps, {1e3 * r.stage_times['riemannian'] / steps:.2f} ms/step, "
              f"certificates {r.stage_times['certificates']:.2f} s, certified gap {r.certified_gap:.3g}", flush=True)
