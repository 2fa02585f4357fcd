"""The scale of a problem and the relative measures every phase and certificate uses.

``ProblemNorms`` holds the norms of b, C and A that the errors divide by; ``primal_infeasibility`` and
``relative_gap`` are the cuLoRADS paper's err1 and err3; ``worst`` is the largest of several measures, with an
unknown (NaN) one counting as infinitely bad. The 1 in their denominators stands for one unit of the data: the
solver measures the problem in the units of ``problem.scaling.DataUnits``, where the objective's largest coefficient
and the constraints' unit lie in [1/2, 1024] (but for diagonally scaled problems), so no measure turns absolute on
data written in small units. It imports nothing of the package, so the phases' progress rows (``state.py``) and
the certificates can both use it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ProblemNorms", "primal_infeasibility", "relative_gap", "worst"]


@dataclass(frozen=True)
class ProblemNorms:
    b_1: float
    b_2: float
    b_inf: float
    C_1: float
    C_inf: float
    A_inf: float  # the largest |coefficient| of the constraints

    @classmethod
    def of(cls, problem) -> ProblemNorms:
        return cls(problem.b_norm_1, problem.b_norm_2, problem.b_norm_inf, problem.C_norm_1, problem.C_norm_inf,
                   problem.A_norm_inf)


def primal_infeasibility(residual_norm: float, norms: ProblemNorms) -> float:
    return float(residual_norm) / (1.0 + norms.b_1)


def relative_gap(primal: float, dual: float) -> float:
    return abs(primal - dual) / (1.0 + abs(primal) + abs(dual))


def worst(values) -> float:
    """The largest of ``values``; inf when one is NaN (Python's ``max`` skips a NaN that is not first)."""
    values = list(values)
    return math.inf if any(math.isnan(v) for v in values) else max(values)
