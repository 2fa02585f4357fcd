"""The benchmark suites: which instances each one solves, how it builds them, and the settings profiles.

A suite is a list of :class:`Instance`; ``build()`` makes the :class:`~cvxpy_culorads.SDPProblem` only
when the runner gets to it (large instances are generated one at a time). Suites:

- ``gset``: the Gset MaxCut graphs of ``../shared/data/gset`` (certified SDP values from its README);
- ``rgg`` / ``delaunay``: the paper's synthetic MaxCut families, 2^k vertices (``graphs.py`` has the
  recipes and seeds; rgg graphs are generated on the GPU when the device is one);
- ``sparse``: MaxCut of ``graphs.random_regular_like(n, 4)`` (average degree ~4, no locality, like the
  k-mer graphs of the paper's largest instance), sizes given as n;
- ``completion``: nuclear-norm completion of a random rank-r n1 x n1 matrix from m entries, sizes ``n1:m`` or
  ``n1:m:r`` (r = 5 unless given);
- ``sdplib``: SDPA files of ``../shared/data/sdplib`` against their known optima;
- ``theta``: the Lovasz theta function of Hamming graphs H(d, q) (sizes ``d:q``, theta = q^(d - 1) exactly) or of
  graphs read from files (a path, absolute or under the data folder), each in both formulations of
  ``models.theta_problem`` unless the size names one (``d:q:sparse``, ``path:low_rank``);
- ``mittelmann``: Mittelmann's sparse SDP benchmark, the instances of ``../shared/data/mittelmann`` by name (default
  all, smallest first) or any SDPA file by path (``.dat-s``, ``.xz``, ``.gz``); the value is the primal objective
  in min form, as the known values of ``datasets.MITTELMANN`` are, and each row carries the instance's class and
  published times (a file named like a listed instance gets its entry);
- ``targets``: the speed targets of issue 51 (``TARGETS``: G67, delaunay, rgg, sparse, completion on the GPU, sparse
  n = 1e5 on the 2-core CPU by the direct API and through CVXPY's ``method="culorads"``), each the instance of its
  own suite with its :class:`Target` beside; sizes are the names of ``TARGETS`` (default ``all``: the one-device
  rows of the device the run is on). Its rows are run with the defaults, the other precision and the paper profile
  (``DEFAULT_PROFILES``).

Profiles: ``accurate`` is the solver's defaults (the certified criterion: primal residual per constraint and
certified gap within tol). ``paper`` is how the cuLoRADS paper's times were taken: the tuned settings of the
LoRADS benchmarking scripts (``../shared/reference/lorads_spec.md``, "third-party tuned settings"), no
re-optimisation and the paper's stopping rule (``criterion="dimacs"``), under which the certified gap of large
graphs stays at 1e-2 to 1e-1 (the ``certified_gap`` column, reported for both profiles). ``alm`` is the
defaults with ``algorithm="alm_admm"``: MaxCut by phases I and II (ALM, ADMM) as in the paper, not on its product of
spheres (``cvxpy_culorads/phases/riemannian.py``); the ``paper`` profile sets it too. ``double`` and ``mixed`` are
the defaults with ``precision`` set; ``OTHER_PRECISION`` is the one that is not the default.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads import Settings, read_sdpa
from cvxpy_culorads.models import (
    THETA_FORMULATIONS,
    completion_error,
    completion_problem,
    hamming_graph,
    hamming_theta,
    maxcut_problem,
    maxcut_problem_from_edges,
    random_low_rank_instance,
    read_graph,
    theta_problem,
)

import datasets
import graphs

__all__ = ["Instance", "Target", "SUITES", "TARGETS", "PROFILES", "DEFAULT_PROFILES", "instances", "settings_for"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# The cuLoRADS paper's H100 times (seconds), as the issue tracker quotes them.
PAPER_H100_SECONDS = {
    "gset": {"G1": 0.4, "G22": 3.0, "G60": 0.2, "G64": 2.2, "G67": 0.6},
    "delaunay": {13: 0.2, 16: 0.4, 18: 0.7, 20: 1.7, 22: 8.7, 24: 42.1},
    "rgg": {19: 1.3, 20: 2.6, 22: 13.5, 24: 62.7},
    "completion": {(10_000, 7_700_000): 0.4, (400_000, 320_000_000): 39.7, (10_000_000, 200_000_000): 443.0},
}

_PAPER_RULE = dict(reopt_level=0, criterion="dimacs")
_LARGE_MAXCUT = dict(phase1_tol=10.0, heuristic_factor=100.0, rank_factor=0.25, **_PAPER_RULE)
_SMALL_MAXCUT = dict(phase1_tol=1e-2, heuristic_factor=10.0, **_PAPER_RULE)
PRECISIONS = ("double", "mixed")
PROFILES = ("accurate", "paper", "alm", *PRECISIONS)
OTHER_PRECISION = next(p for p in PRECISIONS if p != Settings().precision)
# Rank of the completion instances' truth unless the size names one (see the README on n = 2e7).
DEFAULT_TRUTH_RANK = 5
SDPA_SUFFIXES = (".dat-s", ".dat-s.xz", ".dat-s.gz")


@dataclass(frozen=True)
class Target:
    """A speed target: met when the certified gap and the primal residual are within ``tol`` and the time on
    ``clock`` (``seconds``, after the data reached the device, as the paper counts; ``call_s``, the whole call a
    user waits for) is within ``seconds`` (None: no time target). The row is solved with this ``tol`` on
    ``devices`` GPUs (or the CPU where ``device`` is "cpu")."""

    seconds: float | None
    tol: float = 1e-5
    devices: int = 1
    device: str = "gpu"
    clock: str = "seconds"

    def options(self) -> dict:
        """What every profile's solve of the row gets: this tolerance, and the devices where more than one."""
        return dict(tol=self.tol, **({"devices": self.devices} if self.devices > 1 else {}))

    def columns(self, row: dict) -> dict:
        """The target beside a row of ``run.solve_row`` and whether the row met it."""
        gap = row["certified_gap"]
        met = (gap != "" and gap <= self.tol and row["primal_residual"] <= self.tol
               and (self.seconds is None or row[self.clock] <= self.seconds))
        return dict(target_s="" if self.seconds is None else self.seconds, target_tol=self.tol,
                    target_clock=self.clock, met=met)


