"""einsum over the rows against GpuKernels.row_dots, 5e7 x 5 and 1e7 x 34 float64 (CUDA events, 20 repeats).

PYTHONPATH=$PWD python3 benchmarks/results/h100_6ab67fd/rowdots.py
"""
import cupy

from cvxpy_culorads.backends.gpu_kernels import GpuKernels


def einsum(U, V):
    return cupy.einsum("ij,ij->i", U, V)


for n, r in ((50_000_000, 5), (10_000_000, 34)):
    U, V = cupy.random.standard_normal((n, r)), cupy.random.standard_normal((n, r))
    for name, f in (("einsum", einsum), ("row_dots", GpuKernels.row_dots)):
        f(U, V)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(20):
            f(U, V)
        end.record()
        end.synchronize()
        print(f"| {n} x {r} | {name} | {cupy.cuda.get_elapsed_time(start, end) / 20:.3f} ms |", flush=True)
    diff = float(abs(einsum(U, V) - GpuKernels.row_dots(U, V)).max())
    print(f"| {n} x {r} | max difference | {diff:.1e} |")
    U = V = None
