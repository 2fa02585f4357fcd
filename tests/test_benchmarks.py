"""The benchmark harness (benchmarks/): the CVXPY restatement used for side-by-side runs, one suite run and the data
it writes, the results pages generated from the data, and the studies (benchmarks/studies/) that tests still cover."""
from __future__ import annotations

import ast
import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cvxpy_culorads import solve, write_sdpa
from cvxpy_culorads.models import maxcut_problem

from support import data_file, random_maxcut, random_mixed_problem, sdplib_optimum

cp = pytest.importorskip("cvxpy")  # the test extras have it; a GPU image may not

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
STUDIES = BENCHMARKS / "studies"
META_KEYS = {"command", "device", "commit", "date"}


def _load(name: str, folder: Path = BENCHMARKS):
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import the harness's modules by name
    try:
        spec = importlib.util.spec_from_file_location(f"_culorads_bench_{name}", folder / f"{name}.py")
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
    (table,) = (tmp_path / "sdplib").glob("cpu-*core.csv")  # <suite>/<device>.csv
    with open(table) as f:
        rows = {row["profile"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"accurate", "paper"}
    accurate = rows["accurate"]
    assert accurate["status"] == "optimal"
    assert float(accurate["value"]) == pytest.approx(sdplib_optimum("mcp124-1"), rel=1e-4)
    assert float(accurate["rel_error"]) <= 1e-4
    assert float(rows["paper"]["vs_accurate"]) == pytest.approx(
        abs(float(rows["paper"]["value"]) - float(accurate["value"])) / abs(float(accurate["value"])))
    meta = json.loads(table.with_suffix(".meta.json").read_text())
    assert META_KEYS <= set(meta) and meta["suite"] == "sdplib" and meta["device"].startswith("cpu")
    assert "--suite sdplib --sizes mcp124-1" in meta["command"] and meta["command"].startswith("python3 ")
    assert meta["date"].endswith("Z") and meta["profiles"] == ["accurate", "paper"]
    assert not list(tmp_path.rglob("*.md"))  # the Markdown is printed; the docs pages come from the data


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


def test_targets_suite_runs_each_target_by_the_api_and_through_cvxpy(tmp_path, monkeypatch):
    run = _load("run")
    suites = run.suites
    # two tiny rows as the CPU target's two entries: one target that can be met, one whose time cannot be
    monkeypatch.setitem(suites.TARGETS, "tiny", ("sparse", "60", suites.Target(600.0, device="cpu", clock="call_s")))
    monkeypatch.setitem(suites.TARGETS, "tiny-cvxpy", ("sparse-cvxpy", "60",
                                                       suites.Target(1e-9, device="cpu", clock="call_s")))
    assert run.main(["--suite", "targets", "--sizes", "tiny,tiny-cvxpy", "--device", "cpu", "--time-limit", "60",
                     "--out", str(tmp_path)]) == 0
    (table,) = (tmp_path / "targets").glob("cpu-*core.csv")
    with open(table) as f:
        rows = list(csv.DictReader(f))
    profiles = ["accurate", suites.OTHER_PRECISION, "paper"]
    assert [(r["instance"], r["profile"]) for r in rows] == [(i, p) for i in ("tiny", "tiny-cvxpy") for p in profiles]
    direct, cvxpy_row = rows[0], rows[3]
    W = suites.graphs.random_regular_like(60, 4, seed=1)
    clarabel = _load("compare").solve_with(maxcut_problem(W), "CLARABEL")
    for row in (direct, cvxpy_row):  # the same graph by both entries, against Clarabel's optimum
        assert (row["n"], row["m"], row["status"]) == ("60", "60", "optimal")
        assert float(row["value"]) == pytest.approx(-clarabel["value"], rel=1e-5)
    for row in rows:
        gap = float(row["certified_gap"]) if row["certified_gap"] else np.inf
        met = gap <= 1e-5 and float(row["primal_residual"]) <= 1e-5 and float(row["call_s"]) <= float(row["target_s"])
        assert row["met"] == str(met) and row["target_tol"] == "1e-05"
    assert direct["met"] == "True" and cvxpy_row["met"] == "False"
    meta = json.loads(table.with_suffix(".meta.json").read_text())
    assert meta["profiles"] == profiles and meta["columns"] == run.SUITE_COLUMNS["targets"]


def test_targets_take_their_tolerance_and_devices():
    suites = _load("suites")
    assert [i.name for i in suites.instances("targets", None, "cpu")] == ["cpu-sparse1e5", "cpu-sparse1e5-cvxpy"]
    one_gpu = [i.name for i in suites.instances("targets", "all", "gpu")]
    assert "G67" in one_gpu and "sparse1e8" in one_gpu and "sparse3e8" not in one_gpu  # two GPUs: named only
    (large,) = suites.instances("targets", "sparse3e8", "gpu")
    assert suites.settings_for(large, "mixed") == dict(tol=1e-5, devices=2, precision="mixed")
    (hundred_million,) = suites.instances("targets", "sparse1e8", "gpu")
    paper = suites.settings_for(hundred_million, "paper")
    assert paper["tol"] == 1e-4 and paper["algorithm"] == "alm_admm" and "devices" not in paper
    assert not suites.Target(1.0).columns(dict(certified_gap="", primal_residual=0.0, seconds=0.1))["met"]
    with pytest.raises(ValueError, match="unknown targets"):
        suites.instances("targets", "G67,G68", "gpu")


def test_paper_profile_runs_the_papers_phases_only():
    """The paper's method has no interior-point finish: sparse MaxCut n = 2000, whose phases end short of tol under
    the paper's settings, returns their point instead of waiting minutes for the interior-point method."""
    suites = _load("suites")
    (instance,) = suites.instances("sparse", "2000", "cpu")
    problem, _ = instance.build()
    result = solve(problem, device="cpu", **suites.settings_for(instance, "paper"))
    assert result.iterations.get("interior_point", 0) == 0 and result.route.startswith("low-rank phases only")
    assert result.iterations["alm"] >= 1


def test_mittelmann_suite_lists_the_instances():
    suites = _load("suites")
    table = suites.datasets.MITTELMANN
    listed = suites.instances("mittelmann", None, "cpu")  # built only when run: no data needed to list them
    assert [i.name for i in listed] == list(table) and len(listed) == 16
    # the known values are in min form, the primal objective itself
    assert [(i.reference, i.sign) for i in listed] == [(entry.known, 1.0) for entry in table.values()]
    named, other = suites.instances("mittelmann", "copy/of/trto3.dat-s.gz,elsewhere/mine.dat-s", "cpu")
    assert (named.name, named.reference) == ("trto3", -12800.0)  # a file named like a listed instance
    assert (other.name, other.reference) == ("mine", None)


def test_mittelmann_score_by_hand():
    report = _load("report")
    assert report.shifted_geometric_mean([0.0, 90.0]) == pytest.approx(np.sqrt(10.0 * 100.0) - 10.0)
    rows = [dict(status="optimal", total_s=0.0, best_s=90.0, culorads_s=""),
            dict(status="time_limit", total_s="300.2", best_s="1325.0", culorads_s="5.0"),  # as read from a CSV
            dict(status="optimal", total_s=7.0, best_s="", culorads_s="")]  # no published time: not scored
    score = report.mittelmann_score(rows, time_limit=300.0)
    # ours 0 s and a failure (300 s), theirs 90 s and 1325 s capped at the limit: sqrt(10 * 310) - 10 = 45.678
    # against sqrt(100 * 310) - 10 = 166.068
    assert score["best_s"] == pytest.approx(dict(instances=2, solved=1, ours=45.678, published=166.068,
                                                 ratio=45.678 / 166.068), abs=1e-3)
    assert score["culorads_s"] == pytest.approx(dict(instances=1, solved=0, ours=300.0, published=5.0, ratio=60.0))
    assert "copt_s" not in score


def test_mittelmann_suite_reads_a_given_file_and_scores_it(tmp_path, monkeypatch):
    run = _load("run")
    problem, _ = random_maxcut(40, 0.2, seed=5)
    write_sdpa(problem, tmp_path / "tiny.dat-s")
    datasets = run.suites.datasets
    monkeypatch.setitem(datasets.MITTELMANN, "tiny", datasets.MittelmannEntry("toy", best_s=1.0, culorads_s=2.0))
    assert run.main(["--suite", "mittelmann", "--sizes", str(tmp_path / "tiny.dat-s"), "--device", "cpu",
                     "--time-limit", "30", "--out", str(tmp_path)]) == 0
    (table,) = (tmp_path / "mittelmann").glob("cpu-*core.csv")
    with open(table) as f:
        (row,) = list(csv.DictReader(f))
    assert (row["instance"], row["category"], row["status"]) == ("tiny", "toy", "optimal")
    assert "reference" not in row  # no known value
    assert float(row["value"]) == pytest.approx(solve(problem, device="cpu").primal_objective, rel=1e-5)
    assert float(row["total_s"]) >= float(row["seconds"])
    meta = json.loads(table.with_suffix(".meta.json").read_text())
    ours = float(row["total_s"])
    assert meta["time_limit"] == 30.0 and set(meta["score"]["accurate"]) == {"best_s", "culorads_s"}
    assert meta["score"]["accurate"]["culorads_s"] == pytest.approx(
        dict(instances=1, solved=1, ours=ours, published=2.0, ratio=ours / 2.0), abs=1e-3)
    assert "Mittelmann's score" in meta["footer"]


def test_trust_regions_hessian_matches_finite_differences():
    trust = _load("trust_regions", STUDIES)
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
    trust, graphs = _load("trust_regions", STUDIES), _load("graphs")
    C = trust._cost_matrix("sparse", "300")
    ours = solve(maxcut_problem(graphs.random_regular_like(300, 4, seed=1)), device="cpu")  # the same graph
    assert ours.status.value == "optimal"
    start = np.random.default_rng(0).uniform(-1.0, 1.0, (300, 12))
    for method in (trust.lbfgs, trust.trust_regions):
        R, CR, objective, reached = method(trust.Counted(C), start.copy(), [1e-7])
        assert 1e-7 in reached
        assert objective == pytest.approx(ours.primal_objective, rel=1e-5)
        assert trust.certified_gap(C, R, CR, objective) < 1e-5


def test_results_are_data_with_their_metadata():
    results = BENCHMARKS / "results"
    assert not list(results.rglob("*.py")), "scripts belong in benchmarks/studies/"
    tables = sorted(results.rglob("*.csv"))
    assert len(tables) > 20
    for table in tables:
        meta_path = table.with_suffix(".meta.json")
        assert meta_path.exists(), f"{table} has no metadata"
        meta = json.loads(meta_path.read_text())
        assert META_KEYS <= set(meta), f"{meta_path} lacks {META_KEYS - set(meta)}"
        with open(table, newline="") as f:
            assert list(csv.DictReader(f)), f"{table} has no rows"
    current = [t for t in tables if t.parent.parent == results]  # <suite>/<device>.csv
    assert {t.parent.name for t in current} >= {"gset", "sdplib", "delaunay", "rgg", "sparse", "completion", "theta"}


def test_results_pages_are_generated_from_the_data(tmp_path):
    docs_tables = _load("docs_tables")
    pages = docs_tables.pages()
    assert set(pages) == {"index.md", *docs_tables.PAGES}
    for name, text in pages.items():
        committed = ROOT / "docs" / "results" / name
        assert committed.exists() and committed.read_text() == text, (
            f"docs/results/{name} is out of date: run python3 benchmarks/docs_tables.py")
    assert docs_tables.main(["--check"]) == 0
    assert docs_tables.main(["--check", "--out", str(tmp_path)]) == 1  # nothing there: all out of date
    decisions = ROOT / "docs" / "decisions"
    for page in docs_tables.PAGES.values():  # the pages link only to records that exist
        for record, _ in page.records:
            assert (decisions / record).exists(), record
    gset = pages["gset.md"]
    assert "- command: `python3 benchmarks/run.py --suite gset" in gset and "- commit: aa1559d" in gset


def test_pages_copy_the_cells_as_written(tmp_path, monkeypatch):
    docs_tables, report = _load("docs_tables"), _load("report")
    rows = [dict(instance="x|y", n=10, value=0.1234567890123, status="optimal")]
    report.write_tables(rows, tmp_path / "toy" / "cpu-2core", "toy", device="cpu (NumPy/SciPy)", suite="toy")
    monkeypatch.setattr(docs_tables, "RESULTS", tmp_path)
    text = "\n".join(docs_tables.render_table(docs_tables.Table("toy/cpu-2core", "Toy")))
    assert "| x\\|y | 10 | 0.1234567890123 | optimal |" in text
    assert "- device: cpu (NumPy/SciPy)" in text and "- command: `python3 " in text


def test_device_names():
    report = _load("report")
    assert report.device_slug("gpu (NVIDIA H100 80GB HBM3, CuPy 14.2.0)") == "h100"
    assert report.device_slug("gpu (NVIDIA H200, CuPy 14.2.0)", 2) == "2xh200"
    assert report.device_slug("cpu (NumPy/SciPy)").startswith("cpu-")


def test_studies_parse_and_reach_the_harness():
    names = {p.stem for p in BENCHMARKS.glob("*.py")} | {p.stem for p in STUDIES.glob("*.py")}
    for script in sorted(STUDIES.glob("*.py")):
        tree = ast.parse(script.read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        local = {m for m in imported if m.split(".")[0] in names}
        assert all(m in names for m in local), (script.name, local - names)


def test_decision_records_index_lists_every_record():
    decisions = ROOT / "docs" / "decisions"
    index = (decisions / "index.md").read_text()
    records = sorted(p.name for p in decisions.glob("*.md") if p.name != "index.md")
    assert len(records) >= 40
    assert [name for name in records if f"]({name})" not in index] == []
    assert not (BENCHMARKS / "NOTES.md").exists()  # the notes live in the records


def test_a_seed_spread_variant_reads_its_name_and_literal_options():
    parse_variant = _load("seed_spread", STUDIES).parse_variant
    assert parse_variant("m1:lbfgs_memory=1,precision=mixed,tol=1e-6") == (
        "m1", {"lbfgs_memory": 1, "precision": "mixed", "tol": 1e-6})
    assert parse_variant("plain") == ("plain", {})
