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

import numpy as np

__all__ = ["Settings"]

_DEVICES = ("auto", "cpu", "gpu")
_CRITERIA = ("certified", "dimacs")
_ROUTES = ("auto", "low_rank", "interior_point")


@dataclass(frozen=True)
class _Interval:
    """The real numbers between ``low`` and ``high``, each end included or not."""

    low: float
    high: float = math.inf
    low_included: bool = False
    high_included: bool = False

    def contains(self, value: float) -> bool:  # False for NaN, which compares False with everything
        above = value >= self.low if self.low_included else value > self.low
        below = value <= self.high if self.high_included else value < self.high
        return above and below

    def __str__(self) -> str:
        low = f"{'>=' if self.low_included else '>'} {self.low:g}"
        if self.high == math.inf:
            return f"a number {low} (inf allowed)" if self.high_included else f"a finite number {low}"
        return f"a number {low} and {'<=' if self.high_included else '<'} {self.high:g}"


# The settings' valid values. An upper end of inf, not included, means "finite"; None is valid for the
# settings in _OPTIONAL.
_SHARD_ORDERS = ("auto", "given", "rcm")
_HALO_PRECISIONS = ("single", "double")
_CHOICES = {"device": _DEVICES, "criterion": _CRITERIA, "route": _ROUTES, "shard_order": _SHARD_ORDERS,
            "halo_precision": _HALO_PRECISIONS}
_FLAGS = ("verbose", "keep_log", "interior_point", "l2_rescaling", "riemannian")
_REALS = {
    "tol": _Interval(0.0, 1.0),
    "reduced_tol": _Interval(0.0, 1.0),
    "trace_bound": _Interval(0.0, low_included=True),
    "time_limit": _Interval(0.0, high_included=True),  # inf: no limit
    "phase1_tol": _Interval(0.0),
    "rho_max": _Interval(0.0),
    "rank_factor": _Interval(0.0),
    "rank_growth": _Interval(1.0),
    "heuristic_factor": _Interval(0.0),
    "reopt_scale": _Interval(0.0),
    "log_every": _Interval(0.0, low_included=True),
}
_INTEGERS = {  # name: (lowest, highest)
    "reopt_level": (0, 2),
    "max_iter": (1, math.inf),
    "rank": (1, math.inf),
    "seed": (0, 2**32 - 1),  # the start is drawn by RandomState, which takes 32-bit seeds
    "interior_point_patience": (1, math.inf),
    "max_alm_outer": (1, math.inf),
    "max_admm_iter": (1, math.inf),
    "lbfgs_memory": (1, math.inf),  # the backend checks its own ceiling
}
_OPTIONAL = ("trace_bound", "rank", "reduced_tol", "rank_factor")


def _check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return str(value)


def _check_devices(value) -> int | tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value)
    if isinstance(value, (tuple, list)) and value and len(set(value)) == len(value) and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0 for v in value):
        return tuple(int(v) for v in value)
    raise ValueError(f"devices must be None, a count >= 1 or a list of distinct GPU ids >= 0, got {value!r}")


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _check_real(name: str, value, interval: _Interval) -> float | None:
    if value is None and name in _OPTIONAL:
        return None
    # bool is an Integral to Python, but tol=True is a mistake, not 1.0 (here and for integers).
    try:
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and interval.contains(float(value)):
            return float(value)
    except OverflowError:  # an int beyond the float range
        pass
    optional = "None or " if name in _OPTIONAL else ""
    raise ValueError(f"{name} must be {optional}{interval}, got {value!r}")


