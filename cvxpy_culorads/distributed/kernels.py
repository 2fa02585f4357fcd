"""The kernel contract over shards: :class:`ShardedKernels` runs the phases' and the eigensolver's kernels on
row-space arrays split by rows (:class:`~cvxpy_culorads.distributed.arrays.ShardedRows`).

The phases and the eigensolver are the single-device code: they touch row-space arrays only through the kernel set
and the operator, and this set implements that contract over shards, so the algorithm is written once and one device
is the same code with no communication. What crosses devices here: the halo of a sparse product (exchanged while the
own rows multiply), and *reductions*: inner products, L-BFGS' Gram matrix and the Gram-Schmidt coefficients of
Lanczos are sums of per-shard parts, all-reduced by the shards' communicator.
"""
from __future__ import annotations

import math

import numpy as np

from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import LINE_SEARCH_ROW_SCALARS, Capability, hashed_uniform, symmetric_from_upper
from cvxpy_culorads.distributed.arrays import ShardedMatrix, ShardedRows, Shards

__all__ = ["ShardedKernels"]


class ShardedKernels:
    """The part of the kernel contract (``kernels.Kernels``) that the Riemannian phase, L-BFGS, the eigensolver and the
    stationary multipliers use, over :class:`ShardedRows`: row-wise kernels run shard by shard with each shard's own
    kernel set, reductions sum the shards' parts, sparse products multiply the own rows while the halo is exchanged.
    L-BFGS sums the shards' parts of one Gram matrix per step; Lanczos' Gram-Schmidt passes are written here with
    one reduction per pass (the fused single-device versions keep everything on one device). Phase I's fused kernels
    over the constraint space run on the first device, where it lives, with that shard's rows.

    What it lacks of the contract: the trace sphere's phase I kernels (``sphere_line_search_products``,
    ``remove_normal``: :attr:`Capability.SPHERES`), deflation (``project_out``: :attr:`Capability.DEFLATION`) and
    the dense interior-point method (:attr:`Capability.INTERIOR_POINT`), which work on whole arrays; those methods are
    absent. The kernels on one device's whole arrays (:attr:`Capability.WHOLE_ARRAYS`: ``sym_sample``, ``row_dots``,
    the gathers, the L-BFGS and Gram-Schmidt pieces) are absent too: the split operators and this set call them on
    each shard's own kernel set.
    Beyond the contract it has :meth:`gram`, which the Riemannian phase asks of a split operator's kernels."""

    lanczos_cycle = staticmethod(CpuKernels.lanczos_cycle)  # a plain loop: no recording across devices
    prepare_products = staticmethod(CpuKernels.prepare_products)  # nothing is recorded, so the products plan lazily

    def __init__(self, shards: Shards):
        self.shards = shards
        self.max_lbfgs_memory = shards.kernels[0].max_lbfgs_memory  # the shards' Gram and combination passes

    # phase II runs on split rows (scale_add, average and the conjugate gradients' kernels; its CG unpreconditioned:
    # ShardedBlockOperator.normal_preconditioner); the trace sphere, deflation and the interior-point method do not
    capabilities = frozenset({Capability.PHASE_II})

    # ------------------------------------------------------------------ row space
    def inner(self, x, y) -> float:
        return self.shards.total(self.shards.each(lambda s, p, q: self.shards.backend.xp.vdot(p, q), x, y))

    def norm(self, x) -> float:
        return math.sqrt(self.inner(x, x))

    def all_finite(self, x) -> bool:
        return all(bool(v) for v in self.shards.each(lambda s, p: self.shards.backend.xp.isfinite(p).all(), x))

    def empty_like(self, x):
        return self.shards.map(lambda s, p: self.shards.backend.xp.empty_like(p), x, axis=x.axis)

    def random_vector(self, n: int, seed: int):
        """The single device's random vector (``kernels.hashed_uniform``), each shard's rows made on its device."""
        return self.shards.map(lambda s: hashed_uniform(self.shards.backend.xp, *self.shards.rows(s), seed))

    def vectors(self, count: int, n: int):
        xp = self.shards.backend.xp
        return self.shards.map(lambda s: xp.empty((count, self.shards.size(s))), axis=1)

    def combine(self, coefficients, vectors):
        xp = self.shards.backend.xp
        return self.shards.map(lambda s, p: xp.asarray(coefficients) @ p, vectors,
                               axis=0 if np.ndim(coefficients) == 1 else 1)

    def _reduced(self, parts):
        """The shards' partial sums (device arrays of one shape) summed, on the host."""
        self.shards.communicator.all_reduce(parts)
        return self.shards.backend.to_host(parts[0])

    def dot(self, x, y):
        """<x, y>: on the host for split arrays, a device scalar of the first device for the constraint space's."""
        if isinstance(x, ShardedRows):
            return self.inner(x, y)
        return self.shards.kernels[0].dot(x, y)

    def abs_sum(self, x) -> float:
        if isinstance(x, ShardedRows):
            return self.shards.total(self.shards.each(lambda s, p: self.shards.kernels[s].abs_sum(p), x))
        return self.shards.kernels[0].abs_sum(x)

    def average(self, x, y, out):
        self.shards.each(lambda s, p, q, o: self.shards.kernels[s].average(p, q, o), x, y, out)
        return out

    # ------------------------------------------------------------------ conjugate gradients (rows or constraints)
    def cg_step(self, x, r, p, Ap, rr, pAp) -> None:
        """x += alpha p, r -= alpha Ap for split arrays (``rr`` and ``pAp`` on the host) or the constraint space's."""
        if not isinstance(x, ShardedRows):
            self.shards.kernels[0].cg_step(x, r, p, Ap, rr, pAp)
            return
        xp = self.shards.backend.xp
        self.shards.each(lambda s, *parts: self.shards.kernels[s].cg_step(*parts, xp.asarray(rr), xp.asarray(pAp)),
                         x, r, p, Ap)

    def cg_direction(self, p, r, rr_new, rr) -> None:
        if not isinstance(p, ShardedRows):
            self.shards.kernels[0].cg_direction(p, r, rr_new, rr)
            return
        xp = self.shards.backend.xp
        self.shards.each(lambda s, q, z: self.shards.kernels[s].cg_direction(q, z, xp.asarray(rr_new), xp.asarray(rr)),
                         p, r)

    # ------------------------------------------------------------------ phase I's step (constraints: first device)
    def line_search_products(self, AW, Avals, b, lam, rho, R, D, CD, out):
        """The first device's kernel on the constraint space and its shard's rows; the other shards' parts of
        <R, CD> and <D, CD> added there (``kernels.LINE_SEARCH_ROW_SCALARS``)."""
        shards, xp = self.shards, self.shards.backend.xp
        with shards.on(0):
            shards.kernels[0].line_search_products(AW, Avals, b, lam, rho, R.parts[0], D.parts[0], CD.parts[0], out)
        rest = shards.each(lambda s, r, d, cd: xp.stack([xp.vdot(r, cd), xp.vdot(d, cd)]) if s else None, R, D, CD)
        with shards.on(0):
            for part in rest[1:]:
                out[LINE_SEARCH_ROW_SCALARS] += shards.to_first(part)
        return out

    def advance(self, R, D, tau, Avals, AW):
        """D *= tau, R += D on every shard, A(X)'s update on the first device; returns D."""
        shards = self.shards
        with shards.on(0):
            shards.kernels[0].advance(R.parts[0], D.parts[0], tau, Avals, AW)
        for s in range(1, shards.k):
            with shards.on(s):
                D.parts[s] *= tau
                R.parts[s] += D.parts[s]
        return D

    def shifted_residual(self, Avals, b, lam, rho):
        with self.shards.on(0):
            return self.shards.kernels[0].shifted_residual(Avals, b, lam, rho)

    # ------------------------------------------------------------------ row-wise kernels
    def scale_add(self, x, a, y, b):
        self.shards.each(lambda s, p, q: self.shards.kernels[s].scale_add(p, a, q, b), x, y)
        return x

    def sphere_tangent(self, Z, X, squares, scale, out):
        self.shards.each(lambda s, z, x, q, o: self.shards.kernels[s].sphere_tangent(z, x, q, scale, o),
                         Z, X, squares, out)
        return out

    def sphere_retract(self, X, D, tau, roots, out):
        self.shards.each(lambda s, x, d, q, o: self.shards.kernels[s].sphere_retract(x, d, tau, q, o),
                         X, D, roots, out)
        return out

    # ------------------------------------------------------------------ sparse products
    def csr_matmul(self, matrix: ShardedMatrix, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """The own rows' product while the halo is exchanged (as ``matrix.halo_dtype``), then the halo's part added
        in place."""
        shards = self.shards
        buffers, pending = matrix.exchange.start(V, matrix.halo_dtype)
        out = self.empty_like(V) if out is None else out
        for s in range(shards.k):
            with shards.on(s):
                shards.kernels[s].csr_matmul(matrix.own[s], V.parts[s], out=out.parts[s], alpha=alpha,
                                             addend=None if addend is None else addend.parts[s], beta=beta)
        pending.wait()
        for s in range(shards.k):
            if matrix.halo[s] is not None:
                with shards.on(s):
                    matrix.halo[s].add_product(shards.kernels[s], buffers[s], out.parts[s], alpha)
        return out

    # ------------------------------------------------------------------ L-BFGS
    def lbfgs_pair(self, s, y):
        """The record of one pair: the pair itself (its weights come out of the next direction's Gram matrix)."""
        return s, y

    def lbfgs_direction(self, G, pairs, products, out=None):
        """The recursion on coefficients (:func:`kernels.lbfgs_coefficients`) without the host: each shard's part of
        the Gram matrix of (G, s_0, y_0, ...) in one pass, one all-reduce of those few sums into every device, the
        recursion on each device (``products`` written by the first), each shard's combination in one pass, into
        ``out``'s parts where given (why not on the host: docs/decisions/distributed-device-reductions.md)."""
        shards, xp = self.shards, self.shards.backend.xp
        vectors = [G] + [v for pair in pairs for v in pair]
        upper = self._gram_parts(vectors)
        shards.communicator.all_reduce(upper)
        coefficients = shards.each(lambda s, gram: shards.kernels[s].lbfgs_recursion(
            gram, len(vectors), products if s == 0 else xp.empty(2)), upper)
        outs = [None] * shards.k if out is None else out
        return shards.map(lambda s, c, o, *parts: shards.kernels[s].lbfgs_combine(parts, c, o), coefficients, outs,
                          *vectors)

    def _gram_parts(self, vectors) -> list:
        """Each shard's part of the upper triangle of the Gram matrix of ``vectors``, row by row, on its device."""
        shards, size = self.shards, len(vectors) * (len(vectors) + 1) // 2
        return shards.each(lambda s, *parts: shards.kernels[s].lbfgs_gram(parts, shards.backend.xp.empty(size)),
                           *vectors)

    def gram(self, vectors) -> np.ndarray:
        """The Gram matrix of ``vectors`` on the host: each shard's part in one pass, one all-reduce (also the
        Riemannian line search's products when the halo rows are rounded, which only a split operator does)."""
        return symmetric_from_upper(self._reduced(self._gram_parts(vectors)), len(vectors))

    # ------------------------------------------------------------------ Lanczos
    def lanczos_extend(self, basis, j, w, projection, complement):
        """:meth:`CpuKernels.lanczos_extend` over shards (no deflation: ``complement`` is the identity here), with
        no transfer to the host: each pass's coefficients and the norm are all-reduced into every shard's device and
        used there, so a step is queued on the devices without waiting for them
        (docs/decisions/distributed-device-reductions.md)."""
        shards, xp, k = self.shards, self.shards.backend.xp, j + 1
        column = None
        for _ in range(2):  # classical Gram-Schmidt, twice
            passed = shards.each(lambda s, V, x: shards.kernels[s].basis_dot(V, k, x, xp.empty(k)), basis, w)
            shards.communicator.all_reduce(passed)
            shards.each(lambda s, V, x, c: shards.kernels[s].basis_subtract(V, k, c, x), basis, w, passed)
            with shards.on(0):
                column = passed[0] if column is None else column + passed[0]
        squares = shards.each(lambda s, x: xp.vdot(x, x).reshape(1), w)
        shards.communicator.all_reduce(squares)
        with shards.on(0):  # the projection lives on the first device
            projection[:k, j] = column
            projection[j + 1, j] = xp.sqrt(squares[0][0])
        with np.errstate(divide="ignore", invalid="ignore"):
            shards.each(lambda s, V, x, q: xp.divide(x, xp.sqrt(q), out=V[j + 1]), basis, w, squares)
