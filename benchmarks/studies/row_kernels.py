"""The Riemannian step's kernels against variants that hold a lane's columns in registers, in both precisions.

Usage (GPU machine)::

    python benchmarks/studies/row_kernels.py [--log2n 20] [--rank 56] [--graphs random,rgg] [--repeat 20]

For each precision (float64, float32) it times, with CUDA events (median of ``--repeat`` calls after 3 warm-up
calls), the package's kernels of the fused step and variants written here:

- ``product``: ``sphere_product_kernel`` (one group of T lanes per row, a lane's columns in a loop around the loop
  over the row's entries, the gradient written, read back and written again) against ``cols``: the loop over the
  entries outside, the lane's C columns unrolled inside (C gathers in flight per entry, each entry's index and value
  loaded once), the row's products kept in registers for the projection. Both at T = 32 and, for float32, at
  T = 16 (two rows per warp, twice the columns per lane).
- ``combine``: ``lbfgs_tangent_combine_kernel`` (the combination taken twice from the loads) against ``cols``
  (the lane's C combinations kept in registers).
- ``retract``: ``sphere_retract_kernel`` against ``cols``.
- ``gram``: ``lbfgs_gram_kernel`` in its update mode at grid caps of 2 (the package's), 4 and 8 blocks per SM.
- ``decrease``: ``sphere_decrease_kernel`` at the same caps, and ``cols``.

Each variant's output is compared with the package kernel's (max relative difference; the product, combination and
retraction variants do the same arithmetic, so 0 is expected). The graphs: ``random``
(``graphs.random_regular_like(n, 4, seed=1)``, no locality) and ``rgg`` (``graphs.rgg_graph``, Z-ordered), each
with a unit diagonal. The byte model is ``step_profile.py``'s: product E + 2 F, Gram pass with the pair's update
8 F (two pairs), combination 7 F, retraction 3 F, decrease 4 F (F = n r times 8 or 4 bytes). Printed last: one
table, milliseconds and GB/s by the model.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402
import cupyx.scipy.sparse as csp  # noqa: E402
import numpy as np  # noqa: E402

from cvxpy_culorads.backends import gpu_vector_algebra as algebra  # noqa: E402
from cvxpy_culorads.backends.gpu_launch import lanes_for_rank, multiprocessors  # noqa: E402
from cvxpy_culorads.backends.gpu_sources import kernel_source  # noqa: E402

import graphs  # noqa: E402

VARIANTS = r"""
template<typename I, int T, int C, typename F>
__global__ void product_cols(const I* __restrict__ indptr, const I* __restrict__ indices,
                             const double* __restrict__ data, const F* __restrict__ R,
                             const double* __restrict__ squares, double scale, F* __restrict__ gradient,
                             long long n, int r, double* partial, unsigned* ticket, double* objective) {
    __shared__ double sums[1];
    double acc[1] = {0.0};
    const int lane = threadIdx.x & (T - 1);
    const unsigned mask = group_mask<T>();
    const long long groups = (long long)gridDim.x * blockDim.x / T;
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T; i < n; i += groups) {
        const long long base = i * r, start = indptr[i], end = indptr[i + 1];
        double s[C];
#pragma unroll
        for (int k = 0; k < C; ++k) s[k] = 0.0;
#pragma unroll 2
        for (long long e = start; e < end; ++e) {
            const double w = data[e];
            const F* row = R + (long long)indices[e] * r;
#pragma unroll
            for (int k = 0; k < C; ++k)
                if (lane + k * T < r) s[k] = fma(w, (double)row[lane + k * T], s[k]);
        }
        double dot = 0.0, x[C];
#pragma unroll
        for (int k = 0; k < C; ++k)
            if (lane + k * T < r) {
                s[k] = (double)(F)s[k];
                x[k] = (double)R[base + lane + k * T];
                dot = fma(s[k], x[k], dot);
            }
        dot = group_sum<T>(dot, mask);
        const double along = dot / squares[i];
#pragma unroll
        for (int k = 0; k < C; ++k)
            if (lane + k * T < r) gradient[base + lane + k * T] = (F)(scale * fma(-along, x[k], s[k]));
        if (lane == 0) acc[0] += dot;
    }
    if (grid_sum<1>(acc, partial, ticket, sums) && threadIdx.x == 0) objective[0] = sums[0];
}

