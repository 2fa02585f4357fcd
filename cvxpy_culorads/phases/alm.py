"""Phase I: the augmented Lagrangian method on the Burer-Monteiro factorisation X = R R'.

For fixed multipliers lambda and penalty rho the phase minimises

    L(R) = s <C, R R'> - lambda'(A(R R') - b) + rho/2 ||A(R R') - b||^2

by L-BFGS, each step with the exact line search: along R + tau D the merit is a quartic in tau
whose coefficients come from one sampled product (sym(R D') and D D' where the constraints act),
the constraint operator and one product C D, so the minimiser is a root of a cubic. A subproblem
ends when the gradient certificate eta = ||grad L||_F / (1 + s ||C||_inf) falls below 0.1 / rho;
then lambda <- lambda - rho (A(X) - b). Subproblems repeat at fixed rho until one is easy (few
steps) or the smoothed certificate keeps moving, then rho doubles; a run of hard subproblems grows
every rank by a factor (the "dynamic rank" of LoRADS). The phase is a generator of ``Progress``
rows, one per L-BFGS step, so the driver owns the loop (time limits, logging); it ends at the switch to ADMM
(the primal infeasibility reaches ``lorads.phase1_tol``, or it and the gap reach ``lorads.phase1_tol`` / 1000, or they
reach the final ``tol`` at a point that solves its subproblem: :meth:`ALMPhase.phase_two_exit`), or when its
outer-iteration budget is spent. Free variables split as x+ - x- (:class:`MirrorPairs`) lose the common part of their
halves at the start and after every subproblem, which the constraints do not see.

On a problem with a constraint a tr X = b (``bounds.FixedTrace``: theta's tr X = 1) the phase keeps that constraint
exact instead: R stays on the sphere ||R||_F^2 = b / a, the gradient and the direction are projected onto its
tangent space (the gradient's normal part goes into the constraint's multiplier, which stationarity determines, so
b'lambda stays a dual objective), and the line search minimises the merit along the retraction
sqrt(u) (R + tau D), u = (b/a) / (b/a + tau^2 ||D||^2), a ratio of polynomials in tau whose stationary points are
the roots of a quintic. Without the sphere the first subproblems (zero multipliers, a small penalty) run off to
points far outside it and take many steps to come back (decision record "trace-sphere"); on it the ALM alone
reaches ``tol``, so the phase runs until the gap and the primal infeasibility are below
``exit_tol`` (the driver tightens it while the certificate fails) and phase II is not used.
"""
from __future__ import annotations

import math

import numpy as np

from cvxpy_culorads.backends.memory import widening_fits
from cvxpy_culorads.operators.compressed import CompressedOperator
from cvxpy_culorads.phases.state import PhaseOutcome, Progress, SolverState

__all__ = ["ALMPhase", "MirrorPairs", "quartic_minimiser", "sphere_minimiser"]

EASY, MEDIUM, HARD = 20, 100, 400  # L-BFGS steps per subproblem that classify its difficulty
RANK_TRIGGER = 15  # accumulated difficulty that grows the ranks
MAX_SUBPROBLEM_STEPS = 800
MAX_OUTER_STEPS = 5000  # L-BFGS steps at one penalty before rho is raised regardless
TAU_MAX = 1e3  # longest step of the line search (the direction is scaled by L-BFGS)
# Every EMA_INTERVAL passes at one penalty, the passes end if the smoothed certificate (weight EMA_WEIGHT)
# moved by more than EMA_THRESHOLD since the last check, as the LoRADS code does: a run of passes whose
# multiplier updates keep moving the certificate goes to a larger penalty instead. (The code's comment
# suggests the opposite reading, leave on stagnation, which let MaxCut oscillate at one penalty: decision record
# "alm-penalty-ema-rule".)
EMA_WEIGHT, EMA_INTERVAL, EMA_THRESHOLD = 0.1, 5, 0.005
LINE_SEARCH_SCALARS = 9  # entries written by kernels.line_search_products
SPHERE_SCALARS = 28  # entries written by kernels.sphere_line_search_products
SPHERE_DECREASE = 0.25  # on the sphere, rho grows when a subproblem cut the primal infeasibility by less than this
PERTURBATION = 1e-2  # relative size of the random move off a critical point that the multiplier updates keep (sphere)
# A mirror pair's smaller half keeps this share of the pair's difference, and at least MIRROR_FLOOR of its own value:
# never zero, where x = r^2 could not grow again when the difference changes sign
MIRROR_KEEP, MIRROR_FLOOR = 1e-2, 1e-6


