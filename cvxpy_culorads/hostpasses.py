"""Passes over long host arrays in chunks, on a pool of threads.

The data of a problem with n = 1e8 are arrays of 10^8 to 10^9 entries, and what the solver derives from them before
and after the device set-up (norms, trace bounds, fixed diagonals) is a handful of NumPy expressions over each. Run
whole, an expression uses one core and allocates temporaries the size of its input, which at n = 1e8 costs as much
time as hundreds of optimisation steps (decision record "host-passes-numpy"). Here an expression is written for one
slice of the arrays and mapped over chunks of ``CHUNK`` entries (or a size the caller picks: the CPU kernels' row
blocks) by the calling thread and a pool of threads (NumPy releases the interpreter's lock inside its loops), so the
temporaries stay small and every core takes part. A leaf module: it imports nothing of the package.
"""
from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

__all__ = ["CHUNK", "map_chunks", "on_own_threads", "extremes", "abs_max", "abs_median", "abs_sum", "squares_sum",
           "strictly_increasing", "holds_anywhere"]

CHUNK = 1 << 20  # entries per task: 8 MB of float64, small enough for the caches, large beside a task's overhead

_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=_cores(), thread_name_prefix="hostpasses"))
        return _POOL[0]


@functools.cache
def _cores() -> int:
    """The pool's threads: the cores this process may run on (at most 32)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(32, cores))


def map_chunks(function, size: int, chunk: int | None = None) -> list:
    """[function(s) for the consecutive slices s of at most ``chunk`` (default ``CHUNK``) entries that cover
    range(size)], in order (an empty list for size 0). Where there are several, the calling thread and helpers on
    the pool take the next slice in turn until none is left: a busy core delays no share of fixed size, a call makes
    one task per helper whatever the slices' count, and a caller that is itself on the pool finishes alone when no
    worker is free (helpers not started by then are cancelled)."""
    chunk = chunk or CHUNK
    slices = [slice(start, min(start + chunk, size)) for start in range(0, size, chunk)]
    if len(slices) <= 1:
        return [function(s) for s in slices]
    results = [None] * len(slices)
    pending = iter(range(len(slices)))
    lock = threading.Lock()

    def drain():
        while True:
            with lock:
                index = next(pending, None)
            if index is None:
                return
            results[index] = function(slices[index])
    helpers = [_pool().submit(drain) for _ in range(min(_cores(), len(slices)) - 1)]
    try:
        drain()
    finally:
        with lock:
            for _ in pending:  # no slice starts after the caller stops (an exception, Ctrl-C)
                pass
        running = [helper for helper in helpers if not helper.cancel()]
        wait(running)
    for helper in running:
        helper.result()  # raises a helper's exception
    return results


def on_own_threads(function, items) -> list:
    """[function(item) for item in items], in order, each on a thread of its own: for work that itself waits for the
    pool's chunks (on the pool, such work could take every worker and wait for chunks that none is left to run)."""
    items = list(items)
    if len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="hostpasses-own") as own:
        return list(own.map(function, items))


def abs_max(x: np.ndarray) -> float:
    """max |x_i| (0 for an empty x)."""
    return max(map_chunks(lambda s: float(np.abs(x[s]).max(initial=0.0)), x.size), default=0.0)


def abs_sum(x: np.ndarray) -> float:
    """sum |x_i|."""
    return float(sum(map_chunks(lambda s: float(np.abs(x[s]).sum()), x.size)))


def extremes(values, size: int) -> tuple[float, float]:
    """(min, max) of the entries ``values(s)`` gives for the chunks s of range(size); (inf, -inf) where there are
    none. A median that the entries' being all equal decides needs no partial sort (``abs_median``)."""
    def chunk(s):
        v = values(s)
        return (float(v.min()), float(v.max())) if v.size else (np.inf, -np.inf)
    found = map_chunks(chunk, size)
    return min((low for low, _ in found), default=np.inf), max((high for _, high in found), default=-np.inf)


def abs_median(x: np.ndarray) -> float:
    """The median of |x_i| (x not empty): a chunked pass when every |x_i| is the same (MaxCut's coefficients: no
    partial sort on one core, decision record "host-passes-numpy"), else NumPy's median."""
    low, high = extremes(lambda s: np.abs(x[s]), x.size)
    return low if low == high else float(np.median(np.abs(x)))


def squares_sum(x: np.ndarray) -> float:
    """sum x_i^2."""
    return float(sum(map_chunks(lambda s: float(x[s] @ x[s]), x.size)))


def strictly_increasing(x: np.ndarray) -> bool:
    """Whether x_0 < x_1 < ... (the chunks overlap by one entry, so their borders are compared too)."""
    return all(map_chunks(lambda s: bool(np.all(x[s.start + 1:s.stop + 1] > x[s])), max(x.size - 1, 0)))


def holds_anywhere(predicate, size: int) -> bool:
    """Whether the boolean array ``predicate(s)`` has a true entry for some chunk s of range(size)."""
    return any(map_chunks(lambda s: bool(np.any(predicate(s))), size))
