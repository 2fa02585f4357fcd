"""The command line, run in-process on tiny files: JSON output, the summary, --save, --maxcut, exit codes."""
import gzip
import io
import json
import lzma
import subprocess
import sys

import numpy as np
import pytest

from cvxpy_culorads.cli import _parser, _settings, main
from cvxpy_culorads.solver.run import Run

# MaxCut of the triangle in SDPA form (F0 = L/4, F_i = e_i e_i', c = 1): the SDP value is 9/4.
TRIANGLE_SDPA = """\
"MaxCut SDP of the triangle
3
1
3
1 1 1
0 1 1 1 0.5
0 1 2 2 0.5
0 1 3 3 0.5
0 1 1 2 -0.25
0 1 1 3 -0.25
0 1 2 3 -0.25
1 1 1 1 1
2 1 2 2 1
3 1 3 3 1
"""
TRIANGLE_VALUE = 2.25


@pytest.fixture
def triangle(tmp_path):
    path = tmp_path / "triangle.dat-s"
    path.write_text(TRIANGLE_SDPA)
    return path


def test_json_output(triangle, capsys):
    assert main([str(triangle), "--device", "cpu", "--json", "--seed", "1", "--algorithm", "low_rank"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # stdout holds the JSON object and nothing else
    assert report["status"] == "optimal"
    assert report["sdpa_objective"] == pytest.approx(TRIANGLE_VALUE, rel=1e-4)
    assert report["primal_objective"] == pytest.approx(-TRIANGLE_VALUE, rel=1e-4)
    assert report["dual_objective"] == pytest.approx(-TRIANGLE_VALUE, rel=1e-4)
    assert set(report["errors"]) == {"primal_infeasibility", "dual_infeasibility", "gap", "primal_residual",
                                     "max_violation", "dual_slack_violation"}
    assert set(report["criteria"]) == {"primal_residual", "certified_gap"}
    # MaxCut of the triangle: tr X = 3, so the bound is b'lambda - 3 max(0, -lambda_min) and lies below the value
    assert report["dual_bound"] <= report["primal_objective"] + 1e-9
    assert report["certified_gap"] == pytest.approx(
        abs(report["primal_objective"] - report["dual_bound"])
        / (1 + abs(report["primal_objective"]) + abs(report["dual_bound"])))
    assert (report["n"], report["m"], report["problem"]) == (3, 3, "triangle")
    assert report["device"].startswith("cpu") and report["solve_time"] >= 0 and report["ranks"]
    assert report["peak_device_bytes"] == 0  # no device memory on the CPU
    stages = report["stage_times"]
    assert set(stages) == {"alm", "admm", "riemannian", "interior_point", "certificates"}
    assert stages["riemannian"] > 0 and stages["certificates"] > 0  # MaxCut: on its spheres by default
    assert sum(stages.values()) <= report["solve_time"] - report["setup_time"] + 1e-6


@pytest.mark.parametrize("flags, enabled", [([], True), (["--no-interior-point-handover"], False)])
def test_interior_point_switch(flags, enabled):
    settings = _settings(_parser().parse_args(["problem.dat-s"] + flags))
    assert settings.lorads.interior_point_handover is enabled


def test_summary_and_save(triangle, tmp_path, capsys):
    target = tmp_path / "solution.npz"
    assert main([str(triangle), "--device", "cpu", "--quiet", "--tol", "1e-6", "--save", str(target)]) == 0
    captured = capsys.readouterr()
    assert "status             optimal" in captured.out
    (value,) = [line.split()[-1] for line in captured.out.splitlines() if line.startswith("SDPA objective")]
    assert float(value) == pytest.approx(TRIANGLE_VALUE, rel=1e-6)
    assert captured.err == ""  # --quiet: no log
    with np.load(target) as saved:
        assert set(saved.files) == {"R_0", "x_lp", "dual"}
        X = saved["R_0"] @ saved["R_0"].T
        np.testing.assert_allclose(np.diag(X), 1, atol=1e-5)
        assert saved["dual"].shape == (3,)


def test_maxcut_from_a_graph_file(tmp_path, capsys):
    graph = tmp_path / "triangle"
    graph.write_text("3 3\n1 2 1\n1 3 1\n2 3 1\n")
    assert main([str(graph), "--maxcut", "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sdpa_objective"] == pytest.approx(TRIANGLE_VALUE, rel=1e-4)
    assert report["cut_value"] == 2.0


def test_gpus_splits_the_problem(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 1200
    edges = {(int(min(a, b)), int(max(a, b))) for a, b in rng.integers(1, n + 1, (3 * n, 2)) if a != b}
    graph = tmp_path / "random"
    graph.write_text(f"{n} {len(edges)}\n" + "".join(f"{a} {b} 1\n" for a, b in sorted(edges)))
    assert main([str(graph), "--maxcut", "--device", "cpu", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main([str(graph), "--maxcut", "--device", "cpu", "--gpus", "2", "--json"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert "2 shards" in two["device"] and two["status"] == one["status"] == "optimal"
    assert two["sdpa_objective"] == pytest.approx(one["sdpa_objective"], rel=1e-5)
    assert main([str(graph), "--maxcut", "--device", "cpu", "--gpus", "2", "--shard-order", "rcm", "--json"]) == 0
    renumbered = json.loads(capsys.readouterr().out)
    assert "renumbered" in renumbered["message"] and renumbered["status"] == "optimal"
    assert renumbered["sdpa_objective"] == pytest.approx(one["sdpa_objective"], rel=1e-5)
    assert main([str(graph), "--maxcut", "--device", "cpu", "--gpus", "2", "--halo-precision", "single",
                 "--json"]) == 0
    rounded = json.loads(capsys.readouterr().out)
    assert rounded["status"] == "optimal"
    assert rounded["sdpa_objective"] == pytest.approx(one["sdpa_objective"], rel=1e-5)
    assert main([str(graph), "--maxcut", "--gpus", "two"]) == 2
    assert "--gpus must be a count or GPU ids" in capsys.readouterr().err


def test_malformed_file_exits_2_and_names_the_line(tmp_path, capsys):
    path = tmp_path / "bad.dat-s"
    path.write_text(TRIANGLE_SDPA.replace("0 1 2 3 -0.25", "0 1 2 4 -0.25"))
    assert main([str(path), "--json"]) == 2
    captured = capsys.readouterr()
    message = f"{path}:11: entry (2, 4) lies outside block 1 of size 3"
    assert message in _strict_json(captured.out)["error"]["message"]
    assert message in captured.err
    assert "Traceback" not in captured.err


def test_bad_input_exit_codes(tmp_path, capsys):
    assert main([str(tmp_path / "missing.dat-s")]) == 2
    assert "missing.dat-s" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["x.dat-s", "--tol"])
    assert info.value.code == 2
    path = tmp_path / "t.dat-s"
    path.write_text(TRIANGLE_SDPA)
    assert main([str(path), "--tol", "-1"]) == 2
    assert "tol must be a number > 0 and < 1, got -1.0" in capsys.readouterr().err


def _strict_json(text: str) -> dict:
    """Parse as RFC 8259 JSON: NaN and Infinity are refused."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


# min -tr X s.t. X_11 = 1 over 3 x 3 PSD matrices (SDPA: max tr X): unbounded
UNBOUNDED_SDPA = """\
1
1
3
1
0 1 1 1 1
0 1 2 2 1
0 1 3 3 1
1 1 1 1 1
"""


def test_an_unbounded_problem_exits_1_with_strict_json(tmp_path, capsys):
    path = tmp_path / "unbounded.dat-s"
    path.write_text(UNBOUNDED_SDPA)
    assert main([str(path), "--device", "cpu", "--json", "--quiet"]) == 1
    report = _strict_json(capsys.readouterr().out)
    assert report["status"] in ("unbounded", "unbounded_inaccurate")  # with a primal ray the status is exact


@pytest.mark.parametrize("flags, on_spheres", [([], True), (["--algorithm", "alm_admm"], False)])
def test_maxcut_is_solved_on_the_spheres_unless_told_not_to(triangle, capsys, flags, on_spheres):
    assert main([str(triangle), "--device", "cpu", "--json", *(flags or ["--algorithm", "low_rank"])]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "optimal" and report["sdpa_objective"] == pytest.approx(TRIANGLE_VALUE, rel=1e-5)
    phases = report["iterations"]
    assert (phases["riemannian"] > 0, phases["alm"] > 0) == (on_spheres, not on_spheres)


def test_bad_input_with_json_is_a_json_error_object(tmp_path, capsys):
    assert main([str(tmp_path / "missing.dat-s"), "--json"]) == 2
    report = _strict_json(capsys.readouterr().out)
    assert report["error"]["kind"] == "bad_input" and "missing.dat-s" in report["error"]["message"]
    assert main(["x.dat-s", "--json", "--reopt-level", "7"]) == 2  # the settings' own check, before the file is read
    assert "reopt_level must be an integer in 0..2" in _strict_json(capsys.readouterr().out)["error"]["message"]
    with pytest.raises(SystemExit) as info:  # argparse's own errors become JSON too
        main(["x.dat-s", "--json", "--algorithm", "fastest"])
    assert info.value.code == 2
    assert "--algorithm" in _strict_json(capsys.readouterr().out)["error"]["message"]


def test_ctrl_c_exits_130_and_keeps_the_best_point(triangle, tmp_path, capsys, monkeypatch):
    record = Run.record

    def interrupt_once_measured(run, progress, force=False):
        record(run, progress, force)
        if run.best is not None:
            raise KeyboardInterrupt

    monkeypatch.setattr(Run, "record", interrupt_once_measured)
    saved = tmp_path / "best.npz"
    args = [str(triangle), "--device", "cpu", "--json", "--quiet", "--save", str(saved), "--no-interior-point-handover",
            "--algorithm", "alm_admm"]  # phase I records a row per step, the first Riemannian run may already finish
    assert main(args) == 130
    report = _strict_json(capsys.readouterr().out)
    assert report["status"] == "interrupted"
    R = np.load(saved)["R_0"]
    assert R.shape[0] == 3 and np.all(np.isfinite(R))


def test_ctrl_c_while_reading_exits_130_without_a_traceback(triangle, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("cvxpy_culorads.cli.read_sdpa", interrupted)
    assert main([str(triangle), "--device", "cpu"]) == 130
    assert "Traceback" not in capsys.readouterr().err



def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"cvxpy_culorads {version('cvxpy_culorads')}\n"


def test_sdpa_from_standard_input_through_a_pipe():
    done = subprocess.run([sys.executable, "-m", "cvxpy_culorads", "-", "--device", "cpu", "--json", "--quiet"],
                          input=TRIANGLE_SDPA.encode(), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    report = _strict_json(done.stdout.decode())
    assert report["problem"] == "<stdin>" and report["status"] == "optimal"
    assert report["sdpa_objective"] == pytest.approx(TRIANGLE_VALUE, rel=1e-4)


class _Stdin:
    """Standard input as a pipe of these bytes: a binary ``buffer`` that cannot seek."""

    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)
        self.buffer.seekable = lambda: False
        self.buffer.name = "<stdin>"


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress])
def test_compressed_sdpa_from_standard_input(compress, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Stdin(compress(TRIANGLE_SDPA.encode())))
    assert main(["-", "--device", "cpu", "--json", "--quiet", "--tol", "1e-6"]) == 0
    report = _strict_json(capsys.readouterr().out)
    assert report["sdpa_objective"] == pytest.approx(TRIANGLE_VALUE, rel=1e-6)


def test_standard_input_errors_name_it_and_maxcut_needs_a_file(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Stdin(TRIANGLE_SDPA.replace("0 1 2 3 -0.25", "0 1 2 4 -0.25").encode()))
    assert main(["-", "--json"]) == 2
    assert _strict_json(capsys.readouterr().out)["error"]["message"].startswith("<stdin>:11: entry (2, 4) lies")
    assert main(["-", "--maxcut", "--json"]) == 2
    assert "--maxcut needs a graph file" in _strict_json(capsys.readouterr().out)["error"]["message"]


def _never_called(*args, **kwargs):
    raise AssertionError("called although the command line should have stopped before")


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_an_unwritable_save_path_is_refused_before_reading_or_solving(triangle, tmp_path, monkeypatch, capsys, where):
    target = {"missing folder": tmp_path / "missing" / "out.npz", "a folder": tmp_path / "folder.npz"}[where]
    if where == "a folder":
        target.mkdir()
    monkeypatch.setattr("cvxpy_culorads.cli.read_sdpa", _never_called)
    monkeypatch.setattr("cvxpy_culorads.cli.solve", _never_called)
    assert main([str(triangle), "--json", "--save", str(target)]) == 2
    captured = capsys.readouterr()
    error = _strict_json(captured.out)["error"]
    assert error["kind"] == "bad_input" and error["message"].startswith("--save: cannot write the solution there")
    assert str(target) in error["message"] and "Traceback" not in captured.err
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["triangle.dat-s", *(
        ["folder.npz"] if where == "a folder" else [])])


def test_the_save_check_leaves_no_file_and_keeps_an_existing_one(triangle, tmp_path, monkeypatch, capsys):
    def refuse(problem, settings):
        raise ValueError("devices > 1 splits blocks of order above 1000")

    monkeypatch.setattr("cvxpy_culorads.cli.solve", refuse)
    assert main([str(triangle), "--quiet", "--save", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new.npz").exists()  # the check's file is gone when the solve fails
    kept = tmp_path / "kept.npz"
    kept.write_bytes(b"an earlier solution")
    assert main([str(triangle), "--quiet", "--save", str(kept)]) == 2
    assert kept.read_bytes() == b"an earlier solution"
    capsys.readouterr()
    monkeypatch.undo()
    assert main([str(triangle), "--device", "cpu", "--quiet", "--save", str(tmp_path / "new")]) == 0
    with np.load(tmp_path / "new.npz") as saved:  # np.savez's own rule: .npz is appended
        assert saved["R_0"].shape[0] == 3


@pytest.mark.parametrize("error, kind, code", [
    (ValueError("devices > 1 splits blocks of order above 1000"), "bad_input", 2),
    (MemoryError("the solve needs about 96.0 GiB"), "out_of_memory", 2),
    (RuntimeError("cuSPARSE failed"), "solver_error", 1),
])
def test_errors_from_the_engine_are_reported_without_a_traceback(triangle, monkeypatch, capsys, error, kind, code):
    def fail(problem, settings):
        raise error

    monkeypatch.setattr("cvxpy_culorads.cli.solve", fail)
    assert main([str(triangle), "--json", "--quiet"]) == code
    captured = capsys.readouterr()
    reported = _strict_json(captured.out)["error"]
    assert reported["kind"] == kind and str(error) in reported["message"]
    assert captured.err.startswith("error: ") and "Traceback" not in captured.err


def test_a_file_declaring_sizes_beyond_memory_exits_2_with_a_json_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("cvxpy_culorads.problem.io.available_bytes", lambda: 24 * 2**30)  # issue 49's machine
    monkeypatch.setattr("cvxpy_culorads.cli.solve", _never_called)
    path = tmp_path / "huge.dat-s"
    path.write_text("1\n1\n-3000000000\n1\n0 1 1 1 1\n1 1 1 1 1\n")
    assert main([str(path), "--json"]) == 2
    captured = capsys.readouterr()
    error = _strict_json(captured.out)["error"]
    assert error["kind"] == "bad_input" and error["message"].startswith(f"{path}:3: the declared sizes")
    assert "need at least 89.4 GiB of memory to solve, but 24 GiB are available" in error["message"]
    assert "Traceback" not in captured.err
