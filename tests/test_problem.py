"""SDPProblem: validation with messages that name the fault, and the coordinate form."""
import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import SDPProblem

from conftest import dense_blocks, random_mixed_problem


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
    (dict(b=[np.nan], C=[np.eye(2)], A=[([0], [0], [0], [1.0])]), "b contains"),
    (dict(b=[1.0], C=[np.full((2, 2), np.inf)], A=[([0], [0], [0], [1.0])]), "not finite"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [0], [0], [np.inf])]), "A of PSD block 0.*not finite"),
    (dict(b=[1.0, 2.0], C=[np.eye(2)], A=[([0], [0], [0], [1.0])]), "constraint 1 has no coefficients"),
    (dict(b=[1.0], C=[np.eye(2), np.eye(3)], A=[([0], [0], [0], [1.0])]), "C has 2 blocks but A has 1"),
    (dict(b=[1.0], C=[np.eye(2)], A=[([0], [0], [0], [1.0])], c_lp=[1.0], A_lp=np.ones((2, 1))), "A_lp has shape"),
    (dict(b=[1.0], C=[np.ones((2, 3))], A=[([0], [0], [0], [1.0])]), "shape"),
    (dict(b=[], C=[], A=[]), "no variables"),
])
def test_bad_input_names_the_fault(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SDPProblem(**kwargs)
