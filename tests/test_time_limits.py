"""The time limit's promise on every route, checked on the solver's own clock so that load cannot break it.

The promise is an answer at most 10 % + 1 s after ``time_limit``. What can break it is work that goes on once the
deadline has passed: a phase that takes more steps, a Krylov loop or a dense decomposition in the final measurement,
a second measurement, an escape. So each test lets the route run a few steps, then moves the clock the solver reads
(``time.perf_counter``) past the deadline and the measurement's grace, and counts the work done after: progress rows,
sparse products and dense decompositions. Wall-clock time plays no part, so a busy machine changes nothing.
"""
from __future__ import annotations

import collections
import time

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse._compressed as compressed

from cvxpy_culorads import Status, read_sdpa, solve
from cvxpy_culorads.models import maxcut_problem, theta_problem
from cvxpy_culorads.phases import interior_point
from cvxpy_culorads.solver.run import Run

from support import data_file, random_mixed_problem

# what one final measurement of a point may cost once the clock has passed its grace: the products of the
# primal measures and of a Lanczos run's first step per block, and the checks of the result
PRODUCTS_AFTER_THE_GRACE = 30
DENSE_ORDER = 64  # decompositions of larger matrices are what a final measurement past its grace must not run


class Clock:
    """``time.perf_counter`` as the solver reads it, moved past a run's deadline after ``after`` progress rows (and
    past the final measurement's grace too unless ``into_grace``); counts the work that follows."""

    def __init__(self, monkeypatch, after: int, into_grace: bool = False):
        self.after, self.into_grace, self.offset, self.moved = after, into_grace, 0.0, False
        self.work = collections.Counter()
        self.large_decompositions = 0
        real = time.perf_counter
        monkeypatch.setattr(time, "perf_counter", lambda: real() + self.offset)
        for owner, name in [(np.linalg, "eigh"), (np.linalg, "cholesky"), (np.linalg, "solve"),
                            (scipy.linalg, "eigh"), (scipy.linalg, "cho_factor"), (scipy.linalg, "solve")]:
            monkeypatch.setattr(owner, name, self._decomposition(getattr(owner, name), name))
        for name in ("_matmul_vector", "_matmul_multivector"):
            monkeypatch.setattr(compressed._cs_matrix, name, self._product(getattr(compressed._cs_matrix, name)))
        record = Run.record

        def moving(run, progress, force=False):
            record(run, progress, force)
            if self.moved:
                self.work["rows"] += 1
            elif run.inner_iterations >= self.after:
                target = run.deadline + 1e-3 if self.into_grace else run.measure_deadline + 1.0
                self.offset += target - time.perf_counter()
                self.moved = True

        monkeypatch.setattr(Run, "record", moving)

    def _decomposition(self, function, name):
        def counted(a, *args, **kwargs):
            if self.moved:
                self.work[name] += 1
                self.large_decompositions += np.shape(a)[-1] > DENSE_ORDER
            return function(a, *args, **kwargs)
        return counted

    def _product(self, function):
        def counted(matrix, other):
            if self.moved:
                self.work["products"] += 1
            return function(matrix, other)
        return counted


