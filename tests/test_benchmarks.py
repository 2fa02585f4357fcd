"""The benchmark harness (benchmarks/): the CVXPY restatement used for side-by-side runs, and one suite run."""
from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from cvxpy_culorads import solve
from cvxpy_culorads.models import maxcut_problem

from support import data_file, random_mixed_problem, sdplib_optimum

cp = pytest.importorskip("cvxpy")  # the test extras have it; a GPU image may not

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings by name
    try:
        spec = importlib.util.spec_from_file_location(f"_culorads_bench_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_cvxpy_restatement_has_the_same_optimum():
    compare = _load("compare")
    problem = random_mixed_problem(seed=3)
    peer = compare.solve_with(problem, "CLARABEL")
    ours = solve(problem, device="cpu")
    assert peer["status"] == "optimal"
    assert ours.status.value == "optimal"
    assert peer["value"] == pytest.approx(ours.primal_objective, rel=1e-4, abs=1e-6)


def test_cvxpy_restatement_evaluates_constraints_like_the_solver():
    compare = _load("compare")
    problem = random_mixed_problem(seed=4)
    cvx, variables = compare.to_cvxpy(problem)
    result = solve(problem, device="cpu")
    for variable, R in zip(variables, result.factors):
        variable.value = R @ R.T
    variables[-1].value = result.x_lp
    (constraint,) = cvx.constraints
    residual = constraint.expr.value  # lhs - b at the solver's point
    assert np.linalg.norm(residual) <= 1e-4 * (1 + np.abs(problem.b).sum())
    assert cvx.objective.value == pytest.approx(result.primal_objective, rel=1e-9, abs=1e-12)
    assert isinstance(cvx.objective, cp.Minimize)


def test_suite_run_writes_tables_with_known_optimum(tmp_path):
    data_file("sdplib", "mcp124-1.dat-s")
    run = _load("run")
    assert run.main(["--suite", "sdplib", "--sizes", "mcp124-1", "--device", "cpu",
                     "--profiles", "accurate,paper", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "sdplib_cpu.csv") as f:
        rows = {row["profile"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"accurate", "paper"}
    accurate = rows["accurate"]
    assert accurate["status"] == "optimal"
    assert float(accurate["value"]) == pytest.approx(sdplib_optimum("mcp124-1"), rel=1e-4)
    assert float(accurate["rel_error"]) <= 1e-4
    assert float(rows["paper"]["vs_accurate"]) == pytest.approx(
        abs(float(rows["paper"]["value"]) - float(accurate["value"])) / abs(float(accurate["value"])))
    assert (tmp_path / "sdplib_cpu.md").read_text().count("| mcp124-1 |") == 2


def test_completion_sizes_name_the_truths_rank():
    suites = _load("suites")
    default, rank_one = suites.instances("completion", "40:600,40:600:1", "cpu")
    assert (default.name, rank_one.name) == ("completion_80_600", "completion_80_600_r1")
    problem, extra = rank_one.build()
    assert problem.m == 600 and tuple(problem.block_sizes) == (80,)
    result = solve(problem, device="cpu")
    assert result.status.value == "optimal"
    columns = extra(result)
    assert columns["truth_rank"] == 1 and columns["recovery"] < 0.1


def test_trust_regions_hessian_matches_finite_differences():
    trust = _load("trust_regions")
    rng = np.random.default_rng(4)
    C = trust._cost_matrix("sparse", "60")
    R = trust._retract(rng.standard_normal((60, 5)))
    U = trust._tangent(rng.standard_normal((60, 5)), R)
    weights = trust._row_dots(2.0 * (C @ R), R)

    def extended_gradient(Z):  # 2 C Z minus its component along each row of Z: smooth off the manifold
        return 2.0 * (C @ Z) - trust._row_dots(2.0 * (C @ Z), Z)[:, None] * Z

    t = 1e-6
    difference = (extended_gradient(R + t * U) - extended_gradient(R - t * U)) / (2.0 * t)
    expected = trust._tangent(difference, R)
    assert np.allclose(trust._hessian(trust.Counted(C), R, weights, U), expected, atol=1e-6)


def test_trust_regions_and_lbfgs_reach_the_solvers_maxcut_value():
    trust, graphs = _load("trust_regions"), _load("graphs")
    C = trust._cost_matrix("sparse", "300")
    ours = solve(maxcut_problem(graphs.random_regular_like(300, 4, seed=1)), device="cpu")  # the same graph
    assert ours.status.value == "optimal"
    start = np.random.default_rng(0).uniform(-1.0, 1.0, (300, 12))
    for method in (trust.lbfgs, trust.trust_regions):
        R, CR, objective, reached = method(trust.Counted(C), start.copy(), [1e-7])
        assert 1e-7 in reached
        assert objective == pytest.approx(ours.primal_objective, rel=1e-5)
        assert trust.certified_gap(C, R, CR, objective) < 1e-5
