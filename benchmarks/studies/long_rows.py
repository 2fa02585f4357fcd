"""GPU benchmark of the adjoint product A*(y) R on theta's pattern, long rows split or walked whole.

Usage (GPU machine): ``python benchmarks/studies/long_rows.py [--graphs 3:10,3:20,4:10] [--ranks 16,32,64,128]
[--out benchmarks/results/]``. Writes ``long-rows/<device>.csv`` and its ``.meta.json`` under ``--out`` and prints
the table last (about 15 s on an H100).

Setup. The operator of ``models.theta_problem`` (sparse formulation) of the Hamming graph H(d, q): every constraint
Y_ii = Y_0i puts an entry in row 0 of the adjoint's pattern, so that row has n entries while the others have the
degree plus two. Timed: ``op.adjoint_times(data, R, alpha=2, addend=CR, beta=2)``, the gradient's product of an
ALM step, for a random y and a random R of each rank; ``split``: ``gpu_kernels.csr_matmul`` as shipped (rows longer
than ``SPLIT_MIN`` entries cut into pieces); ``whole``: every row walked by one lane group (``SPLIT_MIN`` raised
past any row). ``cupyx.profiler.benchmark``, 200 calls after 10 warm-up ones: ``*_host_ms`` is the median host
time of a call, ``*_ms`` the median from the start to the end event of a call on the stream (at least the host time
when the launches, not the device, are the bottleneck); ``speed_up`` is whole_ms / split_ms.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import device_slug, write_tables  # noqa: E402


def measure(d: int, q: int, ranks: list[int]) -> list[dict]:
    import cupy
    from cupyx.profiler import benchmark

    from cvxpy_culorads.backends import gpu_kernels
    from cvxpy_culorads.backends.backend import select_backend
    from cvxpy_culorads.models import hamming_graph, theta_problem
    from cvxpy_culorads.operators.compressed import CompressedOperator

    op = CompressedOperator(theta_problem(hamming_graph(d, q), "sparse"), select_backend("gpu"))
    n, rng = op.S.shape[0], np.random.default_rng(0)
    data = op.adjoint_data(cupy.asarray(rng.standard_normal(op.m)))
    shipped, rows = gpu_kernels.SPLIT_MIN, []
    for r in ranks:
        R, CR = (cupy.asarray(rng.standard_normal((n, r))) for _ in range(2))
        row = dict(graph=f"H({d},{q})", n=n, nnz=int(op.S.nnz), r=r)
        for variant, minimum in (("split", shipped), ("whole", 1 << 62)):
            gpu_kernels.SPLIT_MIN = minimum
            op.S.__dict__.pop(gpu_kernels._PATTERN_ATTRIBUTE, None)  # plan the pattern again under this minimum
            try:
                result = benchmark(lambda R=R, CR=CR: op.adjoint_times(data, R, alpha=2.0, addend=CR, beta=2.0),
                                   n_repeat=200, n_warmup=10)
            finally:
                gpu_kernels.SPLIT_MIN = shipped
            row[f"{variant}_host_ms"] = float(np.median(result.cpu_times)) * 1e3
            row[f"{variant}_ms"] = float(np.median(result.gpu_times[0])) * 1e3
        op.S.__dict__.pop(gpu_kernels._PATTERN_ATTRIBUTE, None)
        row["speed_up"] = row["whole_ms"] / row["split_ms"]
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="3:10,3:20,4:10", help="Hamming graphs d:q")
    parser.add_argument("--ranks", default="16,32,64,128")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    import cupy
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    ranks = [int(r) for r in args.ranks.split(",")]
    rows = [row for graph in args.graphs.split(",") for row in measure(*map(int, graph.split(":")), ranks)]
    title = f"A*(y) R on theta's pattern, {device}, {time.strftime('%Y-%m-%d')}"
    print(write_tables(rows, args.out / "long-rows" / device_slug(device), title, device=device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
