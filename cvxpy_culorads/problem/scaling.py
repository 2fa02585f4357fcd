"""Diagonal scaling of badly scaled PSD blocks: X_k = D_k Y_k D_k.

A block whose diagonal entries carry objective and constraint coefficients of wildly different sizes (min 1e8 X_00
+ 1e-8 X_11 s.t. X_01 = 1: optimum 2 at X_00 = 1e-8, X_11 = 1e8) defeats both the low-rank phases and the
interior-point finish: the optimal X spans sixteen orders of magnitude. Substituting X_k = D_k Y_k D_k with
d_j = sqrt(median scale / scale_j), where scale_j is the largest |coefficient| on the diagonal entry j in C_k and
the A_ik, gives an equivalent problem (same b, same multipliers, same optimal value) whose diagonal coefficients
are of one size; its factor maps back as R_k = D_k R'_k. Blocks whose scales spread less than ``SCALE_SPREAD`` are
left alone, so well-scaled problems (all of Gset and SDPLIB but the ones the spread flags) solve unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.hostpasses import map_chunks
from cvxpy_culorads.problem.lowrank import LowRank
from cvxpy_culorads.problem.sdp import BlockCoefficients, SDPProblem

__all__ = ["DiagonalScaling", "SCALE_SPREAD"]

SCALE_SPREAD = 1e6  # largest over smallest nonzero diagonal scale of a block above which it is rescaled


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
