"""The compressed operator against dense references: A(UV'), <C, UV'>, (sC + A*(y)) V, sC - A*(y)."""
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
    got = backend.to_host(op.slack_times(xp.asarray(y), scale, xp.asarray(V)))
    assert np.allclose(got, M @ V, rtol=1e-12, atol=1e-12)
    got = backend.to_host(op.slack_times(xp.asarray(y), scale, xp.asarray(V), CV=xp.asarray(Cs @ V), weight=2.0))
    assert np.allclose(got, 2.0 * M @ V, rtol=1e-12, atol=1e-12)
    A_y = np.einsum("i,ijk->jk", y, As)
    got = backend.to_host(op.adjoint_times(op.adjoint_data(xp.asarray(y)), xp.asarray(V)))
    assert np.allclose(got, A_y @ V, rtol=1e-12, atol=1e-12)
    slack = op.slack_matrix(xp.asarray(y))
    assert np.allclose(slack.toarray().get() if backend.is_gpu else slack.toarray(), Cs - A_y, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_operator_beyond_32_bit_position_keys(device):
    # n^2 > 2^31: sorting positions by row * n + col must not overflow the 32-bit row indices
    import scipy.sparse as sp
    from cvxpy_culorads.models import maxcut_problem
    n = 50_000
    path = sp.diags([np.ones(n - 1)], [1], shape=(n, n))
    problem = maxcut_problem(path + path.T)
    backend = select_backend(device)
    op = CompressedOperator(problem, backend)
    rng = np.random.default_rng(1)
    R, y = rng.standard_normal((n, 2)), rng.standard_normal(n)
    C = problem.objective_matrix(0)
    got = backend.to_host(op.slack_times(backend.xp.asarray(y), 1.0, backend.xp.asarray(R)))
    assert np.allclose(got, C @ R + y[:, None] * R, rtol=1e-12, atol=1e-12)
