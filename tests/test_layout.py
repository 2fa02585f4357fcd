"""The compressed operator against dense references: A(UV'), <C, UV'>, (sC + A*(y)) V, sC - A*(y)."""
import numpy as np
import pytest

from cvxpy_culorads import SDPProblem
from cvxpy_culorads.backends.backend import select_backend
from cvxpy_culorads.operators.compressed import CompressedOperator

from support import DEVICES, dense_blocks, random_mixed_problem


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
    assert np.allclose(backend.to_host(slack.toarray()), Cs - A_y, atol=1e-12)


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


def _diagonal_problem(seed: int) -> SDPProblem:
    """Two PSD blocks and nonnegative variables whose constraint matrices are all diagonal, some constraints
    touching several positions and some positions touched by several constraints."""
    rng = np.random.default_rng(seed)
    sizes, n_lp, m = (5, 3), 2, 7
    A = [[np.diag(rng.standard_normal(n) * (rng.random(n) < 0.5)) for n in sizes] for _ in range(m - 1)]
    A.append([np.eye(sizes[0]), np.eye(sizes[1])])  # a trace: couples every row
    A_lp = rng.standard_normal((m, n_lp)) * (rng.random((m, n_lp)) < 0.5)
    return SDPProblem.from_matrices([np.eye(n) for n in sizes], A, rng.standard_normal(m), c_lp=np.ones(n_lp),
                                    A_lp=A_lp)


@pytest.mark.parametrize("device", DEVICES)
def test_normal_preconditioner_is_the_row_block_inverse(device):
    problem = _diagonal_problem(3)
    backend, xp = select_backend(device), select_backend(device).xp
    op = CompressedOperator(problem, backend)
    _, As = _stacked_dense(problem)
    rng = np.random.default_rng(4)
    n, r = As.shape[1], 3
    F, V = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    # J(Z)_i = <A_i, sym(Z F')> has gradient A_i F in Z: the block of row p in J'J is sum_i (A_i F)_p (A_i F)_p'
    AF = np.einsum("ipq,qc->ipc", As, F)
    expected = np.stack([np.linalg.solve(np.eye(r) + AF[:, p].T @ AF[:, p], V[p]) for p in range(n)])
    got = backend.to_host(op.normal_preconditioner(xp.asarray(F))(xp.asarray(V)))
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert CompressedOperator(random_mixed_problem(1), backend).normal_preconditioner(xp.asarray(F)) is None


@pytest.mark.parametrize("device", DEVICES)
def test_normal_preconditioner_inverts_maxcut_exactly(device):
    # one diagonal entry per constraint: the row blocks are all of I + J'J
    import scipy.sparse as sp

    from cvxpy_culorads.models import maxcut_problem
    W = sp.random(60, 60, density=0.1, random_state=2)
    backend, xp = select_backend(device), select_backend(device).xp
    op = CompressedOperator(maxcut_problem(W + W.T), backend)
    rng = np.random.default_rng(5)
    F, Z = xp.asarray(rng.standard_normal((60, 4))), xp.asarray(rng.standard_normal((60, 4)))
    normal = op.adjoint_times(op.adjoint_data(op.constraints(op.sample(Z, F))), F, addend=Z, beta=1.0)
    assert np.allclose(backend.to_host(op.normal_preconditioner(F)(normal)), backend.to_host(Z), rtol=1e-12,
                       atol=1e-12)


def _reference_parts(problem):
    """Omega_A, A_fold and At_raw of a one-block problem built the plain way: NumPy's unique for the positions, a
    binary search for each coordinate's, scipy's canonical CSR (its own sort) for the matrices."""
    import scipy.sparse as sp
    n = problem.block_sizes[0]
    coeff = problem.A_coords[0]
    keys = coeff.row * n + coeff.col
    omega = np.unique(keys)
    position = np.searchsorted(omega, keys)
    fold = np.where(coeff.row == coeff.col, 1.0, 2.0)
    A_fold = sp.csr_array((coeff.val * fold, (coeff.con, position)), shape=(problem.m, omega.size))
    At_raw = sp.csr_array((coeff.val, (position, coeff.con)), shape=(omega.size, problem.m))
    return omega, A_fold, At_raw


def _shared_positions_problem(seed: int) -> SDPProblem:
    """One block whose positions are touched by several constraints each, given in no particular order."""
    rng = np.random.default_rng(seed)
    n, m, entries = 9, 12, 150
    rows, cols = rng.integers(0, n, entries), rng.integers(0, n, entries)
    con = rng.integers(0, m, entries)
    return SDPProblem(rng.standard_normal(m), [np.eye(n)], [(con, rows, cols, rng.standard_normal(entries))])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["shared positions", "completion"])
def test_operator_parts_equal_the_plainly_built_ones(device, kind):
    from cvxpy_culorads.models import completion_problem, random_low_rank_instance
    if kind == "completion":  # one coordinate per constraint: the sorts are skipped
        problem = completion_problem(*random_low_rank_instance(17, 13, 2, 120, seed=3)[:3], (17, 13))
    else:  # ties: a position of several constraints, whose transpose must list them in order
        problem = _shared_positions_problem(4)
    backend = select_backend(device)
    op = CompressedOperator(problem, backend)
    omega, A_fold, At_raw = _reference_parts(problem)
    n = problem.block_sizes[0]
    np.testing.assert_array_equal(backend.to_host(op.rows) * n + backend.to_host(op.cols), omega)
    for got, expected in ((op.A_fold, A_fold), (op.At_raw, At_raw)):
        assert got.shape == expected.shape
        for part in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(backend.to_host(getattr(got, part)), getattr(expected, part))


def test_distinct_positions_match_numpys_unique():
    from cvxpy_culorads.operators.compressed import distinct_positions
    keys = np.random.default_rng(5).integers(0, 40, 300)
    distinct, index, order = distinct_positions(np, keys)
    expected, inverse = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(distinct, expected)
    np.testing.assert_array_equal(index, inverse)
    np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))
