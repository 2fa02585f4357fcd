"""Toroidal grids with +-1 weights (Gset's G62-G81 at scale), rank 5, tol 1e-2: whole solves on one GPU and on two
from the given starts (Settings.seed), then the weak pair's one-GPU half (n / 2 on one GPU) while time is left.

Run from the repository root on a machine with two GPUs: ``PYTHONPATH=$PWD python3 <this file> N SEED [SEED ...]``.
"""
import sys
import time

sys.path.insert(0, "benchmarks")

from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402

BUDGET = 400  # seconds of this script after which the weak pair's half is skipped
began = time.perf_counter()
warm_up_all(2, ["double"])
print(f"warm-ups {time.perf_counter() - began:.1f} s", flush=True)
rows = []


def run(problem, devices, seed):
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, seed=seed,
                 time_limit=200)
    steps, stages = r.iterations["riemannian"], r.stage_times
    after = r.solve_time - r.setup_time
    rest = after - stages["riemannian"] - stages["certificates"]
    row = dict(n=problem.block_sizes[0], seed=seed, gpus=devices or 1, status=r.status.value, whole=r.solve_time,
               setup=r.setup_time, after=after, steps=steps, ms=1e3 * stages["riemannian"] / max(steps, 1),
               certificates=stages["certificates"], rest=rest,
               gap=float("nan") if r.certified_gap is None else r.certified_gap, objective=r.primal_objective)
    print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    print(f"  message: {r.message}", flush=True)
    rows.append(row)


n = int(float(sys.argv[1]))
seeds = [int(s) for s in sys.argv[2:]]
start = time.perf_counter()
problem = graph_problem("torus", n)[0]
print(f"n={problem.block_sizes[0]}: graph and problem built in {time.perf_counter() - start:.1f} s", flush=True)
for seed in seeds:
    for devices in (None, 2):
        run(problem, devices, seed)
del problem
if time.perf_counter() - began < BUDGET:
    half = graph_problem("torus", n // 2)[0]
    run(half, None, seeds[0])
print("\n| n | seed | GPUs | whole s | set-up s | after set-up s | steps | ms/step | certificates s | rest s | gap |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['n']} | {r['seed']} | {r['gpus']} | {r['whole']:.2f} | {r['setup']:.2f} | {r['after']:.2f} | "
          f"{r['steps']} | {r['ms']:.2f} | {r['certificates']:.2f} | {r['rest']:.2f} | {r['gap']:.2e} |")
