"""Krylov methods on the active backend: conjugate gradients and thick-restarted Lanczos.

Both are written against the array namespace (NumPy or CuPy) and take the operator as a function or a
sparse matrix, so the phases (ADMM's factor updates), the certificates (stationary multipliers, the
smallest eigenvalue of the dual slack) and the tests share one implementation. Both stop at a
``deadline`` (a ``time.perf_counter`` value) so that the driver can hold a time limit through them; the
clock is read without synchronising the device, so a run on the GPU may overshoot by the work already
queued (a Lanczos cycle at most, as each cycle ends with a transfer to the host).
"""
from __future__ import annotations

import math
import time

import numpy as np
import scipy.linalg

from cvxpy_culorads.backends.backend import kernels_for
from cvxpy_culorads.backends.memory import KEPT_RITZ_SHARE, affordable_lanczos_steps
from cvxpy_culorads.operators.compressed import prepare_products, symmetric_times

__all__ = ["conjugate_gradient", "lanczos_smallest", "lanczos_cycle_steps"]

# the iteration cap, and the iterations between restarts: a restart discards the Krylov space, so restarts are far
# apart (decision record "objective-apart-and-phase-one-exits")
CG_MAX_ITER, CG_RESTART = 800, 200
LANCZOS_STEPS, LANCZOS_CYCLES = 60, 40  # the longest cycle, and the cycles a run may take at that length
CLUSTER_MARGIN = 5  # Ritz vectors a restart keeps beyond the dimension of the slack's bottom cluster


def lanczos_cycle_steps(rank: int) -> int:
    """The length of a Lanczos cycle for the dual slack of a block whose factor has ``rank`` columns: long enough
    that the Ritz vectors a restart keeps (a ``KEPT_RITZ_SHARE``-th) span the slack's bottom cluster, whose
    dimension near a low-rank optimum is the rank (the slack's null space), with ``CLUSTER_MARGIN`` more; no longer,
    up to ``LANCZOS_STEPS``. Full reorthogonalisation makes step j of a cycle pass over j basis vectors, so a cycle
    longer than the cluster needs costs passes without saving steps (decision record "sharded-certificates")."""
    return min(LANCZOS_STEPS, KEPT_RITZ_SHARE * (rank + CLUSTER_MARGIN))


def conjugate_gradient(apply, rhs, x, tol: float, backend, check_every: int = 1, max_iter: int = CG_MAX_ITER,
                       precondition=None, deadline: float = math.inf):
    """Solve apply(x) = rhs from the start ``x`` (overwritten) until ||r||_2 <= tol ||rhs||_1, preconditioned by
    the function ``precondition`` (an approximate inverse of ``apply``) when given.

    Residuals are recomputed and directions restarted every ``CG_RESTART`` iterations (cheap
    insurance against drift); convergence is read back to the host every ``check_every`` iterations
    only, and the clock is compared with ``deadline`` then as well. Returns (x, iterations).
    """
    kernels = kernels_for(backend)
    threshold = tol * kernels.abs_sum(rhs)
    iterations = 0
    while iterations < max_iter:
        r = rhs - apply(x)
        z = r if precondition is None else precondition(r)
        p = z.copy()
        rz = kernels.dot(r, z)
        for inner in range(CG_RESTART):
            if (iterations + inner) % check_every == 0:
                rr = rz if precondition is None else kernels.dot(r, r)
                if math.sqrt(float(rr)) <= threshold or time.perf_counter() >= deadline:
                    return x, iterations + inner
            Ap = apply(p)
            kernels.cg_step(x, r, p, Ap, rz, kernels.dot(p, Ap))
            z = r if precondition is None else precondition(r)
            rz_new = kernels.dot(r, z)
            kernels.cg_direction(p, z, rz_new, rz)
            rz = rz_new
        iterations += CG_RESTART
    return x, iterations


# weight of the random part of a warm start. The guess (the last slack's eigenvector) can be almost orthogonal to
# the new smallest eigenvector when eigenvalues cluster, as they do near a MaxCut optimum; with a small random part
# Lanczos can converge to the second eigenvalue with a small residual, and value - residual is then no lower
# estimate. An equal random part keeps a component of order 1/sqrt(2n) along every eigenvector, which Lanczos
# amplifies, at the price of a few more steps (decision record "lanczos-stopping-rules").
GUESS_NOISE = 1.0
# A run stopped below ``fails_below`` reports a lower estimate within three times its Ritz value: enough to rank
# failing points and to judge whether polishing still pays. Where the slack's spectrum is dense near zero, as at
# a MaxCut optimum, the value converges much sooner than the residual (decision record "lanczos-stopping-rules").
DECIDED_RESIDUAL_SHARE = 2.0
# A run whose cycles run out undecided (its Ritz value passes the caller's test, the value less its residual does
# not) may take this many times its cycles: the test then hangs on the eigensolver's accuracy, not on the point, and
# the extra cycles cost less than another run of the phase to a tighter target (decision record
# "lanczos-stopping-rules").
UNDECIDED_CYCLES_FACTOR = 3


