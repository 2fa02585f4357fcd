"""Solver settings: frozen, validated, grouped dataclasses whose field metadata is the one description of each option.

:class:`Settings` holds the options most solves touch (tolerance, limits, device, verbosity, seed, the
:class:`Algorithm`); :class:`LoRADSSettings` (``Settings.lorads``) the method's advanced knobs, under their LoRADS names
where LoRADS has one; :class:`SplitSettings` (``Settings.split``) how a problem split over several devices is laid
out. Each field's metadata (:func:`_setting`) carries its help text and its :class:`_Rule`; that one source validates
every value on construction, makes the command line's flags (:func:`add_arguments`) and the documentation's settings
table (:func:`reference_rows`). Keyword options (``solve(**options)``, CVXPY's ``solver_opts``, the CLI) name any
field of any group directly (:meth:`Settings.from_options`); the keywords of the previous release that the method
enum replaced still work for one release, with a ``DeprecationWarning``.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import math
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Settings", "LoRADSSettings", "SplitSettings", "Algorithm", "reference_rows", "add_arguments",
           "options_from_arguments"]


class Algorithm(enum.Enum):
    """Which method solves the problem.

    - ``AUTO``: the plan chooses: the interior-point method first where it is estimated cheaper, else the low-rank
      phases that fit the problem's structure (L-BFGS on the product of spheres when every constraint fixes a
      diagonal entry, phase I on the trace sphere for one block with a trace constraint, else phases I and II).
    - ``LOW_RANK``: the low-rank phases that fit the structure first.
    - ``ALM_ADMM``: the cuLoRADS paper's phases I (ALM) and II (ADMM) on every problem.
    - ``INTERIOR_POINT``: the dense interior-point method first (problems small enough for it).

    Whatever starts, a problem small enough for the interior-point method is handed to it when the low-rank phases
    do not finish, and back, unless ``LoRADSSettings.interior_point_handover`` is off.
    """

    AUTO = "auto"
    LOW_RANK = "low_rank"
    ALM_ADMM = "alm_admm"
    INTERIOR_POINT = "interior_point"


@dataclass(frozen=True)
class _Rule:
    """What values a setting takes: ``kind`` is "choice" (``choices``), "flag", "real" (between ``low`` and
    ``high``, each end included or not), "integer" (``low`` to ``high``), "algorithm" or "devices"; ``optional``
    settings also take None."""

    kind: str
    choices: tuple = ()
    low: float = -math.inf
    high: float = math.inf
    low_included: bool = False
    high_included: bool = False
    optional: bool = False

    def describe(self) -> str:
        """The valid values in words (error messages and the documentation's table)."""
        prefix = "None or " if self.optional else ""
        if self.kind == "choice":
            return prefix + " | ".join(repr(c) for c in self.choices)
        if self.kind == "algorithm":
            return " | ".join(repr(m.value) for m in Algorithm)
        if self.kind == "flag":
            return "True or False"
        if self.kind == "devices":
            return "None, a count >= 1 or a list of distinct GPU ids >= 0"
        if self.kind == "integer":
            bounds = f"an integer >= {int(self.low)}" if self.high == math.inf else \
                f"an integer in {int(self.low)}..{int(self.high)}"
            return prefix + bounds
        low = f"{'>=' if self.low_included else '>'} {self.low:g}"
        if self.high == math.inf:
            return prefix + (f"a number {low} (inf allowed)" if self.high_included else f"a finite number {low}")
        return prefix + f"a number {low} and {'<=' if self.high_included else '<'} {self.high:g}"

    def check(self, name: str, value):
        """``value`` as a plain Python value (NumPy scalars accepted), or a ValueError naming the setting."""
        if value is None and self.optional:
            return None
        checked = _CHECKS[self.kind](self, value)
        if checked is _INVALID:
            raise ValueError(f"{name} must be {self.describe()}, got {value!r}")
        return checked


_INVALID = object()


def _check_choice(rule: _Rule, value):
    return str(value) if isinstance(value, str) and value in rule.choices else _INVALID


def _check_algorithm(rule: _Rule, value):
    if isinstance(value, Algorithm):
        return value
    try:
        return Algorithm(value) if isinstance(value, str) else _INVALID
    except ValueError:
        return _INVALID


def _check_flag(rule: _Rule, value):
    return bool(value) if isinstance(value, (bool, np.bool_)) else _INVALID


def _check_real(rule: _Rule, value):
    # bool is an Integral to Python, but tol=True is a mistake, not 1.0 (here and for integers).
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return _INVALID
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        return _INVALID
    above = number >= rule.low if rule.low_included else number > rule.low  # False for NaN
    below = number <= rule.high if rule.high_included else number < rule.high
    return number if above and below else _INVALID


def _check_integer(rule: _Rule, value):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and rule.low <= value <= rule.high:
        return int(value)
    return _INVALID


def _check_devices(rule: _Rule, value):
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value)
    if isinstance(value, (tuple, list)) and value and len(set(value)) == len(value) and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0 for v in value):
        return tuple(int(v) for v in value)
    return _INVALID


