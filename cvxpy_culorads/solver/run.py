"""One solve in progress: the backend and operator a plan asks for, the iterate, limits, counters and the log, and
the measurement of points.

:class:`Run` is what every strategy (:mod:`cvxpy_culorads.solver.strategies`) works on. It owns the limits: a phase
runs through :meth:`Run.run_phase`, which stops it at the time or iteration limit (and before an interior-point
iteration expected to end past the time limit), when its iterates run away, or when the interior-point method is due
to take over, and says which as a :class:`Step` value (no exceptions carry control
flow). Points are measured from scratch by :meth:`Run.snapshot`, within the measurement deadline that the time
limit's promise leaves (10 % + 1 s past the limit), and the best measured point is kept in ``Run.best``.
"""
from __future__ import annotations

import contextlib
import enum
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.backends.backend import gpu_available, select_backend
from cvxpy_culorads.backends.kernels import Capability, check_capabilities
from cvxpy_culorads.backends.memory import DENSE_LIMIT, fitting_rank, interior_point_work_bytes
from cvxpy_culorads.backends.threads import limited, stage_threads
from cvxpy_culorads.certify.bounds import TraceBounds
from cvxpy_culorads.certify.certificates import dual_infeasibility, stationary_multipliers
from cvxpy_culorads.certify.measures import ProblemNorms, primal_infeasibility, relative_gap
from cvxpy_culorads.distributed import ShardedBlockOperator, ShardedSpheresOperator, sharded_backend
from cvxpy_culorads.operators.compressed import CompressedOperator
from cvxpy_culorads.phases.interior_point import interior_point_backend
from cvxpy_culorads.phases.riemannian import Spheres
from cvxpy_culorads.phases.state import SolverState
from cvxpy_culorads.result import Errors, Status
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.costs import RouteCosts, interior_point_iteration_seconds
from cvxpy_culorads.solver.evaluation import Evaluation, better, criteria_of
from cvxpy_culorads.solver.log import LOGGER, logs
from cvxpy_culorads.solver.plan import LowRankPhases, Plan

__all__ = ["Run", "Snapshot", "Step"]

INTERIOR_POINT_MEMORY_MESSAGE = "interior-point method skipped: its dense work arrays would not fit in memory"
# one thread beside the solve's own, for host passes that overlap the device set-up (not the pool of ``hostpasses``,
# whose chunks they wait for)
_BESIDE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="culorads-beside")


class Step(enum.Enum):
    """What a strategy's step (or a phase run through :meth:`Run.run_phase`) ended with."""

    CONTINUE = "continue"  # the strategy has more to try
    FINISHED = "finished"  # the strategy is done: the criteria hold, or it has nothing left to try
    TIME_LIMIT = "time_limit"
    ITERATION_LIMIT = "iteration_limit"
    HANDOVER = "handover"  # the low-rank phases used their share: the interior-point method takes over
    DIVERGED = "diverged"  # the iterates became non-finite or ran away (Tuning.runaway_objective)

    @property
    def limit_status(self) -> Status | None:
        """The status a limit reports when the point is not optimal (None for the other steps)."""
        return {Step.TIME_LIMIT: Status.TIME_LIMIT, Step.ITERATION_LIMIT: Status.ITERATION_LIMIT}.get(self)


@dataclass
class Snapshot:
    """A point (factor, multipliers, scale, ranks) and its measured errors."""

    R: object
    lam: object
    c_scale: float
    ranks: list
    evaluation: Evaluation


