"""Warm starts over parameter sweeps: each step of a sweep solved cold and warm (from the last step's warm result).

Usage::

    python benchmarks/studies/warm_start.py [--steps 6] [--device cpu] [--out benchmarks/results/warm-start]

The sweeps change about 1 % of the data per step, as a user's parameter sweep does:

- ``maxcut-weights``: Gset G1 (bundled, n = 800), every edge weight times 1 + 0.01 u, u uniform on [-1, 1];
- ``theta-edges``: theta of the Hamming graph H(2, 12) (n = 144, m = 1585), one more edge per step (m grows);
- ``completion-entries``: nuclear-norm completion of a rank-3 300 x 300 matrix from 20 % of its entries, 1 % more
  observed entries per step (m grows);
- ``mixed-b``: two PSD blocks and three nonnegative variables (``tests/support.random_mixed_problem``), b times
  1 + 0.01 u; phases I and II forced (``algorithm="low_rank"``, no interior-point hand-over) so that both starts run
  the same method.

A row per step: the low-rank iterations and seconds of the cold and the warm solve, their ratio, both statuses and
the objectives' relative difference (both certified within ``tol`` of the optimum). A line per step as it finishes,
then the Markdown table; ``<device>.csv`` and its ``.meta.json`` go to ``--out``. Decision record "warm-start".
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads import models  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402

from report import device_slug, write_tables  # noqa: E402
from support import random_mixed_problem  # noqa: E402

CHANGE = 0.01  # the relative change of the data per step


def _maxcut_weights(steps: int):
    """G1's MaxCut SDP with its weights moved by CHANGE per step."""
    rng = np.random.default_rng(0)
    W = sp.csr_array(sp.triu(models.read_graph(models.bundled_graph("G1")), 1))
    for _ in range(steps):
        yield models.maxcut_problem(W + W.T), {}
        W = W.copy()
        W.data = W.data * (1.0 + CHANGE * rng.uniform(-1.0, 1.0, W.data.size))


def _theta_edges(steps: int):
    """Theta of H(2, 12), one more edge (between vertices differing in both letters) per step."""
    rng = np.random.default_rng(0)
    G = models.hamming_graph(2, 12).tolil()
    n = G.shape[0]
    for _ in range(steps):
        yield models.theta_problem(sp.csr_array(G)), {}
        while True:
            i, j = rng.integers(n, size=2)
            if i != j and not G[i, j]:
                break
        G[i, j] = G[j, i] = 1.0


def _completion_entries(steps: int):
    """A rank-3 300 x 300 matrix from 20 % of its entries, CHANGE more observed entries per step."""
    rng = np.random.default_rng(0)
    n1 = n2 = 300
    P, Q = rng.standard_normal((n1, 3)), rng.standard_normal((n2, 3))
    observed = rng.random((n1, n2)) < 0.2
    for _ in range(steps):
        rows, cols = np.nonzero(observed)
        yield models.completion_problem(rows, cols, np.einsum("ij,ij->i", P[rows], Q[cols]), (n1, n2)), {}
        unobserved = np.flatnonzero(~observed)
        observed.flat[rng.choice(unobserved, int(CHANGE * rows.size), replace=False)] = True


def _mixed_b(steps: int):
    """``random_mixed_problem`` with b moved by CHANGE per step, phases I and II on both starts."""
    rng = np.random.default_rng(0)
    problem = random_mixed_problem(seed=0)
    for _ in range(steps):
        yield problem, dict(algorithm="low_rank", interior_point_handover=False)
        b = problem.b * (1.0 + CHANGE * rng.uniform(-1.0, 1.0, problem.m))
        problem = cl.SDPProblem(b, problem.C_coords, problem.A_coords, block_sizes=problem.block_sizes,
                                c_lp=problem.c_lp, A_lp=problem.A_lp)


SWEEPS = {"maxcut-weights": _maxcut_weights, "theta-edges": _theta_edges,
          "completion-entries": _completion_entries, "mixed-b": _mixed_b}


def _iterations(result) -> int:
    return sum(result.iterations.values())


def sweep(name: str, steps: int, device: str) -> list[dict]:
    """The rows of one sweep: step 0 is the first solve (cold), each later step is solved cold and warm."""
    rows, previous = [], None
    for step, (problem, options) in enumerate(SWEEPS[name](steps + 1)):
        cold = cl.solve(problem, device=device, **options)
        if previous is None:
            previous = cold
            continue
        warm = cl.solve(problem, device=device, warm_start=previous, **options)
        scale = 1.0 + abs(cold.primal_objective) + abs(warm.primal_objective)
        row = dict(sweep=name, step=step, n=sum(problem.block_sizes) + problem.n_lp, m=problem.m,
                   cold_iterations=_iterations(cold), warm_iterations=_iterations(warm),
                   ratio=round(_iterations(warm) / max(_iterations(cold), 1), 2),
                   cold_s=round(cold.solve_time, 3), warm_s=round(warm.solve_time, 3),
                   cold_status=cold.status.value, warm_status=warm.status.value,
                   objective_difference=float(f"{abs(warm.primal_objective - cold.primal_objective) / scale:.2g}"))
        print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
        rows.append(row)
        previous = warm
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", default=",".join(SWEEPS))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "warm-start"))
    args = parser.parse_args(argv)
    rows = [row for name in args.sweeps.split(",") for row in sweep(name, args.steps, args.device)]
    cold, warm = sum(r["cold_iterations"] for r in rows), sum(r["warm_iterations"] for r in rows)
    device = select_backend(args.device).describe()
    footer = f"All steps: {warm} warm iterations against {cold} cold ({warm / cold:.2f})."
    print(write_tables(rows, Path(args.out) / device_slug(device),
                       f"Warm against cold starts over parameter sweeps on {args.device}, {time.strftime('%Y-%m-%d')}",
                       footer=footer, device=device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
