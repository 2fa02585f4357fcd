"""DIMACS errors and the smallest eigenvalues of the dual slack C - A*(lambda), on the active backend.

The three errors reported in every ``Result`` (the cuLoRADS paper's err1, err2, err3; norms as in
the LoRADS code, ||v||_1 = sum of absolute entries, over all entries of the full symmetric C):

- primal infeasibility  ||A(X) - b||_2 / (1 + ||b||_1);
- dual infeasibility    (sum_k max(0, -lambda_min(S_k)) + sum_j max(0, -s_j)) / (1 + ||C||_1),
  with S_k = C_k - sum_i lambda_i A_ik and s = c_lp - A_lp' lambda;
- gap                   |<C,X> - b'lambda| / (1 + |<C,X>| + |b'lambda|).

Dual infeasibility needs lambda_min of every S_k: small blocks are made dense and solved by ``eigh`` (in batches,
or on the host for the smallest eigenpair alone where that is cheaper); large ones run the thick-restarted Lanczos
iteration of ``linalg/krylov.py`` on the device, without a host copy of the matrix. Blocks of a few hundred rows,
given the primal factor, first try Lanczos deflated against the factor's near-invariant Ritz vectors, with a rigorous
bound for what the deflation leaves out.
The first two errors' norms and the gap live in ``certify/measures.py``.
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
import scipy.linalg

from cvxpy_culorads.backends.backend import kernels_for
from cvxpy_culorads.backends.memory import DENSE_LIMIT, deflation_fits
from cvxpy_culorads.certify.measures import ProblemNorms
from cvxpy_culorads.linalg.krylov import (
    LANCZOS_CYCLES,
    LANCZOS_STEPS,
    conjugate_gradient,
    lanczos_cycle_steps,
    lanczos_smallest,
)
from cvxpy_culorads.operators.compressed import gershgorin_radii, symmetric_times

__all__ = ["Eigenpair", "dense_rounding", "dual_infeasibility", "smallest_eigenpairs", "stationary_multipliers",
           "farkas_violations", "is_primal_ray"]


class Eigenpair(NamedTuple):
    """The smallest eigenvalue of a block as found (a Ritz value), its unit vector (a device array), and the
    residual ||S v - value v|| (for a dense decomposition, a bound on its rounding error; for a deflated solve,
    value less the bound of :func:`_deflated_eigenpair`): some eigenvalue lies within ``residual`` of ``value``, so
    ``lower`` = value - residual is the lower estimate a certificate uses."""

    value: float
    vector: object
    residual: float

    @property
    def lower(self) -> float:
        return self.value - self.residual


def dual_infeasibility(op, lam, norms: ProblemNorms, accuracy, seed: int = 0, guesses=None, deadline: float = math.inf,
                       factor=None, failing=None) -> tuple[float, list[Eigenpair], np.ndarray]:
    """(dual infeasibility, an :class:`Eigenpair` per PSD block, the nonnegative variables' slacks c_lp - A_lp'lambda)
    of the multipliers ``lam``; Lanczos stops once its Ritz residual is below ``accuracy`` (one number, or one per
    block); ``guesses`` are start vectors per block (the eigenvectors of a nearby slack, e.g. of the previous
    evaluation), or None; Lanczos also stops at ``deadline`` (a ``time.perf_counter`` value). ``factor``: the
    factor R of the primal point, whose blocks' ranges the eigenvalue problems are deflated against, or None;
    ``failing``: see :func:`smallest_eigenpairs`."""
    slack = op.slack_matrix(lam)
    layout = op.layout
    subspaces = None if factor is None else [factor[start:start + n] for start, n in zip(layout.offsets, layout.sizes)]
    pairs = smallest_eigenpairs(slack, layout, op.backend, accuracy=accuracy, seed=seed, guesses=guesses,
                                deadline=deadline, subspaces=subspaces, failing=failing)
    lp = _lp_slacks(slack, op.layout, op.backend)
    violation = sum(max(0.0, -pair.value) for pair in pairs) + float(np.maximum(-lp, 0.0).sum())
    return violation / (1.0 + norms.C_1), pairs, lp


def stationary_multipliers(op, R, lam, max_iter: int = 500, deadline: float = math.inf):
    """The multipliers that best satisfy stationarity (C - A*(lambda)) R = 0 at the factor R.

    Least squares over lambda by CG on the normal equations J*J lambda = J*(C R), J(lambda) = A*(lambda) R,
    warm-started at ``lam``. At an optimal X = R R' the true multipliers solve it exactly, so this
    removes the error that the multiplier updates leave behind. It matters most for nonnegative
    variables near zero: x_j = r_j^2 has a vanishing gradient at r_j = 0, so the iterations barely see
    a slightly negative c_j - a_j'lambda there, while the least squares ignores such rows (weight r_j^2).
    """
    rhs = op.constraints(op.sample(op.objective_times(R), R))

    def normal(y):
        return op.constraints(op.sample(op.adjoint_times(op.adjoint_data(y), R), R))

    refined, _ = conjugate_gradient(normal, rhs, lam.copy(), 1e-14, op.backend, max_iter=max_iter, deadline=deadline)
    return refined


def _lp_slacks(slack, layout, backend) -> np.ndarray:
    """c_lp - A_lp' lambda: the diagonal of the dual slack at the nonnegative rows."""
    if not layout.n_lp:
        return np.zeros(0)
    return backend.to_host(slack[layout.lp_offset:, layout.lp_offset:].diagonal())