@dataclass
class Instance:
    name: str
    build: Callable  # () -> (problem, extra): an SDPProblem, or a CVXPY problem solved by method="culorads";
    # extra(result) -> dict of suite-specific columns
    paper_seconds: float | None = None
    paper_settings: dict = field(default_factory=dict)
    sign: float = -1.0  # value = sign * primal objective (MaxCut and SDPA report the maximisation's value)
    reference: float | None = None  # the known optimal value, where the data set lists one
    target: Target | None = None


def settings_for(instance: Instance, profile: str) -> dict:
    """The solve options of ``profile`` on ``instance``, with its target's tolerance and devices where it has one."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILES}")
    fixed = {} if instance.target is None else instance.target.options()
    # the paper's method has no interior-point finish: without this, a problem whose phases end short of tol (the
    # paper's reopt_level=0) would wait for the interior-point method's estimate, minutes on sparse MaxCut n = 2000
    paper = dict(instance.paper_settings, algorithm="alm_admm", interior_point_handover=False)
    return fixed | {"paper": paper, "alm": dict(algorithm="alm_admm"),
                    **{p: dict(precision=p) for p in PRECISIONS}}.get(profile, {})


def _no_extra(result) -> dict:
    return {}


def _maxcut(W, name: str):
    """(MaxCut SDP of the adjacency W, a device or host CSR matrix; its edge-count column)."""
    W = W.get() if hasattr(W, "get") else W
    return maxcut_problem(W, name=name), lambda result: dict(edges=W.nnz // 2)


def _gset(names: str, device: str) -> list[Instance]:
    folder = DATA / "gset"
    chosen = datasets.gset_names(folder) if names == "all" else names.split(",")

    def builder(name):
        return lambda: (maxcut_problem(read_graph(folder / name), name=name), _no_extra)
    # listing the instances needs no data (the targets suite lists G67 beside instances generated on the fly): the
    # certified values come with the graphs, in the data folder's README
    listed = (folder / "README.md").exists()
    return [Instance(name, builder(name), PAPER_H100_SECONDS["gset"].get(name), _SMALL_MAXCUT,
                     reference=datasets.gset_value(folder, name) if listed else None) for name in chosen]


def _graph_family(suite: str):
    def make(names: str, device: str) -> list[Instance]:
        def builder(k):
            def build():
                if suite == "rgg":
                    return _maxcut(graphs.rgg_graph(k, seed=0, device=device), f"{suite}{k}")
                return _maxcut(graphs.delaunay_graph(k, seed=0), f"{suite}{k}")
            return build
        return [Instance(f"{suite}_2^{k}", builder(k), PAPER_H100_SECONDS[suite].get(k), _LARGE_MAXCUT)
                for k in (int(v) for v in names.split(","))]
    return make


def _sparse(names: str, device: str) -> list[Instance]:
    def builder(n):
        def build():  # from the edge list: at n = 3e8 the symmetric W would take minutes of the host
            rows, cols = graphs.random_regular_like_edges(n, 4, seed=1, device=device)
            return maxcut_problem_from_edges(n, rows, cols, name=f"sparse{n}"), lambda result: dict(edges=rows.size)
        return build
    sizes = [int(float(v)) for v in names.split(",")]
    return [Instance(f"sparse_{n:.0e}", builder(n), None, _LARGE_MAXCUT) for n in sizes]


def maxcut_model(W):
    """The MaxCut SDP of W as a user writes it in CVXPY: max <L, X> / 4, diag(X) = 1, X PSD, L the Laplacian."""
    import cvxpy as cp  # only here: a GPU image may lack CVXPY

    laplacian = sp.diags_array(np.asarray(W.sum(axis=1)).ravel()) - W
    X = cp.Variable(W.shape, PSD=True)
    return cp.Problem(cp.Maximize(cp.trace(laplacian @ X) / 4), [cp.diag(X) == 1])


def _sparse_cvxpy(names: str, device: str) -> list[Instance]:
    """The ``sparse`` graphs through CVXPY (the model of :func:`maxcut_model`); value = the maximisation's."""
    def builder(n):
        def build():
            W = graphs.random_regular_like(n, 4, seed=1)
            return maxcut_model(W), lambda result: dict(edges=W.nnz // 2)
        return build
    return [Instance(f"sparse_{n:.0e}_cvxpy", builder(n), None, _LARGE_MAXCUT)
            for n in (int(float(v)) for v in names.split(","))]


def _completion(names: str, device: str) -> list[Instance]:
    """Sizes ``n1:m`` or ``n1:m:r``: an n1 x n1 matrix of rank r (default 5) with m observed entries."""
    def builder(n1, m, rank):
        def build():
            r, c, v, factors = random_low_rank_instance(n1, n1, rank, m, seed=0)
            problem = completion_problem(r, c, v, (n1, n1), name=f"completion{n1}")
            return problem, lambda result: dict(truth_rank=rank,
                                                recovery=completion_error(result.factors[0], n1, factors))
        return build
    out = []
    for size in names.split(","):
        n1, m, rank = (tuple(int(float(v)) for v in size.split(":")) + (DEFAULT_TRUTH_RANK,))[:3]
        paper = dict(heuristic_factor=10.0, **_PAPER_RULE, **({"rank_factor": 1.0} if 2 * n1 >= 10_000 else {}))
        suffix = "" if rank == DEFAULT_TRUTH_RANK else f"_r{rank}"
        out.append(Instance(f"completion_{2 * n1}_{m}{suffix}", builder(n1, m, rank),
                            PAPER_H100_SECONDS["completion"].get((n1, m)), paper, sign=1.0))
    return out


def _sdplib(names: str, device: str) -> list[Instance]:
    folder = DATA / "sdplib"

    def builder(name):
        def build():
            paths = sorted(folder.glob(f"{name}.dat-s*"))
            if not paths:
                raise FileNotFoundError(f"no {name}.dat-s[.xz|.gz] in {folder}")
            return read_sdpa(paths[0]), _no_extra
        return build
    return [Instance(name, builder(name), None, _SMALL_MAXCUT if name.startswith(("mcp", "maxG")) else
                     _PAPER_RULE, reference=datasets.sdplib_optimum(folder, name))
            for name in names.split(",")]


def _theta(names: str, device: str) -> list[Instance]:
    out = []
    for size in names.split(","):
        parts = size.split(":")
        formulations = THETA_FORMULATIONS
        if parts[-1] in THETA_FORMULATIONS:
            formulations, parts = (parts[-1],), parts[:-1]
        if len(parts) == 2:
            d, q = int(parts[0]), int(parts[1])
            label, graph, reference = f"H({d},{q})", (lambda d=d, q=q: hamming_graph(d, q)), hamming_theta(d, q)
        else:
            path = Path(parts[0]) if Path(parts[0]).is_absolute() else DATA / parts[0]
            label, graph, reference = path.name, (lambda path=path: read_graph(path)), None

        def builder(graph, formulation, name):
            def build():
                W = graph()
                return theta_problem(W, formulation, name=name), lambda result: dict(edges=W.nnz // 2)
            return build
        out += [Instance(f"theta_{label}_{formulation}", builder(graph, formulation, f"theta_{label}"), None,
                         dict(_PAPER_RULE), reference=reference) for formulation in formulations]
    return out


def _mittelmann(names: str, device: str) -> list[Instance]:
    folder = DATA / "mittelmann"

    def builder(path, published):
        shown = {key: "" if value is None else value for key, value in published._asdict().items() if key != "known"}
        return lambda: (read_sdpa(path), lambda result: dict(shown, total_s=round(result.solve_time, 3)))
    out = []
    for entry in datasets.MITTELMANN if names == "all" else names.split(","):
        path = Path(entry) if entry.endswith(SDPA_SUFFIXES) else folder / f"{entry}.dat-s.xz"
        name = re.sub(r"\.dat-s(\.xz|\.gz)?$", "", path.name)
        published = datasets.MITTELMANN.get(name, datasets.MittelmannEntry("not listed"))
        out.append(Instance(name, builder(path, published), None, _PAPER_RULE, sign=1.0, reference=published.known))
    return out


# Issue 51's targets: name -> (suite, size in that suite, target). One H100 unless the target says otherwise;
# the GPU times are the paper's where it has the instance.
TARGETS = {
    "G67": ("gset", "G67", Target(0.6)),
    "delaunay20": ("delaunay", "20", Target(1.7)),
    "delaunay24": ("delaunay", "24", Target(42.1)),
    "rgg22": ("rgg", "22", Target(13.5)),
    "rgg24": ("rgg", "24", Target(62.7)),
    "sparse1e7": ("sparse", "1e7", Target(30.0)),
    "completion2e4": ("completion", "10000:7700000", Target(0.4)),
    "sparse1e8": ("sparse", "1e8", Target(158.0, tol=1e-4)),
    "sparse3e8": ("sparse", "3e8", Target(None, devices=2)),
    "cpu-sparse1e5": ("sparse", "1e5", Target(60.0, device="cpu", clock="call_s")),
    "cpu-sparse1e5-cvxpy": ("sparse-cvxpy", "1e5", Target(60.0, device="cpu", clock="call_s")),
}


def _targets(names: str, device: str) -> list[Instance]:
    """The instances of ``TARGETS`` by name; ``all``: those of one ``device`` ("cpu" or "gpu")."""
    chosen = ([name for name, (_, _, target) in TARGETS.items() if target.device == device and target.devices == 1]
              if names == "all" else names.split(","))
    unknown = [name for name in chosen if name not in TARGETS]
    if unknown:
        raise ValueError(f"unknown targets {unknown}; expected names of {list(TARGETS)}")
    out = []
    for name in chosen:
        suite, size, target = TARGETS[name]
        (instance,) = SUITES[suite](size, device)
        out.append(dataclasses.replace(instance, name=name, target=target))
    return out


SUITES = {"gset": _gset, "rgg": _graph_family("rgg"), "delaunay": _graph_family("delaunay"), "sparse": _sparse,
          "sparse-cvxpy": _sparse_cvxpy, "completion": _completion, "sdplib": _sdplib, "theta": _theta,
          "mittelmann": _mittelmann, "targets": _targets}

DEFAULT_SIZES = {"gset": "G1,G11,G22,G43,G60,G63,G64,G67,G81", "rgg": "15,17,19,20", "delaunay": "13,14,16,18",
                 "sparse": "1e6,1e7", "sparse-cvxpy": "1e4", "completion": "1000:200000,10000:7700000",
                 "sdplib": "mcp124-1,theta1,truss1", "theta": "3:10,4:10", "mittelmann": "all", "targets": "all"}
DEFAULT_PROFILES = {"targets": ("accurate", OTHER_PRECISION, "paper")}  # other suites: accurate


def instances(suite: str, names: str | None, device: str) -> list[Instance]:
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {sorted(SUITES)}")
    return SUITES[suite](names or DEFAULT_SIZES[suite], device)
