"""Fixtures shared by test modules."""
from __future__ import annotations

import pytest


@pytest.fixture
def stand_in(monkeypatch):
    """Replace the engine with ``cvxpy_zoo.clarabel_engine`` (an exact Clarabel solve of the SDPProblem); yields
    the settings of each call."""
    from cvxpy_zoo import clarabel_engine  # imports CVXPY and Clarabel: only where the fixture is used

    from cvxpy_culorads.solver import driver

    calls = []

    def solve(problem, settings, warm_start=None):  # Clarabel has no use for the warm start
        calls.append(settings)
        return clarabel_engine(problem, settings)

    monkeypatch.setattr(driver, "solve", solve)
    return calls
