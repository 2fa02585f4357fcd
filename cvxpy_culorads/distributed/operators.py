"""The operators of a problem split over shards: what the phases, the measurements and the certificates ask of an
operator (C V, sym(U V') sampled, A(X), A*(y) V, the dual slack), on row-space arrays split by rows.

The constraint space (multipliers, A(X), b) lives on the first device, whole. On a product of spheres
(:class:`ShardedSpheresOperator`, the Riemannian phase) only the measurements between phase runs touch it; with any
other constraints on the one block (:class:`ShardedBlockOperator`, phases I and II) every product sends each shard
the multipliers of the constraints it touches and brings back its partial sums of A(X). Each operator says which
shards' bounds balance its work (its ``bounds``), the solve builds the
:class:`~cvxpy_culorads.distributed.backend.ShardedBackend` split at them, and the operator serves that backend's
shards as they are (any bounds give the same products); each shard builds its parts on its device.
"""
from __future__ import annotations

import numpy as np

from cvxpy_culorads.distributed.arrays import (
    BUILD_CHUNK,
    HaloExchange,
    HaloPart,
    ShardedMatrix,
    ShardedRows,
    Shards,
    own_and_halo,
    shard_matrices,
)
from cvxpy_culorads.distributed.backend import ShardedBackend
from cvxpy_culorads.distributed.partition import symmetric_bounds
from cvxpy_culorads.hostpasses import abs_median, holds_anywhere, on_own_threads, strictly_increasing
from cvxpy_culorads.operators.compressed import (
    constraint_squares,
    coordinate_csr,
    distinct_positions,
    index_type_for,
    median_row_norm,
    sorted_unique,
)
from cvxpy_culorads.phases.state import initial_rows, widen_factor

__all__ = ["SHARDED_PROBLEMS_MESSAGE", "check_splittable", "ShardedSpheresOperator", "ShardedBlockOperator",
           "position_owner"]

SHARDED_PROBLEMS_MESSAGE = ("devices > 1 solves, for now, problems of one PSD block without nonnegative variables "
                            "or low-rank terms (MaxCut, matrix completion, diag(X) == d)")


def check_splittable(problem) -> None:
    """A ValueError (``SHARDED_PROBLEMS_MESSAGE``) unless the split operators take ``problem``: one PSD block, no
    nonnegative variables, no low-rank terms."""
    if problem.num_blocks != 1 or problem.n_lp or problem.A_low_rank[0].size or problem.C_low_rank[0] is not None:
        raise ValueError(SHARDED_PROBLEMS_MESSAGE)


