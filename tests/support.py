"""What the tests share: the data folder beside the checkout and its reference values, the devices to run on, small
random problems, and independent measures of a returned point (dense recomputation, Clarabel through CVXPY).

A plain module imported by the tests (``from support import ...``), so that no test module imports another."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest

from cvxpy_culorads import SDPProblem
from cvxpy_culorads.backends.backend import gpu_available

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(not gpu_available(), reason="no CuPy/GPU"))]


def data_file(*parts: str) -> Path:
    """A file of ../shared/data; the test is skipped where the data folder is absent."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"data file {path} not available")
    return path


def _load_datasets():
    """benchmarks/datasets.py, which reads the reference values from the data READMEs."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "datasets.py"
    spec = importlib.util.spec_from_file_location("_culorads_bench_datasets", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_datasets = _load_datasets()


def sdplib_optimum(name: str) -> float:
    """The optimal value of an SDPLIB problem in the SDPA sign convention (see benchmarks/datasets.py)."""
    return _datasets.sdplib_optimum(data_file("sdplib"), name)


def gset_value(name: str) -> float:
    """Certified Gset MaxCut SDP value (see benchmarks/datasets.py)."""
    return _datasets.gset_value(data_file("gset"), name)


def random_maxcut(n: int, density: float, seed: int) -> tuple[SDPProblem, np.ndarray]:
    """A random weighted MaxCut SDP in min form and its Laplacian (dense; small n only)."""
    rng = np.random.default_rng(seed)
    W = np.triu((rng.random((n, n)) < density) * rng.choice([-1.0, 1.0], (n, n)), 1)
    W = W + W.T
    L = np.diag(W.sum(1)) - W
    idx = np.arange(n)
    problem = SDPProblem(np.ones(n), [-L / 4], [(idx, idx, idx, np.ones(n))], name=f"maxcut{n}")
    return problem, L


def random_mixed_problem(seed: int) -> SDPProblem:
    """Two PSD blocks and nonnegative variables, feasible and bounded (trace constraints bound X)."""
    rng = np.random.default_rng(seed)
    sizes, n_lp, m = (6, 4), 3, 7

    def sym(n):
        M = rng.standard_normal((n, n)) * (rng.random((n, n)) < 0.5)
        return M + M.T

    C = [sym(n) + n * np.eye(n) * 0.1 for n in sizes]
    A = [[sym(n) for n in sizes] for _ in range(m - 2)]
    A.append([np.eye(sizes[0]), None])  # tr X_1 = 1 and tr X_2 + sum x = 2 keep the feasible set bounded
    A.append([None, np.eye(sizes[1])])
    A_lp = rng.standard_normal((m, n_lp)) * (rng.random((m, n_lp)) < 0.6)
    A_lp[-2] = 0.0
    A_lp[-1] = 1.0
    # b from a strictly feasible point, so the problem is feasible with a Slater point
    X = [np.eye(sizes[0]) / sizes[0], np.eye(sizes[1]) * 1.0 / sizes[1]]
    x = np.full(n_lp, 1.0 / n_lp)
    b = np.array([sum(np.sum(Aik * Xk) for Aik, Xk in zip(Ai, X) if Aik is not None) for Ai in A]) + A_lp @ x
    c_lp = rng.random(n_lp) + 0.5
    return SDPProblem.from_matrices(C, A, b, c_lp=c_lp, A_lp=A_lp, name="mixed")


def dense_blocks(problem: SDPProblem):
    """Dense C_k and A_ik of a small problem (for references)."""
    C = [problem.objective_matrix(k).toarray() for k in range(problem.num_blocks)]
    A = [[problem.constraint_matrix(i, k).toarray() for k in range(problem.num_blocks)] for i in range(problem.m)]
    return C, A


def primal_residual(problem: SDPProblem, result) -> float:
    """||A(X) - b||_2 / (1 + ||b||_2) of the returned point, from the problem's coordinates (not the solver's
    operator): the measure OPTIMAL promises, recomputed independently."""
    Ax = problem.A_lp @ result.x_lp
    for coeff, R in zip(problem.A_coords, result.factors):
        entries = np.einsum("ij,ij->i", R[coeff.row], R[coeff.col])  # X[row, col]
        weights = np.where(coeff.row == coeff.col, 1.0, 2.0)  # each coordinate sets both symmetric entries
        Ax = Ax + np.bincount(coeff.con, weights=weights * coeff.val * entries, minlength=problem.m)
    return float(np.linalg.norm(Ax - problem.b) / (1.0 + np.linalg.norm(problem.b)))


def clarabel_value(problem):
    """The optimal value of a small SDPProblem from Clarabel through CVXPY (the reference)."""
    C, A = dense_blocks(problem)
    X = [cp.Variable((n, n), PSD=True) for n in problem.block_sizes]
    x = cp.Variable(problem.n_lp, nonneg=True) if problem.n_lp else None
    A_lp = problem.A_lp.toarray()
    lhs = [sum(cp.sum(cp.multiply(A[i][k], X[k])) for k in range(problem.num_blocks)) for i in range(problem.m)]
    if x is not None:
        lhs = [lhs[i] + A_lp[i] @ x for i in range(problem.m)]
    objective = sum(cp.sum(cp.multiply(C[k], X[k])) for k in range(problem.num_blocks))
    if x is not None:
        objective = objective + problem.c_lp @ x
    prob = cp.Problem(cp.Minimize(objective), [cp.hstack(lhs) == problem.b])
    prob.solve(solver="CLARABEL")
    return prob.value


def own_errors(problem, result):
    """DIMACS errors recomputed densely from the returned factors and multipliers."""
    C, A = dense_blocks(problem)
    X = [R @ R.T for R in result.factors]
    Ax = np.array([sum(np.sum(A[i][k] * X[k]) for k in range(problem.num_blocks)) for i in range(problem.m)])
    Ax += problem.A_lp @ result.x_lp
    lam = result.dual
    primal = sum(np.sum(C[k] * X[k]) for k in range(problem.num_blocks)) + problem.c_lp @ result.x_lp
    dual = problem.b @ lam
    violation = sum(max(0.0, -np.linalg.eigvalsh(C[k] - sum(lam[i] * A[i][k] for i in range(problem.m)))[0])
                    for k in range(problem.num_blocks))
    violation += np.maximum(0.0, -(problem.c_lp - problem.A_lp.T @ lam)).sum()
    return dict(primal_infeasibility=np.linalg.norm(Ax - problem.b) / (1 + np.abs(problem.b).sum()),
                dual_infeasibility=violation / (1 + problem.C_norm_1),
                gap=abs(primal - dual) / (1 + abs(primal) + abs(dual))), primal
