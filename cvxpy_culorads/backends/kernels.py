"""The kernel contract: what the phases, the eigensolver and the certificates ask of a backend's hot kernels.

Two operations dominate every iteration of both phases: the *sampled symmetric product* (for positions
p = (row_p, col_p) of the pattern Omega, ``w_p = (U[row_p] . V[col_p] + U[col_p] . V[row_p]) / 2``, i.e.
sym(U V') sampled on Omega, in |Omega| r flops instead of n^2 r) and the *row-major CSR times dense product*
``S @ V``. Around them each step does a little vector algebra (the L-BFGS two-loop recursion, the exact line
search's scalars, the iterate's updates, the adjoint's gathers, the CG and Lanczos updates), which comes as fused
operations because on the GPU every array operation costs a launch. :class:`Kernels` is that contract; each set
declares the :class:`Capability` values it has, and the solver's plan checks them in one place
(:func:`missing_capabilities`). The sets are :class:`~cvxpy_culorads.backends.cpu_kernels.CpuKernels` (the NumPy
references), :class:`~cvxpy_culorads.backends.gpu_kernels.GpuKernels` (CuPy ``RawKernel``s) and the split set of
:mod:`cvxpy_culorads.distributed`; a backend hands out its own (``Backend.kernels``).
"""
from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Kernels", "Capability", "ALL_CAPABILITIES", "CAPABILITY_METHODS", "RowSpace", "missing_capabilities",
           "undeclared_gaps", "check_capabilities",
           "hashed_uniform", "symmetric_from_upper", "lbfgs_coefficients", "LINE_SEARCH_ROW_SCALARS"]


class Capability(enum.Enum):
    """What a kernel set may lack; a plan that needs a capability its set lacks picks another route or refuses. The
    Protocol's methods that belong to each are in :data:`CAPABILITY_METHODS`."""

    SPHERES = "spheres"  # phase I on the trace sphere
    DEFLATION = "deflation"  # eigenvalue problems deflated against the factor's range
    PHASE_II = "phase_ii"  # the ADMM phase (its conjugate gradients' updates)
    INTERIOR_POINT = "interior_point"  # the dense interior-point method on the backend's arrays
    # kernels on one device's whole arrays, called by an operator or inside a composite kernel: a split set has its
    # shards' own sets run them, each on its part
    WHOLE_ARRAYS = "whole_arrays"
    MIXED_PRECISION = "mixed_precision"  # the Riemannian phase on float32 factors (``Settings.precision="mixed"``)
    # the Riemannian step in fewer passes: C R with the gradient and the objective, the L-BFGS direction with the pair
    # update and the tangent projection (decision record "fused-riemannian-step")
    FUSED_STEP = "fused_step"


CAPABILITY_METHODS = {
    Capability.SPHERES: frozenset({"sphere_line_search_products", "remove_normal"}),
    Capability.DEFLATION: frozenset({"project_out"}),
    Capability.PHASE_II: frozenset({"cg_step", "cg_direction"}),
    Capability.INTERIOR_POINT: frozenset({"lanczos_tridiagonals"}),
    Capability.WHOLE_ARRAYS: frozenset({"sym_sample", "sym_sample_pair", "row_dots", "gather_values", "scatter_add",
                                        "gather_rows", "lbfgs_gram", "lbfgs_recursion", "lbfgs_combine", "basis_dot",
                                        "basis_subtract"}),
    Capability.MIXED_PRECISION: frozenset({"sphere_decrease"}),
    Capability.FUSED_STEP: frozenset({"sphere_product_gradient", "lbfgs_sphere_direction"}),
}
ALL_CAPABILITIES = frozenset(Capability)


LINE_SEARCH_ROW_SCALARS = slice(6, 8)  # the entries of line_search_products that are sums over the rows


