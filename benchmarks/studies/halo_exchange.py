"""The sharded C·V product on real GPUs: the halo exchange alone, against what the link carries, and the product.

Usage::

    python benchmarks/studies/halo_exchange.py [--n 1e7] [--rank 65] [--gpus 2] [--label default]
                                       [--side-priority highest|default] [--halo-precision double|single]

C is MaxCut's objective for ``graphs.random_regular_like(n, 4, seed=1)`` (the ``sparse`` suite: no locality, so a
shard's halo is about 45 % of the graph at k = 2), split over ``--gpus`` GPUs as a sharded solve splits it
(``sharding.ShardedSpheresOperator``), V an n x r standard normal factor. Timed with the devices synchronised around
10 calls each: the NCCL halo exchange alone (``HaloExchange.start`` and its wait: gathers of the rows each shard
sends, grouped send/receive), a copy-engine peer copy of the same bytes in both directions at once (what the link
carries without NCCL's kernels), the shards' own parts alone, their halo parts alone, the exchange with the own parts
launched behind its start (how much of it they hide), the whole sharded product (own parts while the halo is in
transit, then the halo parts), and the product of the whole C on the first GPU. NCCL reads its settings from the
environment when the communicators are made, so compare settings by running the script once per setting;
``--label`` names the setting in the printed line. ``--side-priority default`` gives the exchanges' streams the
default priority instead of the solver's highest. ``--halo-precision single`` exchanges the halo rows in single
precision (``Settings.halo_precision``, the Riemannian phase's looser runs): half the bytes, and the halo parts read
them so. Printed last, one Markdown row.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

from cvxpy_culorads.backends import gpu_kernels  # noqa: E402
from cvxpy_culorads.distributed import ShardedSpheresOperator, sharded_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402
from cvxpy_culorads.operators.compressed import BlockLayout  # noqa: E402

from graphs import random_regular_like  # noqa: E402

REPEATS = 10


def milliseconds(call, backend) -> float:
    call()
    backend.synchronize()
    start = time.perf_counter()
    for _ in range(REPEATS):
        call()
    backend.synchronize()
    return 1e3 * (time.perf_counter() - start) / REPEATS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="1e7")
    parser.add_argument("--rank", type=int, default=65)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--label", default="default", help="the NCCL setting of this run, for the printed row")
    parser.add_argument("--side-priority", choices=("highest", "default"), default="highest",
                        help="the exchange streams' priority (the solver's: highest)")
    parser.add_argument("--halo-precision", choices=("double", "single"), default="double",
                        help="the precision of the exchanged halo rows")
    args = parser.parse_args(argv)
    n, r, ids = int(float(args.n)), args.rank, tuple(range(args.gpus))
    problem = maxcut_problem(random_regular_like(n, 4, seed=1, device="gpu").get())
    layout = BlockLayout.of(problem)
    backend = sharded_backend("gpu", ids, ShardedSpheresOperator.bounds(problem, layout, len(ids)))
    op = ShardedSpheresOperator(problem, backend, True, layout, halo_precision=args.halo_precision)
    shards, exchange, dtype = op.shards, op.C.exchange, op.rounded_C.halo_dtype
    if args.side_priority == "default":
        shards.communicator.side = shards.each(lambda s, p: cupy.cuda.Stream(non_blocking=True), op.C.own)
    V = shards.map(lambda s: cupy.random.standard_normal((shards.size(s), r)))
    out = op.kernels.empty_like(V)
    received = max(rows.size for rows in exchange.halo_rows)  # rows into the busiest shard
    gigabytes = dtype.itemsize * r * received / 1e9

    def exchanged():
        exchange.start(V, dtype)[1].wait()

    # the copy engines' peer copy of as many bytes into every shard, all directions at once
    sources = shards.each(lambda s, p: cupy.empty((received, r), dtype), V)
    targets = shards.each(lambda s, p: cupy.empty((received, r), dtype), V)

    def peer_copied():
        for s in range(shards.k):
            with shards.on(s):
                source = sources[(s + 1) % shards.k]
                targets[s].data.copy_from_device_async(source.data, source.nbytes)

    def own_parts():
        shards.each(lambda s, c, v, o: gpu_kernels.csr_matmul(c, v, o), op.C.own, V, out)

    def own_parts_during_exchange():
        pending = exchange.start(V, dtype)[1]
        own_parts()
        pending.wait()

    buffers, pending = exchange.start(V, dtype)  # the halo parts' input: the halo rows, once received
    pending.wait()

    def halo_parts():
        shards.each(lambda s, part, b, o: part is None or part.add_product(shards.kernels[s], b, o),
                    op.C.halo, buffers, out)

    times = dict(exchange=milliseconds(exchanged, backend), peer_copy=milliseconds(peer_copied, backend),
                 own_parts=milliseconds(own_parts, backend), halo_parts=milliseconds(halo_parts, backend),
                 own_during_exchange=milliseconds(own_parts_during_exchange, backend),
                 sharded_product=milliseconds(lambda: op.rounded_objective_times(V, out=out), backend))
    with shards.on(0):
        whole = backend.csr(problem.objective_matrix(0))
        V0, out0 = cupy.random.standard_normal((n, r)), cupy.empty((n, r))
        times["whole_on_one"] = milliseconds(lambda: gpu_kernels.csr_matmul(whole, V0, out0), backend)
    print(f"n = {n:.3g}, r = {r}, {args.gpus} GPUs ({backend.describe()}), halo rows per shard "
          f"{[rows.size for rows in exchange.halo_rows]}, {gigabytes:.2f} GB into the busiest shard", flush=True)
    print("| setting | n | r | GB per shard | exchange ms | GB/s | peer copy ms | GB/s | own parts ms | halo parts ms "
          "| exchange with own parts ms | sharded product ms | whole product on one GPU ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {args.label}, {args.halo_precision} halo | {n:.3g} | {r} | {gigabytes:.2f} | {times['exchange']:.2f} | "
          f"{gigabytes / times['exchange'] * 1e3:.0f} | {times['peer_copy']:.2f} | "
          f"{gigabytes / times['peer_copy'] * 1e3:.0f} | {times['own_parts']:.2f} | {times['halo_parts']:.2f} | "
          f"{times['own_during_exchange']:.2f} | {times['sharded_product']:.2f} | {times['whole_on_one']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
