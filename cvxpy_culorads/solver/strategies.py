"""The strategies a solve runs, each a sequence of steps of one shape: run a phase (or two), measure the point,
decide what comes next.

:func:`run_strategy` is the one loop: it calls a strategy's ``step`` until that returns something other than
:attr:`Step.CONTINUE`. A strategy never raises to steer: a phase stopped by a limit, by the hand-over to the
interior-point method or by iterates that ran away is a :class:`Step` value handed up, and :attr:`Step.FINISHED` says
the strategy is done (the criteria hold, or nothing is left to try at this rank). The low-rank strategies:

- :class:`AlmAdmm`: phases I (ALM) and II (ADMM), then re-optimisation rounds (the objective scaled up, a short ALM
  run and an ADMM run) while they pay, and saddle escapes (the rank grown along the dual slack's eigenvector) when
  polishing stops paying and the slack keeps a clearly negative eigenvalue;
- :class:`Spheres`: runs of the Riemannian phase with tightening gradient targets, escaping from a fresh wider start;
- :class:`TraceSphere`: runs of phase I on the trace sphere with tightening exit tolerances, escaping by widening.

:func:`interior_point` runs the dense interior-point method from its own start.
"""
from __future__ import annotations

import math
from typing import Protocol

from cvxpy_culorads.backends.memory import widening_fits
from cvxpy_culorads.phases.admm import ADMMPhase
from cvxpy_culorads.phases.alm import LBFGS, ALMPhase
from cvxpy_culorads.phases.interior_point import InteriorPointPhase
from cvxpy_culorads.phases.riemannian import RiemannianPhase
from cvxpy_culorads.phases.state import PhaseOutcome, SolverState
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.evaluation import Evaluation
from cvxpy_culorads.solver.plan import LowRankPhases
from cvxpy_culorads.solver.run import Run, Step

__all__ = ["Strategy", "AlmAdmm", "Spheres", "TraceSphere", "strategy_for", "run_strategy", "interior_point"]

MEMORY_BOUND_MESSAGE = "rank increase skipped: the wider factor would not fit in memory"


class Strategy(Protocol):
    """A low-rank strategy: ``step`` advances it by one phase run (or pair) and its measurement."""

    def step(self, run: Run) -> Step: ...


def run_strategy(run: Run, strategy: Strategy) -> Step:
    """The one loop: ``strategy``'s steps until one ends it; returns how it ended (never :attr:`Step.CONTINUE`)."""
    step = Step.CONTINUE
    while step is Step.CONTINUE:
        step = strategy.step(run)
    return step


def strategy_for(phases: LowRankPhases, run: Run) -> Strategy:
    """The strategy that runs a plan's low-rank phases."""
    if phases is LowRankPhases.SPHERES:
        return Spheres(run)
    if phases is LowRankPhases.TRACE_SPHERE:
        return TraceSphere(run)
    return AlmAdmm()


class AlmAdmm:
    """Phases I and II, then re-optimisation rounds and saddle escapes while they pay. A negative eigenvalue of the
    dual slack means a saddle point only once the multipliers have settled: polish first, and escape (grow the rank)
    when polishing stops paying."""

    def __init__(self):
        self.current = None  # the last measured point
        self.escapes = self.reopts = 0
        self.polish_stalled = False

    def step(self, run: Run) -> Step:
        settings = run.settings
        if self.current is None:
            # from a warm start phase I runs to tol: it starts where phase II's sweeps would gain little per step
            stop = _two_phases(run, min(settings.tol, settings.lorads.phase1_tol)
                               if run.plan.warm_start is not None else None)
            if stop is not None:
                return stop
            self.current = run.keep_current()
            return Step.CONTINUE
        directions = _escape_directions(run, self.current.evaluation)
        tuning = run.tuning
        can_polish = self.reopts < tuning.reopt_rounds[settings.lorads.reopt_level]
        escaping = (directions is not None and self.escapes < tuning.max_escapes
                    and (self.polish_stalled or not can_polish))
        if escaping:
            self.escapes += 1
            _escape(run, directions)
            stop = _two_phases(run)
        elif can_polish and self.current.evaluation.worst > settings.tol:
            self.reopts += 1
            stop = _reoptimise(run)
        else:
            return Step.FINISHED
        if stop is not None:
            return stop
        previous = self.current.evaluation
        self.current = run.keep_current()
        self.polish_stalled = self.current.evaluation.stalled_since(previous)
        if escaping and self.current.evaluation.worst > previous.worst:
            self.escapes = tuning.max_escapes  # a wider factor made it worse (rgg 2^22 grew to 242 columns, too many)
        return Step.CONTINUE