@runtime_checkable
class Kernels(Protocol):
    """The contract of a kernel set, as the phases use it. Arrays are the backend's; ``out`` arrays, when given,
    are C-contiguous float64 of the result's shape and alias no input; "in place" methods change their first
    arguments. The kernels of the Riemannian phase (``csr_matmul``, ``lbfgs_*``, ``scale_add``, ``sphere_tangent``,
    ``sphere_retract``, ``sphere_decrease``, ``sphere_product_gradient``, ``lbfgs_sphere_direction``, ``inner``,
    ``norm``, ``gram``) also take float32 factors (``Settings.precision="mixed"``): they store float32, sum in float64,
    take each row's formula in float64 and round it once; ``csr_matmul`` rounds into a float32 ``out`` and
    ``sphere_retract`` into a float64 one (a point projected for its measurement). Every method returns the same shapes
    on every backend; ``lbfgs_pair``'s record begins with s and y and is opaque beyond them (only ``lbfgs_direction``
    of the same kernel set reads it), while ``lbfgs_sphere_direction`` takes plain (s, y) pairs (it reads the first two
    entries of each); ``lbfgs_direction``, ``lbfgs_sphere_direction`` and ``lbfgs_combine`` write into ``out`` (of
    their result's shape and type) where given.

    Declared capabilities, checked by the plan before a solve: ``capabilities``, the :class:`Capability` values
    the set implements (a method outside them may be absent), and ``max_lbfgs_memory``, the most L-BFGS pairs
    ``lbfgs_direction`` takes (None: no limit; :func:`check_capabilities`).
    """

    capabilities: frozenset[Capability]
    max_lbfgs_memory: int | None

    def sym_sample(self, rows, cols, U, V, out=None): ...
    def sym_sample_pair(self, rows, cols, R, D, out=None): ...
    def csr_matmul(self, matrix, V, out=None, alpha=1.0, addend=None, beta=0.0): ...
    def prepare_products(self, matrix) -> None: ...
    def lbfgs_pair(self, s, y): ...
    def lbfgs_direction(self, G, pairs, products, out=None): ...
    def lbfgs_gram(self, vectors, out): ...
    def lbfgs_recursion(self, upper, count, products): ...
    def lbfgs_combine(self, vectors, coefficients, out=None): ...
    def line_search_products(self, AW, Avals, b, lam, rho, R, D, CD, out): ...
    def advance(self, R, D, tau, Avals, AW): ...
    def shifted_residual(self, Avals, b, lam, rho): ...
    def gather_values(self, t, gather, weight): ...
    def scatter_add(self, out, index, values) -> None: ...
    def gather_rows(self, V, index, dtype): ...
    def scale_add(self, x, a, y, b): ...
    def cg_step(self, x, r, p, Ap, rr, pAp) -> None: ...
    def cg_direction(self, p, r, rr_new, rr) -> None: ...
    def lanczos_extend(self, basis, j, w, projection, complement) -> None: ...
    def basis_dot(self, V, k, w, out): ...
    def basis_subtract(self, V, k, c, w): ...
    def lanczos_tridiagonals(self, stack, start, steps, breakdown): ...
    def lanczos_cycle(self, step, first, stop, rows, deadline, recorded) -> int: ...
    def project_out(self, V, w): ...
    def sphere_tangent(self, Z, X, squares, scale, out): ...
    def row_dots(self, U, V): ...
    def sphere_retract(self, X, D, tau, roots, out): ...
    def sphere_decrease(self, R_new, R, CR_new, CR, squares) -> np.ndarray: ...
    def sphere_product_gradient(self, matrix, R, squares, scale, gradient, product=None) -> float: ...
    def lbfgs_sphere_direction(self, G, pairs, products, X, squares, update=False, out=None): ...
    def sphere_line_search_products(self, AW, Avals, b, lam, R, D, CD, out): ...
    def remove_normal(self, Z, R, size, normal, multiplier=None, weight=0.0): ...
    def inner(self, x, y) -> float: ...
    def gram(self, vectors) -> np.ndarray: ...
    def norm(self, x) -> float: ...
    def all_finite(self, x) -> bool: ...
    def empty_like(self, x): ...
    def random_vector(self, n: int, seed: int): ...
    def vectors(self, count: int, n: int): ...
    def combine(self, coefficients, vectors): ...
    def dot(self, x, y): ...
    def abs_sum(self, x) -> float: ...
    def average(self, x, y, out): ...


_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # SplitMix64's increment and multipliers


def hashed_uniform(xp, start: int, stop: int, seed: int):
    """Entries start..stop-1 of a pseudo-random vector with entries uniform in [-1, 1): entry i is SplitMix64's mix of
    (seed * 2^32 + i) times its increment, a function of i alone, so any range of it comes out the same on every array
    namespace and in any split into shards, and it is made on the device that uses it rather than drawn on the host
    and copied at every certificate (decision record "host-passes")."""
    increment, first, second = (xp.uint64(c) for c in _MIX)
    z = xp.arange(start, stop, dtype=xp.uint64)  # in place from here: one temporary
    z += xp.uint64((int(seed) << 32) % 2**64)
    z *= increment
    z ^= z >> xp.uint64(30)
    z *= first
    z ^= z >> xp.uint64(27)
    z *= second
    z ^= z >> xp.uint64(31)
    z >>= xp.uint64(11)  # 53 bits
    u = z.astype(xp.float64)
    u *= 2.0**-52
    u -= 1.0
    return u


