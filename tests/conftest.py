"""Shared fixtures: the data folder beside the checkout, backends to run on, small random problems."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from cvxpy_culorads import SDPProblem
from cvxpy_culorads.backend import gpu_available

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
