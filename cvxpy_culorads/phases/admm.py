"""Phase II: the low-rank ADMM splitting X = U V' with U = V enforced by a penalty.

With M = -lambda - rho b and S = s C + A*(M), one sweep solves the two well-conditioned linear
systems

    (I + A*(A(. V')) V) U = V - S V / rho,      (I + A*(A(. U')) U) V = U - S U / rho,

each by conjugate gradients warm-started at the current factor (the operator is I + J'J, so CG
converges quickly), then averages R = (U + V) / 2, recomputes A(R R') and takes the multiplier step
lambda <- lambda - rho (A(R R') - b). Unlike LoRADS, which sweeps the PSD blocks one at a time, all
blocks (and the nonnegative variables, rank-one rows of the same factor) are updated together: the
joint system is still I + J'J, one CG solve replaces K of them, and the update is the exact
minimiser over all of U at once. The penalty grows by 1.2 every 5 sweeps up to a cap that is raised
when the infeasibility stagnates above tol. U V' is neither symmetric nor PSD until U = V, so a penalty far
too small for the objective lets the iterates run away (seen on arch0 straight after the switch):
when the infeasibility grows far beyond its value at the switch, the phase restarts from the
switch point with a larger penalty. The phase is a generator of ``Progress`` rows, one per sweep.
"""
from __future__ import annotations

import math
from collections import deque

from cvxpy_culorads.linalg.krylov import conjugate_gradient
from cvxpy_culorads.phases.state import PhaseOutcome, Progress, SolverState

__all__ = ["ADMMPhase"]

RHO_EVERY, RHO_GROWTH = 5, 1.2
STAGNATION_WINDOW, STAGNATION_RATIO = 500, 0.65
RHO_CEILING_FACTOR = 200.0  # hard ceiling on rho: 200 * rho_max
DIVERGENCE_FACTOR = 100.0  # infeasibility growth over its value at the start that triggers a restart
RESTART_RHO_FACTOR, MAX_RESTARTS = 4.0, 6
GAP_PATIENCE = 200  # feasible sweeps without a new best gap after which the phase stops


