"""Warm whole torus solves (rank 5, tol 1e-2, order given) in orders: two GPUs twice, one GPU twice, then alternating,
then two GPUs after 20 s of idle devices; each solve's per-step time, so that the first-after-one-GPU slowdown of the
split step (29.7 against 26.5 ms) can be told from idle clocks."""
import sys
import time

sys.path.insert(0, "benchmarks")
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402

n = int(float(sys.argv[1]))
t = time.perf_counter()
warm_up_all(2, ["double"])
print(f"warm-ups {time.perf_counter() - t:.1f} s", flush=True)
problem = graph_problem("torus", n)[0]
rows = []


def run(devices, label):
    print(f"{time.strftime('%H:%M:%S')} start {label}", flush=True)
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    steps, st = r.iterations["riemannian"], r.stage_times
    rest = r.solve_time - r.setup_time - st["riemannian"] - st["certificates"]
    row = (label, devices or 1, r.status.value, r.solve_time, r.setup_time, steps,
           1e3 * st["riemannian"] / max(steps, 1), st["certificates"], rest)
    rows.append(row)
    print(f"{time.strftime('%H:%M:%S')} " + " ".join(str(v) if not isinstance(v, float) else f"{v:.3f}" for v in row),
          flush=True)


for label, devices in (("two a", 2), ("two b", 2), ("one a", None), ("one b", None), ("two c", 2), ("one c", None),
                       ("two d", 2)):
    run(devices, label)
time.sleep(20)
run(2, "two after idle")
run(None, "one e")
time.sleep(20)
run(None, "one after idle")
print("\n| solve | GPUs | status | whole s | set-up s | steps | ms/step | certificates s | rest s |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(v) if not isinstance(v, float) else f"{v:.2f}" for v in r) + " |")
