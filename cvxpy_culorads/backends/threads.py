"""Host threads per stage: how many BLAS threads a stage of the solve uses on the CPU.

Multithreaded BLAS pays only for dense work of some size, and only on cores nobody else is using: threads that spin
against another process's turn a 10 s interior-point solve into minutes (decision record "threads-per-stage"). So
each stage asks :func:`stage_threads` for its count, given the work's size: the low-rank phases (BLAS-1 calls on
arrays of 10^4..10^6 entries) take one thread; dense factorisations (the interior-point method, dense eigenvalue
problems of the certificates) take as many as the work pays for, capped by the cores the process may use (its CPU
affinity and its control group's quota) less the cores other processes keep busy (the load average).
``Settings.threads`` fixes the count instead. :func:`limited` applies a count to the process's BLAS pools.
"""
from __future__ import annotations

import functools
import math
import os
from pathlib import Path

from threadpoolctl import ThreadpoolController

__all__ = ["limited", "stage_threads", "usable_cores"]

# dense work (flops of one stage's factorisations) below which threads are not tried: on one core an n = 800
# eigendecomposition (about 5e9 flops) takes 0.12 s, on two with the other core partly busy 0.59 s
THREADED_WORK = 1e10
# runnable threads of the load average that are the solve's own (the average covers the last minute of it)
OWN_LOAD = 1.0


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by its control group's CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, math.floor(quota)) if quota is not None else cores)


def stage_threads(work: float, requested: int | None = None) -> int:
    """BLAS threads for a stage whose dense work is ``work`` flops (0 for the low-rank phases): ``requested``
    when set (``Settings.threads``), else one below :data:`THREADED_WORK`, else the usable cores that other
    processes leave idle (at least one)."""
    if requested is not None:
        return requested
    if work < THREADED_WORK:
        return 1
    cores = usable_cores()
    try:
        others = max(0.0, os.getloadavg()[0] - OWN_LOAD)
    except OSError:
        others = 0.0
    return max(1, min(cores, math.floor(cores - others)))


def limited(threads: int):
    """A context in which the process's BLAS pools use ``threads`` (at least one) threads."""
    return _controller().limit(limits=threads, user_api="blas")


@functools.cache
def _controller() -> ThreadpoolController:
    """The process's thread pools, found once: finding them reads /proc/self/maps (2 ms, a twentieth of a small
    solve)."""
    return ThreadpoolController()


def _cgroup_quota() -> float | None:
    """The control group's CPU quota in cores (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``),
    or None without one."""
    root = Path("/sys/fs/cgroup")
    try:
        quota, period = (root / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None
