"""Gset MaxCut benchmark: solve the MaxCut SDP of each Gset graph and compare with known values.

Usage::

    python benchmarks/gset.py --data ../shared/data/gset [--device gpu] [--graphs G1,G22|all]
                              [--out benchmarks/results] [--tol 1e-5]

For every graph it builds the SDP with ``models.maxcut_problem`` (O(edges)), solves it once to
warm up the kernels (the first graph only), then times ``solve`` (wall clock around the call,
which includes compressing the data onto the device, unlike the paper's times). It prints a
progress line per graph and a Markdown table at the end, and writes ``gset_<device>.csv`` and
``gset_<device>.md`` to ``--out``. Reference SDP values are the certified midpoints of the data
README; the paper's H100 times are listed where the issue tracker quotes them.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem, read_graph  # noqa: E402
from report import release_device_memory, result_fields, write_tables  # noqa: E402

PAPER_H100_SECONDS = {"G1": 0.4, "G22": 3.0, "G60": 0.2, "G64": 2.2, "G67": 0.6}

def reference_values(readme: Path) -> dict[str, float]:
    """Midpoints of the certified primal/dual bounds in the Gset README."""
    values = {}
    for line in readme.read_text().splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) > 6 and re.fullmatch(r"G\d+", cols[1]) and "/" in cols[6]:
            low, high = (float(v) for v in cols[6].split("/"))
            values[cols[1]] = 0.5 * (low + high)
    return values

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/gset")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--graphs", default="all")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--time-limit", type=float, default=600.0)
    args = parser.parse_args(argv)

    backend = select_backend(args.device)
    references = reference_values(args.data / "README.md")
    names = sorted(references, key=lambda g: int(g[1:])) if args.graphs == "all" else args.graphs.split(",")
    print(f"Gset benchmark on {backend.describe()}, tol {args.tol:g}, {len(names)} graphs", flush=True)

    warm = maxcut_problem(read_graph(args.data / names[0]))
    cl.solve(warm, device=backend.name, tol=args.tol)  # compiles kernels, initialises libraries

    rows = []
    for name in names:
        W = read_graph(args.data / name)
        problem = maxcut_problem(W, name=name)
        release_device_memory(backend)
        start = time.perf_counter()
        result = cl.solve(problem, device=backend.name, tol=args.tol, time_limit=args.time_limit)
        seconds = time.perf_counter() - start
        value = -result.primal_objective
        reference = references.get(name, float("nan"))
        paper = PAPER_H100_SECONDS.get(name)
        row = dict(graph=name, n=W.shape[0], edges=W.nnz // 2, sdp_value=value, reference=reference,
                   rel_error=abs(value - reference) / abs(reference), **result_fields(result, backend, seconds, paper))
        rows.append(row)
        print(f"{name:>4} n={row['n']:6d} {seconds:8.3f}s value {value:.6f} rel {row['rel_error']:.1e} "
              f"max err {result.max_error:.1e} {row['status']}", flush=True)

    total = sum(r["seconds"] for r in rows)
    optimal = sum(r["status"] == "optimal" for r in rows)
    print(write_tables(
        rows, args.out / f"gset_{backend.name}",
        f"Gset MaxCut SDP on {backend.describe()}, {time.strftime('%Y-%m-%d')}, tol {args.tol:g}",
        f"total {total:.2f} s over {len(rows)} graphs; {optimal} optimal; "
        f"max rel. error vs reference {max(r['rel_error'] for r in rows):.1e}",
        ["graph", "n", "seconds", "alm_steps", "admm_sweeps", "rank", "sdp_value", "rel_error", "pinf", "dinf", "gap",
         "status", "peak_gib", "paper_h100_s", "ratio"]))
    return 0

if __name__ == "__main__":
    sys.exit(main())
