"""The outcome of a solve: the status its best point earns, the evidence for infeasibility or unboundedness, and the
:class:`~cvxpy_culorads.Result` assembled on the host.

A status is decided here only: OPTIMAL when the criteria measured on the returned point hold and its objective owes
no more than tol to its residual (``evaluation.residual_share``); otherwise what stopped the solve (a limit, Ctrl-C),
or INACCURATE within ``reduced_tol``, STALLED above it, and for a stalled point the
infeasibility evidence of the multipliers' direction (:func:`infeasibility_evidence`). A solve that ends without an
answer on a problem small enough for the interior-point method then looks for a proof (:func:`with_certificate`):
the engine solves the problem's Farkas and ray problems (``certify/rays.py``), and a ray that passes the independent
check makes the status INFEASIBLE or UNBOUNDED, with the ray as ``Result.certificate``.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from cvxpy_culorads.backends.memory import interior_point_work_bytes
from cvxpy_culorads.certify.certificates import farkas_violations, is_primal_ray
from cvxpy_culorads.certify.rays import check_farkas, check_ray, farkas_problem, ray_problem
from cvxpy_culorads.result import Result, Status
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.evaluation import Evaluation, residual_share

__all__ = ["result_of", "status_of", "divergence_status", "infeasibility_evidence", "with_certificate",
           "INFEASIBLE_SIZE_FACTOR"]

# the multipliers' direction is evidence of infeasibility when every feasible point would have to be this many
# times larger than the largest the method reached
INFEASIBLE_SIZE_FACTOR = 1e6


def divergence_status(run) -> tuple[Status, str]:
    """The status of iterates that ran away or became non-finite: UNBOUNDED_INACCURATE when the point, scaled to
    size one, is an approximate primal ray (``certificates.is_primal_ray``), else NUMERICAL_ERROR."""
    R = run.state.R
    size = run.op.kernels.inner(R, R)
    residual, _, objective = run.primal_measures(R)
    if is_primal_ray(objective, residual, size, run.norms, run.settings.inaccurate_tol):
        return Status.UNBOUNDED_INACCURATE, (f"the iterates ran away along a primal ray: at tr X = {size:.3g}, "
                                            f"<C, X> = {objective:.3g} and ||A(X) - b||_2 = {residual:.3g}")
    return Status.NUMERICAL_ERROR, ""


def result_of(run, best, stop_status: Status | None, evidence: str, route: str) -> Result:
    settings, layout, backend = run.settings, run.op.layout, run.backend
    evaluation = best.evaluation
    # one more pass of the operator, only where it can matter: a point that meets the criteria
    share = residual_share(run.op, best.R, best.lam / best.c_scale, evaluation) if evaluation.worst <= settings.tol \
        else 0.0
    status = status_of(evaluation, stop_status, settings, share)
    if status is Status.STALLED:
        farkas = infeasibility_evidence(run)
        status, evidence = (Status.INFEASIBLE_INACCURATE, farkas) if farkas else (status, evidence)
    # the multipliers unscaled where they are (a pass of one core over 10^8 of them took 0.2 s)
    R, dual = backend.to_host_together([best.R, best.lam / (best.c_scale * run.op.row_scale)])
    factors = tuple(np.ascontiguousarray(R[o:o + n, :r]) for o, n, r in zip(layout.offsets, layout.sizes, best.ranks))
    x_lp = R[layout.lp_offset:, 0] ** 2
    message = "; ".join(filter(None, [message_of(status, evaluation, settings, share), evidence,
                                      f"dual bound: {evaluation.bound.how}"]))
    result = Result(status=status, primal_objective=evaluation.primal_objective,
                    dual_objective=evaluation.dual_objective, errors=evaluation.errors,
                    criteria=dict(evaluation.criteria), dual_bound=evaluation.bound.value,
                    certified_gap=evaluation.certified_gap, factors=factors,
                    x_lp=x_lp, dual=dual, iterations=dict(run.iterations), ranks=tuple(best.ranks),
                    solve_time=run.elapsed(), setup_time=run.setup_time, stage_times=dict(run.stage_times),
                    peak_device_bytes=max(run.peak_device_bytes, backend.pool_bytes()),
                    min_eigenvalues=tuple(pair.value for pair in evaluation.eigenpairs),
                    device=run.device(), message=message, route=route, plan=run.plan_reasons(),
                    log=tuple(run.log or ()))
    return result


def status_of(evaluation: Evaluation, stop_status: Status | None, settings: Settings,
              share: float = 0.0) -> Status:
    """OPTIMAL when the criteria and the ``share`` of the gap the residual makes (``evaluation.residual_share``) are
    within tol (whatever stopped the run); else what stopped it; else INACCURATE within ``reduced_tol``, STALLED
    above it, NUMERICAL_ERROR for a point that could not be measured."""
    worst = max(evaluation.worst, share)
    if worst <= settings.tol:
        return Status.OPTIMAL
    if stop_status is not None:
        return stop_status
    if worst <= settings.inaccurate_tol:
        return Status.INACCURATE
    return Status.STALLED if math.isfinite(worst) else Status.NUMERICAL_ERROR


def infeasibility_evidence(run) -> str:
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


# the statuses whose point is no answer and that a proof may settle (a limit or Ctrl-C ends the solve as it is)
_UNSETTLED = frozenset({Status.STALLED, Status.NUMERICAL_ERROR, Status.INFEASIBLE_INACCURATE,
                        Status.UNBOUNDED_INACCURATE})


def with_certificate(problem, settings: Settings, result: Result, solve) -> Result:
    """``result``, or where it has no answer (``_UNSETTLED``) and the problem is small enough for the
    interior-point method, the same result with status INFEASIBLE or UNBOUNDED and the checked ray
    (``certify/rays.py``) when one is found within the time left. ``solve(problem, settings)`` is the engine's
    solve without this search (a Farkas or ray problem is always feasible and bounded, so it needs none).

    The Farkas problem is solved first where the evidence does not point to unboundedness: a problem that is both
    infeasible and unbounded is reported infeasible, as CVXPY's conic solvers do."""
    if result.status not in _UNSETTLED or interior_point_work_bytes(problem) is None:
        return result
    start = time.perf_counter()
    searches = [_farkas_ray, _primal_ray] if problem.m else [_primal_ray]  # no constraint, no Farkas ray
    if result.status is Status.UNBOUNDED_INACCURATE:
        searches.reverse()
    for search in searches:
        left = settings.time_limit - result.solve_time - (time.perf_counter() - start)
        if not left > 0.0:
            break
        auxiliary = dataclasses.replace(settings, time_limit=left, keep_log=False)
        try:
            found = search(problem, auxiliary, solve)
        except MemoryError:  # the auxiliary problem does not fit in the memory left: no ray from it
            found = None
        if found is not None:
            status, certificate, how = found
            return dataclasses.replace(result, status=status, certificate=certificate,
                                       solve_time=result.solve_time + time.perf_counter() - start,
                                       message=f"{message_of(status, None, settings)}: {how} (the solve itself ended "
                                               f"{result.status.value}: {result.message})")
    return dataclasses.replace(result, solve_time=result.solve_time + time.perf_counter() - start)


