"""The solve: :func:`solve` plans (:mod:`~cvxpy_culorads.solver.plan`), carries the plan out on a
:class:`~cvxpy_culorads.solver.run.Run` and returns a :class:`~cvxpy_culorads.Result`.

The route: problems small enough for the dense interior-point method start with it where it is estimated cheaper
(``Settings.algorithm``); the low-rank strategy the plan chose (:mod:`~cvxpy_culorads.solver.strategies`) runs while
the criteria do not hold; the interior-point method takes over when the low-rank phases used their share
(``interior_point_patience`` inner iterations or its estimated time) or end without meeting ``tol``, where low-rank
methods stall (degenerate or high-rank optima); an interior-point start that misses ``reduced_tol`` hands over to
the low-rank phases, one within it is the answer (INACCURATE). Every stage reports how it ended as a
:class:`~cvxpy_culorads.solver.run.Step`, so one function (:func:`_routes`) reads the whole route, and one
(:func:`_solve`) turns its end into the outcome: the best point measured, with an honest status
(:mod:`~cvxpy_culorads.solver.outcome`). Ctrl-C makes it INTERRUPTED, a device out of memory returns the best point
measured before, and the time limit holds through the final measurement. A badly scaled block is solved as
X = D Y D, and a split problem in the order its shards take; both are undone on the answer.
"""
from __future__ import annotations

import dataclasses
import time

from cvxpy_culorads.distributed import RowOrder
from cvxpy_culorads.problem.scaling import DataUnits, DiagonalScaling
from cvxpy_culorads.result import Result, Status
from cvxpy_culorads.settings import Algorithm, Settings
from cvxpy_culorads.solver.log import LOGGER, VERSION, logging_for, logs
from cvxpy_culorads.solver.outcome import divergence_status, result_of, with_certificate
from cvxpy_culorads.solver.plan import plan, split_refusal
from cvxpy_culorads.solver.run import Run, Step
from cvxpy_culorads.solver.strategies import interior_point, run_strategy, strategy_for
from cvxpy_culorads.solver.tuning import DEFAULT_TUNING, Tuning
from cvxpy_culorads.solver.warm import WarmStart, resumed_fields

__all__ = ["solve"]

OUT_OF_MEMORY_MESSAGE = "stopped: the device ran out of memory; the best point measured before is returned"
SET_UP_LEFTOVER = 1e-3  # seconds of time limit a solve keeps when its host set-up (renumbering, scaling) used the rest
INTERRUPT_MEASURE_SECONDS = 1.0  # what measuring the point costs after Ctrl-C when none was measured yet


def solve(problem, settings: Settings | None = None, *, warm_start: Result | None = None,
          tuning: Tuning | None = None, **options) -> Result:
    """Solve ``problem`` (an :class:`~cvxpy_culorads.SDPProblem`) with LoRADS.

    **Arguments:**

    - ``problem``: the SDP.
    - ``settings``: a :class:`~cvxpy_culorads.Settings`; keyword ``options`` override its fields
      (unknown names raise ``ValueError``).
    - ``warm_start``: the :class:`~cvxpy_culorads.Result` of an earlier solve of a problem with the same variables
      (PSD blocks' orders, number of nonnegative variables): the low-rank phases start from its factors, ranks,
      and, where the number of constraints is the same, its multipliers and penalty (``solver/warm.py``); with other
      variables the solve starts cold and ``Result.message`` says why.
    - ``tuning``: the solver's tuning constants (:class:`~cvxpy_culorads.solver.tuning.Tuning`), for tests and
      studies; None: the defaults.

    **Returns:** a :class:`~cvxpy_culorads.Result`; its status is OPTIMAL only when the criteria measured on the
    returned factors and multipliers are all within ``tol``. A badly scaled block is solved as X = D Y D
    (``scaling.py``); the factors returned are the original problem's.
    """
    settings = Settings.from_options(settings, **options)
    with logging_for(settings.verbose):
        result = _solve_on_devices(problem, settings, warm_start, tuning)
        if logs(settings.verbose):
            LOGGER.info(result.summary())
    return result


