"""What the data say about the size of a solution: trace bounds for dual certificates, fixed diagonals.

Multipliers lambda whose dual slack S = C - A*(lambda) is not quite PSD still give a lower bound on the
optimal value when the trace of an optimal X is bounded: for every feasible (X, x),

    <C, X> + c_lp'x - b'lambda = sum_k <S_k, X_k> + s'x >= -sum_k theta_k tr(X_k) - sum_j sigma_j x_j,

with theta_k = max(0, -lambda_min(S_k)) and sigma_j = max(0, -s_j). ``TraceBounds`` derives the bounds
that make this a number, from the data alone (host, O(nnz)), and turns (b'lambda, theta, sigma) into the
certified dual bound:

- **absolute**: an equality constraint whose coefficients are all nonnegative and on diagonals (of the PSD
  blocks, or the nonnegative variables) bounds each entry it touches by b_i / a_ij, and a block's trace by
  the sum of its entries' bounds (MaxCut's X_jj = 1: tr X = n exactly) or by b_i / min_j a_ij when one such
  constraint touches the whole diagonal (theta's tr X = 1);
- **objective**: when every C_k is diagonally dominant with C_k >= c I (Gershgorin) and c_lp >= c > 0, the
  total trace T is at most <C, X>/c, and the inequality above gives p* >= b'lambda / (1 + theta_max / c)
  (matrix completion's C = I / 2);
- **negative diagonal objective**: with one PSD block and no nonnegative variables, a diagonal C <= 0 bounds the
  diagonal entries it weights through the objective, sum_{C_jj < 0} X_jj <= -<C, X>/c (c the smallest |C_jj|
  there), and the other diagonal entries by the absolute bounds: tr X* <= tau_rest - p*/c at an optimum, so
  p* >= (b'lambda - theta tau_rest) / (1 - theta/c) while theta < c (the stable-set form of the theta function:
  max sum_i Y_ii with Y_00 = 1 has tr Y = 1 + theta(G));
- **user**: the setting ``trace_bound``, an upper bound on sum_k tr(X_k) + sum_j x_j of an optimal solution,
  gives p* >= b'lambda - max(theta, sigma) * trace_bound.

The best (largest) of the bounds that apply is reported; none applies when a violated block or variable is
bounded by nothing, and then the answer says so rather than guessing. ``FixedDiagonals`` finds the rows whose
squared norm the constraints fix exactly (X_jj = b_i / a_ij, the constraint's only entry, and no other
constraint on the block): projecting the factor onto them makes those constraints hold to rounding.
``FixedTrace`` finds a constraint a tr X = b on a problem's only block (theta's tr X = 1): its feasible factors
have ||R||_F^2 = b / a, one sphere, on which the ALM phase can keep that constraint exact (``phases/alm.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cvxpy_culorads.hostpasses import holds_anywhere, map_chunks, strictly_increasing

__all__ = ["TraceBounds", "DualBound", "FixedDiagonals", "FixedTrace"]


@dataclass(frozen=True)
class DualBound:
    """A certified lower bound on the optimal value (``value``; None when nothing bounds the solution's
    size where the slack is violated) and how it was obtained."""

    value: float | None
    how: str


def _entry_bounds(index: np.ndarray, ratio: np.ndarray, size: int) -> np.ndarray:
    """The smallest ``ratio`` per ``index`` in [0, size) (inf where none)."""
    bounds = np.full(size, np.inf)
    if strictly_increasing(index):  # one constraint per entry (MaxCut): no reduction, and the chunks write apart

        def scatter(s):
            bounds[index[s]] = ratio[s]
        map_chunks(scatter, index.size)
    else:
        np.minimum.at(bounds, index, ratio)
    return bounds


def _ratios(b: np.ndarray, con: np.ndarray, val: np.ndarray) -> np.ndarray:
    """b[con] / val, entry by entry."""
    ratio = np.empty(con.size)
    map_chunks(lambda s: np.divide(b[con[s]], val[s], out=ratio[s]), con.size)
    return ratio


def _sum(x: np.ndarray) -> float:
    return float(sum(map_chunks(lambda s: x[s].sum(), x.size)))


@dataclass(frozen=True)
class TraceBounds:
    """Bounds on the size of every feasible (or, for ``user``, some optimal) solution.

    - ``blocks``: tau_k >= tr(X_k) per PSD block (inf where the data bound nothing);
    - ``lp``: u_j >= x_j per nonnegative variable (inf where unbounded);
    - ``curvature``: c > 0 with C_k >= c I for every block and c_lp >= c, else 0;
    - ``user``: the setting ``trace_bound`` (None when not given);
    - ``negative_diagonal``: (tau_rest, c) of the negative diagonal objective rule, or None where it does not apply.
    """

    blocks: tuple[float, ...]
    lp: np.ndarray
    curvature: float
    user: float | None
    negative_diagonal: tuple[float, float] | None = None

    @classmethod
    def of(cls, problem, user: float | None = None) -> TraceBounds:
        nonneg_diagonal = _nonnegative_diagonal_constraints(problem)
        blocks, negative_diagonal = [], None
        every_constraint = bool(nonneg_diagonal.all())
        for k, (coeff, n) in enumerate(zip(problem.A_coords, problem.block_sizes)):
            con, row, val = coeff.con, coeff.row, coeff.val
            if not every_constraint:
                pick = nonneg_diagonal[con]  # such constraints have diagonal entries only
                con, row, val = con[pick], row[pick], val[pick]
            entries = _entry_bounds(row, _ratios(problem.b, con, val), n)
            tau = _sum(entries)
            if problem.num_blocks == 1 and not problem.n_lp:
                negative_diagonal = _negative_diagonal(problem, k, entries)
            # one constraint on the whole diagonal: sum_j a_j X_jj <= b_i, so tr X <= b_i / min_j a_j. Such a
            # constraint has n entries, and the coordinates are sorted by constraint: a run of n equal indices.
            starts = con[:max(con.size - n + 1, 0)]
            covering = np.unique(starts[starts == con[n - 1:]])
            if covering.size:
                smallest = np.full(problem.m, np.inf)
                np.minimum.at(smallest, con, val)
                tau = min(tau, float(np.min(problem.b[covering] / smallest[covering])))
            blocks.append(tau)
        lp = np.full(problem.n_lp, np.inf)
        if problem.n_lp:
            A_lp = problem.A_lp.tocoo()
            pick = nonneg_diagonal[A_lp.row]
            lp = _entry_bounds(A_lp.col[pick].astype(np.int64), problem.b[A_lp.row[pick]] / A_lp.data[pick],
                               problem.n_lp) if np.any(pick) else lp
        return cls(tuple(blocks), lp, _objective_curvature(problem), user, negative_diagonal)

    def weights(self, dual_objective: float) -> list[float | None]:
        """Per PSD block, what one unit of -lambda_min(S_k) costs the dual bound (tau_k, else the share the
        objective or the user bound gives it), or None when nothing bounds the block."""
        shared = None
        if self.curvature > 0.0:
            shared = abs(dual_objective) / self.curvature
        elif self.negative_diagonal is not None:
            rest, scale = self.negative_diagonal
            shared = rest + max(0.0, -dual_objective) / scale
        elif self.user is not None:
            shared = self.user
        return [tau if np.isfinite(tau) else shared for tau in self.blocks]

    def capacity(self, thetas, sigmas) -> float | None:
        """The most sum_k theta_k tr X_k + sum_j sigma_j x_j reaches over the points within the bounds ``blocks`` and
        ``lp`` (weights >= 0), or None when a block or variable of positive weight is unbounded."""
        thetas, sigmas = np.asarray(thetas, dtype=float), np.asarray(sigmas, dtype=float)
        block_bounds = np.asarray(self.blocks, dtype=float)
        weighted_blocks, weighted_lp = thetas > 0.0, sigmas > 0.0
        if not (np.all(np.isfinite(block_bounds[weighted_blocks])) and np.all(np.isfinite(self.lp[weighted_lp]))):
            return None
        return float(thetas[weighted_blocks] @ block_bounds[weighted_blocks]
                     + sigmas[weighted_lp] @ self.lp[weighted_lp])

    def dual_bound(self, dual_objective: float, thetas, sigmas: np.ndarray) -> DualBound:
        """The certified lower bound on the optimal value from b'lambda = ``dual_objective``, the blocks'
        ``thetas`` = max(0, -lambda_min(S_k)) (lower estimates of lambda_min, so upper ones of theta) and the
        variables' ``sigmas`` = max(0, -s_j)."""
        thetas = np.asarray(thetas, dtype=float)
        sigmas = np.asarray(sigmas, dtype=float)
        worst = float(max(thetas.max(initial=0.0), sigmas.max(initial=0.0)))
        if worst == 0.0:
            return DualBound(dual_objective, "the dual slack is PSD: weak duality")
        candidates = []
        hole = self.capacity(thetas, sigmas)
        if hole is not None:
            candidates.append((dual_objective - hole, "trace bounds implied by the constraints"))
        if self.curvature > 0.0:
            candidates.append((dual_objective / (1.0 + worst / self.curvature),
                               f"the objective's curvature C >= {self.curvature:.3g} I"))
        if self.negative_diagonal is not None and worst < self.negative_diagonal[1]:
            rest, scale = self.negative_diagonal
            candidates.append(((dual_objective - worst * rest) / (1.0 - worst / scale),
                               "the trace bounded through a negative diagonal objective"))
        if self.user is not None:
            candidates.append((dual_objective - worst * self.user, f"trace_bound = {self.user:g}"))
        if not candidates:
            return DualBound(None, "no certified bound: nothing in the data bounds the trace where the dual slack "
                                   "is not PSD (the setting trace_bound supplies one)")
        value, how = max(candidates)
        return DualBound(value, how)