def _check_integer(name: str, value, low: int, high: float) -> int | None:
    if value is None and name in _OPTIONAL:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= high:
        return int(value)
    optional = "None or " if name in _OPTIONAL else ""
    allowed = f"an integer >= {low}" if high == math.inf else f"an integer in {low}..{high}"
    raise ValueError(f"{name} must be {optional}{allowed}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Settings of :func:`cvxpy_culorads.solve`.

    Every value is checked on construction; a wrong one raises ``ValueError`` naming the setting and the
    value given. Numbers must be finite (``time_limit`` may be ``inf``), ``True``/``False`` is no number,
    and NumPy scalars are accepted and stored as Python ``int``/``float``/``bool``.

    **Main settings:**

    - ``device``: ``"auto"`` (the GPU when CuPy sees one and the problem is large enough for it to pay: a
      low-rank step is estimated on each device, ``costs.DeviceCosts``; else the CPU; the environment variable
      ``CULORADS_DEVICE`` overrides auto), ``"cpu"`` or ``"gpu"``.
    - ``tol``: tolerance on the measures that decide OPTIMAL (``criterion``), 0 < tol < 1.
    - ``reduced_tol``: a point whose criteria miss ``tol`` but are all within ``reduced_tol`` is INACCURATE (an
      answer to use with care); above it, the solve is STALLED (no answer). None (default): sqrt(tol), as
      Clarabel's reduced tolerances are for its defaults. It must not be below ``tol``.
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
    - ``rank``: initial rank of every PSD block (default: ``rank_factor`` ln n_k, capped by the Barvinok-Pataki bound;
      the Riemannian phase's wider default is narrowed, down to 2 ln n_k, where it would not fit in device memory).
    - ``seed``: random seed of the starting point, 0 <= seed < 2**32.
    - ``verbose``: print the iteration log.
    - ``keep_log``: keep the iteration log in ``Result.log`` (one row per inner iteration: off by default).
    - ``interior_point``: for problems small enough for a dense interior-point method
      (``memory.interior_point_fits``: m <= 5000, blocks of order <= 1500), hand over to it when the
      low-rank phases have used ``interior_point_patience`` inner iterations without finishing, or
      finish with errors above ``tol``. It solves the small degenerate or high-rank problems (truss,
      arch, control) where the low-rank method stalls.
    - ``riemannian``: on problems whose constraints all fix diagonal entries, one per row of every PSD block
      (MaxCut, ``diag(X) == d``), run L-BFGS on the product of spheres those constraints make (``riemannian.py``)
      instead of phases I and II: the constraints hold exactly at every step and the multipliers follow from
      stationarity. True (default) since, on one H100 in one run (README, "Lanczos replayed from CUDA graphs, and the
      Riemannian phase by default"), it was the faster of the two on every MaxCut measured (Gset G1 to G81, delaunay
      2^20, rgg 2^22, where phases I and II hit the 60 s limit). On a one-block problem with a constraint
      a tr X = b (theta), phase I keeps that constraint exact on the sphere |R|_F^2 = b / a and runs alone until
      certified (``alm.py``; theta of H(4, 10) in 328 steps against 16850 for the sparse formulation). False: the
      ALM and ADMM phases, as in the cuLoRADS paper, on every problem.
    - ``devices``: None (default): one device, as ``device`` says. A count k or a list of GPU ids: the factor's
      rows are split over that many devices (``sharding.py``; NCCL between GPUs), for problems too large for one;
      with ``device="cpu"`` the k shards are simulated in one process (the same splitting and exchanges, for tests).
      k > 1 takes problems of one PSD block without nonnegative variables or low-rank terms (a ValueError says so
      otherwise): on a product of spheres the Riemannian phase runs on the split rows, with any other constraints
      phases I and II (``sharding.ShardedBlockOperator``; a trace constraint is then not kept exact, and phase II's
      conjugate gradients run without the diagonal preconditioner). One id selects that GPU.
    - ``shard_order``: how a split problem's rows are numbered before contiguous shards are cut (``RowOrder`` in
      ``sharding.py``). ``"auto"`` (default): as given while every shard's halo (the rows of other shards its rows of
      C reference) is within 10 % of its rows, else renumbered by reverse Cuthill-McKee when that at least halves the
      halo; ``"given"``: never renumbered; ``"rcm"``: always renumbered. The factors returned are in the given order;
      the renumbering counts towards ``time_limit`` and the reported times.
    - ``halo_precision``: in what precision a split problem's halo rows travel. ``"double"`` (default): always.
      ``"single"``: in the Riemannian phase's runs whose gradient target is at least
      ``riemannian.ROUNDED_HALO_TARGET``, which halves the bytes of each exchange and puts a relative error of at
      most 2^-24 on each term C_ij r_j that comes from another shard; the returned point's product, its objective
      and multipliers, and every certificate take double precision. Not the default: on two H100 it cut the
      exchange at n = 1e7, 65 columns, from 8.46 to 4.99 ms, but a step at n = 2e7, 5 columns, took 10.59 ms against
      10.28 (README, "Several devices"; at n = 1e8 it was timed only with its kernels compiling during the solve).
      No effect on one device.
    - ``route``: which method starts on a problem the interior-point method can take. ``"auto"`` (default): the
      one with the smaller estimated time (``costs.py``); the low-rank phases then hand over after
      ``interior_point_patience`` inner iterations or the interior-point method's estimated time, and the
      interior-point method, when it ends above ``tol``, to the low-rank phases from their own start (for
      ``interior_point_patience`` iterations). ``"low_rank"`` or ``"interior_point"`` start that one.

    **Advanced settings** (LoRADS names in brackets): ``phase1_tol`` [phase1Tol] primal infeasibility at
    which phase I hands over to phase II; ``rho_max`` [rhoMax] ADMM penalty cap; ``max_alm_outer``
    [maxALMIter]; ``max_admm_iter`` [maxADMMIter] per ADMM run; ``rank_factor`` [timesLogRank]
    (None: 4 where the Riemannian phase runs, else LoRADS's 2; ``state.SPHERES_RANK_FACTOR``);
    ``rank_growth`` factor of a rank increase; ``lbfgs_memory`` [lbfgsListLength];
    ``heuristic_factor`` [heuristicFactor] multiplier of the penalty at the switch to phase II;
    ``reopt_scale`` objective factor of one re-optimisation round; ``log_every`` seconds between log lines;
    ``l2_rescaling`` [l2Rescaling] divide A and b by the median l2 norm of the constraints' coefficients
    (the errors are always measured on the unscaled problem).
    """

    device: str = "auto"
    tol: float = 1e-5
    reduced_tol: float | None = None
    criterion: str = "certified"
    trace_bound: float | None = None
    reopt_level: int = 2
    time_limit: float = math.inf
    max_iter: int = 1_000_000
    rank: int | None = None
    seed: int = 925
    verbose: bool = False
    keep_log: bool = False
    interior_point: bool = True
    interior_point_patience: int = 5000
    route: str = "auto"
    riemannian: bool = True
    devices: int | tuple[int, ...] | None = None
    shard_order: str = "auto"
    halo_precision: str = "double"

    phase1_tol: float = 1e-3
    rho_max: float = 5000.0
    max_alm_outer: int = 200
    max_admm_iter: int = 10_000
    rank_factor: float | None = None
    rank_growth: float = 1.5
    lbfgs_memory: int = 2
    heuristic_factor: float = 1.0
    reopt_scale: float = 5.0
    log_every: float = 0.5
    l2_rescaling: bool = True

    def __post_init__(self):
        # Checked values are stored back as plain str/bool/int/float (NumPy scalars are accepted), so that
        # the solver and anything that serialises the settings see Python types only.
        checked = {name: _check_choice(name, getattr(self, name), choices) for name, choices in _CHOICES.items()}
        checked.update((name, _check_flag(name, getattr(self, name))) for name in _FLAGS)
        checked.update((name, _check_real(name, getattr(self, name), interval)) for name, interval in _REALS.items())
        checked.update((name, _check_integer(name, getattr(self, name), low, high))
                       for name, (low, high) in _INTEGERS.items())
        checked["devices"] = _check_devices(self.devices)
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        if self.reduced_tol is not None and self.reduced_tol < self.tol:
            raise ValueError(f"reduced_tol must be None or >= tol = {self.tol!r}, got {self.reduced_tol!r}")

    @property
    def device_count(self) -> int:
        """How many devices the solve is split over (``devices``)."""
        if self.devices is None:
            return 1
        return self.devices if isinstance(self.devices, int) else len(self.devices)

    @property
    def gpu_ids(self) -> tuple[int, ...] | None:
        """The GPUs ``devices`` names (a count names the first ones), or None (the current device)."""
        if self.devices is None:
            return None
        return tuple(range(self.devices)) if isinstance(self.devices, int) else self.devices

    @property
    def inaccurate_tol(self) -> float:
        """The bound on the criteria of an INACCURATE point: ``reduced_tol``, or sqrt(tol) when it is None."""
        return math.sqrt(self.tol) if self.reduced_tol is None else self.reduced_tol

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_options(cls, settings: Settings | None = None, **options) -> Settings:
        """Apply keyword ``options`` on top of ``settings`` (or the defaults); unknown names are an error."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(map(repr, unknown))}; "
                             f"valid settings are: {', '.join(cls.names())}")
        base = settings if settings is not None else cls()
        return dataclasses.replace(base, **options)