class Run:
    """One solve carrying out its :class:`~cvxpy_culorads.solver.plan.Plan`: the backend and operator, the iterate
    (``state``), the best measured point (``best``), limits, counters, stage times and the log. Phases run through
    :meth:`run_phase`, which enforces the limits and returns why it stopped them as a :class:`Step`; points are
    measured by :meth:`snapshot`."""

    def __init__(self, problem, settings: Settings, plan: Plan):
        self.problem, self.settings, self.plan, self.tuning = problem, settings, plan, plan.tuning
        self.start = time.perf_counter()
        self.deadline = self.start + settings.time_limit
        # measuring a point may run on past the deadline by the grace the time limit's promise leaves
        self.measure_deadline = (self.deadline + self.tuning.final_measure_share * settings.time_limit
                                 + self.tuning.final_measure_seconds)
        layout, fixed, sharded = plan.layout, plan.fixed_diagonals, plan.split
        on_spheres = plan.phases is LowRankPhases.SPHERES
        self.trace_sphere = plan.trace_sphere
        initial, self.max_ranks, cost_ranks = list(plan.initial_ranks), list(plan.max_ranks), list(plan.cost_ranks)
        self.devices = plan.device_costs
        split = ShardedSpheresOperator if on_spheres else ShardedBlockOperator
        self.backend = (sharded_backend(plan.device, settings.gpu_ids,
                                        split.bounds(problem, layout, len(settings.gpu_ids))) if sharded
                        else select_backend(plan.device, gpu_pays=lambda: self.devices.gpu_pays,
                                            gpu_ids=settings.gpu_ids))
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
            self.op = split(problem, self.backend, settings.lorads.l2_rescaling, layout, settings.split.halo_precision)
        else:
            self.op = CompressedOperator(problem, self.backend, rescale=settings.lorads.l2_rescaling, layout=layout)
        check_capabilities(self.op.kernels, settings, self.backend.describe())
        self.backend.synchronize()
        self.setup_time = self.elapsed()
        # The build's sort buffers are cached by the pool in sizes the phases never ask for: hand them back, or
        # at n = 1e8 they and the factor arrays would not fit together. The pool only grows between this point
        # and the end, so its size here and at the end bound the whole solve (``Result.peak_device_bytes``).
        self.peak_device_bytes = self.backend.pool_bytes()
        self.backend.release_cached_blocks()
        self.norms, self.trace_bounds = host_passes.result()
        self.runaway_objective = (self.tuning.runaway_objective * (1.0 + self.norms.C_1) * (1.0 + self.norms.b_1)
                                  / max(self.norms.A_inf, 1e-300))
        # of the measured points: the largest tr X + sum x, and the (unscaled) multipliers of largest norm, whose
        # direction may be a Farkas ray (infeasibility evidence)
        self.largest_size, self.largest_multipliers, self._largest_norm = 0.0, None, 0.0
        # a problem on a product of spheres takes the Riemannian phase
        self.spheres = Spheres.of(problem, layout, fixed, self.op) if on_spheres else None
        # mixed precision covers the Riemannian phase where the kernel set has it (one device); the rest runs in double
        self.single_precision = (settings.precision == "mixed" and self.spheres is not None
                                 and Capability.MIXED_PRECISION in self.op.kernels.capabilities)
        # the paper's rule measures the iterate as it is; the certified one returns it projected onto fixed rows (by
        # the spheres where there are)
        # (split rows without spheres are measured as they are: the projection is written for whole arrays)
        self.projects_rows = fixed is not None and settings.criterion == "certified"
        self.fixed_diagonals = (fixed.on(self.backend.xp) if self.projects_rows and self.spheres is None
                                and not sharded else None)
        self.inner_iterations = 0
        self.iterations = {"alm": 0, "admm": 0, "riemannian": 0, "interior_point": 0}  # inner iterations per stage
        self.log: list | None = [] if settings.keep_log else None
        self.logs = logs(settings.verbose)  # whether log lines reach anyone (then they are made)
        self._last_print = -math.inf
        self._eigenvectors = None  # of the dual slack at the last evaluation, the warm start of the next
        self.stage_times = {"alm": 0.0, "admm": 0.0, "riemannian": 0.0, "interior_point": 0.0, "certificates": 0.0}
        self.initial_ranks = initial
        self.state = self.initial_state()
        self.best = None  # the best Snapshot so far
        self.interior_point_bytes = interior_point_work_bytes(problem) if plan.interior_point_allowed else None
        self.interior_point_backend = interior_point_backend(problem, self.backend)
        # which route starts, by estimated cost (only where the interior-point method may run at all)
        self.routes = (RouteCosts.of(problem, cost_ranks, not self.backend.on_host)
                       if self.interior_point_bytes is not None else None)
        # one iteration's estimated seconds: the method does not start where one would run past the time limit
        on_gpu = not self.interior_point_backend.on_host
        self.interior_point_iteration = (interior_point_iteration_seconds(problem, on_gpu)
                                         if self.interior_point_bytes is not None else None)
        if self.routes is not None and plan.warm_start is not None:
            self.routes = plan.warm_start.route_costs(self.routes)
        self.in_interior_point = False
        # flops of one interior-point iteration (Schur complement, blocks' factorisations) and of the certificates'
        # dense eigenvalue problems: what the host threads of those stages are chosen by (``backends/threads.py``)
        dense = [n for n in layout.sizes if n <= DENSE_LIMIT]
        self.interior_point_work = problem.m ** 3 / 3.0 + problem.m * sum(n ** 3 for n in layout.sizes)
        self.eigen_work = 9.0 * sum(n ** 3 for n in dense)

    def plan_reasons(self) -> tuple[str, ...]:
        """The plan's reasons, with what only the device could tell (a start narrowed to fit in its memory) and
        what ``precision="mixed"`` covers."""
        narrowed = (f"start narrowed to fit in {self.backend.memory}",) if self.rank_capped else ()
        return self.plan.reasons + narrowed + self.precision_reasons()

    def precision_reasons(self) -> tuple[str, ...]:
        """With ``precision="mixed"``: which phases run in single precision (none but the Riemannian phase on one
        device; the others and the measurements in double)."""
        if self.settings.precision != "mixed":
            return ()
        if self.single_precision:
            return ("precision='mixed': the Riemannian phase in single precision until it stalls, then double; the "
                    "interior-point method, certificates and measurements in double",)
        where = "split over several devices" if self.plan.split else "on phases other than the Riemannian one"
        return (f"precision='mixed' runs in double precision here: it covers the Riemannian phase on one device, "
                f"and this solve is {where}",)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def device(self) -> str:
        """The device, and why where ``device='auto'`` had a GPU to choose or ``devices`` asked for a split the
        problem does not take (``Result.device``)."""
        chosen = self.devices is not None and gpu_available()
        refused = f"; one device although devices={self.settings.devices!r}: {self.plan.split_refused}"
        return (self.backend.describe() + (f"; {self.devices.describe()}" if chosen else "")
                + (refused if self.plan.split_refused else ""))

    def initial_state(self) -> SolverState:
        """The low-rank phases' start: the plan's warm start, else a random factor of the initial ranks and zero
        multipliers."""
        layout, xp, ranks = self.op.layout, self.backend.xp, self.initial_ranks
        rho = 1.0 / math.sqrt(sum(layout.sizes) or layout.n_lp)
        if self.plan.warm_start is not None:
            return self.plan.warm_start.state(self.op, ranks, self.op.row_scale, rho, self.settings.seed)
        R = self.op.initial_factor(max(ranks + [1]), ranks, self.settings.seed)
        return SolverState(R=R, lam=xp.zeros(self.problem.m), Avals=None, objective=0.0, rho=rho, c_scale=1.0,
                           ranks=list(ranks))

    # ------------------------------------------------------------------ running phases
    def run_phase(self, phase, stage: str) -> Step | None:
        """Drive a phase's generator, enforcing limits and printing the log; its time counts to ``stage``. Returns
        None when the phase ended by itself, else the :class:`Step` that stopped it. The generator is closed on the
        way out, so its clean-up (``finally``) runs before the solve goes on."""
        low_rank = stage != "interior_point"
        # the low-rank phases' BLAS-1 calls on 10^4..10^6 entries gain nothing from threads, and with the cores busy
        # a 12 us dot becomes a millisecond one; the interior-point method's factorisations may gain
        threads = 1 if low_rank else stage_threads(self.interior_point_work, self.settings.threads)
        # the interior-point method's iterations are long: it checks the deadline inside them, and none starts that
        # is expected to end past it (the longest so far, the estimate before the first)
        rows_of = phase.run() if low_rank else phase.run(deadline=self.deadline)
        longest, resumed = None, None  # the method's longest iteration so far, and when it last resumed
        with self.timed(stage), limited(threads), contextlib.closing(rows_of) as rows:
            for progress in rows:
                if resumed is not None:
                    longest = max(longest or 0.0, time.perf_counter() - resumed)
                self.inner_iterations += 1
                self.iterations[stage] += 1
                self.record(progress)
                if not abs(progress.primal_objective) <= self.runaway_objective:  # NaN too
                    return Step.DIVERGED
                if self.elapsed() > self.settings.time_limit:
                    return Step.TIME_LIMIT
                if self.inner_iterations >= self.settings.max_iter:
                    return Step.ITERATION_LIMIT
                if low_rank and self.handover_due() and (self.in_interior_point or self.interior_point_available()):
                    return Step.HANDOVER
                if not low_rank and not self.next_iteration_fits(longest):
                    return Step.TIME_LIMIT
                resumed = None if low_rank else time.perf_counter()
        # a phase that ended by itself past the limit (an abandoned step) ran into it
        return Step.TIME_LIMIT if self.elapsed() > self.settings.time_limit else None

    def next_iteration_fits(self, longest: float | None) -> bool:
        """Whether one more interior-point iteration, as long as the ``longest`` so far (None: the estimate), ends
        within the time limit (the log says when not)."""
        expected = (self.interior_point_iteration or 0.0) if longest is None else longest
        if self.elapsed() + expected <= self.settings.time_limit:
            return True
        self.say(f"the interior-point method stops: its next iteration is expected to take {expected:.3g} s, more "
                 "than the time left")
        return False

    def handover_due(self) -> bool:
        """Whether the low-rank phases have used their share on a problem the interior-point method can take:
        ``interior_point_patience`` inner iterations or, before the method has run, ``Tuning.handover_factor`` times
        its estimated time. After it has run (it started and did not meet tol) the share ends the solve."""
        if self.inner_iterations >= self.settings.lorads.interior_point_patience:
            return True
        return (self.routes is not None and not self.in_interior_point
                and self.elapsed() - self.setup_time >= self.tuning.handover_factor * self.routes.interior_point)

    def interior_point_available(self) -> bool:
        """Whether the interior-point method may take over now: the problem is small enough for it and its work
        arrays fit in the free device memory (a refusal is final, and the log says so)."""
        if self.interior_point_bytes is None or self.in_interior_point:
            return False
        if self.interior_point_iteration > self.settings.time_limit - self.elapsed():
            self.say("the interior-point method does not start: one iteration is estimated to take "
                     f"{self.interior_point_iteration:.3g} s, more than the time left")
            return False
        free = self.interior_point_backend.free_memory()
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

    def keep(self, snapshot: Snapshot) -> None:
        """Remember ``snapshot`` if it is better than the best point so far."""
        self.best = better(self.best, snapshot)

    def keep_current(self) -> Snapshot:
        """Measure the current point, keep it if it is the best so far, and return it."""
        current = self.snapshot()
        self.keep(current)
        return current

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
        if not self.logs:
            return
        now = self.elapsed()
        if force or now - self._last_print >= self.settings.log_every:
            self._last_print = now
            LOGGER.info(f"{progress.phase:>5} {progress.iteration:7d} {progress.primal_objective:+.8e} "
                        f"{progress.dual_objective:+.8e} {progress.primal_infeasibility:9.2e} {progress.gap:9.2e} "
                        f"{progress.rho:9.2e} {max(progress.ranks, default=1):5d} {now:9.2f}")

    def say(self, text: str) -> None:
        """A line of the log (``solver/log.py``)."""
        if self.logs:
            LOGGER.info(text)

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

    def failing_eigenvalues(self, primal: float, dual: float, weights: list[float], residual: float) -> list[float]:
        """Per PSD block, the value below which lambda_min fails the test on its own: all that tol leaves the dual
        measure (less the gap where the certified gap contains it) spent on this block. Its eigensolver may stop
        once its Ritz value, an upper estimate, is below it (``certificates.smallest_eigenpairs``). Where a criterion
        that no eigenvalue enters already fails (the primal residual ``residual`` = ||A(X) - b||_2, or the gap where it
        is a criterion of its own), every value fails: the eigensolver then stops as soon as it knows its value to
        within ``krylov.DECIDED_RESIDUAL_SHARE``, all that ranking the point and its escapes need."""
        tol, norms, certified = self.settings.tol, self.norms, self.settings.criterion == "certified"
        gap_inside = certified and all(weight is not None for weight in self.trace_bounds.weights(dual))
        gap = relative_gap(primal, dual)
        primal_side = residual / (1.0 + norms.b_2) if certified else primal_infeasibility(residual, norms)
        if primal_side > tol or (gap > tol and not gap_inside):
            return [math.inf if weight > 0 else -math.inf for weight in weights]
        budget = tol - gap if gap_inside else tol
        return [-budget / weight if weight > 0 else -math.inf for weight in weights]

    def evaluate(self, lam, R, primal_measures) -> Evaluation:
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
        failing = self.failing_eigenvalues(primal, dual, weights, residual)
        dinf, pairs, lp_slacks = dual_infeasibility(op, lam, norms, accuracy, seed=self.settings.seed,
                                                    guesses=self._eigenvectors, deadline=self.measure_deadline,
                                                    factor=R, failing=failing)
        self._eigenvectors = [pair.vector for pair in pairs]  # the next evaluation's slack is a nearby one
        thetas = [max(0.0, -pair.lower) for pair in pairs]
        sigmas = np.maximum(-lp_slacks, 0.0)
        bound = self.trace_bounds.dual_bound(dual, thetas, sigmas)
        certified_gap = None if bound.value is None else relative_gap(primal, bound.value)
        errors = Errors(primal_infeasibility=primal_infeasibility(residual, norms), dual_infeasibility=dinf,
                        gap=relative_gap(primal, dual), primal_residual=residual / (1.0 + norms.b_2),
                        max_violation=worst_violation,
                        dual_slack_violation=(sum(thetas) + float(sigmas.sum())) / (1.0 + norms.C_inf))
        criteria = criteria_of(self.settings.criterion, errors, certified_gap)
        return Evaluation(primal, dual, errors, pairs, bound, certified_gap, criteria, weights)

    # ------------------------------------------------------------------ measuring a point (continued)
    def snapshot(self) -> Snapshot:
        """The current point, its rows projected onto the constraints that fix them (``FixedDiagonals``), with the
        stationary multipliers when they are better than the iterated ones (and then the iterations continue
        from them); they are tried where stationarity determines them and the phase did not compute them already."""
        st, xp, kernels = self.state, self.backend.xp, self.op.kernels
        with self.timed("certificates"), limited(stage_threads(self.eigen_work, self.settings.threads)):
            if not self.current_is_finite():
                return Snapshot(st.R.copy(), st.lam.copy(), st.c_scale, list(st.ranks),
                                Evaluation.unmeasurable(self.settings))
            # measured in float64 whatever the phase stored (a single-precision run's point, if one was left)
            if self.projects_rows and self.spheres is not None:
                R = self.spheres.projected(st.R, kernels)
            else:
                R = st.R.copy() if st.R.dtype == np.float64 else xp.asarray(st.R, dtype=np.float64)
                if self.fixed_diagonals is not None:
                    self.fixed_diagonals.project(R, xp)
            lam, measures = st.lam / st.c_scale, self.primal_measures(R)
            self.note_size(R, lam)
            evaluation = self.evaluate(lam, R, measures)
            # the Riemannian phase's multipliers are already the least-squares ones (``riemannian.py``): refining
            # them would only repeat the eigenvalue problem (decision record "solver-stationary-multipliers")
            stationary_pays = (self.spheres is None and self.stationarity_determines_multipliers()
                               and evaluation.dual_measure > self.settings.tol and math.isfinite(evaluation.worst))
            if stationary_pays and time.perf_counter() < self.deadline:
                iterations = min(self.tuning.stationary_max_iterations,
                                 max(self.tuning.stationary_min_iterations, self.inner_iterations))
                refined = stationary_multipliers(self.op, R, lam, max_iter=iterations, deadline=self.measure_deadline)
                candidate = self.evaluate(refined, R, measures)
                if candidate.worst < evaluation.worst:
                    evaluation, st.lam = candidate, refined * st.c_scale
        self.say("      " + ", ".join(f"{name} {value:.2e}" for name, value in evaluation.criteria.items()))
        return Snapshot(R, st.lam.copy(), st.c_scale, list(st.ranks), evaluation)

    def current_is_finite(self) -> bool:
        """Whether the current factor and multipliers are finite."""
        return self.op.kernels.all_finite(self.state.R) and bool(self.backend.xp.isfinite(self.state.lam).all())

    def stationarity_determines_multipliers(self) -> bool:
        """Whether (C - A*(lambda)) R = 0 can determine the multipliers: no more of them than entries of the factor.
        With more, the least squares fits stationarity exactly and leaves the slack off range(R) to chance (decision
        record "solver-stationary-multipliers")."""
        layout = self.op.layout
        entries = sum(n * r for n, r in zip(layout.sizes, self.state.ranks)) + layout.n_lp
        return self.problem.m <= entries
