"""MaxCut of the Gset graph G1 (800 vertices) through CVXPY: SDP bound and Goemans-Williamson cut.

The relaxation ``max <L, X>/4 s.t. diag(X) = 1, X PSD`` is written in CVXPY and solved by CULORADS on
the GPU when one is visible, else on the CPU. The low-rank factor R (X = R R') comes straight from
``problem.solver_stats.extra_stats`` and is rounded by random hyperplanes. ``--compare`` also solves
with SCS at a loose 1e-3 tolerance: SCS eigen-decomposes the whole 800 x 800 matrix at every
iteration, about a minute on two CPU cores at 1e-3 and many minutes at its default tolerance.

    python examples/maxcut.py [--compare] [--graph PATH]
"""
import argparse
import time

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

import cvxpy_culorads
from cvxpy_culorads import models


def maxcut_relaxation(W: sp.csr_array) -> cp.Problem:
    laplacian = sp.diags_array(np.asarray(W.sum(axis=1)).ravel()) - W
    X = cp.Variable(W.shape, PSD=True)
    return cp.Problem(cp.Maximize(cp.trace(laplacian @ X) / 4), [cp.diag(X) == 1])


def solve_and_report(problem: cp.Problem, solver: str, **options) -> None:
    problem.solve(solver=solver, canon_backend="SCIPY", **options)  # SciPy compiles big PSD variables faster
    stats = problem.solver_stats
    print(f"{solver:>9}: SDP bound {problem.value:.6f} ({problem.status}); CVXPY compile "
          f"{problem.compilation_time:.2f} s, interface {stats.setup_time or 0.0:.2f} s, "
          f"solver {stats.solve_time:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", help="a graph file (Gset, .mtx, .graph, .txt); default: the bundled G1")
    parser.add_argument("--compare", action="store_true", help="also solve with SCS")
    args = parser.parse_args()

    device = "gpu" if cvxpy_culorads.gpu_available() else "cpu"
    print(f"device: {device}" + ("" if device == "gpu" else " (no CUDA GPU usable through CuPy)"))
    W = models.read_graph(args.graph or models.bundled_graph("G1"))
    print(f"graph: {W.shape[0]} vertices, {W.nnz // 2} edges, total weight {W.sum() / 2:g}")

    start = time.perf_counter()
    problem = maxcut_relaxation(W)
    solve_and_report(problem, "CULORADS", device=device)
    result = problem.solver_stats.extra_stats
    print(f"           {result.summary()}")
    cut, signs = models.goemans_williamson(result.factors[0], W, trials=100, seed=0)
    print(f"Goemans-Williamson cut from the rank-{result.factors[0].shape[1]} factor: {cut:g} "
          f"({cut / problem.value:.1%} of the bound; {np.count_nonzero(signs > 0)} vertices on one side)")
    print(f"total time {time.perf_counter() - start:.2f} s")

    if args.compare:
        culorads_bound = problem.value
        solve_and_report(problem, "SCS", eps_abs=1e-3, eps_rel=1e-3)
        difference = abs(problem.value - culorads_bound) / abs(problem.value)
        print(f"relative difference of the bounds: {difference:.1e}")


if __name__ == "__main__":
    main()
