"""Tests of the structure-aware CVXPY path, ``problem.solve(method="culorads")`` (``cvxpy_structured.py``).

With the engine replaced by an exact Clarabel solve of the SDPProblem (``stand_in``), any disagreement with CVXPY's
own Clarabel solve (values, unique duals, CVXPY's KKT checks) is the reader's fault; with the real engine, both
entry points must agree with Clarabel and with each other. The reader's output is also compared with the direct
API's MaxCut problem, coordinate by coordinate.
"""
from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from cvxpy.error import DCPError, SolverError
from cvxpy_zoo import ZOO, Case, check_against_clarabel, lmi_form, maxcut, solve_with_clarabel

from cvxpy_culorads import Result, Status
from cvxpy_culorads.cvxpy.structured import METHOD_NAME, Unsupported, read_problem
from cvxpy_culorads.models import maxcut_problem
from cvxpy_culorads.solver import driver


# ---------------------------------------------------------------------------------------------- more models
def coupled_blocks() -> Case:
    """A PSD variable and a symmetric one constrained >> 0, coupled through a constraint with nonnegative,
    nonpositive and free vectors; inequalities both ways and on single entries."""
    rng = np.random.default_rng(4)
    A1, A2 = (G + G.T for G in rng.standard_normal((2, 4, 4)))
    X1 = cp.Variable((4, 4), PSD=True)
    X2 = cp.Variable((4, 4), symmetric=True)
    x, w, y = cp.Variable(3, nonneg=True), cp.Variable(2, nonpos=True), cp.Variable(2)
    coupling = cp.trace(A1 @ X1) + cp.trace(X2 @ A2) + cp.sum(x) - w[0] == 2
    constraints = [X2 >> 0, coupling, cp.trace(X1) + y[0] == 1, cp.trace(X2) - y[1] == 1, y >= -0.5, y <= 0.5,
                   x[0] + 2 * x[1] <= 1.5, X1[0, 1] <= 0.05, w >= -1, cp.sum(X1, axis=1) <= 2,
                   cp.sum(X2, axis=0, keepdims=True) >= -2]
    objective = cp.Minimize(cp.trace((np.eye(4) + 0.1 * A1) @ X1) + cp.trace(X2) + x @ np.array([1.0, 2, 3])
                            + cp.sum(y) - 2 * cp.sum(w) + 4)
    return Case(cp.Problem(objective, constraints), [coupling])


def plain_variable_psd() -> Case:
    """A variable not declared symmetric, constrained >> 0 (CVXPY: its symmetric part is PSD), whose
    antisymmetric part a constraint fixes."""
    rng = np.random.default_rng(5)
    B = rng.standard_normal((4, 4))
    Z = cp.Variable((4, 4))
    unit_trace = cp.trace(Z) == 1
    constraints = [Z >> 0, unit_trace, Z[0, 1] - Z[1, 0] == 0.3, Z[2, 3] == Z[3, 2]]
    objective = cp.Minimize(cp.trace((B + B.T) @ Z) + cp.sum(Z[2:, 0] + Z[0, 2:]))
    return Case(cp.Problem(objective, constraints), [unit_trace])


def nsd_variable() -> Case:
    N = cp.Variable((3, 3), NSD=True)
    unit_trace = cp.trace(N) == -1
    constraints = [unit_trace, cp.reshape(N, (9,), order="F")[1] == 0.1, cp.hstack([N[0, 0], N[2, 2]]) <= -0.1]
    return Case(cp.Problem(cp.Maximize(cp.trace(N @ np.diag([1.0, 2, 3]))), constraints), [unit_trace])


def vector_lmi() -> Case:
    """min c'x s.t. F0 + x1 F1 + x2 F2 >> 0 with box bounds: a free vector inside an LMI."""
    rng = np.random.default_rng(6)
    F1, F2 = (G + G.T for G in rng.standard_normal((2, 5, 5)))
    x = cp.Variable(2)
    lmi = np.eye(5) + x[0] * F1 + x[1] * F2 >> 0
    return Case(cp.Problem(cp.Minimize(x[0] + 0.5 * x[1]), [lmi, x >= -3, x <= 3]), [lmi])


