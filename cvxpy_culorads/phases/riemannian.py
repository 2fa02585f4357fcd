"""The Riemannian phase: L-BFGS on the product of spheres, for problems whose constraints all fix diagonal entries.

When every constraint is a_i X_jj = b_i on its own row j, and every row of every PSD block is fixed so (MaxCut,
Z2 synchronisation, any ``diag(X) == d`` model; ``bounds.FixedDiagonals``), the feasible factors are exactly the
R whose rows have the norms sqrt(b_i / a_i): a product of spheres. There the problem is min s <C, R R'> on that
manifold, and the penalty, the multiplier updates and phase II of the ALM route are unnecessary: each step keeps
the constraints exact, and the multipliers follow from stationarity (lambda_i = <(C R)_j, r_j> / (a_i |r_j|^2),
so b'lambda = <C, R R'> and the gap is zero by construction). What is left to certify is lambda_min of the dual
slack, which the driver measures between runs of this phase.

A step is L-BFGS on the Riemannian gradient 2 s P_R(C R) (P_R removes each row's component along r_j), the
direction projected onto the tangent space, the retraction scales the rows of R + tau D back to their norms, and
tau comes from Armijo backtracking from tau = 1 (L-BFGS scales its direction; the first step moves a tenth of
||R||). The curvature pairs are the differences of consecutive points and gradients, without vector transport
(their tangent spaces are close at the step sizes that occur, and the projected direction absorbs the rest:
projecting the pairs saved no steps); the retraction and the projections are fused row kernels
(``Kernels.sphere_retract``, ``Kernels.sphere_tangent``), so a step costs about what an ALM step does. It was the
faster of the two on every MaxCut measured, so the plan takes it as the low-rank phase wherever it applies unless
``algorithm="alm_admm"`` (decision record "riemannian-phase").

On several devices (:mod:`cvxpy_culorads.distributed`) the products of a run whose target is at least
``ROUNDED_HALO_TARGET`` may exchange the halo rows in single precision (``Settings.split.halo_precision``); the line
search then judges the decrease by a formula whose rounding error shrinks with the step, and the returned point's
product is taken in double precision.

In mixed precision (``Settings.precision="mixed"``, one device) a run may be *single*: the factor, the gradient,
the direction, the L-BFGS pairs and C R are float32, while the kernels sum inner products, Gram matrices and norms in
float64 and the line search's scalars stay float64. A rounded row is off its sphere by float32's rounding, which
moves <C, R R'> at first order (C R has a large component along each row), so the line search judges the objective
of the points projected back, to first order, with the decrease in a form whose rounding shrinks with the step
(``Kernels.sphere_decrease``). A single run stops once its gradient measure reaches the rounding of C R
(``SINGLE_FLOOR``), and the strategy goes on in double precision from there (decision record "mixed-precision").
Whatever the run stored, it leaves the state a float64 point of the spheres with float64 multipliers (``_finish``).

Where the kernel set has :attr:`Capability.FUSED_STEP` and C V is one CSR product (one device, no low-rank objective
terms), a step takes fewer passes over factor-sized arrays (decision record "fused-riemannian-step"): a trial point's
product gives its objective and its gradient in the same pass and writes C R only where the line search keeps it
(``Kernels.sphere_product_gradient``), and the direction's Gram pass also forms the new curvature pair in the memory of
the previous point and gradient, its combination pass projecting onto the tangent space
(``Kernels.lbfgs_sphere_direction``). The arithmetic is the unfused step's, rounded the same way.

A step drops as many factor-sized arrays as it makes (the direction after the move, the old point's C R, the pair that
L-BFGS gives up once its memory is full), and the next ones it needs (the direction, the trial point, its C R and its
gradient) take their memory (:class:`_Spares`) instead of new memory, which on the CPU is a fresh mapping whose pages
the kernel zero-fills on every allocation of this size (decision record "cpu-step-blocks").

A run ends once the scale-free gradient measure ||grad||_F ||R||_F / (1 + s |<C, X>|) is at most ``target``
(the driver tightens it between runs until the certificate holds), or when a step finds no descent. It is a
generator of ``Progress`` rows, one per step, like the other phases.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.backends.kernels import Capability
from cvxpy_culorads.operators.compressed import CompressedOperator
from cvxpy_culorads.phases.alm import LBFGS
from cvxpy_culorads.phases.state import PhaseOutcome, Progress

__all__ = ["RiemannianPhase", "Spheres"]

ARMIJO = 1e-4  # sufficient decrease, a share of the directional derivative
BACKTRACKS = 30  # halvings of tau before the direction is given up
FIRST_STEP = 0.1  # the first step (no curvature pairs yet) moves this share of ||R||_F
# A run with a gradient target at least this large takes its products with the halo rows rounded to single
# precision where the operator is split and so set (``Settings.split.halo_precision``). With the line search's
# decrease taken as in ``_line_search``, rounded runs reach gradient measures as small as runs in double precision
# do, well below this target (decision record "halo-precision"); tighter targets take double precision all the same.
ROUNDED_HALO_TARGET = 1e-7
# A single-precision run stops (STALLED) once its gradient measure is at most this factor times the measure of the
# rounding of C R, eps32 ||2 s C R||_F ||R||_F / (1 + s |<C, X>|): the measured gradient is then mostly rounding, and
# runs left to go on below it spent 2-8 times the steps of a hand-over to double precision there (decision record
# "mixed-precision").
SINGLE_FLOOR = 1.0
SINGLE_EPSILON = float(np.finfo(np.float32).eps) / 2  # the unit roundoff of float32


@dataclass(frozen=True)
class Spheres:
    """The manifold of a problem whose feasible factors are a product of spheres: the squared norm and the norm of
    every row of the stacked factor (row-space arrays of the operator)."""

    squares: object
    roots: object

    @classmethod
    def of(cls, problem, layout, fixed, op) -> Spheres | None:
        """The spheres of ``problem`` when every constraint fixes one diagonal entry and every row of every PSD block
        is fixed so (``fixed``: its ``bounds.FixedDiagonals`` with NumPy arrays, or None); else None (nonnegative
        variables, a constraint of another kind, or a free row leave the phase out)."""
        if not cls.cover(problem, layout, fixed):
            return None
        (offset, rows, roots), *others = fixed.blocks
        if others or rows is not None or roots.size != layout.n_rows:  # else one block fixes every row in order
            roots = np.empty(layout.n_rows)
            for offset, rows, block_roots in fixed.blocks:
                roots[slice(offset, offset + block_roots.size) if rows is None else rows] = block_roots
        # one transfer, the squares taken on the devices, not on the host with a second transfer (decision record
        # "host-passes-numpy")
        roots = op.split(roots)
        return cls(roots * roots, roots)

    @staticmethod
    def cover(problem, layout, fixed) -> bool:
        """Whether the fixed rows (``fixed``, or None) make the feasible factors of ``problem`` a product of spheres:
        every constraint fixes one, every row of every PSD block is one, and there are no nonnegative variables."""
        if fixed is None or layout.n_lp or problem.m == 0:
            return False
        covered = sum(roots.size for _, _, roots in fixed.blocks)
        return covered == problem.m == layout.n_rows

    def projected(self, R, kernels, dtype=np.float64):
        """R with every row scaled to its sphere (a zero row becomes root_i e_1), in new memory of ``dtype``: float64
        (a point to measure or to hand on, whatever R stores) or float32 (a single-precision run's start)."""
        out = kernels.empty_like(R) if R.dtype == dtype else kernels.xp.empty(R.shape, dtype)
        return kernels.sphere_retract(R, R, 0.0, self.roots, out)


class _Spares:
    """The memory of the factor-sized arrays that the step has dropped, for the next ones it needs. A step gives back
    what the next takes (once L-BFGS's memory is full; less before), so at most three wait here at a time and the
    phase holds no more arrays at its peak (the line search) than with new memory for each; a GPU's memory pool would
    hold the same blocks as free. The run clears them before its last products (``RiemannianPhase._finish``)."""

    def __init__(self, kernels):
        self.kernels, self.arrays = kernels, []

    def give(self, *arrays) -> None:
        """Takes the memory of ``arrays`` (None skipped), which the caller no longer reads."""
        self.arrays.extend(array for array in arrays if array is not None)

    def take(self, like):
        """An array of ``like``'s shape and type (contents undefined): a given one where there is one, else new memory.
        A given array of another shape or type is let go (an ``out`` of another type would change the run's
        precision)."""
        while self.arrays:
            spare = self.arrays.pop()
            if spare.shape == like.shape and spare.dtype == like.dtype:
                return spare
        return self.kernels.empty_like(like)

    def clear(self) -> None:
        self.arrays.clear()


class RiemannianPhase:
    """L-BFGS on the spheres of fixed rows (see the module); iterate with ``for progress in phase.run(): ...``."""

    def __init__(self, op, state, settings, norms, spheres: Spheres, *, target: float, lbfgs: LBFGS | None = None,
                 rounded_halo_target: float = ROUNDED_HALO_TARGET, single: bool = False):
        self.op, self.state, self.settings, self.norms = op, state, settings, norms
        self.spheres, self.squares, self.roots, self.target = spheres, spheres.squares, spheres.roots, target
        self.backend, self.xp, self.kernels = op.backend, op.backend.xp, op.kernels
        self.size = float(self.squares.sum())  # ||R||_F^2 on the manifold
        # the curvature pairs of an earlier run on the same factor carry over (the driver resets them on a rank change)
        self.lbfgs = lbfgs if lbfgs is not None else LBFGS(self.kernels, settings.lorads.lbfgs_memory)
        self.spares = _Spares(self.kernels)
        self.steps = self.moves = 0  # rows yielded, steps taken
        self.measure = math.inf  # the gradient measure at the last point
        # the trial points' product: rounded halos in a loose run; the returned point's is exact (``_finish``)
        rounded_halo = op.rounds_halo and target >= rounded_halo_target
        self.times = op.rounded_objective_times if rounded_halo else op.objective_times
        # single precision: float32 factor-sized arrays (one device; the caller decides)
        self.single, self.dtype = single, np.float32 if single else np.float64
        # C R carries more than double's rounding: the line search judges the decrease by its rounding-robust form
        self.rounded = rounded_halo or single
        self.floor = 0.0  # the gradient measure that single precision resolves at the last point (0 in double)
        self.product_norm = 0.0  # ||C R||_F of the current point, for the floor
        # the CSR matrix of the fused step's products, or None (the unfused step)
        self.matrix = (op.C if Capability.FUSED_STEP in self.kernels.capabilities
                       and isinstance(op, CompressedOperator) and op.objective_terms is None else None)
        self.outcome: PhaseOutcome | None = None

    def run(self):
        st, xp = self.state, self.xp
        s = st.c_scale
        st.R = self.spheres.projected(st.R, self.kernels, self.dtype)
        CR, G, objective = self._evaluate(st.R, s, exact=True)
        if G is None:
            G = self._gradient(st.R, CR, s)
        if self.single:
            self.product_norm = self.kernels.norm(CR)
        CR = self._kept(CR)
        lbfgs = self.lbfgs
        products = xp.empty(2)
        previous = None  # the fused step's point and gradient before the last move: the next pair's memory
        try:
            while True:
                D = self._direction(G, products, previous)
                previous = None
                gg, dg = (float(v) for v in self.backend.to_host(products))
                if lbfgs.pairs and not dg < 0.0:  # not a descent direction: steepest descent instead
                    lbfgs.reset()
                    continue
                scale = math.sqrt(self.size) / (1.0 + s * abs(objective))
                measure = self.measure = math.sqrt(max(gg, 0.0)) * scale
                self.steps += 1
                yield Progress.measure("RIEM", self.steps, 0.0, objective, objective, self.norms, 0.0, st.ranks)
                if not math.isfinite(measure + objective):
                    self.outcome = PhaseOutcome.FAILED
                    return
                if measure <= self.target:
                    self.outcome = PhaseOutcome.CONVERGED
                    return
                self.floor = SINGLE_FLOOR * SINGLE_EPSILON * 2.0 * s * self.product_norm * scale
                if measure <= self.floor:  # single precision resolves no more descent
                    self.outcome = PhaseOutcome.STALLED
                    return
                tau = 1.0 if lbfgs.pairs else FIRST_STEP * math.sqrt(self.size / gg)
                accepted = self._line_search(st.R, CR, D, tau, s * objective, dg, s)
                if accepted is None:
                    if lbfgs.pairs:  # the curvature pairs misled: one more try along the gradient
                        lbfgs.reset()
                        continue
                    self.outcome = PhaseOutcome.STALLED
                    return
                R_new, CR_new, objective, G_new = accepted
                self.spares.give(D, CR)  # before the unfused step's G_new takes one of them (its peak)
                accepted = D = CR = None
                if G_new is None:
                    G_new = self._gradient(R_new, CR_new, s)
                # the state moves to R_new before the old R's memory is reused: an interrupt (Ctrl-C) between any
                # two lines leaves the state a point of the spheres, never the step R_new - R
                R, st.R = st.R, R_new
                if self.matrix is not None:  # the pair is formed in the next direction's Gram pass
                    previous = (R, G)
                else:
                    step = self.kernels.scale_add(R, -1.0, R_new, 1.0)  # R_new - R, in R's memory
                    # G_new - G, in G's memory
                    self.spares.give(*lbfgs.push(step, self.kernels.scale_add(G, -1.0, G_new, 1.0)))
                R, CR, G = None, self._kept(CR_new), G_new
                CR_new = None
                self.moves += 1
        finally:
            self.spares.clear()
            self._finish()

    def _line_search(self, R, CR, D, tau, merit, slope, s):
        """Armijo backtracking along the retraction; (R_new, C R_new, <C, R_new R_new'>, its gradient or None: the
        unfused step takes it after the search) or None.

        With rounded halos the decrease is taken as <R_new - R, C R_new + C R>, which equals the difference of the
        objectives for a symmetric C and whose rounding error shrinks with the step: the difference of the two
        rounded objectives carries an error of the size of the rounding of <R, C R>, and near the optimum that
        exceeded the decrease, so the search stalled (decision record "halo-precision"). In single precision the
        same form is taken of the points projected back onto the spheres (``Kernels.sphere_decrease``)."""
        R_new = self.spares.take(R)
        CR_new = G_new = None
        for _ in range(BACKTRACKS):
            self.kernels.sphere_retract(R, D, tau, self.roots, R_new)
            CR_new, G_new, objective = self._evaluate(R_new, s, exact=not self.rounded, gradient=G_new, product=CR_new)
            if self.single:
                objective, decrease, product_squares = self.kernels.sphere_decrease(R_new, R, CR_new, CR, self.squares)
                sufficient = s * decrease <= ARMIJO * tau * slope
                self.product_norm = math.sqrt(product_squares)
            elif self.rounded:
                gram = self.kernels.gram([R_new, R, CR_new, CR])
                objective = gram[0, 2]
                sufficient = s * (gram[0, 2] + gram[0, 3] - gram[1, 2] - gram[1, 3]) <= ARMIJO * tau * slope
            else:
                sufficient = s * objective <= merit + ARMIJO * tau * slope
            if sufficient:
                return R_new, CR_new, objective, G_new
            tau *= 0.5
        return None

    def _evaluate(self, R, s, exact, gradient=None, product=None):
        """(C R or None, the gradient 2 s P_R(C R) or None, <R, C R> or None) at a point R. Fused: one pass gives the
        gradient and the objective, and C R where the line search keeps it (``_kept``). Unfused: C R, and its objective
        where ``exact`` (the rounded decrease needs none); the gradient follows from C R (``_gradient``). The gradient
        and C R go to the memory of ``gradient`` and ``product`` where given (the last trial point's), else the
        spares'."""
        if self.matrix is None:
            CR = self.times(R, out=self.spares.take(R) if product is None else product)
            return CR, None, self.kernels.inner(R, CR) if exact else None
        G = self.spares.take(R) if gradient is None else gradient
        CR = (self.spares.take(R) if product is None else product) if self.rounded else None
        objective = self.kernels.sphere_product_gradient(self.matrix, R, self.squares, 2.0 * s, G, CR)
        return CR, G, objective

    def _direction(self, G, products, previous):
        """The L-BFGS direction at the current point, on its tangent space, in the spares' memory; ``previous``: (R, G)
        before the last move, for the fused step's pair (None: no move since the last direction, or the unfused
        step), whose addition gives the spares the pair it drops."""
        out = self.spares.take(G)
        if self.matrix is None:
            return self._tangent(self.state.R, self.lbfgs.direction(G, products, out))
        D, dropped = self.lbfgs.sphere_direction(G, products, self.state.R, self.squares, previous, out)
        self.spares.give(*dropped)
        return D

    def _tangent(self, R, Z):
        """Z with each row's component along the row of R removed, in place."""
        return self.kernels.sphere_tangent(Z, R, self.squares, 1.0, Z)

    def _gradient(self, R, CR, s):
        """The Riemannian gradient 2 s P_R(C R), in the spares' memory."""
        return self.kernels.sphere_tangent(CR, R, self.squares, 2.0 * s, self.spares.take(CR))

    def _kept(self, CR):
        """C R of the current point where the line search needs it (the rounded decrease), else None (its memory given
        to the spares), so that the line search holds one factor-sized array fewer; the last point's product is taken
        again (``_finish``). In single precision it is float32: the kept array costs half of one in double."""
        if self.rounded:
            return CR
        self.spares.give(CR)
        return None

    def _finish(self) -> None:
        """The multipliers from stationarity and A(X), <C, X> of the last point, for the driver and the next
        phase: lambda = s (A(sym(C R R')))_i / (A(sym(A*(1) R R')))_i, which for one diagonal entry a_i on row j
        is s <(C R)_j, r_j> / (a_i |r_j|^2) (the least-squares multipliers of ``certificates``, exactly). C R is
        taken again, in double precision: a run keeps its point's product only where rounded (``_kept``), and a
        rounded one is not the answer's. A single-precision run's point is first projected into float64 (its rows
        back on their spheres to double's rounding), so the state, the multipliers and what the driver measures are
        float64. One product per run."""
        st, op, xp = self.state, self.op, self.xp
        if st.R.dtype != np.float64:
            st.R = self.spheres.projected(st.R, self.kernels)
        CR = op.objective_times(st.R)
        objective = self.kernels.inner(st.R, CR)
        numerator = op.constraints(op.sample(CR, st.R))
        ones = xp.ones(op.b.size)
        denominator = op.constraints(op.sample(op.adjoint_times(op.adjoint_data(ones), st.R), st.R))
        st.lam = st.c_scale * numerator / denominator
        st.Avals = op.constraints(op.sample(st.R))
        st.objective = objective
