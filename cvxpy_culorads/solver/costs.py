"""What each route to a problem is expected to cost, so that the driver starts with the cheaper one.

The interior-point method's iterations cost a fixed share per group of blocks (call and launch overheads; small
blocks are held together, ``memory.interior_point_groups``), the dense work on each group (n^3: an inverse, a
Cholesky factorisation and an eigenvalue problem), the Schur complement's assembly (its route's work entries,
``memory.interior_point_routes``) and its factorisation (m^3); they number 10 to 30. The low-rank phases' steps cost
a fixed overhead plus work in n r; where every constraint fixes a diagonal entry or one block's trace (MaxCut, theta:
the phases that keep those constraints exact, ``plan.LowRankPhases``) a few hundred steps do, elsewhere (truss,
buckling, polynomial, copositivity, frequency assignment) the ALM takes tens of thousands. The CPU constants are
fitted, by relative least squares, to measured solve times of small SDPLIB problems on a small CPU
(``benchmarks/studies/routes.py`` prints the estimates beside the measured times). On the GPU the low-rank step is
launch-bound, so its cost is one constant; the interior-point method runs on the host below block order
``DEVICE_MIN_ORDER`` (``phases/interior_point.py``), and above it on the GPU, whose constants are the H100's nominal
rates, not yet fitted. What was measured: decision records "route-cost-model" and "interior-point-route".

``device="auto"`` compares one low-rank step on each device (:class:`DeviceCosts`): the same step count is
expected on both, so the cheaper step wins. The CPU that matters there is a GPU machine's host, many cores with a
fast BLAS, so its constants are fitted apart from the small CPU's (``benchmarks/studies/devices.py``; decision records
"route-cost-model" and "device-auto").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.backends.memory import interior_point_routes
from cvxpy_culorads.certify.bounds import FixedDiagonals, FixedTrace
from cvxpy_culorads.operators.compressed import BlockLayout
from cvxpy_culorads.phases.interior_point import DEVICE_MIN_ORDER
from cvxpy_culorads.phases.riemannian import Spheres

__all__ = ["DeviceCosts", "RouteCosts", "interior_point_iteration_parts", "interior_point_iteration_seconds",
           "low_rank_step_seconds", "low_rank_steps"]

IPM_ITERATIONS = 15  # the median over the calibration set (8 to 29)


@dataclass(frozen=True)
class _IterationCosts:
    """Seconds of one interior-point iteration: per group of blocks, per n^3 of a group, per Schur-complement work
    entry, per m^3."""

    group: float
    cube: float
    route_entry: float
    schur_cube: float


IPM_CPU = _IterationCosts(8.2e-4, 1.8e-9, 1.8e-8, 7.3e-11)  # fitted on the 2-core CPU
# fitted on one H200 (``benchmarks/studies/interior_point_costs.py --device gpu``, 16 Mittelmann and SDPLIB instances;
# decision record "interior-point-route"): a group's decompositions are launch-bound cuSOLVER calls
IPM_GPU = _IterationCosts(7.0e-3, 1.9e-10, 3.1e-11, 2.6e-14)
LOW_RANK_STEPS = 300  # what an easy problem (MaxCut) needs on the phases that keep its constraints exact
# what the ALM needs elsewhere: trto3, vibra3, buck3 and shmup2 did not converge in 3,300 to 5,000 steps, neu1g,
# taha1a and fap09 not in 45 s of H100 steps (decision record "interior-point-route")
LOW_RANK_HARD_STEPS = 20000
# an interior-point method expected to take no longer than this starts first whatever the other estimate: the
# low-rank phases' step count is unknown in advance and ranges from 200 to 5000 on such problems
IPM_CHEAP_SECONDS = 0.1
GPU_STEP_SECONDS = 6.0e-4  # one low-rank step on the GPU, launch-bound (decision record "route-cost-model")
LOW_RANK_STEP_SECONDS = {False: 2.5e-4, True: GPU_STEP_SECONDS}  # fixed cost of one step on the CPU / the GPU
LOW_RANK_SECONDS_PER_ROW_RANK = 2.8e-7  # per n r and step (CPU)
GPU_HOST_STEP_SECONDS, GPU_HOST_SECONDS_PER_ROW_RANK = 2.5e-4, 2.0e-8  # one step on a GPU machine's CPU


def low_rank_steps(problem) -> int:
    """The low-rank phases' expected steps: ``LOW_RANK_STEPS`` where they keep every constraint exact on spheres or
    one block's trace (as :func:`~cvxpy_culorads.solver.plan.plan` decides with the default algorithm), else
    ``LOW_RANK_HARD_STEPS``."""
    layout = BlockLayout.of(problem)
    on_spheres = Spheres.cover(problem, layout, FixedDiagonals.of(problem, layout.offsets, np))
    return LOW_RANK_STEPS if on_spheres or FixedTrace.of(problem) is not None else LOW_RANK_HARD_STEPS


@dataclass(frozen=True)
class RouteCosts:
    """Estimated seconds of the interior-point method and of the low-rank phases on one problem."""

    interior_point: float
    low_rank: float

    @classmethod
    def of(cls, problem, ranks, on_gpu: bool) -> RouteCosts:
        """The estimates for ``problem`` with the low-rank phases' initial ``ranks`` (one per PSD block)."""
        return cls(IPM_ITERATIONS * interior_point_iteration_seconds(problem, on_gpu),
                   low_rank_steps(problem) * low_rank_step_seconds(problem, ranks, on_gpu))

    @property
    def interior_point_first(self) -> bool:
        return self.interior_point <= max(self.low_rank, IPM_CHEAP_SECONDS)

    def describe(self) -> str:
        return (f"estimated {self.interior_point:.3g} s for the interior-point method, {self.low_rank:.3g} s for "
                "the low-rank phases")


