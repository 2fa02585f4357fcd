"""The interior-point finish: a primal-dual path-following method for problems with small dense blocks.

Low-rank methods stall where the optimum is not low rank or is degenerate (SDPLIB's truss* and
arch*, thetaG11: LoRADS's C code fails on them as well), yet such problems are usually small. When
every PSD block is small enough to hold densely and the m x m Schur complement fits
(``memory.interior_point_fits``), the driver hands a problem that the low-rank phases have not
certified to this method (``Settings.lorads.interior_point_handover``). It is the infeasible-start primal-dual
method with the HKM direction and Mehrotra's predictor-corrector, as in SDPT3 and SDPA, written
against the array namespace so it runs on either backend (the solve's, or the host's when every block is tiny:
:func:`interior_point_backend`): per iteration one m x m Cholesky factorisation, and per block inverses and a Cholesky
factorisation of order n_k and, for the step lengths, the smallest eigenvalues of two congruences of order n_k (exact
for small orders, Lanczos estimates checked by the next factorisation above:
:class:`~cvxpy_culorads.phases.step_lengths.StepBounds`). Blocks of equal
order are held stacked, as one (k, n, n) array (:class:`_Stack`), so that their products, their constraint operators
and (for small orders) their decompositions are one batched call per order rather than one per block
(quantum-chemistry problems have 22 blocks of 8 orders; on a GPU each call is launches and a synchronisation).
The Schur complement M_ij = sum_k <A_ik, X_k A_jk S_k^-1> is formed per block either over the positions the
constraints touch (|Omega_k|^2 gathered products, in bands: few positions, e.g. the theta problems) or by GEMMs with
dense copies of the constraint matrices (4 m_k n_k^3 flops: few dense constraints, e.g. arch*), whichever is cheaper
(``memory.route_entries``); it is factorised with a diagonal shift where rounding made it indefinite (degenerate
problems: truss, buckling) and each solve is refined against it. The phase is a
generator of ``Progress`` rows; at the end it leaves its best iterate in the solver state as a
factor (X_k = R_k R_k' from the eigendecomposition) and multipliers, which the driver then measures
from scratch like any other point. An iteration checks the solve's deadline between its heavy parts (each block's
Schur part, the factorisation, predictor and corrector) and abandons its step past it, so that a long iteration
cannot carry the solve far past its time limit.
"""
from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from cvxpy_culorads.backends.backend import CpuBackend
from cvxpy_culorads.backends.memory import INTERIOR_POINT_BAND_ENTRIES, interior_point_groups, route_entries
from cvxpy_culorads.certify.certificates import dense_rounding
from cvxpy_culorads.certify.measures import relative_gap
from cvxpy_culorads.phases.state import Progress, SolverState
from cvxpy_culorads.phases.step_lengths import StepBounds, cholesky, exact_distance, or_nan
from cvxpy_culorads.problem.sdp import BlockCoefficients

__all__ = ["InteriorPointPhase", "interior_point_backend"]

MAX_ITERATIONS = 100
STALL_ITERATIONS = 10  # iterations without a new best error estimate that end the method
# The iteration stops once its own error estimates are below tol^2: a gap of e leaves the multipliers off by about
# sqrt(e) along the optimal face, and CVXPY's duals (complementarity, the duals of second-order cones recovered
# from LMI duals) need them within tol; near the end the method converges superlinearly, so this costs a few
# iterations (decision record "exact-statuses-and-cvxpy-duals")
# Below this largest block order a GPU iteration is a string of tiny kernels whose launches cost more than the
# arithmetic, so the method runs on the host and hands its point to the device at the end (decision record
# "interior-point-small-operators").
DEVICE_MIN_ORDER = 64
# Entries up to which a block's constraint operator (touching constraints x positions) is held as a dense array: on
# tiny CVXPY models the sparse products' dispatch costs more than their arithmetic (decision record
# "interior-point-small-operators"). Kept small because the Schur complement multiplies by it twice, densely, with
# |positions|^2 entries.
DENSE_BLOCK_ENTRIES = 2 ** 14
# m x n_lp entries up to which the LP constraints are held dense: their Schur part is then one GEMM instead of three
# sparse products, whose dispatch dominates on tiny CVXPY models (decision record "interior-point-small-operators")
DENSE_LP_ENTRIES = 10 ** 6
# The largest diagonal shift of the Schur complement, as a share of its largest diagonal entry, and the refinement steps
# of each solve that take the shift's error out again (``InteriorPointPhase._factorise``, ``_solve``)
MAX_SHIFT = 1e-6
REFINEMENTS = 2
FACTOR_CUTOFF = 1e-13  # eigenvalues of X_k below this share of the largest are left out of the factor


