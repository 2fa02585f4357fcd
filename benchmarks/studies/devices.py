"""Where the GPU starts to pay: the same problems solved on the CPU and on the GPU, step times side by side.

Usage::

    python benchmarks/studies/devices.py [--maxcut 1000,10000,100000] [--sdplib truss1,theta1] [--out DIR]

For every problem (MaxCut of ``graphs.random_regular_like(n, 10)``, and SDPLIB files) it solves once per device
with the low-rank phases first (``algorithm="low_rank"``), so that both devices run the same method, and records the
whole ``solve`` call (``cpu_s``, ``gpu_s``; set-up included: on these sizes it is part of what a user waits for),
the low-rank steps, the seconds per step (``cpu_step_ms``, ``gpu_step_ms``: phase I and II time over their
steps) and what ``device="auto"`` chose (``auto_device``) with its whole time (``auto_s``). Every problem is
solved once on the GPU, untimed, before it is timed: CuPy compiles a kernel the first time it meets a new shape
or dtype, seconds that a process pays once (and its disk cache mostly spares the next one). These numbers
calibrate ``costs.DeviceCosts`` (the GPU's step, and the CPU's on the GPU machine's host). A line per problem as
it finishes, then a Markdown table; ``host-<gpu>.csv`` and its ``.meta.json`` go to
``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402

from graphs import random_regular_like  # noqa: E402
from report import device_slug, write_tables  # noqa: E402
from suites import DATA  # noqa: E402

MAXCUT_SIZES = "200,1000,3000,10000,30000,100000,300000,1000000"
SDPLIB_NAMES = "truss1,control1,theta1,qap5,mcp250-1,mcp500-1"


def _problems(maxcut: str, sdplib: str):
    for n in (int(float(v)) for v in maxcut.split(",") if v):
        yield f"maxcut_{n}", lambda n=n: maxcut_problem(random_regular_like(n, 10, seed=1))
    for name in (v for v in sdplib.split(",") if v):
        yield name, lambda name=name: cl.read_sdpa(sorted((DATA / "sdplib").glob(f"{name}.dat-s*"))[0])


def _timed(problem, device: str, time_limit: float, route: str) -> tuple[float, cl.Result]:
    start = time.perf_counter()
    result = cl.solve(problem, device=device, algorithm=route, time_limit=time_limit)
    return time.perf_counter() - start, result


def _row(name: str, problem, time_limit: float) -> dict:
    nnz_C = sum(vals.size for _, _, vals in problem.C_coords)  # lower triangles, as stored
    row = dict(instance=name, n=sum(problem.block_sizes) + problem.n_lp, m=problem.m, nnz=problem.nnz + nnz_C)
    _timed(problem, "gpu", time_limit, "low_rank")  # compiles what this problem needs
    for device in ("cpu", "gpu"):
        seconds, result = _timed(problem, device, time_limit, "low_rank")
        steps = result.iterations["alm"] + result.iterations["admm"]
        row[f"{device}_s"] = round(seconds, 4)
        row[f"{device}_steps"] = steps
        row[f"{device}_step_ms"] = round(1e3 * (result.stage_times["alm"] + result.stage_times["admm"])
                                         / max(steps, 1), 4)
        row[f"{device}_rank"] = max(result.ranks, default=0)
        row[f"{device}_status"] = result.status.value
    seconds, result = _timed(problem, "auto", time_limit, "auto")
    row.update(auto_device=result.device.split()[0], auto_s=round(seconds, 4), auto_status=result.status.value)
    print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maxcut", default=MAXCUT_SIZES, help="MaxCut sizes n (random graphs of degree 10)")
    parser.add_argument("--sdplib", default=SDPLIB_NAMES, help="SDPLIB names")
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "devices"))
    args = parser.parse_args(argv)
    if "gpu" not in cl.available_devices():
        print("devices.py compares the CPU with the GPU: no GPU is usable here", file=sys.stderr)
        return 2
    cl.solve(maxcut_problem(random_regular_like(300, 10, seed=2)), device="cpu")  # load the BLAS
    rows = [_row(name, build(), args.time_limit) for name, build in _problems(args.maxcut, args.sdplib)]
    gpu = select_backend("gpu").describe()
    title = f"CPU against GPU, low-rank route, {datetime.date.today()}"
    columns = ["instance", "n", "m", "nnz", "cpu_s", "gpu_s", "cpu_steps", "gpu_steps", "cpu_step_ms", "gpu_step_ms",
               "cpu_rank", "gpu_rank", "auto_device", "auto_s", "cpu_status", "gpu_status"]
    print(write_tables(rows, Path(args.out) / f"host-{device_slug(gpu)}", title, columns=columns,
                       device=f"the host's CPU and {gpu}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
