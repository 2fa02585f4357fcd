"""n = 1e8, rank 5, tol 1e-2: whole solves on one GPU and on two from the given starts (Settings.seed).

On a machine with two GPUs: ``python3 benchmarks/studies/random_graph_seeds.py SEED [SEED ...]``.
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402

warm_up_all(2, ["double"])
n = 100_000_000
problem = graph_problem("sparse", n)[0]
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
