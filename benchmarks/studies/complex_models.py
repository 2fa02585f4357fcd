"""Small complex (Hermitian) models through CVXPY: time and error of Clarabel, SCS and ours on both entry points.

Usage::

    python benchmarks/studies/complex_models.py [--dims 2,4,8] [--seeds 0,1,2] [--time-limit 60] [--out DIR]

Two models with a value known in closed form, at each order d (a random instance per seed):

- ``fidelity``: max Re tr(Y) s.t. [[rho, Y], [Y^H, sigma]] PSD with rho = psi psi^H of rank one and sigma of full
  rank, whose value is the fidelity sqrt(psi^H sigma psi). The LMI has no Slater point (rho is singular) and the
  optimal multipliers are not attained: the hard case of issue 48.
- ``ground_state``: min Re tr(H X) s.t. tr X = 1, X Hermitian PSD, whose value is lambda_min(H).

Each is solved by Clarabel, SCS, ``solver="CULORADS"`` (``chain``), ``method="culorads"`` (``method``; complex data
falls back to the chain) and, for the fidelity, ``chain`` with the LMI form kept primal (``chain_primal_form``,
``to_sdp_problem(..., dualize=False)``: the route before the dual form). ``seconds`` is the whole ``prob.solve`` call
(compilation included), ``error`` = |value - truth| / (1 + |truth|). One line per solve as it finishes, then a
Markdown table of the median time and the largest error over the seeds; ``<device>.csv`` (every solve) and its
``.meta.json`` go to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import statistics
import sys
import time
import warnings
from pathlib import Path

import cvxpy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cvxpy_culorads  # noqa: E402,F401  (registers the solver and the solve method)
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.cvxpy import conic  # noqa: E402

from report import device_slug, write_tables  # noqa: E402

SOLVERS = ("clarabel", "scs", "chain", "method", "chain_primal_form")


def fidelity(d: int, seed: int) -> tuple[cp.Problem, float]:
    """The fidelity SDP of a pure state rho = psi psi^H and a full-rank sigma; its value sqrt(psi^H sigma psi)."""
    rng = np.random.default_rng(seed)
    psi = rng.normal(size=d) + 1j * rng.normal(size=d)
    psi /= np.linalg.norm(psi)
    G = rng.normal(size=(d, d)) + 1j * rng.normal(size=(d, d))
    sigma = G @ G.conj().T
    sigma /= np.trace(sigma).real
    Y = cp.Variable((d, d), complex=True)
    problem = cp.Problem(cp.Maximize(cp.real(cp.trace(Y))), [cp.bmat([[np.outer(psi, psi.conj()), Y],
                                                                      [Y.H, sigma]]) >> 0])
    return problem, float(np.sqrt((psi.conj() @ sigma @ psi).real))


def ground_state(d: int, seed: int) -> tuple[cp.Problem, float]:
    """min Re tr(H X) over density matrices X; its value lambda_min(H)."""
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(d, d)) + 1j * rng.normal(size=(d, d))
    H = (G + G.conj().T) / 2
    X = cp.Variable((d, d), hermitian=True)
    problem = cp.Problem(cp.Minimize(cp.real(cp.trace(H @ X))), [X >> 0, cp.real(cp.trace(X)) == 1])
    return problem, float(np.linalg.eigvalsh(H)[0])


MODELS = {"fidelity": fidelity, "ground_state": ground_state}


def solve_once(problem: cp.Problem, solver: str, time_limit: float) -> tuple[float, str, float]:
    """(seconds, status, value) of one ``prob.solve``."""
    if solver == "chain_primal_form":
        original = conic.to_sdp_problem
        conic.to_sdp_problem = functools.partial(original, dualize=False)
    try:
        options = {"clarabel": dict(solver="CLARABEL"), "scs": dict(solver="SCS"),
                   "chain": dict(solver="CULORADS", time_limit=time_limit),
                   "chain_primal_form": dict(solver="CULORADS", time_limit=time_limit),
                   "method": dict(method="culorads", time_limit=time_limit)}[solver]
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # CVXPY's "solution may be inaccurate": the status says it
            try:
                problem.solve(**options)
                value, status = problem.value, problem.status
            except cp.error.SolverError:
                value, status = float("nan"), "solver_error"
        return time.perf_counter() - start, status, float(value)
    finally:
        if solver == "chain_primal_form":
            conic.to_sdp_problem = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", default="2,4,8")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "complex-models"))
    args = parser.parse_args()
    dims = [int(v) for v in args.dims.split(",")]
    seeds = [int(v) for v in args.seeds.split(",")]
    solve_once(fidelity(2, 0)[0], "chain", args.time_limit)  # imports and first calls outside every clock

    rows = []
    for name, make in MODELS.items():
        for d in dims:
            for seed in seeds:
                for solver in SOLVERS:
                    if solver == "chain_primal_form" and name != "fidelity":
                        continue
                    problem, truth = make(d, seed)
                    seconds, status, value = solve_once(problem, solver, args.time_limit)
                    error = abs(value - truth) / (1.0 + abs(truth))
                    rows.append(dict(model=name, d=d, seed=seed, solver=solver, seconds=seconds, status=status,
                                     error=error, value=value, truth=truth))
                    print(f"{name:>12} d={d} seed={seed} {solver:>17}: {seconds:7.3f} s {status:>18} "
                          f"error {error:.1e}", flush=True)
    summary = []
    for name in MODELS:
        for d in dims:
            row = dict(model=name, d=d)
            for solver in SOLVERS:
                runs = [r for r in rows if r["model"] == name and r["d"] == d and r["solver"] == solver]
                if runs:
                    row[f"{solver}_s"] = statistics.median(r["seconds"] for r in runs)
                    row[f"{solver}_error"] = max(r["error"] for r in runs)
                    row[f"{solver}_optimal"] = f"{sum(r['status'] == 'optimal' for r in runs)}/{len(runs)}"
            summary.append(row)
    device = select_backend("cpu").describe()
    title = (f"Small complex models through CVXPY, cpu, {datetime.date.today()}: median seconds of the whole solve "
             f"over seeds {args.seeds}, largest error |value - truth| / (1 + |truth|), seeds ending optimal")
    stem = Path(args.out) / device_slug(device)
    write_tables(rows, stem, title, device=device)
    columns = ["model", "d"] + [f"{solver}_{what}" for solver in SOLVERS for what in ("s", "error", "optimal")]
    print(write_tables(summary, stem.with_name(stem.name + "-summary"), title, device=device,
                       columns=[c for c in columns if any(c in row for row in summary)]))


if __name__ == "__main__":
    main()