class RowSpace:
    """Creation and reductions of row-space arrays (factors, eigenvector estimates, Lanczos bases), so that the phases
    and the eigensolver never need an array namespace for them: on several devices a row-space array is split by rows
    (``distributed.ShardedRows``) and the sharded kernel set implements these with reductions across the shards."""

    xp = np

    def inner(self, x, y) -> float:
        """<x, y> (synchronises)."""
        return float(self.xp.vdot(x, y))

    def norm(self, x) -> float:
        """||x||_2 (synchronises)."""
        return float(self.xp.linalg.norm(x))

    def all_finite(self, x) -> bool:
        return bool(self.xp.isfinite(x).all())

    def empty_like(self, x):
        return self.xp.empty_like(x)

    def random_vector(self, n: int, seed: int):
        """A random vector of n entries (:func:`hashed_uniform`), made where it is used."""
        return hashed_uniform(self.xp, 0, n, seed)

    def vectors(self, count: int, n: int):
        """Uninitialised storage for ``count`` row-space vectors of n entries (a count x n array)."""
        return self.xp.empty((count, n))

    def combine(self, coefficients, vectors):
        """coefficients @ vectors for host ``coefficients`` (a q-vector or a p x q array) and q stored vectors."""
        return self.xp.asarray(coefficients) @ vectors

    def dot(self, x, y):
        """<x, y> as a device scalar (no synchronisation), for the conjugate gradients' coefficients."""
        return self.xp.vdot(x, y)

    def abs_sum(self, x) -> float:
        """sum |x_i| (synchronises)."""
        return float(self.xp.abs(x).sum())

    def average(self, x, y, out):
        """out = (x + y) / 2 in place (returns out)."""
        self.xp.add(x, y, out=out)
        out *= 0.5
        return out


def symmetric_from_upper(upper, count: int) -> np.ndarray:
    """The symmetric ``count`` x ``count`` host matrix whose upper triangle, row by row, is ``upper``."""
    out = np.empty((count, count))
    rows, cols = np.triu_indices(count)
    out[rows, cols] = out[cols, rows] = upper
    return out


def lbfgs_coefficients(gram: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The L-BFGS two-loop recursion on coefficients, from the Gram matrix of the basis (G, s_0, y_0, s_1, y_1, ...),
    oldest pair first: (c, <G, G>, <D, G>) with D = -H G = sum_j c_j v_j. The same arithmetic as on the vectors (in
    exact arithmetic) and as the GPU kernel's epilogue; a pair with too little curvature (s'y <= 1e-12 ||s|| ||y||)
    gets weight zero."""
    pairs = (gram.shape[0] - 1) // 2
    s_index, y_index = 1 + 2 * np.arange(pairs), 2 + 2 * np.arange(pairs)
    sy, yy, ss = gram[s_index, y_index], gram[y_index, y_index], gram[s_index, s_index]
    ok = sy > 1e-12 * np.sqrt(ss * yy)
    inverse = np.where(ok, 1.0 / np.where(ok, sy, 1.0), 0.0)
    gamma = np.where(ok, sy / np.where(ok, yy, 1.0), 1.0)
    c = np.zeros(gram.shape[0])
    c[0] = 1.0
    alphas = np.zeros(pairs)
    for i in reversed(range(pairs)):
        alphas[i] = inverse[i] * (gram[s_index[i]] @ c)
        c[y_index[i]] -= alphas[i]
    if pairs:
        c *= gamma[-1]
    for i in range(pairs):
        c[s_index[i]] += alphas[i] - inverse[i] * (gram[y_index[i]] @ c)
    c = -c
    return c, float(gram[0, 0]), float(gram[0] @ c)


def missing_capabilities(kernels: Kernels, needed) -> frozenset[Capability]:
    """The capabilities in ``needed`` that ``kernels`` does not declare."""
    return frozenset(needed) - kernels.capabilities


def undeclared_gaps(kernels) -> frozenset[str]:
    """The :class:`Kernels` methods that ``kernels`` lacks although no capability it leaves out covers them: empty for
    a set that keeps the contract."""
    excused = set().union(*(CAPABILITY_METHODS[c] for c in ALL_CAPABILITIES - kernels.capabilities))
    required = {name for name in dir(Kernels) if not name.startswith("_") and callable(getattr(Kernels, name))}
    return frozenset(name for name in required - excused if not callable(getattr(kernels, name, None)))


def check_capabilities(kernels: Kernels, settings, device: str) -> None:
    """Refuse settings that ``kernels`` cannot run, with a ValueError naming the setting (before the solve starts,
    not in the middle of it)."""
    limit = kernels.max_lbfgs_memory
    if limit is not None and settings.lorads.lbfgs_memory > limit:
        raise ValueError(f"lbfgs_memory must be at most {limit} on {device}, got {settings.lorads.lbfgs_memory}")
