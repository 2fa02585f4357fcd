"""The compressed operator against dense references: A(UV'), <C, UV'>, (sC + A*(y)) V."""
import numpy as np
import pytest

from cvxpy_culorads.backend import select_backend
from cvxpy_culorads.layout import CompressedOperator

from conftest import DEVICES, dense_blocks, random_mixed_problem


def _stacked_dense(problem):
    """Dense block-diagonal C and A_i over the stacked rows (PSD blocks, then one row per LP variable)."""
    C, A = dense_blocks(problem)
    n = sum(problem.block_sizes) + problem.n_lp
    Cs, As = np.zeros((n, n)), np.zeros((problem.m, n, n))
    off = 0
    for k, size in enumerate(problem.block_sizes):
        Cs[off:off + size, off:off + size] = C[k]
        for i in range(problem.m):
            As[i, off:off + size, off:off + size] = A[i][k]
        off += size
    lp = np.arange(off, n)
    Cs[lp, lp] = problem.c_lp
    As[:, lp, lp] = problem.A_lp.toarray()
    return Cs, As


@pytest.mark.parametrize("device", DEVICES)
def test_operator_matches_dense(device):
    problem = random_mixed_problem(1)
    backend = select_backend(device)
    op = CompressedOperator(problem, backend)
    Cs, As = _stacked_dense(problem)
    rng = np.random.default_rng(7)
    n, r = Cs.shape[0], 3
    U, V = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    X = 0.5 * (U @ V.T + V @ U.T)
    xp = backend.xp
    w = op.sample(xp.asarray(U), xp.asarray(V))
    assert np.allclose(backend.to_host(op.constraints(w)), np.einsum("ijk,jk->i", As, X), rtol=1e-12, atol=1e-12)
    assert float(op.objective(xp.asarray(U))) == pytest.approx(np.sum(Cs * (U @ U.T)), rel=1e-12)
    assert np.allclose(backend.to_host(op.objective_times(xp.asarray(V))), Cs @ V, rtol=1e-12, atol=1e-12)
    pair = backend.to_host(op.sample_pair(xp.asarray(U), xp.asarray(V)))
    assert np.allclose(pair[:, 0], backend.to_host(w))
    assert np.allclose(pair[:, 1], backend.to_host(op.sample(xp.asarray(V))))

    y, scale = rng.standard_normal(problem.m), 2.5
    M = scale * Cs + np.einsum("i,ijk->jk", y, As)
    got = backend.to_host(op.adjoint_times(op.adjoint_data(xp.asarray(y), scale), xp.asarray(V)))
    assert np.allclose(got, M @ V, rtol=1e-12, atol=1e-12)
