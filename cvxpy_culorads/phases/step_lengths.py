"""The interior-point method's step lengths and its decompositions of stacks of blocks.

A step moves X and S as far towards the boundary of the cones as a fraction of the distance along the direction:
per stack the smallest eigenvalue of the congruences L^-1 dX L^-T, exact (eigvalsh) for small orders and estimated by
Lanczos above them (:class:`StepBounds`: the kernel set's ``lanczos_tridiagonals``, one launch per product on a GPU,
lowered by SDPT3's residual bound), all stacks' answers read in one transfer; :func:`exact_distance` is the fallback
where an estimate overshot. The decompositions of a (k, n, n) stack (:func:`each`, :func:`or_nan`, :func:`cholesky`)
are one batched call up to an order, one call per matrix above it, and report failures as NaN so that a pass reads
them with its one transfer (decision record "interior-point-stacks").
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["StepBounds", "cholesky", "each", "exact_distance", "or_nan"]

# The largest orders whose stacks are decomposed in one batched call: inverses and Cholesky factorisations (cuBLAS's
# batched LU, cuSOLVER's batched Cholesky: any order, and on the 2-RDM problems' stacks of four blocks of order 147 one
# call instead of four), and eigenvalues (cuSOLVER's batched Jacobi solver takes orders up to 32). Larger matrices
# are decomposed one call each, where the arithmetic outweighs the call. NumPy runs the same LAPACK routine per matrix
# either way.
BATCHED_FACTOR_ORDER = 256
BATCHED_EIGEN_ORDER = 32
# Step lengths: the smallest eigenvalue of each congruence L^-1 dX L^-T (``StepBounds``) is exact up to an order
# (on the device BATCHED_EIGEN_ORDER, what cuSOLVER's batched Jacobi solver takes: above it one launch-bound call per
# matrix; on the host EXACT_STEP_ORDER_HOST, below which LAPACK's eigvalsh costs less than the Lanczos steps' NumPy
# calls, decision record "interior-point-stacks") and above it estimated by LANCZOS_STEPS Lanczos steps (as SDPT3's
# steplength for orders up to 900); a step whose new vector is shorter than LANCZOS_BREAKDOWN times the matrix's
# norm has found an invariant subspace.
EXACT_STEP_ORDER_HOST = 100
LANCZOS_STEPS = 30
LANCZOS_BREAKDOWN = 1e-12
# Stacks of different orders share one Lanczos run, padded with zeros to the largest of them, while the padded
# entries stay within this factor of their own: fewer calls (a launch each on a GPU) for a bounded copy (NH2's orders
# 35 to 490 make three such groups)
LANCZOS_PADDING = 2.0


def each(decomposition, stack, xp, batched_order: int):
    """``decomposition`` of each matrix of a (k, n, n) stack, stacked: one batched call up to order
    ``batched_order``, else one call per matrix."""
    if stack.shape[-1] <= batched_order:
        return decomposition(stack)
    return xp.stack([decomposition(matrix) for matrix in stack])


def or_nan(decomposition, stack, xp):
    """``decomposition`` of each matrix of a stack (:func:`each`), NaN where NumPy raises: CuPy returns NaN itself,
    so that failures are read, like any other value, in the pass's one transfer."""
    try:
        return each(decomposition, stack, xp, BATCHED_FACTOR_ORDER)
    except np.linalg.LinAlgError:
        return xp.full(stack.shape, xp.nan)


def cholesky(X, xp):
    """The Cholesky factor of each matrix of a stack; NaN where one is not positive definite."""
    return or_nan(xp.linalg.cholesky, X, xp)


def congruence(L_inv, dX):
    """L^-1 dX L^-T of each matrix of a stack: X + alpha dX stays positive definite while 1 + alpha lambda > 0 for
    its eigenvalues lambda (X = L L')."""
    return L_inv @ dX @ L_inv.swapaxes(-1, -2)


