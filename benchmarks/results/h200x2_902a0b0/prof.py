"""Whole torus solves (rank 5, tol 1e-2) on one GPU and on two, the warm ones under cProfile: where the time outside
the steps and certificates goes."""
import cProfile
import io
import os
import pstats
import sys

sys.path.insert(0, "benchmarks")
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402

n = int(float(sys.argv[1]))
warm_up_all(2, ["double"])
problem = graph_problem("torus", n)[0]
out = os.environ.get("OUT", "/tmp")
summary = []
RUNS = (("cold1", None, False), ("cold2", 2, False), ("warm1", None, True), ("warm2", 2, True))
for label, devices, profiled in RUNS:
    prof = cProfile.Profile()
    if profiled:
        prof.enable()
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    if profiled:
        prof.disable()
    steps, st = r.iterations["riemannian"], r.stage_times
    rest = r.solve_time - r.setup_time - st["riemannian"] - st["certificates"]
    line = (f"{label}: {r.status.value} whole {r.solve_time:.2f} set-up {r.setup_time:.2f} steps {steps} "
            f"({1e3 * st['riemannian'] / max(steps, 1):.2f} ms) certificates {st['certificates']:.2f} rest {rest:.2f}")
    print(line, flush=True)
    summary.append(line)
    if profiled:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats("cvxpy_culorads", 90)
        with open(f"{out}/prof_{label}.txt", "w") as f:
            f.write(text.getvalue())
print("\n".join(summary))
