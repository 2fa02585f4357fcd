"""Packaging and start-up: CVXPY is imported only when the program imports it, yet ``solver="CULORADS"`` and
``method="culorads"`` work in either import order; the version comes from the installed metadata; the GPU kernels'
CUDA sources ship as package data.

Import-order tests run in a fresh interpreter: in this one, pytest has imported CVXPY long ago.
"""
from __future__ import annotations

import fnmatch
import subprocess
import sys
import textwrap
from importlib import metadata, resources
from pathlib import Path

import pytest

import cvxpy_culorads
from cvxpy_culorads.backends import gpu_sources

ROOT = Path(__file__).resolve().parents[1]

TINY_SDP = """
X = cvxpy.Variable((2, 2), PSD=True)
problem = cvxpy.Problem(cvxpy.Minimize(cvxpy.trace(X)), [X[0, 0] == 1])
value = problem.solve(solver="CULORADS", device="cpu")
assert problem.status == "optimal" and abs(value - 1) < 1e-4, (problem.status, value)
value = problem.solve(method="culorads", device="cpu")
assert problem.status == "optimal" and abs(value - 1) < 1e-4, (problem.status, value)
"""

HOOK_GONE = """
assert not any(getattr(finder, "registers_culorads", False) for finder in sys.meta_path), sys.meta_path
assert type(cvxpy.__loader__).__name__ != "_RegisteringLoader", cvxpy.__loader__
"""


def run_python(*parts: str) -> str:
    """Runs the code in a fresh interpreter on the source tree; its stdout, or the test fails with its stderr."""
    code = "".join(textwrap.dedent(part) for part in parts)
    completed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_import_leaves_cvxpy_unimported_and_reload_adds_no_second_hook():
    run_python("""
        import importlib, sys
        import cvxpy_culorads
        assert "cvxpy" not in sys.modules, "import cvxpy_culorads imported CVXPY"
        importlib.reload(cvxpy_culorads)
        hooks = [finder for finder in sys.meta_path if getattr(finder, "registers_culorads", False)]
        assert len(hooks) == 1, hooks
    """)


def test_solve_by_name_with_cvxpy_imported_after_the_package():
    run_python("""
        import sys
        import cvxpy_culorads
        import cvxpy
    """, HOOK_GONE, TINY_SDP)


def test_solve_by_name_with_cvxpy_imported_before_the_package():
    run_python("""
        import sys
        import cvxpy
        import cvxpy_culorads
    """, HOOK_GONE, TINY_SDP)


def test_lazy_names_register_before_cvxpy_is_imported():
    # Importing CULORADS imports CVXPY from inside cvxpy_interface, which the hook then sees half-imported.
    run_python("""
        import sys, warnings
        warnings.simplefilter("error", RuntimeWarning)  # a failed registration warns
        from cvxpy_culorads import CULORADS, register
        from cvxpy.reductions.solvers.defines import SOLVER_MAP_CONIC
        assert isinstance(SOLVER_MAP_CONIC.get("CULORADS"), CULORADS)
        assert register() is SOLVER_MAP_CONIC["CULORADS"]
    """)


def test_failed_registration_warns_and_leaves_cvxpy_importable():
    stdout = run_python("""
        import sys, warnings
        import cvxpy_culorads
        sys.modules["cvxpy_culorads.cvxpy.structured"] = None  # as if the interface could not be imported
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import cvxpy
        print("CULORADS" in cvxpy.installed_solvers(), "culorads" in cvxpy.Problem.REGISTERED_SOLVE_METHODS,
              [str(w.message) for w in caught])
    """)
    assert stdout.startswith("False False") and "could not register with CVXPY" in stdout, stdout


def test_version_is_the_installed_metadata():
    assert cvxpy_culorads.__version__ == metadata.version("cvxpy_culorads")


def test_every_cuda_source_the_gpu_kernels_name_is_package_data():
    directory = resources.files(gpu_sources.CUDA_PACKAGE)
    shipped = sorted(entry.name for entry in directory.iterdir() if entry.name.endswith(".cu"))
    assert shipped == sorted(gpu_sources.CUDA_FILES)  # none missing, none left over
    for name in gpu_sources.CUDA_FILES:
        text = (directory / name).read_text(encoding="utf-8")
        assert text.strip(), f"{name} is empty"
        assert gpu_sources.cuda_file(name) == text


def test_the_package_data_table_ships_the_cuda_sources():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = []  # (the CUDA package's path below the table's package, pattern)
    for package, patterns in table.items():
        if gpu_sources.CUDA_PACKAGE == package or gpu_sources.CUDA_PACKAGE.startswith(package + "."):
            below = gpu_sources.CUDA_PACKAGE[len(package) + 1:].replace(".", "/")
            globs += [(below + "/" if below else "", pattern) for pattern in patterns]
    for name in gpu_sources.CUDA_FILES:
        assert any(fnmatch.fnmatch(below + name, pattern) for below, pattern in globs), (name, table)
