"""Nuclear-norm matrix completion in CVXPY, solved by CULORADS: recover a 40 x 40 rank-2 matrix from half
of its entries.

``min ||Y||_* s.t. Y_ij = M_ij on the observed entries``: CVXPY rewrites the nuclear norm as one PSD
block ``[[U, Y], [Y', V]]`` of order 80, which CULORADS solves on the GPU when one is visible, else on
the CPU.

    python examples/matrix_completion.py
"""
import time

import cvxpy as cp
import numpy as np

import cvxpy_culorads
from cvxpy_culorads import models

N, RANK, OBSERVED = 40, 2, 800


def main() -> None:
    device = "gpu" if cvxpy_culorads.gpu_available() else "cpu"
    print(f"device: {device}" + ("" if device == "gpu" else " (no CUDA GPU usable through CuPy)"))
    rows, cols, values, (P, Q) = models.random_low_rank_instance(N, N, RANK, OBSERVED, seed=0)
    M = P @ Q.T
    print(f"matrix: {N} x {N}, rank {RANK}, {OBSERVED} of {N * N} entries observed")

    Y = cp.Variable((N, N))
    problem = cp.Problem(cp.Minimize(cp.normNuc(Y)), [Y[rows, cols] == values])
    start = time.perf_counter()
    problem.solve(solver="CULORADS", device=device)
    elapsed = time.perf_counter() - start

    result = problem.solver_stats.extra_stats
    singular_values = np.linalg.svd(Y.value, compute_uv=False)
    print(f"status {problem.status}: nuclear norm {problem.value:.6f} (of M: {np.linalg.norm(M, 'nuc'):.6f})")
    print(f"SDP: one PSD block of order {result.factors[0].shape[0]}, factor width {result.ranks[0]}; "
          f"{elapsed:.2f} s in all, {result.solve_time:.2f} s in the solver")
    print(f"leading singular values of Y: {np.array2string(singular_values[:RANK + 2], precision=4)}")
    error = np.linalg.norm(Y.value - M) / np.linalg.norm(M)
    print(f"relative recovery error ||Y - M||_F / ||M||_F = {error:.2e}")


if __name__ == "__main__":
    main()
