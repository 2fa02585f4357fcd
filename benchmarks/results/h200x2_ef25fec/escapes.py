"""One-GPU solves of the torus at n = 1e8 (rank 5, tol 1e-2), verbose, with every rank-growth memory check printed:
the free memory the check sees, the same after ``gc.collect()``, what the wider factor needs, and its answer.

Run from the repository root on a machine with two GPUs (the warm-ups compile both paths):
``PYTHONPATH=$PWD python3 <this file> 1e8 SEED [SEED ...]``.
"""
import gc
import sys

sys.path.insert(0, "benchmarks")

import cupy  # noqa: E402
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends import memory  # noqa: E402
from cvxpy_culorads.solver import driver

checked = driver.widening_fits


def traced(backend, n_rows, old, new):
    free = backend.free_memory()
    need = memory.POOL_MARGIN * memory._factor_arrays_bytes(n_rows, new) - 8 * n_rows * old
    gc.collect()
    after_gc = backend.free_memory()
    fits = checked(backend, n_rows, old, new)
    print(f"  widening_fits {old}->{new}: free {free / 2**30:.1f} GiB, after gc {after_gc / 2**30:.1f}, need "
          f"{need / 2**30:.1f}, pool used {cupy.get_default_memory_pool().used_bytes() / 2**30:.1f} -> {fits}",
          flush=True)
    return fits


driver.widening_fits = traced
warm_up_all(2, ["double"])
problem = graph_problem("torus", int(float(sys.argv[1])))[0]
for seed in map(int, sys.argv[2:]):
    r = cl.solve(problem, device="gpu", rank=5, shard_order="given", tol=1e-2, seed=seed, time_limit=200, verbose=True)
    print("RESULT seed", seed, r.status.value, r.ranks, r.iterations["riemannian"], r.certified_gap, r.message,
          flush=True)
