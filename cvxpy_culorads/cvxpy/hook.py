"""Register the CVXPY solver when CVXPY is imported, not when this package is.

Importing CVXPY takes over a second, and the command line and the direct API never use it; yet after
``import cvxpy_culorads``, ``problem.solve(solver="CULORADS")`` must work whichever of the two packages a
program imports first. So :func:`register_when_cvxpy_is_imported` registers at once when CVXPY is already
imported, and otherwise puts a :class:`RegisterOnCVXPYImport` finder first on ``sys.meta_path``: for the
name ``cvxpy`` only, it wraps the loader that the other finders find so that registration runs right after
CVXPY's package body, then takes itself off ``sys.meta_path`` and gives CVXPY its own loader back. A failed
registration is a warning: it must never break ``import cvxpy``, nor this package's direct API.
"""
from __future__ import annotations

import importlib
import importlib.abc
import sys
import warnings

_CVXPY = "cvxpy"


def register_when_cvxpy_is_imported() -> None:
    """Register now if CVXPY is imported, else once it is; calling it again (or reloading) adds nothing."""
    if _CVXPY in sys.modules:
        _register()
    elif not any(getattr(finder, "registers_culorads", False) for finder in sys.meta_path):
        # Looked up by a marker, not isinstance: importlib.reload of this module makes a new class.
        sys.meta_path.insert(0, RegisterOnCVXPYImport())


def _register() -> None:
    try:
        # Importing the structured path registers the solve method "culorads", and its import of the chain
        # interface the solver "CULORADS". Were a module being imported right now (its own import of CVXPY got
        # here), this returns the half-run module, which registers at its end.
        importlib.import_module(f"{__package__}.structured")
    except Exception as error:  # an incompatible CVXPY must not break the import that triggered this
        warnings.warn(f"cvxpy_culorads could not register with CVXPY (solver CULORADS, method culorads): "
                      f"{error!r}", RuntimeWarning, stacklevel=2)


class RegisterOnCVXPYImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hands ``cvxpy``'s spec on with a loader that registers after loading."""

    registers_culorads = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _CVXPY:
            return None
        # Ask the other finders directly: importlib.util.find_spec would come back here.
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if hasattr(spec.loader, "exec_module"):
                        spec.loader = _RegisteringLoader(spec.loader, self)
                    return spec
        return None


class _RegisteringLoader(importlib.abc.Loader):
    """CVXPY's own loader, registering the solver after it has run CVXPY's package body."""

    def __init__(self, loader, finder: RegisterOnCVXPYImport) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        # CVXPY keeps its own loader: resource readers and reloads never see this wrapper.
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        # Only a finished load disarms the finder: importlib.util.find_spec("cvxpy") or a failed import must not.
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        _register()

    def __getattr__(self, name):  # get_source, is_package, ... on a spec that was found but not loaded
        return getattr(self._loader, name)