def _nonnegative_diagonal_constraints(problem) -> np.ndarray:
    """Mask of the constraints whose coefficients are all on diagonals and nonnegative, with b_i >= 0."""
    bad = np.zeros(problem.m, dtype=bool)
    for coeff, terms in zip(problem.A_coords, problem.A_low_rank):
        for found in map_chunks(lambda s, c=coeff: c.con[s][(c.row[s] != c.col[s]) | (c.val[s] < 0)], coeff.con.size):
            bad[found] = True
        bad[terms.con] = True  # a low-rank term is not diagonal
    A_lp = problem.A_lp.tocoo()
    bad[A_lp.row[A_lp.data < 0]] = True
    return ~bad & (problem.b >= 0)


def _negative_diagonal(problem, k: int, entries: np.ndarray) -> tuple[float, float] | None:
    """(tau_rest, c) for block k when C_k is diagonal (no low-rank term) with negative entries, c the smallest
    |C_jj|, and every other diagonal entry has a finite bound in ``entries`` (their sum is tau_rest); else None."""
    rows, cols, vals = problem.C_coords[k]
    if (problem.C_low_rank[k] is not None or not vals.size or holds_anywhere(lambda s: vals[s] >= 0, vals.size)
            or holds_anywhere(lambda s: rows[s] != cols[s], rows.size)):
        return None
    rest = np.ones(entries.size, dtype=bool)
    rest[rows] = False
    if not np.all(np.isfinite(entries[rest])):
        return None
    return float(entries[rest].sum()), float(np.abs(vals).min())