def smallest_eigenvalues(stack, xp, batched_order: int):
    """The smallest eigenvalue of each matrix of a symmetric stack (:func:`each`); NaN for a matrix that is not
    finite (NumPy's eigvalsh raises on it)."""
    finite = xp.isfinite(stack).all(axis=(-2, -1))
    values = each(xp.linalg.eigvalsh, xp.where(finite[:, None, None], stack, 0.0), xp, batched_order)[:, 0]
    return xp.where(finite, values, xp.nan)


def boundary_distance(smallest: float, lp_ratio: float) -> float:
    """The largest step along a direction from the smallest eigenvalue of the congruences (:func:`congruence`, inf
    where there are none) and the LP part's smallest ratio; 0 where either is NaN (rounding has cost definiteness)."""
    if math.isnan(smallest) or math.isnan(lp_ratio):
        return 0.0
    return min(math.inf if smallest >= 0 else -1.0 / smallest, lp_ratio)


def lp_distance(x, dx, xp):
    """min -x_j / dx_j over dx_j < 0 (inf where none is), on the device."""
    if x.size == 0:
        return xp.full(1, xp.inf)
    decreasing = dx < 0
    return xp.where(decreasing, x / xp.where(decreasing, -dx, 1.0), xp.inf).min(keepdims=True)


def exact_distance(factors, directions, x, dx, xp) -> float:
    """The distance to the boundary along ``directions`` from every congruence's exact eigenvalues (batched up to
    ``BATCHED_EIGEN_ORDER``, one call per matrix above): the fallback where an estimate overshot."""
    minima = [smallest_eigenvalues(congruence(L_inv, d), xp, BATCHED_EIGEN_ORDER)
              for L_inv, d in zip(factors, directions)]
    *smallest, lp_ratio = xp.concatenate(minima + [lp_distance(x, dx, xp)]).tolist()  # one transfer
    return boundary_distance(min(smallest, default=math.inf), lp_ratio)


