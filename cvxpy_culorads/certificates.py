"""DIMACS errors and the smallest eigenvalues of the dual slack C - A*(lambda), on the active backend.

The three errors reported in every ``Result`` (the cuLoRADS paper's err1, err2, err3; norms as in
the LoRADS code, ||v||_1 = sum of absolute entries, over all entries of the full symmetric C):

- primal infeasibility  ||A(X) - b||_2 / (1 + ||b||_1);
- dual infeasibility    (sum_k max(0, -lambda_min(S_k)) + sum_j max(0, -s_j)) / (1 + ||C||_1),
  with S_k = C_k - sum_i lambda_i A_ik and s = c_lp - A_lp' lambda;
- gap                   |<C,X> - b'lambda| / (1 + |<C,X>| + |b'lambda|).

Dual infeasibility needs lambda_min of every S_k: small blocks are made dense and solved in batches
by ``eigvalsh``; large ones run a restarted Lanczos iteration with full reorthogonalisation inside
each cycle, written against the array namespace so that it runs on the GPU without a host copy of
the matrix (only the small tridiagonal problems go to the host).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.linalg

from .kernels import kernels_for

__all__ = ["ProblemNorms", "Eigenpair", "primal_infeasibility", "relative_gap", "dual_infeasibility",
           "smallest_eigenpairs", "stationary_multipliers"]

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


@dataclass(frozen=True)
class ProblemNorms:
    b_1: float
    b_2: float
    b_inf: float
    C_1: float
    C_inf: float

    @classmethod
    def of(cls, problem) -> "ProblemNorms":
        return cls(problem.b_norm_1, problem.b_norm_2, problem.b_norm_inf, problem.C_norm_1, problem.C_norm_inf)


def primal_infeasibility(residual_norm: float, norms: ProblemNorms) -> float:
    return float(residual_norm) / (1.0 + norms.b_1)


def relative_gap(primal: float, dual: float) -> float:
    return abs(primal - dual) / (1.0 + abs(primal) + abs(dual))


def dual_infeasibility(op, lam, norms: ProblemNorms, accuracy, seed: int = 0,
                       guesses=None) -> tuple[float, list[Eigenpair], np.ndarray]:
    """(dual infeasibility, an :class:`Eigenpair` per PSD block, the nonnegative variables' slacks c_lp - A_lp'lambda)
    of the multipliers ``lam``; Lanczos stops once its Ritz residual is below ``accuracy`` (one number, or one per
    block); ``guesses`` are start vectors per block (the eigenvectors of a nearby slack, e.g. of the previous
    evaluation), or None."""
    slack = op.slack_matrix(lam)
    pairs = smallest_eigenpairs(slack, op.layout, op.backend, accuracy=accuracy, seed=seed, guesses=guesses)
    lp = _lp_slacks(slack, op.layout, op.backend)
    violation = sum(max(0.0, -pair.value) for pair in pairs) + float(np.maximum(-lp, 0.0).sum())
    return violation / (1.0 + norms.C_1), pairs, lp


def stationary_multipliers(op, R, lam, max_iter: int = 500):
    """The multipliers that best satisfy stationarity (C - A*(lambda)) R = 0 at the factor R.

    Least squares over lambda by CG on the normal equations J*J lambda = J*(C R), J(lambda) = A*(lambda) R,
    warm-started at ``lam``. At an optimal X = R R' the true multipliers solve it exactly, so this
    removes the error that the multiplier updates leave behind. It matters most for nonnegative
    variables near zero: x_j = r_j^2 has a vanishing gradient at r_j = 0, so the iterations barely see
    a slightly negative c_j - a_j'lambda there, while the least squares ignores such rows (weight r_j^2).
    """
    from .admm import conjugate_gradient  # the phases' CG, on m-vectors here

    rhs = op.constraints(op.sample(op.objective_times(R), R))

    def normal(y):
        return op.constraints(op.sample(op.adjoint_times(op.adjoint_data(y), R), R))

    refined, _ = conjugate_gradient(normal, rhs, lam.copy(), 1e-14, op.backend, max_iter=max_iter)
    return refined


def _lp_slacks(slack, layout, backend) -> np.ndarray:
    """c_lp - A_lp' lambda: the diagonal of the dual slack at the nonnegative rows."""
    if not layout.n_lp:
        return np.zeros(0)
    return backend.to_host(slack[layout.lp_offset:, layout.lp_offset:].diagonal())