def _objective_curvature(problem) -> float:
    """The largest c with every C_k >= c I by Gershgorin's discs and c_lp >= c, if positive; else 0. A low-rank term
    with weights d >= 0 is PSD and only adds to the bound of the sparse part; one with a negative weight may take
    any amount away, so its block bounds nothing."""
    smallest = [float(problem.c_lp.min())] if problem.n_lp else []
    if any(term is not None and term.d.min() < 0 for term in problem.C_low_rank):
        return 0.0
    for (rows, cols, vals), n in zip(problem.C_coords, problem.block_sizes):
        # the coordinates are unique, so a diagonal entry missing or <= 0 leaves a disc reaching 0 (MaxCut's
        # C = -L/4): then skip the radii, O(nnz) twice
        if _diagonal_count_and_sign(rows, cols, vals) != (n, True):
            return 0.0
        diagonal = rows == cols
        centre = np.bincount(rows[diagonal], vals[diagonal], minlength=n)
        off = ~diagonal
        sizes = np.abs(vals[off])
        radius = np.bincount(rows[off], sizes, minlength=n) + np.bincount(cols[off], sizes, minlength=n)
        smallest.append(float((centre - radius).min()))
    c = min(smallest) if smallest else 0.0
    return c if c > 0.0 else 0.0