def quartic_minimiser(a: float, b: float, c: float, d: float, tau_max: float = TAU_MAX) -> float:
    """argmin over [0, tau_max] of a t^4 + b t^3 + c t^2 + d t (the merit change along a direction)."""
    candidates = [0.0, tau_max]
    roots = np.roots([4.0 * a, 3.0 * b, 2.0 * c, d]) if any((a, b, c, d)) else []
    for root in np.atleast_1d(roots):
        if abs(root.imag) <= 1e-8 * max(1.0, abs(root)) and 0.0 < root.real < tau_max:
            candidates.append(float(root.real))
    values = [((a * t + b) * t + c) * t * t + d * t for t in candidates]
    return candidates[int(np.argmin(values))]


def sphere_minimiser(quadratic, quartic, size: float, kappa: float, tau_max: float = TAU_MAX) -> float:
    """argmin over [0, tau_max] of phi(t) = u A(t) + u^2 B(t) with u = size / (size + kappa t^2), A and B the
    polynomials with coefficients ``quadratic`` (3, lowest first) and ``quartic`` (5): the merit along the retraction
    onto the sphere (module docstring). phi = N / w^2 with w = size + kappa t^2 and N = size A w + size^2 B, so its
    stationary points are the roots of N' w - 2 N w'; the values are compared as changes from t = 0, which keeps
    the large constant terms A(0), B(0) out of the differences. The polynomials are formed on plain floats: this
    runs once per step on the host, where NumPy's polynomial helpers took longer than the device's step."""
    A, B = [float(v) for v in quadratic], [float(v) for v in quartic]
    # N = size (A0 size, A1 size, A2 size + A0 kappa, A1 kappa, A2 kappa) + size^2 B
    N = [size * (size * (A[0] + B[0])), size * (size * (A[1] + B[1])),
         size * (size * (A[2] + B[2]) + kappa * A[0]), size * (kappa * A[1] + size * B[3]),
         size * (kappa * A[2] + size * B[4])]
    # N' w - 2 N w' with w = size + kappa t^2, w' = 2 kappa t: coefficient k of t^k (that of t^5 cancels)
    stationary = [size * N[1], 2.0 * size * N[2] - 4.0 * kappa * N[0], 3.0 * (size * N[3] - kappa * N[1]),
                  4.0 * size * N[4] - 2.0 * kappa * N[2], -kappa * N[3]]
    candidates = [0.0, tau_max]
    if any(stationary):
        for root in np.roots(stationary[::-1]):  # highest power first; leading zeros are dropped
            if abs(root.imag) <= 1e-8 * max(1.0, abs(root)) and 0.0 < root.real < tau_max:
                candidates.append(float(root.real))

    def change(t: float) -> float:
        shrink = -kappa * t * t / (size + kappa * t * t)  # u - 1
        u = 1.0 + shrink
        return (u * t * (A[1] + A[2] * t) + shrink * A[0]
                + u * u * t * (B[1] + t * (B[2] + t * (B[3] + t * B[4]))) + shrink * (u + 1.0) * B[0])
    values = [change(t) for t in candidates]
    return candidates[values.index(min(values))]


def _difficulty(rank_flag: int, steps: int) -> int:
    """The accumulated difficulty after a subproblem of ``steps`` L-BFGS steps: reset by an easy one, else raised."""
    return 0 if steps <= EASY else rank_flag + (2 if steps <= MEDIUM else 3 if steps < HARD else 4)