def smallest_eigenpairs(matrix, layout, backend, accuracy, seed: int = 0, guesses=None) -> list[Eigenpair]:
    """The :class:`Eigenpair` of the smallest eigenvalue of each PSD block of the block-diagonal ``matrix``;
    ``accuracy``: the Ritz residual at which the iterative solver stops (one number, or one per block);
    ``guesses``: an optional start vector (or None) per block for the iterative solver."""
    xp = backend.xp
    accuracies = np.broadcast_to(np.asarray(accuracy, dtype=float), (len(layout.sizes),))
    result: dict[int, Eigenpair] = {}
    by_size: dict[int, list[int]] = {}
    for k, n in enumerate(layout.sizes):
        if n <= DENSE_LIMIT:
            by_size.setdefault(n, []).append(k)
        else:
            guess = guesses[k] if guesses is not None else None
            result[k] = Eigenpair(*_lanczos_smallest(_block(matrix, layout, k), n, backend, float(accuracies[k]),
                                                     seed, guess))
    for n, ks in by_size.items():
        values, vectors = xp.linalg.eigh(xp.stack([_block(matrix, layout, k).toarray() for k in ks]))
        values = backend.to_host(values)
        # a backward-stable eigensolver's eigenvalues are exact for a matrix within ~n eps ||S|| of S
        rounding = DENSE_ROUNDING * n * np.finfo(float).eps * np.abs(values).max(axis=1)
        result.update((k, Eigenpair(float(values[i, 0]), vectors[i, :, 0], float(rounding[i])))
                      for i, k in enumerate(ks))
    return [result[k] for k in range(len(layout.sizes))]


DENSE_ROUNDING = 10.0  # safety factor on n eps ||S||_2 for the eigenvalues of a dense decomposition


def _block(matrix, layout, k: int):
    start, stop = layout.offsets[k], layout.offsets[k] + layout.sizes[k]
    return matrix[start:stop, start:stop]


# weight of the random part of a warm start. The guess (the last slack's eigenvector) can be almost orthogonal to
# the new smallest eigenvector when eigenvalues cluster, as they do near a MaxCut optimum; with a weight of 1e-3
# Lanczos then converged to the second eigenvalue with a small residual, and value - residual was no lower estimate
# (n = 1200: -8.1e-6 reported, -1.57e-5 true). An equal random part keeps a component of order 1/sqrt(2n) along
# every eigenvector, which Lanczos amplifies, at the price of a few more steps.
GUESS_NOISE = 1.0


# A Lanczos cycle keeps its whole basis (steps x n) and, at a restart, the kept Ritz vectors (a third as many): at
# n = 1e8 sixty vectors are 48 GB. Both may take this share of the free device memory, and the cycle has no fewer
# than MIN_LANCZOS_STEPS vectors (more restarts, same answer).
LANCZOS_MEMORY_SHARE, MIN_LANCZOS_STEPS = 0.5, 20
KEPT_RITZ_SHARE = 3  # a restart keeps steps // 3 Ritz vectors


def _affordable_steps(backend, n: int) -> int:
    """The longest Lanczos cycle whose basis fits the device's memory (no bound on the CPU)."""
    free = backend.free_memory()
    per_step = 8 * n * (1 + 1 / KEPT_RITZ_SHARE)
    return n if free is None else max(MIN_LANCZOS_STEPS, int(LANCZOS_MEMORY_SHARE * free / per_step))