template<int K, int T, int C, typename F>
__global__ void combine_cols(const F* v0, const F* v1, const F* v2, const F* v3, const F* v4, const F* v5,
                             const F* v6, const F* v7, const F* v8, const F* __restrict__ X,
                             const double* __restrict__ squares, const double* __restrict__ coef,
                             F* __restrict__ out, long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;
    const unsigned mask = group_mask<T>();
    const F* const v[9] = {v0, v1, v2, v3, v4, v5, v6, v7, v8};
    double c[K];
#pragma unroll
    for (int j = 0; j < K; ++j) c[j] = coef[j];
    const long long base = i * r;
    double y[C], x[C], dot = 0.0;
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) {
            y[k] = lbfgs_combination<K, F>(v, c, base + lane + k * T);
            x[k] = (double)X[base + lane + k * T];
            dot = fma(y[k], x[k], dot);
        }
    const double along = group_sum<T>(dot, mask) / squares[i];
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) out[base + lane + k * T] = (F)fma(-along, x[k], y[k]);
}

template<int T, int C, typename F>
__global__ void retract_cols(const F* __restrict__ X, const F* __restrict__ D, double tau,
                             const double* __restrict__ roots, F* __restrict__ out, long long n, int r) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T;
    const int lane = threadIdx.x & (T - 1);
    if (i >= n) return;
    const unsigned mask = group_mask<T>();
    const long long base = i * r;
    double y[C], squares = 0.0;
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) {
            y[k] = fma(tau, (double)D[base + lane + k * T], (double)X[base + lane + k * T]);
            squares = fma(y[k], y[k], squares);
        }
    squares = group_sum<T>(squares, mask);
    const double f = roots[i] * rsqrt(squares);
#pragma unroll
    for (int k = 0; k < C; ++k)
        if (lane + k * T < r) out[base + lane + k * T] = (F)(f * y[k]);
}