_CHECKS = {"choice": _check_choice, "algorithm": _check_algorithm, "flag": _check_flag, "real": _check_real,
           "integer": _check_integer, "devices": _check_devices}


def _choice(*choices: str) -> _Rule:
    return _Rule("choice", choices=choices)


def _real(low: float, high: float = math.inf, *, low_included: bool = False, high_included: bool = False,
          optional: bool = False) -> _Rule:
    return _Rule("real", low=low, high=high, low_included=low_included, high_included=high_included,
                 optional=optional)


def _integer(low: int, high: float = math.inf, *, optional: bool = False) -> _Rule:
    return _Rule("integer", low=low, high=high, optional=optional)


_FLAG = _Rule("flag")


def _setting(default, rule: _Rule, help: str):
    """A settings field: its default, its rule and its help text, kept in the field's metadata."""
    return field(default=default, metadata={"rule": rule, "help": help})


@dataclass(frozen=True, kw_only=True)
class _Validated:
    """A frozen group of settings whose fields are checked against their rules on construction and stored back as
    plain Python values, so that the solver and anything that serialises the settings see Python types only."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            rule = f.metadata.get("rule")
            if rule is not None:
                object.__setattr__(self, f.name, rule.check(f.name, getattr(self, f.name)))
            elif not isinstance(getattr(self, f.name), f.default_factory):
                raise ValueError(f"{f.name} must be a {f.default_factory.__name__}, got {getattr(self, f.name)!r}")


@dataclass(frozen=True, kw_only=True)
class LoRADSSettings(_Validated):
    """The low-rank method's advanced knobs (LoRADS's names in the help where it has one)."""

    phase1_tol: float = _setting(1e-3, _real(0.0), "primal infeasibility at which phase I (ALM) hands over to phase "
                                                   "II (ADMM) [LoRADS phase1Tol]")
    rho_max: float = _setting(5000.0, _real(0.0), "cap of the ADMM penalty [rhoMax]")
    max_alm_outer: int = _setting(200, _integer(1), "ALM outer iterations per phase I run [maxALMIter]")
    max_admm_iter: int = _setting(10_000, _integer(1), "ADMM sweeps per phase II run [maxADMMIter]")
    rank_factor: float | None = _setting(
        None, _real(0.0, optional=True),
        "initial rank of a block of order n is rank_factor ln n, capped by the Barvinok-Pataki bound [timesLogRank]; "
        "None: 4 where the Riemannian or trace-sphere phase runs, else LoRADS's 2")
    rank_growth: float = _setting(1.5, _real(1.0), "factor of a rank increase (saddle escape)")
    lbfgs_memory: int = _setting(2, _integer(1), "L-BFGS pairs kept [lbfgsListLength]; a kernel set may cap it")
    heuristic_factor: float = _setting(1.0, _real(0.0), "multiplier of the penalty at the switch to phase II "
                                                        "[heuristicFactor]")
    reopt_level: int = _setting(2, _integer(0, 2), "re-optimisation: 0 none; 1 at most one round while a criterion "
                                                   "exceeds tol; 2 up to 8 rounds")
    reopt_scale: float = _setting(5.0, _real(0.0), "objective factor of one re-optimisation round")
    l2_rescaling: bool = _setting(True, _FLAG, "divide A and b by the median l2 norm of the constraints' "
                                               "coefficients (errors are always measured on the unscaled problem) "
                                               "[l2Rescaling]")
    interior_point_handover: bool = _setting(
        True, _FLAG, "hand a problem small enough for the dense interior-point method (m <= 5000, blocks of order "
                     "<= 1500) to it when the low-rank phases do not finish, and back when it misses tol")
    interior_point_patience: int = _setting(5000, _integer(1), "inner iterations of the low-rank phases before the "
                                                               "hand-over to the interior-point method")


@dataclass(frozen=True, kw_only=True)
class SplitSettings(_Validated):
    """How a problem split over several devices (``Settings.devices``) is laid out; no effect on one device."""

    shard_order: str = _setting(
        "auto", _choice("auto", "given", "rcm"),
        "how rows are numbered before contiguous shards are cut: 'given'; 'rcm' (reverse Cuthill-McKee); 'auto': as "
        "given while every shard's halo is within 10 % of its rows, else RCM when that at least halves the halo. "
        "Factors are returned in the given order; renumbering counts towards time_limit")
    halo_precision: str = _setting(
        "double", _choice("single", "double"),
        "precision of the halo rows exchanged between devices in the Riemannian phase's looser runs; the returned "
        "point, its objective, multipliers and certificates always take double")


@dataclass(frozen=True, kw_only=True)
class Settings(_Validated):
    """Settings of :func:`cvxpy_culorads.solve`.

    Every value is checked on construction; a wrong one raises ``ValueError`` naming the setting and the value given.
    Numbers must be finite (``time_limit`` may be ``inf``), ``True``/``False`` is no number, and NumPy scalars are
    accepted and stored as Python ``int``/``float``/``bool``. The advanced groups are ``lorads``
    (:class:`LoRADSSettings`) and ``split`` (:class:`SplitSettings`); :meth:`from_options` takes the fields of every
    group by name. The documentation's settings reference lists every field with its default and valid values.
    """

    tol: float = _setting(1e-5, _real(0.0, 1.0), "tolerance on the measures that decide OPTIMAL (criterion)")
    time_limit: float = _setting(math.inf, _real(0.0, high_included=True),
                                 "seconds of wall clock (inf: none); the answer comes at most 10 % + 1 s later")
    max_iter: int = _setting(1_000_000, _integer(1), "ceiling on the inner iterations (L-BFGS steps plus ADMM sweeps "
                                                     "plus interior-point steps)")
    device: str = _setting("auto", _choice("auto", "cpu", "gpu"),
                           "'auto': the GPU when CuPy sees one and a step is estimated cheaper there (the environment "
                           "variable CULORADS_DEVICE overrides auto); 'cpu'; 'gpu'")
    devices: int | tuple[int, ...] | None = _setting(
        None, _Rule("devices"),
        "None: one device. A count k or a list of GPU ids: the factor's rows are split over that many devices (NCCL "
        "between GPUs; with device='cpu' the shards are simulated in one process), for one PSD block without "
        "nonnegative variables or low-rank terms")
    algorithm: Algorithm = _setting(Algorithm.AUTO, _Rule("algorithm"), "which method solves the problem "
                                                                           "(Algorithm)")
    precision: str = _setting(
        "double", _choice("double", "mixed"),
        "'double': every array in double precision. 'mixed': the Riemannian phase (every constraint fixes a diagonal "
        "entry: MaxCut, diag(X) == d) stores its factor, gradient, direction, L-BFGS pairs and C R in single "
        "precision, sums in double, and goes on in double precision from its point once single precision's rounding "
        "stops its descent; multipliers, residuals, certificates and the measurement of the returned point are double "
        "precision. The ALM/ADMM, trace-sphere and interior-point phases and solves split over several devices run "
        "in double (the log says so)")
    criterion: str = _setting(
        "certified", _choice("certified", "dimacs"),
        "'certified': the primal residual per constraint ||A(X) - b||_2 / (1 + ||b||_2) and the certified gap to a "
        "proven lower bound (or, with no bound, the dual slack's negative eigenvalues and the gap); 'dimacs': the "
        "cuLoRADS paper's three errors")
    reduced_tol: float | None = _setting(
        None, _real(0.0, 1.0, optional=True),
        "a point within reduced_tol but not tol is INACCURATE, above it STALLED; None: sqrt(tol); not below tol")
    trace_bound: float | None = _setting(
        None, _real(0.0, low_included=True, optional=True),
        "an upper bound on sum_k tr(X_k) + sum_j x_j of an optimal solution, for the dual bound of problems whose "
        "data imply none; None: derive what the data imply")
    rank: int | None = _setting(None, _integer(1, optional=True),
                                "initial rank of every PSD block; None: lorads.rank_factor ln n, narrowed to what fits "
                                "in device memory")
    seed: int = _setting(925, _integer(0, 2**32 - 1), "random seed of the starting point")
    threads: int | None = _setting(
        None, _integer(1, optional=True),
        "host BLAS threads of the dense stages (interior-point method, dense eigenvalue problems); None: chosen per "
        "stage from the work's size, the cores the process may use and the cores other processes keep busy (the "
        "low-rank phases always take one)")
    verbose: bool = _setting(False, _FLAG, "print the iteration log to stderr")
    log_every: float = _setting(0.5, _real(0.0, low_included=True), "seconds between log lines")
    keep_log: bool = _setting(False, _FLAG, "keep the iteration log in Result.log (one row per inner iteration)")
    lorads: LoRADSSettings = field(default_factory=LoRADSSettings)
    split: SplitSettings = field(default_factory=SplitSettings)

    def __post_init__(self):
        super().__post_init__()
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
        """Every option's name, the groups' fields included (the names :meth:`from_options` takes)."""
        return tuple(name for name, _, _ in _leaves())

    def changed(self) -> dict:
        """The options (by name, any group's) whose values differ from the defaults."""
        defaults = Settings()
        return {name: getattr(getattr(self, group) if group else self, name) for name, group, _ in _leaves()
                if getattr(getattr(self, group) if group else self, name)
                != getattr(getattr(defaults, group) if group else defaults, name)}

    @classmethod
    def from_options(cls, settings: Settings | None = None, **options) -> Settings:
        """Apply keyword ``options`` (any group's field, by name) on top of ``settings`` (or the defaults); unknown
        names are a ValueError listing the valid ones."""
        options = _renamed(options)
        unknown = sorted(set(options) - set(cls.names()) - {"lorads", "split"})
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(map(repr, unknown))}; "
                             f"valid settings are: {', '.join(cls.names())}")
        base = settings if settings is not None else cls()
        groups = {name: {} for name in _GROUPS}
        top = {}
        for name, value in options.items():
            group = _GROUP_OF.get(name)
            (groups[group] if group else top)[name] = value
        for group, changes in groups.items():
            if changes:
                top[group] = dataclasses.replace(top.get(group, getattr(base, group)), **changes)
        return dataclasses.replace(base, **top)