def smallest_eigenpairs(matrix, layout, backend, accuracy, seed: int = 0, guesses=None,
                        deadline: float = math.inf, subspaces=None, failing=None) -> list[Eigenpair]:
    """The :class:`Eigenpair` of the smallest eigenvalue of each PSD block of the block-diagonal ``matrix``;
    ``accuracy``: the Ritz residual at which the iterative solver stops (one number, or one per block);
    ``guesses``: an optional start vector (or None) per block for the iterative solver; ``deadline``: when the
    iterative solver stops whatever its residual; ``subspaces``: per block an n_k x r_k array (or None) whose
    range holds eigenvectors of the smallest eigenvalues: blocks of the orders ``DEFLATION_MIN_ORDER`` to
    ``DENSE_LIMIT`` try a Lanczos run deflated against it (:func:`_deflated_eigenpair`) before a dense ``eigh``,
    and larger blocks run Lanczos cycles as long as its width r_k needs (``krylov.lanczos_cycle_steps``);
    ``failing``: per block the value below which lambda_min fails the caller's test, or None: a plain Lanczos run
    stops, before its residual is down to ``accuracy``, once its Ritz value (an upper estimate) is below it with
    a residual of at most ``krylov.DECIDED_RESIDUAL_SHARE`` times its size. (A lower estimate that already
    serves is no reason to stop: with a large residual the Krylov space may not yet have seen lambda_min.)

    A Ritz residual bounds the distance to *some* eigenvalue; only a converged run makes that one the smallest
    (with the random part of the start, ``krylov.GUESS_NOISE``). A run whose cycles ran out has still built a
    Krylov space of thousands of vectors, and its Ritz value less its (larger) residual is the same kind of lower
    estimate; a run cut short by the deadline may have built a few vectors only, and its pair's ``lower`` is then
    Gershgorin's bound, which holds regardless. (Treating cycle-limited runs like cut ones made snapshots fail on a
    Gershgorin bound and lengthened phase I: decision record "certified-criterion".)"""
    xp = backend.xp
    accuracies = np.broadcast_to(np.asarray(accuracy, dtype=float), (len(layout.sizes),))
    result: dict[int, Eigenpair] = {}
    by_size: dict[int, list[int]] = {}
    for k, n in enumerate(layout.sizes):
        guess = guesses[k] if guesses is not None else None
        subspace = subspaces[k] if subspaces is not None else None
        pair = None
        if subspace is not None and DEFLATION_MIN_ORDER < n <= DENSE_LIMIT:
            pair = _deflated_eigenpair(_block(matrix, layout, k), subspace, backend, float(accuracies[k]), seed,
                                       guess, deadline)
        if pair is not None:
            result[k] = pair
        elif n <= DENSE_LIMIT:
            by_size.setdefault(n, []).append(k)
        else:
            block = _block(matrix, layout, k)
            fails_below = -math.inf if failing is None else failing[k]
            # cycles as long as the factor's rank needs, as many more of them as the same budget of steps allows
            steps = LANCZOS_STEPS if subspace is None else lanczos_cycle_steps(subspace.shape[1])
            cycles = math.ceil(LANCZOS_STEPS * LANCZOS_CYCLES / steps)
            value, vector, residual = lanczos_smallest(block, n, backend, float(accuracies[k]), seed, guess,
                                                       steps=steps, cycles=cycles, deadline=deadline,
                                                       fails_below=fails_below)
            if residual > accuracies[k] and time.perf_counter() >= deadline:
                residual = max(residual, value - _gershgorin_lower(block, backend))
            result[k] = Eigenpair(value, vector, residual)
    if by_size and time.perf_counter() >= deadline:  # no dense decomposition past the deadline: Gershgorin's bound
        for ks in by_size.values():
            result.update((k, _rayleigh_pair(_block(matrix, layout, k), backend, guesses[k] if guesses else None))
                          for k in ks)
        by_size = {}
    for n, ks in by_size.items():
        values, vectors, norms = _dense_smallest(xp.stack([_block(matrix, layout, k).toarray() for k in ks]), backend)
        # a backward-stable eigensolver's eigenvalues are exact for a matrix within ~n eps ||S|| of S
        rounding = dense_rounding(n, norms)
        result.update((k, Eigenpair(float(values[i]), vectors[i], float(rounding[i]))) for i, k in enumerate(ks))
    return [result[k] for k in range(len(layout.sizes))]


