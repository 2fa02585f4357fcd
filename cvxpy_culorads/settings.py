"""Solver settings: one frozen dataclass, validated once on construction.

Every knob of the LoRADS method that a user may reasonably touch lives here with its default (the
defaults follow the public LoRADS C code unless a comment says why not). ``Settings.from_options``
turns keyword options (from ``solve(**kw)``, the CLI or CVXPY's ``solver_opts``) into a ``Settings``
and rejects unknown names with an error that names them.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

__all__ = ["Settings"]

_DEVICES = ("auto", "cpu", "gpu")
_CRITERIA = ("certified", "dimacs")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Settings of :func:`cvxpy_culorads.solve`.

    **Main settings:**

    - ``device``: ``"auto"`` (GPU when CuPy sees one, else CPU; the environment variable
      ``CULORADS_DEVICE`` overrides auto), ``"cpu"`` or ``"gpu"``.
    - ``tol``: tolerance on the measures that decide OPTIMAL (``criterion``).
    - ``criterion``: ``"certified"`` (default): the primal residual per constraint, ||A(X) - b||_2 /
      (1 + ||b||_2), and the certified gap between the objective and a proven lower bound on the optimum
      (``Result.dual_bound``), or where no bound exists the dual slack's negative eigenvalues over
      1 + ||C||_inf and the gap. ``"dimacs"``: the cuLoRADS paper's three errors (primal infeasibility over
      1 + ||b||_1, dual infeasibility over 1 + ||C||_1, gap), which grow weaker with the problem's size; it
      reproduces the paper's stopping rule and times.
    - ``trace_bound``: an upper bound on sum_k tr(X_k) + sum_j x_j of an optimal solution, for the dual bound
      of problems whose data imply none (``bounds.py``); None: derive what the data imply.
    - ``reopt_level``: 0 no re-optimisation; 1 at most one round while a criterion exceeds ``tol``; 2 up
      to 8 rounds while one does. Saddle escapes (rank growth) happen at every level.
    - ``time_limit``: seconds of wall clock (``inf``: none).
    - ``max_iter``: ceiling on the total number of inner iterations (L-BFGS steps plus ADMM sweeps).
    - ``rank``: initial rank of every PSD block (default: 2 ln n_k, capped by the Barvinok-Pataki bound).
    - ``seed``: random seed of the starting point.
    - ``verbose``: print the iteration log.
    - ``interior_point``: for problems small enough for a dense interior-point method
      (``interior_point.fits``: m <= 5000, blocks of order <= 1500), hand over to it when the
      low-rank phases have used ``interior_point_patience`` inner iterations without finishing, or
      finish with errors above ``tol``. It solves the small degenerate or high-rank problems (truss,
      arch, control) where the low-rank method stalls.

    **Advanced settings** (LoRADS names in brackets): ``phase1_tol`` [phase1Tol] primal infeasibility at
    which phase I hands over to phase II; ``rho_max`` [rhoMax] ADMM penalty cap; ``max_alm_outer``
    [maxALMIter]; ``max_admm_iter`` [maxADMMIter] per ADMM run; ``rank_factor`` [timesLogRank];
    ``rank_growth`` factor of a rank increase; ``lbfgs_memory`` [lbfgsListLength];
    ``heuristic_factor`` [heuristicFactor] multiplier of the penalty at the switch to phase II;
    ``reopt_scale`` objective factor of one re-optimisation round; ``log_every`` seconds between log lines;
    ``l2_rescaling`` [l2Rescaling] divide A and b by the median l2 norm of the constraints' coefficients
    (the errors are always measured on the unscaled problem).
    """

    device: str = "auto"
    tol: float = 1e-5
    criterion: str = "certified"
    trace_bound: float | None = None
    reopt_level: int = 2
    time_limit: float = math.inf
    max_iter: int = 1_000_000
    rank: int | None = None
    seed: int = 925
    verbose: bool = False
    interior_point: bool = True
    interior_point_patience: int = 5000

    phase1_tol: float = 1e-3
    rho_max: float = 5000.0
    max_alm_outer: int = 200
    max_admm_iter: int = 10_000
    rank_factor: float = 2.0
    rank_growth: float = 1.5
    lbfgs_memory: int = 2
    heuristic_factor: float = 1.0
    reopt_scale: float = 5.0
    log_every: float = 0.5
    l2_rescaling: bool = True

    def __post_init__(self):
        if self.device not in _DEVICES:
            raise ValueError(f"device must be one of {_DEVICES}, got {self.device!r}")
        if self.criterion not in _CRITERIA:
            raise ValueError(f"criterion must be one of {_CRITERIA}, got {self.criterion!r}")
        bound = self.trace_bound
        if bound is not None and not (isinstance(bound, numbers.Real) and not isinstance(bound, bool)
                                      and math.isfinite(bound) and bound >= 0):
            raise ValueError(f"trace_bound must be None or a finite number >= 0, got {bound!r}")
        positive = ("tol", "time_limit", "phase1_tol", "rho_max", "rank_factor", "heuristic_factor",
                    "reopt_scale")
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and not math.isnan(value)):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.log_every < 0:
            raise ValueError(f"log_every must be >= 0, got {self.log_every!r}")
        if self.reopt_level not in (0, 1, 2):
            raise ValueError(f"reopt_level must be 0, 1 or 2, got {self.reopt_level!r}")
        for name in ("max_iter", "max_alm_outer", "max_admm_iter", "lbfgs_memory", "interior_point_patience"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.rank is not None and (not isinstance(self.rank, int) or self.rank < 1):
            raise ValueError(f"rank must be None or an integer >= 1, got {self.rank!r}")
        if self.rank_growth <= 1:
            raise ValueError(f"rank_growth must be > 1, got {self.rank_growth!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        for name in ("verbose", "l2_rescaling", "interior_point"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_options(cls, settings: "Settings | None" = None, **options) -> "Settings":
        """Apply keyword ``options`` on top of ``settings`` (or the defaults); unknown names are an error."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(map(repr, unknown))}; "
                             f"valid settings are: {', '.join(cls.names())}")
        base = settings if settings is not None else cls()
        return dataclasses.replace(base, **options)