class LBFGS:
    """Limited-memory BFGS direction with H0 = gamma I; everything stays on the device.

    Pairs with too little curvature (y's <= 1e-12 ||s|| ||y||) are given weight zero on the
    device instead of being dropped on the host, so no synchronisation is needed. The recursion
    is one fused operation of the kernel set (``backends/kernels.py``).
    """

    def __init__(self, kernels, memory: int):
        self.kernels, self.memory = kernels, memory
        self.pairs: list[tuple] = []

    def reset(self) -> None:
        self.pairs.clear()

    def push(self, s, y) -> tuple:
        """Adds the pair (s, y); returns the arrays of the pair dropped to make room, or () (see :meth:`_keep`)."""
        return self._keep(self.kernels.lbfgs_pair(s, y))

    def _keep(self, pair) -> tuple:
        """Append the newest pair, dropping the oldest beyond ``memory``: returns the dropped pair's arrays (s, y),
        which nothing here reads any more, so that the caller may reuse their memory, or () when none was dropped."""
        self.pairs.append(pair)
        return self.pairs.pop(0)[:2] if len(self.pairs) > self.memory else ()

    def direction(self, G, products, out=None):
        """-H G (in ``out`` where given); writes (<G, G>, <D, G>) to the 2-vector ``products``."""
        return self.kernels.lbfgs_direction(G, self.pairs, products, out)

    def sphere_direction(self, G, products, X, squares, previous=None, out=None) -> tuple:
        """(D, dropped): D = P_X(-H G), the direction projected onto the tangent space at the rows of X (squared norms
        ``squares``), in the kernel set's fused passes (``Kernels.lbfgs_sphere_direction``), in ``out`` where given;
        writes (<G, G>, <D, G>) to ``products``. ``previous``: the point and gradient (R, G) before the step to X,
        whose memory becomes the newest pair (X - R, G_X - G) within the direction's first pass instead of two passes
        of its own; ``dropped``: the arrays of the pair that made room for it, as :meth:`push` returns them. The pairs
        of this form are plain (s, y) tuples: an L-BFGS uses this or :meth:`direction` with :meth:`push`, not both."""
        dropped = () if previous is None else self._keep(previous)
        D = self.kernels.lbfgs_sphere_direction(G, self.pairs, products, X, squares, update=previous is not None,
                                                out=out)
        return D, dropped


class MirrorPairs:
    """Pairs of scalar rows of the stacked factor (a nonnegative variable, or a PSD block's row that the data touch
    on the diagonal only, so that its entry is x = ||R_i||^2) whose constraint columns are opposite, a_j = -a_i, with
    c_i + c_j >= 0: the halves x+ - x- of a free variable, as SDPA files (the 2-RDM problems' diagonal block) and the
    CVXPY path split one. The constraints see only x_i - x_j, the objective charges x_i + x_j (often by nearly
    nothing), so the ALM's iterates drift along x_i = x_j: on NH2 both halves grew to 5e3 while the rest of X stayed
    below 10, and the subproblems, whose curvature along those rows grew with them, took hundreds of L-BFGS steps
    (decision record "quantum-chemistry-convergence"). :meth:`recentre` takes the common part off both halves: A(X)
    stays, the objective does not grow, the scales come back."""

    def __init__(self, xp, first, second):
        self.xp, self.first, self.second = xp, first, second

    @classmethod
    def of(cls, op) -> MirrorPairs | None:
        """The pairs of a one-device operator without low-rank terms (None when there are none). Columns are matched
        by two random projections, which opposite columns give exactly opposite values (the same sums negated)."""
        if not isinstance(op, CompressedOperator) or op.constraint_terms is not None or op.objective_terms is not None:
            return None
        xp, backend = op.backend.xp, op.backend
        scalar = _lone_diagonal(op.S, xp) & ((xp.diff(op.C.indptr) == 0) | _lone_diagonal(op.C, xp))
        rows = xp.flatnonzero(scalar)
        if rows.size < 2:
            return None
        positions = op.S_gather[op.S.indptr[rows]]
        projections = op.At_raw @ xp.asarray(np.random.default_rng(0).standard_normal((op.m, 2)))
        keys = backend.to_host(projections[positions])
        costs = backend.to_host(op.C.diagonal()[rows])
        halves: dict[tuple, list[int]] = {}
        for index, key in enumerate(map(tuple, keys)):
            if key[0] != 0.0:
                halves.setdefault(key, []).append(index)
        first, second = [], []
        for key, members in halves.items():
            if key[0] > 0.0:
                for i, j in zip(members, halves.get((-key[0], -key[1]), ())):
                    if costs[i] + costs[j] >= 0.0:  # else the problem is unbounded along the pair
                        first.append(i), second.append(j)
        if not first:
            return None
        host_rows = backend.to_host(rows)
        return cls(xp, xp.asarray(host_rows[first]), xp.asarray(host_rows[second]))

    def recentre(self, R) -> None:
        """Take the common part off each pair's halves (in place): x_i - x_j stays, the smaller half keeps
        MIRROR_KEEP of the difference. Rows scale, so R's zero columns stay zero."""
        xp = self.xp
        x_first = (R[self.first] ** 2).sum(axis=1)
        x_second = (R[self.second] ** 2).sum(axis=1)
        common = xp.minimum(x_first, x_second)
        kept = xp.maximum(MIRROR_KEEP * xp.abs(x_first - x_second), MIRROR_FLOOR * common)
        taken = xp.maximum(common - kept, 0.0)
        R[self.first] *= xp.sqrt((x_first - taken) / xp.maximum(x_first, 1e-300))[:, None]
        R[self.second] *= xp.sqrt((x_second - taken) / xp.maximum(x_second, 1e-300))[:, None]