def _solve_on_devices(problem, settings: Settings, warm_start: Result | None, tuning: Tuning | None) -> Result:
    """:func:`solve` on one device, or split over the devices in the order their shards take."""
    warm, refusal = WarmStart.of(problem, warm_start)
    tuning = DEFAULT_TUNING if tuning is None else tuning
    if settings.device_count == 1 or split_refusal(problem, settings) is not None:
        return with_certificate(problem, settings, _solve_scaled(problem, settings, warm, refusal, tuning),
                                lambda auxiliary, limits: _solve_scaled(auxiliary, limits, None, "", tuning))
    start = time.perf_counter()
    order = RowOrder.of(problem, settings)
    renumbered = problem if order is None else order.apply(problem)
    if order is not None and warm is not None:
        warm = warm.reordered(order.order)
    result = _after_set_up(start, settings, lambda limited: _solve_scaled(renumbered, limited, warm, refusal, tuning))
    if order is None:
        return result
    return dataclasses.replace(result, factors=order.restore(result.factors),
                               message="; ".join(filter(None, [result.message, order.describe()])))


def _solve_scaled(problem, settings: Settings, warm: WarmStart | None, refusal: str, tuning: Tuning) -> Result:
    """:func:`solve` of a problem in the order its shards take, from ``warm`` (its factors in that order), or cold
    for the reason ``refusal`` (which the plan and the message name). The problem is solved in its data's units
    (``scaling.DataUnits``) and its badly scaled blocks as X = D Y D; the answer is mapped back to the user's."""
    start = time.perf_counter()
    scaling = DiagonalScaling.of(problem)
    units = DataUnits.of(problem, rescale=scaling is None)
    problem, warm = units.apply(problem), units.warm_start(warm)
    if scaling is not None:
        problem = scaling.apply(problem)
        warm = None if warm is None else warm.scaled(scaling.diagonals)
    result = _after_set_up(start, settings, lambda limited: _solve(
        Run(problem, limited, _planned(problem, limited, warm, refusal, tuning))))
    result = dataclasses.replace(result, message="; ".join(filter(None, [result.message, refusal])))
    if scaling is not None:
        rescaled = sum(d is not None for d in scaling.diagonals)
        result = dataclasses.replace(result, factors=scaling.unscale_factors(result.factors),
                                     message=f"{result.message}; {rescaled} badly scaled block(s) solved as X = D Y D "
                                             "(min_eigenvalues are those of D S D)")
    return units.unscale(result)


def _after_set_up(start: float, settings: Settings, solve) -> Result:
    """``solve(settings)`` after host set-up that began at ``start`` (a ``time.perf_counter`` value): the set-up is
    part of the solve, so the time limit handed on is what it left, and the times reported include it."""
    spent = time.perf_counter() - start
    result = solve(dataclasses.replace(settings, time_limit=max(settings.time_limit - spent, SET_UP_LEFTOVER)))
    return dataclasses.replace(result, solve_time=result.solve_time + spent, setup_time=result.setup_time + spent)


def _planned(problem, settings: Settings, warm: WarmStart | None, refusal: str, tuning: Tuning):
    """The plan, with the reason a warm start was refused among its reasons."""
    decided = plan(problem, settings, warm, tuning)
    return dataclasses.replace(decided, reasons=decided.reasons + (refusal,)) if refusal else decided


