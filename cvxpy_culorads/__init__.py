"""cvxpy_culorads: large low-rank SDPs with the LoRADS method, on the GPU (CuPy) or the CPU (NumPy).

Public API:

- :class:`SDPProblem`: the problem form (PSD blocks, an optional nonnegative block, equalities).
- :func:`solve`: run LoRADS, returns a :class:`Result` with a :class:`Status`; settings in
  :class:`Settings`.
- :func:`read_sdpa` / :func:`write_sdpa`: SDPA sparse files.
- ``models``: builders that scale (MaxCut from a graph, matrix completion) and rounding.
- :class:`CULORADS`: the CVXPY solver; importing this package registers it under the name
  ``"CULORADS"`` when CVXPY is installed, so ``problem.solve(solver="CULORADS")`` works.
"""
from .backend import available_devices, gpu_available
from .driver import solve
from .io import read_sdpa, write_sdpa
from .problem import BlockCoefficients, SDPProblem
from .result import Result, Status
from .settings import Settings

__version__ = "0.1.0"

__all__ = [
    "SDPProblem", "BlockCoefficients", "solve", "Settings", "Result", "Status", "read_sdpa", "write_sdpa",
    "available_devices", "gpu_available", "__version__",
]

try:  # the CVXPY plugin is optional at import time so that the engine runs where CVXPY is absent
    import cvxpy as _cvxpy  # noqa: F401
except ImportError:
    pass
else:
    from .cvxpy_interface import CULORADS, register

    register()
    __all__ += ["CULORADS", "register"]
