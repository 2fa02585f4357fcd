"""cProfile of whole solves (rank 5, tol 1e-2, seed 1): where the time goes, on one GPU and on two.

On a machine with two GPUs: ``GRAPH=torus python3 benchmarks/studies/solve_profile.py 1e8 2 1``
(``GRAPH``: the kind of ``multi_gpu.graph_problem``, ``sparse`` by default; then n and the devices to profile: 1 for
one GPU, 2 for two); the profiles go to ``$OUT/prof_<devices>.txt``.
"""
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402

n = int(float(sys.argv[1]))
out = os.environ.get("OUT", ".")
warm_up_all(2, ["double"])
began = time.perf_counter()
problem = graph_problem(os.environ.get("GRAPH", "sparse"), n)[0]
print("graph and problem", round(time.perf_counter() - began, 1), flush=True)
for devices in [None if d == "1" else int(d) for d in sys.argv[2:]]:
    profile = cProfile.Profile()
    profile.enable()
    began = time.perf_counter()
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, seed=1,
                 time_limit=200, verbose=True)
    wall = time.perf_counter() - began
    profile.disable()
    print("devices", devices, r.status.value, "wall", round(wall, 2), "solve", round(r.solve_time, 2), "setup",
          round(r.setup_time, 2), {k: round(v, 2) for k, v in r.stage_times.items()}, r.iterations, flush=True)
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("cumulative").print_stats("cvxpy_culorads", 70)
    stats.sort_stats("tottime").print_stats(45)
    with open(f"{out}/prof_{devices or 1}.txt", "w") as f:
        f.write(text.getvalue())