class Spheres:
    """Runs of the Riemannian phase (``phases/riemannian.py``), measured after each, until the criteria hold; each
    run's gradient target is ``Tuning.riemannian_target_factor`` times the last one's. When a tighter run did not
    halve the slack's negative eigenvalues, the point is a low-rank saddle: the rank grows along the slack's
    eigenvector, and the wider factor starts afresh (:func:`_escape`). Finished when a run finds no descent and no
    escape is possible. The schedule's alternatives that were measured are in the decision record
    "solver-riemannian-schedule".

    In mixed precision (``Run.single_precision``) the runs are single precision until one stalls (single precision
    resolves no more descent, or a step finds none) without meeting the criteria: the runs go on in double precision
    from its point, with fresh L-BFGS pairs, within what is left of the limits (the polish); a fresh start after an
    escape is single precision again (decision record "mixed-precision")."""

    def __init__(self, run: Run):
        self.target = run.tuning.riemannian_first_target * run.settings.tol
        self.escapes, self.previous = 0, None
        self.lbfgs = LBFGS(run.op.kernels, run.settings.lorads.lbfgs_memory)
        self.single = run.single_precision

    def step(self, run: Run) -> Step:
        settings = run.settings
        phase = RiemannianPhase(run.op, run.state, settings, run.norms, run.spheres, target=self.target,
                                lbfgs=self.lbfgs, rounded_halo_target=run.tuning.rounded_halo_target,
                                single=self.single)
        stop = run.run_phase(phase, "riemannian")
        if stop is not None:
            return stop
        if phase.outcome is PhaseOutcome.FAILED:
            return Step.DIVERGED
        evaluation = run.keep_current().evaluation
        if evaluation.worst <= settings.tol:
            return Step.FINISHED
        if phase.single and phase.outcome is PhaseOutcome.STALLED:  # single precision's stall, not the point's
            run.say(f"single precision stalled at gradient measure {phase.measure:.2e} (target {self.target:.2e}, "
                    f"its rounding resolves {phase.floor:.2e}): going on in double precision")
            self.single, self.previous = False, None
            self.lbfgs.reset()  # float32 pairs; and the point moved to double's rounding
            return Step.CONTINUE
        # no move at all: a zero gradient (rank 1 has no tangent directions), where only a wider factor can descend
        saddle = (phase.outcome is PhaseOutcome.STALLED or phase.moves == 0
                  or evaluation.stalled_since(self.previous))
        tuning = run.tuning
        directions = _escape_directions(run, evaluation) if saddle and self.escapes < tuning.max_escapes else None
        if directions is not None:
            self.escapes += 1
            _escape(run, directions, restart_seed=settings.seed + self.escapes)
            self.lbfgs.reset()
            self.previous = None  # the wider factor gets a run of its own before it is judged stalled
            self.single = run.single_precision  # a fresh start: single precision again where mixed
            return Step.CONTINUE
        if phase.outcome is PhaseOutcome.STALLED or phase.moves == 0:
            return Step.FINISHED  # no descent left at this rank, and no escape
        # a point that missed tol narrowly gets a shorter run, judged for a stall against the evaluation before
        close = evaluation.worst <= tuning.riemannian_close * settings.tol
        factor = tuning.riemannian_close_factor if close else tuning.riemannian_target_factor
        self.target = factor * min(self.target, phase.measure)
        self.previous = self.previous if close else evaluation
        return Step.CONTINUE


class TraceSphere:
    """Runs of phase I on the trace sphere (``phases/alm.py``), measured after each, until the criteria hold: each run
    goes on from the last one's multipliers and penalty with an exit tolerance ``Tuning.trace_sphere_tightening`` times
    smaller. When a tighter run did not halve the slack's negative eigenvalues, the point is a low-rank saddle and the
    rank grows along the slack's eigenvector (:func:`_escape`). The two-phase route's re-optimisation rounds (C scaled
    up) are not used here: on the sphere they moved SDPLIB's theta1 from a feasible point to one it never left.
    Finished when a run ends without reaching its tolerance and no escape is possible."""

    def __init__(self, run: Run):
        self.exit_tol, self.escapes, self.previous = run.settings.tol, 0, None

    def step(self, run: Run) -> Step:
        settings = run.settings
        alm = ALMPhase(run.op, run.state, settings, run.norms, run.max_ranks,
                       outer_budget=settings.lorads.max_alm_outer, sphere=run.trace_sphere, exit_tol=self.exit_tol)
        stop = _run_alm(run, alm)
        if stop is not None:
            return stop
        evaluation = run.keep_current().evaluation
        if evaluation.worst <= settings.tol:
            return Step.FINISHED
        directions = (_escape_directions(run, evaluation) if evaluation.stalled_since(self.previous)
                      and self.escapes < run.tuning.max_escapes else None)
        if directions is not None:
            self.escapes += 1
            _escape(run, directions)
            self.previous = None  # the wider factor gets a run of its own before it is judged stalled
            return Step.CONTINUE
        if alm.outcome is not PhaseOutcome.CONVERGED or self.exit_tol < run.tuning.trace_sphere_smallest_tol:
            return Step.FINISHED
        self.exit_tol *= run.tuning.trace_sphere_tightening
        self.previous = evaluation
        return Step.CONTINUE


