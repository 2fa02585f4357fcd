"""The driver: one loop over the phases, with rank set-up, re-optimisation, limits and the log.

``solve`` compresses the problem onto the chosen backend, starts from a random factor of
logarithmic rank, runs phase I (ALM, ``alm.py``) until one of its exit tests (``phase1_tol``) passes,
switches to phase II (ADMM, ``admm.py``), then measures the point from scratch: rows whose norm the
constraints fix are projected onto them (``bounds.FixedDiagonals``), the residuals are taken per
constraint, the smallest eigenvalue of C - A*(lambda) is found (``certificates.py``), also for the
multipliers that best satisfy stationarity, and turned into a certified dual bound where the data bound
the trace (``bounds.TraceBounds``). The ``criterion`` setting names the measures that must be within
``tol`` (:func:`_criteria`). While they are not and ``reopt_level`` allows, it re-optimises ("polishes"):
the objective is scaled up (so the penalty weighs relatively less and optimality gains weight), the
multipliers with it, and a short ALM run and an ADMM run follow. When polishing stops paying and the dual
slack still has a clearly negative eigenvalue, the point is a low-rank saddle: the rank grows along that
eigenvector and both phases run again. Problems whose constraints all fix diagonal entries (MaxCut) run the
Riemannian phase (``riemannian.py``) instead of phases I and II unless ``riemannian=False``, with the same
measurements and escapes between its runs. Problems small enough for a dense interior-point method
(``interior_point.py``) start with it when it is estimated cheaper (``costs.py``, ``Settings.route``), and go to
it when the low-rank phases have used ``interior_point_patience`` inner iterations or its estimated time, or end
without meeting ``tol``: that is where low-rank methods stall (degenerate or high-rank optima); an
interior-point start that misses ``tol`` hands over to the low-rank phases. The best point seen is returned
with an honest status: iterates that run away end the solve (UNBOUNDED_INACCURATE when they follow a primal ray),
multipliers that run away along a Farkas direction make it INFEASIBLE_INACCURATE, Ctrl-C makes it INTERRUPTED,
and the time limit holds through the final measurement. Phases are generators; this module alone owns time and
iteration limits and the iteration log.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from cvxpy_culorads.backends.backend import gpu_available, requested_device, select_backend
from cvxpy_culorads.backends.kernels import check_capabilities, kernels_for
from cvxpy_culorads.backends.memory import fitting_rank, interior_point_work_bytes, widening_fits
from cvxpy_culorads.certify.bounds import DualBound, FixedDiagonals, FixedTrace, TraceBounds
from cvxpy_culorads.certify.certificates import (
    DENSE_LIMIT,
    Eigenpair,
    dual_infeasibility,
    farkas_violations,
    is_primal_ray,
    stationary_multipliers,
)
from cvxpy_culorads.certify.measures import ProblemNorms, primal_infeasibility, relative_gap, worst
from cvxpy_culorads.distributed.sharding import RowOrder, ShardedBlockOperator, ShardedSpheresOperator, sharded_backend
from cvxpy_culorads.operators.compressed import BlockLayout, CompressedOperator
from cvxpy_culorads.phases.admm import ADMMPhase
from cvxpy_culorads.phases.alm import LBFGS, ALMPhase
from cvxpy_culorads.phases.interior_point import InteriorPointPhase
from cvxpy_culorads.phases.riemannian import RiemannianPhase, Spheres
from cvxpy_culorads.phases.state import RANK_FACTOR, SPHERES_RANK_FACTOR, PhaseOutcome, SolverState, block_ranks
from cvxpy_culorads.problem.scaling import DiagonalScaling
from cvxpy_culorads.result import Errors, Result, Status
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.costs import DeviceCosts, RouteCosts

__all__ = ["solve"]

REOPT_ROUNDS = {0: 0, 1: 1, 2: 8}
REOPT_ALM_OUTER = 3
MAX_ESCAPES = 5  # rank increases driven by a negative eigenvalue of the dual slack
# The Riemannian phase's first gradient target is this times tol (on MaxCut the certified gap ran 5-25x below the
# gradient measure near the optimum, and a loose first run finds a low-rank saddle early); a further run's target is
# the last one's times the factor
RIEMANNIAN_FIRST_TARGET, RIEMANNIAN_TARGET_FACTOR = 10.0, 0.2
# a run whose point missed tol by at most RIEMANNIAN_CLOSE times is followed by one with a target only this factor
# tighter (G67 on the H100, 37 columns: the first point missed by 7 %, and with a 0.2x run the solve took 1137 steps,
# with 0.5x 760)
RIEMANNIAN_CLOSE, RIEMANNIAN_CLOSE_FACTOR = 2.0, 0.5
# phase I on the trace sphere: each run's exit tolerance this factor of the last one's, down to the smallest
TRACE_SPHERE_TIGHTENING, TRACE_SPHERE_SMALLEST_TOL = 0.1, 1e-12
# The least squares for the stationary multipliers (``certificates.stationary_multipliers``, CG whose iteration costs
# about two phase I steps) may take as many iterations as the phases have taken steps, within these bounds, so that it
# never dominates a solve (500 iterations after 52 steps were 1.3 s of a 1.8 s solve, H100)
STATIONARY_MIN_ITERATIONS, STATIONARY_MAX_ITERATIONS = 50, 500
MEMORY_BOUND_MESSAGE = "rank increase skipped: the wider factor would not fit in device memory"
OUT_OF_MEMORY_MESSAGE = "stopped: the device ran out of memory; the best point measured before is returned"
INTERIOR_POINT_MEMORY_MESSAGE = "interior-point method skipped: its dense work arrays would not fit in device memory"
# |<C, X>| beyond this times (1 + ||C||_1)(1 + ||b||_1) / max(||A||_inf, 1e-300) means the iterates ran away: far
# beyond the size of any solution the data describe, yet far from overflow (an unbounded ALM run grows |<C, X>|
# by up to TAU_MAX^2 per step)
RUNAWAY_OBJECTIVE = 1e12
# one thread beside the solve's own, for host passes that overlap the device set-up (not the pool of ``hostpasses``,
# whose chunks they wait for)
_BESIDE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="culorads-beside")
# the final measurement after a time limit may use this share of the limit, plus FINAL_MEASURE_SECONDS: the
# promise is an overrun of at most 10 % + 1 s, and the result still has to be assembled
FINAL_MEASURE_SHARE, FINAL_MEASURE_SECONDS = 0.1, 0.5
RENUMBERING_LEFTOVER = 1e-3  # seconds of time limit a split solve keeps when renumbering its rows used up the rest
INTERRUPT_MEASURE_SECONDS = 1.0  # what measuring the point costs after Ctrl-C when none was measured yet
# the multipliers' direction is evidence of infeasibility when every feasible point would have to be this many
# times larger than the largest the method reached
INFEASIBLE_SIZE_FACTOR = 1e6


class _Handover(Exception):
    """The low-rank phases used up ``interior_point_patience``: the interior-point method takes over."""


class _Diverged(Exception):
    """The iterates became non-finite or ran away (``RUNAWAY_OBJECTIVE``)."""


class _Stop(Exception):
    """A limit was reached; carries the status to report if the point is not optimal."""

    def __init__(self, status: Status):
        super().__init__(status.value)
        self.status = status


@dataclass
class _Evaluation:
    """The measures of one point, taken from scratch on the point itself: ``errors`` (all of them), the
    ``criteria`` that decide its status (a subset, see :func:`_criteria`), the certified dual bound, and the
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
    def unmeasurable(cls, settings: Settings) -> _Evaluation:
        """The evaluation of a point that is not finite: every measure infinitely bad."""
        errors = Errors.unmeasured()
        return cls(math.nan, math.nan, errors, [], DualBound(None, "none: the point is not finite"), None,
                   _criteria(settings.criterion, errors, None), [])

    @property
    def worst(self) -> float:
        return worst(self.criteria.values())

    @property
    def slack_estimate(self) -> float:
        """The dual slack's negative Ritz values in the criteria's dual measure: what polishing is judged by (the
        certificate's lower estimates also carry the Ritz residuals, large when the eigensolver ran out of cycles)."""
        return sum(max(0.0, -pair.value) * weight for pair, weight in zip(self.eigenpairs, self.dual_weights))

    def stalled_since(self, previous: _Evaluation | None) -> bool:
        """Whether more iterations at this rank stopped paying: the slack's negative Ritz values were not halved
        since ``previous`` (False without one)."""
        return previous is not None and self.slack_estimate > 0.5 * previous.slack_estimate

    @property
    def dual_measure(self) -> float:
        """The criteria's measure of the dual side (certified gap, slack violation or DIMACS dual error)."""
        return self.criteria[next(name for name in DUAL_MEASURES if name in self.criteria)]


