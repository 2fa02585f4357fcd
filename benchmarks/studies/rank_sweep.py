"""Starting rank of the Riemannian phase: steps and seconds of a default solve against the initial rank.

Usage::

    python benchmarks/studies/rank_sweep.py gset:G67:2,3,4,6 delaunay:20:2,4,6 --device gpu --time-limit 60

Each argument is ``suite:size:factors`` (the suite and size as in ``run.py``); every factor f runs the defaults with
``rank_factor=f``, that is ceil(f ln n) columns to start with. A row gives the seconds after set-up, the Riemannian
steps, the final ranks, the certified gap, the seconds of the dual certificates, the status and the peak device
memory; the table is written to ``<out>/rank-sweep/<device>.csv`` with its ``.meta.json``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402

import suites  # noqa: E402
from report import device_slug, write_tables  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="suite:size:factors, e.g. gset:G67:2,4,6")
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = parser.parse_args()
    backend = select_backend(args.device)
    if not backend.on_host:
        warm_up(backend)
    rows = []
    for spec in args.runs:
        suite, size, factors = spec.split(":")
        instance = suites.instances(suite, size, backend.name)[0]
        problem, _ = instance.build()
        for factor in (float(f) for f in factors.split(",")):
            result = cl.solve(problem, device=backend.name, time_limit=args.time_limit, rank_factor=factor)
            seconds = round(result.solve_time - result.setup_time, 3)
            row = dict(instance=instance.name, rank_factor=factor, seconds=seconds,
                       steps=result.iterations["riemannian"], ranks=result.ranks, certified_gap=result.certified_gap,
                       certificates_s=round(result.stage_times["certificates"], 3), status=result.status.value,
                       peak_gib=round(result.peak_device_bytes / 2**30, 2))
            rows.append(row)
            print(*row.values(), flush=True)
    print(write_tables(rows, args.out / "rank-sweep" / device_slug(backend.describe()),
                       f"rank sweep on {backend.describe()}, {time.strftime('%Y-%m-%d')}", device=backend.describe()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
