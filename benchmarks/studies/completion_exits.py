"""Completion n = 2e4, m = 7.7e6 (the targets' ``completion2e4``): phase I's exit (which test, at which step and
penalty) and phase II's runs (start penalty, sweeps, restarts), for the defaults and the variants of decision record
"completion-phase-two" (section "Phase I's exit at a stationary point").

Usage, from the repository root::

    python3 benchmarks/studies/completion_exits.py [--device gpu] [--variants "defaults,old exit"]

Variants (``VARIANTS``): the defaults (solved three times: the first solve of the process, a second, a third with the
iteration log); "old exit": phase I's "tol" exit without the test that its point solves its subproblem (the probe
``tol_exit_anywhere`` of ``completion_phases.py``), i.e. phase I before that test; "slack penalty": phase II starts at
no less than its slack's largest eigenvalue (probe ``slack_penalty``; not kept), alone and with the old exit;
"rank=10": the record's earlier reference. Printed last: one row per variant.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import completion_phases as study  # noqa: E402  (its probes)

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.phases import admm  # noqa: E402
from cvxpy_culorads.solver import strategies  # noqa: E402

import suites  # noqa: E402

VARIANTS = {  # name -> (solve options, probes of completion_phases.PROBES)
    "defaults (first solve)": ({}, []),
    "defaults": ({}, []),
    "defaults (verbose)": ({"verbose": True}, []),
    "old exit": ({}, ["tol_exit_anywhere"]),
    "old exit, slack penalty": ({}, ["tol_exit_anywhere", "slack_penalty"]),
    "slack penalty": ({}, ["slack_penalty"]),
    "rank=10": ({"rank": 10}, []),
}
_log: dict = {}
_run_alm, _admm_run = strategies._run_alm, admm.ADMMPhase.run


def _logged_alm(run, alm):
    stop = _run_alm(run, alm)
    _log.setdefault("exit", f"{alm.exit or alm.outcome.value} @{alm.steps} rho {run.state.rho:.3g}")
    return stop


def _logged_admm(self):
    rho = self.state.rho
    result = yield from _admm_run(self)
    _log.setdefault("admm", []).append(f"{rho:.3g}:{self.sweeps}" + (f"/{self.restarts}r" if self.restarts else ""))
    return result


def solve_variant(problem, base: dict, device: str, options: dict, probes: list) -> tuple:
    """One solve with the probes set for it: (status, seconds after set-up, phase I's exit, ALM steps, ADMM sweeps,
    phase II's runs, stage seconds, certified gap, final penalty, wall seconds)."""
    patches = [patch for probe in probes for patch in study.PROBES[probe]]
    saved = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in patches]
    for owner, attribute, value in patches:
        setattr(owner, attribute, value)
    _log.clear()
    start = time.perf_counter()
    try:
        result = cl.solve(problem, device=device, **(base | options))
    finally:
        for owner, attribute, value in saved:
            setattr(owner, attribute, value)
    stages, gap = result.stage_times, result.certified_gap
    return (result.status.name, round(result.solve_time - result.setup_time, 3), _log.get("exit", "-"),
            result.iterations.get("alm"), result.iterations.get("admm"), " ".join(_log.get("admm", [])) or "-",
            round(stages.get("alm", 0), 3), round(stages.get("admm", 0), 3), round(stages.get("certificates", 0), 3),
            f"{gap:.2e}" if gap is not None else "-", f"{result.penalty:.3g}", round(time.perf_counter() - start, 2))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="names of VARIANTS, comma-separated")
    args = parser.parse_args(argv)
    chosen = args.variants.split(",")
    unknown = [name for name in chosen if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; expected names of {list(VARIANTS)}")
    strategies._run_alm, admm.ADMMPhase.run = _logged_alm, _logged_admm
    study._admm_run = _logged_admm  # the slack_penalty probe runs phase II through it after raising the penalty
    (instance,) = suites.instances("targets", "completion2e4", args.device)
    problem, _ = instance.build()
    base = suites.settings_for(instance, "accurate")
    rows = [(name, *solve_variant(problem, base, args.device, *VARIANTS[name])) for name in chosen]
    print("| variant | status | seconds | phase I exit (test @step rho) | alm steps | admm sweeps | phase II runs "
          "(start rho:sweeps/restarts) | alm_s | admm_s | cert_s | certified gap | penalty at the end | wall s |")
    print("|" + "---|" * 13)
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
