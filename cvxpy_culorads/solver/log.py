"""The solve's log: records of the ``logging`` logger ``"cvxpy_culorads"``, at INFO.

A solve with ``verbose=True`` prints them to stderr as SCS and Clarabel do: a header (the version, the problem, the
device, the plan and the settings that differ from the defaults), the iteration table every ``log_every`` seconds,
and a summary. It does so through a stderr handler of its own, attached for the solve where the application
configured none; an application that did configure logging gets the same records through its own handlers (with
``verbose``, or without it at the level it chose).
"""
from __future__ import annotations

import contextlib
import logging
import sys
from importlib import metadata

__all__ = ["LOGGER", "VERSION", "logging_for", "logs"]

LOGGER = logging.getLogger("cvxpy_culorads")

try:  # the version is written once, in pyproject.toml
    VERSION = metadata.version("cvxpy_culorads")
except metadata.PackageNotFoundError:  # a source tree on sys.path that pip has not installed
    VERSION = "0+unknown"


def logs(verbose: bool) -> bool:
    """Whether a solve's records reach anyone: ``verbose``, or an application that enabled INFO for the logger."""
    return verbose or LOGGER.isEnabledFor(logging.INFO)


@contextlib.contextmanager
def logging_for(verbose: bool):
    """The context of one solve. With ``verbose``: the logger passes INFO records for the solve, and where no handler
    is configured (on it or its ancestors) a stderr handler prints their plain messages; both are undone afterwards.
    Without ``verbose`` nothing changes."""
    if not verbose:
        yield
        return
    handler = None
    if not LOGGER.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOGGER.addHandler(handler)
    level = LOGGER.level
    if LOGGER.getEffectiveLevel() > logging.INFO:
        LOGGER.setLevel(logging.INFO)
    try:
        yield
    finally:
        LOGGER.setLevel(level)
        if handler is not None:
            LOGGER.removeHandler(handler)
