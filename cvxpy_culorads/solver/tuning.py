"""The solver's tuning: the budgets and schedules of the strategies, the measurement's and the limits' margins, and
the interior-point method's iteration budget, as one frozen object handed to the plan.

They are not settings (a user has no reason to change them, and their values were measured together: each field
names the decision record that chose it where one did), and not module globals: a test or a study that needs
another value builds a :class:`Tuning` and hands it to :func:`cvxpy_culorads.solve` (``tuning=``), which hands it
to :func:`~cvxpy_culorads.solver.plan.plan`; every part of the solve reads it from there.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cvxpy_culorads.phases import interior_point, riemannian

__all__ = ["DEFAULT_TUNING", "Tuning"]


@dataclass(frozen=True)
class Tuning:
    """The solver's tuning constants (defaults: :data:`DEFAULT_TUNING`)."""

    reopt_rounds: tuple[int, int, int] = (0, 1, 8)
    """Re-optimisation rounds of the ALM/ADMM strategy at ``lorads.reopt_level`` 0, 1 and 2."""
    reopt_alm_outer: int = 3
    """ALM outer iterations of one re-optimisation round."""
    admm_cg_tolerance: tuple[float, float] = (1e-2, 1e-4)
    """Phase II's CG tolerance, times the last sweep's primal infeasibility (capped at 1e-8), in the first run and in
    the re-optimisation rounds (decision record "completion-phase-two")."""
    max_escapes: int = 5
    """Rank increases driven by a negative eigenvalue of the dual slack, per solve."""
    riemannian_first_target: float = 10.0
    """The Riemannian phase's first gradient target, times ``tol``: on MaxCut the certified gap runs well below the
    gradient measure near the optimum, and a loose first run finds a low-rank saddle early."""
    riemannian_target_factor: float = 0.2
    """Each further Riemannian run's target, times the last one's."""
    riemannian_close: float = 2.0
    """A run whose point missed ``tol`` by at most this factor is followed by one whose target is only
    ``riemannian_close_factor`` tighter (decision record "solver-riemannian-schedule")."""
    riemannian_close_factor: float = 0.5
    trace_sphere_tightening: float = 0.1
    """Each trace-sphere run's exit tolerance, times the last one's."""
    trace_sphere_smallest_tol: float = 1e-12
    """The trace-sphere runs' tightest exit tolerance."""
    stationary_min_iterations: int = 50
    """Least-squares (CG) iterations for the stationary multipliers: as many as the phases have taken steps, within
    these bounds, so that it never dominates a solve (decision record "stationary-multipliers")."""
    stationary_max_iterations: int = 500
    runaway_objective: float = 1e12
    """|<C, X>| beyond this times (1 + ||C||_1)(1 + ||b||_1) / ||A||_inf means the iterates ran away: far beyond any
    solution the data describe, far from overflow (an unbounded ALM run grows |<C, X>| by up to TAU_MAX^2 a step)."""
    final_measure_share: float = 0.1
    """The final measurement after a time limit may use this share of the limit plus ``final_measure_seconds``:
    the promise is at most 10 % + 1 s past the limit, and the result still has to be assembled."""
    final_measure_seconds: float = 0.5
    handover_factor: float = 1.0
    """Once the low-rank phases have run this many times the interior-point method's estimated time, it takes over:
    at 1, as in the ski-rental problem, the time never exceeds twice that of the better route (given the
    estimate)."""
    interior_point_max_iterations: int = interior_point.MAX_ITERATIONS
    """Iterations of one interior-point run."""
    rounded_halo_target: float = riemannian.ROUNDED_HALO_TARGET
    """On split rows with ``halo_precision="single"``, a Riemannian run whose gradient target is at least this large
    rounds the halo rows (decision record "halo-precision")."""

    def replace(self, **changes) -> Tuning:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)


DEFAULT_TUNING = Tuning()