def completion_through_psd_variables() -> Case:
    """Nuclear-norm completion written with PSD variables: min (tr W1 + tr W2) / 2 s.t. [[W1, Y], [Y', W2]] >> 0
    and the known entries of Y."""
    rng = np.random.default_rng(9)
    target = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 5))
    known = rng.random((6, 5)) < 0.7
    Y = cp.Variable((6, 5))
    W1, W2 = cp.Variable((6, 6), symmetric=True), cp.Variable((5, 5), symmetric=True)
    constraints = [cp.bmat([[W1, Y], [Y.T, W2]]) >> 0, cp.multiply(known, Y) == known * target]
    return Case(cp.Problem(cp.Minimize(0.5 * cp.trace(W1) + 0.5 * cp.trace(W2)), constraints), [])


def parameterised(value: float) -> Case:
    rng = np.random.default_rng(7)
    G = rng.standard_normal((5, 5))
    budget = cp.Parameter(nonneg=True, value=value)
    X = cp.Variable((5, 5), PSD=True)
    trace = cp.trace(X) == budget
    return Case(cp.Problem(cp.Minimize(cp.trace((G + G.T) @ X)), [trace, X[0, 0] >= 0.1 * budget]), [trace])


READABLE = {name: ZOO[name] for name in ("maxcut", "theta_petersen", "theta_random", "several_blocks")} | {
    "coupled_blocks": coupled_blocks, "plain_variable_psd": plain_variable_psd, "nsd_variable": nsd_variable,
    "vector_lmi": vector_lmi, "completion_through_psd_variables": completion_through_psd_variables,
    "parameterised": lambda: parameterised(1.0)}


def theta_of_a_cycle(n: int = 5, form: str = "sum") -> Case:
    """Lovasz theta of the n-cycle, max <J, X> s.t. tr X = 1, X_ij = 0 on edges, with <J, X> written as sum(X) or
    trace(J @ X): theta(C_5) = sqrt(5)."""
    X = cp.Variable((n, n), PSD=True)
    objective = cp.sum(X) if form == "sum" else cp.trace(np.ones((n, n)) @ X)
    constraints = [cp.trace(X) == 1] + [X[i, (i + 1) % n] == 0 for i in range(n)]
    return Case(cp.Problem(cp.Maximize(objective), constraints), [])


def all_entries_in_constraints() -> Case:
    """sum(X) in a constraint and sum(3 J * X) in another, beside a plain variable summed entrywise (no block)."""
    rng = np.random.default_rng(8)
    G = rng.standard_normal((6, 6))
    X = cp.Variable((6, 6), PSD=True)
    Y = cp.Variable((2, 2))
    constraints = [cp.sum(X) == 2, cp.trace(X) == 1, cp.sum(cp.multiply(3 * np.ones((6, 6)), X)) <= 9,
                   cp.sum(Y) == 1, Y >= 0]
    return Case(cp.Problem(cp.Minimize(cp.trace((G + G.T) @ X) + cp.sum(cp.multiply([[1, 2], [3, 4]], Y))),
                           constraints), [])


# ------------------------------------------------------------------- (a) the reader, with an exact engine
@pytest.mark.parametrize("name", READABLE)
def test_the_reader_reads_the_model(name):
    sdp = read_problem(READABLE[name]().problem).sdp
    assert sdp.m > 0


@pytest.mark.parametrize("name", READABLE)
def test_exact_engine_through_the_reader_matches_clarabel(stand_in, name):
    case = READABLE[name]()
    reference, reference_duals = solve_with_clarabel(case)
    value = case.problem.solve(method=METHOD_NAME)
    assert stand_in, "the model fell back to CVXPY's chain"
    # the engine's form has free scalars split as x+ - x-, which leaves Clarabel's duals less accurate
    check_against_clarabel(name, case, value, reference, reference_duals, rel=1e-6, abs=1e-7, violation=1e-6,
                           dual_rtol=1e-4, dual_atol=1e-4, places=5)


@pytest.mark.parametrize("form", ["sum", "trace_J"])
def test_a_sum_of_all_entries_of_a_block_is_read_as_a_rank_one_term(stand_in, form):
    case = theta_of_a_cycle(7, form)
    sdp = read_problem(case.problem).sdp
    assert sdp.C_low_rank[0] is not None and sdp.C_coords[0][0].size == 0  # no n^2 coordinates
    np.testing.assert_allclose(sdp.objective_matrix(0).toarray(), -np.ones((7, 7)))  # max <J, X> as min <-J, X>
    reference, _ = solve_with_clarabel(case)
    value = case.problem.solve(method=METHOD_NAME)
    assert stand_in and value == pytest.approx(reference, rel=1e-6)