DUAL_MEASURES = ("certified_gap", "dual_slack_violation", "dual_infeasibility")


def _criteria(criterion: str, errors: Errors, certified_gap: float | None) -> dict:
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


class _Run:
    """The state of one call of :func:`solve`: limits, counters and the log."""

    def __init__(self, problem, settings: Settings):
        self.problem, self.settings = problem, settings
        self.start = time.perf_counter()
        self.deadline = self.start + settings.time_limit
        # measuring a point may run on past the deadline by the grace the time limit's promise leaves
        self.measure_deadline = self.deadline + FINAL_MEASURE_SHARE * settings.time_limit + FINAL_MEASURE_SECONDS
        layout = BlockLayout.of(problem)
        # on the host: whether the Riemannian phase runs decides the default initial rank, before the backend
        fixed = FixedDiagonals.of(problem, layout.offsets, np)
        on_spheres = settings.riemannian and Spheres.cover(problem, layout, fixed)
        sharded = settings.device_count > 1
        # a constraint a tr X = b is kept exact by phase I, which then runs to the end (``alm.py``); not on split rows,
        # whose kernel set has no sphere kernels (the plain ALM treats it as any other constraint)
        self.trace_sphere = (FixedTrace.of(problem) if settings.riemannian and not on_spheres and not sharded
                             else None)
        rank_factor = settings.rank_factor
        if rank_factor is None:
            # on the trace sphere too the wider start pays: theta H(3, 10) took 10550 steps from 14 columns (escapes
            # to 21) and 188 from 28 (CPU)
            rank_factor = SPHERES_RANK_FACTOR if on_spheres or self.trace_sphere is not None else RANK_FACTOR
        initial, self.max_ranks = block_ranks(layout, settings.rank, rank_factor)
        # the cost models were calibrated from LoRADS's start: on the spheres the wider one takes fewer steps
        cost_ranks = block_ranks(layout, settings.rank, settings.rank_factor or RANK_FACTOR)[0]
        self.devices = (DeviceCosts.of(problem, cost_ranks)
                        if requested_device(settings.device) == "auto" and not sharded else None)
        self.backend = (sharded_backend(requested_device(settings.device), settings.gpu_ids) if sharded
                        else select_backend(settings.device, gpu_pays=lambda: self.devices.gpu_pays,
                                            gpu_ids=settings.gpu_ids))
        check_capabilities(kernels_for(self.backend), settings, self.backend.describe())
        # the host's passes over the data that the operator does not need, beside its build (1.3 s at n = 1e8)
        host_passes = _BESIDE.submit(lambda: (ProblemNorms.of(problem), TraceBounds.of(problem, settings.trace_bound)))
        # blocks an earlier solve of the process left cached would count to this one's peak (and are free anyway)
        self.backend.release_cached_blocks()
        # a default start wider than LoRADS's is narrowed, down to that, to what fits in device memory
        widest = max(initial + [1])
        narrowest = widest if settings.rank is not None else min(widest, max(cost_ranks + [1]))
        fitting = fitting_rank(problem, layout, widest, narrowest, self.backend)
        self.rank_capped = fitting < widest
        initial = [min(r, fitting) for r in initial]
        if sharded:
            split = ShardedSpheresOperator if on_spheres else ShardedBlockOperator
            self.op = split(problem, self.backend, settings.l2_rescaling, layout, settings.halo_precision)
        else:
            self.op = CompressedOperator(problem, self.backend, rescale=settings.l2_rescaling, layout=layout)
        if sharded and layout.n_rows <= DENSE_LIMIT:
            raise ValueError(f"devices > 1 splits blocks of order above {DENSE_LIMIT} (the eigenvalue problems of "
                             f"smaller ones are dense, on one device); this one has order {layout.n_rows}: solve "
                             "it on one")
        self.backend.synchronize()
        self.setup_time = self.elapsed()
        # The build's sort buffers are cached by the pool in sizes the phases never ask for: hand them back, or
        # at n = 1e8 they and the factor arrays would not fit together. The pool only grows between this point
        # and the end, so its size here and at the end bound the whole solve (``Result.peak_device_bytes``).
        self.peak_device_bytes = self.backend.pool_bytes()
        self.backend.release_cached_blocks()
        self.norms, self.trace_bounds = host_passes.result()
        self.runaway_objective = (RUNAWAY_OBJECTIVE * (1.0 + self.norms.C_1) * (1.0 + self.norms.b_1)
                                  / max(self.norms.A_inf, 1e-300))
        # of the measured points: the largest tr X + sum x, and the (unscaled) multipliers of largest norm, whose
        # direction may be a Farkas ray (infeasibility evidence)
        self.largest_size, self.largest_multipliers, self._largest_norm = 0.0, None, 0.0
        # a problem on a product of spheres takes the Riemannian phase
        self.spheres = Spheres.of(problem, layout, fixed, self.op) if on_spheres else None
        # the paper's rule measures the iterate as it is; the certified one returns it projected onto fixed rows (by
        # the spheres where there are)
        # (split rows without spheres are measured as they are: the projection is written for whole arrays)
        self.projects_rows = fixed is not None and settings.criterion == "certified"
        self.fixed_diagonals = (fixed.on(self.backend.xp) if self.projects_rows and self.spheres is None
                                and not sharded else None)
        self.inner_iterations = 0
        self.iterations = {"alm": 0, "admm": 0, "riemannian": 0, "interior_point": 0}  # inner iterations per stage
        self.log: list | None = [] if settings.keep_log else None
        self._last_print = -math.inf
        self._eigenvectors = None  # of the dual slack at the last evaluation, the warm start of the next
        self.stage_times = {"alm": 0.0, "admm": 0.0, "riemannian": 0.0, "interior_point": 0.0, "certificates": 0.0}
        self.initial_ranks = initial
        self.state = self.initial_state()
        self.best = None  # the best _Snapshot so far
        self.interior_point_bytes = (interior_point_work_bytes(problem) if settings.interior_point and not sharded
                                     else None)
        # which route starts, by estimated cost (only where the interior-point method may run at all)
        self.routes = (RouteCosts.of(problem, cost_ranks, self.backend.is_gpu)
                       if self.interior_point_bytes is not None else None)
        self.in_interior_point = False

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def device(self) -> str:
        """The device, and why where ``device='auto'`` had a GPU to choose (``Result.device``)."""
        chosen = self.devices is not None and gpu_available()
        return self.backend.describe() + (f"; {self.devices.describe()}" if chosen else "")

    def initial_state(self) -> SolverState:
        """The low-rank phases' start: a random factor of the initial ranks, zero multipliers."""
        layout, xp, ranks = self.op.layout, self.backend.xp, self.initial_ranks
        R = self.op.initial_factor(max(ranks + [1]), ranks, self.settings.seed)
        rho = 1.0 / math.sqrt(sum(layout.sizes) or layout.n_lp)
        return SolverState(R=R, lam=xp.zeros(self.problem.m), Avals=None, objective=0.0, rho=rho, c_scale=1.0,
                           ranks=list(ranks))

    # ------------------------------------------------------------------ running phases
    def run_phase(self, phase, stage: str) -> None:
        """Drive a phase's generator, enforcing limits and printing the log; its time counts to ``stage``. The
        generator is closed on the way out, so its clean-up (``finally``) runs before the driver goes on."""
        with self.timed(stage), contextlib.closing(phase.run()) as rows:
            low_rank = stage != "interior_point"
            for progress in rows:
                self.inner_iterations += 1
                self.iterations[stage] += 1
                self.record(progress)
                if not abs(progress.primal_objective) <= self.runaway_objective:  # NaN too
                    raise _Diverged()
                if self.elapsed() > self.settings.time_limit:
                    raise _Stop(Status.TIME_LIMIT)
                if self.inner_iterations >= self.settings.max_iter:
                    raise _Stop(Status.ITERATION_LIMIT)
                if low_rank and self.handover_due() and (self.in_interior_point or self.interior_point_available()):
                    raise _Handover()

    def handover_due(self) -> bool:
        """Whether the low-rank phases have used their share on a problem the interior-point method can take:
        ``interior_point_patience`` inner iterations or, before the method has run, ``costs.HANDOVER_FACTOR`` times
        its estimated time. After it has run (it started and did not meet tol) the share ends the solve."""
        if self.inner_iterations >= self.settings.interior_point_patience:
            return True
        return (self.routes is not None and not self.in_interior_point
                and self.elapsed() - self.setup_time >= self.routes.handover_seconds)

    def interior_point_available(self) -> bool:
        """Whether the interior-point method may take over now: the problem is small enough for it and its work
        arrays fit in the free device memory (a refusal is final, and the log says so)."""
        if self.interior_point_bytes is None or self.in_interior_point:
            return False
        free = self.backend.free_memory()
        if free is not None and self.interior_point_bytes > free:
            self.say(INTERIOR_POINT_MEMORY_MESSAGE)
            self.interior_point_bytes = None
            return False
        return True

    def note_size(self, R, lam) -> None:
        """Remember the largest size of a point and the multipliers of largest norm (see ``__init__``)."""
        self.largest_size = max(self.largest_size, self.op.kernels.inner(R, R))
        norm = float(self.backend.xp.linalg.norm(lam))
        if norm > self._largest_norm:
            self.largest_multipliers, self._largest_norm = lam.copy(), norm

    def keep(self, snapshot: _Snapshot) -> None:
        """Remember ``snapshot`` if it is better than the best point so far."""
        self.best = _better(self.best, snapshot)

    @contextlib.contextmanager
    def timed(self, stage: str):
        """Add the wall time of the block to ``stage_times[stage]`` (the device is synchronised at the end, so
        queued GPU work counts where it was launched)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.backend.synchronize()
            self.stage_times[stage] += time.perf_counter() - start

    def record(self, progress, force: bool = False) -> None:
        if self.log is not None:
            self.log.append(progress)
        if not self.settings.verbose:
            return
        now = self.elapsed()
        if force or now - self._last_print >= self.settings.log_every:
            self._last_print = now
            print(f"{progress.phase:>5} {progress.iteration:7d} {progress.primal_objective:+.8e} "
                  f"{progress.dual_objective:+.8e} {progress.primal_infeasibility:9.2e} {progress.gap:9.2e} "
                  f"{progress.rho:9.2e} {max(progress.ranks, default=1):5d} {now:9.2f}", file=sys.stderr)

    def say(self, text: str) -> None:
        if self.settings.verbose:
            print(text, file=sys.stderr)

    # ------------------------------------------------------------------ measuring a point
    def primal_measures(self, R) -> tuple[float, float, float]:
        """(||A(X) - b||_2, max_i |A(X)_i - b_i| / (1 + |b_i|), <C, X>) of the factor R, from scratch."""
        op, xp = self.op, self.backend.xp
        residual = op.constraints(op.sample(R)) - op.b  # of the rescaled rows: b / row_scale
        violation = float(xp.max(xp.abs(residual) / (1.0 / op.row_scale + xp.abs(op.b)))) if residual.size else 0.0
        return op.residual_norm(residual), violation, float(op.objective(R))

    def dual_weights(self, primal: float, dual: float) -> list[float]:
        """Per PSD block, what one unit of -lambda_min(S_k) adds to the criteria's dual measure."""
        if self.settings.criterion == "dimacs":
            return [1.0 / (1.0 + self.norms.C_1)] * len(self.op.layout.sizes)
        scale = 1.0 + abs(primal) + abs(dual)
        return [1.0 / (1.0 + self.norms.C_inf) if weight is None else weight / scale
                for weight in self.trace_bounds.weights(dual)]

    def failing_eigenvalues(self, primal: float, dual: float, weights: list[float]) -> list[float]:
        """Per PSD block, the value below which lambda_min fails the test on its own: all that tol leaves the dual
        measure (less the gap where the certified gap contains it) spent on this block. Its eigensolver may stop
        once its Ritz value, an upper estimate, is below it (``certificates.smallest_eigenpairs``)."""
        tol = self.settings.tol
        bounded = all(weight is not None for weight in self.trace_bounds.weights(dual))
        budget = tol - relative_gap(primal, dual) if self.settings.criterion == "certified" and bounded else tol
        return [-budget / weight if weight > 0 else -math.inf for weight in weights]

    def evaluate(self, lam, R, primal_measures) -> _Evaluation:
        """The measures of the factor ``R`` (its ``primal_measures``) and the (unscaled) multipliers ``lam``; the
        slack's eigenvalue problems of small blocks are first deflated against R's range, which holds its null space
        near an optimum (``certificates.smallest_eigenpairs``)."""
        op, norms = self.op, self.norms
        residual, worst_violation, primal = primal_measures
        dual = float(op.b @ lam)
        weights = self.dual_weights(primal, dual)
        # lambda_min is needed to a tenth of what the dual measure resolves; its Ritz residual enters the bound
        # (a block of zero weight, e.g. fixed to trace 0, needs no accuracy at all)
        accuracy = [0.1 * self.settings.tol / weight if weight > 0 else math.inf for weight in weights]
        dinf, pairs, lp_slacks = dual_infeasibility(op, lam, norms, accuracy, seed=self.settings.seed,
                                                    guesses=self._eigenvectors, deadline=self.measure_deadline,
                                                    factor=R, failing=self.failing_eigenvalues(primal, dual, weights))
        self._eigenvectors = [pair.vector for pair in pairs]  # the next evaluation's slack is a nearby one
        thetas = [max(0.0, -pair.lower) for pair in pairs]
        sigmas = np.maximum(-lp_slacks, 0.0)
        bound = self.trace_bounds.dual_bound(dual, thetas, sigmas)
        certified_gap = None if bound.value is None else relative_gap(primal, bound.value)
        errors = Errors(primal_infeasibility=primal_infeasibility(residual, norms), dual_infeasibility=dinf,
                        gap=relative_gap(primal, dual), primal_residual=residual / (1.0 + norms.b_2),
                        max_violation=worst_violation,
                        dual_slack_violation=(sum(thetas) + float(sigmas.sum())) / (1.0 + norms.C_inf))
        criteria = _criteria(self.settings.criterion, errors, certified_gap)
        return _Evaluation(primal, dual, errors, pairs, bound, certified_gap, criteria, weights)


