"""Host threads per stage (``backends/threads.py``): the count each stage asks for, and the count its BLAS calls
actually run with."""
from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from cvxpy_culorads import solve
from cvxpy_culorads.backends import threads
from cvxpy_culorads.models import maxcut_problem

from support import random_mixed_problem


def _blas_threads() -> int:
    return max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=1)


@pytest.mark.parametrize("load, expected", [(0.5, 4), (1.0, 4), (2.4, 2), (3.2, 1), (9.0, 1)])
def test_dense_work_takes_the_cores_other_processes_leave_idle(monkeypatch, load, expected):
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load))
    assert threads.stage_threads(1e12) == expected
    assert threads.stage_threads(1e6) == 1  # too small for threads to pay, whatever the load
    assert threads.stage_threads(1e12, requested=3) == 3  # the setting decides


def test_usable_cores_respect_the_affinity(monkeypatch):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 5})
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: None)
    assert threads.usable_cores() == 2
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 1.5)  # a quota of one and a half cores
    assert threads.usable_cores() == 1


@pytest.mark.parametrize("requested", [None, 2])
def test_each_stage_runs_its_blas_calls_with_its_count(monkeypatch, requested):
    seen = {}
    for name in ("eigh", "cholesky"):
        original = getattr(np.linalg, name)

        def recording(a, *args, _original=original, _name=name, **kwargs):
            seen.setdefault(_name, set()).add(_blas_threads())
            return _original(a, *args, **kwargs)

        monkeypatch.setattr(np.linalg, name, recording)
    # the interior-point method's factorisations of a small problem: one thread unless the setting asks for more
    solve(random_mixed_problem(2), device="cpu", algorithm="interior_point", threads=requested)
    assert seen["cholesky"] == {requested or 1}
    seen.clear()
    # a dense block's certificate (order 200: 7e7 flops) and the low-rank phases
    rng = np.random.default_rng(0)
    W = np.triu(rng.random((200, 200)) < 0.05, 1).astype(float)
    solve(maxcut_problem(W + W.T), device="cpu", threads=requested)
    assert seen["eigh"] == {requested or 1}
