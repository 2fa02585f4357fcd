"""The Lovász theta number in CVXPY, solved by CULORADS, against known answers.

``theta(G) = max <J, X> s.t. tr X = 1, X_ij = 0 for every edge ij, X PSD`` (J the all-ones matrix) lies
between the independence number of G and the chromatic number of its complement. The Petersen graph
has theta = 4 (its independence number); the 5-cycle has theta = sqrt(5), Lovász's classic example.
Solved on the GPU when one is visible, else on the CPU.

    python examples/lovasz_theta.py
"""
import cvxpy as cp
import numpy as np

import cvxpy_culorads


def lovasz_theta(n: int, edges, device: str) -> float:
    X = cp.Variable((n, n), PSD=True)
    constraints = [cp.trace(X) == 1] + [X[i, j] == 0 for i, j in edges]
    return cp.Problem(cp.Maximize(cp.sum(X)), constraints).solve(solver="CULORADS", device=device)


def main() -> None:
    device = "gpu" if cvxpy_culorads.gpu_available() else "cpu"
    print(f"device: {device}" + ("" if device == "gpu" else " (no CUDA GPU usable through CuPy)"))
    cycle = [(i, (i + 1) % 5) for i in range(5)]
    pentagram = [(5 + i, 5 + (i + 2) % 5) for i in range(5)]
    spokes = [(i, i + 5) for i in range(5)]
    graphs = [("Petersen graph", 10, cycle + pentagram + spokes, 4.0),
              ("5-cycle", 5, cycle, np.sqrt(5.0))]
    for name, n, edges, known in graphs:
        theta = lovasz_theta(n, edges, device)
        print(f"{name:>14}: theta = {theta:.6f}, known {known:.6f}, difference {abs(theta - known):.1e}")


if __name__ == "__main__":
    main()
