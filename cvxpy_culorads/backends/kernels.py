"""The hot kernels, with one NumPy reference twin each.

Two operations dominate every iteration of both phases:

- the *sampled symmetric product*: for positions p = (row_p, col_p) of the pattern Omega,
  ``w_p = (U[row_p] . V[col_p] + U[col_p] . V[row_p]) / 2``, i.e. sym(U V') sampled on Omega, in
  |Omega| * r flops instead of n^2 r (two pairs at once for the line search, which reads the
  factors once);
- the *row-major CSR times dense product* ``S @ V`` with V stored row-major (n x r, C order).

Around them each step of the phases does a little vector algebra (the L-BFGS two-loop recursion, the
scalars of the exact line search, the updates of the iterate, the gather of the adjoint's values, the
CG updates). On the GPU every separate array operation costs a launch (~20 us) whatever its size, so
these come as fused operations too; the CPU versions are the plain NumPy formulas the phases used before.

``kernels_for(backend)`` returns the implementation for a backend: NumPy/SciPy on the CPU; CuPy
``RawKernel``s on the GPU (one warp per pattern entry or matrix row, lanes over the rank, so every
access to a factor row is contiguous). The CPU versions are the references the GPU tests compare with.
"""
from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Kernels", "CpuKernels", "RowSpace", "kernels_for", "check_capabilities", "hashed_uniform",
           "LINE_SEARCH_ROW_SCALARS"]

_CHUNK = 1 << 16  # pattern entries per NumPy pass: bounds the |chunk| x r temporaries
LINE_SEARCH_ROW_SCALARS = slice(6, 8)  # the entries of line_search_products that are sums over the rows


def _rows(X, index):
    """X[index] for a 2-D X: ``take`` along the rows is about 3x faster than fancy indexing in NumPy."""
    return np.take(X, index, axis=0)


def _row_dots(A, B):
    """The dot products of corresponding rows."""
    return np.einsum("ij,ij->i", A, B)


@runtime_checkable
class Kernels(Protocol):
    """The contract of a kernel set, as the phases use it. Arrays are the backend's; ``out`` arrays, when given,
    are C-contiguous float64 of the result's shape and alias no input; "in place" methods change their first
    arguments. Every method returns the same shapes on every backend; ``lbfgs_pair``'s record is opaque (only
    ``lbfgs_direction`` of the same kernel set reads it).

    Capabilities, checked against the settings before a solve (:func:`check_capabilities`):
    ``max_lbfgs_memory``, the most L-BFGS pairs ``lbfgs_direction`` takes (None: no limit).
    """

    max_lbfgs_memory: int | None

    def sym_sample(self, rows, cols, U, V, out=None): ...
    def sym_sample_pair(self, rows, cols, R, D, out=None): ...
    def csr_matmul(self, matrix, V, out=None, alpha=1.0, addend=None, beta=0.0): ...
    def prepare_products(self, matrix) -> None: ...
    def lbfgs_pair(self, s, y): ...
    def lbfgs_direction(self, G, pairs, products): ...
    def lbfgs_gram(self, vectors, out): ...
    def lbfgs_recursion(self, upper, count, products): ...
    def lbfgs_combine(self, vectors, coefficients): ...
    def line_search_products(self, AW, Avals, b, lam, rho, R, D, CD, out): ...
    def advance(self, R, D, tau, Avals, AW): ...
    def shifted_residual(self, Avals, b, lam, rho): ...
    def gather_values(self, t, gather, weight): ...
    def scatter_add(self, out, index, values) -> None: ...
    def gather_rows(self, V, index, dtype): ...
    def scale_add(self, x, a, y, b): ...
    def cg_step(self, x, r, p, Ap, rr, pAp) -> None: ...
    def cg_direction(self, p, r, rr_new, rr) -> None: ...
    def lanczos_extend(self, basis, j, w, projection, complement) -> None: ...
    def basis_dot(self, V, k, w, out): ...
    def basis_subtract(self, V, k, c, w): ...
    def lanczos_cycle(self, step, first, stop, rows, deadline, recorded) -> int: ...
    def project_out(self, V, w): ...
    def sphere_tangent(self, Z, X, squares, scale, out): ...
    def row_dots(self, U, V): ...
    def sphere_retract(self, X, D, tau, roots, out): ...
    def sphere_line_search_products(self, AW, Avals, b, lam, R, D, CD, out): ...
    def remove_normal(self, Z, R, size, normal, multiplier=None, weight=0.0): ...
    def inner(self, x, y) -> float: ...
    def norm(self, x) -> float: ...
    def all_finite(self, x) -> bool: ...
    def empty_like(self, x): ...
    def random_vector(self, n: int, seed: int): ...
    def vectors(self, count: int, n: int): ...
    def combine(self, coefficients, vectors): ...
    def dot(self, x, y): ...
    def abs_sum(self, x) -> float: ...
    def average(self, x, y, out): ...


