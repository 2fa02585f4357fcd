"""MaxCut of random or geometric graphs on one GPU and split over several (``Settings.devices``), side by side.

Usage::

    python benchmarks/multi_gpu.py --sizes 1e6,1e7 --gpus 2 [--weak 5e6] [--steps N] [--graph sparse|rgg]
                                   [--rank R] [--split-only] [--shard-order auto] [--time-limit S]
                                   [--out DIR]

For every n of ``--sizes``, the MaxCut SDP of ``graphs.random_regular_like(n, 4, seed=1)`` (``--graph sparse``, the
``sparse`` suite's graphs: average degree ~4, no locality, so most of a shard's neighbours live on the other shards)
or of ``graphs.rgg_graph(round(log2 n))`` (``--graph rgg``: the random geometric graph of the ``rgg`` suite, numbered
along a Z-order curve, so that contiguous shards keep most neighbours inside) is solved with the defaults (``--rank
R``: from R columns, for sizes whose default start fits on neither) on one GPU and on ``--gpus`` GPUs
(``--split-only``: on the GPUs only, for sizes one GPU cannot hold); ``speedup`` is the one-GPU time over the split
time, both measured after the data reached the devices (``seconds``, as in ``run.py``), ``ms_per_step`` the
Riemannian phase's time per step.
``--weak n``: the weak-scaling pair, n on one GPU against k n on k GPUs; its efficiency compares time per step (the
two instances need different step counts). ``--steps N``: every solve stops after N steps (``max_iter``; status
``iteration_limit``), for a time per step at sizes whose full solve is too long for one device call.
``--shard-order``: ``Settings.shard_order`` of the split solves (``given`` skips the check of the numbering, whose
breadth-first search takes about a minute of the device's host at n = 1e8; the random graphs keep their numbering).
``--time-limit S``: every solve stops after S seconds (``Settings.time_limit``; status ``time_limit``).
A line per solve as it finishes, then the Markdown table; ``multi_gpu.csv`` and ``.md`` go to ``--out``.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402

from graphs import random_regular_like, rgg_graph  # noqa: E402
from report import result_fields, write_tables  # noqa: E402

COLUMNS = ["n", "edges", "gpus", "seconds", "speedup", "riemannian_steps", "ms_per_step", "certificates_s", "rank",
           "certified_gap", "primal_residual", "status", "peak_gib", "setup_s"]


def _solve(problem, gpus: int, edges: int, args) -> dict:
    result = cl.solve(problem, device="gpu", devices=gpus if gpus > 1 else None, rank=args.rank,
                      shard_order=args.shard_order,
                      time_limit=args.time_limit, **({} if args.steps is None else {"max_iter": args.steps}))
    seconds = result.solve_time - result.setup_time
    steps = result.iterations["riemannian"]
    row = dict(n=problem.block_sizes[0], edges=edges, gpus=gpus,
               ms_per_step=round(1e3 * result.stage_times["riemannian"] / max(steps, 1), 2),
               **result_fields(result, seconds, None))
    print(f"n={row['n']:10d} gpus={gpus} {seconds:8.2f}s steps {steps:5d} ({row['ms_per_step']} ms) "
          f"certified gap {result.certified_gap} {result.status.value} peak {row['peak_gib']} GiB "
          f"(setup {result.setup_time:.1f}s)", flush=True)
    return row


def _problem(graph: str, n: int):
    if graph == "rgg":
        W = rgg_graph(round(math.log2(n)), device="gpu").get()
    else:
        W = random_regular_like(n, 4, seed=1, device="gpu").get()
    return maxcut_problem(W, name=f"{graph}{W.shape[0]}"), W.nnz // 2


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7", help="vertex counts, comma-separated")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--weak", type=float, default=None, help="vertices per GPU of the weak-scaling pair")
    parser.add_argument("--steps", type=int, default=None, help="stop every solve after this many steps")
    parser.add_argument("--graph", choices=("sparse", "rgg"), default="sparse")
    parser.add_argument("--rank", type=int, default=None, help="initial rank of every solve (default: the solver's)")
    parser.add_argument("--split-only", action="store_true", help="skip the one-GPU solve of --sizes")
    parser.add_argument("--shard-order", default="auto", help="Settings.shard_order (split solves)")
    parser.add_argument("--time-limit", type=float, default=float("inf"), help="Settings.time_limit of every solve")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    warm_up(select_backend("gpu"))
    cl.solve(maxcut_problem(random_regular_like(1200, 6, seed=1)), device="gpu", devices=args.gpus, max_iter=300)
    rows = []
    for n in (int(float(size)) for size in args.sizes.split(",")):
        problem, edges = _problem(args.graph, n)
        single = None if args.split_only else _solve(problem, 1, edges, args)
        split = _solve(problem, args.gpus, edges, args)
        if single is not None:
            split["speedup"] = round(single["seconds"] / split["seconds"], 2)
            rows.append(single)
        rows.append(split)
        del problem
    footer = ""
    if args.weak:
        n = int(args.weak)
        small, large = _problem(args.graph, n), _problem(args.graph, args.gpus * n)
        weak = [_solve(small[0], 1, small[1], args), _solve(large[0], args.gpus, large[1], args)]
        efficiency = weak[0]["ms_per_step"] / weak[1]["ms_per_step"]
        rows += weak
        footer = (f"Weak scaling: {weak[0]['n']} vertices on 1 GPU against {weak[1]['n']} on {args.gpus}: time per "
                  f"step {weak[0]['ms_per_step']} ms and {weak[1]['ms_per_step']} ms, efficiency {efficiency:.2f}.")
    graph = "Sparse MaxCut (degree ~4)" if args.graph == "sparse" else "MaxCut of rgg graphs (Z-order)"
    title = f"### {graph} on 1 and {args.gpus} GPUs ({select_backend('gpu').describe()})"
    print(write_tables(rows, Path(args.out) / "multi_gpu", title, footer, COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
