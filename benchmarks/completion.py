"""Matrix completion benchmark: nuclear-norm completion SDPs of random low-rank matrices, on one device.

Usage::

    python benchmarks/completion.py --sizes 1000:200000,10000:7700000 [--rank 5] [--device gpu] [--out DIR]

Each size ``n1:m`` is an n1 x n1 matrix M = P Q' of rank ``--rank`` (Gaussian factors, seed 0) with m
distinct entries observed uniformly at random (``models.random_low_rank_instance``); the SDP
(``models.completion_problem``) has one PSD block of order 2 n1 and m equality constraints. The
paper's table sizes are n = 2 n1 = 2e4 with m = 7.7e6, n = 8e5 with m = 3.2e8 and n = 2e7 with m = 2e8.
It reports the whole call, the part spent compressing the data onto the device and the rest
(``seconds``, comparable to the paper's times), iterations, the three DIMACS errors, the status, the
relative recovery error ||Y - M||_F / ||M||_F and the peak device memory, a line per instance and a
Markdown table at the end (``completion_<device>.csv/.md``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import completion_error, completion_problem, random_low_rank_instance  # noqa: E402
from report import release_device_memory, result_fields, write_tables  # noqa: E402

PAPER_H100_SECONDS = {(10_000, 7_700_000): 0.4, (400_000, 320_000_000): 39.7, (10_000_000, 200_000_000): 443.0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500:50000,2000:400000")
    parser.add_argument("--rank", type=int, default=5)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)

    backend = select_backend(args.device)
    print(f"matrix completion on {backend.describe()}, rank {args.rank}, tol {args.tol:g}", flush=True)
    rows = []
    for n1, m in (tuple(int(v) for v in size.split(":")) for size in args.sizes.split(",")):
        r, c, v, factors = random_low_rank_instance(n1, n1, args.rank, m, seed=0)
        problem = completion_problem(r, c, v, (n1, n1), name=f"completion{n1}")
        release_device_memory(backend)
        result = cl.solve(problem, device=backend.name, tol=args.tol, time_limit=args.time_limit)
        paper = PAPER_H100_SECONDS.get((n1, m))
        solve_s = result.solve_time - result.setup_time
        row = dict(n=2 * n1, m=m, true_rank=args.rank, total_s=round(result.solve_time, 3),
                   recovery=completion_error(result.factors[0], n1, factors),
                   **result_fields(result, backend, solve_s, paper))
        rows.append(row)
        print(f"n={row['n']:9d} m={m:10d} solve {solve_s:8.2f}s (setup {result.setup_time:.2f}s) "
              f"max err {result.max_error:.1e} recovery {row['recovery']:.1e} {row['status']}", flush=True)
    print(write_tables(rows, args.out / f"completion_{backend.name}",
                       f"Matrix completion SDP on {backend.describe()}, {time.strftime('%Y-%m-%d')}, "
                       f"rank {args.rank}, tol {args.tol:g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