_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # SplitMix64's increment and multipliers


def hashed_uniform(xp, start: int, stop: int, seed: int):
    """Entries start..stop-1 of a pseudo-random vector with entries uniform in [-1, 1): entry i is SplitMix64's mix of
    (seed * 2^32 + i) times its increment, a function of i alone, so any range of it comes out the same on every array
    namespace and in any split into shards, and it is made on the device that uses it (drawing 1e8 normals on the
    host and copying them took 1.4 s per certificate on the H100 machine)."""
    increment, first, second = (xp.uint64(c) for c in _MIX)
    z = xp.arange(start, stop, dtype=xp.uint64)  # in place from here: one temporary
    z += xp.uint64((int(seed) << 32) % 2**64)
    z *= increment
    z ^= z >> xp.uint64(30)
    z *= first
    z ^= z >> xp.uint64(27)
    z *= second
    z ^= z >> xp.uint64(31)
    z >>= xp.uint64(11)  # 53 bits
    u = z.astype(xp.float64)
    u *= 2.0**-52
    u -= 1.0
    return u


class RowSpace:
    """Creation and reductions of row-space arrays (factors, eigenvector estimates, Lanczos bases), so that the phases
    and the eigensolver never need an array namespace for them: on several devices a row-space array is split by rows
    (``sharding.ShardedRows``) and the sharded kernel set implements these with reductions across the shards."""

    xp = np

    def inner(self, x, y) -> float:
        """<x, y> (synchronises)."""
        return float(self.xp.vdot(x, y))

    def norm(self, x) -> float:
        """||x||_2 (synchronises)."""
        return float(self.xp.linalg.norm(x))

    def all_finite(self, x) -> bool:
        return bool(self.xp.isfinite(x).all())

    def empty_like(self, x):
        return self.xp.empty_like(x)

    def random_vector(self, n: int, seed: int):
        """A random vector of n entries (:func:`hashed_uniform`), made where it is used."""
        return hashed_uniform(self.xp, 0, n, seed)

    def vectors(self, count: int, n: int):
        """Uninitialised storage for ``count`` row-space vectors of n entries (a count x n array)."""
        return self.xp.empty((count, n))

    def combine(self, coefficients, vectors):
        """coefficients @ vectors for host ``coefficients`` (a q-vector or a p x q array) and q stored vectors."""
        return self.xp.asarray(coefficients) @ vectors

    def dot(self, x, y):
        """<x, y> as a device scalar (no synchronisation), for the conjugate gradients' coefficients."""
        return self.xp.vdot(x, y)

    def abs_sum(self, x) -> float:
        """sum |x_i| (synchronises)."""
        return float(self.xp.abs(x).sum())

    def average(self, x, y, out):
        """out = (x + y) / 2 in place (returns out)."""
        self.xp.add(x, y, out=out)
        out *= 0.5
        return out


