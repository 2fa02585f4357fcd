"""Warm whole torus solves (rank 5, tol 1e-2, order given): two GPUs twice, one GPU twice, then alternating; the
second of each kind under cProfile (cumulative, the package's functions, to $OUT)."""
import cProfile
import io
import os
import pstats
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


def run(devices, label, profiled=False):
    prof = cProfile.Profile() if profiled else None
    if prof:
        prof.enable()
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    if prof:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats("cvxpy_culorads", 110)
        with open(f"{os.environ.get('OUT', '/tmp')}/prof_{label.replace(' ', '_')}.txt", "w") as f:
            f.write(text.getvalue())
    steps, st = r.iterations["riemannian"], r.stage_times
    rest = r.solve_time - r.setup_time - st["riemannian"] - st["certificates"]
    row = (label, devices or 1, r.status.value, r.solve_time, r.setup_time, steps,
           1e3 * st["riemannian"] / max(steps, 1), st["certificates"], rest, r.certified_gap)
    rows.append(row)
    print(" ".join(str(v) if not isinstance(v, float) else f"{v:.4g}" for v in row), flush=True)


for label, devices, profiled in (("two a", 2, False), ("two b", 2, True), ("one a", None, False),
                                 ("one b", None, True), ("two c", 2, False), ("one c", None, False),
                                 ("two d", 2, False), ("one d", None, False)):
    run(devices, label, profiled)
print("\n| solve | GPUs | status | whole s | set-up s | steps | ms/step | certificates s | rest s | gap |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(v) if not isinstance(v, float) else f"{v:.3g}" for v in r) + " |")