def interior_point_iteration_parts(problem, on_gpu: bool) -> dict[str, float]:
    """The estimated seconds of one interior-point iteration's parts, on the GPU where the method runs there (blocks of
    order ``DEVICE_MIN_ORDER`` and up): the Schur complement's formation (``schur``), its factorisation
    (``factorisation``) and the per-group work (``rest``: the blocks' dense decompositions, products and calls)."""
    rates = IPM_GPU if on_gpu and max(problem.block_sizes, default=0) >= DEVICE_MIN_ORDER else IPM_CPU
    routes = interior_point_routes(problem)
    return dict(schur=rates.route_entry * sum(route for _, route in routes),
                factorisation=rates.schur_cube * problem.m ** 3,
                rest=sum(rates.group + rates.cube * n ** 3 for n, _ in routes))


def interior_point_iteration_seconds(problem, on_gpu: bool) -> float:
    """The estimated seconds of one interior-point iteration (:func:`interior_point_iteration_parts`)."""
    return sum(interior_point_iteration_parts(problem, on_gpu).values())


def low_rank_step_seconds(problem, ranks, on_gpu: bool) -> float:
    """The estimated seconds of one low-rank step with the initial ``ranks``."""
    per_row_rank = 0.0 if on_gpu else LOW_RANK_SECONDS_PER_ROW_RANK
    return LOW_RANK_STEP_SECONDS[on_gpu] + per_row_rank * _row_rank(problem, ranks)


def _row_rank(problem, ranks) -> int:
    """n r summed over the PSD blocks, plus the nonnegative variables: the size of the factor."""
    return sum(n * r for n, r in zip(problem.block_sizes, ranks)) + problem.n_lp


@dataclass(frozen=True)
class DeviceCosts:
    """Estimated seconds of one low-rank step on a GPU machine's CPU and on its GPU."""

    cpu_step: float
    gpu_step: float

    @classmethod
    def of(cls, problem, ranks) -> DeviceCosts:
        """The estimates for ``problem`` with the low-rank phases' initial ``ranks`` (one per PSD block)."""
        return cls(GPU_HOST_STEP_SECONDS + GPU_HOST_SECONDS_PER_ROW_RANK * _row_rank(problem, ranks),
                   GPU_STEP_SECONDS)

    @property
    def gpu_pays(self) -> bool:
        return self.gpu_step < self.cpu_step

    def describe(self) -> str:
        device = "gpu" if self.gpu_pays else "cpu"
        return (f"device='auto' chose the {device}: a low-rank step is estimated at {1e3 * self.cpu_step:.2g} ms on "
                f"the CPU, {1e3 * self.gpu_step:.2g} ms on the GPU")