template<int T, int C, typename F>
__global__ void decrease_cols(const F* __restrict__ Rn, const F* __restrict__ R, const F* __restrict__ CRn,
                              const F* __restrict__ CR, const double* __restrict__ squares, long long n,
                              int r, double* partial, unsigned* ticket, double* out) {
    __shared__ double sums[3];
    double acc[3] = {0.0, 0.0, 0.0};
    const int lane = threadIdx.x & (T - 1);
    const unsigned mask = group_mask<T>();
    const long long groups = (long long)gridDim.x * blockDim.x / T;
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / T; i < n; i += groups) {
        const long long base = i * r;
        double a = 0.0, b = 0.0, c = 0.0, d = 0.0, nn = 0.0, oo = 0.0, cc = 0.0;
#pragma unroll
        for (int k = 0; k < C; ++k)
            if (lane + k * T < r) {
                const long long j = base + lane + k * T;
                const double xn = (double)Rn[j], x = (double)R[j], yn = (double)CRn[j], y = (double)CR[j];
                a = fma(xn, yn, a); b = fma(xn, y, b); c = fma(x, yn, c); d = fma(x, y, d);
                nn = fma(xn, xn, nn); oo = fma(x, x, oo); cc = fma(yn, yn, cc);
            }
        a = group_sum<T>(a, mask); b = group_sum<T>(b, mask); c = group_sum<T>(c, mask); d = group_sum<T>(d, mask);
        nn = group_sum<T>(nn, mask); oo = group_sum<T>(oo, mask); cc = group_sum<T>(cc, mask);
        if (lane == 0) {
            const double q = squares[i], projected = a * (2.0 - nn / q);
            acc[0] += projected;
            acc[1] += projected - d * (2.0 - oo / q) + (b - c);
            acc[2] += cc;
        }
    }
    if (!grid_sum<3>(acc, partial, ticket, sums) || threadIdx.x != 0) return;
    out[0] = sums[0]; out[1] = sums[1]; out[2] = sums[2];
}
"""
THREADS = 256
_modules: dict = {}


def variant(name: str):
    if name not in _modules:
        _modules[name] = cupy.RawModule(code=kernel_source() + VARIANTS, options=("--std=c++14",),
                                        name_expressions=[name]).get_function(name)
    return _modules[name]


def timed(repeat: int, function, *args) -> float:
    """Median milliseconds of ``function(*args)`` over ``repeat`` calls after three warm-up calls."""
    for _ in range(3):
        function(*args)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        function(*args)
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def difference(a, b) -> float:
    return float(cupy.abs(a.astype(np.float64) - b.astype(np.float64)).max() / max(float(cupy.abs(b).max()), 1e-300))


def matrix(kind: str, k: int):
    W = graphs.random_regular_like(1 << k, 4, seed=1) if kind == "random" else graphs.rgg_graph(k, seed=0)
    C = csp.csr_matrix(W) + csp.identity(W.shape[0], format="csr")
    C.sort_indices()
    return C


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=20, help="n = 2^log2n rows (the rgg graph needs a power of two)")
    parser.add_argument("--rank", type=int, default=56)
    parser.add_argument("--graphs", default="random,rgg")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    n, r = 1 << args.log2n, args.rank
    sms = multiprocessors(cupy.cuda.Device().id)
    rng = cupy.random.default_rng(0)
    rows = []  # (kernel, graph, precision, variant, ms, GB/s, difference)

    def record(kernel, graph, ftype, name, ms, nbytes, diff=float("nan")):
        rows.append((kernel, graph, ftype, name, ms, nbytes / ms / 1e6, diff))
        print(f"{kernel:9s} {graph:7s} {ftype:6s} {name:22s} {ms:8.3f} ms {nbytes / ms / 1e6:7.0f} GB/s "
              f"diff {diff:.1e}", flush=True)

    for dtype in (np.float64, np.float32):
        ftype = algebra.VALUE_TYPES[np.dtype(dtype)]
        F = n * r * np.dtype(dtype).itemsize
        R = rng.standard_normal((n, r)).astype(dtype)
        squares = cupy.sum(R.astype(np.float64) ** 2, axis=1)
        roots = cupy.sqrt(squares)
        lanes = lanes_for_rank(r)
        widths = [(lanes, -(-r // lanes))] + ([(lanes // 2, -(-r // (lanes // 2)))] if dtype == np.float32 else [])
        for kind in args.graphs.split(","):
            C = matrix(kind, args.log2n)
            ctype = "int" if C.indices.dtype == np.int32 else "long long"
            E = C.nnz * 12 + 4 * (n + 1)
            G0 = cupy.empty_like(R)
            ms = timed(args.repeat, algebra.sphere_product, C.indptr, C.indices, ctype, C.data, R, squares, 2.0, G0,
                       None)
            record("product", kind, ftype, "package", ms, E + 2 * F)
            for T, cols in widths:
                G1 = cupy.empty_like(R)
                blocks = max(1, min(-(-n * T // THREADS), algebra.PRODUCT_BLOCKS_PER_SM * sms))
                fn = variant(f"product_cols<{ctype}, {T}, {cols}, {ftype}>")
                obj = cupy.empty(1)
                ms = timed(args.repeat, fn, (blocks,), (THREADS,), (
                    C.indptr, C.indices, C.data, R, squares, np.float64(2.0), G1, np.int64(n), np.int32(r),
                    cupy.empty(blocks), algebra._ticket(), obj))
                record("product", kind, ftype, f"cols T={T} C={cols}", ms, E + 2 * F, difference(G1, G0))
            C = None
        # the direction: G and two pairs; update mode changes the newest pair in place, so time the Gram pass on
        # copies refreshed outside the timing only for the comparison
        vectors = [rng.standard_normal((n, r)).astype(dtype) for _ in range(5)]
        for cap in (2, 4, 8):
            algebra.REDUCE_BLOCKS_PER_SM = cap
            coef, products = cupy.empty(5), cupy.empty(2)
            ms = timed(args.repeat, algebra._lbfgs_gram_pass, vectors, True, coef, products, R)
            record("gram", "-", ftype, f"package cap {cap}", ms, 8 * F)
        algebra.REDUCE_BLOCKS_PER_SM = 2
        coef = cupy.asarray([-1.0, 0.3, -0.2, 0.1, 0.05])
        D0, D1 = cupy.empty_like(R), cupy.empty_like(R)
        lanes = lanes_for_rank(r)
        ms = timed(args.repeat, algebra.kernel(f"lbfgs_tangent_combine_kernel<5, {lanes}, {ftype}>"),
                   algebra.grid(n, lanes), (algebra.BLOCK,), algebra._vector_args(vectors) + (
                       R, squares, coef, D0, np.int64(n), np.int32(r)))
        record("combine", "-", ftype, "package", ms, 7 * F)
        for T, cols in widths:
            fn = variant(f"combine_cols<5, {T}, {cols}, {ftype}>")
            ms = timed(args.repeat, fn, algebra.grid(n, T), (algebra.BLOCK,), algebra._vector_args(vectors) + (
                R, squares, coef, D1, np.int64(n), np.int32(r)))
            record("combine", "-", ftype, f"cols T={T} C={cols}", ms, 7 * F, difference(D1, D0))
        X0, X1 = cupy.empty_like(R), cupy.empty_like(R)
        ms = timed(args.repeat, algebra.sphere_retract, R, D0, 0.01, roots, X0)
        record("retract", "-", ftype, "package", ms, 3 * F)
        for T, cols in widths:
            fn = variant(f"retract_cols<{T}, {cols}, {ftype}>")
            ms = timed(args.repeat, fn, algebra.grid(n, T), (algebra.BLOCK,), (
                R, D0, np.float64(0.01), roots, X1, np.int64(n), np.int32(r)))
            record("retract", "-", ftype, f"cols T={T} C={cols}", ms, 3 * F, difference(X1, X0))
        reference = None
        for cap in (2, 4, 8):
            algebra.REDUCE_BLOCKS_PER_SM = cap
            ms = timed(args.repeat, algebra.sphere_decrease, X0, R, vectors[0], vectors[1], squares)
            out = algebra.sphere_decrease(X0, R, vectors[0], vectors[1], squares)
            reference = out if reference is None else reference
            record("decrease", "-", ftype, f"package cap {cap}", ms, 4 * F, difference(out, reference))
        for cap in (2, 8):
            for T, cols in widths:
                blocks = max(1, min(-(-n * T // THREADS), cap * sms))
                fn = variant(f"decrease_cols<{T}, {cols}, {ftype}>")
                out = cupy.empty(3)
                ms = timed(args.repeat, fn, (blocks,), (THREADS,), (
                    X0, R, vectors[0], vectors[1], squares, np.int64(n), np.int32(r), cupy.empty(blocks * 3),
                    algebra._ticket(), out))
                record("decrease", "-", ftype, f"cols T={T} C={cols} cap {cap}", ms, 4 * F, difference(out, reference))
        algebra.REDUCE_BLOCKS_PER_SM = 2
        vectors = R = D0 = D1 = X0 = X1 = None
        cupy.get_default_memory_pool().free_all_blocks()
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"\nn = {n:.3g}, rank {r}, {device}: ms (GB/s by the model)")
    print("| kernel | graph | precision | variant | ms | GB/s | max rel. difference |")
    print("|---|---|---|---|---|---|---|")
    for kernel, graph, ftype, name, ms, rate, diff in rows:
        print(f"| {kernel} | {graph} | {ftype} | {name} | {ms:.3f} | {rate:.0f} | {diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
