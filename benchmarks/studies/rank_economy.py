"""Rank economy of the Riemannian phase: the numerical rank of the certified optimum against the start rank, and how
it evolves over the steps (decision record "rank-economy").

Each argument is ``suite:size`` as in ``run.py`` (``delaunay:16``, ``rgg:16``, ``sparse:1e5``, ``gset:G67``). Every
instance is built once and solved with the defaults ``--repeats`` times. A row gives the status, the seconds after
set-up, the Riemannian steps, ms per step, the final width, the certified gap and value, and the numerical rank of
the returned factor: how many right singular directions carry all but 1e-8 and 1e-6 of ||R||_F^2. With ``--trace N``
the solves also print those ranks every N steps (and at every run's end), to show how early the trailing energy gets
small. Run from the repository root, e.g. on the 2-core CPU::

    OMP_NUM_THREADS=1 python benchmarks/studies/rank_economy.py gset:G22 gset:G67 delaunay:16 --device cpu \\
        --trace 100 --out benchmarks/results/rank-economy/cpu-2core

and on a GPU with ``--device gpu delaunay:20 rgg:22 sparse:1e6``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.phases import riemannian  # noqa: E402

import suites  # noqa: E402
from report import device_slug, write_tables  # noqa: E402

COLUMNS = ["instance", "status", "seconds", "steps", "ms_per_step", "width", "certified_gap", "value", "rank_1e-8",
           "rank_1e-6"]
SHARES = (1e-8, 1e-6)  # the numerical ranks reported: all but this share of ||R||_F^2

_run = riemannian.RiemannianPhase.run
_trace_every = 0


def _energies(R):
    """The squared singular values of R (a host or device factor), on the host."""
    R = R.get() if hasattr(R, "get") else np.asarray(R)
    return np.clip(np.linalg.eigvalsh(R.T @ R), 0.0, None)


def _numerical_rank(energies, share: float) -> int:
    """How many of the largest squared singular values ``energies`` carry all but ``share`` of their sum."""
    tail = np.cumsum(np.sort(energies))  # the energy of the smallest k directions, k = 1, 2, ...
    return int(energies.size - np.searchsorted(tail, share * tail[-1], side="right"))


def numerical_ranks(R) -> list[int]:
    """How many right singular directions of R carry all but each of ``SHARES`` of ||R||_F^2."""
    energies = _energies(R)
    return [_numerical_rank(energies, share) for share in SHARES]


def _spectrum_line(R) -> str:
    """The numerical ranks and the smallest direction's share of ||R||_F^2, for the trace."""
    energies = _energies(R)
    return f"ranks {numerical_ranks(R)} smallest share {energies.min() / energies.sum():.1e}"


def _traced(phase):
    """The Riemannian phase's run, printing the numerical ranks every ``_trace_every`` steps and at its end."""
    for progress in _run(phase):
        if _trace_every and phase.steps % _trace_every == 1:
            print(f"    step {phase.steps:5d} measure {phase.measure:.1e} width {phase.state.R.shape[1]} "
                  f"{_spectrum_line(phase.state.R)}", flush=True)
        yield progress
    if _trace_every:
        print(f"    run end after {phase.steps} steps: measure {phase.measure:.1e} target {phase.target:.1e} "
              f"{_spectrum_line(phase.state.R)} {phase.outcome}", flush=True)


def main() -> int:
    global _trace_every
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instances", nargs="+", help="suite:size, e.g. delaunay:16 gset:G67 sparse:1e5")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--trace", type=int, default=0, help="print the numerical ranks every N steps")
    parser.add_argument("--out", type=Path, default=None, help="table stem (CSV and .meta.json)")
    args = parser.parse_args()
    riemannian.RiemannianPhase.run = _traced
    backend = select_backend(args.device)
    if not backend.on_host:
        warm_up(backend)
    _trace_every = args.trace
    rows = []
    for spec in args.instances:
        suite, size = spec.split(":")
        instance = suites.instances(suite, size, backend.name)[0]
        problem, _ = instance.build()
        for _ in range(args.repeats):
            result = cl.solve(problem, device=backend.name, time_limit=args.time_limit)
            seconds = result.solve_time - result.setup_time
            steps = result.iterations["riemannian"]
            row = dict(instance=instance.name, status=result.status.value, seconds=round(seconds, 2), steps=steps,
                       ms_per_step=round(1e3 * result.stage_times.get("riemannian", seconds) / max(steps, 1), 2),
                       width=result.ranks[0], certified_gap=f"{result.certified_gap:.2e}",
                       value=f"{result.primal_objective:.10g}",
                       **dict(zip(COLUMNS[-2:], numerical_ranks(result.factors[0]))))
            rows.append(row)
            print(*row.values(), flush=True)
    title = f"rank economy on {backend.describe()}, {time.strftime('%Y-%m-%d')}: defaults, {args.repeats} repeats"
    if args.out is None:
        print(title)
        for row in rows:
            print("| " + " | ".join(str(v) for v in row.values()) + " |")
        return 0
    print(write_tables(rows, args.out.parent / f"{args.out.name}-{device_slug(backend.describe())}", title,
                       columns=COLUMNS, device=backend.describe()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
