"""GPU benchmark of the three hot kernels (GpuKernels) against cupyx and naive CuPy, with a byte model.

Usage (GPU machine): ``python benchmarks/studies/kernels_bench.py [--out benchmarks/results/] [--sizes 1e5,1e6,1e7]
[--ranks 8,32] [--graphs random,banded] [--repeat 7] [--tune]``. Writes ``kernels/<device>.csv`` and
its ``.meta.json`` under ``--out`` and prints a short table last. The default sizes take about 20 s on an H100
(30 s with ``--tune``, which also times every value of the kernels' tuning knobs: ``csr_L*`` gathers in flight
per lane, ``csr_R*`` rows per lane group, ``*_E*`` pattern entries per lane group).

Setup. For each n and graph kind, S is the adjacency pattern of a graph with average degree ~10 (from
``benchmarks/graphs.py``: ``random_regular_like``, no locality; ``banded_graph`` with bandwidth 64, good
locality) with standard-normal values, stored as a ``cupyx`` CSR matrix (int32 indices, nnz ~ 10 n). The
sampling pattern Omega is its lower triangle plus the full diagonal in CSR order (N = nnz/2 + n entries, int32
rows and cols), as the solver stores it. Factors are C-ordered float64 (n x r) random normal. For n*r*8 < 200 MB
three input sets are rotated so that the L2 cache (50 MB) does not serve repeated calls.

Variants: ``csr_ours`` = GpuKernels.csr_matmul; ``csr_cupyx`` = ``S @ V`` (cuSPARSE SpMM through cupyx,
which converts V to F order); ``csr_naive`` = gather ``data[:,None] * V[indices]`` and ``cupyx.scatter_add``
into the rows (chunks of 2^22 nonzeros); ``samp_sym_ours`` = sym_sample(U, None); ``samp_ours`` =
sym_sample(U, V); ``pair_ours`` = sym_sample_pair(R, D); ``samp_sym_naive`` = ``sum(U[rows] * U[cols], 1)``
(chunks of 2^22 entries, as the NumPy reference does).

Byte model (bytes that must cross device memory; int32 indices, float64 values):

- CSR SpMM: stream 12 nnz + 4 (n + 1) (column index + value per nonzero, row pointer per row); gathers of V
  rows: best 8 n r (each row read once, perfect cache reuse), worst 8 r nnz (no reuse: a full row per
  nonzero); output 8 n r. ``min`` = 12 nnz + 4n + 16 n r, ``noreuse`` = 12 nnz + 4n + 8 r nnz + 8 n r.
- sym_sample with V = U: 8 N for the (row, col) index pair, 8 N output; gathers best 8 n r, worst 2 * 8 r N.
  With V != U: gathers best 16 n r, worst 4 * 8 r N.
- sym_sample_pair: 8 N indices, 16 N output; gathers best 16 n r, worst 4 * 8 r N.
- The naive variants are charged the same model (the bytes the job needs, not the bytes they move).

``GB/s`` is model bytes / median time; against the measured device-to-device copy (bytes read + written) it
says how far a kernel is from the memory roofline. With rows in CSR order the row-side factor reads of the
sampling kernels hit in cache, so their real traffic sits between the two models (about 16 N + 8 r (N - n)
+ 8 n r for V = U on the random graph); the CSR gathers on the random graph at n = 1e7 get almost no reuse (the
``noreuse`` model is the relevant one there), the banded graph gets nearly perfect reuse (``min``).

Timing: CUDA events around a batch of calls (batched so that one measurement lasts >= 2 ms, which hides
launch gaps at small n), 2 warm-up batches, median of ``--repeat`` batches. Correctness: each of our kernels is
compared with the cupyx / naive result on the same data (relative Frobenius error, column ``relerr``).

Notes
-----
docs/decisions/kernel-byte-model-and-tuning.md holds the byte model, the predictions and every measured run
(device, date, command); the tables are benchmarks/results/kernels/ (runs 1-3 under results/archive/kernels/).
Headline (H100 80GB HBM3, CuPy 14.2, 2026-11-22, copy 2976 GB/s),
n = 1e7, nnz = 1e8, r = 32, random graph: csr_matmul 11.9 ms = 2.46 TB/s under the no-reuse model (cupyx
111 ms), sym_sample(U, None) 6.3 ms, sym_sample_pair 11.9 ms; banded graph: csr_matmul 4.9 ms (cupyx 14.8).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import pathlib
import re
import statistics
import sys
import time

import cupy as cp
import cupyx
import cupyx.scipy.sparse
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHUNK = 1 << 22


def _load_file(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_kernels():
    try:
        from cvxpy_culorads.backends import gpu_kernels
    except Exception:  # the package __init__ may import modules that are not there yet
        gpu_kernels = _load_file("_culorads_gpu_kernels", ROOT / "cvxpy_culorads" / "gpu_kernels.py")
    return gpu_kernels


graphs = _load_file("_culorads_bench_graphs", ROOT / "benchmarks" / "graphs.py")
report = _load_file("_culorads_bench_report", ROOT / "benchmarks" / "report.py")
sys.path.insert(0, str(ROOT))
gk = _load_kernels()
GpuKernels = gk.GpuKernels


def timeit(fn, repeat: int, target_ms: float = 2.0, warmup: int = 2) -> float:
    """Median milliseconds per call of fn(i) (i = call counter), timed with CUDA events in batches."""
    counter = [0]

    def batch(k):
        for _ in range(k):
            fn(counter[0])
            counter[0] += 1

    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    batch(1)
    stop.record()
    stop.synchronize()
    one = max(cp.cuda.get_elapsed_time(start, stop), 1e-3)
    inner = int(min(200, max(1, np.ceil(target_ms / one))))
    for _ in range(warmup):
        batch(inner)
    times = []
    for _ in range(repeat):
        start.record()
        batch(inner)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / inner)
    return statistics.median(times)


def copy_bandwidth(nbytes: int = 2 << 30, repeat: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    a = cp.random.standard_normal(nbytes // 8)
    b = cp.empty_like(a)
    ms = timeit(lambda i: cp.copyto(b, a), repeat)
    del a, b
    return 2 * nbytes / ms / 1e6


def rel(a, b) -> float:
    return float(cp.linalg.norm(a - b) / cp.linalg.norm(b))


def lower_pattern(S, n):
    """(rows, cols) int32 of the lower triangle of S plus the full diagonal, sorted in CSR order."""
    nnz = S.nnz
    row_of = cp.searchsorted(S.indptr, cp.arange(nnz, dtype=S.indptr.dtype), side="right") - 1
    col = S.indices
    low = row_of > col
    keys = cp.concatenate([row_of[low].astype(cp.int64) * n + col[low], cp.arange(n, dtype=cp.int64) * (n + 1)])
    keys = cp.sort(keys)
    rows = (keys // n).astype(cp.int32)
    cols = (keys % n).astype(cp.int32)
    return rows, cols, row_of.astype(cp.int32)


def csr_naive(S, coo_rows, V, out):
    out.fill(0.0)
    for s in range(0, S.nnz, CHUNK):
        e = min(s + CHUNK, S.nnz)
        cupyx.scatter_add(out, coo_rows[s:e], S.data[s:e, None] * V[S.indices[s:e]])
    return out


def samp_naive(rows, cols, A, B, out):
    """out_p = A[rows_p] . B[cols_p], in chunks (what the NumPy reference does, with CuPy arrays)."""
    for s in range(0, rows.size, CHUNK):
        e = min(s + CHUNK, rows.size)
        cp.sum(A[rows[s:e]] * B[cols[s:e]], axis=1, out=out[s:e])
    return out


def run(args):
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    device = f"{name} (CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()})"
    print(f"device: {device}; date {datetime.date.today()}", flush=True)
    bw = copy_bandwidth()
    print(f"device-to-device copy: {bw:.0f} GB/s (read + write)", flush=True)
    rows_out = []
    t_start = time.perf_counter()
    for n in args.sizes:
        for kind in args.graphs:
            t0 = time.perf_counter()
            if kind == "random":
                S = graphs.random_regular_like(n, 10, seed=1, device="gpu")
            else:
                S = graphs.banded_graph(n, 10, bandwidth=64, seed=1, device="gpu")
            S = cupyx.scipy.sparse.csr_matrix((cp.random.RandomState(2).standard_normal(S.nnz), S.indices, S.indptr),
                                              shape=S.shape)
            rows, cols, coo_rows = lower_pattern(S, n)
            cp.cuda.Device().synchronize()
            nnz, N = S.nnz, rows.size
            print(f"n={n:.0e} {kind}: nnz={nnz} N={N} (built in {time.perf_counter() - t0:.1f} s)", flush=True)
            for r in args.ranks:
                sets = 3 if n * r * 8 < 200e6 else 1
                rng = cp.random.RandomState(3 + r)
                U = [rng.standard_normal((n, r)) for _ in range(sets)]
                V = [rng.standard_normal((n, r)) for _ in range(sets)]
                out_nr = cp.empty((n, r))
                out_N = cp.empty(N)
                out_N2 = cp.empty((N, 2))
                csr_stream = 12 * nnz + 4 * (n + 1)
                model = {
                    "csr": (csr_stream + 16 * n * r, csr_stream + 8 * r * nnz + 8 * n * r),
                    "samp_sym": (16 * N + 8 * n * r, 16 * N + 16 * r * N),
                    "samp": (16 * N + 16 * n * r, 16 * N + 32 * r * N),
                    "pair": (24 * N + 16 * n * r, 24 * N + 32 * r * N),
                }
                # correctness on this data (against cupyx and the naive gathers), outputs poisoned first
                ref_csr = S @ V[0]
                ref_uu = samp_naive(rows, cols, U[0], U[0], cp.empty(N))
                ref_uv = 0.5 * (samp_naive(rows, cols, U[0], V[0], cp.empty(N))
                                + samp_naive(rows, cols, V[0], U[0], cp.empty(N)))

                def check(kind, **knob):
                    if kind == "csr":
                        out_nr.fill(cp.nan)
                        return rel(gk.csr_matmul(S, V[0], out=out_nr, **knob), ref_csr)
                    if kind in ("samp_sym", "samp"):
                        out_N.fill(cp.nan)
                        return rel(gk.sym_sample(rows, cols, U[0], None if kind == "samp_sym" else V[0], out=out_N,
                                                 **knob), ref_uu if kind == "samp_sym" else ref_uv)
                    out_N2.fill(cp.nan)
                    gk.sym_sample_pair(rows, cols, V[0], U[0], out=out_N2, **knob)  # R = V[0], D = U[0]
                    return max(rel(out_N2[:, 0], ref_uv), rel(out_N2[:, 1], ref_uu))

                err = {"csr_ours": check("csr"), "samp_sym_ours": check("samp_sym"), "samp_ours": check("samp"),
                       "pair_ours": check("pair")}
                if n <= args.naive_max:
                    err["csr_naive"] = rel(csr_naive(S, coo_rows, V[0], cp.empty((n, r))), ref_csr)
                tune = []
                if args.tune:
                    for L in gk._KNOBS["loads"]:
                        err[f"csr_L{L}"] = check("csr", loads=L)
                        tune.append((f"csr_L{L}", "csr", lambda i, L=L: gk.csr_matmul(S, V[i % sets], out=out_nr,
                                                                                      loads=L)))
                    for R in gk._KNOBS["rows"][1:]:
                        err[f"csr_R{R}"] = check("csr", rows=R)
                        tune.append((f"csr_R{R}", "csr", lambda i, R=R: gk.csr_matmul(S, V[i % sets], out=out_nr,
                                                                                      rows=R)))
                    for E in gk._KNOBS["entries"]:
                        for kname in ("samp_sym", "samp", "pair"):
                            err[f"{kname}_E{E}"] = check(kname, entries=E)
                        tune.append((f"samp_sym_E{E}", "samp_sym", lambda i, E=E: gk.sym_sample(
                            rows, cols, U[i % sets], None, out=out_N, entries=E)))
                        tune.append((f"samp_E{E}", "samp", lambda i, E=E: gk.sym_sample(
                            rows, cols, U[i % sets], V[i % sets], out=out_N, entries=E)))
                        tune.append((f"pair_E{E}", "pair", lambda i, E=E: gk.sym_sample_pair(
                            rows, cols, U[i % sets], V[i % sets], out=out_N2, entries=E)))
                del ref_csr, ref_uu, ref_uv
                cp.get_default_memory_pool().free_all_blocks()
                variants = [
                    ("csr_ours", "csr", lambda i: GpuKernels.csr_matmul(S, V[i % sets], out=out_nr)),
                    ("csr_cupyx", "csr", lambda i: S @ V[i % sets]),
                    ("csr_naive", "csr", lambda i: csr_naive(S, coo_rows, V[i % sets], out_nr)),
                    ("samp_sym_ours", "samp_sym", lambda i: GpuKernels.sym_sample(rows, cols, U[i % sets], None,
                                                                                  out=out_N)),
                    ("samp_sym_naive", "samp_sym", lambda i: samp_naive(rows, cols, U[i % sets], U[i % sets],
                                                                               out_N)),
                    ("samp_ours", "samp", lambda i: GpuKernels.sym_sample(rows, cols, U[i % sets], V[i % sets],
                                                                          out=out_N)),
                    ("pair_ours", "pair", lambda i: GpuKernels.sym_sample_pair(rows, cols, U[i % sets], V[i % sets],
                                                                               out=out_N2)),
                ] + tune
                for vname, mkey, fn in variants:
                    if vname.endswith("naive") and n > args.naive_max:
                        continue
                    repeat = args.repeat if not vname.endswith(("naive", "cupyx")) or n < 1e7 else 3
                    try:
                        ms = timeit(fn, repeat)
                    except Exception as exc:  # keep going: record the failure, print it, time the rest
                        print(f"  r={r:3d} {vname:15s} FAILED: {exc.__class__.__name__}: {exc}", flush=True)
                        cp.get_default_memory_pool().free_all_blocks()
                        continue
                    bmin, bmax = model[mkey]
                    row = dict(device=name, n=n, graph=kind, nnz=nnz, N=N, r=r, kernel=vname, ms=ms,
                               GB_min=bmin / 1e9, GB_noreuse=bmax / 1e9, GBps_min=bmin / ms / 1e6,
                               GBps_noreuse=bmax / ms / 1e6, pct_copy_min=100 * bmin / ms / 1e6 / bw,
                               pct_copy_noreuse=100 * bmax / ms / 1e6 / bw, relerr=err.get(vname, float("nan")),
                               copy_GBps=bw)
                    rows_out.append(row)
                    print(f"  r={r:3d} {vname:15s} {ms:9.3f} ms  {row['GBps_min']:7.0f} / {row['GBps_noreuse']:7.0f} "
                          f"GB/s (min/noreuse)  relerr={row['relerr']:.1e}", flush=True)
                del U, V, out_nr, out_N, out_N2
                cp.get_default_memory_pool().free_all_blocks()
            del S, rows, cols, coo_rows
            cp.get_default_memory_pool().free_all_blocks()
    print(f"total {time.perf_counter() - t_start:.0f} s", flush=True)
    return device, bw, rows_out


def write(out_dir: pathlib.Path, device: str, bw: float, rows: list[dict]) -> pathlib.Path:
    """``<out>/kernels/<device>.csv`` and its ``.meta.json`` (command, device, commit, date, the copy bandwidth)."""
    stem = out_dir / "kernels" / report.device_slug(device)
    stem.parent.mkdir(parents=True, exist_ok=True)
    keys = list(rows[0].keys())
    info = dict(report.run_metadata(device), title=f"kernels_bench ({device}, {datetime.date.today()})",
                copy_GBps=round(bw))
    stem.with_suffix(".meta.json").write_text(json.dumps(info, indent=1) + "\n")
    with open(stem.with_suffix(".csv"), "w") as f:
        f.write(",".join(keys) + "\n")
        for row in rows:
            f.write(",".join(f"{row[k]:.6g}" if isinstance(row[k], float) else str(row[k]) for k in keys) + "\n")
    return stem.with_suffix(".csv")


SHORT = [("csr_ours", "csr"), ("csr_cupyx", "cupyx"), ("csr_naive", "csr naive"), ("samp_sym_ours", "samp U=V"),
         ("samp_sym_naive", "samp naive"), ("samp_ours", "samp U,V"), ("pair_ours", "pair")]


def summary(device: str, bw: float, rows: list[dict]) -> str:
    """One line per (n, graph, r): milliseconds of each variant, then GB/s of ours (best-case / no-reuse model)."""
    by = {}
    for row in rows:
        by.setdefault((row["n"], row["graph"], row["r"]), {})[row["kernel"]] = row
    head = f"{'n':>5} {'graph':6} {'r':>3} | " + " ".join(f"{lab:>10}" for _, lab in SHORT)
    head += " | GB/s csr min/noreuse | samp U=V | pair"
    out = [f"{device}; copy {bw:.0f} GB/s; times in ms (median)", head, "-" * len(head)]
    for (n, graph, r), d in by.items():
        ms = " ".join(f"{d[k]['ms']:10.3f}" if k in d else f"{'-':>10}" for k, _ in SHORT)
        gb = lambda k, f: f"{d[k][f]:.0f}" if k in d else "-"  # noqa: E731
        out.append(f"{n:5.0e} {graph:6} {r:3d} | {ms}"
                   f" | {gb('csr_ours', 'GBps_min'):>9}/{gb('csr_ours', 'GBps_noreuse'):<10}"
                   f" | {gb('samp_sym_ours', 'GBps_min'):>4}/{gb('samp_sym_ours', 'GBps_noreuse'):<5}"
                   f" | {gb('pair_ours', 'GBps_min')}/{gb('pair_ours', 'GBps_noreuse')}")
    tuned = sorted((k for k in dict.fromkeys(row["kernel"] for row in rows) if re.search(r"_[LER]\d+$", k)),
                   key=lambda k: (k.rsplit("_", 1)[0], int(k.rsplit("_", 1)[1][1:])))
    if tuned:
        out.append("tuning knobs (ms): " + " ".join(tuned))
        for (n, graph, r), d in by.items():
            out.append(f"{n:5.0e} {graph:6} {r:3d} | "
                       + " ".join(f"{d[k]['ms']:.3f}" if k in d else "-" for k in tuned))
    bad = [f"{r['kernel']} n={r['n']} {r['graph']} r={r['r']}: {r['relerr']:.1e}" for r in rows
           if np.isfinite(r["relerr"]) and r["relerr"] > 1e-12]
    worst = max((r["relerr"] for r in rows if np.isfinite(r["relerr"])), default=float("nan"))
    out.append(f"max relerr vs cupyx/naive: {worst:.1e}" + ("; ABOVE 1e-12: " + "; ".join(bad) if bad else ""))
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--sizes", default="1e5,1e6,1e7")
    p.add_argument("--ranks", default="8,32")
    p.add_argument("--graphs", default="random,banded")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--tune", action="store_true", help="also time every value of the kernels' tuning knobs")
    p.add_argument("--naive-max", type=float, default=1e7, help="skip the naive variants above this n")
    args = p.parse_args(argv)
    args.sizes = [int(float(x)) for x in args.sizes.split(",")]
    args.ranks = [int(x) for x in args.ranks.split(",")]
    args.graphs = args.graphs.split(",")
    device, bw, rows = run(args)
    path = write(pathlib.Path(args.out), device, bw, rows)
    print(summary(device, bw, rows))
    print(f"wrote {path} and its .meta.json")


if __name__ == "__main__":
    main()