def _lanczos_smallest(matrix, n: int, backend, accuracy: float, seed: int, guess=None, steps: int = 60,
                      cycles: int = 40) -> tuple:
    """(smallest Ritz value, its Ritz vector, the Ritz residual) of a symmetric sparse ``matrix`` by
    thick-restarted Lanczos, from ``guess`` plus an equal random part when given, else from a random vector.

    Each cycle extends an orthonormal basis to ``steps`` vectors (full reorthogonalisation, so no spurious
    copies) and records the projection of the matrix column by column (the Gram-Schmidt coefficients), then
    solves the small projected problem on the host. It stops once the Ritz residual of the smallest Ritz
    value, ||S y - theta y||, is below ``accuracy``; otherwise it restarts from the ``steps // 3`` smallest
    Ritz vectors and the next basis vector (thick restart). Keeping one Ritz vector only, as a plain
    restart does, stalls when eigenvalues cluster at the bottom, as they do at a MaxCut optimum (the dual
    slack's null space has the dimension of the rank): G67 then used up 40 cycles without converging. The
    coefficients stay on the device until the cycle ends (one transfer per cycle, not per step); a
    breakdown (beta ~ 0) is found then, and the steps after it are discarded.
    """
    xp, kernels = backend.xp, kernels_for(backend)
    steps = min(steps, n - 1, _affordable_steps(backend, n)) if n > 1 else 1
    v = xp.asarray(np.random.default_rng(seed).standard_normal(n))
    v /= xp.linalg.norm(v)
    if guess is not None and bool(xp.isfinite(guess).all()) and float(xp.linalg.norm(guess)) > 0.0:
        v = guess / xp.linalg.norm(guess) + GUESS_NOISE * v
        v /= xp.linalg.norm(v)
    basis = xp.empty((steps + 1, n))
    basis[0] = v
    kept, ritz_values = 0, None
    for _ in range(cycles):
        projection = xp.zeros((steps + 1, steps))  # column j: basis' S basis[j]; below it, the norm beta_j
        if kept:
            projection[np.arange(kept), np.arange(kept)] = xp.asarray(ritz_values[:kept])
        for j in range(kept, steps):
            w = kernels.csr_matmul(matrix, basis[j])  # on the GPU no cuSPARSE set-up per product
            first = basis[:j + 1] @ w
            w -= basis[:j + 1].T @ first
            second = basis[:j + 1] @ w  # twice is enough (Kahan-Parlett)
            w -= basis[:j + 1].T @ second
            projection[:j + 1, j] = first + second
            projection[j + 1, j] = xp.linalg.norm(w)
            with np.errstate(divide="ignore", invalid="ignore"):  # NumPy only: quiet past a breakdown
                basis[j + 1] = w / projection[j + 1, j]
        projection = backend.to_host(projection)
        betas = np.diagonal(projection, -1)
        small = np.flatnonzero(~(betas[kept:] > 1e-14 * np.maximum(1.0, np.abs(np.diagonal(projection)[kept:]))))
        size = kept + int(small[0]) + 1 if small.size else steps
        upper = np.triu(projection[:size, :size])
        values, vectors = scipy.linalg.eigh(upper + np.triu(upper, 1).T)
        theta = float(values[0])
        residual = abs(projection[size, size - 1] * vectors[size - 1, 0]) if size == steps else 0.0
        if residual <= accuracy or size < steps:
            v = xp.asarray(vectors[:, 0]) @ basis[:size]
            break
        kept = max(1, min(steps // KEPT_RITZ_SHARE, size - 1))
        ritz = xp.asarray(vectors[:, :kept]).T @ basis[:size]
        basis[kept] = basis[size]  # the next Krylov vector, orthogonal to all of them
        basis[:kept] = ritz
        ritz_values = values
        v = basis[0]  # the Ritz vector of theta, should the cycles run out
    return theta, v / xp.linalg.norm(v), float(residual)
