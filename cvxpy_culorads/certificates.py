"""DIMACS errors and the smallest eigenvalues of the dual slack C - A*(lambda), on the active backend.

The three errors reported in every ``Result`` (the cuLoRADS paper's err1, err2, err3; norms as in
the LoRADS code, ||v||_1 = sum of absolute entries, over all entries of the full symmetric C):

- primal infeasibility  ||A(X) - b||_2 / (1 + ||b||_1);
- dual infeasibility    (sum_k max(0, -lambda_min(S_k)) + sum_j max(0, -s_j)) / (1 + ||C||_1),
  with S_k = C_k - sum_i lambda_i A_ik and s = c_lp - A_lp' lambda;
- gap                   |<C,X> - b'lambda| / (1 + |<C,X>| + |b'lambda|).

Dual infeasibility needs lambda_min of every S_k: small blocks are made dense and solved in batches
by ``eigh``; large ones run the thick-restarted Lanczos iteration of ``krylov.py`` on the device, without a
host copy of the matrix. The first two errors' norms and the gap live in ``measures.py``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .krylov import conjugate_gradient, lanczos_smallest
from .measures import ProblemNorms

__all__ = ["Eigenpair", "dual_infeasibility", "smallest_eigenpairs", "stationary_multipliers", "farkas_violations",
           "is_primal_ray"]

DENSE_LIMIT = 1000  # blocks up to this order get a dense eigen-decomposition


class Eigenpair(NamedTuple):
    """The smallest eigenvalue of a block as found (a Ritz value), its unit vector (a device array), and the
    residual ||S v - value v|| (for a dense decomposition, a bound on its rounding error): some eigenvalue lies
    within ``residual`` of ``value``, so ``lower`` = value - residual is the lower estimate a certificate uses."""

    value: float
    vector: object
    residual: float

    @property
    def lower(self) -> float:
        return self.value - self.residual


def dual_infeasibility(op, lam, norms: ProblemNorms, accuracy, seed: int = 0, guesses=None,
                       deadline: float = math.inf) -> tuple[float, list[Eigenpair], np.ndarray]:
    """(dual infeasibility, an :class:`Eigenpair` per PSD block, the nonnegative variables' slacks c_lp - A_lp'lambda)
    of the multipliers ``lam``; Lanczos stops once its Ritz residual is below ``accuracy`` (one number, or one per
    block); ``guesses`` are start vectors per block (the eigenvectors of a nearby slack, e.g. of the previous
    evaluation), or None; Lanczos also stops at ``deadline`` (a ``time.perf_counter`` value)."""
    slack = op.slack_matrix(lam)
    pairs = smallest_eigenpairs(slack, op.layout, op.backend, accuracy=accuracy, seed=seed, guesses=guesses,
                                deadline=deadline)
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
                        deadline: float = math.inf) -> list[Eigenpair]:
    """The :class:`Eigenpair` of the smallest eigenvalue of each PSD block of the block-diagonal ``matrix``;
    ``accuracy``: the Ritz residual at which the iterative solver stops (one number, or one per block);
    ``guesses``: an optional start vector (or None) per block for the iterative solver; ``deadline``: when the
    iterative solver stops whatever its residual.

    A Ritz residual bounds the distance to *some* eigenvalue; only a converged run makes that one the smallest
    (with the random part of the start, ``krylov.GUESS_NOISE``). Where Lanczos stopped unconverged (its cycles or
    the deadline ran out) the pair's ``lower`` is Gershgorin's bound instead, which holds regardless."""
    xp = backend.xp
    accuracies = np.broadcast_to(np.asarray(accuracy, dtype=float), (len(layout.sizes),))
    result: dict[int, Eigenpair] = {}
    by_size: dict[int, list[int]] = {}
    for k, n in enumerate(layout.sizes):
        if n <= DENSE_LIMIT:
            by_size.setdefault(n, []).append(k)
        else:
            guess = guesses[k] if guesses is not None else None
            block = _block(matrix, layout, k)
            value, vector, residual = lanczos_smallest(block, n, backend, float(accuracies[k]), seed, guess,
                                                       deadline=deadline)
            if residual > accuracies[k]:
                residual = max(residual, value - _gershgorin_lower(block, backend))
            result[k] = Eigenpair(value, vector, residual)
    for n, ks in by_size.items():
        values, vectors = xp.linalg.eigh(xp.stack([_block(matrix, layout, k).toarray() for k in ks]))
        values = backend.to_host(values)
        # a backward-stable eigensolver's eigenvalues are exact for a matrix within ~n eps ||S|| of S
        rounding = DENSE_ROUNDING * n * np.finfo(float).eps * np.abs(values).max(axis=1)
        result.update((k, Eigenpair(float(values[i, 0]), vectors[i, :, 0], float(rounding[i])))
                      for i, k in enumerate(ks))
    return [result[k] for k in range(len(layout.sizes))]


DENSE_ROUNDING = 10.0  # safety factor on n eps ||S||_2 for the eigenvalues of a dense decomposition


def _gershgorin_lower(matrix, backend) -> float:
    """min_i (S_ii - sum_{j != i} |S_ij|) of a sparse symmetric matrix: a lower bound on its eigenvalues."""
    xp = backend.xp
    absolute = matrix.copy()
    absolute.data = xp.abs(absolute.data)
    diagonal = matrix.diagonal()
    radii = absolute @ xp.ones(matrix.shape[0]) - xp.abs(diagonal)
    return float(xp.min(diagonal - radii))


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
