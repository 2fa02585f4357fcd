"""The measures of one point and the order between points: what decides a status.

An :class:`Evaluation` holds everything measured from scratch on a point (factor and multipliers): the errors, the
criteria that decide its status (:func:`criteria_of`, by ``Settings.criterion``), the certified dual bound and the dual
slack's smallest eigenpairs. :func:`better` keeps the better of two measured points, so a solve returns the best point
it measured whatever stopped it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

from cvxpy_culorads.certify.bounds import DualBound
from cvxpy_culorads.certify.certificates import Eigenpair
from cvxpy_culorads.certify.measures import worst
from cvxpy_culorads.result import Errors
from cvxpy_culorads.settings import Settings

__all__ = ["Evaluation", "criteria_of", "better", "residual_share", "DUAL_MEASURES"]

Measured = TypeVar("Measured")

@dataclass
class Evaluation:
    """The measures of one point, taken from scratch on the point itself: ``errors`` (all of them), the
    ``criteria`` that decide its status (a subset, see :func:`criteria_of`), the certified dual bound, and the
    dual slack's smallest eigenpairs with ``dual_weights``, what one unit of -lambda_min of each block adds to
    the criteria's dual measure."""

    primal_objective: float
    dual_objective: float
    errors: Errors
    eigenpairs: list[Eigenpair]
    bound: DualBound
    certified_gap: float | None
    criteria: dict
    dual_weights: list[float]

    @classmethod
    def unmeasurable(cls, settings: Settings) -> Evaluation:
        """The evaluation of a point that is not finite: every measure infinitely bad."""
        errors = Errors.unmeasured()
        return cls(math.nan, math.nan, errors, [], DualBound(None, "none: the point is not finite"), None,
                   criteria_of(settings.criterion, errors, None), [])

    @property
    def measured(self) -> bool:
        """Whether the point was finite and measured (not :meth:`unmeasurable`)."""
        return math.isfinite(self.primal_objective)

    @property
    def worst(self) -> float:
        return worst(self.criteria.values())

    @property
    def slack_estimate(self) -> float:
        """The dual slack's negative Ritz values in the criteria's dual measure: what polishing is judged by (the
        certificate's lower estimates also carry the Ritz residuals, large when the eigensolver ran out of cycles)."""
        return sum(max(0.0, -pair.value) * weight for pair, weight in zip(self.eigenpairs, self.dual_weights))

    def stalled_since(self, previous: Evaluation | None) -> bool:
        """Whether more iterations at this rank stopped paying: the slack's negative Ritz values were not halved
        since ``previous`` (False without one)."""
        return previous is not None and self.slack_estimate > 0.5 * previous.slack_estimate

    @property
    def dual_measure(self) -> float:
        """The criteria's measure of the dual side (certified gap, slack violation or DIMACS dual error)."""
        return self.criteria[next(name for name in DUAL_MEASURES if name in self.criteria)]


DUAL_MEASURES = ("certified_gap", "dual_slack_violation", "dual_infeasibility")


def criteria_of(criterion: str, errors: Errors, certified_gap: float | None) -> dict:
    """The measures that must be within tol for OPTIMAL. ``"dimacs"``: the paper's three errors. ``"certified"``:
    the primal residual per constraint (||A(X) - b||_2 / (1 + ||b||_2)) and the certified gap, or, where no
    bound exists, the dual slack's negative eigenvalues on the ||C||_inf scale and the gap."""
    if criterion == "dimacs":
        names = ("primal_infeasibility", "dual_infeasibility", "gap")
    elif certified_gap is not None:
        return {"primal_residual": errors.primal_residual, "certified_gap": certified_gap}
    else:
        names = ("primal_residual", "dual_slack_violation", "gap")
    return {name: getattr(errors, name) for name in names}


def residual_share(op, R, lam, evaluation: Evaluation) -> float:
    """|lambda'(A(X) - b)| / (1 + |primal| + |dual|) of the factor ``R`` and the (unscaled) multipliers ``lam`` on
    the operator ``op``: the part of the gap the primal residual makes.

    The gap is <C, X> - b'lambda = <S, X> + lambda'(A(X) - b) with S = C - A*(lambda), and near an optimum the second
    term is what the objective owes to the residual: X solves the problem whose right-hand side is A(X), whose value
    differs from the problem's by lambda'(A(X) - b) to first order. The criteria bound the residual and the gap, not
    this product: where the optimal multipliers are not attained (no Slater point, as the fidelity SDP of a pure state
    in its primal form) they grow large, and a complementarity of 1e-4 cancels against a residual term of -1e-4
    inside a gap of 1e-6 (decision record "exact-statuses-and-cvxpy-duals"). The Cauchy-Schwarz bound ||lambda||
    ||A(X) - b|| is no test: well-solved problems (SDPLIB's hinf1) exceed tol by it 28-fold."""
    residual = op.constraints(op.sample(R)) - op.b  # of the rescaled rows, as op.b @ lam is the dual objective
    return abs(float(lam @ residual)) / (1.0 + abs(evaluation.primal_objective) + abs(evaluation.dual_objective))


def better(best: Measured | None, candidate: Measured) -> Measured:
    """The better of two measured points (anything with an ``evaluation``): the smaller worst criterion (so one within
    tol beats one outside it). Non-finite errors never win."""
    if best is None or not math.isfinite(best.evaluation.worst):
        return candidate
    if not math.isfinite(candidate.evaluation.worst):
        return best
    return candidate if candidate.evaluation.worst < best.evaluation.worst else best
