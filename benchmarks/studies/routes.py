"""Small SDPs: the route the solver chooses against both routes forced, and Clarabel, in one run.

Usage::

    python benchmarks/studies/routes.py [--names truss1,control1,...] [--device cpu] [--out benchmarks/results/routes]

For every SDPLIB file it solves with ``algorithm="auto"`` (the choice of ``costs.py``), ``"interior_point"`` and
``"low_rank"`` and records the wall time of ``solve`` (set-up included: on these sizes it is part of what a user
waits for), the iterations of each method and the status; then, up to the block order of ``compare.PEER_MAX_N``,
the same problem stated in CVXPY and solved through it by us and by Clarabel: the best of three whole ``solve`` calls
each (``culorads_cvxpy_s``, ``clarabel_s``; canonicalisation included, on fresh models), their ratio
(``cvxpy_ratio``), and Clarabel's own solver time (``clarabel_solver_s``, CVXPY's ``solve_time``). It
also fits the interior-point method's cost model: ``ipm_estimate_s`` is what ``costs.RouteCosts`` expected. A line
per problem as it finishes, then a Markdown table; ``<device>.csv`` and its ``.meta.json``
go to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cvxpy  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.operators.compressed import BlockLayout  # noqa: E402
from cvxpy_culorads.phases.state import RANK_FACTOR, block_ranks  # noqa: E402
from cvxpy_culorads.solver.costs import RouteCosts  # noqa: E402

from compare import PEER_MAX_N, to_cvxpy  # noqa: E402
from report import device_slug, write_tables  # noqa: E402
from suites import DATA  # noqa: E402

ISSUE_SET = ("truss1,truss4,truss5,truss8,control1,control3,hinf1,hinf5,qap5,qap7,theta1,theta2,"
             "mcp124-1,mcp250-1,mcp500-1,gpp124-1,arch0")
ROUTES = ("auto", "interior_point", "low_rank")
CVXPY_REPEATS = 3


def _through_cvxpy(problem, solver: str):
    """The best of ``CVXPY_REPEATS`` whole ``solve`` calls (one when a call takes over a second: gpp124-1 takes
    Clarabel minutes), each on a fresh CVXPY model of ``problem`` (so that no call reuses another's
    canonicalisation), and the last model; a failing solve returns (seconds, None, error text)."""
    best = float("inf")
    for _ in range(CVXPY_REPEATS):
        cvx, _ = to_cvxpy(problem)
        start = time.perf_counter()
        try:
            cvx.solve(solver=solver)
        except cvxpy.SolverError as exc:  # a failing peer is a result to report, not a reason to stop
            return time.perf_counter() - start, None, f"error: {exc}"[:40]
        best = min(best, time.perf_counter() - start)
        if best > 1.0:
            break
    return best, cvx, cvx.status


def _cvxpy_columns(problem) -> dict:
    """Ours and Clarabel through CVXPY: whole ``solve`` calls (``culorads_cvxpy_s``, ``clarabel_s``), their ratio, and
    Clarabel's own solver time (CVXPY's ``solve_time``) and value."""
    ours, _, _ = _through_cvxpy(problem, "CULORADS")
    seconds, cvx, status = _through_cvxpy(problem, "CLARABEL")
    row = dict(culorads_cvxpy_s=round(ours, 4), clarabel_s=round(seconds, 4),
               cvxpy_ratio=float(f"{ours / seconds:.2g}"), clarabel_status=status)
    if cvx is not None:
        row.update(clarabel_solver_s=round(cvx.solver_stats.solve_time, 4), clarabel_value=-cvx.value)  # SDPA's max
    return row


def _row(name: str, device: str, time_limit: float) -> dict:
    path = sorted((DATA / "sdplib").glob(f"{name}.dat-s*"))[0]
    problem = cl.read_sdpa(path)
    defaults = cl.Settings()
    ranks, _ = block_ranks(BlockLayout.of(problem), defaults.rank, RANK_FACTOR)  # what the solve's estimate takes
    estimate = RouteCosts.of(problem, ranks, device == "gpu")
    row = dict(instance=name, n=sum(problem.block_sizes) + problem.n_lp, m=problem.m, blocks=problem.num_blocks,
               ipm_estimate_s=round(estimate.interior_point, 4), low_rank_estimate_s=round(estimate.low_rank, 4))
    for route in ROUTES:
        start = time.perf_counter()
        result = cl.solve(problem, device=device, algorithm=route, time_limit=time_limit)
        row[f"{route}_s"] = round(time.perf_counter() - start, 4)
        row[f"{route}_status"] = result.status.value
        if route == "auto":
            row["auto_first"] = "ipm" if result.route.startswith("interior") else "low-rank"
            row["value"] = -result.primal_objective  # SDPA's maximisation
        low_rank_steps = result.iterations["alm"] + result.iterations["admm"] + result.iterations["riemannian"]
        row[f"{route}_steps"] = f"{low_rank_steps}+{result.iterations['interior_point']}"
    if max(problem.block_sizes) <= PEER_MAX_N["clarabel"]:  # beyond it Clarabel's dense scaling exhausts memory
        row.update(_cvxpy_columns(problem))
    print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", default=ISSUE_SET)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "routes"))
    args = parser.parse_args(argv)
    rows = [_row(name, args.device, args.time_limit) for name in args.names.split(",")]
    title = f"Small SDPLIB problems by route on {args.device}, {datetime.date.today()}"
    columns = ["instance", "n", "m", "blocks", "auto_first", "auto_s", "interior_point_s", "low_rank_s",
               "clarabel_solver_s", "culorads_cvxpy_s", "clarabel_s", "cvxpy_ratio", "ipm_estimate_s",
               "low_rank_estimate_s", "auto_steps", "auto_status",
               "value", "clarabel_value"]
    device = select_backend(args.device).describe()
    print(write_tables(rows, Path(args.out) / device_slug(device), title, columns=columns, device=device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
