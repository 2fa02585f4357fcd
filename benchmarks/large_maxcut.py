"""Scaling benchmark: MaxCut SDPs of the paper's synthetic graph families, on one device.

Usage::

    python benchmarks/large_maxcut.py --suite rgg --sizes 15,17,19,20 [--device gpu] [--out DIR]
    python benchmarks/large_maxcut.py --suite delaunay --sizes 13,14,16,18

Suites (recipes and seeds in ``benchmarks/graphs.py``): ``rgg`` = rgg_n_2_k, the random geometric
graph on 2^k uniform points with radius 0.55 sqrt(ln n / n), generated on the GPU when the device is
one; ``delaunay`` = delaunay_nk, the Delaunay triangulation of 2^k uniform points (Qhull, on the CPU).
For each size it builds the SDP with ``models.maxcut_problem``, solves it, and reports the whole call
(``total_s``), the part that compresses the data onto the device (``setup_s``) and the rest
(``seconds``, the number comparable to the paper's times, which start once the data is on the
device), iterations, the SDP value, the three DIMACS errors, the status and the peak device memory.
It prints a line per instance, then a Markdown table, and writes ``<suite>_<device>.csv/.md``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cvxpy_culorads as cl  # noqa: E402
import graphs  # noqa: E402
from cvxpy_culorads.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402
from report import release_device_memory, result_fields, write_tables  # noqa: E402

# The cuLoRADS paper's H100 times (seconds) as quoted in the issue tracker.
PAPER_H100_SECONDS = {
    "delaunay": {13: 0.2, 16: 0.4, 18: 0.7, 20: 1.7, 22: 8.7, 24: 42.1},
    "rgg": {19: 1.3, 20: 2.6, 22: 13.5, 24: 62.7},
}


def build_graph(suite: str, k: int, device: str):
    if suite == "rgg":
        W = graphs.rgg_graph(k, seed=0, device=device)
        return W.get() if device == "gpu" else W
    return graphs.delaunay_graph(k, seed=0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(PAPER_H100_SECONDS), required=True)
    parser.add_argument("--sizes", default="13,14,15")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)

    backend = select_backend(args.device)
    print(f"{args.suite} MaxCut on {backend.describe()}, tol {args.tol:g}", flush=True)
    cl.solve(maxcut_problem(graphs.random_regular_like(200, 6, seed=1)), device=backend.name)  # warm-up
    rows = []
    for k in (int(v) for v in args.sizes.split(",")):
        start = time.perf_counter()
        W = build_graph(args.suite, k, backend.name)
        problem = maxcut_problem(W, name=f"{args.suite}{k}")
        built = time.perf_counter() - start
        release_device_memory(backend)
        result = cl.solve(problem, device=backend.name, tol=args.tol, time_limit=args.time_limit)
        paper = PAPER_H100_SECONDS[args.suite].get(k)
        solve_s = result.solve_time - result.setup_time
        row = dict(instance=f"{args.suite}_2^{k}", n=W.shape[0], edges=W.nnz // 2, build_s=round(built, 2),
                   total_s=round(result.solve_time, 3), sdp_value=-result.primal_objective,
                   **result_fields(result, backend, solve_s, paper))
        rows.append(row)
        print(f"{row['instance']:>14} n={row['n']:9d} edges={row['edges']:10d} solve {solve_s:8.2f}s "
              f"(setup {result.setup_time:.2f}s) max err {result.max_error:.1e} {row['status']}", flush=True)

    print(write_tables(rows, args.out / f"{args.suite}_{backend.name}",
                       f"{args.suite} MaxCut SDP on {backend.describe()}, {time.strftime('%Y-%m-%d')}, "
                       f"tol {args.tol:g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