class ADMMPhase:
    """Phase II on a :class:`SolverState`; iterate with ``for progress in phase.run(): ...``."""

    def __init__(self, op, state: SolverState, settings, norms, *, max_sweeps: int, reopt: bool,
                 rho_max: float, cg_factor: float):
        self.op, self.state, self.settings, self.norms = op, state, settings, norms
        self.backend = op.backend
        self.kernels = op.kernels
        self.max_sweeps = max_sweeps
        self.reopt = reopt
        self.rho_max = rho_max
        self.cg_factor = cg_factor  # CG tolerance, times the last sweep's primal infeasibility
        self.sweeps = 0
        self.cg_iterations = 0
        self.outcome: PhaseOutcome | None = None  # set when the phase ends
        self.U = state.R.copy()
        self.V = state.R.copy()
        self.restarts = 0

    def _solve_factor(self, shift, fixed, start, tol, check_every):
        """The minimiser over one factor with the other one ``fixed``, by CG from ``start``."""
        op, st = self.op, self.state

        def normal_operator(Z):  # Z -> Z + A*(A(sym(Z F'))) F
            multipliers = op.constraints(op.sample(Z, fixed))
            return op.adjoint_times(op.adjoint_data(multipliers), fixed, addend=Z, beta=1.0)

        rhs = self.kernels.scale_add(op.slack_times(shift, st.c_scale, fixed), -1.0 / st.rho, fixed, 1.0)
        precondition = op.normal_preconditioner(fixed)
        if precondition is not None:  # it ends within an iteration or two: read the residual back every time
            check_every = 1
        solution, iterations = conjugate_gradient(normal_operator, rhs, start, tol, self.backend, check_every,
                                                  precondition=precondition)
        self.cg_iterations += iterations
        return solution

    def run(self):
        """Sweeps until converged; restarts from the start point with a larger penalty on divergence."""
        st = self.state
        start_R, start_lam, start_rho = st.R.copy(), st.lam.copy(), st.rho
        while True:
            outcome = yield from self._sweeps()
            if outcome is not PhaseOutcome.FAILED or self.restarts >= MAX_RESTARTS:
                self.outcome = outcome
                return
            self.restarts += 1
            start_rho *= RESTART_RHO_FACTOR
            self.rho_max = max(self.rho_max, start_rho)
            st.R, st.lam, st.rho = start_R.copy(), start_lam.copy(), start_rho
            self.U, self.V = start_R.copy(), start_R.copy()

    def _sweeps(self):
        """ADMM sweeps; returns how they ended (FAILED: the iterates diverged)."""
        st, op, tol = self.state, self.op, self.settings.tol
        cap = self.rho_max
        ceiling = RHO_CEILING_FACTOR * max(self.settings.lorads.rho_max, cap)
        st.rho = min(st.rho, cap)
        window: deque[float] = deque(maxlen=10)
        previous_mean = math.inf
        start_pinf = None
        pinf = math.inf
        best_gap, since_best_gap = math.inf, 0
        # a CG convergence check reads a value back, which off the host waits for the device's queued work
        check_every = 1 if self.backend.on_host else 4
        for _ in range(self.max_sweeps):
            shift = -st.lam - st.rho * op.b  # S = s C + A*(shift)
            cg_tol = max(min(self.cg_factor * pinf, 1e-8), 1e-14)
            self.U = self._solve_factor(shift, self.V, self.U, cg_tol, check_every)
            self.V = self._solve_factor(shift, self.U, self.V, cg_tol, check_every)
            self.kernels.average(self.U, self.V, out=st.R)  # in place: no n x r temporaries
            st.Avals = op.constraints(op.sample(st.R))
            st.objective = float(op.objective(st.R))
            residual = st.Avals - op.b
            residual_norm = op.residual_norm(residual)
            st.lam = st.lam - st.rho * residual
            self.sweeps += 1
            progress = Progress.measure("ADMM", self.sweeps, residual_norm, st.objective,
                                        st.dual_objective(op.b), self.norms, st.rho, st.ranks)
            pinf = progress.primal_infeasibility
            yield progress
            if start_pinf is None:
                start_pinf = max(progress.primal_infeasibility_inf, tol)
            if not progress.finite or progress.primal_infeasibility_inf > DIVERGENCE_FACTOR * start_pinf:
                return PhaseOutcome.FAILED
            # the first run stops on feasibility alone (LoRADS: the driver then measures and polishes);
            # both runs stop once the reported primal error and the gap are within tol
            done = progress.primal_infeasibility <= tol and progress.gap <= tol
            if not self.reopt:
                done = done or progress.primal_infeasibility_inf <= tol
            if done:
                return PhaseOutcome.CONVERGED
            # Feasible but the gap no longer improves: the multipliers drift (each step multiplies a tiny
            # residual by a large rho), so more sweeps only hurt; the driver measures and polishes.
            best_gap, since_best_gap = (progress.gap, 0) if progress.gap < best_gap else (best_gap, since_best_gap + 1)
            if progress.primal_infeasibility <= tol and since_best_gap >= GAP_PATIENCE:
                return PhaseOutcome.STALLED
            window.append(progress.primal_infeasibility_inf)
            if self.sweeps % RHO_EVERY == 0:
                st.rho = min(st.rho * RHO_GROWTH, cap)
            if st.rho >= cap and self.sweeps % STAGNATION_WINDOW == 0 and progress.primal_infeasibility_inf > tol:
                mean = sum(window) / len(window)
                if mean >= STAGNATION_RATIO * previous_mean:
                    cap = min(cap * RHO_GROWTH ** 4, ceiling)
                    st.rho = cap
                previous_mean = mean
        return PhaseOutcome.BUDGET_SPENT