class StepBounds:
    """The distances to the boundary of the primal and the dual cone along a direction, for all stacks at once with one
    transfer to the host: per stack the smallest eigenvalue of the congruences L^-1 dX L^-T (:func:`congruence`) of
    its members on both sides, exactly (eigvalsh) up to ``exact_order``, else estimated by ``LANCZOS_STEPS`` steps of
    Lanczos (the kernel set's ``lanczos_tridiagonals``: on a GPU one launch per product; stacks of near orders padded
    into one product, ``LANCZOS_PADDING``; no host synchronisation) and lowered by the residual bound as in SDPT3's
    steplength. An estimate may still overshoot: the step it allows is checked by factorising the moved iterates
    (``InteriorPointPhase._take_step``)."""

    def __init__(self, stacks, backend):
        self.xp, self.to_host, self.kernels = backend.xp, backend.to_host, backend.kernels()
        exact_order = EXACT_STEP_ORDER_HOST if backend.on_host else BATCHED_EIGEN_ORDER
        self.exact = [stack.n <= exact_order for stack in stacks]
        # the Lanczos stacks by decreasing order, grouped into padded products: (first row, order, [(stack, row)])
        large = sorted((i for i, exact in enumerate(self.exact) if not exact), key=lambda i: -stacks[i].n)
        self.groups, rows, padded, own = [], 0, 0, 0
        for i in large:
            k, n = 2 * len(stacks[i].blocks), stacks[i].n
            if self.groups and (padded + k * self.groups[-1][1] ** 2) <= LANCZOS_PADDING * (own + k * n * n):
                padded, own = padded + k * self.groups[-1][1] ** 2, own + k * n * n
            else:
                self.groups.append((rows, n, []))
                padded = own = k * n * n
            self.groups[-1][2].append((i, rows))
            rows += k
        self.first_rows = [first for first, _, _ in self.groups] + [rows]
        # the side of each congruence (0: primal, 1: dual) in the order they reach the host: exact ones, then Lanczos
        sides = [np.repeat([0, 1], len(stack.blocks)) for stack in stacks]
        self.sides = np.concatenate([side for side, exact in zip(sides, self.exact) if exact]
                                    + [sides[i] for i in large] + [np.zeros(0)])
        width = stacks[large[0]].n if large else 0
        self.steps = min(LANCZOS_STEPS, width)
        # a fixed random start per congruence: a start orthogonal to the wanted eigenvector has probability 0
        start = np.zeros((rows, width))
        rng = np.random.default_rng(0)
        for _, _, members in self.groups:
            for i, row in members:
                start[row:row + 2 * len(stacks[i].blocks), :stacks[i].n] = rng.standard_normal(
                    (2 * len(stacks[i].blocks), stacks[i].n))
        start /= np.maximum(np.linalg.norm(start, axis=1, keepdims=True), 1e-300)
        self.start = self.xp.asarray(start)

    def distances(self, factors, directions, lp_parts) -> tuple[float, float]:
        """(primal, dual) distances: ``factors`` the inverse Cholesky factors of the stacks of X and of S,
        ``directions`` the stacks of dX and dS, ``lp_parts`` ((x, dx), (s, ds))."""
        xp = self.xp
        congruences = [xp.concatenate([congruence(L_x, d_x), congruence(L_s, d_s)])
                       for L_x, L_s, d_x, d_s in zip(*factors, *directions)]
        minima = [smallest_eigenvalues(C, xp, C.shape[-1]) for C, exact in zip(congruences, self.exact) if exact]
        parts = minima + [lp_distance(v, dv, xp) for v, dv in lp_parts]
        if self.groups:
            products = [self._padded([congruences[i] for i, _ in members], [row - first for _, row in members], n)
                        for first, n, members in self.groups]
            runs = [self.kernels.lanczos_tridiagonals(product, self.start[first:end, :product.shape[-1]], self.steps,
                                                      LANCZOS_BREAKDOWN)
                    for product, first, end in zip(products, self.first_rows, self.first_rows[1:])]
            parts += [xp.concatenate([run[side] for run in runs]).ravel() for side in (0, 1)]  # alphas, betas
        values = self.to_host(xp.concatenate(parts))
        exact_count = sum(minimum.size for minimum in minima)
        smallest = values[:exact_count]
        lp_ratios = values[exact_count:exact_count + 2]
        if self.groups:
            alphas, betas = values[exact_count + 2:].reshape(2, -1, self.steps)
            smallest = np.concatenate([smallest, ritz_lower_estimates(alphas, betas)])
        return tuple(boundary_distance(smallest[self.sides == side].min(initial=math.inf), lp_ratios[side])
                     for side in (0, 1))

    def _padded(self, stacks, rows, n):
        """The stacks (of orders up to ``n``) as one (rows, n, n) array, each from its row on, padded with zeros."""
        if len(stacks) == 1:
            return stacks[0]  # the group's largest order is its first
        out = self.xp.zeros((rows[-1] + stacks[-1].shape[0], n, n))
        for stack, row in zip(stacks, rows):
            out[row:row + stack.shape[0], :stack.shape[-1], :stack.shape[-1]] = stack
        return out


def ritz_lower_estimates(alphas, betas):
    """Per Lanczos run (rows of ``alphas``, ``betas``, on the host): its smallest Ritz value less SDPT3's bound on
    its error, min(r, r^2 / gap) with r the Ritz pair's residual and gap the distance to the next Ritz value less that
    one's residual (Kato-Temple); NaN where the run was not finite."""
    count, steps = alphas.shape
    finite = np.isfinite(alphas).all(axis=1) & np.isfinite(betas).all(axis=1)
    T = np.zeros((count, steps, steps))
    diagonal, off = np.arange(steps), np.arange(steps - 1)
    T[:, diagonal, diagonal] = np.where(finite[:, None], alphas, 0.0)
    T[:, off, off + 1] = T[:, off + 1, off] = np.where(finite[:, None], betas[:, :-1], 0.0)
    values, vectors = np.linalg.eigh(T)
    residuals = np.abs(np.where(finite, betas[:, -1], 0.0)[:, None] * vectors[:, -1, :2])
    gap = values[:, 1] - values[:, 0] - residuals[:, 1]
    error = np.where(gap > 0, np.minimum(residuals[:, 0], residuals[:, 0] ** 2 / np.maximum(gap, 1e-300)),
                     residuals[:, 0])
    return np.where(finite, values[:, 0] - error, np.nan)