def test_sums_of_all_entries_in_constraints_are_rank_one_terms(stand_in):
    case = all_entries_in_constraints()
    sdp = read_problem(case.problem).sdp
    terms = sdp.A_low_rank[0]
    # rows: the equalities (sum X, tr X, sum Y), then the inequalities (sum 3J*X first); tr X stays 6 coordinates
    assert sorted(terms.con.tolist()) == [0, 3]
    assert sdp.A_coords[0].con.tolist() == [1] * 6
    dense = [sdp.constraint_matrix(i, 0).toarray() for i in (0, 3)]
    np.testing.assert_allclose(dense[0], np.ones((6, 6)))
    np.testing.assert_allclose(dense[1], 3 * np.ones((6, 6)))
    reference, reference_duals = solve_with_clarabel(case)
    value = case.problem.solve(method=METHOD_NAME)
    assert stand_in
    check_against_clarabel("all_entries", case, value, reference, reference_duals, rel=1e-6, abs=1e-7,
                           violation=1e-6, dual_rtol=1e-4, dual_atol=1e-4, places=5)


def test_theta_through_sum_with_the_engine():
    problem = theta_of_a_cycle(5).problem
    value = problem.solve(method=METHOD_NAME, device="cpu")
    assert problem.status == cp.OPTIMAL and value == pytest.approx(np.sqrt(5.0), rel=1e-5)


def test_maxcut_is_read_into_the_direct_apis_problem():
    rng = np.random.default_rng(8)
    n = 3000
    W = sp.random_array((n, n), density=6 / n, random_state=rng, format="csr")
    W = sp.csr_array(((W + W.T) > 0).astype(float))
    W.setdiag(0)
    W.eliminate_zeros()
    laplacian = sp.diags_array(np.asarray(W.sum(axis=1)).ravel()) - W
    X = cp.Variable((n, n), PSD=True)
    read = read_problem(cp.Problem(cp.Maximize(cp.trace(laplacian @ X) / 4), [cp.diag(X) == 1])).sdp
    direct = maxcut_problem(W)
    np.testing.assert_array_equal(read.b, direct.b)
    assert read.block_sizes == direct.block_sizes == (n,)
    for got, expected in [(read.objective_matrix(0), direct.objective_matrix(0))] + [
            (read.constraint_matrix(i, 0), direct.constraint_matrix(i, 0)) for i in (0, 17, n - 1)]:
        assert abs(got - expected).max() <= 1e-15
    # as many coordinates as the data have: one triangle of L, one per diagonal constraint
    assert read.C_coords[0][0].size == (laplacian.nnz + n) // 2
    assert read.A_coords[0].con.size == n


def test_parameters_are_read_at_every_solve(stand_in):
    case = parameterised(1.0)
    first = case.problem.solve(method=METHOD_NAME)
    case.problem.parameters()[0].value = 2.5
    second = case.problem.solve(method=METHOD_NAME)
    reference = case.problem.solve(solver="CLARABEL")
    assert second == pytest.approx(reference, rel=1e-6)
    assert second == pytest.approx(2.5 * first, rel=1e-6)  # the optimum scales with the budget


def test_large_values_are_left_unset_with_a_warning():
    case = maxcut(20)
    with pytest.warns(RuntimeWarning, match=r"factors\[0\]"):
        value = case.problem.solve(method=METHOD_NAME, device="cpu", max_value_bytes=1000)
    X = case.problem.variables()[0]
    assert X.value is None and case.problem.constraints[0].dual_value is not None
    R = case.problem.solver_stats.extra_stats.factors[0]
    np.testing.assert_allclose(np.sum(R * R, axis=1), 1.0, atol=1e-6)  # the factor is the answer
    reference = maxcut(20).problem.solve(solver="CLARABEL")
    assert value == pytest.approx(reference, rel=1e-4)


@pytest.mark.parametrize("status, cvxpy_status", [(Status.INFEASIBLE_INACCURATE, cp.INFEASIBLE_INACCURATE),
                                                  (Status.TIME_LIMIT, cp.USER_LIMIT)])
