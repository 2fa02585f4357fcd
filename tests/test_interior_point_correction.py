"""The interior-point method's rule for correcting its direction against the operator
(``InteriorPointPhase.correcting``): it corrects where the primal residual is the measure that lags, and the dual
measure it compares with counts the rounding of the certificate's eigenvalues of the slack, which grows with
diverging multipliers (Mittelmann's rose13: decision record "interior-point-route")."""
import math

import numpy as np
import pytest

from cvxpy_culorads import SDPProblem, Status, read_sdpa, solve
from cvxpy_culorads.backends.backend import CpuBackend
from cvxpy_culorads.certify.certificates import DENSE_ROUNDING
from cvxpy_culorads.phases.interior_point import InteriorPointPhase
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.plan import plan
from cvxpy_culorads.solver.run import Run

from support import data_file

# min 2 X_12 s.t. X_11 = 0, X_22 = 1: the optimum 0 is attained, but the dual's (max y_2 s.t. [[-y_1, 1], [1, -y_2]]
# PSD) is not: y_2 -> 0 needs y_1 -> -inf, as the multipliers of a problem without a primal interior point diverge
UNATTAINED_DUAL = SDPProblem.from_matrices(
    C=[np.array([[0.0, 1.0], [1.0, 0.0]])],
    A=[[np.array([[1.0, 0.0], [0.0, 0.0]])], [np.array([[0.0, 0.0], [0.0, 1.0]])]],
    b=np.array([0.0, 1.0]))


def _first_measured(multiplier: float) -> InteriorPointPhase:
    """The method measured at a point near the optimum with y_1 = -``multiplier``: X = diag(1e-15, 1 + 1e-4) (a primal
    residual of 5e-5), y_2 on the boundary of the dual cone, S = C - A*(y) (no dual residual)."""
    settings = Settings.from_options(device="cpu")
    run = Run(UNATTAINED_DUAL, settings, plan(UNATTAINED_DUAL, settings))
    phase = InteriorPointPhase(UNATTAINED_DUAL, CpuBackend(), run.state, run.op.layout, run.norms, 1e-5,
                               run.op.row_scale)
    (stack,) = phase.stacks
    phase.y = np.array([-multiplier, -2.0 / multiplier])
    phase.X = [np.diag([1e-15, 1.0 + 1e-4])[None]]
    phase.S = [stack.C - stack.adjoint(phase.y)]
    iterations = phase.run()
    next(iterations)
    iterations.close()
    return phase


def test_the_direction_is_corrected_where_the_primal_residual_lags():
    phase = _first_measured(1e5)  # a gap of 2e-5
    assert phase.correcting
    assert phase.best[0] == pytest.approx(5e-5, rel=1e-3)  # the primal residual per constraint, 1e-4 / (1 + ||b||)


def test_not_where_the_slack_of_diverging_multipliers_cannot_be_certified():
    # with y_1 = -1e12 the slack's smallest eigenvalue, about 1e-12, is certified only to DENSE_ROUNDING n eps
    # ||S||_2 / (1 + ||C||_inf) = 2.2e-3: that is the dual measure the solve finds, larger than the primal residual
    phase = _first_measured(1e12)
    S = phase.S[0][0]
    floor = DENSE_ROUNDING * 2 * np.finfo(float).eps * np.linalg.norm(S, 2) / (1.0 + phase.norms.C_inf)
    assert floor > 1e-3
    assert not phase.correcting
    assert phase.best[0] >= floor and math.isfinite(phase.best[0])


@pytest.mark.slow
def test_rose13_is_optimal():
    # its multipliers grow like 1/mu; corrected regardless of the slack's rounding, the method went on to iterates of
    # ||y|| ~ 1e8 whose slack the solve measured at 1.6e-5 (INACCURATE)
    result = solve(read_sdpa(data_file("mittelmann", "rose13.dat-s.xz")), device="cpu", time_limit=300)
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.criteria["dual_slack_violation"] <= 1e-5