def _lone_diagonal(matrix, xp):
    """Whether each row of a square CSR matrix has one stored entry, on the diagonal."""
    counts = xp.diff(matrix.indptr)
    if not matrix.indices.size:
        return counts < 0
    first = matrix.indices[xp.minimum(matrix.indptr[:-1], matrix.indices.size - 1)]
    return (counts == 1) & (first == xp.arange(matrix.shape[0]))


class ALMPhase:
    """Phase I on a :class:`SolverState`; iterate with ``for progress in phase.run(): ...``."""

    def __init__(self, op, state: SolverState, settings, norms, max_ranks, *, outer_budget: int,
                 rho_factor: float = 2.0, grow_ranks: bool = True, switch_when_feasible: bool = True,
                 sphere=None, exit_tol: float | None = None, switch_tol: float | None = None):
        self.op, self.state, self.settings, self.norms = op, state, settings, norms
        self.backend = op.backend
        self.xp = op.backend.xp
        self.max_ranks = list(max_ranks)
        self.outer_budget = outer_budget
        self.rho_factor = rho_factor
        self.grow_ranks = grow_ranks
        self.switch_when_feasible = switch_when_feasible
        self.sphere = sphere  # a bounds.FixedTrace kept exact, or None
        self.mirror = MirrorPairs.of(op) if sphere is None else None
        self.exit_tol = settings.tol if exit_tol is None else exit_tol  # the sphere's exit: gap and pinf below it
        # the primal infeasibility that hands over to phase II: ``tol`` from a warm start, which often starts below
        # phase1_tol, where phase II's sweeps gain less per step than phase I's (decision record "warm-start")
        self.switch_tol = settings.lorads.phase1_tol if switch_tol is None else switch_tol
        # the trace multiplier's change per unit of the gradient's normal part (``_gradient``), on the host once
        self.normal_to_multiplier = (None if sphere is None else
                                     sphere.size / (2.0 * float(op.backend.to_host(op.b[sphere.constraint]))))
        self.normal = self.xp.empty(1)  # the sphere's normal component of the last projected array (device)
        self.kernels = op.kernels
        self.lbfgs = LBFGS(self.kernels, settings.lorads.lbfgs_memory)
        self.steps = 0
        self.outcome: PhaseOutcome | None = None  # set when the phase ends (CONVERGED: ready for phase II)
        self.exit: str | None = None  # the test that ended it CONVERGED (``phase_two_exit``)
        self.growth_skipped = False  # a rank increase was due but the wider factor would not fit in device memory
        self.G = None
        self.CR = None  # C R, kept up to date along the steps
        self.eta = math.inf
        self.infeasibility = math.inf  # the primal infeasibility of the last step's point

    # ------------------------------------------------------------------ the loop
    def run(self):
        try:
            yield from self._outer_iterations()
            if self.outcome is None:
                self.outcome = PhaseOutcome.BUDGET_SPENT
        finally:  # the phase's n x r work arrays go as soon as it ends: phase II needs the memory (4 GB each, n = 1e8)
            self.G = self.CR = None
            self.lbfgs.reset()

    def _outer_iterations(self):
        if self.sphere is not None:
            yield from self._sphere_outer_iterations()
            return
        st = self.state
        rank_flag, outers_since_rank_change = 0, 0
        self._refresh()
        for _ in range(self.outer_budget):
            outer_steps = passes = 0
            smoothed = checkpoint = self.eta
            while True:
                steps = yield from self._subproblem()
                outer_steps += steps
                if self.outcome is not None:
                    return
                self._update_multipliers()
                passes += 1
                smoothed = EMA_WEIGHT * self.eta + (1.0 - EMA_WEIGHT) * smoothed
                unsettled = False
                if passes % EMA_INTERVAL == 0:
                    unsettled = abs(smoothed - checkpoint) > EMA_THRESHOLD * checkpoint
                    checkpoint = smoothed
                rank_flag = _difficulty(rank_flag, steps)
                converged = self.eta <= 0.1 / st.rho
                rank_trigger = self._wants_growth(rank_flag, outers_since_rank_change) and \
                    self._grown_ranks() is not None
                if steps <= EASY or converged or rank_trigger or unsettled or outer_steps >= MAX_OUTER_STEPS:
                    break
            self._raise_penalty()
            outers_since_rank_change += 1
            if self._grow_if_due(rank_flag, outers_since_rank_change):
                rank_flag, outers_since_rank_change = 0, 0
            if self.outcome is not None:
                return

    def _sphere_outer_iterations(self):
        """The classic penalty rule on the sphere: after each subproblem the multipliers move, and rho grows only
        when the primal infeasibility fell by less than SPHERE_DECREASE. (LoRADS's rule above raises rho after every
        easy subproblem; on the sphere the first ones are all easy, so rho grew at once, to a feasible point with
        <J, X> = 0 that the ill-conditioned subproblems then crawled away from: decision record "trace-sphere".)"""
        rank_flag, outers_since_rank_change = 0, 0
        self._refresh()
        previous, seed = math.inf, self.settings.seed + 1
        for _ in range(self.outer_budget):
            steps = yield from self._subproblem()
            if self.outcome is not None:
                return
            self._update_multipliers()
            rank_flag = _difficulty(rank_flag, steps)
            stalled = self.infeasibility > SPHERE_DECREASE * previous
            if stalled and steps <= 1:
                self._perturb(seed)
                seed += 1
            if stalled:
                self.state.rho *= self.rho_factor
                self.G = self._gradient()
                self._update_eta()
            previous = self.infeasibility
            outers_since_rank_change += 1
            if self._grow_if_due(rank_flag, outers_since_rank_change):
                rank_flag, outers_since_rank_change = 0, 0

    def _perturb(self, seed: int) -> None:
        """Move R by PERTURBATION of its norm in a random direction: a subproblem that ends where it starts while the
        constraints stay violated sits on a critical point the multiplier updates keep critical. On a regular graph
        theta's first subproblems converge to X = 1 1' / n, the top eigenvector of J, which stays stationary for
        multipliers equal on all edges; the penalty then doubles without end (a saddle once they are large; decision
        record "trace-sphere")."""
        st = self.state
        noise = self.op.initial_factor(max(st.ranks), st.ranks, seed)
        st.R += (PERTURBATION * self.kernels.norm(st.R) / self.kernels.norm(noise)) * noise
        self.lbfgs.reset()
        self._refresh()

    def _subproblem(self):
        """L-BFGS on L(., lambda) at fixed rho; yields one Progress per step, returns the step count."""
        self.lbfgs.reset()
        for steps in range(MAX_SUBPROBLEM_STEPS):
            progress, done = self._lbfgs_step()
            yield progress
            if done or self.outcome is not None:
                return steps
        return MAX_SUBPROBLEM_STEPS

    # ------------------------------------------------------------------ one L-BFGS step
    def _lbfgs_step(self) -> tuple[Progress, bool]:
        op, st = self.op, self.state
        rho, s = st.rho, st.c_scale
        count = SPHERE_SCALARS if self.sphere is not None else LINE_SEARCH_SCALARS
        # every scalar of the step (line search, <G,G>, <D,G>, b'lambda) in one device buffer, one transfer
        scalars = self.xp.empty(count + 2)
        while True:
            D = self.lbfgs.direction(self.G, scalars[count:])
            if self.sphere is not None:
                D = self._tangent(D)
            pairs = op.sample_pair(st.R, D)
            AW = op.constraints(pairs)
            CD = op.objective_times(D)
            if self.sphere is not None:
                self.kernels.sphere_line_search_products(AW, st.Avals, op.b, st.lam, st.R, D, CD, scalars[:count])
            else:
                self.kernels.line_search_products(AW, st.Avals, op.b, st.lam, rho, st.R, D, CD, scalars[:count])
            values = self.backend.to_host(scalars)
            gg, dg = float(values[count]), float(values[count + 1])
            if dg < 0 or not self.lbfgs.pairs:
                break
            self.lbfgs.reset()  # not a descent direction: fall back to steepest descent
        if self.sphere is not None:
            line_search = _SphereLineSearch(values[:count], st.objective, rho, s, self.sphere.size)
        else:
            line_search = _LineSearch(values[:count], rho, s)
        self.eta = math.sqrt(gg) / (1.0 + s * self.norms.C_inf)
        self.steps += 1
        progress = self._progress(op.row_scale * math.sqrt(max(line_search.residual_squared, 0.0)),
                                  line_search.b_lam / s)
        self.infeasibility = progress.primal_infeasibility
        if not (progress.finite and math.isfinite(gg + dg) and line_search.finite):
            self.outcome = PhaseOutcome.FAILED
            return progress, True
        self.exit = self.phase_two_exit(progress) if self.switch_when_feasible else None
        if self.exit is not None:
            self.outcome = PhaseOutcome.CONVERGED
            return progress, True
        if self.eta <= 0.1 / rho:
            return progress, True
        tau = line_search.minimiser()
        if tau < 1e-16:
            return progress, True  # no progress along a descent direction: the subproblem is done
        step = self.kernels.advance(st.R, D, tau, st.Avals, AW)
        self.kernels.scale_add(self.CR, 1.0, CD, tau)  # C (R + tau D), without a product with C
        st.objective += 2.0 * tau * line_search.c_rd + tau * tau * line_search.c_dd
        if self.sphere is not None:  # the retraction: R + tau D scaled back onto the sphere
            shrink = line_search.shrink(tau)
            self.kernels.scale_add(step, 1.0, st.R, math.sqrt(shrink) - 1.0)  # the step taken, R_new - R
            st.R *= math.sqrt(shrink)
            self.CR *= math.sqrt(shrink)
            st.Avals *= shrink
            st.objective *= shrink
        G_old = self.G
        self.G = self._gradient()
        self.lbfgs.push(step, self.kernels.scale_add(G_old, -1.0, self.G, 1.0))  # y = G - G_old in G_old's memory
        return progress, False

    # ------------------------------------------------------------------ helpers
    def phase_two_exit(self, progress: Progress) -> str | None:
        """The first of the exits to phase II that ``progress`` passes, by name, or None. LoRADS's two:
        "infeasibility", ||A(X) - b||_2 / (1 + ||b||_inf) <= phase1_tol, and "gap and infeasibility", both the gap
        and ||A(X) - b||_2 / (1 + ||b||_1) <= phase1_tol / 1000; with the large-MaxCut tuning (phase1_tol 10) the
        second fires long before the first, whose threshold does not grow with the number of constraints. A third,
        "tol": the gap and that primal infeasibility already meet the final ``tol`` at a point that solves its
        subproblem (eta <= 0.1 / rho). The first test asks for a residual whose root mean square shrinks like
        1/sqrt(m), so with many constraints (completion) phase I otherwise runs on past the point where only the
        dual certificate is left to check (decision record "objective-apart-and-phase-one-exits"). Without the
        subproblem's test the gap crosses tol by chance, at any penalty: b'lambda jumps at each multiplier update
        while the point stays, and moves with the point within a subproblem; a hand-over at a penalty that small
        lets phase II run away (decision record "completion-phase-two"). On the trace sphere, "sphere": the gap and
        the primal infeasibility within ``exit_tol`` (phase I runs to the end there: module docstring)."""
        tol, final = self.switch_tol, self.settings.tol
        pinf, gap = progress.primal_infeasibility, progress.gap
        if self.sphere is not None:
            return "sphere" if gap <= self.exit_tol and pinf <= self.exit_tol else None
        if progress.primal_infeasibility_inf <= tol:
            return "infeasibility"
        if gap <= 1e-3 * tol and pinf <= 1e-3 * tol:
            return "gap and infeasibility"
        if gap <= final and pinf <= final and self.eta <= 0.1 / self.state.rho:
            return "tol"
        return None

    def _gradient(self):
        """2 (s C + A*(y)) R with y = -lambda + rho (A(X) - b), from the running C R."""
        st, op = self.state, self.op
        y = self.kernels.shifted_residual(st.Avals, op.b, st.lam, st.rho)
        G = op.slack_times(y, st.c_scale, st.R, CV=self.CR, weight=2.0)
        if self.sphere is not None:
            # the normal part <G, R> R / |R|^2 is -2 a delta R for the trace multiplier's change delta (A*(e_k) = a I,
            # a |R|^2 = b_k): moving it into lambda_k leaves the tangent gradient, on the device
            k = self.sphere.constraint
            self.kernels.remove_normal(G, st.R, self.sphere.size, self.normal, st.lam[k:k + 1],
                                       self.normal_to_multiplier)
        return G

    def _tangent(self, Z):
        """Z with its component along R removed, in place (the tangent space of the sphere at R)."""
        return self.kernels.remove_normal(Z, self.state.R, self.sphere.size, self.normal)

    def _refresh(self) -> None:
        """Recompute A(X), C R, <C,X> and the gradient from scratch (start, rank change)."""
        st, op = self.state, self.op
        if self.sphere is not None:  # back onto the sphere (a start, an escape's or a growth's new columns)
            st.R *= math.sqrt(self.sphere.size) / self.kernels.norm(st.R)
        if self.mirror is not None:
            self.mirror.recentre(st.R)
        st.Avals = op.constraints(op.sample(st.R))
        self._refresh_objective()
        self.G = self._gradient()
        self._update_eta()

    def _refresh_objective(self) -> None:
        """C R and <C, R R'> from scratch: the steps update both incrementally, which lets rounding drift."""
        st = self.state
        self.CR = self.op.objective_times(st.R)
        st.objective = self.kernels.inner(st.R, self.CR)

    def _update_eta(self) -> None:
        self.eta = self.kernels.norm(self.G) / (1.0 + self.state.c_scale * self.norms.C_inf)

    def _update_multipliers(self) -> None:
        st = self.state
        st.lam = st.lam - st.rho * (st.Avals - self.op.b)
        if self.mirror is not None:  # A(X) stays: C R and the gradient are recomputed below anyway
            self.mirror.recentre(st.R)
        self._refresh_objective()
        self.G = self._gradient()
        self._update_eta()

    def _raise_penalty(self) -> None:
        """rho <- rho f until the current point is no longer a solution of the next subproblem."""
        st = self.state
        while True:
            slowdowns = sum(st.rho > threshold for threshold in (5e4, 5e6, 5e8))  # as LoRADS does
            st.rho *= self.rho_factor ** (0.25 ** slowdowns)
            self.G = self._gradient()
            self._update_eta()
            if self.eta > 0.1 / st.rho or st.rho > 1e12:
                return

    def _grow_if_due(self, rank_flag: int, outers_since_rank_change: int) -> bool:
        """Grow the ranks when the accumulated difficulty asks for it and the wider factor fits; whether they grew."""
        new_ranks = self._grown_ranks() if self._wants_growth(rank_flag, outers_since_rank_change) else None
        if new_ranks is not None:
            self._grow_ranks(new_ranks)
        return new_ranks is not None

    def _wants_growth(self, rank_flag: int, outers_since_rank_change: int) -> bool:
        return self.grow_ranks and rank_flag >= RANK_TRIGGER and outers_since_rank_change >= 2

    def _grown_ranks(self) -> list[int] | None:
        """Every block's rank times ``lorads.rank_growth`` (up to its bound), or None when no rank can grow or the wider
        factor would not fit in device memory."""
        ranks = self.state.ranks
        growth = self.settings.lorads.rank_growth
        new_ranks = [min(int(math.ceil(growth * r)), r_max) for r, r_max in zip(ranks, self.max_ranks)]
        if new_ranks == ranks:
            return None
        if not widening_fits(self.backend, self.op.layout, max(ranks), max(new_ranks)):
            self.growth_skipped = True
            return None
        return new_ranks

    def _grow_ranks(self, new_ranks: list[int]) -> None:
        st = self.state
        st.R = self.op.widen(st.R, st.ranks, new_ranks, [None] * len(new_ranks))
        st.ranks = new_ranks
        self.lbfgs.reset()
        self._refresh()

    def _progress(self, residual_norm: float, dual_objective: float) -> Progress:
        st = self.state
        return Progress.measure("ALM", self.steps, residual_norm, st.objective, dual_objective, self.norms, st.rho,
                                st.ranks)


