"""Ctrl-C at any moment of the iterations: the point returned is finite and measured.

A signal handler runs between two lines of Python, so an interrupt can leave a phase's state half-updated. Each test
raises KeyboardInterrupt at the k-th line the package executes (a trace function), for many k spread over a whole
solve: deterministic moments, the same on a busy machine, covering every line a real Ctrl-C could land after."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import cvxpy_culorads
from cvxpy_culorads import Status, solve
from cvxpy_culorads.models import maxcut_problem, theta_problem

PACKAGE = str(Path(cvxpy_culorads.__file__).parent)
MOMENTS, STRIDE = 8, 3


class LineInterrupt:
    """A trace function that counts the lines the package runs and raises KeyboardInterrupt at line ``at``; it notes
    whether that line ran while the solve iterated (from its first progress row until its result was made)."""

    def __init__(self, at: float = np.inf):
        self.at, self.lines, self.rows = at, 0, []  # rows: the line count at each progress row
        self.iterating = self.raised_while_iterating = False

    def __call__(self, frame, event, arg):
        if event == "call":
            if not frame.f_code.co_filename.startswith(PACKAGE):
                return None
            if frame.f_code.co_name == "record":
                self.iterating = True
                self.rows.append(self.lines)
        elif event == "return" and frame.f_code.co_name == "_solve":
            self.iterating = False
        elif event == "line":
            self.lines += 1
            if self.lines == self.at:
                self.raised_while_iterating = self.iterating
                raise KeyboardInterrupt
        return self


def _solve_traced(problem, tracer, **options):
    sys.settrace(tracer)
    try:
        return solve(problem, device="cpu", **options)
    finally:
        sys.settrace(None)


def _maxcut():
    # vertices 100..119 have no edges: their rows of the factor do not move in a step
    rng = np.random.default_rng(5)
    W = sp.triu(sp.random(100, 100, density=0.08, random_state=rng), 1)
    W = sp.block_diag([W + W.T, sp.csr_matrix((20, 20))])
    return maxcut_problem(W.tocsr())


def _theta():
    rng = np.random.default_rng(6)
    W = sp.triu(sp.random(60, 60, density=0.1, random_state=rng), 1)
    return theta_problem(((W + W.T) > 0).astype(float))


@pytest.mark.parametrize("make, options, stage", [(_maxcut, dict(algorithm="low_rank"), "riemannian"),
                                                  (_maxcut, dict(algorithm="alm_admm"), "alm"),
                                                  (_theta, dict(algorithm="low_rank"), "alm"),
                                                  (_theta, dict(algorithm="interior_point"), "interior_point")],
                         ids=["riemannian", "alm_admm", "trace_sphere", "interior_point"])
def test_an_interrupt_at_any_line_returns_a_finite_measured_point(make, options, stage):
    problem = make()
    counting = LineInterrupt()
    assert _solve_traced(problem, counting, **options).iterations[stage] > 2  # the route meant is the one that ran
    # moments spread over the solve, and every STRIDE-th line of its second step, before any point was measured
    spread = np.random.default_rng(7).integers(1, counting.lines, MOMENTS)
    step = np.arange(counting.rows[1], counting.rows[2], STRIDE)
    for at in sorted(set(spread) | set(step)):
        interrupt = LineInterrupt(at)
        try:
            result = _solve_traced(problem, interrupt, **options)
        except KeyboardInterrupt:  # set-up, before any point exists, is interrupted as Python code is
            assert not interrupt.raised_while_iterating, at
            continue
        assert result.status in (Status.INTERRUPTED, Status.OPTIMAL), (at, result.status)
        assert result.status.has_solution
        R = result.factors[0]
        assert np.isfinite(R).all() and np.isfinite(result.dual).all(), at
        # the objective reported is the returned factor's, and its errors were measured
        C = problem.objective_matrix(0)
        assert result.primal_objective == pytest.approx(float(np.sum((C @ R) * R)), rel=1e-9, abs=1e-9), at
        assert np.isfinite(result.errors.primal_infeasibility), at
