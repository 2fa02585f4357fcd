"""Warm starts through CVXPY: ``problem.solve(..., warm_start=True)`` re-solves from the engine's last answer.

CVXPY keeps a per-problem dictionary for its solvers (``Problem._solver_cache``, handed to a conic solver's
``solve_via_data`` as ``solver_cache``; CVXPY empties it when the problem is compiled for another solver), where its
SCS and Clarabel interfaces keep their last iterates. Both entry points keep the engine's last
:class:`~cvxpy_culorads.Result` with a solution there, under their own key (their standard forms differ), and hand
it to :func:`cvxpy_culorads.solve` as ``warm_start`` when the next solve asks for one: a re-solve after a change of a
parameter's value starts from the previous factors and multipliers, and the engine checks that the variables still
match (``solver/warm.py``) and starts cold, saying why, where they do not. As in CVXPY, ``warm_start`` defaults to
True.
"""
from __future__ import annotations

from cvxpy_culorads.result import Result

__all__ = ["previous_result", "remember", "CHAIN_KEY", "STRUCTURED_KEY"]

CHAIN_KEY = "CULORADS"  # solver="CULORADS": CVXPY's own key for a solver's entry, its name
STRUCTURED_KEY = "CULORADS method"  # method="culorads": the structured reader's problem, kept apart from the chain's


def previous_result(cache: dict | None, key: str, warm_start: bool) -> Result | None:
    """The result kept under ``key`` in CVXPY's solver cache when ``warm_start`` asks for it, else None."""
    if not warm_start or cache is None:
        return None
    return cache.get(key)


def remember(cache: dict | None, key: str, result: Result) -> None:
    """Keep ``result`` under ``key`` for the next warm start when it has a solution (a point meant to be used);
    otherwise forget the last one, so that a failed solve's point never starts the next."""
    if cache is None:
        return
    if result.status.has_solution:
        cache[key] = result
    else:
        cache.pop(key, None)