class _ShardedOperator:
    """What the operators of a split problem share: the shards, C as a :class:`ShardedMatrix` (built by each shard on
    its device), the row-space arrays' start and widening shard by shard, the objective's products, and the
    constraint space (b, the multipliers, A(X)) whole on the first device."""

    def __init__(self, problem, backend: ShardedBackend, layout, shards: Shards, row_scale: float, build,
                 halo_precision: str):
        """``build(s)``: shard s's parts beyond C (a tuple), made on its device (called on a thread per shard);
        ``halo_precision``: that of the halo rows in :meth:`rounded_objective_times`
        (``SplitSettings.halo_precision``)."""
        n, coords, xp = layout.n_rows, problem.C_coords[0], backend.xp
        if shards.n != n:
            raise ValueError(f"the backend's shards split {shards.n} rows, the problem has {n}")
        self.backend, self.layout, self.m, self.shards = backend, layout, problem.m, shards
        self.kernels = backend.kernels()
        self.row_scale = row_scale
        self.b = xp.asarray(problem.b) / row_scale

        def build_all(s):
            with shards.on(s):
                return (*shard_matrices(backend.base, coords, n, *shards.rows(s)), *build(s))

        own, halo, halo_rows, *self._parts = (list(parts) for parts in zip(*on_own_threads(build_all, range(shards.k))))
        self.C = ShardedMatrix(own, halo, HaloExchange(shards, halo_rows), (n, n))
        self.rounds_halo = halo_precision == "single"
        self.rounded_C = self.C.with_halo_dtype(np.float32 if self.rounds_halo else np.float64)

    # ------------------------------------------------------------------ rows
    def split(self, array) -> ShardedRows:
        """A host array of the row space, split onto the shards."""
        return self.shards.split(array)

    def initial_factor(self, width: int, ranks, seed: int) -> ShardedRows:
        """The start of the low-rank phases, each shard's rows drawn as in the whole factor (``state.initial_rows``)."""
        xp = self.backend.xp
        return self.shards.map(lambda s: initial_rows(self.layout, ranks, width, seed, xp, *self.shards.rows(s)))

    def widen(self, R, ranks, new_ranks, directions) -> ShardedRows:
        """R widened to ``new_ranks`` (``state.widen_factor`` on each shard's rows)."""
        xp = self.backend.xp
        parts = [None if d is None else d.parts for d in directions]
        return self.shards.map(lambda s, part: widen_factor(part, self.layout, ranks, new_ranks, xp,
                                                            [None if p is None else p[s] for p in parts],
                                                            first_row=self.shards.rows(s)[0]), R)

    def residual_norm(self, residual) -> float:
        return self.row_scale * float(self.backend.xp.linalg.norm(residual))

    def objective_times(self, V, out=None):
        return self.kernels.csr_matmul(self.C, V, out=out)

    def rounded_objective_times(self, V, out=None):
        """C V with the halo rows exchanged in single precision when ``rounds_halo``: for the Riemannian phase's
        trial points, never for a measurement or a certificate."""
        return self.kernels.csr_matmul(self.rounded_C, V, out=out)

    def objective(self, R) -> float:
        return self.kernels.inner(R, self.objective_times(R))

    def slack_times(self, y, c_scale, V, CV=None, weight=1.0):
        """weight * (c_scale C + A*(y)) V; ``CV`` is C V when the caller has it already."""
        if CV is None:
            CV = self.objective_times(V)
        return self.adjoint_times(self.adjoint_data(y), V, alpha=weight, addend=CV, beta=weight * c_scale)

    def normal_preconditioner(self, F):
        """None: phase II's conjugate gradients run unpreconditioned on split rows."""
        return None


