"""What the sharded machinery costs per step where only one GPU is at hand: k shards simulated on it.

Usage::

    python benchmarks/shard_overhead.py [--sizes 1e6,1e7] [--shards 2,4] [--steps 300]

The MaxCut SDP of ``graphs.random_regular_like(n, 4, seed=1)`` (the ``sparse`` suite's graphs) runs ``--steps``
Riemannian steps on the one-device path and with k shards that the same GPU holds (``sharding.simulated_backend``:
the sharded kernel set, halo exchange and reductions, copies in place of NCCL). Every shard's work lands on the one
GPU, so a ratio of the per-step times above 1 is the machinery's own cost, which k real GPUs would have to win back.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cvxpy_culorads import driver, solve  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402
from cvxpy_culorads.sharding import simulated_backend  # noqa: E402

from graphs import random_regular_like  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7")
    parser.add_argument("--shards", default="2,4")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    driver.sharded_backend = simulated_backend  # the devices setting then means shards on the current GPU
    counts = [None] + [int(k) for k in args.shards.split(",")]
    small = maxcut_problem(random_regular_like(1200, 6, seed=1))
    for k in counts:  # compile the kernels first
        solve(small, device="gpu", devices=k, max_iter=args.steps)
    print("| n | shards | steps | ms per step | ratio | certificates s | setup s | rank | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (int(float(size)) for size in args.sizes.split(",")):
        problem = maxcut_problem(random_regular_like(n, 4, seed=1, device="gpu").get())
        single = None
        for k in counts:
            result = solve(problem, device="gpu", devices=k, max_iter=args.steps)
            steps = result.iterations["riemannian"]
            per_step = 1e3 * result.stage_times["riemannian"] / steps
            single = single or per_step
            print(f"| {n:.0e} | {k or 1} | {steps} | {per_step:.2f} | {per_step / single:.2f} | "
                  f"{result.stage_times['certificates']:.2f} | {result.setup_time:.2f} | {max(result.ranks)} | "
                  f"{result.peak_device_bytes / 2**30:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