def _maxcut(n: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    W = sp.random(n, n, density=8.0 / n, random_state=rng, data_rvs=lambda k: rng.choice([-1.0, 1.0], k))
    return maxcut_problem(sp.triu(W, 1) + sp.triu(W, 1).T)


def _theta(n: int, seed: int = 4):
    rng = np.random.default_rng(seed)
    W = sp.triu(sp.random(n, n, density=0.05, random_state=rng), 1)
    return theta_problem(((W + W.T) > 0).astype(float))


ROUTES = {
    # route: (problem, options, the stage whose steps the route runs, the large decompositions allowed after the
    # deadline: the interior-point method turns its iterate into factors, one decomposition per block, as its
    # iterations do)
    "riemannian": (lambda: _maxcut(400), {}, "riemannian", 0),
    "trace_sphere": (lambda: _theta(300), {}, "alm", 0),
    "alm_admm": (lambda: _maxcut(400), dict(algorithm="alm_admm"), "alm", 0),
    "alm_admm_mixed": (lambda: random_mixed_problem(2), dict(algorithm="alm_admm"), "alm", 0),
    "interior_point": (lambda: _theta(120), dict(algorithm="interior_point"), "interior_point", 1),
    "split": (lambda: _maxcut(1500), dict(devices=2), "riemannian", 0),
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_no_work_past_the_deadline_but_one_final_measurement(monkeypatch, route):
    make, options, stage, decompositions = ROUTES[route]
    problem = make()
    clock = Clock(monkeypatch, after=3)
    result = solve(problem, device="cpu", time_limit=100.0, **options)
    assert clock.moved, "the route ended before the clock was moved: the test needs a harder problem"
    assert result.iterations[stage] >= 3, result.iterations  # the route meant is the one that ran
    assert result.status is Status.TIME_LIMIT
    assert clock.work["rows"] == 0  # no step after the deadline
    assert clock.large_decompositions <= decompositions, clock.work
    assert clock.work["products"] <= PRODUCTS_AFTER_THE_GRACE, clock.work
    assert result.status.has_solution and all(np.isfinite(R).all() for R in result.factors)
    assert np.isfinite(result.primal_objective)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_one_final_measurement_within_the_grace(monkeypatch, route):
    # past the deadline but within the grace the point is measured once: one dense decomposition per block at most
    make, options, _, decompositions = ROUTES[route]
    clock = Clock(monkeypatch, after=3, into_grace=True)
    result = solve(make(), device="cpu", time_limit=100.0, **options)
    assert clock.moved and result.status is Status.TIME_LIMIT
    assert clock.work["rows"] == 0
    assert clock.large_decompositions <= 1 + decompositions, clock.work
    assert np.isfinite(result.primal_objective) and result.errors is not None


def test_a_deadline_inside_an_interior_point_iteration_abandons_its_step(monkeypatch):
    # the clock passes the deadline while the second iteration forms its Schur complement: the step is abandoned
    # before the factorisation of the m x m matrix, and the solve reports the limit with the best point
    problem = _theta(120)
    runs, offset, moved = [], [0.0], []
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real() + offset[0])
    record = Run.record

    def remembered(run, progress, force=False):
        runs.append(run)
        record(run, progress, force)

    monkeypatch.setattr(Run, "record", remembered)
    schur = interior_point._Block.schur

    def passing_the_deadline(block, X, Z):
        if runs[-1].iterations["interior_point"] >= 2 and not moved:
            offset[0] += runs[-1].deadline + 1e-3 - time.perf_counter()
            moved.append(True)
        return schur(block, X, Z)

    monkeypatch.setattr(interior_point._Block, "schur", passing_the_deadline)
    factorisations = collections.Counter()
    cholesky = np.linalg.cholesky

    def counted(a, *args, **kwargs):
        factorisations[moved != []] += np.shape(a)[-1] == problem.m
        return cholesky(a, *args, **kwargs)

    monkeypatch.setattr(np.linalg, "cholesky", counted)
    result = solve(problem, device="cpu", algorithm="interior_point", time_limit=100.0)
    assert moved and factorisations[False] >= 1  # the first iteration factorised its Schur complement
    assert factorisations[True] == 0, factorisations
    assert result.iterations["interior_point"] == 2
    assert result.status is Status.TIME_LIMIT
    assert np.isfinite(result.primal_objective) and result.errors is not None


def test_a_time_limit_inside_interior_point_iterations_is_kept_on_the_wall_clock():
    # theta4 (m = 1949, one block of order 200): 16 iterations of some 0.2 to 2 s on the 2-core CPU, so the limit
    # falls inside the method's run wherever the machine's load puts it
    problem = read_sdpa(data_file("sdplib", "theta4.dat-s"))
    limit = 2.0
    result = solve(problem, device="cpu", algorithm="interior_point", time_limit=limit)
    assert result.iterations["interior_point"] >= 1 and result.iterations["alm"] == 0
    assert result.status is Status.TIME_LIMIT, result.summary()
    assert result.solve_time <= 1.1 * limit + 1.0, result.summary()
    assert np.isfinite(result.primal_objective) and result.errors is not None