class _LineSearch:
    """The quartic merit along R + tau D from ``kernels.line_search_products``' scalars."""

    def __init__(self, values, rho: float, s: float):
        q01, q02, q11, q12, q22, rr, c_rd, c_dd, b_lam = (float(v) for v in values)
        self.residual_squared, self.b_lam, self.c_rd, self.c_dd = rr, b_lam, c_rd, c_dd
        self.coefficients = (0.5 * rho * q22, rho * q12, s * c_dd + 0.5 * rho * q11 - rho * q02,
                             2.0 * s * c_rd - rho * q01)
        self.finite = all(map(math.isfinite, (q01, q02, q11, q12, q22, c_rd, c_dd)))

    def minimiser(self) -> float:
        return quartic_minimiser(*self.coefficients)


class _SphereLineSearch:
    """The merit along the retraction onto the trace sphere from ``kernels.sphere_line_search_products``' scalars:
    with p(t) = a0 + t q1 + t^2 q2 = A((R + t D)(R + t D)') and u = size / (size + kappa t^2) the point's scale,
    L = u (s <C, (R + tD)(R + tD)'> - (lambda + rho b)'p(t)) + u^2 rho/2 |p(t)|^2 + const."""

    LAM, B, A0, Q1, Q2 = range(5)

    def __init__(self, values, objective: float, rho: float, s: float, size: float):
        g = np.asarray(values[:25], dtype=float).reshape(5, 5)
        self.c_rd, self.c_dd, self.kappa = (float(v) for v in values[25:28])
        LAM, B, A0, Q1, Q2 = self.LAM, self.B, self.A0, self.Q1, self.Q2
        self.size = size
        self.residual_squared = g[A0, A0] - 2.0 * g[B, A0] + g[B, B]
        self.b_lam = g[LAM, B]
        shifted = g[LAM] + rho * g[B]  # (lambda + rho b)' (., a0, q1, q2)
        self.quadratic = (s * objective - shifted[A0], 2.0 * s * self.c_rd - shifted[Q1], s * self.c_dd - shifted[Q2])
        self.quartic = 0.5 * rho * np.array([g[A0, A0], 2.0 * g[A0, Q1], g[Q1, Q1] + 2.0 * g[A0, Q2],
                                             2.0 * g[Q1, Q2], g[Q2, Q2]])
        self.finite = bool(np.all(np.isfinite(g))) and all(map(math.isfinite, (self.c_rd, self.c_dd, self.kappa)))

    def minimiser(self) -> float:
        return sphere_minimiser(self.quadratic, self.quartic, self.size, self.kappa)

    def shrink(self, tau: float) -> float:
        """u(tau): the squared scale that brings R + tau D back onto the sphere."""
        return self.size / (self.size + self.kappa * tau * tau)