def test_statuses_are_cvxpys(monkeypatch, status, cvxpy_status):
    def engine(problem, settings, warm_start=None):
        n = problem.block_sizes[0]
        return Result(status=status, primal_objective=-1.0, dual_objective=-1.0, errors=None, criteria={},
                      dual_bound=None, certified_gap=None, factors=[np.eye(n)], x_lp=np.zeros(problem.n_lp),
                      dual=np.zeros(problem.m), iterations={"alm": 3}, ranks=[n], solve_time=0.0, device="test")

    monkeypatch.setattr(driver, "solve", engine)
    case = maxcut(6)
    case.problem.solve(method=METHOD_NAME)
    assert case.problem.status == cvxpy_status
    assert (case.problem.variables()[0].value is None) == (cvxpy_status == cp.INFEASIBLE_INACCURATE)


def test_a_failed_engine_raises_as_on_the_chain(monkeypatch):
    def engine(problem, settings, warm_start=None):
        return Result(status=Status.NUMERICAL_ERROR, primal_objective=np.nan, dual_objective=np.nan, errors=None,
                      criteria={}, dual_bound=None, certified_gap=None, factors=[np.eye(problem.block_sizes[0])],
                      x_lp=np.zeros(0), dual=np.zeros(problem.m), iterations={}, ranks=[1], solve_time=0.0,
                      device="test", message="the iterates diverged")

    monkeypatch.setattr(driver, "solve", engine)
    with pytest.raises(SolverError, match="diverged"):
        maxcut(6).problem.solve(method=METHOD_NAME)


# ------------------------------------------------------------------- (b) what the reader does not read
def test_an_unknown_atom_falls_back_to_the_chain_and_says_so(capsys):
    case = lmi_form()  # norm1 is no linear atom
    with pytest.raises(Unsupported, match="norm1"):
        read_problem(case.problem)
    reference = case.problem.solve(solver="CLARABEL")
    value = case.problem.solve(method=METHOD_NAME, device="cpu", verbose=True)
    assert "does not handle the atom norm1" in capsys.readouterr().err
    assert case.problem.status == cp.OPTIMAL
    assert value == pytest.approx(reference, rel=1e-4)


def test_unsupported_variables_fall_back_to_the_chain():
    x = cp.Variable(3, boolean=True)
    problem = cp.Problem(cp.Minimize(cp.sum(x)), [x >= 0.5])
    with pytest.raises(Unsupported, match="boolean"):
        read_problem(problem)
    with pytest.raises(SolverError) as chain:
        problem.solve(solver="CULORADS")
    with pytest.raises(SolverError) as method:
        problem.solve(method=METHOD_NAME)
    assert str(method.value) == str(chain.value)
    z = cp.Variable(2, complex=True)  # the chain makes complex models real; so the fallback solves it
    problem = cp.Problem(cp.Minimize(cp.sum(cp.real(z) + cp.imag(z))), [cp.real(z) >= 1, cp.imag(z) >= -1])
    assert problem.solve(method=METHOD_NAME, device="cpu") == pytest.approx(0.0, abs=1e-4)


def test_bad_input_gets_the_chains_errors():
    case = maxcut(6)
    with pytest.raises(ValueError) as chain:
        case.problem.solve(solver="CULORADS", tolerance=1e-6)
    with pytest.raises(ValueError) as method:
        case.problem.solve(method=METHOD_NAME, tolerance=1e-6)
    assert str(method.value) == str(chain.value)
    X = cp.Variable((3, 3), PSD=True)
    nonconvex = cp.Problem(cp.Maximize(cp.sum_squares(X)), [cp.trace(X) == 1])
    with pytest.raises(DCPError):
        nonconvex.solve(method=METHOD_NAME)
    with pytest.raises(ValueError, match="max_value_bytes"):
        case.problem.solve(method=METHOD_NAME, max_value_bytes=-1)


# ------------------------------------------------------------------- (c) with the engine
@pytest.mark.parametrize("name", READABLE)
def test_both_entry_points_agree_with_clarabel(name):
    case = READABLE[name]()
    reference, reference_duals = solve_with_clarabel(case)
    chain = case.problem.solve(solver="CULORADS", device="cpu", tol=1e-7)
    chain_duals = [np.copy(constraint.dual_value) for constraint in case.unique_duals]
    value = case.problem.solve(method=METHOD_NAME, device="cpu", tol=1e-7)
    check_against_clarabel(name, case, value, reference, reference_duals, rel=1e-5, abs=1e-6, violation=1e-5,
                           dual_rtol=1e-3, dual_atol=1e-4, places=3)
    assert value == pytest.approx(chain, rel=1e-5, abs=1e-6)
    for constraint, expected in zip(case.unique_duals, chain_duals):
        np.testing.assert_allclose(constraint.dual_value, expected, rtol=1e-3, atol=1e-4)
