"""cvxpy_culorads: large low-rank SDPs with the LoRADS method, on the GPU (CuPy) or the CPU (NumPy).

Public API:

- :class:`SDPProblem`: the problem form (PSD blocks, an optional nonnegative block, equalities); data may
  include :class:`LowRank` terms U diag(d) U', kept factored.
- :func:`solve`: run LoRADS, returns a :class:`Result` with a :class:`Status`; settings in
  :class:`Settings`.
- :func:`read_sdpa` / :func:`write_sdpa`: SDPA sparse files.
- ``models``: builders that scale (MaxCut from a graph, matrix completion) and rounding.
- :class:`CULORADS`: the CVXPY solver, registered under the name ``"CULORADS"`` so that after
  ``import cvxpy_culorads``, ``problem.solve(solver="CULORADS")`` works.

CVXPY is a dependency (this package is what users install to solve SDPs from CVXPY), but it is imported
only when the program imports it: the command line and the direct API never use it, and it costs over a
second of start-up. So registration waits for CVXPY's import (see :mod:`cvxpy_culorads.cvxpy.hook`),
``CULORADS`` and ``register`` are imported on first access, and no fallback for an absent CVXPY is needed:
without it, nothing here ever asks for it.
"""
from cvxpy_culorads.backends.backend import available_devices, gpu_available
from cvxpy_culorads.cvxpy.hook import register_when_cvxpy_is_imported
from cvxpy_culorads.problem.io import read_sdpa, write_sdpa
from cvxpy_culorads.problem.lowrank import LowRank, SparsePlusLowRank
from cvxpy_culorads.problem.sdp import BlockCoefficients, SDPProblem
from cvxpy_culorads.result import Errors, Result, Status
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.driver import solve
from cvxpy_culorads.solver.log import VERSION

__version__ = VERSION

_CVXPY_NAMES = ("CULORADS", "register")  # from cvxpy_interface, which imports CVXPY

__all__ = [
    "SDPProblem", "BlockCoefficients", "LowRank", "SparsePlusLowRank", "solve", "Settings", "Result", "Errors",
    "Status", "read_sdpa", "write_sdpa",
    "available_devices", "gpu_available", "__version__", *_CVXPY_NAMES,
]


def __getattr__(name: str):
    """``CULORADS`` and ``register`` on first access (PEP 562): importing them imports CVXPY."""
    if name in _CVXPY_NAMES:
        from cvxpy_culorads.cvxpy import conic as cvxpy_interface

        return getattr(cvxpy_interface, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_CVXPY_NAMES})


register_when_cvxpy_is_imported()