_GROUPS = {"lorads": LoRADSSettings, "split": SplitSettings}


def _leaves():
    """(name, group or None, field) of every option, the top level's first."""
    for f in dataclasses.fields(Settings):
        if f.name not in _GROUPS:
            yield f.name, None, f
    for group, cls in _GROUPS.items():
        for f in dataclasses.fields(cls):
            yield f.name, group, f


_GROUP_OF = {name: group for name, group, _ in _leaves() if group}

_DEPRECATED = {
    "route": "algorithm",
    "riemannian": "algorithm (False: algorithm='alm_admm')",
    "interior_point": "interior_point_handover",
}


def _renamed(options: dict) -> dict:
    """``options`` with the previous release's keywords (``route``, ``riemannian``, ``interior_point``) turned into
    ``algorithm`` and ``interior_point_handover``, each with a DeprecationWarning."""
    old = {name: options.pop(name) for name in list(options) if name in _DEPRECATED}
    if not old:
        return options
    for name in old:
        warnings.warn(f"the setting {name!r} is deprecated and will be removed in the next release: use "
                      f"{_DEPRECATED[name]}", DeprecationWarning, stacklevel=3)
    if "interior_point" in old:
        options.setdefault("interior_point_handover", old["interior_point"])
    if "route" in old or "riemannian" in old:
        route = old.get("route", "auto")
        riemannian = old.get("riemannian", True)
        if riemannian is False and route == "interior_point":
            raise ValueError("riemannian=False with route='interior_point' has no algorithm: use algorithm="
                             "'interior_point' (the low-rank phases it hands over to follow the problem's structure)")
        if riemannian is False:
            options.setdefault("algorithm", Algorithm.ALM_ADMM)
        elif riemannian is True:
            options.setdefault("algorithm", route)
        else:
            raise ValueError(f"riemannian must be True or False, got {riemannian!r}")
    return options