def solve(problem, settings: Settings | None = None, **options) -> Result:
    """Solve ``problem`` (an :class:`~cvxpy_culorads.SDPProblem`) with LoRADS.

    **Arguments:**

    - ``problem``: the SDP.
    - ``settings``: a :class:`~cvxpy_culorads.Settings`; keyword ``options`` override its fields
      (unknown names raise ``ValueError``).

    **Returns:** a :class:`~cvxpy_culorads.Result`; its status is OPTIMAL only when the criteria measured on the
    returned factors and multipliers are all within ``tol``. A badly scaled block is solved as X = D Y D
    (``scaling.py``); the factors returned are the original problem's.
    """
    settings = Settings.from_options(settings, **options)
    if settings.device_count == 1:
        return _solve_scaled(problem, settings)
    start = time.perf_counter()
    order = RowOrder.of(problem, settings)
    renumbered = problem if order is None else order.apply(problem)
    spent = time.perf_counter() - start  # part of the solve: the time limit and the times reported include it
    result = _solve_scaled(renumbered, dataclasses.replace(
        settings, time_limit=max(settings.time_limit - spent, RENUMBERING_LEFTOVER)))
    result = dataclasses.replace(result, solve_time=result.solve_time + spent, setup_time=result.setup_time + spent)
    if order is None:
        return result
    return dataclasses.replace(result, factors=order.restore(result.factors),
                               message="; ".join(filter(None, [result.message, order.describe()])))