def _dense_smallest(blocks, backend) -> tuple[np.ndarray, list, np.ndarray]:
    """(the smallest eigenvalue, its unit eigenvector, an upper bound on ||S||_2) of each of the dense symmetric
    ``blocks`` (a b x n x n array). On the host, blocks of order ``SUBSET_MIN_ORDER`` or more get LAPACK's
    eigenvalue-subset driver, which skips the other n - 1 eigenpairs, with the Frobenius norm as the bound on
    ||S||_2; elsewhere one batched ``eigh`` (CuPy has no subset driver)."""
    if backend.on_host and blocks.shape[1] >= SUBSET_MIN_ORDER:
        pairs = [scipy.linalg.eigh(block, subset_by_index=[0, 0]) for block in blocks]
        return (np.array([values[0] for values, _ in pairs]), [vectors[:, 0] for _, vectors in pairs],
                np.linalg.norm(blocks, axis=(1, 2)))
    values, vectors = backend.xp.linalg.eigh(blocks)
    values = backend.to_host(values)
    return values[:, 0], list(vectors[:, :, 0]), np.abs(values).max(axis=1)


DENSE_ROUNDING = 10.0  # safety factor on n eps ||S||_2 for the eigenvalues of a dense decomposition


def dense_rounding(n: int, norms):
    """The error the eigenvalues of a dense decomposition of order-n matrices carry, DENSE_ROUNDING n eps ||S||_2, for
    ``norms`` upper bounds on their ||S||_2: what the certificate adds to each block's bound."""
    return DENSE_ROUNDING * n * np.finfo(float).eps * norms

# below this order many small blocks are faster through one batched decomposition (decision record
# "certificate-schedule")
SUBSET_MIN_ORDER = 32
# Blocks of orders between these that would get a dense eigh are deflated against the primal factor's range
# first (a deflated Lanczos run is cheaper than the dense eigh there); larger blocks are not: there a plain Lanczos
# run is cheap next to a failed deflated one, and the bound's allowed loss (below) costs optimisation steps (decision
# record "certificate-deflation-range"). The range must leave most of the block outside.
DEFLATION_MIN_ORDER, DEFLATION_MAX_SHARE = 200, 0.5
# the accuracy the callers ask for is a tenth of what their measure resolves (``Run.evaluate``, ``solver/run.py``)
DEFLATION_LOSS = 5.0
DEFLATION_CYCLES = 3  # restarts a deflated run may take before the undeflated problem is solved instead
RANGE_CUTOFF = 1e-6  # directions of the factor whose singular value is below this share of the largest are dropped


