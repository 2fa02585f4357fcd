"""MaxCut through CVXPY's two entry points beside the direct API: what a user waits for, and the memory.

Usage::

    python benchmarks/studies/cvxpy_paths.py [--sizes 1000,2000,4000,10000,100000] [--gset G67] [--chain-max 4000]
                                     [--device cpu] [--time-limit 600] [--out DIR]

Every instance (the graphs of ``graphs.random_regular_like(n, 6)``, average degree about 6, and Gset files) is
solved three ways, each in a process of its own so that ``*_peak_gb`` is that path's peak resident memory:

- ``direct``: ``solve(maxcut_problem(W))``, the direct API (building the SDPProblem included);
- ``method``: ``prob.solve(method="culorads")`` on ``cp.Maximize(cp.trace(L @ X) / 4)``, ``cp.diag(X) == 1``,
  ``X = cp.Variable((n, n), PSD=True)``: building the model, reading it (``method_read_s``) and the values
  (X.value is formed up to ``max_value_bytes``, 2 GiB by default: up to n = 16384);
- ``chain``: ``prob.solve(solver="CULORADS")``, CVXPY's canonicalisation (default backend), up to ``--chain-max``.

``*_seconds`` is the whole call, ``*_engine_s`` the engine's ``solve_time``, both of the fastest of ``--repeat``
calls (each builds the model anew; on the GPU, where an engine's trajectory varies from run to run, 3 shows the
spread: ``*_slowest_s``). Each child imports CVXPY and the package, and (on the GPU) solves a small problem first,
before its clock starts. A line per run as it finishes, then a
Markdown table; ``<device>.csv`` and its ``.meta.json`` go to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cvxpy_culorads.backends.backend import select_backend  # noqa: E402

from report import device_slug, write_tables  # noqa: E402

PATHS = ("direct", "method", "chain")


def _graph(name: str):
    from cvxpy_culorads.models import read_graph

    from graphs import random_regular_like
    from suites import DATA
    if name.startswith("G"):
        return read_graph(DATA / "gset" / name)
    return random_regular_like(int(float(name)), 6)


def _one(path: str, name: str, device: str, time_limit: float, repeat: int) -> dict:
    """``repeat`` solves in this process; returns the measurements of the fastest, and the slowest time."""
    import resource

    import cvxpy as cp
    import numpy as np
    import scipy.sparse as sp

    import cvxpy_culorads as cl
    from cvxpy_culorads.models import maxcut_problem

    W = _graph(name)
    if device == "gpu":  # CuPy compiles its kernels once per process: not part of any path's time
        cl.solve(maxcut_problem(_graph("200")), device="gpu")
    options = dict(device=device, time_limit=time_limit)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        if path == "direct":
            result = cl.solve(maxcut_problem(W), **options)
            value, read = -result.primal_objective, 0.0
        else:
            degree = np.asarray(W.sum(axis=1)).ravel()
            L = sp.diags_array(degree) - W
            X = cp.Variable(W.shape, PSD=True)
            prob = cp.Problem(cp.Maximize(cp.trace(L @ X) / 4), [cp.diag(X) == 1])
            if path == "method":
                value = prob.solve(method="culorads", **options)
            else:
                value = prob.solve(solver="CULORADS", **options)
            result = prob.solver_stats.extra_stats
            read = prob.solver_stats.setup_time or 0.0
        runs.append(dict(seconds=time.perf_counter() - start, engine_s=result.solve_time, read_s=read,
                         value=float(value), status=result.status.value))
    fastest = min(runs, key=lambda run: run["seconds"])
    return fastest | dict(slowest_s=max(run["seconds"] for run in runs),
                          peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)


def _run(path: str, name: str, args) -> dict | None:
    command = [sys.executable, __file__, "--one", path, "--graph", name, "--device", args.device,
               "--time-limit", str(args.time_limit), "--repeat", str(args.repeat)]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        print(f"  {path} on {name} failed: {done.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2000,4000,10000,100000")
    parser.add_argument("--gset", default="G67")
    parser.add_argument("--chain-max", type=int, default=4000, help="largest n solved through CVXPY's chain")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--repeat", type=int, default=1, help="calls per path and instance; the fastest is shown")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "cvxpy-paths"))
    parser.add_argument("--one", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.graph, args.device, args.time_limit, args.repeat)), flush=True)
        return

    names = [v for v in args.sizes.split(",") if v] + [v for v in args.gset.split(",") if v]
    rows = []
    for name in names:
        W = _graph(name)
        n = W.shape[0]
        row = dict(instance=name if name.startswith("G") else f"random n={n}", n=n, edges=W.nnz // 2)
        for path in PATHS:
            if path == "chain" and n > args.chain_max:
                continue
            measured = _run(path, name, args)
            if measured is None:
                continue
            shown = {key: value for key, value in measured.items() if key != "read_s" or path == "method"}
            if args.repeat == 1:
                shown.pop("slowest_s")
            row.update({f"{path}_{key}": value for key, value in shown.items()})
            print(f"{row['instance']:>16} {path:>6}: {measured['seconds']:8.2f} s (engine {measured['engine_s']:.2f}) "
                  f"{measured['peak_gb']:.2f} GB {measured['status']} {measured['value']:.6f}", flush=True)
        if "method_seconds" in row and "direct_seconds" in row:
            row["method_over_direct"] = row["method_seconds"] / row["direct_seconds"]
        rows.append(row)
    columns = ["instance", "n", "edges", "direct_seconds", "method_seconds", "method_over_direct", "method_read_s",
               "chain_seconds", "direct_slowest_s", "method_slowest_s", "chain_slowest_s", "direct_peak_gb",
               "method_peak_gb", "chain_peak_gb", "direct_engine_s", "method_engine_s", "chain_engine_s",
               "direct_status", "method_status", "chain_status", "direct_value", "method_value", "chain_value"]
    title = (f"MaxCut through CVXPY, {args.device}, {datetime.date.today()}: `*_seconds` whole call, `*_peak_gb` "
             "peak resident memory of the path's process")
    device = select_backend(args.device).describe()
    print(write_tables(rows, Path(args.out) / device_slug(device), title, device=device,
                       columns=[c for c in columns if any(c in row for row in rows)]))


if __name__ == "__main__":
    main()
