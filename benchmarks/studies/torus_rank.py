"""The certified default tolerance on a toroidal grid (Gset's recipe, weights +-1) from narrow starts, on the CPU:
which rank the solve ends at and how many steps it takes from 5 and 8 columns and from the default start.

python3 benchmarks/studies/torus_rank.py SIDE
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.models import maxcut_problem_from_edges  # noqa: E402

from graphs import toroidal_grid_edges  # noqa: E402

side = int(sys.argv[1])
rows, cols, weights = toroidal_grid_edges(side, side, seed=1)
problem = maxcut_problem_from_edges(side * side, rows, cols, weights)
print("| n | initial rank | status | s | steps | final rank | certified gap |\n|---|---|---|---|---|---|---|")
for rank in (5, 8, None):
    began = time.perf_counter()
    r = cl.solve(problem, device="cpu", rank=rank, time_limit=600)
    print(f"| {side * side} | {rank or 'default'} | {r.status.value} | {time.perf_counter() - began:.1f} | "
          f"{r.iterations['riemannian']} | {r.ranks[0]} | {r.certified_gap:.2e} |", flush=True)
