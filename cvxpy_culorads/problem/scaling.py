"""The scalings a solve undoes on its answer: the data's units, and X_k = D_k Y_k D_k for badly scaled PSD blocks.

**Units** (:class:`DataUnits`). The measures that decide a status are relative to 1 + |.|, so below one unit they
are absolute: C scaled by 1e-6 made any gap look small. Where the objective's largest |coefficient| or the
constraints' unit (||b||_inf, or the largest |coefficient| of A where b = 0) lies outside ``UNIT_RANGE``, C (with
c_lp) or A and b together are multiplied by a power of two that brings it into [1, 2): exact in floating point, so
the problem solved is the same whatever the units it was written in. X and x are unchanged; the objective, bounds and
multipliers map back, and the errors stay those of the scaled problem (decision record "scale-invariance"). Data
inside ``UNIT_RANGE`` (all of Gset and SDPLIB) are solved as given.

**Diagonal scaling** (:class:`DiagonalScaling`). A block whose diagonal entries carry objective and constraint
coefficients of wildly different sizes (min 1e8 X_00 + 1e-8 X_11 s.t. X_01 = 1: optimum 2 at X_00 = 1e-8,
X_11 = 1e8) defeats both the low-rank phases and the interior-point finish: the optimal X spans sixteen orders of
magnitude. Substituting X_k = D_k Y_k D_k with d_j = sqrt(median scale / scale_j), where scale_j is the largest
|coefficient| on the diagonal entry j in C_k and the A_ik, gives an equivalent problem (same b, same multipliers,
same optimal value) whose diagonal coefficients are of one size; its factor maps back as R_k = D_k R'_k. Blocks whose
scales spread less than ``SCALE_SPREAD`` are left alone, so well-scaled problems (all of Gset and SDPLIB but the ones
the spread flags) solve unchanged.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import sys
from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.hostpasses import map_chunks
from cvxpy_culorads.problem.lowrank import LowRank
from cvxpy_culorads.problem.sdp import BlockCoefficients, LowRankCoefficients, SDPProblem

__all__ = ["DataUnits", "DiagonalScaling", "SCALE_SPREAD", "UNIT_RANGE"]

SCALE_SPREAD = 1e6  # largest over smallest nonzero diagonal scale of a block above which it is rescaled
# the data's units solved as given: one unit of the data is then within 1/1024..2 of the measures' 1 (Gset's and
# SDPLIB's lie in 0.1..199)
UNIT_RANGE = (0.5, 1024.0)


@dataclass(frozen=True)
class DataUnits:
    """The units a problem is solved in: C and c_lp are divided by ``objective``, A, A_lp and b by ``constraints``
    (powers of two, 1.0 where the data's unit lies in ``UNIT_RANGE``). ``objective_unit`` is the largest |coefficient|
    of the objective (0 for C = 0), ``constraint_unit`` ||b||_inf, or the largest |coefficient| of A where b = 0."""

    objective: float
    constraints: float
    objective_unit: float
    constraint_unit: float

    @classmethod
    def of(cls, problem: SDPProblem, rescale: bool = True) -> DataUnits:
        """The units ``problem`` is solved in; with ``rescale`` False its own (measured, for the message). A problem
        with a diagonally scaled block keeps its own: D's median scale sets C's diagonal against A's, which scaling
        C alone would undo (decision record "scale-invariance")."""
        objective_unit = problem.C_norm_inf
        constraint_unit = problem.b_norm_inf or (problem.A_norm_inf if problem.m else 0.0)
        if not rescale:
            return cls(1.0, 1.0, objective_unit, constraint_unit)
        return cls(_unit_scale(objective_unit), _unit_scale(constraint_unit), objective_unit, constraint_unit)

    @property
    def rescales(self) -> bool:
        return self.objective != 1.0 or self.constraints != 1.0

    def apply(self, problem: SDPProblem) -> SDPProblem:
        """The problem in these units (``problem`` itself when they are its own): a copy that shares the index arrays
        and divides the values; X and x solve both alike."""
        if not self.rescales:
            return problem
        # a shallow copy, not the constructor: that would check and copy every index array again (at n = 1e6
        # 38x the time and 4x the peak memory of this)
        scaled = copy.copy(problem)
        c, a = self.objective, self.constraints
        scaled.b = problem.b / a
        scaled.C_coords = [(rows, cols, vals / c) for rows, cols, vals in problem.C_coords]
        scaled.C_low_rank = [None if t is None else LowRank(t.U, t.d / c) for t in problem.C_low_rank]
        scaled.c_lp = problem.c_lp / c
        scaled.A_coords = [BlockCoefficients(k.con, k.row, k.col, k.val / a) for k in problem.A_coords]
        scaled.A_low_rank = [t if t.term is None else LowRankCoefficients(t.con, LowRank(t.term.U, t.term.d / a))
                             for t in problem.A_low_rank]
        scaled.A_lp = problem.A_lp / a
        scaled._expanded = None
        return scaled

    def warm_start(self, warm):
        """A warm start (``solver.warm.WarmStart``, in the user's units) in these units: the multipliers times
        ``constraints / objective``, the penalty times ``constraints^2 / objective``; the factors are the same."""
        if warm is None or not self.rescales:
            return warm
        c, a = self.objective, self.constraints  # powers of two: each product is exact unless it under- or overflows
        return dataclasses.replace(warm, dual=None if warm.dual is None else warm.dual * a / c,
                                   penalty=None if warm.penalty is None else warm.penalty * a / c * a)

    def unscale(self, result):
        """``result`` (a :class:`~cvxpy_culorads.Result` of the problem in these units) in the user's units: the
        objectives, the dual bound, the slack's eigenvalues and the log's objectives times ``objective``, the
        multipliers times ``objective / constraints``, the penalty times ``objective / constraints^2``, a Farkas
        ray's multipliers divided by ``constraints`` (still b'y = 1) and a primal ray's objective times
        ``objective``. The errors, criteria and certified gap are those of the scaled problem (dimensionless); the
        message says which units they were measured in."""
        message = "; ".join(filter(None, [result.message, self.describe()]))
        if not self.rescales:
            return dataclasses.replace(result, message=message)
        c, a = self.objective, self.constraints
        certificate = result.certificate
        if certificate is not None:
            certificate = dataclasses.replace(certificate, multipliers=certificate.multipliers / a,
                                              objective=certificate.objective * c)
        log = tuple(dataclasses.replace(row, primal_objective=row.primal_objective * c,
                                        dual_objective=row.dual_objective * c) for row in result.log)
        return dataclasses.replace(
            result, primal_objective=result.primal_objective * c, dual_objective=result.dual_objective * c,
            dual_bound=None if result.dual_bound is None else result.dual_bound * c, dual=result.dual * c / a,
            min_eigenvalues=tuple(value * c for value in result.min_eigenvalues),
            penalty=None if result.penalty is None else result.penalty * c / a / a,
            certificate=certificate, log=log, message=message)

    def describe(self) -> str:
        """What the message says about the data's units (empty where nothing is worth saying)."""
        notes = []
        if self.objective_unit == 0.0:
            notes.append("the objective is zero: every feasible point is optimal")
        if self.constraint_unit == 0.0 and self.objective_unit == 0.0:
            notes.append("the data are all zero")
        if 0.0 < min(self.objective_unit or math.inf, self.constraint_unit or math.inf) < sys.float_info.min:
            notes.append("some of the data are subnormal numbers (below 2.2e-308): they carry few significant digits")
        if self.rescales:
            notes.append(f"solved in the data's units: C divided by 2^{_exponent(self.objective)}, A and b by "
                         f"2^{_exponent(self.constraints)} (the objective's largest coefficient was "
                         f"{self.objective_unit:.3g}, "
                         f"the constraints' unit {self.constraint_unit:.3g}); errors, criteria and the certified gap "
                         "are measured in those units")
        return "; ".join(notes)


def _exponent(power_of_two: float) -> int:
    return math.frexp(power_of_two)[1] - 1


def _unit_scale(unit: float) -> float:
    """The power of two that brings ``unit`` into [1, 2) where it lies outside ``UNIT_RANGE``, else 1 (also for 0
    and non-finite units, which no scaling mends)."""
    if not math.isfinite(unit) or unit == 0.0 or UNIT_RANGE[0] <= unit <= UNIT_RANGE[1]:
        return 1.0
    return math.ldexp(1.0, math.frexp(unit)[1] - 1)


def _block_scaling(problem: SDPProblem, k: int) -> np.ndarray | None:
    """d_j = sqrt(median / scale_j) for block k, where scale_j is the largest |coefficient| on the diagonal entry j
    over C_k and every A_ik (d_j = 1 where there is none), or None when the scales spread less than SCALE_SPREAD.
    The spread of all diagonal coefficients bounds that of the scales, so most blocks cost one pass over them (and
    no copy of them all: at n = 1e8 that would be 1.6 GB)."""
    rows, cols, vals = problem.C_coords[k]
    coeff = problem.A_coords[k]
    terms = [t for t in (problem.C_low_rank[k], problem.A_low_rank[k].term) if t is not None]
    term_diagonal = np.max([np.abs(t.U.multiply(t.U) @ np.abs(t.d)) for t in terms], axis=0) if terms else None
    ranges = [_diagonal_range(rows, cols, vals), _diagonal_range(coeff.row, coeff.col, coeff.val)]
    if term_diagonal is not None and np.any(term_diagonal > 0):
        ranges.append((term_diagonal[term_diagonal > 0].min(), term_diagonal.max()))
    largest, smallest = max(high for _, high in ranges), min(low for low, _ in ranges)
    if not largest > 0.0 or largest <= SCALE_SPREAD * smallest:  # no diagonal coefficient, or a narrow spread
        return None
    scales = np.zeros(problem.block_sizes[k])
    for r, c, v in ((rows, cols, vals), (coeff.row, coeff.col, coeff.val)):
        on = r == c
        np.maximum.at(scales, r[on], np.abs(v[on]))
    if term_diagonal is not None:
        np.maximum(scales, term_diagonal, out=scales)
    present = scales > 0.0
    if scales[present].max() <= SCALE_SPREAD * scales[present].min():
        return None
    d = np.ones(scales.size)
    d[present] = np.sqrt(np.median(scales[present]) / scales[present])
    return d


def _diagonal_range(rows, cols, vals) -> tuple[float, float]:
    """(smallest, largest) |val| over the diagonal coordinates (rows == cols; (inf, 0) where there are none)."""

    def extremes(s):
        on = np.abs(vals[s][rows[s] == cols[s]])
        return float(on.min(initial=np.inf)), float(on.max(initial=0.0))
    found = map_chunks(extremes, rows.size)
    return min((low for low, _ in found), default=np.inf), max((high for _, high in found), default=0.0)


@dataclass(frozen=True)
class DiagonalScaling:
    """The diagonal D_k of each PSD block (None: the block is not scaled)."""

    diagonals: tuple[np.ndarray | None, ...]

    @classmethod
    def of(cls, problem: SDPProblem) -> DiagonalScaling | None:
        """The scaling a problem needs, or None when no block's diagonal scales spread beyond SCALE_SPREAD."""
        diagonals = tuple(_block_scaling(problem, k) for k in range(problem.num_blocks))
        return None if all(d is None for d in diagonals) else cls(diagonals)

    def apply(self, problem: SDPProblem) -> SDPProblem:
        """The equivalent problem in Y_k = D_k^-1 X_k D_k^-1: C_k and A_ik become D_k C_k D_k and D_k A_ik D_k (a
        low-rank term's factor U becomes D_k U)."""
        C, A = [], []
        for (rows, cols, vals), coeff, term, d in zip(problem.C_coords, problem.A_coords, problem.C_low_rank,
                                                      self.diagonals):
            if d is None:
                C.append((rows, cols, vals) if term is None else (rows, cols, vals) + term)
                A.append(coeff)
                continue
            scaled = (rows, cols, vals * d[rows] * d[cols])
            C.append(scaled if term is None else scaled + _scaled_term(term, d))
            A.append(BlockCoefficients(coeff.con, coeff.row, coeff.col, coeff.val * d[coeff.row] * d[coeff.col]))
        terms = [(i, k, term if self.diagonals[k] is None else _scaled_term(term, self.diagonals[k]))
                 for i, k, term in problem.low_rank_constraint_terms()]
        return SDPProblem(problem.b, C, A, block_sizes=problem.block_sizes, c_lp=problem.c_lp, A_lp=problem.A_lp,
                          name=problem.name, A_low_rank=terms)

    def unscale_factors(self, factors) -> tuple[np.ndarray, ...]:
        """The original problem's factors R_k = D_k R'_k from the scaled problem's."""
        return tuple(R if d is None else d[:, None] * R for R, d in zip(factors, self.diagonals))


def _scaled_term(term: LowRank, d: np.ndarray) -> LowRank:
    """D U diag(w) U' D as a term: the factor's rows scaled by d."""
    return LowRank(term.U.multiply(d[:, None]), term.d)
