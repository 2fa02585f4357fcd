"""The iterate the two phases hand to each other, and the measures every phase reports.

``SolverState`` holds the device arrays (the stacked factor, the multipliers) and the few host
scalars (penalty, objective scale, ranks) that describe where the method stands; ``Progress`` is
one row of the iteration log; ``PhaseOutcome`` is how a phase ended, which the driver reads. All are
plain data: the phases (``phases/alm.py``, ``phases/admm.py``) change the state, the driver reads the progress.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.certify.measures import ProblemNorms, primal_infeasibility, relative_gap

__all__ = ["SolverState", "Progress", "PhaseOutcome", "block_ranks", "initial_rows", "widen_factor", "RANK_FACTOR",
           "SPHERES_RANK_FACTOR"]

# The default initial rank is ceil(factor * ln n_k): LoRADS's timesLogRank for the ALM phases, twice it where a
# constraint is kept exact (a product of spheres, the trace sphere), whose L-BFGS takes fewer steps from the wider
# start (decision records "riemannian-starting-rank" and "solver-start-rank")
RANK_FACTOR, SPHERES_RANK_FACTOR = 2.0, 4.0

# The random start is drawn in chunks of this many rows, chunk c from its own seed, so that any range of rows (a shard
# of the ``distributed`` package) can be drawn alone and is the same as in the whole factor.
START_CHUNK_ROWS = 1 << 20
_CHUNK_SEED_STRIDE = 0x9E3779B1  # chunk c is drawn from seed + c times this, modulo 2^32 (chunk 0: the seed itself)


@dataclass
class SolverState:
    """Where the method stands (device arrays, host scalars).

    ``R`` is the stacked factor (rows of all PSD blocks, then one row per nonnegative variable;
    block k uses its first ``ranks[k]`` columns, the rest stay exactly zero). ``lam`` are the
    multipliers of the problem whose objective is scaled by ``c_scale`` (re-optimisation), so the
    multipliers of the original problem are ``lam / c_scale``. ``Avals`` = A(R R') and
    ``objective`` = <C, R R'> are kept up to date by whichever phase moves ``R``.
    """

    R: object
    lam: object
    Avals: object
    objective: float
    rho: float
    c_scale: float
    ranks: list

    def dual_objective(self, b) -> float:
        return float(b @ self.lam) / self.c_scale


class PhaseOutcome(enum.Enum):
    """How a phase ended (its ``outcome`` once its generator is exhausted)."""

    CONVERGED = "converged"
    """Its exit test passed (phase I: ready for phase II; phase II: feasible, and within tol where it asks that)."""
    STALLED = "stalled"
    """It stopped because more iterations no longer paid (phase II: feasible, the gap no longer improving)."""
    BUDGET_SPENT = "budget_spent"
    """Its own iteration budget ran out."""
    FAILED = "failed"
    """Its iterates became non-finite, or diverged beyond what its restarts repair."""


@dataclass
class Progress:
    """One row of the iteration log (host scalars only)."""

    phase: str
    iteration: int
    primal_objective: float
    dual_objective: float
    primal_infeasibility: float  # ||A(X) - b||_2 / (1 + ||b||_1)
    primal_infeasibility_inf: float  # ||A(X) - b||_2 / (1 + ||b||_inf), the phase switch test
    gap: float
    rho: float
    ranks: tuple

    @classmethod
    def measure(cls, phase, iteration, residual_norm, objective, dual_objective, norms: ProblemNorms,
                rho, ranks) -> Progress:
        return cls(phase, iteration, objective, dual_objective,
                   primal_infeasibility(residual_norm, norms), residual_norm / (1.0 + norms.b_inf),
                   relative_gap(objective, dual_objective), rho, tuple(ranks))

    @property
    def finite(self) -> bool:
        return bool(np.isfinite([self.primal_objective, self.dual_objective, self.primal_infeasibility]).all())


def block_ranks(layout, rank: int | None, rank_factor: float) -> tuple[list[int], list[int]]:
    """(initial, maximal) rank of each PSD block.

    The maximal rank is the Barvinok-Pataki bound floor(sqrt(2 m_k)) + 1 (an optimal X_k of at
    most that rank exists), capped by n_k. The initial rank is ``rank`` if given, else
    ceil(rank_factor * ln n_k); blocks with many constraints per row (m_k >= 20 n_k, n_k <= 400) start
    at the bound, as in LoRADS, because low ranks stall there.
    """
    initial, maximal = [], []
    few_blocks = len(layout.sizes) <= 3
    for n, m_k in zip(layout.sizes, layout.constraints_touching):
        bound = min(int(np.floor(np.sqrt(2.0 * m_k))) + 1, n)
        if rank is not None:
            start = min(rank, n)
        elif few_blocks and m_k >= 20 * n and n <= 400:
            start = bound
        else:
            start = max(1, min(int(np.ceil(rank_factor * np.log(n))), bound))
        initial.append(start)
        maximal.append(max(bound, start))
    return initial, maximal


def initial_rows(layout, ranks, width: int, seed: int, xp, lo: int = 0, hi: int | None = None):
    """Rows [lo, hi) of the low-rank phases' start: uniform on [-1, 1] in the first ``ranks[k]`` columns of block k,
    zero elsewhere, and in the first column only for a nonnegative variable (x_j = r_j^2)."""
    hi = layout.n_rows if hi is None else hi
    chunks = []
    for c in range(lo // START_CHUNK_ROWS, -(-hi // START_CHUNK_ROWS)):
        start = c * START_CHUNK_ROWS
        rows = min(START_CHUNK_ROWS, layout.n_rows - start)
        draw = xp.random.RandomState((seed + c * _CHUNK_SEED_STRIDE) % 2**32).uniform(-1.0, 1.0, (rows, width))
        chunks.append(draw[max(lo - start, 0):min(hi - start, rows)])
    R = chunks[0] if len(chunks) == 1 else xp.concatenate(chunks)
    for offset, n, r in zip(layout.offsets, layout.sizes, ranks):
        R[max(offset - lo, 0):max(min(offset + n, hi) - lo, 0), r:] = 0.0
    R[max(layout.lp_offset - lo, 0):, 1:] = 0.0
    return xp.ascontiguousarray(R)


def widen_factor(R, layout, ranks, new_ranks, xp, directions=None, first_row: int = 0):
    """R, the rows from ``first_row`` on of the stacked factor, with block k widened from ``ranks[k]`` to
    ``new_ranks[k]`` columns.

    A column that is exactly zero stays zero under every update of both phases (its gradient is
    S R[:, c] = 0), so new columns must start nonzero: the first new column of block k is
    ``directions[k]`` when given (an escape direction, e.g. the eigenvector of a negative eigenvalue
    of the dual slack; its entries in the rows R holds), the others a small identity slab as in LoRADS.
    """
    width = max(list(new_ranks) + [1])
    wide = xp.zeros((R.shape[0], width))
    wide[:, :R.shape[1]] = R
    last_row = first_row + R.shape[0]
    for k, (offset, n, old, new) in enumerate(zip(layout.offsets, layout.sizes, ranks, new_ranks)):
        added = new - old
        start, stop = max(offset, first_row), min(offset + n, last_row)  # the block's rows in R, globally
        if added <= 0 or start >= stop:
            continue
        diag = xp.arange(max(start - offset, 0), min(added, stop - offset))
        wide[offset - first_row + diag, old + diag] = 1.0 / math.sqrt(added)
        if directions is not None and directions[k] is not None:
            wide[start - first_row:stop - first_row, old] = directions[k]
    return wide