def _farkas_ray(problem, settings: Settings, solve):
    """(INFEASIBLE, certificate, how) from the multipliers of the Farkas problem, or None."""
    auxiliary = solve(farkas_problem(problem), settings)
    if not (auxiliary.status.has_solution and auxiliary.primal_objective > 0.0):
        return None
    certificate = check_farkas(problem, auxiliary.dual, settings.tol)
    if certificate is None:
        return None
    return Status.INFEASIBLE, certificate, (f"a Farkas ray y with b'y = 1 and violations {certificate.violation:.2e} "
                                            f"(tol = {settings.tol:g})")


def _primal_ray(problem, settings: Settings, solve):
    """(UNBOUNDED, certificate, how) from the solution of the ray problem, or None."""
    auxiliary = solve(ray_problem(problem), settings)
    if not (auxiliary.status.has_solution and auxiliary.primal_objective < 0.0):
        return None
    certificate = check_ray(problem, auxiliary.factors, auxiliary.x_lp[:problem.n_lp], settings.tol,
                            descent=settings.inaccurate_tol)
    if certificate is None:
        return None
    return Status.UNBOUNDED, certificate, (f"a primal ray D of unit size with <C, D> = {certificate.objective:.3g} "
                                           f"and ||A(D)||_inf = {certificate.violation:.2e} ||A||_inf")


def message_of(status: Status, evaluation: Evaluation | None, settings: Settings, share: float = 0.0) -> str:
    measures = "" if evaluation is None else ", ".join(evaluation.criteria)
    if evaluation is not None and evaluation.worst <= settings.tol < share:  # demoted by the residual share
        return (f"{measures} within tol = {settings.tol:g}, but the gap hides a residual share of {share:.2g}: the "
                "objective owes more than tol to the primal residual (lambda'(A(X) - b)), so it is not shown within "
                "tol of the optimum")
    return {
        # (only criterion="dimacs" can leave the certified gap above tol at OPTIMAL)
        Status.OPTIMAL: f"{measures} within tol = {settings.tol:g}" + (
            f", but the certified gap {evaluation.certified_gap:.2g} exceeds tol: the paper's rule does not prove the "
            "objective within tol of the optimum" if evaluation is not None
            and (evaluation.certified_gap or 0.0) > settings.tol else ""),
        Status.INACCURATE: f"stopped with {measures} within reduced_tol = {settings.inaccurate_tol:g} but not all "
                           f"within tol = {settings.tol:g}",
        Status.STALLED: f"stopped without progress, {measures} not all within reduced_tol = "
                        f"{settings.inaccurate_tol:g}: the point is no answer",
        Status.INFEASIBLE: "the problem is infeasible",
        Status.UNBOUNDED: "the problem is unbounded",
        Status.INFEASIBLE_INACCURATE: "the problem appears to be infeasible",
        Status.UNBOUNDED_INACCURATE: "the problem appears to be unbounded",
        Status.TIME_LIMIT: f"time_limit = {settings.time_limit:g} s reached",
        Status.ITERATION_LIMIT: f"max_iter = {settings.max_iter} reached",
        Status.INTERRUPTED: "interrupted by the user",
        Status.NUMERICAL_ERROR: "the iterates diverged or became non-finite",
    }[status]
