"""The memory pool's size before and after each Riemannian run (the pool only grows between set-up and the end),
sparse MaxCut at n = 1e8 (argument), rank 5, on one GPU and on two.

Run from the repository root: ``python3 benchmarks/studies/riemannian_memory.py 1e8``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from multi_gpu import graph_problem  # noqa: E402
from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.solver import run as solver_run  # noqa: E402

records = []
original = solver_run.Run.run_phase


def probed(self, phase, stage):
    before = self.backend.pool_bytes()
    try:
        original(self, phase, stage)
    finally:
        records.append((stage, before, self.backend.pool_bytes()))


solver_run.Run.run_phase = probed

warm_up(select_backend("gpu"))
n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 100_000_000
problem = graph_problem("sparse", n)[0]
RUNS = ((None, dict(max_iter=100)), (2, dict(max_iter=100)),
        (2, dict(tol=1e-2, halo_precision="single", time_limit=200)))
for devices, extra in RUNS:
    records.clear()
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", **extra)
    array = 8 * (n // (devices or 1)) * 5  # bytes of one factor-sized array of a shard
    first = records[0]
    last = max(rec[2] for rec in records)
    print(f"devices={devices} {extra} status {r.status.value} steps {r.iterations['riemannian']} "
          f"riem {r.stage_times['riemannian']:.2f}s solve-setup {r.solve_time - r.setup_time:.2f}s "
          f"cert {r.stage_times['certificates']:.2f}s gap {r.certified_gap:.3g} "
          f"peak {r.peak_device_bytes / 2**30:.1f} GiB | pool before first run {first[1] / 2**30:.1f} GiB "
          f"= {first[1] / array:.2f} arrays, after runs {last / 2**30:.1f} GiB = {last / array:.2f} arrays "
          f"(phase added {(last - first[1]) / array:.2f})", flush=True)
    print("   runs:", [(s, round(b / array, 2), round(a / array, 2)) for s, b, a in records], flush=True)