class CpuKernels(RowSpace):
    """NumPy/SciPy implementations (also the reference for the GPU kernels)."""

    max_lbfgs_memory = None

    @staticmethod
    def sym_sample(rows, cols, U, V, out=None):
        """w_p = (U[r].V[c] + U[c].V[r]) / 2 over the pattern; ``V is None`` means V = U."""
        out = np.empty(rows.size) if out is None else out
        for s in range(0, rows.size, _CHUNK):
            r, c = rows[s:s + _CHUNK], cols[s:s + _CHUNK]
            if V is None:
                out[s:s + _CHUNK] = _row_dots(_rows(U, r), _rows(U, c))
            else:
                out[s:s + _CHUNK] = 0.5 * (_row_dots(_rows(U, r), _rows(V, c)) + _row_dots(_rows(U, c), _rows(V, r)))
        return out

    @staticmethod
    def sym_sample_pair(rows, cols, R, D, out=None):
        """Two columns at once: ``out[:, 0] = sym(R D')`` and ``out[:, 1] = D D'`` on the pattern."""
        out = np.empty((rows.size, 2)) if out is None else out
        for s in range(0, rows.size, _CHUNK):
            r, c = rows[s:s + _CHUNK], cols[s:s + _CHUNK]
            Dr, Dc = _rows(D, r), _rows(D, c)
            out[s:s + _CHUNK, 0] = 0.5 * (_row_dots(_rows(R, r), Dc) + _row_dots(_rows(R, c), Dr))
            out[s:s + _CHUNK, 1] = _row_dots(Dr, Dc)
        return out

    @staticmethod
    def csr_matmul(matrix, V, out=None, alpha=1.0, addend=None, beta=0.0):
        """``matrix @ V`` for a SciPy CSR matrix and a C-ordered dense V, or ``alpha * (matrix @ V) + beta *
        addend`` when an addend is given (one pass on the GPU)."""
        result = matrix @ V
        if addend is not None:
            result *= alpha
            result += beta * addend
        if out is None:
            return np.ascontiguousarray(result)
        out[...] = result
        return out

    @staticmethod
    def prepare_products(matrix) -> None:
        """Makes ``matrix`` ready for many :meth:`csr_matmul` products before they are recorded (nothing to do on the
        CPU)."""

    # ------------------------------------------------------------------ fused vector algebra
    @staticmethod
    def lbfgs_pair(s, y):
        """The record of one L-BFGS pair for :meth:`lbfgs_direction`, with its weights 1/s'y and s'y/y'y;
        a pair with too little curvature (s'y <= 1e-12 ||s|| ||y||) gets weight zero (and gamma 1)."""
        sy, yy, ss = np.vdot(s, y), np.vdot(y, y), np.vdot(s, s)
        ok = sy > 1e-12 * np.sqrt(ss * yy)
        return s, y, np.where(ok, 1.0 / np.where(ok, sy, 1.0), 0.0), np.where(ok, sy / np.where(ok, yy, 1.0), 1.0)

    @staticmethod
    def lbfgs_direction(G, pairs, products):
        """D = -H G by the two-loop recursion (H0 = gamma I of the newest pair; ``pairs`` from
        :meth:`lbfgs_pair`, oldest first); writes (<G, G>, <D, G>) to ``products``."""
        q = G.copy()
        alphas = []
        for s, y, inv_sy, _ in reversed(pairs):
            alpha = inv_sy * np.vdot(s, q)
            q -= alpha * y
            alphas.append(alpha)
        if pairs:
            q *= pairs[-1][3]
        for (s, y, inv_sy, _), alpha in zip(pairs, reversed(alphas)):
            q += (alpha - inv_sy * np.vdot(y, q)) * s
        q *= -1.0
        products[0], products[1] = np.vdot(G, G), np.vdot(q, G)
        return q

    @staticmethod
    def lbfgs_gram(vectors, out):
        """The upper triangle of the Gram matrix of ``vectors`` (arrays of one shape), row by row, in ``out``."""
        rows, cols = np.triu_indices(len(vectors))
        out[:] = [np.vdot(vectors[a], vectors[b]) for a, b in zip(rows, cols)]
        return out

    @staticmethod
    def lbfgs_recursion(upper, count, products):
        """:func:`lbfgs_coefficients` of the ``count`` x ``count`` Gram matrix whose upper triangle, row by row, is
        ``upper``: returns the coefficients and writes (<G, G>, <D, G>) to ``products``."""
        coefficients, products[0], products[1] = lbfgs_coefficients(symmetric_from_upper(upper, count))
        return coefficients

    @staticmethod
    def lbfgs_combine(vectors, coefficients):
        """sum_j coefficients[j] vectors[j]."""
        out = coefficients[0] * vectors[0]
        for c, v in zip(coefficients[1:], vectors[1:]):
            out += c * v
        return out

    @staticmethod
    def line_search_products(AW, Avals, b, lam, rho, R, D, CD, out):
        """The scalars of the exact line search in ``out`` (9 entries): with res = Avals - b,
        q0 = lam / rho - res, q1 = 2 AW[:, 0], q2 = AW[:, 1]: q0.q1, q0.q2, q1.q1, q1.q2, q2.q2, res.res,
        then <R, CD>, <D, CD> (= <C, sym(R D')>, <C, D D'> with CD = C D) and b.lam."""
        residual = Avals - b
        Q = np.stack([lam / rho - residual, 2.0 * AW[:, 0], AW[:, 1], residual], axis=1)
        gram = Q.T @ Q
        out[:6] = gram[0, 1], gram[0, 2], gram[1, 1], gram[1, 2], gram[2, 2], gram[3, 3]
        out[LINE_SEARCH_ROW_SCALARS] = np.vdot(R, CD), np.vdot(D, CD)
        out[8] = b @ lam
        return out

    @staticmethod
    def sphere_line_search_products(AW, Avals, b, lam, R, D, CD, out):
        """The scalars of the line search on the trace sphere in ``out`` (28 entries): the Gram matrix of
        (lam, b, a0, q1, q2) row by row (a0 = Avals, q1 = 2 AW[:, 0], q2 = AW[:, 1]: A((R + t D)(R + t D)') =
        a0 + t q1 + t^2 q2), then <R, CD>, <D, CD> and <D, D>."""
        Q = np.stack([lam, b, Avals, 2.0 * AW[:, 0], AW[:, 1]])
        out[:25] = (Q @ Q.T).ravel()
        out[25:28] = np.vdot(R, CD), np.vdot(D, CD), np.vdot(D, D)
        return out

    @staticmethod
    def remove_normal(Z, R, size, normal, multiplier=None, weight=0.0):
        """Z -= (<Z, R> / size) R in place (the tangent part of Z at a point R of the sphere ||R||_F^2 = size); the
        1-entry array ``normal`` gets <Z, R> / size, and a 1-entry ``multiplier``, when given, weight times that
        added. Returns Z."""
        normal[0] = np.vdot(Z, R) / size
        Z -= normal[0] * R
        if multiplier is not None:
            multiplier += weight * normal[0]
        return Z

    @staticmethod
    def advance(R, D, tau, Avals, AW):
        """D *= tau (the step), R += D and Avals += tau (2 AW[:, 0]) + tau^2 AW[:, 1] in place; returns D (the
        direction's memory is the step's: one n x r array less at n = 1e8 is 4 GB)."""
        D *= tau
        R += D
        Avals += tau * (2.0 * AW[:, 0]) + tau * tau * AW[:, 1]
        return D

    @staticmethod
    def shifted_residual(Avals, b, lam, rho):
        """rho (Avals - b) - lam."""
        return rho * (Avals - b) - lam

    @staticmethod
    def gather_values(t, gather, weight):
        """weight * t[gather]."""
        data = np.take(t, gather)
        if weight != 1.0:
            data *= weight
        return data

    @staticmethod
    def scatter_add(out, index, values):
        """out[index] += values in place, repeated indices adding up, without temporaries of out's size."""
        np.add.at(out, index, values)

    @staticmethod
    def gather_rows(V, index, dtype):
        """The rows ``index`` of V in a new C-ordered array of ``dtype`` (rounded when narrower). Not np.take with a
        float32 ``out``: NumPy 2 then warns of invalid values in the cast of finite ones."""
        return np.take(V, index, axis=0).astype(dtype, copy=False)

    @staticmethod
    def scale_add(x, a, y, b):
        """x = a x + b y in place (returns x)."""
        x *= a
        x += b * y
        return x

    @staticmethod
    def cg_step(x, r, p, Ap, rr, pAp):
        """x += alpha p, r -= alpha Ap in place, with alpha = rr / pAp (0 when pAp = 0: p = 0, the solve was
        exact already; the iterations between two convergence checks run on)."""
        alpha = rr / pAp if pAp > 0.0 else 0.0
        x += alpha * p
        r -= alpha * Ap

    @staticmethod
    def cg_direction(p, r, rr_new, rr):
        """p = (rr_new / rr) p + r in place (p = r when rr = 0)."""
        p *= rr_new / rr if rr > 0.0 else 0.0
        p += r

    @staticmethod
    def lanczos_extend(basis, j, w, projection, complement):
        """One Lanczos step past w = S basis[j] (changed in place): two passes of classical Gram-Schmidt against
        basis[:j + 1], the second after ``complement(w)`` (twice is enough: Kahan-Parlett); their coefficients go
        to projection[:j + 1, j], the norm of what is left to projection[j + 1, j] and the normalised rest to
        basis[j + 1] (inf or NaN past a breakdown, which the caller finds in the norm)."""
        k = j + 1
        first = CpuKernels.basis_subtract(basis, k, CpuKernels.basis_dot(basis, k, w, np.empty(k)), w)
        second = CpuKernels.basis_subtract(basis, k, CpuKernels.basis_dot(basis, k, complement(w), np.empty(k)), w)
        projection[:k, j] = first + second
        projection[j + 1, j] = np.linalg.norm(w)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(w, projection[j + 1, j], out=basis[j + 1])

    @staticmethod
    def basis_dot(V, k: int, w, out):
        """out = V[:k] w (a k-vector) for a C-ordered stack of vectors V; returns out."""
        return np.matmul(V[:k], w, out=out)

    @staticmethod
    def basis_subtract(V, k: int, c, w):
        """w -= V[:k]' c in place (one pass of Gram-Schmidt's update); returns c."""
        w -= V[:k].T @ c
        return c

    @staticmethod
    def project_out(V, w):
        """w -= V' (V w) in place for a C-ordered k x n V (returns w)."""
        w -= V.T @ (V @ w)
        return w

    @staticmethod
    def lanczos_cycle(step, first, stop, rows, deadline, recorded):
        """step(j) for j = first, ..., stop - 1, in order, on vectors of ``rows`` entries; returns the j after the
        last step run: ``stop``, or less once the clock (``time.perf_counter``) has passed ``deadline`` (one cycle
        of n = 3e5 takes 1.5 s on a CPU). ``recorded``: the caller's dict of replays (unused here); every call
        with the same (first, stop) must mean the same steps on the same arrays."""
        for j in range(first, stop):
            step(j)
            if j + 1 < stop and time.perf_counter() >= deadline:
                return j + 1
        return stop

    # ------------------------------------------------------------------ rows of a product of spheres
    @staticmethod
    def row_dots(U, V):
        """u_i . v_i for every row i (U, V of one n x r shape)."""
        return _row_dots(U, V)

    @staticmethod
    def sphere_tangent(Z, X, squares, scale, out):
        """out_i = scale (z_i - (z_i . x_i / squares_i) x_i) for every row i (the tangent part of z_i at the row x_i
        of norm sqrt(squares_i)); ``out`` may be Z."""
        along = _row_dots(Z, X) / squares
        np.multiply(Z - along[:, None] * X, scale, out=out)
        return out

    @staticmethod
    def sphere_retract(X, D, tau, roots, out):
        """out_i = roots_i (x_i + tau d_i) / |x_i + tau d_i| for every row i (a zero row becomes roots_i e_1)."""
        np.add(X, tau * D, out=out)
        norms = np.sqrt(_row_dots(out, out))
        zero = norms == 0.0
        out[zero] = 0.0
        out[zero, 0] = 1.0
        norms[zero] = 1.0
        out *= (roots / norms)[:, None]
        return out


