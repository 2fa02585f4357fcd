"""n = 1e8, rank 5, tol 1e-2: one GPU against two from other starts (Settings.seed), whole solves.

Run from the repository root on a machine with two GPUs: ``PYTHONPATH=$PWD python3 <this file>``.
"""
import sys

sys.path.insert(0, "benchmarks")

from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402

warm_up_all(2, ["double"])
n = 100_000_000
problem = graph_problem("sparse", n)[0]
for seed in (1, 2):
    for devices in (None, 2):
        r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, seed=seed,
                     time_limit=200)
        steps = r.iterations["riemannian"]
        print(f"seed {seed} gpus {devices or 1}: {r.status.value} {r.solve_time - r.setup_time:.2f} s after set-up "
              f"(set-up {r.setup_time:.1f}), {steps} steps, {1e3 * r.stage_times['riemannian'] / steps:.2f} ms/step, "
              f"certificates {r.stage_times['certificates']:.2f} s, certified gap {r.certified_gap:.3g}", flush=True)