class ShardedSpheresOperator(_ShardedOperator):
    """The operator of a problem on a product of spheres (one PSD block, every constraint a_i X_jj = b_i on its own
    row j, every row fixed so: ``riemannian.Spheres``), split over the shards of a :class:`ShardedBackend`. It offers
    what the Riemannian phase and the driver's measurements use of ``layout.CompressedOperator``: C V with the halo
    exchanged, sym(U V') on the diagonal (the positions the constraints touch), A(X), A*(y) V, the dual slack as a
    :class:`ShardedMatrix` for the eigensolver, the start and the widening of the factor shard by shard."""

    @staticmethod
    def bounds(problem, layout, count: int) -> np.ndarray:
        """The bounds of ``count`` shards that balance the rows' entries of C (a shard's work per product)."""
        check_splittable(problem)
        rows, cols, _ = problem.C_coords[0]
        return symmetric_bounds([(rows, cols)], layout.n_rows, count)

    def __init__(self, problem, backend: ShardedBackend, rescale: bool, layout, halo_precision: str = "double"):
        check_splittable(problem)
        n, coeff = layout.n_rows, problem.A_coords[0]
        # one diagonal entry per constraint (the constraints are sorted: then they increase), each row once
        if not (coeff.row.size == n == problem.m and strictly_increasing(coeff.con)
                and not holds_anywhere(lambda s: coeff.row[s] != coeff.col[s], n)):
            raise ValueError("a product of spheres has one constraint a_i X_jj = b_i per row j")
        # per row of the block: its constraint and coefficient. n increasing constraint indices below m = n are
        # 0..n-1, so rows that increase are in constraint order (MaxCut's): a shard's constraints are then its rows
        row_coef, row_con = coeff.val, None
        if not strictly_increasing(coeff.row):
            if np.bincount(coeff.row, minlength=n).max() != 1:
                raise ValueError("a product of spheres has one constraint a_i X_jj = b_i per row j")
            row_con, row_coef = np.empty(n, index_type_for(n)), np.empty(n)
            row_con[coeff.row], row_coef[coeff.row] = coeff.con, coeff.val
        xp, shards = backend.xp, backend.shards
        row_scale = abs_median(coeff.val) if rescale else 1.0

        def build(s):
            """Shard s's constraints (None: its rows' own range) and coefficients."""
            lo, hi = shards.rows(s)
            return (None if row_con is None else xp.asarray(row_con[lo:hi]), xp.asarray(row_coef[lo:hi]) / row_scale)

        super().__init__(problem, backend, layout, shards, row_scale, build, halo_precision)
        self._con, self._coef = self._parts
        with shards.on(0):  # and the constraints on the first device, where the constraint space lives
            self._con_first = [None if row_con is None else xp.asarray(row_con[slice(*shards.rows(s))])
                               for s in range(shards.k)]

    # ------------------------------------------------------------------ forward operator
    def sample(self, U, V=None):
        """sym(U V') on the diagonal: the row dots u_j . v_j, shard by shard."""
        kernels = self.shards.kernels
        return self.shards.map(lambda s, u, v: kernels[s].row_dots(u, v), U, U if V is None else V)

    def constraints(self, w):
        """A(X) from :meth:`sample`'s values, as one m-vector on the first device."""
        out = self.backend.xp.empty(self.m)
        for s in range(self.shards.k):
            with self.shards.on(s):
                values = w.parts[s] * self._coef[s]
            if self._con_first[s] is None:
                self.shards.to_first(values, out[slice(*self.shards.rows(s))])
            else:
                out[self._con_first[s]] = self.shards.to_first(values)
        return out

    # ------------------------------------------------------------------ adjoint
    def adjoint_data(self, y, weight=1.0):
        """The diagonal of weight * A*(y), per shard."""
        def part(s):  # within on(s)
            if self._con[s] is not None:
                return weight * self._coef[s] * self.shards.from_first(s, y)[self._con[s]]
            with self.shards.on(0):
                mine = y[slice(*self.shards.rows(s))]  # only the shard's own constraints travel
            return weight * self._coef[s] * self.shards.from_first(s, mine)
        return self.shards.map(part)

    def adjoint_times(self, data, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """A*(y) V for the diagonal ``data`` of :meth:`adjoint_data` (alpha A*(y) V + beta addend with an addend)."""
        def times(s, d, v, *rest):
            result = alpha * d[:, None] * v if v.ndim == 2 else alpha * d * v
            if rest:
                result += beta * rest[0]
            return result
        product = self.shards.map(times, data, V, *([addend] if addend is not None else []))
        if out is None:
            return product
        self.shards.each(lambda s, o, p: o.__setitem__(Ellipsis, p), out, product)
        return out

    def slack_matrix(self, lam):
        """C - A*(lam) as a :class:`ShardedMatrix`."""
        return ShardedMatrix(self._plus_diagonal(self.adjoint_data(lam, weight=-1.0), self.C.own), self.C.halo,
                             self.C.exchange, self.C.shape)

    def adjoint_matrix(self, y, weight=1.0):
        """weight * A*(y) (diagonal) as a :class:`ShardedMatrix` with an empty halo."""
        zero = [self.backend.sparse.csr_matrix(part.shape) for part in self.C.own]
        no_halo = HaloExchange(self.shards, [np.empty(0, np.int64)] * self.shards.k)
        return ShardedMatrix(self._plus_diagonal(self.adjoint_data(y, weight=weight), zero), [None] * self.shards.k,
                             no_halo, self.C.shape)

    def _plus_diagonal(self, diagonal: ShardedRows, parts: list) -> list:
        """parts[s] + Diag(diagonal) on the shard's own columns."""
        sparse = self.backend.sparse
        return self.shards.each(lambda s, d, part: (part + sparse.diags(d, shape=part.shape, format="csr")).tocsr(),
                                diagonal, parts)


def position_owner(rows, cols, bounds, xp=np):
    """The shard that samples each position (rows >= cols and ``bounds``, arrays of ``xp``): that of its row or of
    its column, alternately by the parity of row + col, so that the positions between two shards (on a bipartite
    pattern such as completion's, all of them) are shared between both."""
    row_shard = xp.searchsorted(bounds, rows, side="right") - 1
    col_shard = xp.searchsorted(bounds, cols, side="right") - 1
    return xp.where((rows + cols) % 2 == 0, row_shard, col_shard)


class ShardedBlockOperator(_ShardedOperator):
    """The operator of a one-block problem with any constraints on the block (matrix completion, MaxCut by phases I and
    II, edge constraints with a trace constraint), split over the shards of a :class:`ShardedBackend` for phases I and
    II and the measurements.

    Each shard keeps, built on its device from the coordinates of A:
    - its rows of the pattern of A*(y) as a :class:`ShardedMatrix` ``S`` (own columns and halo), whose values come
      from the multipliers through ``At`` (the pattern's entries x the constraints touching them) and a gather into
      the CSR order of its two parts: A*(y) V then runs as C V does, the halo rows exchanged beside the own product;
    - the positions it samples (:func:`position_owner`), numbered in its *extended* rows (its own rows, then its halo
      rows in the order of S's halo buffer), and ``A``, the constraints x those positions: sym(U V') is sampled on
      the shard's own rows and halo rows put side by side, and A(X) is the sum over the shards of A times the
      samples, each shard's values scattered into the m-vector on the first device at its constraints.
    The constraint space (y, A(X), b, the multipliers) is whole on the first device: what crosses devices per
    product is y at the constraints each shard touches, the samples' partial sums, and halo rows."""

    @staticmethod
    def bounds(problem, layout, count: int) -> np.ndarray:
        """The bounds of ``count`` shards that balance the rows' entries of C and of A's coordinates (both are a
        shard's work per product)."""
        check_splittable(problem)
        (rows, cols, _), coeff = problem.C_coords[0], problem.A_coords[0]
        return symmetric_bounds([(rows, cols), (coeff.row, coeff.col)], layout.n_rows, count)

    def __init__(self, problem, backend: ShardedBackend, rescale: bool, layout, halo_precision: str = "double"):
        check_splittable(problem)
        n, coeff, xp, m = layout.n_rows, problem.A_coords[0], backend.xp, problem.m
        shards = backend.shards
        row_scale = (median_row_norm(constraint_squares(coeff.con, coeff.row, coeff.col, coeff.val, m))
                     if rescale else 1.0)
        index = index_type_for(max(n, m, 2 * coeff.row.size))

        def build(s):
            """Shard s's pattern of A*(y) and its constraints' parts (on its device)."""
            lo, hi = shards.rows(s)
            bounds = xp.asarray(shards.bounds)
            adjoint, sampled = ([], [], [], []), ([], [], [], [])
            for start in range(0, max(coeff.row.size, 1), BUILD_CHUNK):  # one piece at least: the arrays' types
                piece = slice(start, start + BUILD_CHUNK)
                con, row, col, val = (xp.asarray(a[piece]) for a in (coeff.con, coeff.row, coeff.col, coeff.val))
                lower, mirrored = (row >= lo) & (row < hi), (col >= lo) & (col < hi) & (row != col)
                for part, values in zip(adjoint, ((row[lower] - lo, col[mirrored] - lo), (col[lower], row[mirrored]),
                                                  (con[lower], con[mirrored]), (val[lower], val[mirrored]))):
                    part.extend(values)
                mine = position_owner(row, col, bounds, xp) == s
                fold = xp.where(row[mine] == col[mine], 1.0, 2.0)  # A_i's off-diagonal entries count twice in <A_i, X>
                for part, values in zip(sampled, (con[mine], row[mine], col[mine], val[mine] * fold / row_scale)):
                    part.append(values)
            local, column, con, val = (xp.concatenate(p) for p in adjoint)
            # the entries of the shard's rows of A*(y), by row then column, and which constraints each is made of
            keys = local * n + column
            entries, entry_of, _ = distinct_positions(xp, keys)
            # the first shard, beside the constraint space, reads y itself: its columns are the constraints
            touched, touched_of, _ = (None, con, None) if s == 0 else distinct_positions(xp, con)
            width = m if touched is None else touched.size
            At = coordinate_csr(backend.base, entry_of.astype(index), touched_of, val / row_scale,
                                (entries.size, width), index)
            del keys, local, column, con, val
            own, halo, halo_rows = own_and_halo(backend.base, entries // n, entries % n,
                                                xp.arange(entries.size, dtype=np.float64), n, lo, hi)
            gather = (own.data.astype(index), None if halo is None else halo.matrix.data.astype(index))
            del entries
            # the sampled positions in the extended rows, and the constraints x positions
            con, row, col, val = (xp.concatenate(p) for p in sampled)
            place = xp.empty(n, index)  # a row's place in the extended rows
            place[lo:hi] = xp.arange(hi - lo, dtype=index)
            place[xp.asarray(halo_rows)] = xp.arange(hi - lo, hi - lo + halo_rows.size, dtype=index)
            keys = row * n + col
            positions, position_of, _ = distinct_positions(xp, keys)
            owned, owned_of, _ = distinct_positions(xp, con)
            A = coordinate_csr(backend.base, owned_of, position_of.astype(index), val, (owned.size, positions.size),
                               index)
            extended = (place[positions // n], place[positions % n])
            return (own, halo, halo_rows, gather, At, None if touched is None else touched.astype(index), A,
                    owned.astype(index), extended)

        super().__init__(problem, backend, layout, shards, row_scale, build, halo_precision)
        own, halo, halo_rows, self._gather, self._At, touched, self._A, owned, self._extended = self._parts
        self.S = ShardedMatrix(own, halo, HaloExchange(shards, halo_rows), (n, n))
        with shards.on(0):  # the constraints each shard touches and samples, where the constraint space lives
            self._touched_first = [None if t is None else shards.to_first(t) for t in touched]
            self._owned_first = [shards.to_first(o) for o in owned]
        # the dual slack's halo: the rows C's or A*(y)'s entries reference, and where each part's halo rows lie in it
        # (sorted_unique, not np.union1d: docs/decisions/distributed-shard-build.md)
        self._slack_rows = [(a if not c.size else c if not a.size else sorted_unique(np, np.concatenate((c, a))))
                            for c, a in zip(self.C.exchange.halo_rows, halo_rows)]
        self._slack_exchange = (self.S.exchange if not any(c.size for c in self.C.exchange.halo_rows)
                                else HaloExchange(shards, self._slack_rows))
        self._slack_columns = shards.each(lambda s, union, c, a: tuple(xp.asarray(np.searchsorted(union, rows))
                                                                       for rows in (c, a)),
                                          self._slack_rows, self.C.exchange.halo_rows, halo_rows)

    # ------------------------------------------------------------------ forward operator
    def _extended_rows(self, V) -> list:
        """Per shard, its rows of V and then its halo rows (those of S), side by side in one array."""
        buffers, pending = self.S.exchange.start(V)
        pending.wait()
        xp = self.backend.xp
        return self.shards.each(lambda s, own, halo: xp.concatenate((own, halo)), V, buffers)

    def sample(self, U, V=None):
        """sym(U V') at each shard's sampled positions (U U' when V is None)."""
        extended = [self._extended_rows(U)] + ([] if V is None else [self._extended_rows(V)])
        return self.shards.map(lambda s, where, u, *v: self.shards.kernels[s].sym_sample(
            *where, u, v[0] if v else None), self._extended, *extended)

    def sample_pair(self, R, D):
        """Columns sym(R D') and D D' at each shard's sampled positions, for the line search."""
        return self.shards.map(lambda s, where, r, d: self.shards.kernels[s].sym_sample_pair(*where, r, d),
                               self._extended, self._extended_rows(R), self._extended_rows(D))

    def constraints(self, w):
        """A(X) from :meth:`sample`'s (or :meth:`sample_pair`'s) values, as an m-vector (m x 2) on the first device:
        each shard's partial sums over its positions, added at its constraints."""
        shards, xp = self.shards, self.backend.xp
        parts = shards.each(lambda s, A, values: shards.kernels[s].csr_matmul(A, values), self._A, w)
        with shards.on(0):
            out = xp.zeros((self.m,) + parts[0].shape[1:])
            for s, part in enumerate(parts):
                shards.kernels[0].scatter_add(out, self._owned_first[s], shards.to_first(part))
        return out

    # ------------------------------------------------------------------ adjoint
    def adjoint_data(self, y, weight=1.0) -> list:
        """Per shard, the values of weight * A*(y) in the CSR order of S's own and halo parts (None for no halo)."""
        shards = self.shards

        def part(s, At, touched, gather):  # within on(s)
            if touched is None:  # the first shard's columns are the constraints themselves
                mine = y
            else:
                with shards.on(0):
                    gathered = y[touched]  # only the constraints the shard touches travel
                mine = shards.from_first(s, gathered)
            kernels = shards.kernels[s]
            values = kernels.csr_matmul(At, mine)
            return tuple(None if g is None else kernels.gather_values(values, g, weight) for g in gather)
        return shards.each(part, self._At, self._touched_first, self._gather)

    def adjoint_times(self, data, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """A*(y) V for the values ``data`` of :meth:`adjoint_data` (alpha A*(y) V + beta addend with an addend): S's
        parts take the values, so that the products' plans, kept with S's index arrays, stay."""
        for s, values in enumerate(data):
            self.S.own[s].data = values[0]
            if values[1] is not None:
                self.S.halo[s].matrix.data = values[1]
        return self.kernels.csr_matmul(self.S, V, out=out, alpha=alpha, addend=addend, beta=beta)

    def adjoint_matrix(self, y, weight=1.0) -> ShardedMatrix:
        """weight * A*(y) as a :class:`ShardedMatrix` of its own (S's index arrays shared)."""
        sparse = self.backend.sparse

        def parts(s, own, halo, values):
            own = sparse.csr_matrix((values[0], own.indices, own.indptr), shape=own.shape)
            if halo is None:
                return own, None
            matrix = halo.matrix
            return own, HaloPart(sparse.csr_matrix((values[1], matrix.indices, matrix.indptr), shape=matrix.shape),
                                 halo.rows)
        own, halo = zip(*self.shards.each(parts, self.S.own, self.S.halo, self.adjoint_data(y, weight=weight)))
        return ShardedMatrix(list(own), list(halo), self.S.exchange, self.S.shape)

    def slack_matrix(self, lam) -> ShardedMatrix:
        """C - A*(lam) as a :class:`ShardedMatrix` over the union of C's and A*(y)'s halos."""
        adjoint, base = self.adjoint_matrix(lam, weight=-1.0), self.backend.base
        xp = base.xp

        def parts(s, c_own, a_own, c_halo, a_halo):
            own = (c_own + a_own).tocsr()
            if c_halo is None or a_halo is None:  # the union is the other part's halo
                return own, a_halo if c_halo is None else c_halo
            pieces = []
            for part, in_union in zip((c_halo, a_halo), self._slack_columns[s]):
                coo = part.matrix.tocoo()
                local = coo.row if part.rows is None else part.rows[coo.row]
                pieces.append((local, in_union[coo.col], coo.data))
            local, columns, values = (xp.concatenate(p) for p in zip(*pieces))
            shape = (c_own.shape[0], self._slack_rows[s].size)
            matrix = base.sparse.coo_matrix((values, (local, columns)), shape=shape).tocsr()
            matrix.sum_duplicates()  # an entry of both C and A*(y) becomes one
            return own, HaloPart(matrix)
        own, halo = zip(*self.shards.each(parts, self.C.own, adjoint.own, self.C.halo, adjoint.halo))
        return ShardedMatrix(list(own), list(halo), self._slack_exchange, self.C.shape)