def kernels_for(backend) -> Kernels:
    """The kernel set for a :class:`~cvxpy_culorads.backends.backend.Backend` (a sharded backend brings its own)."""
    sharded = getattr(backend, "kernel_set", None)
    if sharded is not None:
        return sharded
    if backend.is_gpu:
        from cvxpy_culorads.backends.gpu_kernels import GpuKernels
        return GpuKernels()
    return CpuKernels()


def symmetric_from_upper(upper, count: int) -> np.ndarray:
    """The symmetric ``count`` x ``count`` host matrix whose upper triangle, row by row, is ``upper``."""
    out = np.empty((count, count))
    rows, cols = np.triu_indices(count)
    out[rows, cols] = out[cols, rows] = upper
    return out


def lbfgs_coefficients(gram: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The L-BFGS two-loop recursion on coefficients, from the Gram matrix of the basis (G, s_0, y_0, s_1, y_1, ...),
    oldest pair first: (c, <G, G>, <D, G>) with D = -H G = sum_j c_j v_j. The same arithmetic as on the vectors (in
    exact arithmetic) and as the GPU kernel's epilogue; a pair with too little curvature (s'y <= 1e-12 ||s|| ||y||)
    gets weight zero."""
    pairs = (gram.shape[0] - 1) // 2
    s_index, y_index = 1 + 2 * np.arange(pairs), 2 + 2 * np.arange(pairs)
    sy, yy, ss = gram[s_index, y_index], gram[y_index, y_index], gram[s_index, s_index]
    ok = sy > 1e-12 * np.sqrt(ss * yy)
    inverse = np.where(ok, 1.0 / np.where(ok, sy, 1.0), 0.0)
    gamma = np.where(ok, sy / np.where(ok, yy, 1.0), 1.0)
    c = np.zeros(gram.shape[0])
    c[0] = 1.0
    alphas = np.zeros(pairs)
    for i in reversed(range(pairs)):
        alphas[i] = inverse[i] * (gram[s_index[i]] @ c)
        c[y_index[i]] -= alphas[i]
    if pairs:
        c *= gamma[-1]
    for i in range(pairs):
        c[s_index[i]] += alphas[i] - inverse[i] * (gram[y_index[i]] @ c)
    c = -c
    return c, float(gram[0, 0]), float(gram[0] @ c)


def check_capabilities(kernels: Kernels, settings, device: str) -> None:
    """Refuse settings that ``kernels`` cannot run, with a ValueError naming the setting (before the solve starts,
    not in the middle of it)."""
    limit = kernels.max_lbfgs_memory
    if limit is not None and settings.lbfgs_memory > limit:
        raise ValueError(f"lbfgs_memory must be at most {limit} on {device}, got {settings.lbfgs_memory}")
