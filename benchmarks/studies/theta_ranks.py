"""Starting ranks for the theta function of Hamming graphs (issue 15): the sparse formulation solved with the setting
``rank`` (or the default), one line per run.

Usage::

    python benchmarks/studies/theta_ranks.py 4:10:40:60 4:10:default:90 [--device gpu]

Each argument is ``d:q:rank:time_limit``; a line gives the status, the error against theta = q^(d - 1), the certified
gap, the steps of both phases, the final rank and the solve time.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cvxpy_culorads import solve  # noqa: E402
from cvxpy_culorads.models import hamming_graph, hamming_theta, theta_problem  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="d:q:rank:time_limit (rank 'default' for the solver's choice)")
    parser.add_argument("--device", default="gpu")
    args = parser.parse_args()
    for spec in args.runs:
        d, q, rank, limit = spec.split(":")
        d, q = int(d), int(q)
        options = {} if rank == "default" else {"rank": int(rank)}
        result = solve(theta_problem(hamming_graph(d, q), "sparse"), device=args.device, time_limit=float(limit),
                       **options)
        exact = hamming_theta(d, q)
        gap = "-" if result.certified_gap is None else f"{result.certified_gap:.1e}"
        print(f"H({d},{q}) rank={rank:7s} {result.status.name:10s} rel_err "
              f"{abs(-result.primal_objective - exact) / exact:.1e} certified_gap {gap} "
              f"alm {result.iterations['alm']:6d} admm {result.iterations['admm']:5d} final rank {result.ranks} "
              f"solve {result.solve_time:6.2f}s", flush=True)


if __name__ == "__main__":
    main()