def _deflated_eigenpair(block, factor, backend, accuracy: float, seed: int, guess, deadline: float):
    """The :class:`Eigenpair` of lambda_min of the symmetric ``block`` S, deflated against Ritz vectors of S in the
    range of ``factor``, or None when that range is empty, too large or would not fit in device memory.

    With Q orthonormal columns, H = Q'SQ and E = SQ - QH (so ||E||_2 = ||Q_perp' S Q||_2), every unit
    x = Q u + Q_perp w has x'Sx >= lambda_min(H)|u|^2 - 2||E|| |u||w| + lambda_min(Q_perp' S Q_perp)|w|^2, so
    lambda_min(S) >= the smaller eigenvalue of [[a, e], [e, c]] for lower estimates a of lambda_min(H), c of the
    complement's (Lanczos on P S P, ``krylov.lanczos_smallest``) and e >= ||E||_2. Near an optimum S R ~ 0: the
    Ritz vectors of S in range(R) are near-eigenvectors of S's cluster of near-zero eigenvalues, the complement's
    spectrum is bounded away from zero, and the bound loses only ~e^2 / (c - a), where a plain Lanczos run would
    have to resolve the whole cluster. Q keeps the Ritz vectors of small residual only (:func:`_near_invariant`):
    a column of R that is still small (one just seeded by an escape) is no near-eigenvector, and its residual
    would spoil e. The bound may lose ``DEFLATION_LOSS`` times ``accuracy`` (the Ritz residual a plain run stops
    at) against min(a, 0): the Lanczos run stops as soon as its lower estimate c makes it so.

    Where the cluster of small eigenvalues is larger than range(R) (G67 at rank 19) the Ritz residuals, and so e,
    stay above what the bound can afford: when the run has not converged within ``DEFLATION_CYCLES``, or the bound
    lies more than that loss below min(0, smallest Ritz value), the answer is None and the caller solves the
    undeflated problem."""
    xp = backend.xp
    n = block.shape[0]
    Q = _orthonormal_range(factor, backend)
    if Q.shape[1] == 0 or Q.shape[1] > DEFLATION_MAX_SHARE * n or not deflation_fits(backend, n, Q.shape[1]):
        return None
    SQ = symmetric_times(kernels_for(backend), block, Q)
    H = backend.to_host(Q.T @ SQ)
    ritz_values, ritz_vectors = np.linalg.eigh(0.5 * (H + H.T))
    residual_gram = backend.to_host(SQ.T @ SQ) - H.T @ H  # E'E = (SQ)'SQ - H'H, as Q'SQ = H
    del SQ
    keep = _near_invariant(ritz_values, ritz_vectors, residual_gram)
    values, vectors = ritz_values[keep], ritz_vectors[:, keep]
    kept_gram = vectors.T @ residual_gram @ vectors
    Q = xp.ascontiguousarray(Q @ xp.asarray(vectors))
    # rounding: of the eigenvalues of H (q eps ||H||), and of E'E formed as a difference (q eps ||SQ||_F^2)
    unit_rounding = DENSE_ROUNDING * Q.shape[1] * np.finfo(float).eps
    inside = float(values[0]) - unit_rounding * float(np.abs(ritz_values).max())
    coupling_squared = np.linalg.eigvalsh(kept_gram)[-1] + unit_rounding * (np.trace(kept_gram) + values @ values)
    coupling = math.sqrt(max(float(coupling_squared), 0.0))
    # the complement's lower estimate c that makes the 2 x 2 bound >= t = min(a, 0) - loss: (a - t)(c - t) >= e^2
    loss = DEFLATION_LOSS * accuracy
    target = min(inside, 0.0) - loss
    enough = target + coupling ** 2 / max(inside - target, np.finfo(float).tiny)  # accuracy 0: no loss allowed
    # a Ritz value below -10 accuracy already fails the caller's test: a bound within twice it serves as well;
    # unless H's does, a complement's Ritz value between that and ``enough`` can serve neither way
    failing = -10.0 * accuracy
    useless = (failing, enough) if inside >= failing else (math.inf, math.inf)
    theta, vector, residual = lanczos_smallest(block, n, backend, accuracy, seed, guess, deadline=deadline,
                                               deflate=Q, enough=enough, cycles=DEFLATION_CYCLES,
                                               give_up_between=useless)
    complement = theta - residual
    if residual > accuracy and complement < enough:
        return None
    bound = 0.5 * (inside + complement) - math.hypot(0.5 * (inside - complement), coupling)
    if values[0] < theta:
        theta, vector = float(values[0]), Q[:, 0].copy()
    allowed = -theta if theta < failing else loss
    return Eigenpair(theta, vector, theta - bound) if bound >= min(theta, 0.0) - allowed else None


def _near_invariant(values: np.ndarray, vectors: np.ndarray, residual_gram: np.ndarray) -> np.ndarray:
    """Which Ritz pairs (``values``, ``vectors`` of H, with E'E = ``residual_gram``) to deflate: taken in order of
    their residual norms, the leading set whose estimated bound min(a, c) - e^2 / (c - a) is largest, with a the
    set's smallest Ritz value, c the smallest Ritz value left out (the largest when none is), and e^2 the sum of
    the set's squared residuals (an upper estimate of ||E V||_2^2)."""
    residuals = np.einsum("ij,ik,kj->j", vectors, residual_gram, vectors).clip(min=0.0)
    order = np.argsort(residuals)
    coupling = np.cumsum(residuals[order])
    inside = np.minimum.accumulate(values[order])
    outside = np.append(np.minimum.accumulate(values[order][::-1])[::-1][1:], values.max())
    separation = np.maximum(outside - inside, np.finfo(float).tiny)
    with np.errstate(over="ignore"):  # a coupling over a tiny separation: that set's estimate is -inf
        estimate = np.minimum(inside, outside) - coupling / separation
    keep = np.zeros(values.size, dtype=bool)
    keep[order[:int(np.argmax(estimate)) + 1]] = True
    return keep