def reference_rows() -> list[dict]:
    """One dict per option, in the documentation's order: ``group`` ("main", "lorads" or "split"), ``name``,
    ``flag`` (the command line's), ``default``, ``allowed`` and ``help``, all strings."""
    rows = []
    for name, group, f in _leaves():
        rows.append({"group": group or "main", "name": name, "flag": _CLI_FLAGS.get(name, _flag(name)),
                     "default": _default_text(f),
                     "allowed": f.metadata["rule"].describe(), "help": f.metadata["help"]})
    return rows


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# the command line's own options for these: --gpus (a count or ids as "0,1") and --quiet (the log is on unless it is
# given); the command line prints no iteration rows, so keep_log has no flag
_CLI_FLAGS = {"devices": "--gpus", "verbose": "--quiet", "keep_log": ""}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add a flag for every option to ``parser`` (``--time-limit``, ``--no-l2-rescaling``, ...), from the fields'
    metadata; an absent flag leaves the option at its default."""
    group_titles = {None: "settings", "lorads": "advanced settings (LoRADS)", "split": "several devices"}
    groups = {key: parser.add_argument_group(title) for key, title in group_titles.items()}
    for name, group, f in _leaves():
        rule = f.metadata["rule"]
        if name in _CLI_FLAGS:
            continue
        help_text = f.metadata["help"].replace("%", "%%")  # argparse formats help with %
        kwargs = {"dest": name, "default": None, "help": f"{help_text} (default {_default_text(f)})"}
        if rule.kind == "flag":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif rule.kind in ("choice", "algorithm"):
            kwargs["choices"] = rule.choices if rule.kind == "choice" else [m.value for m in Algorithm]
        else:
            kwargs["type"] = _optional(float if rule.kind == "real" else int) if rule.optional else \
                (float if rule.kind == "real" else int)
        groups[group].add_argument(_flag(name), **kwargs)
    groups[None].add_argument("--gpus", dest="devices", default=None,
                              help="split the problem over several devices: a count, or GPU ids as 0,1 (with "
                                   "--device cpu the shards are simulated in one process)")


def _default_text(f) -> str:
    default = f.default.value if isinstance(f.default, Algorithm) else f.default
    return repr(default)


def _optional(kind):
    """A command-line type that also takes "none"."""
    def parse(text: str):
        return None if text.strip().lower() == "none" else kind(text)
    parse.__name__ = kind.__name__
    return parse


def _devices(text: str):
    """``--gpus``: a count ("2") or a list of GPU ids ("0,1"); Settings checks the values."""
    try:
        return int(text) if "," not in text else tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--gpus must be a count or GPU ids such as 0,1, got {text!r}") from None


def options_from_arguments(args: argparse.Namespace) -> dict:
    """The options given on a command line that :func:`add_arguments` made (absent flags left out)."""
    names = [name for name in Settings.names() if name not in ("verbose", "keep_log")]
    options = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    if "devices" in options:
        options["devices"] = _devices(options["devices"])
    return options