def interior_point(run: Run) -> Step:
    """The interior-point method from its own starting point; its best iterate replaces the state's point, measured
    and kept. Returns :attr:`Step.FINISHED`, or the step that stopped it."""
    run.in_interior_point = True
    phase = InteriorPointPhase(run.problem, run.interior_point_backend, run.state, run.op.layout, run.norms,
                               run.settings.tol, run.op.row_scale,
                               max_iterations=run.tuning.interior_point_max_iterations, home=run.backend)
    stop = run.run_phase(phase, "interior_point")
    if stop is not None:
        return stop
    run.keep_current()
    return Step.FINISHED


def _two_phases(run: Run, switch_tol: float | None = None) -> Step | None:
    """Phase I until the switch tolerance (``lorads.phase1_tol``, or ``switch_tol``), then phase II with its first-run
    exit (None, or the step that stopped a phase)."""
    stop = _run_alm(run, ALMPhase(run.op, run.state, run.settings, run.norms, run.max_ranks,
                                  outer_budget=run.settings.lorads.max_alm_outer, switch_tol=switch_tol))
    if stop is not None:
        return stop
    rho_max = _switch_to_admm(run.state, run.settings)
    return _run_admm(run, ADMMPhase(run.op, run.state, run.settings, run.norms,
                                    max_sweeps=run.settings.lorads.max_admm_iter, reopt=False, rho_max=rho_max,
                                    cg_factor=run.tuning.admm_cg_tolerance[0]))


def _run_alm(run: Run, alm: ALMPhase) -> Step | None:
    """Phase I; non-finite iterates are :attr:`Step.DIVERGED` (the solve then reports the best point measured)."""
    stop = run.run_phase(alm, "alm")
    if stop is not None:
        return stop
    if alm.growth_skipped:
        run.say(MEMORY_BOUND_MESSAGE)
    return Step.DIVERGED if alm.outcome is PhaseOutcome.FAILED else None


def _run_admm(run: Run, admm: ADMMPhase) -> Step | None:
    """Phase II; when it diverged beyond its restarts, the point it leaves is measured like any other (a snapshot
    never beats a better one), and the log says so."""
    stop = run.run_phase(admm, "admm")
    if stop is None and admm.outcome is PhaseOutcome.FAILED:
        run.say(f"phase II diverged after {admm.restarts} restarts")
    return stop


def _escape_directions(run: Run, evaluation: Evaluation):
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


def _escape_ranks(run: Run, directions) -> list[int]:
    """The ranks after an escape along ``directions``: x ``rank_growth`` (at least +1) where a block has one."""
    return [r if d is None else min(max(r + 1, int(math.ceil(run.settings.lorads.rank_growth * r))), r_max)
            for r, r_max, d in zip(run.state.ranks, run.max_ranks, directions)]


def _escape(run: Run, directions, restart_seed: int | None = None) -> None:
    """Leave a low-rank saddle: grow the ranks of the blocks with escape directions, seeding the new
    columns along them (scaled to a tenth of the block's trace), then phase I starts again. With ``restart_seed``
    the wider factor is instead a fresh random start (the Riemannian phase's escapes, where L-BFGS crawled from the
    widened saddle point: decision record "solver-riemannian-schedule")."""
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
    rho_max = settings.lorads.rho_max
    rho = state.rho * settings.lorads.heuristic_factor
    if state.rho > rho_max:
        rho = min(math.sqrt(state.rho / rho_max) * rho_max, state.rho)
        rho_max = rho
    state.rho = min(rho, rho_max)
    return rho_max


def _reoptimise(run: Run) -> Step | None:
    """One re-optimisation round: scale C up, a short ALM run, then ADMM with the strict exit (None, or the step
    that stopped a phase)."""
    st, settings = run.state, run.settings
    kappa = settings.lorads.reopt_scale
    st.c_scale *= kappa
    st.lam = st.lam * kappa
    run.say(f"re-optimisation: objective scale {st.c_scale:g}")
    stop = _run_alm(run, ALMPhase(run.op, st, settings, run.norms, run.max_ranks,
                                  outer_budget=run.tuning.reopt_alm_outer, rho_factor=math.sqrt(2.0),
                                  grow_ranks=len(run.op.layout.sizes) <= 10,
                                  switch_when_feasible=False))
    if stop is not None:
        return stop
    rho_max = _switch_to_admm(st, settings)
    return _run_admm(run, ADMMPhase(run.op, st, settings, run.norms, max_sweeps=settings.lorads.max_admm_iter,
                                    reopt=True, rho_max=rho_max, cg_factor=run.tuning.admm_cg_tolerance[1]))
