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
  published times (a file named like a listed instance gets its entry).

Profiles: ``accurate`` is the solver's defaults (the certified criterion: primal residual per constraint and
certified gap within tol). ``paper`` is how the cuLoRADS paper's times were taken: the tuned settings of the
LoRADS benchmarking scripts (``../shared/reference/lorads_spec.md``, "third-party tuned settings"), no
re-optimisation and the paper's stopping rule (``criterion="dimacs"``), under which the certified gap of large
graphs stays at 1e-2 to 1e-1 (the ``certified_gap`` column, reported for both profiles). ``alm`` is the
defaults with ``algorithm="alm_admm"``: MaxCut by phases I and II (ALM, ADMM) as in the paper, not on its product of
spheres (``cvxpy_culorads/phases/riemannian.py``); the ``paper`` profile sets it too.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cvxpy_culorads import read_sdpa
from cvxpy_culorads.models import (
    THETA_FORMULATIONS,
    completion_error,
    completion_problem,
    hamming_graph,
    hamming_theta,
    maxcut_problem,
    random_low_rank_instance,
    read_graph,
    theta_problem,
)

import datasets
import graphs

__all__ = ["Instance", "SUITES", "PROFILES", "instances", "settings_for"]

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
PROFILES = ("accurate", "paper", "alm")
# Rank of the completion instances' truth unless the size names one (see the README on n = 2e7).
DEFAULT_TRUTH_RANK = 5
SDPA_SUFFIXES = (".dat-s", ".dat-s.xz", ".dat-s.gz")


@dataclass
class Instance:
    name: str
    build: Callable  # () -> (SDPProblem, extra) with extra(result) -> dict of suite-specific columns
    paper_seconds: float | None = None
    paper_settings: dict = field(default_factory=dict)
    sign: float = -1.0  # value = sign * primal objective (MaxCut and SDPA report the maximisation's value)
    reference: float | None = None  # the known optimal value, where the data set lists one


def settings_for(instance: Instance, profile: str) -> dict:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILES}")
    return {"paper": dict(instance.paper_settings, algorithm="alm_admm"),
            "alm": dict(algorithm="alm_admm")}.get(profile, {})


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
    return [Instance(name, builder(name), PAPER_H100_SECONDS["gset"].get(name), _SMALL_MAXCUT,
                     reference=datasets.gset_value(folder, name)) for name in chosen]


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
        return lambda: _maxcut(graphs.random_regular_like(n, 4, seed=1, device=device), f"sparse{n}")
    sizes = [int(float(v)) for v in names.split(",")]
    return [Instance(f"sparse_{n:.0e}", builder(n), None, _LARGE_MAXCUT) for n in sizes]


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


SUITES = {"gset": _gset, "rgg": _graph_family("rgg"), "delaunay": _graph_family("delaunay"), "sparse": _sparse,
          "completion": _completion, "sdplib": _sdplib, "theta": _theta, "mittelmann": _mittelmann}

DEFAULT_SIZES = {"gset": "G1,G11,G22,G43,G60,G63,G64,G67,G81", "rgg": "15,17,19,20", "delaunay": "13,14,16,18",
                 "sparse": "1e6,1e7", "completion": "1000:200000,10000:7700000", "sdplib": "mcp124-1,theta1,truss1",
                 "theta": "3:10,4:10", "mittelmann": "all"}


def instances(suite: str, names: str | None, device: str) -> list[Instance]:
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {sorted(SUITES)}")
    return SUITES[suite](names or DEFAULT_SIZES[suite], device)
