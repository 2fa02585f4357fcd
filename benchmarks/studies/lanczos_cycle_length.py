"""Certificates' Lanczos cycles of 60 against 30 steps at 5 columns, CPU: MaxCut of a torus 700 x 700 (+-1 weights),
a random graph of 2e5 vertices (degree ~4) and rgg 2^17, tol 1e-2, seeds 0-2.

Each cap runs every solve with ``krylov.lanczos_smallest`` called at that cycle length and as many cycles as keep the
default budget of 40 x 60 steps; every Lanczos step's passes over the basis (j + 1 at step j) are counted. Run from
the repository root: ``python3 benchmarks/studies/lanczos_cycle_length.py 60 30``.
"""
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends import kernels as K  # noqa: E402
from cvxpy_culorads.certify import certificates
from cvxpy_culorads.linalg import krylov  # noqa: E402
from cvxpy_culorads.models import maxcut_problem, maxcut_problem_from_edges  # noqa: E402

from graphs import random_regular_like, rgg_graph, toroidal_grid_edges  # noqa: E402

stats = dict(steps=0, passes=0)
extend = K.CpuKernels.lanczos_extend


def counted(basis, j, *args, **kwargs):
    stats["steps"] += 1
    stats["passes"] += j + 1
    return extend(basis, j, *args, **kwargs)


K.CpuKernels.lanczos_extend = staticmethod(counted)
original = krylov.lanczos_smallest


def problems():
    rows, cols, weights = toroidal_grid_edges(700, 700, seed=1)
    yield "torus700", maxcut_problem_from_edges(700 * 700, rows, cols, weights)
    yield "random2e5", maxcut_problem(random_regular_like(200000, 4, seed=1))
    yield "rgg2^17", maxcut_problem(rgg_graph(17))


totals = {}
for name, problem in problems():
    for seed in (0, 1, 2):
        for cap in map(int, sys.argv[1:]):
            certificates.lanczos_smallest = functools.partial(original, steps=cap, cycles=40 * 60 // cap)
            stats.update(steps=0, passes=0)
            began = time.perf_counter()
            res = cl.solve(problem, device="cpu", tol=1e-2, seed=seed, rank=5)
            wall = time.perf_counter() - began
            total = totals.setdefault(cap, [0.0, 0, 0, 0.0])
            total[0] += wall
            total[1] += stats["passes"]
            total[2] += res.iterations["riemannian"]
            total[3] += res.stage_times["certificates"]
            print(f"{name:10s} seed {seed} cap {cap:3d} {res.status.value:10s} it {res.iterations['riemannian']:5d} "
                  f"ranks {res.ranks} gap {res.certified_gap:.2e} lanczos {stats['steps']:5d} passes "
                  f"{stats['passes']:7d} cert {res.stage_times['certificates']:.1f}s total {wall:.1f}s", flush=True)
for cap, (wall, passes, steps, certificates_time) in totals.items():
    print(f"cap {cap}: total {wall:.1f} s, passes {passes}, riemannian steps {steps}, "
          f"certificates {certificates_time:.1f} s")
