"""SDPProblem: validation with messages that name the fault, and the coordinate form."""
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import SDPProblem

from support import dense_blocks, random_mixed_problem


def test_from_matrices_keeps_every_coefficient():
    problem = random_mixed_problem(0)
    C, A = dense_blocks(problem)
    assert problem.m == 7 and problem.block_sizes == (6, 4) and problem.n_lp == 3
    for k in range(2):
        assert np.allclose(C[k], C[k].T)
    # entries given in both triangles are folded onto one, not doubled
    full = np.array([[1.0, 2.0], [2.0, 3.0]])
    p = SDPProblem.from_matrices([full], [[full]], [1.0])
    assert np.array_equal(p.constraint_matrix(0, 0).toarray(), full)
    assert np.array_equal(p.objective_matrix(0).toarray(), full)


def test_coordinates_are_summed_and_folded():
    # (0,1) and (1,0) name the same symmetric entry: SDPA semantics sum them
    p = SDPProblem([1.0], [sp.eye(2)], [([0, 0, 0], [0, 1, 0], [1, 0, 0], [1.0, 2.0, 5.0])])
    A = p.constraint_matrix(0, 0).toarray()
    assert np.array_equal(A, [[5.0, 3.0], [3.0, 0.0]])


def test_the_problem_keeps_its_own_copy_of_the_callers_arrays():
    # sorted, unique, nonzero coordinates: the case where no sort or filter copies them on the way
    rows, cols, vals = np.array([0, 1, 2]), np.array([0, 0, 2]), np.array([1.0, -2.0, 3.0])
    con, a_vals = np.array([0, 1, 2]), np.array([1.0, 1.0, 1.0])
    problem = SDPProblem(np.ones(3), [(rows, cols, vals)], [(con, rows, rows, a_vals)], block_sizes=[3])
    vals[:] = 7.0
    con[:] = 0
    a_vals[:] = 5.0
    np.testing.assert_array_equal(problem.C_coords[0][2], [1.0, -2.0, 3.0])
    np.testing.assert_array_equal(problem.A_coords[0].con, [0, 1, 2])
    np.testing.assert_array_equal(problem.A_coords[0].val, [1.0, 1.0, 1.0])


def test_a_builder_hands_over_coordinates_in_the_stored_form_without_a_copy():
    con, rows, cols, vals = np.arange(3), np.array([1, 2, 2]), np.array([0, 0, 1]), np.array([1.0, -2.0, 3.0])
    problem = SDPProblem(np.ones(3), [np.eye(3)], [(con, rows, cols, vals)], copy=False)
    assert all(np.shares_memory(kept, given) for kept, given in zip(problem.A_coords[0], (con, rows, cols, vals)))
    # not in the stored form (upper triangle, a zero, a constraint with two coordinates): folded, filtered, summed
    for A in [(con, cols, rows, vals), (con, rows, cols, np.array([1.0, 0.0, 3.0])),
              (np.array([0, 0, 2]), rows, cols, vals)]:
        b = np.where(np.isin(np.arange(3), A[0][A[3] != 0]), 1.0, 0.0)  # a constraint left empty asks for b_i = 0
        problem = SDPProblem(b, [np.eye(3)], [A], copy=False)
        reference = SDPProblem(b, [np.eye(3)], [A])
        for i in range(3):
            assert (problem.constraint_matrix(i, 0) != reference.constraint_matrix(i, 0)).nnz == 0


