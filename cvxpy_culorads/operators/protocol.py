"""The operator contract: what the phases, the certificates and the solve ask of a problem's data on a backend.

Arrays in the row space (the factor R, its directions, products with it) are the backend's, or split by rows on several
devices; arrays in the constraint space (b, multipliers, A(X)) are whole vectors of the backend. Three classes
implement it: :class:`~cvxpy_culorads.operators.compressed.CompressedOperator` (one device), and, with rows split over
devices, :class:`~cvxpy_culorads.distributed.ShardedBlockOperator` and
:class:`~cvxpy_culorads.distributed.ShardedSpheresOperator`. The last one serves products of spheres only, where the
Riemannian phase runs: it implements :class:`SpheresOperator`, not phase I's ``sample_pair``, and the plan never asks
it for that.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from cvxpy_culorads.backends.kernels import Kernels

__all__ = ["SpheresOperator", "Operator"]


@runtime_checkable
class SpheresOperator(Protocol):
    """What the Riemannian phase, the certificates and the measurements use.

    ``layout`` is the block layout of the stacked row space; ``b`` the right-hand side (rescaled rows: the true one is
    ``b / row_scale``); ``kernels`` the kernel set of the operator's arrays; ``rounds_halo`` whether
    :meth:`rounded_objective_times` may round (several devices' halos in single precision)."""

    layout: object
    backend: object
    kernels: Kernels
    b: object
    row_scale: object
    rounds_halo: bool

    def split(self, array):
        """A whole row-space array laid out as the operator's row-space arrays are."""

    def initial_factor(self, width: int, ranks, seed: int):
        """The random start: ``ranks[k]`` columns in block k of a factor ``width`` columns wide."""

    def widen(self, R, ranks, new_ranks, directions=None):
        """R with ``new_ranks`` columns per block, the new ones along ``directions`` (per block, or None)."""

    def sample(self, U, V=None):
        """sym(U V') (U U' without V) on the positions the constraints touch."""

    def constraints(self, w):
        """A(X) from the sampled values ``w`` of X."""

    def residual_norm(self, residual) -> float:
        """||residual||_2 of the unscaled rows."""

    def objective_times(self, V, out=None):
        """C V."""

    def rounded_objective_times(self, V, out=None):
        """C V where rounding is allowed (``rounds_halo``), else exactly :meth:`objective_times`."""

    def objective(self, R) -> float:
        """<C, R R'>."""

    def adjoint_data(self, y, weight=1.0):
        """What :meth:`adjoint_times` needs of A*(weight y), prepared once for several products."""

    def adjoint_times(self, data, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """alpha A*(y) V + beta addend, from :meth:`adjoint_data`."""

    def slack_times(self, y, c_scale, V, CV=None, weight=1.0):
        """(c_scale C - A*(weight y)) V, with C V given as ``CV`` where it is known."""

    def slack_matrix(self, lam):
        """The dual slack C - A*(lam) as a matrix the eigensolver multiplies."""

    def adjoint_matrix(self, y, weight=1.0):
        """A*(weight y) as a matrix the eigensolver multiplies."""


@runtime_checkable
class Operator(SpheresOperator, Protocol):
    """The whole contract: with phase I's line search and phase II's preconditioner."""

    def sample_pair(self, R, D):
        """sym(R R'), sym(R D') and D D' on the constraints' positions in one pass (the exact line search)."""

    def normal_preconditioner(self, F):
        """Phase II's preconditioner for the normal equations around the factor F, as a function of an n_rows x r
        block, or None where the operator has none (the conjugate gradients then run unpreconditioned)."""
