"""What the sharded machinery costs per step where only one GPU is at hand: k shards simulated on it.

Usage::

    python benchmarks/studies/shard_overhead.py [--sizes 1e6,1e7] [--shards 2,4] [--steps 300] [--graph sparse]
                                        [--orders auto]

The MaxCut SDP of ``graphs.random_regular_like(n, 4, seed=1)`` (``--graph sparse``, the ``sparse`` suite's graphs)
or of ``graphs.rgg_graph(log2 n)`` with its vertices numbered at random (``--graph rgg-shuffled``: a graph with
locality that its numbering hides) runs ``--steps`` Riemannian steps on the one-device path and with k shards that
the same GPU holds (``sharding.simulated_backend``: the sharded kernel set, halo exchange and reductions, copies in
place of NCCL), once per ``Settings.shard_order`` in ``--orders``. Every shard's work lands on the one GPU, so a
ratio of the per-step times above 1 is the machinery's own cost, which k real GPUs would have to win back. The set-up
seconds include the renumbering of the rows (``sharding.RowOrder``) and its check.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cvxpy_culorads import solve
from cvxpy_culorads.distributed import simulated_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402
from cvxpy_culorads.solver import run as solver_run  # noqa: E402

from graphs import random_regular_like, rgg_graph  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7")
    parser.add_argument("--shards", default="2,4")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--graph", choices=("sparse", "rgg-shuffled"), default="sparse")
    parser.add_argument("--orders", default="auto", help="shard orders to run, e.g. given,auto")
    args = parser.parse_args(argv)
    solver_run.sharded_backend = simulated_backend  # the devices setting then means shards on the current GPU
    counts = [None] + [int(k) for k in args.shards.split(",")]
    small = maxcut_problem(random_regular_like(1200, 6, seed=1))
    for k in counts:  # compile the kernels first
        solve(small, device="gpu", devices=k, max_iter=args.steps)
    print("| graph | n | shards | order | steps | ms per step | ratio | certificates s | setup s | rank | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in (int(float(size)) for size in args.sizes.split(",")):
        problem = maxcut_problem(_graph(args.graph, n))
        single = None
        for k in counts:
            for order in (["given"] if k is None else args.orders.split(",")):
                result = solve(problem, device="gpu", devices=k, max_iter=args.steps, shard_order=order)
                steps = result.iterations["riemannian"]
                per_step = 1e3 * result.stage_times["riemannian"] / steps
                single = single or per_step
                print(f"| {args.graph} | {n:.2g} | {k or 1} | {order if k else '-'} | {steps} | {per_step:.2f} | "
                      f"{per_step / single:.2f} | {result.stage_times['certificates']:.2f} | {result.setup_time:.2f} | "
                      f"{max(result.ranks)} | {result.peak_device_bytes / 2**30:.1f} |",
                      flush=True)
    return 0


def _graph(kind: str, n: int):
    if kind == "sparse":
        return random_regular_like(n, 4, seed=1, device="gpu").get()
    W = sp.csr_array(rgg_graph(round(math.log2(n))))
    shuffle = np.random.default_rng(0).permutation(W.shape[0])
    return W[shuffle][:, shuffle].tocsr()


if __name__ == "__main__":
    sys.exit(main())
