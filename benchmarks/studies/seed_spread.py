"""The spread of a certified solve's steps and seconds over the starting point's seed.

Usage::

    python benchmarks/studies/seed_spread.py --suite targets --sizes G67,delaunay20,rgg22 --seeds 925,1,2 \\
        --profiles accurate,mixed --device gpu --time-limit 30 --variant m1:lbfgs_memory=1

A Riemannian solve's path hangs on rounding: a change that alters the order of a sum (a kernel's grid, a lane layout)
changes the steps taken as much as a new starting point does. This study solves each instance of ``--suite`` (the
harness's suites and profiles, ``suites.settings_for``) from each seed of ``--seeds`` (``Settings.seed``; 925 is
the default) and prints, last, one row per solve (status, seconds of the solve less its set-up, Riemannian steps,
ms per step, certificate seconds, certified gap), then each instance's and profile's median and range of seconds and
steps: the noise against which a change's effect on a table row is read.
"""
from __future__ import annotations

import argparse
import ast
import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402

import suites  # noqa: E402


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME:key=value,key=value`` as (NAME, {key: value}), each value a Python literal where it reads as one."""
    name, _, pairs = text.partition(":")

    def value(raw: str):
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return raw
    return name, {key: value(raw) for key, _, raw in (pair.partition("=") for pair in pairs.split(",") if pair)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(suites.SUITES), default="targets")
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--seeds", default="925,1,2")
    parser.add_argument("--profiles", default="accurate")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--variant", action="append", default=[], type=parse_variant,
                        help="NAME:key=value,...: also solve with these options (repeatable)")
    args = parser.parse_args(argv)
    variants = [("", {}), *args.variant]
    backend = select_backend(args.device)
    if args.device == "gpu":
        warm_up(backend)
    rows = []
    for instance in suites.SUITES[args.suite](args.sizes, args.device):
        problem, _ = instance.build()
        for profile, (variant, overrides), seed in itertools.product(
                args.profiles.split(","), variants, (int(s) for s in args.seeds.split(","))):
            options = dict(device=backend.name, tol=args.tol, time_limit=args.time_limit, seed=seed)
            result = cl.solve(problem, **(options | suites.settings_for(instance, profile) | overrides))
            seconds = result.solve_time - result.setup_time
            steps = result.iterations["riemannian"]
            rows.append((instance.name, f"{profile} {variant}".strip(), seed, result.status.value, seconds, steps,
                         1e3 * result.stage_times["riemannian"] / max(steps, 1),
                         result.stage_times["certificates"], result.certified_gap))
            print(*rows[-1], flush=True)
    print("\n| instance | profile | seed | status | seconds | steps | ms per step | certificates s | certified gap |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, profile, seed, status, seconds, steps, per_step, certificates, gap in rows:
        print(f"| {name} | {profile} | {seed} | {status} | {seconds:.3f} | {steps} | {per_step:.2f} | "
              f"{certificates:.3f} | {gap:.2e} |")
    print("\n| instance | profile | seconds: median (min-max) | steps: median (min-max) |")
    print("|---|---|---|---|")
    for key in dict.fromkeys((row[0], row[1]) for row in rows):
        seconds = [row[4] for row in rows if (row[0], row[1]) == key]
        steps = [row[5] for row in rows if (row[0], row[1]) == key]
        print(f"| {key[0]} | {key[1]} | {statistics.median(seconds):.2f} ({min(seconds):.2f}-{max(seconds):.2f}) | "
              f"{statistics.median(steps):.0f} ({min(steps)}-{max(steps)}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
