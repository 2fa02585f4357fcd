"""Low-rank data terms U diag(d) U': the operator, the eigensolvers, the certificates and every phase against the same
problem with the terms expanded; theta of graphs with known values; bad input."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import LowRank, SDPProblem, SparsePlusLowRank, read_sdpa, solve, write_sdpa
from cvxpy_culorads.backends.backend import select_backend
from cvxpy_culorads.certify.bounds import TraceBounds
from cvxpy_culorads.certify.certificates import smallest_eigenpairs
from cvxpy_culorads.models import cycle_graph, cycle_theta, hamming_graph, hamming_theta, theta_problem
from cvxpy_culorads.operators import compressed as layout
from cvxpy_culorads.operators.compressed import CompressedOperator

from support import DEVICES


def _mixed_problem(seed: int = 0) -> SDPProblem:
    """Two PSD blocks and two nonnegative variables; block 0's C is sparse plus a low-rank term of mixed signs,
    block 1's C a low-rank term only; constraints 1 and 3 carry low-rank terms (one on each block), constraint 0 is
    tr X_0 + tr X_1 + sum x = 4 (it keeps the problem bounded)."""
    rng = np.random.default_rng(seed)
    sizes, m = (7, 5), 5
    A = [[None, None] for _ in range(m)]
    A[0] = [np.eye(sizes[0]), np.eye(sizes[1])]
    for i in range(1, m):
        for k, n in enumerate(sizes):
            M = sp.random(n, n, density=0.3, random_state=rng.integers(1 << 30)).toarray()
            A[i][k] = M + M.T
    A[1][0] = A[1][0] + LowRank(rng.standard_normal((sizes[0], 2)), [1.0, -0.5])
    A[3][1] = LowRank(rng.standard_normal(sizes[1]))
    M = rng.standard_normal((sizes[0], sizes[0]))
    C = [sp.csr_array(M + M.T) + LowRank(rng.standard_normal((sizes[0], 2)), [2.0, -1.0]),
         LowRank(rng.standard_normal((sizes[1], 3)), [1.0, 0.5, -2.0])]
    X0 = [np.eye(n) * (2.0 / n) for n in sizes]  # strictly feasible: b = A(X0) for an interior X0
    b = np.array([sum(np.sum(_dense(A[i][k]) * X0[k]) for k in range(2)) for i in range(m)])
    A_lp = np.zeros((m, 2))
    A_lp[0] = 1.0
    b[0] += 0.5
    return SDPProblem.from_matrices(C, A, b, c_lp=[1.0, 0.3], A_lp=A_lp, name="mixed")


def _dense(value) -> np.ndarray:
    if isinstance(value, LowRank):
        return value.toarray()
    if isinstance(value, SparsePlusLowRank):
        return _dense(value.matrix) + value.low_rank.toarray()
    return value.toarray() if sp.issparse(value) else np.asarray(value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dense_factors", [True, False])
def test_operator_with_low_rank_terms_matches_the_expanded_problem(device, dense_factors, monkeypatch):
    """Both forms of the factors: dense (BLAS products) and, with the fill threshold out of reach, CSR."""
    if not dense_factors:
        monkeypatch.setattr(layout, "DENSE_FACTOR_FILL", 2.0)
    problem = _mixed_problem()
    expanded = problem.expanded()
    assert expanded.has_low_rank is False and problem.has_low_rank
    backend = select_backend(device)
    xp = backend.xp
    op, reference = CompressedOperator(problem, backend, rescale=True), CompressedOperator(expanded, backend,
                                                                                          rescale=True)
    assert op.constraint_terms.dense is dense_factors and op.objective_terms.dense is dense_factors
    assert op.row_scale == pytest.approx(reference.row_scale, rel=1e-12)
    rng = np.random.default_rng(1)
    n_rows = op.layout.n_rows
    R, D = xp.asarray(rng.standard_normal((n_rows, 3))), xp.asarray(rng.standard_normal((n_rows, 3)))
    y = xp.asarray(rng.standard_normal(problem.m))

    def host(a):
        return backend.to_host(a)

    np.testing.assert_allclose(host(op.constraints(op.sample(R))), host(reference.constraints(reference.sample(R))),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(op.constraints(op.sample(R, D))),
                               host(reference.constraints(reference.sample(R, D))), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(op.constraints(op.sample_pair(R, D))),
                               host(reference.constraints(reference.sample_pair(R, D))), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(op.objective_times(R)), host(reference.objective_times(R)), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(host(op.slack_times(y, 0.7, R, weight=2.0)),
                               host(reference.slack_times(y, 0.7, R, weight=2.0)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(op.adjoint_times(op.adjoint_data(y), R, alpha=-1.5, addend=D, beta=0.5)),
                               host(reference.adjoint_times(reference.adjoint_data(y), R, alpha=-1.5, addend=D,
                                                            beta=0.5)), rtol=1e-12, atol=1e-12)
    slack, reference_slack = op.slack_matrix(y), reference.slack_matrix(y)
    np.testing.assert_allclose(host(slack.toarray()), host(reference_slack.toarray()), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(slack.diagonal()), host(reference_slack.diagonal()), rtol=1e-12, atol=1e-12)
    block = slack[0:7, 0:7]
    np.testing.assert_allclose(host(block.times(R[:7], op.kernels)), host(reference_slack[0:7, 0:7] @ R[:7]),
                               rtol=1e-12, atol=1e-12)
    farkas = op.adjoint_matrix(y, weight=-1.0)
    np.testing.assert_allclose(host(farkas.toarray()), host(reference.adjoint_matrix(y, weight=-1.0).toarray()),
                               rtol=1e-12, atol=1e-12)
    # Gershgorin's bound of the factored form is a lower bound on the spectrum of the expanded matrix
    for start, stop in ((0, 7), (7, 12)):
        exact = np.linalg.eigvalsh(host(reference_slack[start:stop, start:stop].toarray()))[0]
        assert slack[start:stop, start:stop].gershgorin_lower() <= exact + 1e-12


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [300, 1100])
def test_eigensolvers_on_sparse_plus_low_rank_slacks(device, n):
    """The dense path (n = 300, also tried deflated against a factor) and Lanczos (n = 1100) on a slack with a
    low-rank part: the reported pair brackets the smallest eigenvalue of the expanded matrix."""
    rng = np.random.default_rng(n)
    M = sp.random(n, n, density=5.0 / n, random_state=n)
    U = rng.standard_normal((n, 2))
    problem = SDPProblem(np.ones(n), [sp.csr_array(M + M.T) - LowRank(U, [3.0, 1.0])],
                         [(np.arange(n), np.arange(n), np.arange(n), np.ones(n))])
    backend = select_backend(device)
    op = CompressedOperator(problem, backend)
    lam = np.full(n, -0.3)
    slack = op.slack_matrix(backend.xp.asarray(lam))
    exact = np.linalg.eigvalsh(problem.slack_matrix(0, lam).toarray())[0]
    pair, = smallest_eigenpairs(slack, op.layout, backend, accuracy=1e-9)
    assert pair.lower <= exact + 1e-9
    assert pair.value == pytest.approx(exact, abs=1e-6)
    # deflated against a range that holds no eigenvector: still a lower estimate (the value may be far above)
    subspaces = [backend.xp.asarray(rng.standard_normal((n, 4)))]
    deflated, = smallest_eigenpairs(slack, op.layout, backend, accuracy=1e-9, subspaces=subspaces)
    assert deflated.lower <= exact + 1e-9


@pytest.mark.parametrize("device", DEVICES)
def test_every_phase_solves_low_rank_terms_as_the_expanded_problem(device):
    """The low-rank phases alone, and the interior-point method alone, on the factored and the expanded problem:
    the same optimal value, certified."""
    problem = _mixed_problem()
    values = []
    for candidate in (problem, problem.expanded()):
        for route, interior_point in (("low_rank", False), ("interior_point", True)):
            result = solve(candidate, device=device, algorithm=route, interior_point_handover=interior_point)
            assert result.status.name == "OPTIMAL", (route, result.message)
            values.append(result.primal_objective)
            assert result.dual_bound is not None and result.dual_bound <= values[0] + 1e-4 * (1 + abs(values[0]))
    np.testing.assert_allclose(values, values[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("formulation", ["low_rank", "sparse"])
@pytest.mark.parametrize("n", [5, 7, 9, 10])
def test_theta_of_cycles(formulation, n):
    result = solve(theta_problem(cycle_graph(n), formulation), device="cpu", interior_point_handover=False)
    assert result.status.name == "OPTIMAL", result.message
    assert -result.primal_objective == pytest.approx(cycle_theta(n), rel=1e-4)
    # the certified bound (a lower bound on the minimisation) brackets the known optimum -theta
    assert result.dual_bound <= -cycle_theta(n) + 1e-9


@pytest.mark.parametrize("formulation", ["low_rank", "sparse"])
@pytest.mark.parametrize("d, q", [(2, 4), (3, 3)])
def test_theta_of_hamming_graphs(formulation, d, q):
    W = hamming_graph(d, q)
    assert W.shape[0] == q ** d and W.nnz == q ** d * d * (q - 1)
    result = solve(theta_problem(W, formulation), device="cpu")
    assert result.status.name == "OPTIMAL", result.message
    assert -result.primal_objective == pytest.approx(hamming_theta(d, q), rel=1e-4)
    assert result.dual_bound <= -hamming_theta(d, q) + 1e-9


def test_both_theta_formulations_state_the_same_problem():
    """The sparse formulation's value at the lifted point of the low-rank one's optimum, and back."""
    W = cycle_graph(7)
    dense = solve(theta_problem(W, "low_rank"), device="cpu", algorithm="interior_point")
    sparse = solve(theta_problem(W, "sparse"), device="cpu", algorithm="interior_point")
    assert dense.primal_objective == pytest.approx(sparse.primal_objective, rel=1e-6)


def test_negative_diagonal_objective_bound_is_certified_independently():
    """For the sparse theta formulation the trace is bounded through the objective: recompute the bound from the
    returned multipliers with a dense eigvalsh and check it brackets -theta."""
    problem = theta_problem(cycle_graph(9), "sparse")
    bounds = TraceBounds.of(problem)
    assert bounds.negative_diagonal == (1.0, 1.0)  # Y_00 <= 1 bounds the rest; |C_jj| = 1
    result = solve(problem, device="cpu", interior_point_handover=False, tol=1e-6)
    theta = max(0.0, -np.linalg.eigvalsh(problem.slack_matrix(0, result.dual).toarray())[0])
    assert theta < 1.0
    dual = float(problem.b @ result.dual)
    independent = (dual - theta * 1.0) / (1.0 - theta)
    assert independent <= -cycle_theta(9) + 1e-12
    assert result.dual_bound == pytest.approx(independent, abs=1e-7)


def test_sdpa_file_holds_the_terms_expanded(tmp_path):
    problem = _mixed_problem()
    path = tmp_path / "mixed.dat-s"
    write_sdpa(problem, path)
    back = read_sdpa(path)
    for k in range(problem.num_blocks):
        np.testing.assert_allclose(back.objective_matrix(k).toarray(), problem.objective_matrix(k).toarray(),
                                   atol=1e-13)
        for i in range(problem.m):
            np.testing.assert_allclose(back.constraint_matrix(i, k).toarray(),
                                       problem.constraint_matrix(i, k).toarray(), atol=1e-13)


def test_low_rank_arithmetic():
    rng = np.random.default_rng(0)
    U, V = rng.standard_normal((4, 2)), rng.standard_normal(4)
    first, second = LowRank(U, [1.0, -2.0]), LowRank(V)
    np.testing.assert_allclose((first + second).toarray(), U @ np.diag([1.0, -2.0]) @ U.T + np.outer(V, V))
    np.testing.assert_allclose((-first).toarray(), -first.toarray())
    np.testing.assert_allclose((3 * second).toarray(), 3 * np.outer(V, V))
    for matrix in (np.eye(4), sp.eye(4, format="csr")):
        total = matrix + first
        assert isinstance(total, SparsePlusLowRank) and total.low_rank is first
        assert isinstance(first + matrix, SparsePlusLowRank)
        assert (total + second).low_rank.rank == 3
    assert first.diagonal() == pytest.approx(np.diag(first.toarray()))
    dense = first.toarray()
    assert first.max_abs_entry() >= np.abs(dense).max() - 1e-12
    assert first.abs_sum_bound() >= np.abs(dense).sum() - 1e-12
    assert first.frobenius_squared() == pytest.approx(np.sum(dense ** 2))
    assert second.max_abs_entry() == pytest.approx(np.abs(np.outer(V, V)).max())  # exact for one column


@pytest.mark.parametrize("make, message", [
    (lambda: LowRank(np.zeros((3, 0))), "at least one row and one column"),
    (lambda: LowRank(np.array([1.0, np.nan])), "LowRank: U: contains a value that is not finite"),
    (lambda: LowRank(np.ones(3), [np.inf]), "LowRank: d: contains a value that is not finite"),
    (lambda: LowRank(np.ones((3, 2)), [1.0]), "d has 1 entries but U has 2 columns"),
    (lambda: LowRank(np.ones(3) * 1j), "complex"),
    (lambda: LowRank(np.ones((2, 2, 2))), "n x k matrix"),
    (lambda: SDPProblem([1.0], [LowRank(np.ones(4))], [None], block_sizes=[3]),
     "C of PSD block 0: the low-rank term has order 4, the block 3"),
    (lambda: SDPProblem([1.0], [None], [([0], [0], [0], [1.0])], block_sizes=[3],
                        A_low_rank=[(0, 0, LowRank(np.ones(2)))]),
     "constraint 0, PSD block 0: the low-rank term has order 2, the block 3"),
    (lambda: SDPProblem([1.0], [None], [([0], [0], [0], [1.0])], block_sizes=[3],
                        A_low_rank=[(4, 0, LowRank(np.ones(3)))]), "constraint index 4 is outside 0..0"),
    (lambda: SDPProblem([1.0], [None], [([0], [0], [0], [1.0])], block_sizes=[3],
                        A_low_rank=[(0, 1, LowRank(np.ones(3)))]), "PSD block 1 does not exist"),
    (lambda: SDPProblem([1.0], [None], [([0], [0], [0], [1.0])], block_sizes=[3], A_low_rank=[(0, 0, np.ones(3))]),
     "constraint 0, PSD block 0: expected a LowRank term"),
])
def test_bad_low_rank_input_names_the_term(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_a_constraint_with_only_a_low_rank_term_is_not_empty():
    """b_i != 0 on a constraint whose only coefficient is a low-rank term is a real constraint: <J, X> = 4."""
    n = 3
    problem = SDPProblem([4.0], [np.eye(n)], [None], A_low_rank=[(0, 0, LowRank(np.ones(n)))])
    result = solve(problem, device="cpu")
    assert result.status.name == "OPTIMAL"
    # min tr X s.t. 1'X1 = 4: X = (4/9) 1 1', tr X = 4/3
    assert result.primal_objective == pytest.approx(4.0 / 3.0, rel=1e-5)


def test_badly_scaled_block_with_a_low_rank_term_solves_as_expanded():
    """Diagonal scaling (X = D Y D) maps a term's factor to D U: the same optimum as the expanded problem's, which
    is scaled through its coordinates."""
    C = sp.csr_array(np.diag([1e8, 1e-8])) + LowRank(np.ones(2), [1e-3])
    problem = SDPProblem([1.0], [C], [([0], [1], [0], [0.5])], A_low_rank=[(0, 0, LowRank([0.0, 1.0], [1e-9]))])
    factored, expanded = (solve(p, device="cpu") for p in (problem, problem.expanded()))
    assert "badly scaled" in factored.message and "badly scaled" in expanded.message
    assert factored.status.name == expanded.status.name == "OPTIMAL"
    assert factored.primal_objective == pytest.approx(expanded.primal_objective, rel=1e-5)