def _solve_scaled(problem, settings: Settings) -> Result:
    """:func:`solve` of a problem in the order its shards take."""
    scaling = DiagonalScaling.of(problem)
    if scaling is None:
        return _solve(_Run(problem, settings))
    result = _solve(_Run(scaling.apply(problem), settings))
    rescaled = sum(d is not None for d in scaling.diagonals)
    return dataclasses.replace(result, factors=scaling.unscale_factors(result.factors),
                               message=f"{result.message}; {rescaled} badly scaled block(s) solved as X = D Y D "
                                       "(min_eigenvalues are those of D S D)")


def _solve(run: _Run) -> Result:
    settings, problem = run.settings, run.problem
    capped = " (narrowed: the default would not fit in device memory)" if run.rank_capped else ""
    run.say(f"cvxpy_culorads: {problem!r} on {run.device()}; initial ranks {run.state.ranks}{capped}; "
            f"{_route(run)}")
    run.say(f"{'phase':>5} {'iter':>7} {'primal obj':>15} {'dual obj':>15} {'pinf':>9} {'gap':>9} "
            f"{'rho':>9} {'rank':>5} {'time':>9}")
    stop_status, evidence = None, ""
    # The low-rank phases make many BLAS-1 calls on arrays of 10^4..10^6 entries: multithreaded OpenBLAS
    # gains nothing there and, with the cores busy, turns a 12 us dot into a millisecond one. The
    # interior-point method's dense factorisations do gain from threads.
    single_threaded = (_blas_threads().limit(limits=1, user_api="blas") if not run.backend.is_gpu
                       else contextlib.nullcontext())
    try:
        if _interior_point_first(run) and run.interior_point_available():
            _interior_point(run)
            if run.best.evaluation.worst > settings.tol:
                run.say("the interior-point method did not meet tol: the low-rank phases take over")
                run.state = run.initial_state()
        try:
            if run.best is None or run.best.evaluation.worst > settings.tol:
                with single_threaded:
                    _low_rank_phases(run)
        except _Handover:
            run.say(f"the low-rank phases used their share ({run.inner_iterations} iterations)")
            run.keep(_Snapshot.of(run))
        except _Diverged:
            # a point was measured, the iterates are no ray and the interior-point method can start afresh
            if run.best is None or _divergence(run)[0] is not Status.NUMERICAL_ERROR or \
                    not run.interior_point_available():
                raise
            run.say("the low-rank phases diverged: handing over to the interior-point method")
        if run.best.evaluation.worst > settings.tol and run.interior_point_available():
            _interior_point(run)
    except _Stop as stop:
        stop_status = stop.status
        run.keep(_Snapshot.of(run))
    except _Diverged:
        stop_status, evidence = _divergence(run)
        if run.best is None:
            run.keep(_Snapshot.of(run))
    except MemoryError:  # the device ran out of memory although the estimates (memory.py) allowed each step
        run.backend.release_cached_blocks()
        evidence = OUT_OF_MEMORY_MESSAGE
        run.say(evidence)
        if run.best is None:
            run.keep(_Snapshot.of(run))
    except KeyboardInterrupt:
        stop_status = Status.INTERRUPTED
        if run.best is None:  # measure the point, briefly: whoever pressed Ctrl-C wants to stop now
            run.measure_deadline = min(run.measure_deadline, time.perf_counter() + INTERRUPT_MEASURE_SECONDS)
            run.keep(_Snapshot.of(run))
    return _result(run, run.best, stop_status, evidence)


