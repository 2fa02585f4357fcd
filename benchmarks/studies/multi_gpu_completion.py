"""Matrix completion on one GPU and split over several (``Settings.devices``; phases I and II on split rows).

Usage::

    python benchmarks/studies/multi_gpu_completion.py --sizes 1666667:100000000 --gpus 2 [--split-only] [--rank-truth 1]
                                              [--rank R] [--time-limit S] [--tol T] [--verbose] [--out DIR]

For every ``n1:m`` of ``--sizes``, the nuclear-norm completion SDP (``models.completion_problem``: one PSD block of
order 2 n1, C = I/2, one constraint per observed entry) of a random n1 x n1 matrix of rank ``--rank-truth`` (default 1,
as the ``completion`` suite at n1 = 1e7), m entries observed uniformly at random, is solved with the defaults on one
GPU and on ``--gpus`` GPUs (``--split-only``: on the GPUs only, for sizes one GPU cannot hold; ``--rank R``: from R
columns instead of the default start). The instance is drawn on
the GPU (keys uniform in [0, n1^2) from float64 uniforms, deduplicated by a sort, m of them kept at random), since
NumPy's draw and sort of 6e8 keys take minutes of the host; the instance is then the same for both solves. ``seconds``
is the solve after the data reached the host (``Result.solve_time``, set-up included), ``ms_per_step`` phase I's time
per L-BFGS step, ``recovery`` the relative error of the completion against the truth (``models.completion_error``),
``peak_gib`` the largest device's pool at its peak. A line per solve as it finishes, then the Markdown table;
``multi-gpu-completion/<k>x<gpu>.csv`` and its ``.meta.json`` go to ``--out``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import completion_error, completion_problem  # noqa: E402

from report import device_slug, result_fields, write_tables  # noqa: E402

COLUMNS = ["n1", "m", "gpus", "seconds", "setup_s", "alm_steps", "ms_per_step", "admm_sweeps", "admm_s",
           "certificates_s", "rank", "certified_gap", "primal_residual", "recovery", "status", "peak_gib"]


def draw_instance(n1: int, m: int, rank: int, seed: int):
    """(rows, cols, values, (P, Q)) on the host: m distinct entries of P Q' (n1 x n1, Gaussian factors scaled so that
    the entries have unit variance), uniformly at random, row-major, drawn on the current GPU."""
    import cupy
    state = cupy.random.RandomState(seed)
    total = n1 * n1
    keys = cupy.unique(cupy.floor(state.random_sample(int(m * 1.02) + 1000) * total).astype(np.int64))
    if keys.size < m:
        raise ValueError(f"drew {keys.size} distinct entries, fewer than m = {m}")
    keys = cupy.sort(keys[state.permutation(keys.size)[:m]])
    rows, cols = keys // n1, keys % n1
    del keys
    scale = rank ** -0.25
    P, Q = (scale * state.standard_normal((n1, rank)) for _ in range(2))
    values = cupy.zeros(m)
    for k in range(rank):
        values += P[rows, k] * Q[cols, k]
    return rows.get(), cols.get(), values.get(), (P.get(), Q.get())


def warm_up_split(gpus: int) -> None:
    """Compile the split path's kernels of phases I and II and of the certificates on every GPU before anything is
    timed, as ``run.warm_up`` does for one GPU: a fresh machine compiled them inside the first split solve (CuPy's
    kernel cache was empty; NVRTC took 11.7 s of a profiled solve at m = 6e8, most of it in the set-up)."""
    rows, cols, values, _ = draw_instance(2000, 40000, 1, seed=1)
    cl.solve(completion_problem(rows, cols, values, (2000, 2000)), device="gpu", devices=gpus)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", required=True, help="comma-separated n1:m")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--split-only", action="store_true")
    parser.add_argument("--rank-truth", type=int, default=1)
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = parser.parse_args(argv)
    backend = select_backend("gpu")
    print(f"completion on {backend.describe()} and {args.gpus} GPUs, tol {args.tol:g}", flush=True)
    warm_up(backend)
    warm_up_split(args.gpus)
    rows = []
    for size in args.sizes.split(","):
        n1, m = (int(float(v)) for v in size.split(":"))
        start = time.perf_counter()
        r, c, v, truth = draw_instance(n1, m, args.rank_truth, seed=0)
        problem = completion_problem(r, c, v, (n1, n1), name=f"completion{n1}")
        del r, c, v
        print(f"n1 = {n1}, m = {m}: instance and problem in {time.perf_counter() - start:.1f} s", flush=True)
        for gpus in ([args.gpus] if args.split_only else [None, args.gpus]):
            result = cl.solve(problem, device="gpu", devices=gpus, tol=args.tol, time_limit=args.time_limit,
                              rank=args.rank, verbose=args.verbose)
            steps = result.iterations["alm"]
            row = dict(n1=n1, m=m, gpus=gpus or 1, **result_fields(result, result.solve_time, None),
                       ms_per_step=round(1e3 * result.stage_times["alm"] / max(steps, 1), 2),
                       recovery=f"{completion_error(result.factors[0], n1, truth):.2e}")
            print(row, flush=True)
            rows.append(row)
            del result
    title = f"completion, one GPU and {args.gpus} ({time.strftime('%Y-%m-%d')}, defaults, tol {args.tol:g})"
    print(write_tables(rows, args.out / "multi-gpu-completion" / device_slug(backend.describe(), args.gpus), title,
                       columns=COLUMNS, device=f"{args.gpus} x {backend.describe()}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
