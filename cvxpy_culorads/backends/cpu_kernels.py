"""The CPU kernel set: NumPy/SciPy formulas, and the reference twin of every GPU kernel.

Each method is the plain array formula the phases need (sampled symmetric products, CSR times dense, the L-BFGS
two-loop recursion on coefficients, the exact line search's scalars, the conjugate-gradient and Lanczos updates,
the sphere kernels); the GPU set (:mod:`cvxpy_culorads.backends.gpu_kernels`) must agree with it to rounding, which
``tests/test_gpu_kernels.py`` checks on random data. The kernels of the Riemannian phase also take float32 factors
(``Settings.precision="mixed"``): they store float32, sum in float64 and compute row formulas in float64 before
rounding once, as the GPU kernels do (``tests/test_precision.py``). The kernels of factor-sized arrays in the
Riemannian step work in row blocks of about ``_BLOCK`` entries on the host's thread pool: each block's chain of
operations reads the arrays once while they are in cache, and their temporaries are per-thread scratch of the block's
size, not fresh factor-sized arrays (decision record "cpu-step-blocks").
"""
from __future__ import annotations

import threading
import time

import numpy as np

try:  # SciPy's CSR kernel, on a range of rows without copying them; private, so not relied on
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - a SciPy that moved it
    _csr_matvecs = None

from cvxpy_culorads.backends.kernels import (
    ALL_CAPABILITIES,
    LINE_SEARCH_ROW_SCALARS,
    RowSpace,
    lbfgs_coefficients,
    symmetric_from_upper,
)
from cvxpy_culorads.hostpasses import map_chunks

__all__ = ["CpuKernels"]

_CHUNK = 1 << 16  # pattern entries per NumPy pass: bounds the |chunk| x r temporaries
# entries of a row block of the factor-sized kernels: 512 KB in float64, so that the few arrays of a block's chain
# stay in a core's cache; smaller blocks pay more in the interpreter than they gain in the cache (decision record
# "cpu-step-blocks")
_BLOCK = 1 << 16
_LOCAL = threading.local()  # each thread's scratch arrays (``_scratch``)


