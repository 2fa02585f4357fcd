"""Repeated whole solves of the torus (rank 5, tol 1e-2, shard order given, default start) in one process, after the
warm-ups: n/2 on one GPU twice (the weak-scaling baseline), then n on one GPU and on k GPUs alternately, three times
each, so that the ratio comes with its spread; the weak pair's efficiency is the one-GPU time per step at n/2 over
the k-GPU time per step at n (k = 2: the same rows per GPU; ``--gpus 4`` with n the total: n/4 per GPU against n/4 on
one, the first solve being one GPU at n/k).

python3 benchmarks/studies/torus_pairs.py N [GPUS]
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402

rows = []


def run(problem, devices, label):
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    steps, st = r.iterations["riemannian"], r.stage_times
    row = dict(label=label, gpus=devices or 1, n=problem.block_sizes[0], status=r.status.value, whole=r.solve_time,
               setup=r.setup_time, steps=steps, ms=1e3 * st["riemannian"] / max(steps, 1),
               certificates=st["certificates"], gap=r.certified_gap or float("nan"), peak=r.peak_device_bytes / 2**30)
    print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    rows.append(row)
    return row


n, k = int(float(sys.argv[1])), int(sys.argv[2]) if len(sys.argv) > 2 else 2
began = time.perf_counter()
warm_up_all(k, ["double"])
print(f"warm-ups {time.perf_counter() - began:.1f} s", flush=True)
small = graph_problem("torus", n // k)[0]
weak = [run(small, None, f"one GPU, n/{k}") for _ in range(2)]
del small
problem = graph_problem("torus", n)[0]
pairs = []
for _ in range(3):
    one = run(problem, None, "one GPU, n") if k == 2 else None
    split = run(problem, k, f"{k} GPUs, n")
    pairs.append((one, split))
print("\n| solve | GPUs | n | whole s | set-up s | steps | ms/step | certificates s | gap | peak GiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['label']} | {r['gpus']} | {r['n']} | {r['whole']:.2f} | {r['setup']:.2f} | {r['steps']} | "
          f"{r['ms']:.2f} | {r['certificates']:.2f} | {r['gap']:.2e} | {r['peak']:.1f} |")
baseline = statistics.median(r["ms"] for r in weak)
splits = [s["ms"] for _, s in pairs]
print(f"\nweak scaling (ms/step at n/{k} on one GPU over ms/step at n on {k}): "
      + ", ".join(f"{baseline / ms:.3f}" for ms in splits))
if k == 2:
    print("whole-solve ratios one / two: " + ", ".join(f"{o['whole'] / s['whole']:.3f}" for o, s in pairs))
    print("per-step ratios one / two: " + ", ".join(f"{o['ms'] / s['ms']:.3f}" for o, s in pairs))
