"""Warm starts: a previous :class:`~cvxpy_culorads.Result` as the start of the low-rank phases of a new solve.

A re-solve after a small change of the data (a parameter sweep, a branch of a branch and bound) starts next to its
answer. :meth:`WarmStart.of` takes from the previous result what still fits the new problem: its factors and ranks
where the variables are the same (the PSD blocks' orders, the number of nonnegative variables), and its multipliers
where the constraints are too (their number; constraint i is taken to be the same one in both). With a different
number of constraints (an edge added to a theta problem, entries to a completion problem) the multipliers are fitted
to the factors afresh where stationarity determines them (the least squares of ``certificates.stationary_multipliers``)
and start at zero elsewhere; with different variables nothing fits, and the solve starts cold and says why. The
penalty and the objective's scale go on from where the previous solve left them (``Result.penalty``,
``Result.objective_scale``): from the first, small penalty the first subproblems run away from good multipliers, and
from the unscaled objective the re-optimisation rounds of the previous solve are repeated. The previous factors are
the user's X = R R'; a solve in other coordinates (diagonal scaling X = D Y D, rows renumbered for the shards) maps
them in with :meth:`WarmStart.scaled` and :meth:`WarmStart.reordered`. The measurements behind these choices:
decision record "warm-start".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from cvxpy_culorads.certify.certificates import stationary_multipliers
from cvxpy_culorads.phases.state import SolverState
from cvxpy_culorads.result import Result
from cvxpy_culorads.solver.costs import RouteCosts

__all__ = ["WarmStart", "resumed_fields", "REFIT_ITERATIONS", "WARM_NOISE", "WARM_STEP_SHARE", "MAX_RESUMED_SCALE"]

REFIT_ITERATIONS = 200  # CG iterations of the multipliers' least squares when the constraints changed
# The start is the previous factor plus the cold start's random factor scaled to this share of its norm: an entry
# that is exactly zero (a column beyond a block's rank, a nonnegative variable at 0, a block with X_k = 0) has a zero
# gradient and would stay zero whatever the new problem asks (decision record "warm-start")
WARM_NOISE = 1e-3
# A warm start after a change of about 1 % of the data took a quarter of a cold start's low-rank steps or fewer on
# MaxCut, theta, completion and small mixed problems: the route's estimate of the low-rank phases is scaled by it
# (decision record "warm-start")
WARM_STEP_SHARE = 0.25
# The objective's scale goes on from the previous solve's up to this (three re-optimisation rounds of the default
# reopt_scale 5, where MaxCut's cold solves end), with the penalty relative to it kept: along a chain of warm starts
# each solve's rounds multiply it again, and b of a small mixed problem moved 1 % per step reached 1e11 and a
# numerical error by the seventh step (decision record "warm-start")
MAX_RESUMED_SCALE = 125.0


@dataclass(frozen=True)
class WarmStart:
    """The start a previous result gives a problem with the same variables (:meth:`of`): the factors R_k of its PSD
    blocks (n_k x r_k, host arrays), its nonnegative variables, its multipliers where the constraints are the same
    ones (else None), and its objective scale, at most ``MAX_RESUMED_SCALE``, with its penalty relative to it (None
    and 1 where it has none)."""

    factors: tuple[np.ndarray, ...]
    x_lp: np.ndarray
    dual: np.ndarray | None
    penalty: float | None
    objective_scale: float
    kept: str  # what was kept, for the plan's reason

    @classmethod
    def of(cls, problem, previous) -> tuple[WarmStart | None, str]:
        """(the warm start ``previous`` gives ``problem``, ""), or (None, why it gives none): its variables differ or
        its point is not finite. ``previous`` None gives (None, ""); anything but a :class:`Result` is a ValueError."""
        if previous is None:
            return None, ""
        if not isinstance(previous, Result):
            raise ValueError(f"warm_start must be a Result of an earlier solve or None, got {type(previous).__name__}")
        orders = tuple(R.shape[0] for R in previous.factors)
        if orders != tuple(problem.block_sizes) or previous.x_lp.size != problem.n_lp:
            return None, (f"warm start not used: the previous result has PSD blocks of orders {orders} and "
                          f"{previous.x_lp.size} nonnegative variables, the problem {tuple(problem.block_sizes)} and "
                          f"{problem.n_lp}; started cold")
        if not (all(np.isfinite(R).all() for R in previous.factors) and np.isfinite(previous.x_lp).all()):
            return None, "warm start not used: the previous point is not finite; started cold"
        if previous.dual.size != problem.m:
            refit = f"its {previous.dual.size} multipliers do not fit the {problem.m} constraints"
        elif not np.isfinite(previous.dual).all():
            refit = "its multipliers are not finite"
        else:
            refit = ""
        kept = (f"warm start from a previous result: its factors (ranks {tuple(R.shape[1] for R in previous.factors)})"
                + (f"; {refit}: multipliers fitted to the factors" if refit else ", multipliers and penalty"))
        dual = None if refit else np.asarray(previous.dual, dtype=np.float64)
        resumable = (previous.penalty is not None and 0.0 < previous.penalty < math.inf
                     and 0.0 < previous.objective_scale < math.inf)
        scale = min(previous.objective_scale, MAX_RESUMED_SCALE) if resumable else 1.0
        penalty = previous.penalty * (scale / previous.objective_scale) if resumable else None
        return cls(tuple(np.asarray(R, dtype=np.float64) for R in previous.factors),
                   np.asarray(previous.x_lp, dtype=np.float64), dual, penalty, scale, kept), ""

    @property
    def ranks(self) -> tuple[int, ...]:
        """The rank of each PSD block's factor (at least one: an empty factor starts as one zero column)."""
        return tuple(max(R.shape[1], 1) for R in self.factors)

    def scaled(self, diagonals) -> WarmStart:
        """The start of the problem in Y_k = D_k^-1 X_k D_k^-1 (``scaling.DiagonalScaling``): R_k becomes
        D_k^-1 R_k; the multipliers are the same."""
        return replace(self, factors=tuple(R if d is None else R / d[:, None]
                                           for R, d in zip(self.factors, diagonals)))

    def reordered(self, order: np.ndarray) -> WarmStart:
        """The start of the one-block problem whose row p is row ``order[p]`` of this one's
        (``distributed.RowOrder``)."""
        return replace(self, factors=(self.factors[0][order],))

    @staticmethod
    def route_costs(cold: RouteCosts) -> RouteCosts:
        """The estimated costs of the two routes from a warm start, from those of a cold one (``cold``): the
        low-rank phases take ``WARM_STEP_SHARE`` of their steps; the interior-point method starts from its own
        point all the same."""
        return replace(cold, low_rank=WARM_STEP_SHARE * cold.low_rank)

    def state(self, op, ranks, row_scale: float, default_penalty: float, seed: int) -> SolverState:
        """The solver state it starts from on the operator ``op``: each block's factor cut to ``ranks`` columns (the
        plan's start, narrowed where the device's memory asks), plus ``WARM_NOISE`` of the cold start drawn from
        ``seed`` (the whole of it where the factors are zero); the multipliers where they were kept (in the operator's
        rows, scaled by ``row_scale``), else fitted to the factors where stationarity determines them, else zero; the
        previous penalty and objective scale where the result had them, else ``default_penalty`` and the objective
        unscaled."""
        layout, xp = op.layout, op.backend.xp
        width = max(list(ranks) + [1])
        R = np.zeros((layout.n_rows, width))
        for offset, n, r, factor in zip(layout.offsets, layout.sizes, ranks, self.factors):
            columns = min(r, factor.shape[1])
            R[offset:offset + n, :columns] = factor[:, :columns]
        R[layout.lp_offset:, 0] = np.sqrt(np.maximum(self.x_lp, 0.0))
        R, noise = op.split(R), op.initial_factor(width, ranks, seed)
        size = op.kernels.norm(R)
        R += (WARM_NOISE * size / op.kernels.norm(noise) if size > 0.0 else 1.0) * noise
        scale = self.objective_scale
        lam = xp.zeros(op.b.size)
        if self.dual is not None:
            lam = xp.asarray(self.dual * (scale * row_scale))
        elif op.b.size <= sum(n * r for n, r in zip(layout.sizes, ranks)) + layout.n_lp:
            # stationarity determines the multipliers only where they are no more than the factor's entries; with
            # more, the least squares leaves the slack off the factor's range to chance, worse than zero multipliers
            lam = scale * stationary_multipliers(op, R, lam, max_iter=REFIT_ITERATIONS)
        rho = default_penalty if self.penalty is None else self.penalty * row_scale ** 2
        return SolverState(R=R, lam=lam, Avals=None, objective=0.0, rho=rho, c_scale=scale, ranks=list(ranks))


def resumed_fields(state: SolverState, row_scale: float) -> dict:
    """The fields of the :class:`Result` that a warm start goes on from: the penalty of ``state`` for the constraints
    as given (the operator's rows are scaled by ``row_scale``) and its objective scale."""
    return {"penalty": state.rho / row_scale ** 2, "objective_scale": state.c_scale}