def _solve(run: Run) -> Result:
    problem = run.problem
    changed = ", ".join(f"{name}={value!r}" for name, value in run.settings.changed().items()) or "defaults"
    run.say(f"cvxpy_culorads {VERSION}: {problem!r} on {run.device()}; settings: {changed}")
    run.say(f"plan: {'; '.join(run.plan_reasons())}; initial ranks {run.state.ranks}; {_route(run)}")
    run.say(f"{'phase':>5} {'iter':>7} {'primal obj':>15} {'dual obj':>15} {'pinf':>9} {'gap':>9} "
            f"{'rho':>9} {'rank':>5} {'time':>9}")
    stop_status, evidence = None, ""
    try:
        step = _routes(run)
        if step.limit_status is not None:
            stop_status = step.limit_status
            run.keep_current()
        elif step is Step.DIVERGED:
            stop_status, evidence = divergence_status(run)
            if run.best is None:
                run.keep_current()
    except MemoryError:  # the device ran out of memory although the estimates (memory.py) allowed each step
        run.backend.release_cached_blocks()
        evidence = OUT_OF_MEMORY_MESSAGE
        run.say(evidence)
        if run.best is None:
            run.keep_current()
    except KeyboardInterrupt:
        stop_status = Status.INTERRUPTED
        if run.best is None or not run.best.evaluation.measured:
            # measure the point, briefly (whoever pressed Ctrl-C wants to stop now); a point the interrupt left
            # unfinished gives way to the start, which is at least a point
            run.measure_deadline = min(run.measure_deadline, time.perf_counter() + INTERRUPT_MEASURE_SECONDS)
            if not run.current_is_finite():
                run.state = run.initial_state()
            run.keep_current()
    try:
        result = result_of(run, run.best, stop_status, evidence, _route(run))
    except KeyboardInterrupt:  # during the evidence of infeasibility, which an INTERRUPTED result does not seek
        result = result_of(run, run.best, Status.INTERRUPTED, "", _route(run))
    return dataclasses.replace(result, **resumed_fields(run.state, run.op.row_scale))


def _routes(run: Run) -> Step:
    """The plan's route: the interior-point method first where it starts (its point ends the solve when it stalls
    within ``reduced_tol``), the low-rank strategy while the criteria do not hold, the interior-point method after it
    where it may take over. Returns :attr:`Step.FINISHED`, or the step (a limit, a divergence) that ends the solve."""
    tol = run.settings.tol
    if _interior_point_first(run) and run.interior_point_available():
        step = interior_point(run)
        if step is not Step.FINISHED:
            return step
        worst = run.best.evaluation.worst
        stopped_by_itself = run.iterations["interior_point"] < run.tuning.interior_point_max_iterations
        if tol < worst <= run.settings.inaccurate_tol and stopped_by_itself:
            # where the method stalls this close to tol (no Slater point, unattained multipliers) the low-rank
            # phases stall too: on SDPLIB's hinf, buck3 and the complex fidelity models their 5000 steps never
            # beat its point (decision record "exact-statuses-and-cvxpy-duals")
            run.say(f"the interior-point method stalled within reduced_tol ({worst:.2e}): its point is the answer, "
                    "the low-rank phases do not take over")
            return Step.FINISHED
        if worst > tol:
            run.say("the interior-point method did not meet tol: the low-rank phases take over")
            run.state = run.initial_state()
    if run.best is None or run.best.evaluation.worst > tol:
        step = run_strategy(run, strategy_for(run.plan.phases, run))
        if step is Step.HANDOVER:
            run.say(f"the low-rank phases used their share ({run.inner_iterations} iterations)")
            run.keep_current()
        elif step is Step.DIVERGED:
            # a point was measured, the iterates are no ray and the interior-point method can start afresh
            if run.best is None or divergence_status(run)[0] is not Status.NUMERICAL_ERROR or \
                    not run.interior_point_available():
                return step
            run.say("the low-rank phases diverged: handing over to the interior-point method")
        elif step is not Step.FINISHED:
            return step
    if run.best.evaluation.worst > tol and run.interior_point_available():
        return interior_point(run)
    return Step.FINISHED


def _interior_point_first(run: Run) -> bool:
    """Whether the interior-point method starts (``Settings.algorithm``)."""
    if run.routes is None:
        return False
    method = run.settings.algorithm
    return run.routes.interior_point_first if method is Algorithm.AUTO else method is Algorithm.INTERIOR_POINT


def _route(run: Run) -> str:
    """Which route starts, and why (``Result.route``)."""
    if run.routes is not None:
        first = "interior-point method first" if _interior_point_first(run) else "low-rank phases first"
        algorithm = run.settings.algorithm
        why = (f"algorithm={algorithm.value!r}" if algorithm is not Algorithm.AUTO else
               "by estimated cost, from a warm start" if run.plan.warm_start is not None else "by estimated cost")
        return f"{first} ({why}): {run.routes.describe()}"
    if not run.plan.interior_point_allowed:
        return "low-rank phases only: interior_point_handover=False"
    return "low-rank phases only: too large for the interior-point method"
