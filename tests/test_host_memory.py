"""Memory before allocation on the CPU: the CPU backend reports the host memory the process may still use, so a
solve whose arrays cannot fit is refused before it allocates them, with the estimate and the free memory in the
message, while ordinary problems start at the ranks they always did."""
import math
import re
import resource

import numpy as np
import pytest

from cvxpy_culorads import SDPProblem, Status, solve

from support import random_maxcut

GIB = 2 ** 30


def _one_block_one_constraint(n: int) -> SDPProblem:
    """min 0 s.t. X_00 = 1, X of order n: its data are a few numbers, its factor n x 2 entries."""
    zero = np.zeros(1, np.int64)
    return SDPProblem(np.ones(1), [None], [(zero, zero, zero, np.ones(1))], block_sizes=[n], name="huge")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def test_a_block_of_order_1e8_is_refused_before_anything_is_allocated(monkeypatch):
    monkeypatch.setattr("cvxpy_culorads.backends.backend.available_bytes", lambda: 4 * GIB)
    n = 10 ** 8
    before = _peak_rss_bytes()
    with pytest.raises(MemoryError) as refused:
        solve(_one_block_one_constraint(n), device="cpu")
    message = str(refused.value)
    match = re.search(r"needs about ([\d.]+) GiB of host memory .* but 4 GiB are free", message)
    assert match, message
    assert float(match.group(1)) * GIB >= 8 * n * 2  # at least the factor itself, n x 2 float64 entries
    # the factor alone would have been 1.6 GB: nothing of that size was allocated
    assert _peak_rss_bytes() - before < 0.5 * GIB


def test_unknown_host_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr("cvxpy_culorads.backends.backend.available_bytes", lambda: None)
    result = solve(random_maxcut(40, 0.3, seed=2)[0], device="cpu")
    assert result.status is Status.OPTIMAL


def test_ordinary_problems_start_at_their_usual_ranks_on_the_cpu():
    # the real host memory: a MaxCut of n = 300 starts the spheres at ceil(4 ln 300) = 23 columns, as before the CPU
    # reported its memory, and the plan says nothing of narrowing
    problem, _ = random_maxcut(300, 0.01, seed=9)
    result = solve(problem, device="cpu", max_iter=1, keep_log=True)
    assert result.log[0].ranks == (math.ceil(4 * math.log(300)),)
    assert not any("narrowed" in reason for reason in result.plan)