def test_norms():
    p = SDPProblem([1.0, -3.0], [np.array([[1.0, -2.0], [-2.0, 0.5]])], [([0, 1], [0, 1], [0, 1], [1.0, 1.0])],
                   c_lp=[4.0], A_lp=sp.csr_array(np.array([[1.0], [0.0]])))
    assert p.b_norm_1 == 4.0 and p.b_norm_inf == 3.0
    assert p.C_norm_1 == pytest.approx(1 + 2 * 2 + 0.5 + 4)
    assert p.C_norm_inf == 4.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(b=[1.0], C=[np.array([[1.0, 2.0], [0.0, 1.0]])], A=[([0], [0], [0], [1.0])]), "block 0.*not symmetric"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([1], [0], [0], [1.0])]), "constraint index 1"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [2], [0], [1.0])]), "outside the block of size 2"),
    (dict(b=[np.nan], C=[np.eye(2)], A=[([0], [0], [0], [1.0])]), "b: contains a value that is not finite"),
    (dict(b=[1.0], C=[np.full((2, 2), np.inf)], A=[([0], [0], [0], [1.0])]), "not finite"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [0], [0], [np.inf])]), "A of PSD block 0.*not finite"),
    (dict(b=[1.0, 2.0], C=[np.eye(2)], A=[([0], [0], [0], [1.0])]), "constraint 1 has no coefficients"),
    (dict(b=[1.0], C=[np.eye(2), np.eye(3)], A=[([0], [0], [0], [1.0])]), "C has 2 blocks but A has 1"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [0], [0], [1.0])], c_lp=[1.0], A_lp=np.ones((2, 1))), "A_lp: shape"),
    (dict(b=[1.0], C=[np.ones((2, 3))], A=[([0], [0], [0], [1.0])]), "shape"),
    (dict(b=[], C=[], A=[]), "no variables"),
])
def test_bad_input_names_the_fault(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SDPProblem(**kwargs)


A0 = [([0], [0], [0], [1.0])]  # one coefficient for one constraint on a 2 x 2 block


@pytest.mark.parametrize("kwargs, what", [
    (dict(b=[1.0], C=[np.eye(2) * (1 + 1j)], A=A0), "C of PSD block 0"),
    (dict(b=[1.0], C=[np.eye(2).astype(complex)], A=A0), "C of PSD block 0"),  # even with zero imaginary parts
    (dict(b=[1.0], C=[sp.eye(2, dtype=complex)], A=A0), "C of PSD block 0"),
    (dict(b=[1.0], C=[([0], [0], [1j])], A=A0, block_sizes=[2]), r"C of PSD block 0 \(val\)"),
    (dict(b=[1.0 + 2j], C=[np.eye(2)], A=A0), "b"),
    (dict(b=np.array([1.0, 1j], dtype=object), C=[np.eye(2)], A=A0), "b"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [0], [0], [1j])]), r"A of PSD block 0 \(val\)"),
    (dict(b=[1.0], C=[np.eye(2)], A=A0, c_lp=[1j], A_lp=np.ones((1, 1))), "c_lp"),
    (dict(b=[1.0], C=[np.eye(2)], A=A0, c_lp=[1.0], A_lp=np.ones((1, 1)) * 1j), "A_lp"),
    (dict(b=[1.0], C=[np.eye(2)], A=A0, c_lp=[1.0], A_lp=sp.csr_array(np.ones((1, 1)) * 1j)), "A_lp"),
])
def test_complex_data_are_refused(kwargs, what):
    with pytest.raises(ValueError, match=f"^{what}: complex values are not supported$"):
        SDPProblem(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [0.5], [0], [1.0])]), r"A of PSD block 0 \(row\): 0.5 is not an integer"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [1], [1.5], [1.0])]), r"A of PSD block 0 \(col\): 1.5 is not an integer"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0.2], [0], [0], [1.0])]), r"A of PSD block 0 \(con\): 0.2 is not an integer"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [np.nan], [0], [1.0])]), r"\(row\): nan is not an integer"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([True], [0], [0], [1.0])]), r"\(con\): expected integers, got booleans"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], ["0"], [0], [1.0])]), r"\(row\): expected real numbers, got \['0'\]"),
    (dict(b=[1.0], C=[([0.5], [0], [1.0])], A=A0, block_sizes=[2]), r"C of PSD block 0 \(row\): 0.5 is not"),
    (dict(b=[1.0], C=[None], A=A0, block_sizes=[2.5]), "block_sizes: 2.5 is not an integer"),
    (dict(b=[1.0], C=[None], A=A0, block_sizes=[True]), "block_sizes: expected integers, got booleans"),
    (dict(b=[1.0], C=[None], A=A0, block_sizes=["2"]), "block_sizes: expected real numbers"),
    (dict(b=[1.0], C=[None], A=A0, block_sizes=2), "block_sizes: expected one size per PSD block, got 2"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [1e300], [0], [1.0])]), "outside the block of size 2"),
])
def test_indices_and_sizes_must_be_integers(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SDPProblem(**kwargs)


def test_integral_floats_are_valid_indices_and_sizes():
    ints = SDPProblem([1.0], [None], [([0, 0], [1, 1], [0, 1], [1.0, 2.0])], block_sizes=[2])
    floats = SDPProblem([1.0], [None], [(np.array([0.0, 0.0]), [1.0, 1.0], [0.0, 1.0], [1.0, 2.0])],
                        block_sizes=np.array([2.0]))
    assert floats.block_sizes == (2,) and type(floats.block_sizes[0]) is int
    for a, b in zip(ints.A_coords[0], floats.A_coords[0]):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


@pytest.mark.parametrize("kwargs, message", [
    (dict(b=[1.0], C="abc", A=A0), "C: expected a list with one entry per PSD block, got str"),
    (dict(b=[1.0], C=[np.eye(2)], A=sp.eye(2)), "A: expected a list with one entry per PSD block"),
    (dict(b=[1.0], C=["abc"], A=A0), "C of PSD block 0: expected a dense array or a scipy.sparse matrix, got str"),
    (dict(b=[1.0], C=["abc"], A=A0, block_sizes=[2]), "C of PSD block 0: expected a dense array"),
    (dict(b=[1.0], C=[{}], A=A0, block_sizes=[2]), "C of PSD block 0: expected a dense array.*got dict"),
    (dict(b=[1.0], C=[1.0], A=A0, block_sizes=[2]), "C of PSD block 0: expected a dense array.*got float"),
    (dict(b=[1.0], C=[[[1.0, 0.0], [0.0]]], A=A0), "C of PSD block 0: expected an array of numbers"),
    (dict(b=[1.0], C=[np.array([[1, None], [None, 1]])], A=A0), "C of PSD block 0: expected real numbers"),
    (dict(b=[1.0], C=[np.ones(2)], A=A0, block_sizes=[2]), r"C of PSD block 0: expected a matrix.*\(2,\)"),
    (dict(b=["x"], C=[np.eye(2)], A=A0), r"b: expected real numbers, got \['x'\]"),
    (dict(b=["1.0"], C=[np.eye(2)], A=A0), "b: expected real numbers"),  # strings are not parsed
    (dict(b=None, C=[np.eye(2)], A=A0), "b: expected real numbers, got None"),
    (dict(b=[10**400], C=[np.eye(2)], A=A0), "b: contains a value that is not finite"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [0], [0], ["a"])]), r"A of PSD block 0 \(val\): expected real numbers"),
    (dict(b=[1.0], C=[np.eye(2)], A=A0, c_lp=["a"], A_lp=np.ones((1, 1))), "c_lp: expected real numbers"),
    (dict(b=[1.0], C=[np.eye(2)], A=A0, c_lp=[1.0], A_lp="abc"), "A_lp: expected a dense array.*got str"),
])
def test_data_that_are_not_numbers_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SDPProblem(**kwargs)


