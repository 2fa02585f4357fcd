"""The log (``solver/log.py``): ``verbose=True`` prints a header, the iteration table and a summary to stderr, as
SCS and Clarabel do; an application that configured ``logging`` gets the same records through its own handlers."""
from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np

import cvxpy_culorads
from cvxpy_culorads import solve
from cvxpy_culorads.models import maxcut_problem

SCRIPT = """
import numpy as np, cvxpy_culorads as cl
from cvxpy_culorads.models import maxcut_problem
W = np.ones((40, 40)) - np.eye(40)
result = cl.solve(maxcut_problem(W), device="cpu", tol=1e-6, algorithm="low_rank", verbose={verbose})
print(result.status.value)
"""


def _run(verbose) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(verbose=verbose)], capture_output=True, text=True,
                          check=True)


def test_verbose_prints_header_table_and_summary_to_stderr():
    run = _run(True)
    lines = run.stderr.splitlines()
    assert lines[0].startswith(f"cvxpy_culorads {cvxpy_culorads.__version__}: ")
    # the settings that differ from the defaults, and only those
    assert "settings: tol=1e-06, device='cpu', algorithm=<Algorithm.LOW_RANK: 'low_rank'>, verbose=True" in lines[0]
    assert lines[1].startswith("plan: L-BFGS on the product of spheres")
    assert lines[2].split()[:2] == ["phase", "iter"] and any(line.lstrip().startswith("RIEM") for line in lines)
    assert lines[-1].startswith("status optimal: primal -400")  # the summary of the answer: 40^2 / 4
    assert run.stdout.strip() == "optimal"


def test_quiet_solves_print_nothing():
    run = _run(False)
    assert run.stderr == "" and run.stdout.strip() == "optimal"


def test_an_application_that_configured_logging_gets_the_records(caplog):
    W = np.ones((20, 20)) - np.eye(20)
    with caplog.at_level(logging.INFO, logger="cvxpy_culorads"):
        result = solve(maxcut_problem(W), device="cpu")  # not verbose: the application asked for INFO
    messages = [record.getMessage() for record in caplog.records if record.name == "cvxpy_culorads"]
    assert messages[0].startswith("cvxpy_culorads ") and messages[-1] == result.summary()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cvxpy_culorads"):
        solve(maxcut_problem(W), device="cpu")  # an application that asks for warnings only: no records
    assert not [record for record in caplog.records if record.name == "cvxpy_culorads"]
