"""How low is the rank of a completion SDP's optimum? Small instances on the CPU, by the truth's rank.

Usage::

    python benchmarks/studies/completion_rank.py [--sizes 300,1000] [--truth-ranks 1,2,5] [--per-row 20]

The paper's largest completion instance has n1 = 1e7 and m = 2e8: 20 observed entries per row. Whether that
SDP suits a low-rank solver depends on the truth it was sampled from: when the entries do not determine the
matrix, the nuclear-norm minimiser is not the truth and its rank can be far above the truth's. For each size n1
and truth rank r this solves the SDP of an n1 x n1 rank-r matrix with ``per_row * n1`` observed entries to the
default tolerance and reports the rank of the optimum X = R R' (eigenvalues above 1e-6 of the largest), the
recovery error and the solve. Prints a table and writes ``completion_rank_cpu.{csv,md}`` to ``--out``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cvxpy_culorads import solve  # noqa: E402
from cvxpy_culorads.models import completion_error, completion_problem, random_low_rank_instance  # noqa: E402

from report import device_slug, write_tables  # noqa: E402

RELATIVE_EIGENVALUE = 1e-6  # eigenvalues of X below this fraction of the largest count as zero


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="300,1000", help="n1 values")
    parser.add_argument("--truth-ranks", default="1,2,5")
    parser.add_argument("--per-row", type=int, default=20, help="observed entries per row of the n1 x n1 matrix")
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = parser.parse_args(argv)

    rows = []
    for n1 in (int(v) for v in args.sizes.split(",")):
        for truth in (int(v) for v in args.truth_ranks.split(",")):
            r, c, v, factors = random_low_rank_instance(n1, n1, truth, args.per_row * n1, seed=0)
            start = time.perf_counter()
            result = solve(completion_problem(r, c, v, (n1, n1)), device="cpu", time_limit=args.time_limit)
            eigenvalues = np.linalg.svd(result.factors[0], compute_uv=False) ** 2
            row = dict(n1=n1, truth_rank=truth, m=args.per_row * n1, status=result.status.value,
                       optimum_rank=int((eigenvalues > RELATIVE_EIGENVALUE * eigenvalues[0]).sum()),
                       solver_rank=max(result.ranks), recovery=completion_error(result.factors[0], n1, factors),
                       max_error=result.max_error, alm_steps=result.iterations["alm"],
                       seconds=round(time.perf_counter() - start, 2))
            print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
            rows.append(row)
    print(write_tables(rows, args.out / "completion-rank" / device_slug("cpu"),
                       f"completion SDP optimum rank on the CPU, {time.strftime('%Y-%m-%d')}, "
                       f"{args.per_row} entries per row", "optimum_rank: eigenvalues of X = R R' above "
                       f"{RELATIVE_EIGENVALUE:g} of the largest; recovery: relative error of the completion",
                       device="cpu (NumPy/SciPy)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
