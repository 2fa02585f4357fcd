"""The benchmark harness (benchmarks/): the CVXPY restatement used for side-by-side runs, and one suite run."""
from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from cvxpy_culorads import solve

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
