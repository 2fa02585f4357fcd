"""Solves beside a busy process: the threads chosen per stage against every stage on all cores.

Usage::

    python benchmarks/studies/busy_machine.py [--problems gpp250-1,thetaG11,control5] [--busy 1] [--out DIR]

Starts ``--busy`` processes that each keep one core busy (a NumPy loop), then solves each SDPLIB problem on the CPU
twice: with ``threads=None`` (the default: chosen per stage, ``backends/threads.py``) and with ``threads`` set to
every usable core (what BLAS does by itself). Prints the wall and CPU time of each, the interior-point stage's time
and the status, and writes ``busy-machine/<device>.{csv,meta.json}`` under ``--out``. The SDPLIB files are read from
``../shared/data/sdplib`` beside the checkout (``--data`` elsewhere).
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cvxpy_culorads import read_sdpa, solve  # noqa: E402
from cvxpy_culorads.backends.threads import usable_cores  # noqa: E402

from report import device_slug, write_tables  # noqa: E402


def _keep_a_core_busy(stop) -> None:
    a = np.random.default_rng(0).random(20_000)
    while not stop.is_set():
        a = np.sin(a)  # single-threaded work


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="gpp250-1,thetaG11,control5")
    parser.add_argument("--busy", type=int, default=1, help="processes that each keep one core busy")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = parser.parse_args(argv)
    stop = multiprocessing.Event()
    workers = [multiprocessing.Process(target=_keep_a_core_busy, args=(stop,), daemon=True) for _ in range(args.busy)]
    for worker in workers:
        worker.start()
    rows, cores = [], usable_cores()
    try:
        time.sleep(2.0)  # the load average starts to see the busy processes
        for name in args.problems.split(","):
            problem = read_sdpa(args.data / "sdplib" / f"{name}.dat-s")
            for label, threads in (("per stage", None), (f"all {cores} cores", cores)):
                wall, cpu = time.perf_counter(), time.process_time()
                result = solve(problem, device="cpu", threads=threads, time_limit=args.time_limit)
                rows.append(dict(problem=name, threads=label, status=result.status.value,
                                 wall_s=round(time.perf_counter() - wall, 2),
                                 cpu_s=round(time.process_time() - cpu, 2),
                                 interior_point_s=round(result.stage_times["interior_point"], 2),
                                 objective=result.primal_objective))
                print(rows[-1], flush=True)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    stem = args.out / "busy-machine" / device_slug("cpu")
    print(write_tables(rows, stem, f"SDPLIB beside {args.busy} busy process(es): threads per stage against all "
                                   "cores", script=__file__, argv=argv if argv is not None else sys.argv[1:],
                       device=f"cpu ({cores} usable cores)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