def _interior_point_first(run: _Run) -> bool:
    """Whether the interior-point method starts (``Settings.route``)."""
    if run.routes is None:
        return False
    return {"auto": run.routes.interior_point_first, "interior_point": True, "low_rank": False}[run.settings.route]


def _route(run: _Run) -> str:
    """Which route starts, and why (``Result.route``)."""
    if run.routes is not None:
        first = "interior-point method first" if _interior_point_first(run) else "low-rank phases first"
        why = "by estimated cost" if run.settings.route == "auto" else f"route={run.settings.route!r}"
        return f"{first} ({why}): {run.routes.describe()}"
    if not run.settings.interior_point:
        return "low-rank phases only: interior_point=False"
    return "low-rank phases only: too large for the interior-point method"


@functools.cache
def _blas_threads() -> ThreadpoolController:
    """The process's thread pools, found once: finding them reads /proc/self/maps (2 ms, a twentieth of a small
    solve)."""
    return ThreadpoolController()


def _divergence(run: _Run) -> tuple[Status, str]:
    """The status of iterates that ran away or became non-finite: UNBOUNDED_INACCURATE when the point, scaled to
    size one, is an approximate primal ray (``certificates.is_primal_ray``), else NUMERICAL_ERROR."""
    R = run.state.R
    size = run.op.kernels.inner(R, R)
    residual, _, objective = run.primal_measures(R)
    if is_primal_ray(objective, residual, size, run.norms, run.settings.inaccurate_tol):
        return Status.UNBOUNDED_INACCURATE, (f"the iterates ran away along a primal ray: at tr X = {size:.3g}, "
                                            f"<C, X> = {objective:.3g} and ||A(X) - b||_2 = {residual:.3g}")
    return Status.NUMERICAL_ERROR, ""


def _low_rank_phases(run: _Run) -> None:
    """Both phases, then polishing rounds and saddle escapes while they pay; the best point is in ``run.best``.
    Problems on a product of spheres take the Riemannian phase instead (:func:`_riemannian_phases`)."""
    settings = run.settings
    if run.spheres is not None:
        _riemannian_phases(run)
        return
    if run.trace_sphere is not None:
        _trace_sphere_phases(run)
        return
    _two_phases(run)
    current = _Snapshot.of(run)
    run.keep(current)
    escapes = reopts = 0
    polish_stalled = False
    while True:
        # A negative eigenvalue of the dual slack means a saddle point only once the multipliers
        # have settled: polish first, and escape (grow the rank) when polishing stops paying.
        directions = _escape_directions(run, current.evaluation)
        can_polish = reopts < REOPT_ROUNDS[settings.reopt_level]
        escaping = directions is not None and escapes < MAX_ESCAPES and (polish_stalled or not can_polish)
        if escaping:
            escapes += 1
            _escape(run, directions)
            _two_phases(run)
        elif can_polish and current.evaluation.worst > settings.tol:
            reopts += 1
            _reoptimise(run)
        else:
            return
        previous = current.evaluation
        current = _Snapshot.of(run)
        run.keep(current)
        polish_stalled = current.evaluation.stalled_since(previous)
        if escaping and current.evaluation.worst > previous.worst:
            escapes = MAX_ESCAPES  # a wider factor made it worse (rgg 2^22 rose to 242 columns and out of memory)


