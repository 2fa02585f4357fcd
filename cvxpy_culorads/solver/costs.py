"""What each route to a small problem is expected to cost, so that the driver starts with the cheaper one.

The interior-point method's iterations cost a fixed share per group of blocks (Python and LAPACK call overheads;
small blocks are held together, ``memory.interior_point_groups``), the dense work on each group (n^3: an inverse, a
Cholesky factorisation and an eigenvalue problem), the Schur complement's assembly (its route's work entries,
``memory.interior_point_routes``) and its factorisation (m^3); they number 10 to 30. The low-rank phases' steps cost
a fixed overhead plus work in n r; easy problems (MaxCut) need a few hundred, hard ones (truss, control, theta)
thousands. The constants are fitted, by relative least squares, to measured solve times of small SDPLIB problems on
a small CPU (``benchmarks/studies/routes.py`` prints the estimates beside the measured times). On the GPU the
low-rank step is launch-bound, so its cost is one constant; the interior-point method runs on the host below block
order ``DEVICE_MIN_ORDER`` (``phases/interior_point.py``), and above it the CPU fit stands in, not fitted on the
GPU. What was measured: decision record "route-cost-model".

``device="auto"`` compares one low-rank step on each device (:class:`DeviceCosts`): the same step count is
expected on both, so the cheaper step wins. The CPU that matters there is a GPU machine's host, many cores with a
fast BLAS, so its constants are fitted apart from the small CPU's (``benchmarks/studies/devices.py``; decision records
"route-cost-model" and "device-auto").
"""
from __future__ import annotations

from dataclasses import dataclass

from cvxpy_culorads.backends.memory import interior_point_routes

__all__ = ["DeviceCosts", "RouteCosts"]

IPM_ITERATIONS = 15  # the median over the calibration set (8 to 29)
IPM_SECONDS_PER_GROUP = 8.2e-4  # per group of blocks and iteration
IPM_SECONDS_PER_CUBE = 1.8e-9  # per n^3 of a group and iteration
IPM_SECONDS_PER_ROUTE_ENTRY = 1.8e-8  # per Schur-complement work entry and iteration
IPM_SECONDS_PER_SCHUR_CUBE = 7.3e-11  # per m^3 and iteration
LOW_RANK_STEPS = 300  # what an easy problem (MaxCut) needs; hard ones need thousands, hence IPM_CHEAP_SECONDS
# an interior-point method expected to take no longer than this starts first whatever the other estimate: the
# low-rank phases' step count is unknown in advance and ranges from 200 to 5000 on such problems
IPM_CHEAP_SECONDS = 0.1
GPU_STEP_SECONDS = 6.0e-4  # one low-rank step on the GPU, launch-bound (decision record "route-cost-model")
LOW_RANK_STEP_SECONDS = {False: 2.5e-4, True: GPU_STEP_SECONDS}  # fixed cost of one step on the CPU / the GPU
LOW_RANK_SECONDS_PER_ROW_RANK = 2.8e-7  # per n r and step (CPU)
GPU_HOST_STEP_SECONDS, GPU_HOST_SECONDS_PER_ROW_RANK = 2.5e-4, 2.0e-8  # one step on a GPU machine's CPU
@dataclass(frozen=True)
class RouteCosts:
    """Estimated seconds of the interior-point method and of the low-rank phases on one problem."""

    interior_point: float
    low_rank: float

    @classmethod
    def of(cls, problem, ranks, on_gpu: bool) -> RouteCosts:
        """The estimates for ``problem`` with the low-rank phases' initial ``ranks`` (one per PSD block)."""
        per_iteration = IPM_SECONDS_PER_SCHUR_CUBE * problem.m ** 3 + sum(
            IPM_SECONDS_PER_GROUP + IPM_SECONDS_PER_CUBE * n ** 3 + IPM_SECONDS_PER_ROUTE_ENTRY * route
            for n, route in interior_point_routes(problem))
        per_row_rank = 0.0 if on_gpu else LOW_RANK_SECONDS_PER_ROW_RANK
        step = LOW_RANK_STEP_SECONDS[on_gpu] + per_row_rank * _row_rank(problem, ranks)
        return cls(IPM_ITERATIONS * per_iteration, LOW_RANK_STEPS * step)

    @property
    def interior_point_first(self) -> bool:
        return self.interior_point <= max(self.low_rank, IPM_CHEAP_SECONDS)

    def describe(self) -> str:
        return (f"estimated {self.interior_point:.3g} s for the interior-point method, {self.low_rank:.3g} s for "
                "the low-rank phases")


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
