"""What a solve returns: the ``Result`` dataclass and the ``Status`` enum.

Everything in a ``Result`` lives on the host (NumPy), whatever device solved the problem, so a
result can be saved, compared and passed to CVXPY without knowing about CuPy.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from cvxpy_culorads.certify.measures import worst

__all__ = ["Status", "Errors", "Certificate", "Result"]


class Status(enum.Enum):
    """How a solve ended. Every status but NUMERICAL_ERROR comes with the best point measured (``Result``);
    ``has_solution`` says whether it is meant to be used."""

    OPTIMAL = "optimal"
    """Every measure of ``Result.criteria`` is within ``tol`` on the returned factors and multipliers."""
    INACCURATE = "inaccurate"
    """The method stopped with a criterion above ``tol`` but every one within ``Settings.reduced_tol``."""
    STALLED = "stalled"
    """The method stopped (stagnation or its own budgets) with a criterion above ``reduced_tol``: the best point
    is returned, but it is not an answer (CVXPY reports ``solver_error`` unless ``accept_unknown=True``)."""
    INFEASIBLE = "infeasible"
    """No feasible point exists: ``Result.certificate`` is a Farkas ray y that passed the independent check of
    ``certify/rays.py`` (b'y = 1, -A*(y) PSD and -A_lp'y >= 0 within ``tol``)."""
    UNBOUNDED = "unbounded"
    """The objective is unbounded below: ``Result.certificate`` is a primal ray D that passed the independent check
    of ``certify/rays.py`` (D PSD, A(D) = 0 within ``tol``, <C, D> < 0)."""
    INFEASIBLE_INACCURATE = "infeasible_inaccurate"
    """The multipliers ran away along an approximate Farkas ray: no feasible point exists, or only ones far larger
    than any the method reached (``Result.message`` says which)."""
    UNBOUNDED_INACCURATE = "unbounded_inaccurate"
    """The objective ran away along an approximate primal ray (A(d) ~ 0, d PSD, <C, d> < 0)."""
    TIME_LIMIT = "time_limit"
    """``time_limit`` was reached; the best point so far is returned."""
    ITERATION_LIMIT = "iteration_limit"
    """``max_iter`` was reached; the best point so far is returned."""
    INTERRUPTED = "interrupted"
    """The user interrupted the solve (Ctrl-C); the best point so far is returned."""
    NUMERICAL_ERROR = "numerical_error"
    """The iterates became non-finite or ran away without evidence of unboundedness."""

    @property
    def has_solution(self) -> bool:
        """Whether the returned point is meant to be used (it may be inaccurate)."""
        return self in _WITH_SOLUTION


_WITH_SOLUTION = frozenset({Status.OPTIMAL, Status.INACCURATE, Status.TIME_LIMIT, Status.ITERATION_LIMIT,
                            Status.INTERRUPTED})


@dataclass(frozen=True)
class Errors:
    """The measures of one point, all evaluated on it from scratch (their definitions: :class:`Result`)."""

    primal_infeasibility: float
    dual_infeasibility: float
    gap: float
    primal_residual: float
    max_violation: float
    dual_slack_violation: float

    @classmethod
    def unmeasured(cls) -> Errors:
        """The errors of a point that could not be measured (not finite): every one infinitely bad."""
        return cls(*(float("inf"),) * len(dataclasses.fields(cls)))

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Certificate:
    """A ray that proves a problem infeasible or unbounded, checked on the problem's data (``certify/rays.py``).

    - ``kind``: ``"infeasible"`` for a Farkas ray, ``"unbounded"`` for a primal ray.
    - ``multipliers``: the Farkas ray y (one entry per constraint, scaled to b'y = 1; empty for a primal ray): for
      every X PSD and x >= 0, b'y = 1 while <A*(y), X> + (A_lp'y)'x <= ``violation`` (tr X + sum x).
    - ``factors``, ``x_lp``: the primal ray D_k = R_k R_k' and its nonnegative part (empty for a Farkas ray), scaled
      to sum_k tr D_k + sum x = 1: ||A(D) + A_lp x||_inf <= ``violation`` and ``objective`` = <C, D> + c_lp'x < 0.
    - ``violation``: how far the ray is from exact, in the units the check compares with ``tol``.
    - ``objective``: <C, D> + c_lp'x of a primal ray (0 for a Farkas ray).
    """

    kind: str
    multipliers: np.ndarray
    factors: tuple[np.ndarray, ...]
    x_lp: np.ndarray
    violation: float
    objective: float = 0.0


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`cvxpy_culorads.solve` for ``min <C,X> s.t. A(X) = b, X PSD``.

    - ``primal_objective``: sum_k <C_k, R_k R_k'> + c_lp'x_lp (minimisation form).
    - ``dual_objective``: b'lambda.
    - ``dual_bound``: a certified lower bound on the optimal value (b'lambda less what the dual slack's
      negative eigenvalues can cost, through a bound on the trace; ``bounds.py``), or None when nothing bounds
      the trace where the slack is violated (``message`` says which applied).
    - ``certified_gap``: |primal - dual_bound| / (1 + |primal| + |dual_bound|), or None without a bound.
    - ``errors``: an :class:`Errors` record, all evaluated on the returned point:

      - the cuLoRADS paper's three (the LoRADS code's norms, ||.||_1 the sum of absolute entries of the full
        symmetric C_k and of c_lp): ``primal_infeasibility`` = ||A(X) - b||_2 / (1 + ||b||_1);
        ``dual_infeasibility`` = (sum_k max(0, -lambda_min(C_k - A_k*(lambda))) + ||max(0, -(c_lp -
        A_lp'lambda))||_1) / (1 + ||C||_1); ``gap`` = |primal - dual| / (1 + |primal| + |dual|);
      - scale-free ones: ``primal_residual`` = ||A(X) - b||_2 / (1 + ||b||_2) (a root-mean-square error per
        constraint); ``max_violation`` = max_i |A(X)_i - b_i| / (1 + |b_i|), the worst single constraint;
        ``dual_slack_violation``, the sum of the slack's negative eigenvalues (lower estimates) and negative
        entries over 1 + ||C||_inf.
    - ``criteria``: the measures that decided the status (``Settings.criterion``): by default
      ``primal_residual`` and ``certified_gap``, or, without a bound, ``primal_residual``,
      ``dual_slack_violation`` and ``gap``; with ``criterion="dimacs"`` the paper's three errors.
    - ``factors``: one host array R_k (n_k x r_k) per PSD block, X_k = R_k R_k'.
    - ``x_lp``: the nonnegative variables.
    - ``dual``: the multipliers lambda (C_k - sum_i lambda_i A_ik PSD at optimality).
    - ``iterations``: inner iterations per phase (``alm`` L-BFGS steps, ``admm`` sweeps, ``interior_point``
      iterations of the interior-point finish for small problems).
    - ``ranks``: the final rank per PSD block.
    - ``min_eigenvalues``: lambda_min(C_k - A_k*(lambda)) per PSD block, the unnormalised dual
      infeasibility (the reported error divides by 1 + ||C||_1, which is large for dense C).
    - ``solve_time``: seconds of the whole call; ``setup_time``: the part spent building the compressed
      operator on the device, and with several devices in renumbering the rows (``Settings.shard_order``)
      (``solve_time - setup_time`` is comparable to the cuLoRADS paper's times, which start once the data is on
      the device).
    - ``stage_times``: seconds spent in phase I (``alm``), phase II (``admm``), the interior-point method
      (``interior_point``) and measuring points
      (``certificates``: the errors, lambda_min, the stationary multipliers); the rest of
      ``solve_time - setup_time`` is the driver's own work (snapshots, rank changes).
    - ``peak_device_bytes``: the most device memory CuPy's pool held during the solve (0 on the CPU; with
      ``devices``, the largest over the GPUs); it includes arrays of the caller's that were in the pool already,
      but not the blocks the pool kept cached from earlier work, which the solve hands back at its start.
    - ``device``: the device that solved it, and with ``device="auto"`` on a machine with a GPU, why
      (``costs.DeviceCosts``).
    - ``route``: which method started (the interior-point method or the low-rank phases) and why: the estimated
      cost of each (``solver/costs.py``), or why only the low-rank phases could run.
    - ``plan``: the plan's decisions, one sentence each (which low-rank phases and why, how the rows were split,
      whether the start was narrowed to fit in device memory; ``solver/plan.py``).
    - ``certificate``: for INFEASIBLE and UNBOUNDED, the checked ray (:class:`Certificate`); None otherwise.
    - ``log``: the iteration log (``state.Progress`` rows), kept only with ``Settings.keep_log`` (a long solve
      makes millions of rows).
    - ``penalty``, ``objective_scale``: where the low-rank phases ended: the augmented Lagrangian's penalty rho (for
      the constraints as given) and the scale of the objective that re-optimisation reached; a warm start from this
      result (``solve(..., warm_start=result)``) goes on from them.
    """

    status: Status
    primal_objective: float
    dual_objective: float
    errors: Errors
    criteria: Mapping[str, float]
    dual_bound: float | None
    certified_gap: float | None
    factors: tuple[np.ndarray, ...]
    x_lp: np.ndarray
    dual: np.ndarray
    iterations: Mapping[str, int]
    ranks: tuple[int, ...]
    solve_time: float
    device: str
    setup_time: float = 0.0
    stage_times: Mapping[str, float] = field(default_factory=dict)
    min_eigenvalues: tuple[float, ...] = ()
    peak_device_bytes: int = 0
    message: str = ""
    route: str = ""
    plan: tuple[str, ...] = ()
    certificate: Certificate | None = None
    log: tuple = field(default=(), repr=False)
    penalty: float | None = None
    objective_scale: float = 1.0

    @property
    def max_error(self) -> float:
        """The largest of the ``criteria`` (inf when one is NaN; the status is OPTIMAL when it is within tol)."""
        return worst(self.criteria.values())

    def X(self, k: int = 0) -> np.ndarray:
        """The dense PSD block k (only for small blocks: this costs n_k^2 memory)."""
        R = self.factors[k]
        return R @ R.T

    def summary(self) -> str:
        bound = "none" if self.dual_bound is None else f"{self.dual_bound:.10g}"
        criteria = ", ".join(f"{name} {value:.2e}" for name, value in self.criteria.items())
        return (f"status {self.status.value}: primal {self.primal_objective:.10g}, dual "
                f"{self.dual_objective:.10g}, certified bound {bound}; {criteria}; ranks {self.ranks}; "
                f"{self.iterations}; {self.solve_time:.3f} s on {self.device}")