def lanczos_smallest(matrix, n: int, backend, accuracy: float, seed: int, guess=None, steps: int = LANCZOS_STEPS,
                     cycles: int = LANCZOS_CYCLES, deadline: float = math.inf, deflate=None, enough: float = math.inf,
                     give_up_between: tuple[float, float] = (math.inf, math.inf),
                     fails_below: float = -math.inf) -> tuple:
    """(smallest Ritz value, its Ritz vector, the Ritz residual) of a symmetric sparse ``matrix`` by
    thick-restarted Lanczos, from ``guess`` plus an equal random part when given, else from a random vector.

    With ``deflate``, an n x q array with orthonormal columns Q, it solves the same problem for the matrix
    restricted to the orthogonal complement of range(Q), P S P with P = I - Q Q': every basis vector is kept
    orthogonal to Q. It also stops once the Ritz value minus its residual is at least ``enough`` (a lower
    estimate that already serves the caller), and, unconverged, once a cycle ends with the Ritz value inside
    ``give_up_between`` = (low, high) (as the Ritz value only falls, a caller who needs it at least ``high`` or
    below ``low`` knows then that waiting is unlikely to pay), and once the Ritz value is below ``fails_below``
    with a residual at most ``DECIDED_RESIDUAL_SHARE`` times its size (a caller whose test needs a lower estimate
    of at least ``fails_below`` knows then that it fails, and the value is known to within that share). Where the
    cycles run out with the test undecided (Ritz value at least ``fails_below``, the value less its residual below
    it), it goes on, up to ``UNDECIDED_CYCLES_FACTOR`` times ``cycles``.

    Each cycle extends an orthonormal basis to ``steps`` vectors (full reorthogonalisation, so no spurious
    copies) and records the projection of the matrix column by column (the Gram-Schmidt coefficients), then
    solves the small projected problem on the host. It stops once the Ritz residual of the smallest Ritz
    value, ||S y - theta y||, is below ``accuracy`` (or the clock has passed ``deadline``: the residual then
    says how far the answer is from converged); otherwise it restarts from the ``steps // 3`` smallest
    Ritz vectors and the next basis vector (thick restart). Keeping one Ritz vector only, as a plain
    restart does, stalls when eigenvalues cluster at the bottom, as they do at a MaxCut optimum (the dual
    slack's null space has the dimension of the rank; decision record "lanczos-stopping-rules"). The
    coefficients stay on the device until the cycle ends (one transfer per cycle, not per step); a
    breakdown (beta ~ 0) is found then, and the steps after it are discarded. A cycle's steps go through
    ``kernels.lanczos_cycle``, which on the GPU records them once as a CUDA graph and replays it: the same
    arrays every cycle, so the projection is one array zeroed per cycle.
    """
    xp, kernels = backend.xp, kernels_for(backend)
    dimension = n - (0 if deflate is None else deflate.shape[1])
    steps = min(steps, dimension - 1, affordable_lanczos_steps(backend, n)) if dimension > 1 else 1

    deflate_rows = None if deflate is None else xp.ascontiguousarray(deflate.T)

    def complement(w):
        return w if deflate_rows is None else kernels.project_out(deflate_rows, w)

    v = complement(kernels.random_vector(n, seed))
    v /= kernels.norm(v)
    if guess is not None and kernels.all_finite(guess) and kernels.norm(guess) > 0.0:
        v = guess / kernels.norm(guess) + GUESS_NOISE * v
        v = complement(complement(v))
        v /= kernels.norm(v)
    basis = kernels.vectors(steps + 1, n)
    basis[0] = v
    projection = xp.empty((steps + 1, steps))  # column j: basis' S basis[j]; below it, the norm beta_j

    def step(j):
        w = complement(symmetric_times(kernels, matrix, basis[j]))  # on the GPU no cuSPARSE set-up per product
        kernels.lanczos_extend(basis, j, w, projection, complement)

    prepare_products(kernels, matrix)
    kept, ritz_values, recorded, cycle = 0, None, {}, 0
    while True:
        cycle += 1
        projection.fill(0.0)
        if kept:
            projection[np.arange(kept), np.arange(kept)] = xp.asarray(ritz_values[:kept])
        # the steps of this cycle that ran: fewer when the deadline cut it short
        last = kernels.lanczos_cycle(step, kept, steps, n, deadline, recorded)
        coefficients = backend.to_host(projection)
        betas = np.diagonal(coefficients, -1)[:last]
        small = np.flatnonzero(~(betas[kept:] > 1e-14 * np.maximum(1.0, np.abs(np.diagonal(coefficients)[kept:last]))))
        size = kept + int(small[0]) + 1 if small.size else last
        upper = np.triu(coefficients[:size, :size])
        values, vectors = scipy.linalg.eigh(upper + np.triu(upper, 1).T)
        theta = float(values[0])
        residual = 0.0 if small.size else abs(coefficients[size, size - 1] * vectors[size - 1, 0])  # 0: invariant
        hopeless = give_up_between[0] <= theta < give_up_between[1]
        failed = theta < fails_below and residual <= DECIDED_RESIDUAL_SHARE * abs(theta)
        done = residual <= accuracy or theta - residual >= enough or hopeless or failed or small.size or last < steps
        undecided = theta - residual < fails_below <= theta
        out_of_cycles = cycle >= (UNDECIDED_CYCLES_FACTOR * cycles if undecided else cycles)
        if done or out_of_cycles or time.perf_counter() >= deadline:
            v = kernels.combine(vectors[:, 0], basis[:size])
            return theta, v / kernels.norm(v), float(residual)
        kept = max(1, min(steps // KEPT_RITZ_SHARE, size - 1))
        ritz = kernels.combine(vectors[:, :kept].T, basis[:size])
        basis[kept] = basis[size]  # the next Krylov vector, orthogonal to all of them
        basis[:kept] = ritz
        ritz_values = values