@dataclass(frozen=True)
class FixedDiagonals:
    """Rows of the stacked factor whose squared norm the constraints fix, per PSD block: (offset, rows of the
    block or None for all of them in order, targets b_i / a_i). Scaling such a row to its target satisfies its
    constraint exactly and touches no other constraint: each of these constraints has one entry, and no other
    constraint touches the block."""

    blocks: tuple  # (offset, stacked rows or None, sqrt(targets)) per block with fixed rows

    @classmethod
    def of(cls, problem, offsets, xp) -> FixedDiagonals | None:
        """The fixed rows of ``problem`` (blocks at ``offsets`` of the stacked factor), as arrays of ``xp``."""
        # a low-rank term counts as two entries: its constraint is never one with a single diagonal entry
        sources = [c.con for c in problem.A_coords if c.con.size] + [problem.A_lp.tocoo().row] * bool(problem.A_lp.nnz)
        sources += [np.repeat(t.con, 2) for t in problem.A_low_rank if t.size]
        # one block's coordinates alone, sorted by constraint: one entry per constraint iff the indices increase
        single_entries = len(sources) == 1 and strictly_increasing(sources[0])
        entries = None if single_entries else np.bincount(np.concatenate(sources + [np.zeros(0, np.int64)]),
                                                          minlength=problem.m)
        blocks = []
        for coeff, terms, offset, n in zip(problem.A_coords, problem.A_low_rank, offsets, problem.block_sizes):
            if not coeff.con.size or terms.size or (entries is not None and np.any(entries[coeff.con] != 1)):
                continue
            if holds_anywhere(lambda s, c=coeff: (c.row[s] != c.col[s]) | ~(c.val[s] > 0), coeff.con.size):
                continue
            targets = _ratios(problem.b, coeff.con, coeff.val)
            in_order = coeff.row.size == n and not holds_anywhere(
                lambda s, c=coeff: c.row[s] != np.arange(s.start, s.stop), n)
            if (holds_anywhere(lambda s, t=targets: ~(t[s] > 0), targets.size)
                    or not in_order and np.bincount(coeff.row, minlength=n).max() > 1):
                continue
            blocks.append((offset, None if in_order else xp.asarray(coeff.row + offset), xp.sqrt(xp.asarray(targets))))
        return cls(tuple(blocks)) if blocks else None

    def on(self, xp) -> FixedDiagonals:
        """The same rows with their arrays in ``xp`` (built on the host, used on the device)."""
        return FixedDiagonals(tuple((offset, None if rows is None else xp.asarray(rows), xp.asarray(roots))
                                    for offset, rows, roots in self.blocks))

    def project(self, R, xp):
        """The factor R with the fixed rows scaled to their targets, in place (a zero row becomes
        sqrt(target) e_1); returns R."""
        for offset, rows, roots in self.blocks:
            index = slice(offset, offset + roots.size) if rows is None else rows
            block = R[index]  # a view when the whole block is fixed in order (MaxCut): no copy of the factor
            norms = xp.sqrt((block * block).sum(axis=1))
            zero = norms == 0.0
            if bool(zero.any()):
                block[zero, 0] = 1.0
                norms[zero] = 1.0
            block *= (roots / norms)[:, None]
            if rows is not None:
                R[index] = block
        return R


@dataclass(frozen=True)
class FixedTrace:
    """A constraint a tr X = b (a, b > 0: the same coefficient on every diagonal entry of the problem's only PSD
    block and nothing else) on a problem without nonnegative variables: its feasible factors are the sphere
    ||R||_F^2 = b / a (``size``). ``constraint`` is its index; the first such constraint is taken."""

    constraint: int
    size: float

    @classmethod
    def of(cls, problem) -> FixedTrace | None:
        if problem.num_blocks != 1 or problem.n_lp:
            return None
        coeff, n = problem.A_coords[0], problem.block_sizes[0]
        counts = np.bincount(coeff.con, minlength=problem.m)
        # diagonal entries only, none negative, no low-rank term: a multiple of I when all n are equal and positive
        candidates = (counts == n) & _nonnegative_diagonal_constraints(problem) & (problem.b > 0)
        for i in np.flatnonzero(candidates):
            entries = coeff.con == i
            values, rows = coeff.val[entries], coeff.row[entries]
            # each of the n rows once: by a bincount, as NumPy's unique hashes (seconds per 10^7 rows)
            if values[0] > 0 and np.all(values == values[0]) and np.bincount(rows, minlength=n).max() == 1:
                return cls(int(i), float(problem.b[i] / values[0]))
        return None


def _diagonal_count_and_sign(rows, cols, vals) -> tuple[int, bool]:
    """(the number of diagonal coordinates, whether all their values are positive)."""

    def count(s):
        on = vals[s][rows[s] == cols[s]]
        return on.size, bool(np.all(on > 0.0))
    counts = map_chunks(count, rows.size)
    return sum(c for c, _ in counts), all(p for _, p in counts)
