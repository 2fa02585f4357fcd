"""MaxCut of random, geometric or grid graphs on one GPU and split over several (``Settings.devices``), side by side.

Usage::

    python benchmarks/studies/multi_gpu.py --sizes 1e6,1e7 --gpus 2 [--weak 5e6] [--steps N] [--graph sparse|rgg|torus]
                                   [--rank R] [--split-only] [--shard-order auto] [--time-limit S]
                                   [--halo-precision single,double] [--tol T] [--verbose] [--out DIR]

For every n of ``--sizes``, the MaxCut SDP of ``graphs.random_regular_like(n, 4, seed=1)`` (``--graph sparse``, the
``sparse`` suite's graphs: average degree ~4, no locality, so most of a shard's neighbours live on the other shards;
built from the edge list by ``models.maxcut_problem_from_edges``, which n = 3e8 needs) or of
``graphs.rgg_graph(round(log2 n))`` (``--graph rgg``: the random geometric graph of the ``rgg`` suite, numbered
along a Z-order curve, so that contiguous shards keep most neighbours inside) or of
``graphs.toroidal_grid_edges(s, s, seed=1)`` with s = round(sqrt n) (``--graph torus``: Gset's toroidal spin glass,
degree 4 and +-1 weights, numbered row by row; two contiguous shards share four grid rows) is solved with the
defaults (``--rank R``: from R columns, for sizes whose default start fits on neither) on one GPU and on ``--gpus`` GPUs
(``--split-only``: on the GPUs only, for sizes one GPU cannot hold); ``speedup`` is the one-GPU time over the split
time, both measured after the data reached the devices (``seconds``, as in ``run.py``), ``ms_per_step`` the
Riemannian phase's time per step and ``products_per_step`` its products C R per step (a step's line search may try
several points, and two runs that differ in rounding soon follow different paths, so compare time per product too).
``--weak n``: the weak-scaling pair, n on one GPU against k n on k GPUs; its efficiency compares time per step (the
two instances need different step counts). ``--steps N``: every solve stops after N steps (``max_iter``; status
``iteration_limit``), for a time per step at sizes whose full solve is too long for one device call.
``--shard-order``: ``Settings.shard_order`` of the split solves (``given`` skips the check of the numbering: a pass
over the coordinates, then, where the halo exceeds a tenth of a shard's rows as on the random graphs, a breadth-first
search on C that took about a minute of the device's host at n = 1e8; the random graphs keep their numbering).
``--time-limit S``: every solve stops after S seconds (``Settings.time_limit``; status ``time_limit``).
``--halo-precision``: ``Settings.halo_precision`` of the split solves; several, comma-separated, run one split solve
(and one large weak-scaling solve) each. ``--tol T``: ``Settings.tol`` of every solve. ``--verbose``: every solve
prints its iteration log.
A line per solve as it finishes, then the Markdown table; ``multi-gpu/<k>x<gpu>.csv`` and its ``.meta.json``
go to ``--out``.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from run import WARM_UP_RANKS, warm_up  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem, maxcut_problem_from_edges  # noqa: E402
from cvxpy_culorads.phases import riemannian  # noqa: E402

from graphs import random_regular_like, random_regular_like_edges, rgg_graph, toroidal_grid_edges  # noqa: E402
from report import device_slug, result_fields, write_tables  # noqa: E402

COLUMNS = ["n", "edges", "gpus", "halo", "seconds", "speedup", "riemannian_steps", "ms_per_step", "products_per_step",
           "certificates_s", "rank", "certified_gap", "primal_residual", "status", "peak_gib", "setup_s"]


PRODUCTS = [0]  # products C R taken by the Riemannian phases of the current solve


def _count_products() -> None:
    """Makes every Riemannian phase count its products C R in ``PRODUCTS``."""
    initialise = riemannian.RiemannianPhase.__init__

    def counting(phase, *args, **kwargs):
        initialise(phase, *args, **kwargs)
        times = phase.times

        def counted(V, out=None):
            PRODUCTS[0] += 1
            return times(V, out=out)
        phase.times = counted
    riemannian.RiemannianPhase.__init__ = counting


def _warm_up_split(gpus: int, halos) -> None:
    """Compile the split path's kernels (the halo part's product adds into its output, the L-BFGS Gram matrix and
    combination are separate passes, single-precision halos) on every GPU before anything is timed, as ``warm_up``
    does for one: on 2 x H200 the first split solve of rgg 2^24 took 59.0 ms per step over 200 steps, four more of the
    same instance in the same process 51.3-51.5 (``docs/decisions/split-path-warm-up.md``)."""
    small = maxcut_problem(random_regular_like(1200, 6, seed=1))
    for rank in (None, *WARM_UP_RANKS):
        for halo in halos:
            cl.solve(small, device="gpu", devices=gpus, rank=rank, halo_precision=halo, max_iter=300)


def warm_up_all(gpus: int, halos) -> None:
    """One GPU's kernels (``run.warm_up``) and the split path's on every GPU compiled, before anything is timed."""
    warm_up(select_backend("gpu"))
    _warm_up_split(gpus, halos)


def _solve(problem, gpus: int, edges: int, args, halo: str = "double") -> dict:
    PRODUCTS[0] = 0
    optional = {name: value for name, value in (("tol", args.tol), ("max_iter", args.steps)) if value is not None}
    result = cl.solve(problem, device="gpu", devices=gpus if gpus > 1 else None, rank=args.rank,
                      shard_order=args.shard_order, halo_precision=halo, time_limit=args.time_limit,
                      verbose=args.verbose, **optional)
    seconds = result.solve_time - result.setup_time
    steps = result.iterations["riemannian"]
    row = dict(n=problem.block_sizes[0], edges=edges, gpus=gpus, halo=halo if gpus > 1 else "",
               ms_per_step=round(1e3 * result.stage_times["riemannian"] / max(steps, 1), 2),
               products_per_step=round(PRODUCTS[0] / max(steps, 1), 2),
               **result_fields(result, seconds, None))
    print(f"n={row['n']:10d} gpus={gpus} {row['halo']:6s} {seconds:8.2f}s steps {steps:5d} ({row['ms_per_step']} ms, "
          f"{row['products_per_step']} products) "
          f"certified gap {result.certified_gap} {result.status.value} peak {row['peak_gib']} GiB "
          f"(setup {result.setup_time:.1f}s)", flush=True)
    return row


def graph_problem(graph: str, n: int):
    """(the MaxCut SDP of the ``--graph`` kind with about n vertices, its edge count)."""
    if graph == "rgg":
        W = rgg_graph(round(math.log2(n)), device="gpu").get()
        return maxcut_problem(W, name=f"rgg{W.shape[0]}"), W.nnz // 2
    if graph == "torus":  # the square grid of about n vertices
        side = round(math.sqrt(n))
        rows, cols, weights = toroidal_grid_edges(side, side, seed=1, device="gpu")
        return maxcut_problem_from_edges(side * side, rows, cols, weights, name=f"torus{side}x{side}"), rows.size
    rows, cols = random_regular_like_edges(n, 4, seed=1, device="gpu")  # at 3e8 the symmetric W would not do
    return maxcut_problem_from_edges(n, rows, cols, name=f"sparse{n}"), rows.size


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7", help="vertex counts, comma-separated (empty: the weak pair only)")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--weak", type=float, default=None, help="vertices per GPU of the weak-scaling pair")
    parser.add_argument("--steps", type=int, default=None, help="stop every solve after this many steps")
    parser.add_argument("--graph", choices=("sparse", "rgg", "torus"), default="sparse")
    parser.add_argument("--rank", type=int, default=None, help="initial rank of every solve (default: the solver's)")
    parser.add_argument("--split-only", action="store_true", help="skip the one-GPU solve of --sizes")
    parser.add_argument("--shard-order", default="auto", help="Settings.shard_order (split solves)")
    parser.add_argument("--time-limit", type=float, default=float("inf"), help="Settings.time_limit of every solve")
    parser.add_argument("--halo-precision", default="double", help="Settings.halo_precision of the split solves, "
                                                                   "comma-separated")
    parser.add_argument("--tol", type=float, default=None, help="Settings.tol of every solve (default: the solver's)")
    parser.add_argument("--verbose", action="store_true", help="print every solve's iteration log")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results"))
    args = parser.parse_args(argv)
    halos = args.halo_precision.split(",")
    _count_products()
    warm_up_all(args.gpus, halos)
    rows = []
    for n in (int(float(size)) for size in args.sizes.split(",") if size):
        began = time.perf_counter()
        problem, edges = graph_problem(args.graph, n)
        print(f"n={n}: graph and problem built in {time.perf_counter() - began:.1f} s", flush=True)
        single = None if args.split_only else _solve(problem, 1, edges, args)
        rows += [single] if single is not None else []
        for halo in halos:
            split = _solve(problem, args.gpus, edges, args, halo)
            if single is not None:
                split["speedup"] = round(single["seconds"] / split["seconds"], 2)
            rows.append(split)
        del problem
    footer = ""
    if args.weak:
        n = int(args.weak)
        small, large = graph_problem(args.graph, n), graph_problem(args.graph, args.gpus * n)
        one = _solve(small[0], 1, small[1], args)
        rows.append(one)
        footer = f"Weak scaling: {one['n']} vertices on 1 GPU ({one['ms_per_step']} ms per step) against"
        for halo in halos:
            rows.append(_solve(large[0], args.gpus, large[1], args, halo))
            footer += (f" {rows[-1]['n']} on {args.gpus} with {halo} halos ({rows[-1]['ms_per_step']} ms, "
                       f"efficiency {one['ms_per_step'] / rows[-1]['ms_per_step']:.2f});")
        footer = footer[:-1] + "."
    graph = {"sparse": "Sparse MaxCut (degree ~4)", "rgg": "MaxCut of rgg graphs (Z-order)",
             "torus": "MaxCut of toroidal grids with +-1 weights (Gset G62-G81 at scale)"}[args.graph]
    device = select_backend('gpu').describe()
    title = f"### {graph} on 1 and {args.gpus} GPUs ({device})"
    print(write_tables(rows, Path(args.out) / "multi-gpu" / device_slug(device, args.gpus), title, footer, COLUMNS,
                       device=f"{args.gpus} x {device}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
