"""Both precisions (``precision="double"`` and ``"mixed"``) on the same MaxCut instances: status, value against the
reference, Riemannian steps in single and in double precision, stage times, certified gap; one CSV row per solve.

Instances: Gset graphs by name (the certified values of ``../shared/data/gset``) and the ``sparse`` suite's
``graphs.random_regular_like(n, 4)`` by size; defaults otherwise (the "accurate" profile), at each ``--tols`` value.
Run from the repository root, e.g. on the 2-core CPU::

    OMP_NUM_THREADS=1 python benchmarks/studies/precision.py --device cpu --gset G1,G14,G22 --sparse 1e5 \\
        --out benchmarks/results/precision/cpu-2core.csv

and on a GPU with ``--device gpu --sparse 1e6,1e7`` (the kernels are compiled by a warm-up solve first).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.phases import riemannian  # noqa: E402

from suites import SUITES  # noqa: E402

COLUMNS = ("instance", "n", "precision", "tol", "status", "value", "reference", "rel_error", "seconds",
           "riemannian_s", "certificates_s", "single_steps", "double_steps", "ms_per_step", "single_runs",
           "double_runs", "rank", "certified_gap", "primal_residual", "device")

_runs: list[tuple[bool, int]] = []  # (single, steps) of every Riemannian run of the solve in progress
_run = riemannian.RiemannianPhase.run


def _recorded(phase):
    try:
        yield from _run(phase)
    finally:
        _runs.append((phase.single, phase.steps))


riemannian.RiemannianPhase.run = _recorded


def row(instance, problem, precision: str, tol: float, device: str, time_limit: float) -> dict:
    _runs.clear()
    start = time.perf_counter()
    result = cl.solve(problem, device=device, precision=precision, tol=tol, time_limit=time_limit)
    seconds = time.perf_counter() - start
    value = instance.sign * result.primal_objective
    single = sum(steps for is_single, steps in _runs if is_single)
    double = sum(steps for is_single, steps in _runs if not is_single)
    riemannian_s = result.stage_times["riemannian"]
    return {"instance": instance.name, "n": problem.block_sizes[0], "precision": precision, "tol": tol,
            "status": result.status.value, "value": value, "reference": instance.reference,
            "rel_error": None if instance.reference is None else abs(value - instance.reference) / instance.reference,
            "seconds": round(seconds, 3), "riemannian_s": round(riemannian_s, 3),
            "certificates_s": round(result.stage_times["certificates"], 3), "single_steps": single,
            "double_steps": double, "ms_per_step": round(1e3 * riemannian_s / max(single + double, 1), 3),
            "single_runs": sum(s for s, _ in _runs), "double_runs": sum(not s for s, _ in _runs),
            "rank": max(result.ranks), "certified_gap": result.certified_gap,
            "primal_residual": result.errors.primal_residual, "device": result.device}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--gset", default="G1,G14,G22", help="Gset graphs, comma-separated (empty: none)")
    parser.add_argument("--sparse", default="1e5", help="sizes of the sparse suite, comma-separated (empty: none)")
    parser.add_argument("--tols", default="1e-5,1e-7", help="tolerances, comma-separated")
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=None, help="CSV file (default: print only)")
    args = parser.parse_args(argv)
    if args.device == "gpu":
        warm_up(select_backend("gpu"))
    instances = ((SUITES["gset"](args.gset, args.device) if args.gset else [])
                 + (SUITES["sparse"](args.sparse, args.device) if args.sparse else []))
    rows = []
    for instance in instances:
        problem, _ = instance.build()
        for tol in (float(t) for t in args.tols.split(",")):
            for precision in ("double", "mixed"):
                rows.append(row(instance, problem, precision, tol, args.device, args.time_limit))
                print(" ".join(f"{key}={rows[-1][key]}" for key in COLUMNS[:17]), flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
