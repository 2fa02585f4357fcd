"""Whole solves of the torus at n (rank 5, tol 1e-2, shard order given): one GPU twice (the process's first solve and
a warm one), two GPUs twice, from the default start; then from seeds 1 and 2 on one GPU and on two (added for the
fb8c49b run); then the device-to-host copies of a factor-sized array timed apart.

PYTHONPATH=$PWD python3 final.py N
"""
import sys
import time

import cupy
import numpy as np

sys.path.insert(0, "benchmarks")
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import copy_to_host, select_backend  # noqa: E402

rows = []


def run(problem, devices, label):
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    steps, st = r.iterations["riemannian"], r.stage_times
    after = r.solve_time - r.setup_time
    row = dict(label=label, gpus=devices or 1, status=r.status.value, whole=r.solve_time, setup=r.setup_time,
               after=after, steps=steps, ms=1e3 * st["riemannian"] / max(steps, 1), certificates=st["certificates"],
               rest=after - st["riemannian"] - st["certificates"], gap=r.certified_gap or float("nan"),
               peak=r.peak_device_bytes / 2 ** 30)
    print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    rows.append(row)


n = int(float(sys.argv[1]))
began = time.perf_counter()
warm_up_all(2, ["double"])
print(f"warm-ups {time.perf_counter() - began:.1f} s", flush=True)
start = time.perf_counter()
problem = graph_problem("torus", n)[0]
print(f"n={problem.block_sizes[0]}: built in {time.perf_counter() - start:.1f} s", flush=True)
run(problem, None, "one, first")
run(problem, None, "one, warm")
run(problem, 2, "two, first")
run(problem, 2, "two, warm")
for seed in (1, 2):
    for devices in (None, 2):
        r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, seed=seed,
                     time_limit=200)
        st = r.iterations["riemannian"]
        print(f"| seed {seed} | {devices or 1} | {r.status.value} | {r.solve_time:.2f} | {r.setup_time:.2f} | {st} | "
              f"{1e3 * r.stage_times['riemannian'] / max(st, 1):.2f} | {r.stage_times['certificates']:.2f} | "
              f"{r.certified_gap or float('nan'):.2e} | {r.ranks} | {r.message} |", flush=True)
del problem
print("\n| solve | GPUs | whole s | set-up s | after set-up s | steps | ms/step | certificates s | rest s | gap "
      "| peak GiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['label']} | {r['gpus']} | {r['whole']:.2f} | {r['setup']:.2f} | {r['after']:.2f} | {r['steps']} | "
          f"{r['ms']:.2f} | {r['certificates']:.2f} | {r['rest']:.2f} | {r['gap']:.2e} | {r['peak']:.1f} |")

# the factor's copy back: 4 GB at n = 1e8 and 5 columns
gpu = select_backend("gpu")
print("\n| copy to the host | GB | seconds |\n|---|---|---|")
for devices in ((0,), (0, 1)):
    parts = []
    for d in devices:
        with cupy.cuda.Device(d):
            parts.append(cupy.ones((n // len(devices), 5)))
            cupy.cuda.Device().synchronize()
    gb = sum(p.nbytes for p in parts) / 1e9
    for label in ("get, one piece each", "copy_to_host"):
        out = np.empty((sum(p.shape[0] for p in parts), 5))
        t = time.perf_counter()
        if label == "copy_to_host":
            copy_to_host([(p, out[i * p.shape[0]:(i + 1) * p.shape[0]]) for i, p in enumerate(parts)])
        else:
            for i, p in enumerate(parts):
                with p.device:
                    p.get(out=out[i * p.shape[0]:(i + 1) * p.shape[0]])
        print(f"| {label}, {len(devices)} GPU(s), fresh host array | {gb:.1f} | {time.perf_counter() - t:.2f} |",
              flush=True)
    del parts