def _riemannian_phases(run: _Run) -> None:
    """Runs of the Riemannian phase (``riemannian.py``), measured after each, until the criteria hold; each run's
    gradient target is ``RIEMANNIAN_TARGET_FACTOR`` times the last one's. When a tighter run did not halve the slack's
    negative eigenvalues, the point is a low-rank saddle: the rank grows along the slack's eigenvector (as after
    polishing in :func:`_low_rank_phases`), except that the wider factor starts afresh (see :func:`_escape`). Ends
    when a run finds no descent and no escape is possible.

    Measured and not kept: escaping as soon as the factor uses all its columns (smallest eigenvalue of R'R at least
    1e-2 of the largest; on sparse random graphs too narrow a factor has 0.1-0.45, an adequate one 1e-5 or less, but
    on delaunay 2^20 and rgg 2^22 the certified optimum at 56 and 61 columns has 0.5-0.7, and the rule sent them to
    126 and 138 columns and 2-2.5x the time, H100). On MaxCut (sparse random graph, n = 2e4, CPU): escaping as soon
    as the dual measure is far above the gradient measure (right after an escape that ratio is large at every point:
    the rank grew to 153 where 30 serve, 1827 steps); predicting the next target from the ratio of the two measures
    (it tightens hard at a saddle: 2816 steps). This schedule took 1796, and 1704 with the L-BFGS pairs carried from
    run to run."""
    settings = run.settings
    target, escapes, previous = RIEMANNIAN_FIRST_TARGET * settings.tol, 0, None
    lbfgs = LBFGS(run.op.kernels, settings.lbfgs_memory)
    while True:
        phase = RiemannianPhase(run.op, run.state, settings, run.norms, run.spheres, target=target, lbfgs=lbfgs)
        run.run_phase(phase, "riemannian")
        if phase.outcome is PhaseOutcome.FAILED:
            raise _Diverged()
        current = _Snapshot.of(run)
        run.keep(current)
        evaluation = current.evaluation
        if evaluation.worst <= settings.tol:
            return
        # no move at all: a zero gradient (rank 1 has no tangent directions), where only a wider factor can descend
        saddle = phase.outcome is PhaseOutcome.STALLED or phase.moves == 0 or evaluation.stalled_since(previous)
        directions = _escape_directions(run, evaluation) if saddle and escapes < MAX_ESCAPES else None
        if directions is not None:
            escapes += 1
            _escape(run, directions, restart_seed=run.settings.seed + escapes)
            lbfgs.reset()
            previous = None  # the wider factor gets a run of its own before it is judged stalled
            continue
        if phase.outcome is PhaseOutcome.STALLED or phase.moves == 0:
            return  # no descent left at this rank, and no escape
        # a point that missed tol narrowly gets a shorter run, judged for a stall against the evaluation before
        close = evaluation.worst <= RIEMANNIAN_CLOSE * settings.tol
        target = (RIEMANNIAN_CLOSE_FACTOR if close else RIEMANNIAN_TARGET_FACTOR) * min(target, phase.measure)
        previous = previous if close else evaluation


def _trace_sphere_phases(run: _Run) -> None:
    """Runs of phase I on the trace sphere (``alm.py``), measured after each, until the criteria hold: each run goes
    on from the last one's multipliers and penalty with an exit tolerance ``TRACE_SPHERE_TIGHTENING`` times smaller.
    When a tighter run did not halve the slack's negative eigenvalues, the point is a low-rank saddle and the rank
    grows along the slack's eigenvector (:func:`_escape`). The re-optimisation rounds of the two-phase route scale C
    up, which on the sphere moved SDPLIB's theta1 from a feasible point to one it never left (certified gap 7e-3).
    Ends when a run ends without reaching its tolerance and no escape is possible."""
    settings = run.settings
    exit_tol, escapes, previous = settings.tol, 0, None
    while True:
        alm = ALMPhase(run.op, run.state, settings, run.norms, run.max_ranks, outer_budget=settings.max_alm_outer,
                       sphere=run.trace_sphere, exit_tol=exit_tol)
        _run_alm(run, alm)
        current = _Snapshot.of(run)
        run.keep(current)
        evaluation = current.evaluation
        if evaluation.worst <= settings.tol:
            return
        directions = (_escape_directions(run, evaluation) if evaluation.stalled_since(previous)
                      and escapes < MAX_ESCAPES else None)
        if directions is not None:
            escapes += 1
            _escape(run, directions)
            previous = None  # the wider factor gets a run of its own before it is judged stalled
            continue
        if alm.outcome is not PhaseOutcome.CONVERGED or exit_tol < TRACE_SPHERE_SMALLEST_TOL:
            return
        exit_tol *= TRACE_SPHERE_TIGHTENING
        previous = evaluation


def _interior_point(run: _Run) -> None:
    """The interior-point method from its own starting point; its best iterate replaces the state's point."""
    run.in_interior_point = True
    phase = InteriorPointPhase(run.problem, run.backend, run.state, run.op.layout, run.norms, run.settings.tol,
                               run.op.row_scale)
    run.run_phase(phase, "interior_point")
    run.keep(_Snapshot.of(run))


@dataclass
class _Snapshot:
    """A point (factor, multipliers, scale, ranks) and its measured errors."""

    R: object
    lam: object
    c_scale: float
    ranks: list
    evaluation: _Evaluation

    @classmethod
    def of(cls, run: _Run) -> _Snapshot:
        """The current point, its rows projected onto the constraints that fix them (``FixedDiagonals``), with the
        stationary multipliers when they are better than the iterated ones (and then the iterations continue
        from them); they are tried where stationarity determines them and the phase did not compute them already."""
        st, xp, kernels = run.state, run.backend.xp, run.op.kernels
        with run.timed("certificates"):
            if not (kernels.all_finite(st.R) and bool(xp.isfinite(st.lam).all())):
                return cls(st.R.copy(), st.lam.copy(), st.c_scale, list(st.ranks),
                           _Evaluation.unmeasurable(run.settings))
            if run.projects_rows and run.spheres is not None:
                R = run.spheres.projected(st.R, kernels)
            else:
                R = st.R.copy()
                if run.fixed_diagonals is not None:
                    run.fixed_diagonals.project(R, xp)
            lam, measures = st.lam / st.c_scale, run.primal_measures(R)
            run.note_size(R, lam)
            evaluation = run.evaluate(lam, R, measures)
            # the Riemannian phase's multipliers are already the least-squares ones (``riemannian.py``): refining
            # them would only repeat the eigenvalue problem (G67, H100: 0.09 s of a 0.76 s solve)
            stationary_pays = (run.spheres is None and _stationarity_determines_multipliers(run)
                               and evaluation.dual_measure > run.settings.tol and math.isfinite(evaluation.worst))
            if stationary_pays and time.perf_counter() < run.deadline:
                iterations = min(STATIONARY_MAX_ITERATIONS, max(STATIONARY_MIN_ITERATIONS, run.inner_iterations))
                refined = stationary_multipliers(run.op, R, lam, max_iter=iterations, deadline=run.measure_deadline)
                candidate = run.evaluate(refined, R, measures)
                if candidate.worst < evaluation.worst:
                    evaluation, st.lam = candidate, refined * st.c_scale
        run.say("      " + ", ".join(f"{name} {value:.2e}" for name, value in evaluation.criteria.items()))
        return cls(R, st.lam.copy(), st.c_scale, list(st.ranks), evaluation)