def test_numeric_objects_and_booleans_are_values():
    exact = SDPProblem([Fraction(1, 2)], [np.array([[Fraction(1, 4), 0], [0, 1]], dtype=object)], A0,
                       c_lp=[1.0], A_lp=np.ones((1, 1)))
    assert exact.b[0] == 0.5 and exact.objective_matrix(0)[0, 0] == 0.25
    pattern = SDPProblem([1.0], [np.eye(2, dtype=bool)], A0, c_lp=[1.0], A_lp=[[True]])
    np.testing.assert_array_equal(pattern.objective_matrix(0).toarray(), np.eye(2))
    assert pattern.A_lp.dtype == np.float64 and pattern.A_lp[0, 0] == 1.0


@pytest.mark.parametrize("C, A, message", [
    ([None], [[None]], "C of PSD block 0: expected a dense array or a scipy.sparse matrix, got NoneType"),
    (["ab"], [[np.eye(2)]], "C of PSD block 0: expected a dense array"),
    ([np.eye(2)], [[np.eye(2) * 1j]], "constraint 0, PSD block 0: complex values are not supported"),
    ([np.eye(2)], [[np.ones((2, 3))]], r"constraint 0, PSD block 0: shape \(2, 3\), expected \(2, 2\)"),
    ([np.eye(2)], [[]], r"A\[0\] has 0 entries but C has 1 blocks"),
    ([np.eye(2)], [np.eye(2)], r"A\[0\]: expected a list with one entry per PSD block, got ndarray"),
])
def test_from_matrices_names_the_fault(C, A, message):
    with pytest.raises(ValueError, match=message):
        SDPProblem.from_matrices(C, A, [1.0])


def test_constraint_entries_stay_apart_when_a_packed_key_would_overflow():
    # (con * n + row) * n + col exceeds int64 here; wrapped, constraints 0 and 65536 on (0, 0) shared a key.
    n, m = 2**24, 65537
    p = SDPProblem(np.zeros(m), [None], [([65536, 0, 65536, 5], [0, 0, 0, 1], [0, 0, 0, 0], [1.0, 2.0, 4.0, 8.0])],
                   block_sizes=[n])
    np.testing.assert_array_equal(p.A_coords[0].con, [0, 5, 65536])
    np.testing.assert_array_equal(p.A_coords[0].row, [0, 1, 0])
    np.testing.assert_array_equal(p.A_coords[0].val, [2.0, 8.0, 5.0])  # the duplicate of 65536 is summed
    sorted_input = SDPProblem(np.zeros(m), [None], [([0, 65536], [0, 0], [0, 0], [2.0, 1.0])], block_sizes=[n])
    np.testing.assert_array_equal(sorted_input.A_coords[0].con, [0, 65536])
