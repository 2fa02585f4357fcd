"""The quantum-chemistry 2-RDM instances of Mittelmann's benchmark (NH2, BH2: 22 blocks of orders 7 to 490,
m = 1743, a diagonal block of order 122 holding 61 free variables split as x+ - x-), solved with defaults, with and
without the recentring of those splits in phase I (``phases.alm.MirrorPairs``).

Usage::

    python benchmarks/studies/quantum_chemistry.py [--time-limit 120] [--device cpu] [--variants fixed,baseline]
        [--out benchmarks/results/quantum-chemistry]

``baseline`` turns the recentring off (``MirrorPairs.of`` finds no pairs), ``fixed`` is the solver as it is. A row per
instance and variant: the status, seconds, inner iterations per phase and seconds per phase, the primal objective's
error to the known value (min form, known to about 5e-5 absolute: the data README), the measured errors, the ranks,
and the largest entry of the split block's diagonal (the drift). A line per solve as it finishes, then the Markdown
table; ``<device>.csv`` and its ``.meta.json`` go to ``--out``. Decision record "quantum-chemistry-convergence".
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.phases import alm  # noqa: E402

from report import device_slug, write_tables  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "mittelmann"
INSTANCES = {  # file, known optimum of the min form (data README: E_rep - E, E to 4 decimals)
    "NH2": ("NH2_2B1_STO-6GN9r14g1T2.dat-s.xz", 62.97979483),
    "BH2": ("BH2_2A1_STO-6GN7r14g1T2.dat-s.xz", 30.43016155),
}
PHASES = ("alm", "admm", "interior_point")


def solve(name: str, variant: str, time_limit: float, device: str) -> dict:
    """One solve with defaults; ``variant`` "baseline" without the recentring of free-variable splits."""
    path, known = INSTANCES[name]
    problem = cl.read_sdpa(DATA / path)
    finder = alm.MirrorPairs.of
    if variant == "baseline":
        alm.MirrorPairs.of = classmethod(lambda cls, op: None)
    try:
        result = cl.solve(problem, time_limit=time_limit, device=device)
    finally:
        alm.MirrorPairs.of = finder
    split_block = result.factors[-1]
    row = dict(instance=name, variant=variant, status=result.status.value, seconds=round(result.solve_time, 2),
               error_to_known=result.primal_objective - known, primal_value=result.primal_objective,
               dual_value=result.dual_objective)
    for phase in PHASES:
        row[f"{phase}_iterations"] = result.iterations[phase]
        row[f"{phase}_s"] = round(result.stage_times[phase], 2)
    row["certificates_s"] = round(result.stage_times["certificates"], 2)
    row.update({key: value for key, value in result.errors.as_dict().items()
                if key in ("primal_residual", "dual_slack_violation", "gap")})
    row["ranks"] = " ".join(map(str, result.ranks))
    row["split_block_max_entry"] = float(np.max(np.sum(split_block ** 2, axis=1)))
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variants", default="fixed,baseline")
    parser.add_argument("--instances", default=",".join(INSTANCES))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "quantum-chemistry")
    args = parser.parse_args(argv)
    description = select_backend(args.device).describe()
    rows = []
    for name in args.instances.split(","):
        for variant in args.variants.split(","):
            row = solve(name, variant, args.time_limit, args.device)
            print(", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
            rows.append(row)
    columns = ["instance", "variant", "status", "seconds", "alm_iterations", "admm_iterations", "error_to_known",
               "primal_residual", "dual_slack_violation", "gap", "split_block_max_entry"]
    print(write_tables(rows, args.out / device_slug(description), f"2-RDM instances on {description}, defaults, "
                       f"{args.time_limit:g} s limit", columns=columns, device=description,
                       argv=sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
