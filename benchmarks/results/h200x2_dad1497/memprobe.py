"""Pool bytes around each Riemannian run (the pool only grows between set-up and the end), n = 1e8, rank 5."""
import sys, time
sys.path.insert(0, "benchmarks")
import cupy
import cvxpy_culorads as cl
from cvxpy_culorads import driver
from graphs import random_regular_like_edges
from cvxpy_culorads.models import maxcut_problem_from_edges
from cvxpy_culorads.backend import select_backend
from run import warm_up

records = []
original = driver._Run.run_phase
def probed(self, phase, stage):
    before = self.backend.pool_bytes()
    try:
        original(self, phase, stage)
    finally:
        records.append((stage, before, self.backend.pool_bytes()))
driver._Run.run_phase = probed

warm_up(select_backend("gpu"))
n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 100_000_000
rows, cols = random_regular_like_edges(n, 4, seed=1, device="gpu")
select_backend("gpu").release_cached_blocks()
problem = maxcut_problem_from_edges(n, rows, cols)
del rows, cols
for devices, extra in ((None, dict(max_iter=100)), (2, dict(max_iter=100)), (2, dict(tol=1e-2, halo_precision="single", time_limit=200))):
    records.clear()
    began = time.perf_counter()
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", **extra)
    shard_rows = n // (devices or 1)
    array = 8 * shard_rows * 5
    first = records[0]
    last = max(rec[2] for rec in records)
    print(f"devices={devices} {extra} status {r.status.value} steps {r.iterations['riemannian']} "
          f"riem {r.stage_times['riemannian']:.2f}s solve-setup {r.solve_time - r.setup_time:.2f}s cert {r.stage_times['certificates']:.2f}s "
          f"gap {r.certified_gap:.3g} peak {r.peak_device_bytes/2**30:.1f} GiB | pool before first run {first[1]/2**30:.1f} GiB "
          f"= {first[1]/array:.2f} arrays, after runs {last/2**30:.1f} GiB = {last/array:.2f} arrays "
          f"(phase added {(last-first[1])/array:.2f})", flush=True)
    print("   runs:", [(s, round(b / array, 2), round(a / array, 2)) for s, b, a in records], flush=True)