def _map_rows(function, array) -> list:
    """[function(s) for the consecutive slices s of ``array``'s rows (its first axis) that cover them], in order,
    each of about ``_BLOCK`` entries, on the host's thread pool when there are several. A row kernel written for
    one block reads each array once while the block is in cache, and its temporaries are ``_scratch`` arrays of the
    block's size, never of the factor's (a fresh factor-sized array costs its page faults on every call)."""
    rows = len(array)
    return map_chunks(function, rows, chunk=max(1, _BLOCK // max(array.size // max(rows, 1), 1)))


def _scratch(slot: str, shape: tuple, dtype=np.float64) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` in this thread's memory named ``slot``, reused by every later call
    (contents undefined): the temporaries of one row block (``_map_rows``). A kernel's block takes its first
    intermediate in "block", a second in "term"; :func:`_tangent_rows` takes "normal". So a thread holds three
    buffers of ``_BLOCK`` float64 whatever the kernels."""
    buffers = _LOCAL.__dict__.setdefault("buffers", {})
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    buffer = buffers.get(slot)
    if buffer is None or buffer.size < size:
        buffer = buffers[slot] = np.empty(max(size, 8 * _BLOCK), np.uint8)
    return buffer[:size].view(dtype).reshape(shape)


def _tangent_rows(Z, X, squares, scale, out):
    """out_i = scale (z_i - (z_i . x_i / squares_i) x_i) for the rows of one block, in float64 rounded to ``out``'s
    type (``out`` may be Z); returns the dots z_i . x_i."""
    dots = _row_dots(Z, X)
    normal = _scratch("normal", Z.shape)
    np.multiply(X, (dots / squares)[:, None], out=normal)
    np.subtract(Z, normal, out=normal)
    np.multiply(normal, scale, out=out)
    return dots


def _rows(X, index):
    """X[index] for a 2-D X: ``take`` along the rows is faster than fancy indexing in NumPy (decision record
    "host-passes-numpy")."""
    return np.take(X, index, axis=0)


def _row_dots(A, B):
    """The dot products of corresponding rows, summed in float64 whatever the arrays store."""
    return np.einsum("ij,ij->i", A, B, dtype=np.float64)


def _vdot(x, y):
    """<x, y> summed in float64: float32 arrays in chunks widened to float64 (their BLAS dot would sum in single
    precision), float64 ones by BLAS."""
    if x.dtype == y.dtype == np.float64:
        return np.vdot(x, y)
    x, y = x.reshape(-1), y.reshape(-1)
    return sum((np.dot(x[s:s + _CHUNK].astype(np.float64), y[s:s + _CHUNK].astype(np.float64))
                for s in range(0, x.size, _CHUNK)), np.float64(0.0))


def _gram_matrix(vectors):
    """The Gram matrix of arrays of one shape, summed in float64: BLAS dots of every pair on contiguous float64
    views (float32 arrays widened in scratch, in chunks), which beat a product of the stacked arrays (OpenBLAS is
    slow for so few rows)."""
    count = len(vectors)
    flat = [v.reshape(-1) for v in vectors]
    gram = np.zeros((count, count))
    wide64 = flat[0].dtype == np.float64
    step = _BLOCK if wide64 else max(1, _BLOCK // count)  # float32: the widened chunks in one block's scratch
    for s in range(0, flat[0].size, step):
        if wide64:
            wide = [v[s:s + step] for v in flat]
        else:
            wide = _scratch("block", (count, min(step, flat[0].size - s)))
            for row, v in zip(wide, flat):
                row[...] = v[s:s + step]
        for i in range(count):
            for j in range(i, count):
                gram[i, j] += np.dot(wide[i], wide[j])
    return gram + np.triu(gram, 1).T


def _combination_rows(vectors, coefficients, s):
    """sum_j coefficients[j] vectors[j][s] for the rows s of one block, in float64 (whatever the vectors store) in
    the thread's "block" scratch."""
    combined = _scratch("block", vectors[0][s].shape)
    np.multiply(vectors[0][s], coefficients[0], out=combined, dtype=np.float64)
    term = _scratch("term", combined.shape)
    for c, v in zip(coefficients[1:], vectors[1:]):
        np.multiply(v[s], c, out=term, dtype=np.float64)
        combined += term
    return combined


class CpuKernels(RowSpace):
    """NumPy/SciPy implementations (also the reference for the GPU kernels)."""

    capabilities = ALL_CAPABILITIES
    max_lbfgs_memory = None

    def inner(self, x, y) -> float:
        """<x, y>, summed in float64 (synchronises)."""
        return float(_vdot(x, y))

    def norm(self, x) -> float:
        """||x||_2, summed in float64 (synchronises)."""
        return float(np.linalg.norm(x)) if x.dtype == np.float64 else float(np.sqrt(_vdot(x, x)))

    def gram(self, vectors) -> np.ndarray:
        """The Gram matrix of ``vectors`` (arrays of one shape) on the host, summed in float64."""
        return _gram_matrix(vectors)

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
        addend`` when an addend is given (one pass on the GPU). The sums are float64 (a float32 V is widened); a
        float32 ``out`` gets them rounded once, without ``out`` they are returned in float64."""
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
        sy, yy, ss = _vdot(s, y), _vdot(y, y), _vdot(s, s)
        ok = sy > 1e-12 * np.sqrt(ss * yy)
        return s, y, np.where(ok, 1.0 / np.where(ok, sy, 1.0), 0.0), np.where(ok, sy / np.where(ok, yy, 1.0), 1.0)

    @staticmethod
    def lbfgs_direction(G, pairs, products, out=None):
        """D = -H G by the two-loop recursion (H0 = gamma I of the newest pair; ``pairs`` from
        :meth:`lbfgs_pair`, oldest first), in ``out`` where given; writes (<G, G>, <D, G>) to ``products``. D is stored
        as G is, the coefficients and products are float64."""
        q = np.empty_like(G) if out is None else out
        q[...] = G
        alphas = []
        for s, y, inv_sy, _ in reversed(pairs):
            alpha = inv_sy * _vdot(s, q)
            q -= alpha * y
            alphas.append(alpha)
        if pairs:
            q *= pairs[-1][3]
        for (s, y, inv_sy, _), alpha in zip(pairs, reversed(alphas)):
            q += (alpha - inv_sy * _vdot(y, q)) * s
        q *= -1.0
        products[0], products[1] = _vdot(G, G), _vdot(q, G)
        return q

    @staticmethod
    def lbfgs_gram(vectors, out):
        """The upper triangle of the Gram matrix of ``vectors`` (arrays of one shape), row by row, in ``out``."""
        out[:] = _gram_matrix(vectors)[np.triu_indices(len(vectors))]
        return out

    @staticmethod
    def lbfgs_recursion(upper, count, products):
        """:func:`lbfgs_coefficients` of the ``count`` x ``count`` Gram matrix whose upper triangle, row by row, is
        ``upper``: returns the coefficients and writes (<G, G>, <D, G>) to ``products``."""
        coefficients, products[0], products[1] = lbfgs_coefficients(symmetric_from_upper(upper, count))
        return coefficients

    @staticmethod
    def lbfgs_combine(vectors, coefficients, out=None):
        """sum_j coefficients[j] vectors[j], summed in float64 and stored as the vectors are, in ``out`` where given."""
        out = np.empty_like(vectors[0]) if out is None else out

        def block(s):
            out[s] = _combination_rows(vectors, coefficients, s)
        _map_rows(block, out)
        return out

    @staticmethod
    def lbfgs_sphere_direction(G, pairs, products, X, squares, update=False, out=None):
        """D = P_X(-H G): the L-BFGS direction of :meth:`lbfgs_direction` (H0 = gamma I of the newest pair) in the
        compact form the GPU takes it -- the Gram matrix of (G, s_0, y_0, ...) in one pass, the recursion on its
        coefficients (:func:`lbfgs_coefficients`), one combination in float64 -- projected in the same pass onto the
        tangent space at the rows of X (squared norms ``squares``, as :meth:`sphere_tangent`) and rounded once to G's
        type. ``pairs``: (s, y, ...) tuples, oldest first. With ``update`` the newest pair still holds the previous
        point and gradient and becomes (X - it, G - it) in place first, within the Gram pass. D goes to ``out`` where
        given. Writes (<G, G>, <D, G>) to ``products``."""
        vectors = [G] + [v for pair in pairs for v in pair[:2]]

        def gram(s):
            if update:
                np.subtract(X[s], vectors[-2][s], out=vectors[-2][s])
                np.subtract(G[s], vectors[-1][s], out=vectors[-1][s])
            return _gram_matrix([v[s] for v in vectors])
        coefficients, products[0], products[1] = lbfgs_coefficients(sum(_map_rows(gram, G)))
        D = np.empty_like(G) if out is None else out

        def combine(s):
            _tangent_rows(_combination_rows(vectors, coefficients, s), X[s], squares[s], 1.0, D[s])
        _map_rows(combine, G)
        return D

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
        def block(s):
            part = x[s]
            part *= a
            term = _scratch("block", y[s].shape, np.result_type(y, b))
            np.multiply(y[s], b, out=term)
            part += term
        _map_rows(block, x)
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
    def lanczos_tridiagonals(stack, start, steps: int, breakdown: float):
        """(alphas, betas), each (k, steps): the tridiagonal matrices of ``steps`` Lanczos steps on each symmetric
        matrix B of a (k, n, n) stack, from the unit rows of ``start`` (k, n). Each new vector is reorthogonalised
        twice against the whole basis (classical Gram-Schmidt), so that the Ritz values stay within B's spectrum; one
        shorter than ``breakdown`` ||B||_F (an invariant subspace) continues as zeros, which adds Ritz values 0."""
        count, n = start.shape
        basis = np.zeros((count, steps + 1, n))
        basis[:, 0] = start
        alphas, betas = np.empty((count, steps)), np.empty((count, steps))
        threshold = breakdown * np.sqrt((stack * stack).sum(axis=(1, 2)))
        for j in range(steps):
            w = (stack @ basis[:, j, :, None])[..., 0]
            done = basis[:, :j + 1]
            alpha = 0.0
            for _ in range(2):
                coefficients = done @ w[:, :, None]  # (count, j + 1, 1)
                w -= (done.swapaxes(1, 2) @ coefficients)[..., 0]
                alpha = alpha + coefficients[:, j, 0]
            beta = np.sqrt((w * w).sum(axis=1))
            alphas[:, j], betas[:, j] = alpha, beta
            basis[:, j + 1] = w * np.where(beta > threshold, 1.0 / np.maximum(beta, 1e-300), 0.0)[:, None]
        return alphas, betas

    @staticmethod
    def project_out(V, w):
        """w -= V' (V w) in place for a C-ordered k x n V (returns w)."""
        w -= V.T @ (V @ w)
        return w

    @staticmethod
    def lanczos_cycle(step, first, stop, rows, deadline, recorded):
        """step(j) for j = first, ..., stop - 1, in order, on vectors of ``rows`` entries; returns the j after the
        last step run: ``stop``, or less once the clock (``time.perf_counter``) has passed ``deadline``, read after
        every step because a cycle of a large block takes seconds on a CPU (decision record
        "lanczos-stopping-rules"). ``recorded``: the caller's dict of replays (unused here); every call
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
        of norm sqrt(squares_i)), in float64, rounded to ``out``'s type; ``out`` may be Z."""
        _map_rows(lambda s: _tangent_rows(Z[s], X[s], squares[s], scale, out[s]), Z)
        return out

    @staticmethod
    def sphere_decrease(R_new, R, CR_new, CR, squares) -> np.ndarray:
        """(f(P(R_new)), f(P(R_new)) - f(P(R)), ||C R_new||_F^2) on the host for f(X) = <X, C X>, P the projection
        onto the spheres (row norms sqrt(squares)) and rounded factors with their rounded products (single
        precision): f(P(Y)) = sum_i (y_i . (C y)_i) (2 - |y_i|^2 / squares_i) to first order in the rows' rounding,
        and the decrease gains <R_new, C R> - <R, C R_new> (zero for exact products of a symmetric C), so that the
        products' rounding enters it times the step only. Sums in float64."""
        def block(s):
            projected = _row_dots(R_new[s], CR_new[s]) @ (2.0 - _row_dots(R_new[s], R_new[s]) / squares[s])
            kept = _row_dots(R[s], CR[s]) @ (2.0 - _row_dots(R[s], R[s]) / squares[s])
            cross = _row_dots(R_new[s], CR[s]).sum() - _row_dots(R[s], CR_new[s]).sum()
            return np.array([projected, projected - kept + cross, _row_dots(CR_new[s], CR_new[s]).sum()])
        return sum(_map_rows(block, R))

    @staticmethod
    def sphere_product_gradient(matrix, R, squares, scale, gradient, product=None) -> float:
        """<R, C R> for the CSR matrix C = ``matrix``, with ``gradient`` = scale P_R(C R) (the rows' tangent parts, as
        :meth:`sphere_tangent`) and, given ``product``, C R itself: the GPU takes all three in one pass and writes C R
        only where it is kept. C R is summed in float64 and rounded to R's type (as :meth:`csr_matmul` into an
        ``out`` of that type) before the rows' dots and the projection use it, so the results are the unfused ones'."""
        n, r = R.shape
        # SciPy's CSR kernel on a block's rows (the public product would copy the matrix's slice) takes float64
        # operands: a float32 factor is widened once, since a block's product reads rows from anywhere in it
        wide = np.ascontiguousarray(R, dtype=np.float64).ravel()
        data = matrix.data.astype(np.float64, copy=False)

        def block(s):
            CR = _scratch("block", (s.stop - s.start, r))
            if _csr_matvecs is None:
                CR[...] = matrix[s] @ wide.reshape(n, r)
            else:
                CR.fill(0.0)
                _csr_matvecs(s.stop - s.start, matrix.shape[1], r, matrix.indptr[s.start:s.stop + 1],
                             matrix.indices, data, wide, CR.ravel())
            if R.dtype != np.float64:
                rounded = _scratch("term", CR.shape, R.dtype)
                np.copyto(rounded, CR)
                CR = rounded
            if product is not None:
                product[s] = CR
            return _tangent_rows(CR, R[s], squares[s], scale, gradient[s]).sum()
        return float(sum(_map_rows(block, R)))

    @staticmethod
    def sphere_retract(X, D, tau, roots, out):
        """out_i = roots_i (x_i + tau d_i) / |x_i + tau d_i| for every row i (a zero row becomes roots_i e_1), in
        float64, rounded to ``out``'s type (which may differ from X's: a float32 factor projected into float64)."""
        def block(s):
            moved = _scratch("block", D[s].shape)
            np.multiply(D[s], tau, out=moved, dtype=np.float64)
            moved += X[s]
            norms = np.sqrt(_row_dots(moved, moved))
            zero = norms == 0.0
            if zero.any():
                moved[zero] = 0.0
                moved[zero, 0] = 1.0
                norms[zero] = 1.0
            np.multiply(moved, (roots[s] / norms)[:, None], out=out[s])
        _map_rows(block, X)
        return out