def _stationarity_determines_multipliers(run: _Run) -> bool:
    """Whether (C - A*(lambda)) R = 0 can determine the multipliers: no more of them than entries of the factor.
    With more, the least squares fits stationarity exactly and leaves the slack off range(R) to chance (matrix
    completion, n = 4e4 at rank 22 with 7.7e6 multipliers, H100: the refined multipliers' certified gap was 0.15
    after 52 iterations and 0.34 after 500, the iterated ones' 4.0e-4)."""
    layout = run.op.layout
    entries = sum(n * r for n, r in zip(layout.sizes, run.state.ranks)) + layout.n_lp
    return run.problem.m <= entries


def _better(best: _Snapshot | None, candidate: _Snapshot) -> _Snapshot:
    """The better snapshot: the smaller worst criterion (so one within tol beats one outside it). Non-finite
    errors never win."""
    if best is None or not math.isfinite(best.evaluation.worst):
        return candidate
    if not math.isfinite(candidate.evaluation.worst):
        return best
    return candidate if candidate.evaluation.worst < best.evaluation.worst else best


def _two_phases(run: _Run) -> None:
    """Phase I until the switch tolerance, then phase II with its first-run exit."""
    _run_alm(run, ALMPhase(run.op, run.state, run.settings, run.norms, run.max_ranks,
                           outer_budget=run.settings.max_alm_outer))
    rho_max = _switch_to_admm(run.state, run.settings)
    _run_admm(run, ADMMPhase(run.op, run.state, run.settings, run.norms, max_sweeps=run.settings.max_admm_iter,
                             reopt=False, rho_max=rho_max))


def _run_alm(run: _Run, alm: ALMPhase) -> None:
    """Phase I; non-finite iterates end the solve (the driver then reports the best point measured)."""
    run.run_phase(alm, "alm")
    if alm.growth_skipped:
        run.say(MEMORY_BOUND_MESSAGE)
    if alm.outcome is PhaseOutcome.FAILED:
        raise _Diverged()


def _run_admm(run: _Run, admm: ADMMPhase) -> None:
    """Phase II; when it diverged beyond its restarts, the point it leaves is measured like any other (a
    snapshot never beats a better one), and the log says so."""
    run.run_phase(admm, "admm")
    if admm.outcome is PhaseOutcome.FAILED:
        run.say(f"phase II diverged after {admm.restarts} restarts")


def _escape_directions(run: _Run, evaluation: _Evaluation):
    """Eigenvectors of the blocks whose dual slack has a clearly negative eigenvalue (a tenth of tol in the
    criteria's dual measure) and whose rank can still grow (a low-rank saddle point: X + t v v' lowers the
    objective), or None; None also when the wider factor would not fit in device memory."""
    tol = run.settings.tol
    if evaluation.dual_measure <= tol:
        return None
    directions = [pair.vector if -pair.value * weight > 0.1 * tol and rank < rank_max else None
                  for pair, weight, rank, rank_max in zip(evaluation.eigenpairs, evaluation.dual_weights,
                                                          run.state.ranks, run.max_ranks)]
    if all(d is None for d in directions):
        return None
    ranks = run.state.ranks
    if not widening_fits(run.backend, run.op.layout, max(ranks), max(_escape_ranks(run, directions))):
        run.say(MEMORY_BOUND_MESSAGE)
        return None
    return directions


def _escape_ranks(run: _Run, directions) -> list[int]:
    """The ranks after an escape along ``directions``: x ``rank_growth`` (at least +1) where a block has one."""
    return [r if d is None else min(max(r + 1, int(math.ceil(run.settings.rank_growth * r))), r_max)
            for r, r_max, d in zip(run.state.ranks, run.max_ranks, directions)]


def _escape(run: _Run, directions, restart_seed: int | None = None) -> None:
    """Leave a low-rank saddle: grow the ranks of the blocks with escape directions, seeding the new
    columns along them (scaled to a tenth of the block's trace), then phase I starts again. With ``restart_seed``
    the wider factor is instead a fresh random start (the Riemannian phase's escapes): from the widened saddle point
    L-BFGS crawled (sparse random MaxCut, n = 3e4, CPU: 1710 steps after an escape from 30 to 45 columns, against 536
    from a fresh start of 45 columns and 287 from one of 42 with no escape; n = 1e6, H100: certified in 5260 steps,
    71 s, over three escapes to 189 columns, where the widened escapes had reached a time limit at 50 s)."""
    st, layout = run.state, run.op.layout
    new_ranks, seeds = _escape_ranks(run, directions), list(directions)
    if restart_seed is not None:
        run.say(f"escaping a saddle point: ranks {st.ranks} -> {new_ranks}, from a fresh start")
        st.R = run.op.initial_factor(max(new_ranks), new_ranks, restart_seed)
        st.ranks = new_ranks
        return
    for k, direction in enumerate(directions):
        if direction is None:
            continue
        block = st.R[layout.offsets[k]:layout.offsets[k] + layout.sizes[k]]
        seeds[k] = math.sqrt(0.1 * run.op.kernels.inner(block, block)) * direction
    run.say(f"escaping a saddle point: ranks {st.ranks} -> {new_ranks}")
    st.R = run.op.widen(st.R, st.ranks, new_ranks, seeds)
    st.ranks = new_ranks


def _switch_to_admm(state: SolverState, settings: Settings) -> float:
    """Phase II penalty from phase I's (LoRADS rule); returns the ADMM penalty cap."""
    rho_max = settings.rho_max
    rho = state.rho * settings.heuristic_factor
    if state.rho > rho_max:
        rho = min(math.sqrt(state.rho / rho_max) * rho_max, state.rho)
        rho_max = rho
    state.rho = min(rho, rho_max)
    return rho_max


