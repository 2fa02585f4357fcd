"""Free variables split as x+ - x- (the 2-RDM instances' diagonal block, the CVXPY path's free scalars): phase I finds
the pairs, recentres them without moving A(X), and a small problem with many splits is solved within a step budget
that the drift along x+ = x- used to exhaust (decision record "quantum-chemistry-convergence")."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import cvxpy_culorads as cl
from cvxpy_culorads.backends.backend import select_backend
from cvxpy_culorads.operators.compressed import CompressedOperator
from cvxpy_culorads.phases.alm import MirrorPairs

FREE_COST = 1e-7  # what the split charges x+ + x-, as the 2-RDM files do


def split_problem(n: int, k: int, seed: int = 0):
    """min <C, X> + f'z s.t. diag(X) = 1, <M_i, X> + z_i = b_i (i < k), X PSD, z free and split as z+ - z- (LP
    variables, each half charged FREE_COST); also the dense data for CVXPY."""
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((n, n))
    C = (C + C.T) / 2
    Ms = [(M + M.T) / 2 for M in rng.standard_normal((k, n, n))]
    b = np.concatenate([np.ones(n), rng.standard_normal(k)])
    f = rng.standard_normal(k)
    rows, cols = np.tril_indices(n)
    cons = [np.arange(n)] + [np.full(rows.size, n + i) for i in range(k)]
    A = (np.concatenate(cons), np.concatenate([np.arange(n)] + [rows] * k),
         np.concatenate([np.arange(n)] + [cols] * k), np.concatenate([np.ones(n)] + [M[rows, cols] for M in Ms]))
    A_lp = sp.hstack([sp.vstack([sp.csr_matrix((n, k)), sp.identity(k)])] * 2, format="csr")
    A_lp[:, k:] *= -1.0
    problem = cl.SDPProblem(b=b, C=[(rows, cols, C[rows, cols])], A=[A], block_sizes=[n],
                            c_lp=np.concatenate([f, -f]) + FREE_COST, A_lp=A_lp)
    return problem, (C, Ms, b, f)


def test_pairs_are_found_and_recentred_without_moving_the_constraints():
    problem, _ = split_problem(6, 4)
    op = CompressedOperator(problem, select_backend("cpu"))
    pairs = MirrorPairs.of(op)
    assert pairs is not None
    found = sorted(zip(pairs.first.tolist(), pairs.second.tolist()))
    lp = op.layout.lp_offset
    assert sorted(tuple(sorted(pair)) for pair in found) == [(lp + i, lp + 4 + i) for i in range(4)]
    R = np.random.default_rng(1).uniform(-1.0, 1.0, (op.layout.n_rows, 3))
    R[lp:, 1:] = 0.0
    R[lp:, 0] *= 30.0  # both halves of every split far from zero
    before_constraints = op.constraints(op.sample(R))
    before_objective = float(op.objective(R))
    pairs.recentre(R)
    x = R[lp:, 0] ** 2
    assert np.allclose(op.constraints(op.sample(R)), before_constraints, rtol=0, atol=1e-9)
    assert float(op.objective(R)) < before_objective
    smaller = np.minimum(x[:4], x[4:])
    assert np.all(smaller > 0.0) and np.all(smaller <= 0.011 * np.abs(x[:4] - x[4:]) + 1e-12)


def test_pairs_need_opposite_columns_and_a_bounded_cost():
    problem, _ = split_problem(6, 2)
    problem_same_sign = cl.SDPProblem(b=problem.b, C=[problem.C_coords[0]], A=[problem.A_coords[0]],
                                      block_sizes=[6], c_lp=problem.c_lp, A_lp=abs(problem.A_lp))
    assert MirrorPairs.of(CompressedOperator(problem_same_sign, select_backend("cpu"))) is None
    unbounded = cl.SDPProblem(b=problem.b, C=[problem.C_coords[0]], A=[problem.A_coords[0]], block_sizes=[6],
                              c_lp=problem.c_lp - 1.0, A_lp=problem.A_lp)  # c+ + c- < 0: no pair
    assert MirrorPairs.of(CompressedOperator(unbounded, select_backend("cpu"))) is None


def test_many_splits_solve_within_the_step_budget():
    """16 x 16 block, 24 free variables: with the recentring phases I and II take about 24,000 steps; drifting (both
    halves of a split growing to 400 while z stays below 40) they took 111,000 and ended INACCURATE."""
    cp = pytest.importorskip("cvxpy")
    problem, (C, Ms, b, f) = split_problem(16, 24)
    result = cl.solve(problem, algorithm="alm_admm", interior_point_handover=False, max_iter=60_000, time_limit=60)
    assert result.status is cl.Status.OPTIMAL
    X, z = cp.Variable((16, 16), PSD=True), cp.Variable(24)
    reference = cp.Problem(cp.Minimize(cp.trace(C @ X) + f @ z + FREE_COST * cp.norm1(z)),
                           [cp.diag(X) == 1] + [cp.trace(M @ X) + z[i] == b[16 + i] for i, M in enumerate(Ms)])
    reference.solve(solver=cp.CLARABEL)
    assert abs(result.primal_objective - reference.value) <= 1e-4 * (1.0 + abs(reference.value))
    halves = result.x_lp.reshape(2, -1)
    assert np.max(np.minimum(*halves)) <= 1e-2 * (1.0 + np.max(np.abs(halves[0] - halves[1])))