def _orthonormal_range(factor, backend):
    """An orthonormal basis (n x q, C-ordered) of the range of the n x r ``factor``, without the directions whose
    singular value is below ``RANGE_CUTOFF`` times the largest: an eigen-decomposition of the Gram matrix R'R gives
    the directions, then a QR factorisation makes the basis orthonormal to rounding."""
    xp = backend.xp
    values, vectors = np.linalg.eigh(backend.to_host(factor.T @ factor))
    if not values.size or not values[-1] > 0.0:
        return xp.zeros((factor.shape[0], 0))
    keep = values > RANGE_CUTOFF ** 2 * values[-1]
    scaled = factor @ xp.asarray(vectors[:, keep] / np.sqrt(values[keep]))
    return xp.ascontiguousarray(xp.linalg.qr(scaled)[0])


def _gershgorin_lower(matrix, backend) -> float:
    """min_i (S_ii - sum_{j != i} |S_ij|) of a sparse symmetric matrix: a lower bound on its eigenvalues."""
    if hasattr(matrix, "gershgorin_lower"):  # a LowRankUpdate or a sharded matrix
        return matrix.gershgorin_lower()
    return float(backend.xp.min(matrix.diagonal() - gershgorin_radii(matrix, backend.xp)))


def _rayleigh_pair(block, backend, guess) -> Eigenpair:
    """A pair that costs one product with ``block``: the Rayleigh quotient of ``guess`` (or of the all-ones vector),
    an upper estimate of lambda_min, with Gershgorin's bound as its lower estimate."""
    xp, n = backend.xp, block.shape[0]
    vector = xp.ones(n) if guess is None or guess.shape != (n,) else xp.asarray(guess)
    vector = (vector / xp.linalg.norm(vector))[:, None]
    value = float((vector.T @ symmetric_times(kernels_for(backend), block, vector))[0, 0])
    return Eigenpair(value, vector[:, 0], max(value - _gershgorin_lower(block, backend), 0.0))


def _block(matrix, layout, k: int):
    start, stop = layout.offsets[k], layout.offsets[k] + layout.sizes[k]
    return matrix[start:stop, start:stop]


# ------------------------------------------------------------------ evidence of infeasibility and unboundedness
def farkas_violations(op, direction, accuracy, seed: int = 0,
                      deadline: float = math.inf) -> tuple[list[Eigenpair], np.ndarray]:
    """How far the multiplier direction d is from a Farkas certificate of primal infeasibility: per PSD block the
    :class:`Eigenpair` of lambda_min(-A_k*(d)) (its ``lower`` a lower estimate), and the entries -A_lp' d.

    Every feasible X (A(X) = b, X PSD, x >= 0) has b'd = <A*(d), X> <= sum_k eps_k tr X_k + sigma' x with
    eps_k = max(0, -lambda_min(-A_k*(d))) and sigma = max(0, A_lp' d): when b'd > 0 and the right-hand side cannot
    reach it (eps = 0, or bounded traces), no feasible point exists."""
    matrix = op.adjoint_matrix(direction, weight=-1.0)
    pairs = smallest_eigenpairs(matrix, op.layout, op.backend, accuracy=accuracy, seed=seed, deadline=deadline)
    return pairs, _lp_slacks(matrix, op.layout, op.backend)


def is_primal_ray(objective: float, residual_norm: float, size: float, norms: ProblemNorms, tol: float) -> bool:
    """Whether a point X of ``size`` = tr X + sum x, objective <C, X> and residual ||A(X) - b||_2 is, scaled to
    size one, an approximate primal ray d = X / size: PSD by construction, A(d) = 0 to ``tol`` times the largest
    constraint coefficient and <C, d> <= -``tol`` times the largest objective coefficient. Added to any feasible
    point such a ray lowers the objective without bound: evidence (not proof) that the problem is unbounded."""
    if not (math.isfinite(size) and size > 0.0 and math.isfinite(objective) and math.isfinite(residual_norm)):
        return False
    return residual_norm / size <= tol * norms.A_inf and objective / size <= -tol * max(norms.C_inf, 1e-300)