def _reoptimise(run: _Run) -> None:
    """One re-optimisation round: scale C up, a short ALM run, then ADMM with the strict exit."""
    st, settings = run.state, run.settings
    kappa = settings.reopt_scale
    st.c_scale *= kappa
    st.lam = st.lam * kappa
    run.say(f"re-optimisation: objective scale {st.c_scale:g}")
    _run_alm(run, ALMPhase(run.op, st, settings, run.norms, run.max_ranks, outer_budget=REOPT_ALM_OUTER,
                           rho_factor=math.sqrt(2.0), grow_ranks=len(run.op.layout.sizes) <= 10,
                           switch_when_feasible=False))
    rho_max = _switch_to_admm(st, settings)
    _run_admm(run, ADMMPhase(run.op, st, settings, run.norms, max_sweeps=settings.max_admm_iter, reopt=True,
                             rho_max=rho_max))


def _result(run: _Run, best: _Snapshot, stop_status: Status | None, evidence: str) -> Result:
    settings, layout, backend = run.settings, run.op.layout, run.backend
    evaluation = best.evaluation
    status = _status(evaluation, stop_status, settings)
    if status is Status.STALLED:
        farkas = _infeasibility_evidence(run)
        status, evidence = (Status.INFEASIBLE_INACCURATE, farkas) if farkas else (status, evidence)
    # the multipliers unscaled where they are (a pass of one core over 10^8 of them took 0.2 s)
    R, dual = backend.to_host_together([best.R, best.lam / (best.c_scale * run.op.row_scale)])
    factors = tuple(np.ascontiguousarray(R[o:o + n, :r]) for o, n, r in zip(layout.offsets, layout.sizes, best.ranks))
    x_lp = R[layout.lp_offset:, 0] ** 2
    message = "; ".join(filter(None, [_message(status, evaluation, settings), evidence,
                                      f"dual bound: {evaluation.bound.how}"]))
    result = Result(status=status, primal_objective=evaluation.primal_objective,
                    dual_objective=evaluation.dual_objective, errors=evaluation.errors,
                    criteria=dict(evaluation.criteria), dual_bound=evaluation.bound.value,
                    certified_gap=evaluation.certified_gap, factors=factors,
                    x_lp=x_lp, dual=dual, iterations=dict(run.iterations), ranks=tuple(best.ranks),
                    solve_time=run.elapsed(), setup_time=run.setup_time, stage_times=dict(run.stage_times),
                    peak_device_bytes=max(run.peak_device_bytes, backend.pool_bytes()),
                    min_eigenvalues=tuple(pair.value for pair in evaluation.eigenpairs),
                    device=run.device(), message=message, route=_route(run), log=tuple(run.log or ()))
    run.say(result.summary())
    return result


def _status(evaluation: _Evaluation, stop_status: Status | None, settings: Settings) -> Status:
    """OPTIMAL when the criteria hold (whatever stopped the run); else what stopped it; else INACCURATE within
    ``reduced_tol``, STALLED above it, NUMERICAL_ERROR for a point that could not be measured."""
    if evaluation.worst <= settings.tol:
        return Status.OPTIMAL
    if stop_status is not None:
        return stop_status
    if evaluation.worst <= settings.inaccurate_tol:
        return Status.INACCURATE
    return Status.STALLED if math.isfinite(evaluation.worst) else Status.NUMERICAL_ERROR


def _infeasibility_evidence(run: _Run) -> str:
    """What the direction d = lambda / ||lambda|| of the largest multipliers measured says about feasibility
    (``certificates.farkas_violations``), when it says enough: every feasible point would have to exceed the
    trace bounds the data imply, or be INFEASIBLE_SIZE_FACTOR times larger than any the method reached. Empty
    otherwise."""
    op, lam = run.op, run.largest_multipliers
    if lam is None:
        return ""
    direction = lam / run.backend.xp.linalg.norm(lam)
    reach = float(op.b @ direction)  # b'd = <A*(d), X> for every feasible X
    if not reach > 0.0:
        return ""
    size_limit = INFEASIBLE_SIZE_FACTOR * max(1.0, run.largest_size)
    with run.timed("certificates"):
        pairs, lp_entries = farkas_violations(op, direction, accuracy=0.1 * reach / size_limit,
                                              seed=run.settings.seed, deadline=run.measure_deadline)
    eps = np.array([max(0.0, -pair.lower) for pair in pairs])
    sigma = np.maximum(-lp_entries, 0.0)
    capacity = run.trace_bounds.capacity(eps, sigma)
    if capacity is not None and capacity < reach:
        return (f"Farkas certificate: b'd = {reach:.3g} exceeds {capacity:.3g}, the most <A*(d), X> reaches within "
                "the trace bounds the constraints imply")
    largest = float(max(eps.max(initial=0.0), sigma.max(initial=0.0)))
    needed = reach / largest if largest > 0.0 else math.inf
    if needed > size_limit:
        return (f"the multipliers ran away along a near-Farkas direction: every feasible point would need "
                f"tr X + sum x >= {needed:.3g}, the largest point reached has {run.largest_size:.3g}")
    return ""


def _message(status: Status, evaluation: _Evaluation, settings: Settings) -> str:
    measures = ", ".join(evaluation.criteria)
    return {
        Status.OPTIMAL: f"{measures} within tol = {settings.tol:g}",
        Status.INACCURATE: f"stopped with {measures} within reduced_tol = {settings.inaccurate_tol:g} but not all "
                           f"within tol = {settings.tol:g}",
        Status.STALLED: f"stopped without progress, {measures} not all within reduced_tol = "
                        f"{settings.inaccurate_tol:g}: the point is no answer",
        Status.INFEASIBLE_INACCURATE: "the problem appears to be infeasible",
        Status.UNBOUNDED_INACCURATE: "the problem appears to be unbounded",
        Status.TIME_LIMIT: f"time_limit = {settings.time_limit:g} s reached",
        Status.ITERATION_LIMIT: f"max_iter = {settings.max_iter} reached",
        Status.INTERRUPTED: "interrupted by the user",
        Status.NUMERICAL_ERROR: "the iterates diverged or became non-finite",
    }[status]
