"""The plan of a solve: which low-rank phases, which device, which start ranks, whether the interior-point method may
run, and why, decided from the problem and the settings alone before any device is touched.

:func:`plan` is pure (host work only: the block layout, the constraints' structure, the cost models' estimates), so a
test can check what a solve will do without solving, and ``verbose`` and ``Result.plan`` say the reasons. The solve
then carries the plan out (:mod:`cvxpy_culorads.solver.driver`); what only the device can tell (free memory, which may
narrow the start) is added to the reasons there.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.backends.backend import requested_device
from cvxpy_culorads.backends.memory import DENSE_LIMIT
from cvxpy_culorads.certify.bounds import FixedDiagonals, FixedTrace
from cvxpy_culorads.distributed.operators import check_splittable
from cvxpy_culorads.operators.compressed import BlockLayout
from cvxpy_culorads.phases.riemannian import Spheres
from cvxpy_culorads.phases.state import RANK_FACTOR, SPHERES_RANK_FACTOR, block_ranks
from cvxpy_culorads.settings import Algorithm, Settings
from cvxpy_culorads.solver.costs import DeviceCosts
from cvxpy_culorads.solver.tuning import DEFAULT_TUNING, Tuning
from cvxpy_culorads.solver.warm import WarmStart

__all__ = ["Plan", "LowRankPhases", "plan", "split_refusal"]


class LowRankPhases(enum.Enum):
    """The low-rank phases a plan runs."""

    SPHERES = "riemannian"  # L-BFGS on the product of spheres that constraints fixing every diagonal entry make
    TRACE_SPHERE = "trace_sphere"  # phase I with one block's trace constraint kept exact, alone until certified
    ALM_ADMM = "alm_admm"  # phases I (ALM) and II (ADMM), as in the cuLoRADS paper


@dataclass(frozen=True)
class Plan:
    """What a solve will do (:func:`plan`), with the host-side facts it was decided from.

    ``phases``: the low-rank phases; ``device``: "auto", "cpu" or "gpu" after ``CULORADS_DEVICE`` ("auto" is settled
    by ``device_costs`` once the GPU is probed); ``split``: the rows are split over several devices;
    ``initial_ranks``/``max_ranks``: per PSD block (the start may be narrowed to what fits in device memory);
    ``cost_ranks``: LoRADS's start, on which the cost models were calibrated; ``interior_point_allowed``: the dense
    interior-point method may run at all (its size limits are checked by the solve); ``reasons``: one sentence per
    decision; ``warm_start``: the previous result's point the low-rank phases start from, or None; ``tuning``: the
    solver's tuning constants; ``split_refused``: why ``devices`` asked for a split that the problem does not take
    (it is then solved on one device), or None."""

    phases: LowRankPhases
    device: str
    split: bool
    layout: BlockLayout
    fixed_diagonals: FixedDiagonals | None
    trace_sphere: FixedTrace | None
    initial_ranks: tuple[int, ...]
    max_ranks: tuple[int, ...]
    cost_ranks: tuple[int, ...]
    device_costs: DeviceCosts | None
    interior_point_allowed: bool
    reasons: tuple[str, ...]
    warm_start: WarmStart | None = None
    tuning: Tuning = DEFAULT_TUNING
    split_refused: str | None = None


def plan(problem, settings: Settings, warm_start: WarmStart | None = None, tuning: Tuning = DEFAULT_TUNING) -> Plan:
    """The plan for solving ``problem`` with ``settings`` (a ValueError for settings that contradict the problem),
    starting from ``warm_start`` where given: at its ranks (the route then weighs the low-rank phases at a warm start's
    share of their steps, ``WarmStart.route_costs``)."""
    layout = BlockLayout.of(problem)
    fixed = FixedDiagonals.of(problem, layout.offsets, np)
    split_refused = split_refusal(problem, settings)
    split = settings.device_count > 1 and split_refused is None
    reasons = [] if split_refused is None else [f"one device although devices={settings.devices!r}: {split_refused}"]
    structured = settings.algorithm is not Algorithm.ALM_ADMM
    trace_sphere = None
    if structured and Spheres.cover(problem, layout, fixed):
        phases = LowRankPhases.SPHERES
        reasons.append("L-BFGS on the product of spheres: every constraint fixes a diagonal entry")
    else:
        # a constraint a tr X = b is kept exact by phase I (``phases/alm.py``); not on split rows, whose kernel set
        # has no sphere line search (the plain ALM treats it as any other constraint)
        trace_sphere = FixedTrace.of(problem) if structured and not split and _may_fix_trace(problem, layout) else None
        phases = LowRankPhases.ALM_ADMM if trace_sphere is None else LowRankPhases.TRACE_SPHERE
        reasons.append("phase I on the trace sphere: one block with a trace constraint"
                       if trace_sphere is not None else
                       "phases I (ALM) and II (ADMM)" + (": algorithm='alm_admm'" if not structured else ""))
    rank_factor = settings.lorads.rank_factor
    if rank_factor is None:
        # the phases that keep a constraint exact take fewer steps from the wider start (decision record
        # "solver-start-rank")
        rank_factor = RANK_FACTOR if phases is LowRankPhases.ALM_ADMM else SPHERES_RANK_FACTOR
    initial, max_ranks = block_ranks(layout, settings.rank, rank_factor)
    if warm_start is not None:
        initial, max_ranks = list(warm_start.ranks), [max(r, bound) for r, bound in zip(warm_start.ranks, max_ranks)]
        reasons.append(warm_start.kept)
    cost_ranks = block_ranks(layout, settings.rank, settings.lorads.rank_factor or RANK_FACTOR)[0]
    device = requested_device(settings.device)
    device_costs = DeviceCosts.of(problem, cost_ranks) if device == "auto" and not split else None
    if split:
        reasons.append(f"rows split over {settings.device_count} devices")
    interior_point_allowed = not split and (settings.lorads.interior_point_handover
                                            or settings.algorithm is Algorithm.INTERIOR_POINT)
    return Plan(phases=phases, device=device, split=split, layout=layout, fixed_diagonals=fixed,
                trace_sphere=trace_sphere, initial_ranks=tuple(initial), max_ranks=tuple(max_ranks),
                cost_ranks=tuple(cost_ranks), device_costs=device_costs, interior_point_allowed=interior_point_allowed,
                reasons=tuple(reasons), warm_start=warm_start, tuning=tuning, split_refused=split_refused)


def _may_fix_trace(problem, layout: BlockLayout) -> bool:
    """Whether a constraint may be a trace constraint (``FixedTrace``): not where the only block, of order n > 1, has
    one coordinate per constraint (completion's observations), as a trace constraint has n; the layout knows without
    FixedTrace's passes over the coordinates."""
    return not (problem.num_blocks == 1 and layout.sizes[0] > 1
                and layout.constraints_touching[0] == problem.A_coords[0].con.size)


def split_refusal(problem, settings: Settings) -> str | None:
    """Why the split that ``settings.devices`` asks for does not take ``problem``, which is then solved on one device
    (a user who sets ``devices`` for a batch of problems wants the small ones solved too), or None: one device was
    asked for, or the split takes it. Reads the problem's sizes only (no pass over its data)."""
    if settings.device_count <= 1:
        return None
    try:
        check_splittable(problem)
    except ValueError as error:
        return str(error)
    order = problem.block_sizes[0]
    if order <= DENSE_LIMIT:
        return (f"blocks of order up to {DENSE_LIMIT} stay on one device (their eigenvalue problems are dense), this "
                f"one has order {order}")
    return None
