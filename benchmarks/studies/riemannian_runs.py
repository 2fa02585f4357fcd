"""The Riemannian phase's runs, one row each: what every run cost and what its point measured before the schedule
decided (a tighter run, an escape to a wider factor, or the end).

Usage::

    python benchmarks/studies/riemannian_runs.py --suite gset --sizes G1,G22 [--device cpu] [--time-limit 300]

Each instance of ``--suite`` (the harness's suites) is solved with the defaults; a row per run of
:class:`~cvxpy_culorads.phases.riemannian.RiemannianPhase` gives its rank, steps, seconds, gradient target and the
gradient measure it ended at, then the measurement of its point that the schedule (``solver/strategies.py``,
``Spheres``) read: the certified gap, the slack's smallest eigenvalue, and their ratio to the run's gradient measure,
and what followed (``next``: the next run's rank, or "end"). A low-rank saddle shows as a run whose gap does not fall
with its gradient measure, followed by an escape: the question this study answers is how early that shows.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.phases import riemannian  # noqa: E402
from cvxpy_culorads.solver import run as solver_run  # noqa: E402

import suites  # noqa: E402

_runs: list[dict] = []  # the runs of the solve in progress
_phase_run, _keep_current = riemannian.RiemannianPhase.run, solver_run.Run.keep_current


def _recorded_run(phase):
    start = time.perf_counter()
    try:
        yield from _phase_run(phase)
    finally:
        _runs.append(dict(rank=phase.state.R.shape[1], steps=phase.steps, seconds=time.perf_counter() - start,
                          target=phase.target, measure=phase.measure, single=phase.single))


def _recorded_keep(run):
    snapshot = _keep_current(run)
    if _runs and "gap" not in _runs[-1]:  # the measurement of the last run's point
        evaluation = snapshot.evaluation
        _runs[-1]["gap"] = evaluation.certified_gap
        _runs[-1]["eigenvalue"] = min((pair.value for pair in evaluation.eigenpairs), default=float("nan"))
    return snapshot


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(suites.SUITES), required=True)
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--time-limit", type=float, default=300.0)
    args = parser.parse_args(argv)
    riemannian.RiemannianPhase.run, solver_run.Run.keep_current = _recorded_run, _recorded_keep
    rows = []
    for instance in suites.SUITES[args.suite](args.sizes, args.device):
        problem, _ = instance.build()
        _runs.clear()
        result = cl.solve(problem, device=args.device, tol=args.tol, time_limit=args.time_limit)
        for index, entry in enumerate(_runs):
            following = _runs[index + 1]["rank"] if index + 1 < len(_runs) else "end"
            gap = entry.get("gap")
            ratio = gap / entry["measure"] if gap is not None and entry["measure"] > 0 else float("nan")
            rows.append((instance.name, index + 1, entry["rank"], "single" if entry["single"] else "double",
                         entry["steps"], entry["seconds"], entry["target"], entry["measure"],
                         float("nan") if gap is None else gap, entry.get("eigenvalue", float("nan")), ratio,
                         following, result.status.value))
            print(*rows[-1], flush=True)
    print("\n| instance | run | rank | precision | steps | seconds | target | measure | certified gap | lambda_min "
          "| gap / measure | next | status |")
    print("|" + "---|" * 13)
    for (name, index, rank, precision, steps, seconds, target, measure, gap, eigenvalue, ratio, following,
         status) in rows:
        print(f"| {name} | {index} | {rank} | {precision} | {steps} | {seconds:.2f} | {target:.1e} | {measure:.2e} | "
              f"{gap:.2e} | {eigenvalue:.2e} | {ratio:.1f} | {following} | {status} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