class _Block:
    """A group of consecutive PSD blocks held as one block-diagonal matrix (``memory.interior_point_groups``), on the
    backend: the positions its constraints touch and the matrices of its Schur route."""

    def __init__(self, problem, members, backend, by_positions: bool | None = None):
        self.xp = xp = backend.xp
        self.members = list(members)
        sizes = [problem.block_sizes[k] for k in self.members]
        self.offsets = np.cumsum([0] + sizes[:-1]).tolist()  # of each member in the group's matrix
        self.n = n = sum(sizes)
        coeff = BlockCoefficients(*map(np.concatenate, zip(*(
            (c.con, c.row + o, c.col + o, c.val)
            for c, o in zip((problem.A_coords[k] for k in self.members), self.offsets)))))
        c_rows, c_cols, c_vals = map(np.concatenate, zip(*(
            (r + o, c + o, v) for (r, c, v), o in zip((problem.C_coords[k] for k in self.members), self.offsets))))
        keys = coeff.row * n + coeff.col
        positions, index = np.unique(keys, return_inverse=True)
        self.constraints, row_of = np.unique(coeff.con, return_inverse=True)  # those touching the block
        rows, cols = positions // n, positions % n
        fold = np.where(rows == cols, 1.0, 2.0)
        shape = (self.constraints.size, positions.size)
        A = sp.csr_array((coeff.val, (row_of, index)), shape=shape)
        self.A = _operator(A, backend, DENSE_BLOCK_ENTRIES)  # coefficient a_ip of constraint i at position p
        self.host_operator = (A, rows, cols)  # for the stack's A(X) and A*(y) (:class:`_Stack`)
        self.A_fold = _operator(A * fold, backend, DENSE_BLOCK_ENTRIES)  # <A_i, X> = sum_p A_fold[i, p] X[p]
        self.rows, self.cols = xp.asarray(rows), xp.asarray(cols)
        self.constraint_index = xp.asarray(self.constraints)
        C = np.zeros((n, n))
        C[c_rows, c_cols] = c_vals
        C[c_cols, c_rows] = c_vals
        self.C = xp.asarray(C)
        self.C_norm_fro = float(np.linalg.norm(C))
        squares = np.bincount(row_of, fold[index] * coeff.val ** 2, minlength=shape[0])
        self.A_norms_fro = np.sqrt(squares)  # ||A_ik||_F of the touching constraints
        if by_positions is None:  # the smaller route; the argument is for testing both
            by_positions = route_entries(positions.size, self.constraints.size, n)[0]
        self.by_positions = by_positions
        if self.by_positions:
            self.half = xp.asarray(np.where(rows == cols, 0.5, 1.0))  # A_i = sum_p a_ip c_p (e_u e_v' + e_v e_u')
            self.chunk = max(1, INTERIOR_POINT_BAND_ENTRIES // max(1, positions.size))  # rows of K built at once
        else:
            # filled where it is used: NH2's blocks of order 490 hold 3.3 GB each, which built on the host and copied
            # took seconds of a GPU solve
            self.dense = xp.zeros((self.constraints.size, n * n))
            touching, values = xp.asarray(row_of), xp.asarray(coeff.val)
            self.dense[touching, xp.asarray(coeff.row * n + coeff.col)] = values
            self.dense[touching, xp.asarray(coeff.col * n + coeff.row)] = values
            self.flat_uv, self.flat_vu = xp.asarray(rows * n + cols), xp.asarray(cols * n + rows)
            self.chunk = max(1, INTERIOR_POINT_BAND_ENTRIES // (n * n))  # constraints whose X A_j Z are made at once

    def member_matrices(self, X):
        """The diagonal blocks of the group's matrix ``X``, one per member block."""
        return [X[o:o + size, o:o + size] for o, size in zip(self.offsets, np.diff(self.offsets + [self.n]))]

    def schur(self, X, Z):
        """The block's part of the Schur complement, (<A_i, X A_j Z>) over its touching constraints."""
        if self.by_positions:
            xp, u, v = self.xp, self.rows, self.cols
            # M = A K A' with K the positions x positions matrix of Delta -> X Delta Z, built a band of rows at a
            # time (``memory.INTERIOR_POINT_BAND_ENTRIES``), each band multiplied into W = K A' at once: the memory
            # is |Omega| m_k for W, not |Omega|^2 for K (neu1g: 1.5 GB)
            W = xp.empty((u.size, self.constraints.size))
            for start in range(0, u.size, self.chunk):
                band = slice(start, start + self.chunk)
                Xu, Xv, Zu, Zv = X[u[band]], X[v[band]], Z[u[band]], Z[v[band]]
                # entry (p, q) for p = (u, v), q = (s, t): X_vs Z_ut + X_vt Z_us + X_us Z_vt + X_ut Z_vs (take()
                # gathers columns faster than fancy indexing in NumPy, decision record "host-passes-numpy";
                # accumulating in place keeps two band arrays)
                K = xp.take(Xv, u, axis=1) * xp.take(Zu, v, axis=1)
                for rows_of_X, rows_of_Z, first, second in ((Xv, Zu, v, u), (Xu, Zv, u, v), (Xu, Zv, v, u)):
                    term = xp.take(rows_of_X, first, axis=1)
                    term *= xp.take(rows_of_Z, second, axis=1)
                    K += term
                K *= self.half[band, None]
                K *= self.half[None, :]
                W[band] = (self.A @ K.T).T
            return self.A @ W
        # X A_j Z for a band of constraints at a time (GEMMs), its symmetric part sampled at the positions: W = K A'
        # again, without the m_k^2 n^2 product of the dense matrices with all of X A_j Z
        n, m_k = self.n, self.constraints.size
        W = self.xp.empty((self.rows.size, m_k))
        for start in range(0, m_k, self.chunk):
            band = slice(start, start + self.chunk)
            products = (X @ self.dense[band].reshape(-1, n, n) @ Z).reshape(-1, n * n)
            W[:, band] = (0.5 * (products[:, self.flat_uv] + products[:, self.flat_vu])).T
        return self.A_fold @ W


class _Stack:
    """Groups of blocks (:class:`_Block`) of one order n, whose matrices the method holds as one (k, n, n) array; A(X)
    and A*(y) over all of them are one product each, with the positions numbered in the flattened stack. Where every
    member takes the dense Schur route in one band (small blocks: launch-bound on a GPU) and the stack's W fits in one
    band too, the stack forms their Schur parts together (``batched``, :meth:`schur`)."""

    def __init__(self, blocks: list[_Block], backend):
        self.blocks = blocks
        self.xp = xp = backend.xp
        self.n = n = blocks[0].n
        self.C = xp.stack([block.C for block in blocks])
        constraints = np.unique(np.concatenate([block.constraints for block in blocks]))
        parts, uv, vu = [], [], []
        for index, block in enumerate(blocks):
            A, rows, cols = block.host_operator
            A = A.tocoo()
            touching = np.searchsorted(constraints, block.constraints)[A.row]
            parts.append(sp.csr_array((A.data, (touching, A.col)), shape=(constraints.size, A.shape[1])))
            uv.append(index * n * n + rows * n + cols)
            vu.append(index * n * n + cols * n + rows)
        A = sp.csr_array(sp.hstack(parts))
        uv, vu = np.concatenate(uv), np.concatenate(vu)
        self.A_fold = _operator(A * np.where(uv == vu, 1.0, 2.0), backend, DENSE_BLOCK_ENTRIES)
        # transposed once: the adjoint runs several times per iteration
        self.A_t = _operator(sp.csr_array(A.T), backend, DENSE_BLOCK_ENTRIES)
        self.uv, self.vu = xp.asarray(uv), xp.asarray(vu)
        self.constraint_index = xp.asarray(constraints)
        # W of the batched route is (all positions) x (all constraints): bounded like a band
        self.batched = len(blocks) > 1 and uv.size * constraints.size <= INTERIOR_POINT_BAND_ENTRIES and all(
            not block.by_positions and block.chunk >= block.constraints.size for block in blocks)
        if self.batched:
            self._batch(constraints)

    def _batch(self, constraints) -> None:
        """The arrays of the batched Schur route: the members' dense constraint matrices, one per (member,
        constraint) pair, taken over from the members; per member its positions padded to the longest with a spare
        row of W that takes the padding."""
        xp, n, blocks = self.xp, self.n, self.blocks
        sizes = [block.rows.size for block in blocks]
        longest, spare = max(sizes), sum(sizes)
        uv, vu, target = (np.zeros((len(blocks), longest), dtype=np.int64) for _ in range(3))
        target[:] = spare
        for index, block in enumerate(blocks):
            _, rows, cols = block.host_operator
            size = sizes[index]
            uv[index, :size], vu[index, :size] = rows * n + cols, cols * n + rows
            target[index, :size] = sum(sizes[:index]) + np.arange(size)
        self.pad_uv, self.pad_vu, self.pad_target = xp.asarray(uv), xp.asarray(vu), xp.asarray(target)
        self.pair_member = xp.asarray(np.concatenate(
            [np.full(block.constraints.size, index) for index, block in enumerate(blocks)]))
        self.pair_column = xp.asarray(np.concatenate(
            [np.searchsorted(constraints, block.constraints) for block in blocks]))[:, None]
        self.dense = xp.concatenate([block.dense for block in blocks])
        for block in blocks:
            block.dense = None  # the stack forms their Schur parts
        self.rows_of_W, self.columns_of_W = spare + 1, constraints.size
        self.chunk = max(1, INTERIOR_POINT_BAND_ENTRIES // (n * n))  # pairs whose X_b A_j Z_b are made at once

    def schur(self, X, Z):
        """The members' Schur parts summed, (sum_b <A_ib, X_b A_jb Z_b>) over the stack's constraints (``batched``
        stacks): X_b A_jb Z_b for a band of (member, constraint) pairs by batched GEMMs, sampled at the member's
        positions into W, then M = A_fold W as in a block's dense route."""
        xp, n = self.xp, self.n
        W = xp.zeros((self.rows_of_W, self.columns_of_W))
        for start in range(0, self.dense.shape[0], self.chunk):
            band = slice(start, start + self.chunk)
            members = self.pair_member[band]
            products = (X[members] @ self.dense[band].reshape(-1, n, n) @ Z[members]).reshape(-1, n * n)
            values = xp.take_along_axis(products, self.pad_uv[members], axis=1)
            values += xp.take_along_axis(products, self.pad_vu[members], axis=1)
            W[self.pad_target[members], self.pair_column[band]] = 0.5 * values
        return self.A_fold @ W[:-1]

    def apply(self, X, out) -> None:
        """Add (<A_i, X_b>) summed over the members to ``out`` (over all constraints), for symmetric X_b."""
        out[self.constraint_index] += self.A_fold @ X.reshape(-1)[self.uv]

    def adjoint(self, y):
        """sum_i y_i A_i per member, as a (k, n, n) array (y over all constraints)."""
        values = self.A_t @ y[self.constraint_index]
        out = self.xp.zeros(len(self.blocks) * self.n * self.n)
        out[self.uv] = values
        out[self.vu] = values
        return out.reshape(len(self.blocks), self.n, self.n)


def _stacks(blocks, backend) -> list[_Stack]:
    """The groups of blocks stacked by order, in the order each order first appears."""
    by_order: dict[int, list[_Block]] = {}
    for block in blocks:
        by_order.setdefault(block.n, []).append(block)
    return [_Stack(members, backend) for members in by_order.values()]


def interior_point_backend(problem, backend):
    """The backend the method runs on in a solve on ``backend``: the host's where every block is below
    ``DEVICE_MIN_ORDER``, else ``backend`` itself."""
    return CpuBackend() if max(problem.block_sizes, default=0) < DEVICE_MIN_ORDER else backend


class InteriorPointPhase:
    """The primal-dual interior-point method on the whole problem; iterate with ``for progress in phase.run()``.

    It computes on ``backend`` (the solve chooses it, :func:`interior_point_backend`) and leaves its best iterate in
    ``state`` as arrays of ``home``, the solver state's backend (``backend`` when not given)."""

    def __init__(self, problem, backend, state: SolverState, layout, norms, tol: float, row_scale: float,
                 max_iterations: int = MAX_ITERATIONS, home=None):
        self.home = backend if home is None else home
        self.backend, self.xp = backend, backend.xp
        self.state, self.layout, self.norms = state, layout, norms
        self.row_scale, self.max_iterations = row_scale, max_iterations
        self.tol, self.target = tol, tol ** 2
        self.correcting = False  # whether directions are corrected against the operator (set per iteration)
        xp = self.xp
        problem = problem.expanded()  # the method works on dense blocks anyway
        self.blocks = [_Block(problem, members, backend) for members in interior_point_groups(problem.block_sizes)]
        self.stacks = _stacks(self.blocks, backend)
        self.b = xp.asarray(problem.b)
        self.c_lp = xp.asarray(problem.c_lp)
        self.A_lp = _operator(problem.A_lp, backend, DENSE_LP_ENTRIES)
        self.A_lp_t = _operator(sp.csr_array(problem.A_lp).T, backend, DENSE_LP_ENTRIES)
        self.A_lp_dense = self.A_lp if problem.n_lp and isinstance(self.A_lp, xp.ndarray) else None
        self.m = problem.m
        self.best = None  # (worst error estimate, X blocks, x, y)
        self.best_iteration = 0
        self.X, self.S, self.x, self.s, self.y = self._starting_point(problem)
        self.bounds = StepBounds(self.stacks, backend)
        self.checked_factors = None  # the Cholesky factors of the stacks of X and S, once a step has checked them

    # ------------------------------------------------------------------ set-up
    def _starting_point(self, problem):
        """X = xi I, S = eta I per block (and x = xi, s = eta), y = 0: the scaling of SDPT3's default start."""
        xp = self.xp
        b_abs = np.abs(problem.b)
        X, S = [], []
        for stack in self.stacks:
            n, root = stack.n, math.sqrt(stack.n)
            xis, etas = [], []
            for block in stack.blocks:
                rhs = (1.0 + b_abs[block.constraints]) / (1.0 + block.A_norms_fro)
                xis.append(max(10.0, root, n * float(rhs.max(initial=0.0))))
                etas.append(max(10.0, root, (1.0 + max(float(block.A_norms_fro.max(initial=0.0)), block.C_norm_fro))
                                / root))
            X.append(xp.asarray(np.array(xis)[:, None, None] * np.eye(n)))
            S.append(xp.asarray(np.array(etas)[:, None, None] * np.eye(n)))
        n_lp = problem.n_lp
        A_lp = sp.csc_array(problem.A_lp)
        column_norms = np.sqrt(np.asarray(A_lp.multiply(A_lp).sum(axis=0))).ravel() if n_lp else np.zeros(0)
        xi = max(10.0, float(((1.0 + b_abs.max(initial=0.0)) / (1.0 + column_norms)).max(initial=0.0)))
        eta = max(10.0, 1.0 + max(float(column_norms.max(initial=0.0)), float(np.abs(problem.c_lp).max(initial=0.0))))
        return X, S, xi * xp.ones(n_lp), eta * xp.ones(n_lp), xp.zeros(self.m)

    # ------------------------------------------------------------------ operators
    def _apply(self, matrices, x):
        """A(X) + A_lp x for stacked block matrices ``matrices``."""
        out = self.A_lp @ x if x.size else self.xp.zeros(self.m)
        for stack, M in zip(self.stacks, matrices):
            stack.apply(M, out)
        return out

    def _dual_residuals(self):
        Rd = [stack.C - stack.adjoint(self.y) - S for stack, S in zip(self.stacks, self.S)]
        rd_lp = self.c_lp - self.A_lp_t @ self.y - self.s
        return Rd, rd_lp

    # ------------------------------------------------------------------ the loop
    def run(self, deadline: float = math.inf):
        """The iterations, one ``Progress`` row each; a step still unfinished at ``deadline`` (a
        ``time.perf_counter`` value) is abandoned and the method ends there."""
        self.deadline = deadline
        try:
            yield from self._iterations()
        finally:
            self._store_best()

    def _past_deadline(self) -> bool:
        return time.perf_counter() > self.deadline

    def _iterations(self):
        nu = sum(block.n for block in self.blocks) + self.x.size
        for iteration in range(1, self.max_iterations + 1):
            rp = self.b - self._apply(self.X, self.x)
            Rd, rd_lp = self._dual_residuals()
            primal, dual, residual, mu, dual_norms, y_rp = self._measures(rp, Rd, rd_lp, nu)
            progress = Progress.measure("IPM", iteration, residual, primal, dual, self.norms, mu,
                                        [block.n for block in self.blocks])
            # upper estimates of the measures the solve certifies (``Run.evaluate``): the residual per constraint,
            # and the slack's violation, -lambda_min(S + R_d) <= ||R_d||_F (the LP part's: sum of |rd_lp|), plus the
            # rounding the certificate's eigenvalues carry, DENSE_ROUNDING n eps ||S||_2 per block: where the
            # multipliers diverge (Mittelmann's rose13: ||y|| ~ 1/mu) that floor becomes the measure that lags
            primal_residual = residual / (1.0 + self.norms.b_2)
            dual_residual = dual_norms / (1.0 + self.norms.C_inf)
            # the residual share |y'(A(X) - b)| / (1 + |P| + |D|), which the solve requires within tol
            # (``evaluation.residual_share``), enters scaled so that it counts as met at tol: where the multipliers
            # are large (SDPLIB's hinf, qap) a residual of 1e-8 still makes a share above tol
            share = abs(y_rp) / (1.0 + abs(primal) + abs(dual))
            gap = relative_gap(primal, dual)
            worst = max(primal_residual, dual_residual, gap, share * self.tol)
            # the correction of the direction against the operator (``_direction``) only where the primal residual is
            # what lags: on ill-posed problems whose residual is already small (SDPLIB's hinf1, qap6) it moved the
            # iterates to points of a larger gap and residual share, and where the slack's rounding has overtaken it
            # (rose13) the iterations it won went to points whose slack the solve cannot certify
            self.correcting = primal_residual >= max(dual_residual, gap)
            if not math.isfinite(worst):
                return
            if self.best is None or worst < self.best[0]:
                self.best = (worst, [X.copy() for X in self.X], self.x.copy(), self.y.copy())
                self.best_iteration = iteration
            yield progress
            stalled = iteration - self.best_iteration >= STALL_ITERATIONS
            if worst <= self.target or stalled or not self._step(rp, Rd, rd_lp, mu, nu):
                return

    @staticmethod
    def _slack_rounding(stack, S):
        """Per group of a stack, an upper estimate of the rounding the solve's eigenvalues of its slack carry
        (``certificates.dense_rounding``, with the group's order and ||S||_F for ||S||_2)."""
        return dense_rounding(stack.n, _norms(S, stack.xp))

    def _measures(self, rp, Rd, rd_lp, nu: int) -> list[float]:
        """(primal objective, dual objective, ||r_p||, mu, the dual residual's norms per block plus the slack's
        rounding (``_slack_rounding``) and |rd_lp|, y' r_p) of the current iterate, with one transfer to the host."""
        xp = self.xp
        zero = xp.zeros(())  # the sums' start: a device scalar where there are no blocks
        return self.backend.to_host(xp.stack([
            sum((xp.vdot(stack.C, X) for stack, X in zip(self.stacks, self.X)), zero) + self.c_lp @ self.x,
            self.b @ self.y,
            xp.linalg.norm(rp),
            (sum((xp.vdot(X, S) for X, S in zip(self.X, self.S)), zero) + self.x @ self.s) / nu,
            sum(((_norms(R, xp) + self._slack_rounding(stack, S)).sum()
                 for stack, R, S in zip(self.stacks, Rd, self.S)), zero) + xp.abs(rd_lp).sum(),
            self.y @ rp])).tolist()

    def _step(self, rp, Rd, rd_lp, mu: float, nu: int) -> bool:
        """One predictor-corrector step; False when S cannot be inverted, the Schur complement cannot be
        factorised, or neither iterate can move (rounding has cost definiteness)."""
        xp = self.xp
        # the boundary distances of both step-length tests use the same factors of the current X and S
        boundaries, Z = self._inverse_factors()
        if Z is None:
            return False
        ratio = self.x / self.s
        M = self._schur(Z, ratio)
        if M is None:
            return False
        factor = self._factorise(M)
        if factor is None or self._past_deadline():
            return False
        # predictor: the affine-scaling direction (target X S = 0)
        affine = self._direction(factor, [-X for X in self.X], -self.x, rp, Rd, rd_lp, Z, ratio)
        if affine is None:
            return False
        alpha_p, alpha_d, _ = self._step_lengths(affine, boundaries, 1.0)
        dX, dS, dx, ds, _ = affine
        mu_affine = float(sum(xp.vdot(X + alpha_p * a, S + alpha_d * c) for X, a, S, c in zip(self.X, dX, self.S, dS))
                          + (self.x + alpha_p * dx) @ (self.s + alpha_d * ds)) / nu
        if not math.isfinite(mu_affine) or self._past_deadline():
            return False
        # SDPT3's centring rule: (mu_aff / mu)^3 after long predictor steps, more centring after short ones
        sigma = min(1.0, max(0.0, mu_affine / mu) ** max(1.0, 3.0 * min(alpha_p, alpha_d) ** 2))
        # corrector: target sigma mu I, with the second-order term of the predictor
        targets = [sigma * mu * Zk - X - a @ c @ Zk for Zk, X, a, c in zip(Z, self.X, dX, dS)]
        t_lp = sigma * mu / self.s - self.x - dx * ds / self.s
        direction = self._direction(factor, targets, t_lp, rp, Rd, rd_lp, Z, ratio)
        if direction is None:
            return False
        lengths = self._step_lengths(direction, boundaries, None)
        if lengths[0] <= 0.0 and lengths[1] <= 0.0:
            return False
        self._take_step(direction, boundaries, lengths)
        return True

    def _inverse_factors(self):
        """((L_X^-1 per stack, L_S^-1 per stack), S^-1 per stack) from the Cholesky factors of X and S (those the last
        step checked, ``_take_step``), with one transfer to the host: S^-1 is None where rounding has made one S
        singular; a side whose factors are not finite (lost definiteness) gets step length 0 (``StepBounds``)."""
        xp = self.xp
        if self.checked_factors is None:
            self.checked_factors = [[cholesky(M, xp) for M in side] for side in (self.X, self.S)]
        boundaries = tuple([or_nan(xp.linalg.inv, L, xp) for L in side] for side in self.checked_factors)
        # S^-1 from LU, not as L_S^-T L_S^-1: that exactly symmetric inverse changes the iterates (decision record
        # "interior-point-stacks")
        Z = [or_nan(xp.linalg.inv, S, xp) for S in self.S]
        return boundaries, (Z if self._all_finite(Z)[0] else None)

    def _all_finite(self, *groups) -> list[bool]:
        """Per group of stacks, whether all their entries are finite: one transfer for all groups."""
        xp = self.xp
        finite = [xp.isfinite(M).all() for group in groups for M in group]  # none on an LP
        flags = self.backend.to_host(xp.stack(finite)) if finite else np.zeros(0, dtype=bool)
        counts = np.cumsum([0] + [len(group) for group in groups])
        return [bool(flags[start:end].all()) for start, end in zip(counts[:-1], counts[1:])]

    def _take_step(self, direction, boundaries, lengths) -> None:
        """Moves the iterates by the step lengths (primal, dual, fraction of the distances), each side's new matrices
        factorised (the factors serve the next iteration, ``_inverse_factors``); a side whose factorisation fails,
        where an estimated distance overshot the boundary (``StepBounds``), takes the fraction of its exact
        distance instead."""
        xp = self.xp
        alpha_p, alpha_d, fraction = lengths
        dX, dS, dx, ds, dy = direction
        sides = [(self.X, dX, self.x, dx, alpha_p), (self.S, dS, self.s, ds, alpha_d)]
        moved = [[M + alpha * d for M, d in zip(stacks, directions)] for stacks, directions, _, _, alpha in sides]
        factors = [[cholesky(M, xp) for M in side] for side in moved]
        for index, finite in enumerate(self._all_finite(*factors)):
            if not finite:
                stacks, directions, v, dv, _ = sides[index]
                alpha = min(1.0, fraction * exact_distance(boundaries[index], directions, v, dv, xp))
                sides[index] = (stacks, directions, v, dv, alpha)
                moved[index] = [M + alpha * d for M, d in zip(stacks, directions)]
                factors[index] = [cholesky(M, xp) for M in moved[index]]
        (self.X, self.S), self.checked_factors = moved, factors
        alpha_p, alpha_d = sides[0][4], sides[1][4]
        self.x = self.x + alpha_p * dx
        self.s = self.s + alpha_d * ds
        self.y = self.y + alpha_d * dy

    def _schur(self, Z, ratio):
        """The Schur complement, or None once the deadline has passed (checked after each block's part)."""
        xp = self.xp
        if self.A_lp_dense is not None:
            M = (self.A_lp_dense * ratio) @ self.A_lp_dense.T
        elif self.x.size:
            M = xp.asarray((self.A_lp @ self.backend.csr(sp.diags_array(self.backend.to_host(ratio))) @ self.A_lp_t)
                           .toarray())
        else:
            M = xp.zeros((self.m, self.m))
        for stack, X, Z_stack in zip(self.stacks, self.X, Z):
            parts = [(stack, stack.schur(X, Z_stack))] if stack.batched else \
                ((block, block.schur(Xb, Zb)) for block, Xb, Zb in zip(stack.blocks, X, Z_stack))
            for owner, part in parts:
                index = owner.constraint_index
                if index.size == self.m:  # touches every constraint: no scatter (theta: m^2 entries)
                    M += part
                else:
                    M[index[:, None], index[None, :]] += part
                if self._past_deadline():
                    return None
        return M

    def _factorise(self, M):
        """(M, the Cholesky factor of M with a diagonal shift where rounding made M indefinite), or None where no
        shift up to ``MAX_SHIFT`` of its largest diagonal entry helps. Near the optimum of a degenerate problem (the
        truss and buckling ones) M is singular to rounding; the shift's error is removed by refining each solve
        against M itself (``_solve``)."""
        xp = self.xp
        M = 0.5 * (M + M.T)  # not in place: CuPy does not guard against the overlap of M and M.T
        diagonal = xp.diagonal(M).copy()
        largest = float(xp.abs(diagonal).max()) if self.m else 0.0
        shift = 0.0
        while True:
            if shift:
                xp.fill_diagonal(M, diagonal + shift)
            try:
                L = xp.linalg.cholesky(M)
            except np.linalg.LinAlgError:
                L = None
            if L is not None and bool(xp.isfinite(L).all()):  # CuPy returns NaN instead of raising
                xp.fill_diagonal(M, diagonal)
                return M, L
            shift = max(100.0 * shift, 1e-14 * largest)
            if not 0.0 < shift <= MAX_SHIFT * largest:
                return None

    def _solve(self, factor, h):
        """M^-1 h from the (shifted) factor, refined against M (``REFINEMENTS`` steps, no host synchronisation)."""
        M, L = factor
        if not L.size:
            return self.xp.zeros(0)
        dy = self._triangular_solves(L, h)
        for _ in range(REFINEMENTS):
            dy += self._triangular_solves(L, h - M @ dy)
        return dy

    def _triangular_solves(self, L, h):
        solve = self.backend.linalg.solve_triangular
        # L is finite (``_factorise``) and so is h (``_direction``): SciPy's finiteness checks would cost more than the
        # solves on small problems
        return solve(L.T, solve(L, h, lower=True, check_finite=False), lower=False, check_finite=False)

    def _direction(self, factor, targets, t_lp, rp, Rd, rd_lp, Z, ratio):
        """The HKM direction: dX = sym(T - X dS S^-1), dS = R_d - A*(dy), with M dy = r_p - A(T - X R_d S^-1);
        None when it is not finite (the iterates of a problem without a solution diverge). dy is corrected once by
        M^-1 (r_p - A(dX) - A_lp dx), the primal residual the direction leaves through the operator itself: the formed
        M differs from the operator by rounding that grows like ||X|| ||S^-1||, and near the optimum of a degenerate
        problem this left the primal residual growing while the gap closed (vibra3, buck3: decision record
        "interior-point-route"), where the primal residual is the measure that lags (``correcting``)."""
        xp = self.xp
        shifted = [_sym(T - X @ R @ Zk) for T, X, R, Zk in zip(targets, self.X, Rd, Z)]
        rhs = rp - self._apply(shifted, t_lp - ratio * rd_lp)
        if not bool(xp.isfinite(rhs).all()):
            return None
        dy = self._solve(factor, rhs)
        dX, dS, dx, ds = self._primal_dual_parts(dy, targets, t_lp, Rd, rd_lp, Z, ratio)
        if self.correcting:
            dy += self._solve(factor, rp - self._apply(dX, dx))
            dX, dS, dx, ds = self._primal_dual_parts(dy, targets, t_lp, Rd, rd_lp, Z, ratio)
        return dX, dS, dx, ds, dy

    def _primal_dual_parts(self, dy, targets, t_lp, Rd, rd_lp, Z, ratio):
        """(dX, dS, dx, ds) of the direction with multipliers' part ``dy``."""
        dS = [R - stack.adjoint(dy) for stack, R in zip(self.stacks, Rd)]
        ds = rd_lp - self.A_lp_t @ dy
        dX = [_sym(T - X @ d @ Zk) for T, X, d, Zk in zip(targets, self.X, dS, Z)]
        return dX, dS, t_lp - ratio * ds, ds

    def _step_lengths(self, direction, boundaries, fraction):
        """(primal, dual step length, fraction) keeping the iterates positive definite: the distance to the boundary
        along the direction (``StepBounds``) times ``fraction``, or with None times 0.9 + 0.09 min(1, distances)
        (closer to the boundary when the step is long, as in SDPT3). ``boundaries``: the inverse Cholesky factors of
        the stacks of X and of S (``_inverse_factors``)."""
        dX, dS, dx, ds, _ = direction
        primal, dual = self.bounds.distances(boundaries, (dX, dS), ((self.x, dx), (self.s, ds)))
        if fraction is None:
            fraction = 0.9 + 0.09 * min(1.0, primal, dual)
        return min(1.0, fraction * primal), min(1.0, fraction * dual), fraction

    # ------------------------------------------------------------------ hand-over
    def _store_best(self) -> None:
        """The best iterate as the state's factor and (scaled) multipliers, on the state's backend."""
        if self.best is None:
            return
        layout, st, home = self.layout, self.state, self.home
        _, X, x, y = self.best
        groups = {id(block): X_group for stack, X_stack in zip(self.stacks, X)
                  for block, X_group in zip(stack.blocks, X_stack)}
        factors = [self.backend.to_host(_psd_factor(Xk, self.xp))
                   for block in self.blocks for Xk in block.member_matrices(groups[id(block)])]
        ranks = [max(1, F.shape[1]) for F in factors]
        R = np.zeros((layout.n_rows, max(ranks + [1])))
        for offset, F in zip(layout.offsets, factors):
            R[offset:offset + F.shape[0], :F.shape[1]] = F
        R[layout.lp_offset:, 0] = np.sqrt(np.maximum(self.backend.to_host(x), 0.0))
        st.R, st.ranks = home.asarray(R), ranks
        st.lam = home.asarray(self.backend.to_host(y)) * (self.row_scale * st.c_scale)
        st.Avals = None


def _operator(matrix, backend, dense_entries: int):
    """A constraint operator as a dense array of the backend up to ``dense_entries`` entries, else as its CSR
    matrix."""
    if matrix.shape[0] * matrix.shape[1] <= dense_entries:
        return backend.xp.asarray(matrix.toarray())
    return backend.csr(matrix)


def _sym(M):
    """The symmetric part of a matrix or of each of a stack of them."""
    return 0.5 * (M + M.swapaxes(-1, -2))


def _norms(M, xp):
    """The Frobenius norm of each matrix of a stack."""
    return xp.sqrt((M * M).sum(axis=(-2, -1)))


def _psd_factor(X, xp):
    """R with R R' = X (dropping eigenvalues that are zero to rounding)."""
    values, vectors = xp.linalg.eigh(_sym(X))
    keep = values > FACTOR_CUTOFF * max(float(values[-1]), 0.0)
    return vectors[:, keep] * xp.sqrt(values[keep])
