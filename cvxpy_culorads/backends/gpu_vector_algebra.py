"""The fused vector algebra of the phases on the GPU: elementwise updates rounded as CpuKernels rounds them,
deterministic grid-wide reductions (the L-BFGS Gram pass and recursion, the line searches' scalars, the sphere's
normal component, the Gram-Schmidt passes and norms of Lanczos steps) and the per-row kernels of the product of
spheres. The reductions keep per-device tickets that are always left at zero and never reallocated, so that
recorded CUDA graphs can hold their address. The kernels of the Riemannian phase take float32 factors too (mixed
precision): they read and store float32 and sum and compute in float64."""
from __future__ import annotations

import cupy
import numpy as np

from cvxpy_culorads.backends.gpu_launch import BLOCK, grid, kernel, multiprocessors, row_layout

# Elementwise updates spell out the unfused rounding (__dmul_rn / __dadd_rn: no contraction into an FMA), so they
# give bit for bit what the separate array operations of CpuKernels give.
ADVANCE_FACTOR = cupy.ElementwiseKernel(
    "float64 tau", "float64 d, float64 r", "d = __dmul_rn(tau, d); r = __dadd_rn(r, d);", "culorads_advance_factor")
ADVANCE_VALUES = cupy.ElementwiseKernel(
    "raw float64 aw, float64 tau, float64 tau2", "float64 a",
    "a = __dadd_rn(a, __dadd_rn(__dmul_rn(tau, 2.0 * aw[2 * i]), __dmul_rn(tau2, aw[2 * i + 1])));",
    "culorads_advance_values")
SHIFTED_RESIDUAL = cupy.ElementwiseKernel(
    "float64 a, float64 b, float64 lam, float64 rho", "float64 y",
    "y = __dsub_rn(__dmul_rn(rho, __dsub_rn(a, b)), lam);", "culorads_shifted_residual")
GATHER_VALUES = cupy.ElementwiseKernel(
    "raw float64 t, I g, float64 weight", "float64 out", "out = weight * t[g];", "culorads_gather_values")
GATHER_ROWS = cupy.ElementwiseKernel(
    "raw T v, raw I index, int64 width", "F out", "out = (F)v[index[i / width] * width + i % width];",
    "culorads_gather_rows")
SCALE_ADD = cupy.ElementwiseKernel(  # T: float64, or float32 (taken in float64, rounded once)
    "float64 a, T y, float64 b", "T x", "x = (T)__dadd_rn(__dmul_rn(a, (double)x), __dmul_rn(b, (double)y));",
    "culorads_scale_add")
# <x, y> summed in float64 for float32 arrays (cuBLAS' dot of float32 arrays sums in single precision)
WIDE_DOT = cupy.ReductionKernel("T x, T y", "float64 z", "(double)x * (double)y", "a + b", "z = a", "0",
                                "culorads_wide_dot")
CG_STEP = cupy.ElementwiseKernel(
    "raw float64 rr, raw float64 pap, float64 p, float64 ap", "float64 x, float64 r",
    "const double alpha = pap[0] > 0.0 ? rr[0] / pap[0] : 0.0;"  # p = 0: the solve was exact already
    "x = __dadd_rn(x, __dmul_rn(alpha, p)); r = __dsub_rn(r, __dmul_rn(alpha, ap));",
    "culorads_cg_step")
CG_DIRECTION = cupy.ElementwiseKernel(
    "raw float64 rr_new, raw float64 rr, float64 r", "float64 p",
    "p = __dadd_rn(__dmul_rn(p, rr[0] > 0.0 ? rr_new[0] / rr[0] : 0.0), r);", "culorads_cg_direction")
# a thread per row: at the narrow ranks where the split spheres sample, a warp's reads share cache lines (why not
# einsum: docs/decisions/gpu-kernels-row-dots.md)
_ROW_DOTS = cupy.ElementwiseKernel(
    "raw float64 u, raw float64 v, int64 width", "float64 out",
    "const long long base = i * width; double s = 0.0;"
    "for (long long j = 0; j < width; ++j) s += u[base + j] * v[base + j];"
    "out = s;", "culorads_row_dots")
_SUBTRACT_ALONG = cupy.ElementwiseKernel(
    "raw float64 c, float64 r", "float64 z", "z = z - c[0] * r;", "culorads_subtract_along")
DIVIDE_BY = cupy.ElementwiseKernel(
    "float64 w, raw float64 norm", "float64 out", "out = w / norm[0];", "culorads_divide_by")

VALUE_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}  # the kernels' value types
REDUCE_THREADS = 256  # the reduction kernels' block size (their warp_sums table assumes 8 warps)
REDUCE_BLOCKS_PER_SM = 2  # grid cap of the grid-stride reductions: enough loads in flight, few partial sums
LBFGS_MAX_VECTORS = 9  # G and up to 4 (s, y) pairs: the kernels take that many pointers
LINE_SEARCH_SCALARS = 9
SPHERE_SCALARS, SPHERE_SUMS = 28, 18  # entries written by sphere_line_search_products, distinct sums among them
_TICKETS: dict = {}  # device id -> the uint32 ticket of the last-block reductions (always left at zero)


def _ticket():
    device = cupy.cuda.Device()
    ticket = _TICKETS.get(device.id)
    if ticket is None:
        ticket = _TICKETS[device.id] = cupy.zeros(1, dtype=np.uint32)
    return ticket


def _reduce_grid(length: int) -> int:
    cap = REDUCE_BLOCKS_PER_SM * multiprocessors(cupy.cuda.Device().id)
    return max(1, min(-(-length // REDUCE_THREADS), cap))


def _vector_args(vectors):
    """The kernels' nine pointer arguments: the vectors, padded with the first one (never read)."""
    return tuple(vectors) + (vectors[0],) * (LBFGS_MAX_VECTORS - len(vectors))


def _checked_lbfgs_vectors(vectors):
    """(count, entries, C type) of L-BFGS vectors: C-contiguous, of one shape and one type (float64 or float32)."""
    if len(vectors) > LBFGS_MAX_VECTORS:
        raise ValueError(f"the GPU L-BFGS keeps at most {(LBFGS_MAX_VECTORS - 1) // 2} pairs, "
                         f"got {(len(vectors) - 1) // 2}")
    first = vectors[0]
    if any(not v.flags.c_contiguous or v.shape != first.shape or v.dtype != first.dtype for v in vectors) \
            or first.dtype not in VALUE_TYPES:
        raise ValueError("L-BFGS vectors must be C-contiguous float64 or float32 arrays of one shape and type")
    return len(vectors), first.size, VALUE_TYPES[first.dtype]


def _lbfgs_gram_pass(vectors, recurse: bool, coef, products, update_to=None):
    """The Gram pass over ``vectors`` (with the recursion in its epilogue where ``recurse``); with ``update_to`` (the
    current point X), the newest pair's arrays first become (X - s, G - y) in the same pass (the recursion follows)."""
    K, L, ftype = _checked_lbfgs_vectors(vectors)
    blocks = _reduce_grid(L)
    partial = cupy.empty(blocks * K * (K + 1) // 2)
    # the kernel's modes (lbfgs.cu's LbfgsGramMode): write the Gram matrix, recurse, update the newest pair and recurse
    mode = 2 if update_to is not None else int(recurse)
    update = (vectors[-2], vectors[-1], update_to) if update_to is not None else (vectors[0],) * 3  # never touched
    tail = (np.int64(L), partial, _ticket(), coef, products)
    kernel(f"lbfgs_gram_kernel<{K}, {mode}, {ftype}>")(
        (blocks,), (REDUCE_THREADS,), _vector_args(vectors) + update + tail)


def lbfgs_recursion(upper, count: int, products):
    """The L-BFGS recursion's coefficients from a Gram matrix's upper triangle (at most 9 vectors): one thread on
    the device, nothing read back."""
    if not 1 <= count <= LBFGS_MAX_VECTORS or count % 2 == 0 or upper.size != count * (count + 1) // 2 \
            or products.size != 2 or upper.dtype != np.float64 or products.dtype != np.float64:
        raise ValueError("lbfgs_recursion: inconsistent arguments")
    coef = cupy.empty(count)
    kernel(f"lbfgs_recursion_kernel<{count}>")((1,), (1,), (cupy.ascontiguousarray(upper), coef, products))
    return coef


def lbfgs_combine(vectors, coef, out=None):
    """sum_j coef[j] vectors[j] (``coef`` a device vector) in one pass, stored as the vectors are (in ``out``, of their
    shape and type, where given)."""
    K, L, ftype = _checked_lbfgs_vectors(vectors)
    out = cupy.empty_like(vectors[0]) if out is None else out
    _checked_lbfgs_vectors([vectors[0], out])
    kernel(f"lbfgs_combine_kernel<{K}, {ftype}>")((_reduce_grid(L),), (REDUCE_THREADS,), _vector_args(vectors) + (
        np.int64(L), coef, out))
    return out


def lbfgs_direction(G, pairs, products, out=None):
    """D = -H G by the two-loop recursion (in ``out`` where given), writing (<G, G>, <D, G>) to ``products`` (at most 4
    pairs): one Gram pass with the recursion in its epilogue, one combination."""
    vectors = [G] + [v for pair in pairs for v in pair]
    coef = cupy.empty(len(vectors))
    _lbfgs_gram_pass(vectors, True, coef, products)
    return lbfgs_combine(vectors, coef, out)


def lbfgs_sphere_direction(G, pairs, products, X, squares, update=False, out=None):
    """:meth:`GpuKernels.lbfgs_sphere_direction`: the Gram pass (the newest pair updated in it where ``update``) with
    the recursion in its epilogue, then one pass that combines and projects row by row (at most 4 pairs), into ``out``
    (of G's shape and type) where given."""
    vectors = [G] + [v for pair in pairs for v in pair[:2]]
    count = len(vectors)
    out = cupy.empty_like(G) if out is None else out
    n, r, ftype = _row_arrays(G, X, out)
    if squares.dtype != np.float64 or squares.shape != (n,) or (update and count < 3):
        raise ValueError("lbfgs_sphere_direction: squares must be a float64 vector of the rows; update needs a pair")
    coef = cupy.empty(count)
    _lbfgs_gram_pass(vectors, True, coef, products, X if update else None)
    lanes, columns = row_layout(r, G.itemsize)
    kernel(f"lbfgs_tangent_combine_kernel<{count}, {lanes}, {columns}, {ftype}>")(grid(n, lanes), (BLOCK,), (
        *_vector_args(vectors), X, squares, coef, out, np.int64(n), np.int32(r)))
    return out


def lbfgs_gram(vectors, out):
    """The upper triangle of the Gram matrix of ``vectors`` (at most 9), row by row, in ``out``, in one pass."""
    _lbfgs_gram_pass(vectors, False, out, out)  # without the recursion the kernel writes no products
    return out


def _line_search_pass(what: str, kernel_name: str, scalars: int, sums: int, AW, Avals, b, lam, R, D, CD, out,
                      constants=()):
    """Checks the arguments of a line search's scalars and launches the kernel ``kernel_name``: one reduction over
    the m constraints and the n r factor entries, ``sums`` partial sums per block, ``scalars`` entries written to
    ``out``; ``constants`` go between lam and m (the ALM line search's rho)."""
    m, L = Avals.size, R.size
    arrays = (AW, Avals, b, lam, R, D, CD, out)
    if any(not x.flags.c_contiguous or x.dtype != np.float64 for x in arrays) or AW.shape != (m, 2) \
            or D.size != L or CD.size != L or b.size != m or lam.size != m or out.size != scalars:
        raise ValueError(f"{what}: inconsistent or non-contiguous float64 arguments")
    blocks = _reduce_grid(max(m, L))
    partial = cupy.empty(blocks * sums)
    kernel(kernel_name)((blocks,), (REDUCE_THREADS,), (
        AW, Avals, b, lam, *constants, np.int64(m), R, D, CD, np.int64(L), partial, _ticket(), out))
    return out


def line_search_products(AW, Avals, b, lam, rho, R, D, CD, out):
    """The 9 scalars of the exact line search in ``out`` (see ``CpuKernels.line_search_products``), as one
    reduction kernel."""
    return _line_search_pass("line_search_products", "line_search_kernel", LINE_SEARCH_SCALARS, LINE_SEARCH_SCALARS,
                             AW, Avals, b, lam, R, D, CD, out, constants=(np.float64(rho),))


def sphere_line_search_products(AW, Avals, b, lam, R, D, CD, out):
    """:meth:`GpuKernels.sphere_line_search_products` as one reduction kernel."""
    return _line_search_pass("sphere_line_search_products", "sphere_line_search_kernel", SPHERE_SCALARS, SPHERE_SUMS,
                             AW, Avals, b, lam, R, D, CD, out)


def remove_normal(Z, R, size, normal, multiplier=None, weight=0.0):
    """:meth:`GpuKernels.remove_normal`: one reduction (with the multiplier's update in its epilogue), one update."""
    if any(not x.flags.c_contiguous or x.dtype != np.float64 for x in (Z, R, normal)) or Z.shape != R.shape \
            or normal.size != 1 or (multiplier is not None and multiplier.size != 1):
        raise ValueError("remove_normal: inconsistent or non-contiguous float64 arguments")
    blocks = _reduce_grid(Z.size)
    kernel("sphere_normal_kernel")((blocks,), (REDUCE_THREADS,), (
        Z, R, np.int64(Z.size), np.float64(size), cupy.empty(blocks), _ticket(), normal, multiplier,
        np.float64(weight)))
    _SUBTRACT_ALONG(normal, R, Z)
    return Z


ROWS_PER_TILE = 8  # rows of V per tile of the Gram-Schmidt coefficients (sums held in registers per thread)
MAX_ROW_TILES = 1024  # tickets kept per device: V of up to 8192 rows
ROW_BLOCKS_PER_SM = 8  # the Gram-Schmidt kernels' grid cap: their loads in flight, not their partial sums, limit them
_ROW_TICKETS: dict = {}  # device id -> MAX_ROW_TILES uint32 tickets (always left at zero; never reallocated,
#                           as recorded graphs hold their address)


def _row_tickets():
    device_id = cupy.cuda.Device().id
    if device_id not in _ROW_TICKETS:
        _ROW_TICKETS[device_id] = cupy.zeros(MAX_ROW_TILES, dtype=np.uint32)
    return _ROW_TICKETS[device_id]


def _row_grid(n: int, tiles: int = 1) -> int:
    """Blocks per tile of the Gram-Schmidt kernels over vectors of n entries."""
    cap = ROW_BLOCKS_PER_SM * multiprocessors(cupy.cuda.Device().id) // tiles
    return max(1, min(-(-n // REDUCE_THREADS), cap))


def rows_dot(V, k: int, w, out, stride: int = 1):
    """out[j * stride] = V[j] . w for j < k (V C-ordered, n columns; ``out`` a view whose pointer is entry 0)."""
    n = V.shape[1]
    tiles = -(-k // ROWS_PER_TILE)
    if tiles > MAX_ROW_TILES:
        raise ValueError(f"rows_dot: at most {MAX_ROW_TILES * ROWS_PER_TILE} rows, got {k}")
    blocks = _row_grid(n, tiles)
    partial = cupy.empty(tiles * blocks * ROWS_PER_TILE)
    kernel(f"rows_dot_kernel<{ROWS_PER_TILE}>")((blocks, tiles), (REDUCE_THREADS,), (
        V, w, np.int64(n), np.int32(k), partial, _row_tickets(), out, np.int64(stride)))


def rows_subtract(V, k: int, c, w, stride: int = 1, add=None, add_stride: int = 1):
    """w -= V[:k]' c (c_j at c[j * stride]) in place; with ``add``, also add[j * add_stride] += c_j."""
    n = V.shape[1]
    kernel("rows_subtract_kernel")((_row_grid(n),), (REDUCE_THREADS,), (
        V, c, np.int64(stride), np.int64(n), np.int32(k), w, add, np.int64(add_stride)))


def gram_schmidt_pass(V, k: int, w, coefficients, stride: int = 1, add=None, add_stride: int = 1):
    """One classical Gram-Schmidt pass against V[:k]: ``coefficients`` (entry j at j * stride) = V[:k] w, then
    w -= V[:k]' coefficients; with ``add``, add[j * add_stride] += coefficient j as well."""
    rows_dot(V, k, w, coefficients, stride)
    rows_subtract(V, k, coefficients, w, stride, add, add_stride)


LANCZOS_MAX_STEPS = 64  # lanczos.cu's LANCZOS_MAX_STEPS: the kernel's shared coefficients


def lanczos_tridiagonals(stack, start, steps: int, breakdown: float):
    """:meth:`CpuKernels.lanczos_tridiagonals`: one launch, a block of threads per matrix of the stack."""
    count, n = start.shape
    if stack.shape != (count, n, n) or not 0 <= steps <= min(n, LANCZOS_MAX_STEPS) \
            or stack.dtype != np.float64 or start.dtype != np.float64:
        raise ValueError("lanczos_tridiagonals: inconsistent arguments")
    alphas, betas = cupy.empty((count, steps)), cupy.empty((count, steps))
    if count and steps:
        basis = cupy.empty((count, steps + 1, n))
        kernel("lanczos_tridiagonal_kernel")((count,), (REDUCE_THREADS,), (
            cupy.ascontiguousarray(stack), cupy.ascontiguousarray(start), np.int64(n), np.int32(steps),
            np.float64(breakdown), basis, alphas, betas))
    return alphas, betas


def norm_into(w, out):
    """out[0] = ||w||_2 (deterministic)."""
    blocks = _reduce_grid(w.size)
    partial = cupy.empty(blocks)
    kernel("norm_kernel")((blocks,), (REDUCE_THREADS,), (w, np.int64(w.size), partial, _ticket(), out))


def _row_arrays(X, *others, dtypes=(np.float64, np.float32)):
    """Check that the factors of a row kernel are C-contiguous device arrays of one 2-D shape and one of ``dtypes``
    (the same for all); returns (n, r, the C type)."""
    for A in (X, *others):
        if not isinstance(A, cupy.ndarray) or A.dtype != X.dtype or X.dtype not in dtypes \
                or not A.flags.c_contiguous or A.shape != X.shape or A.ndim != 2:
            kinds = " or ".join(np.dtype(d).name for d in dtypes)
            raise ValueError(f"the row kernels take C-contiguous {kinds} cupy arrays of one (n x r) shape and type")
    return X.shape + (VALUE_TYPES[X.dtype],)


def wide_dot(x, y):
    """<x, y> summed in float64 as a 0-d device array (no synchronisation), for arrays of one type."""
    return WIDE_DOT(x, y)


def row_dots(U, V):
    """:meth:`GpuKernels.row_dots` in one pass."""
    U, V = cupy.ascontiguousarray(U), cupy.ascontiguousarray(V)
    n, r, _ = _row_arrays(U, V, dtypes=(np.float64,))
    out = cupy.empty(n)
    return _ROW_DOTS(U, V, np.int64(r), out) if n else out


def sphere_tangent(Z, X, squares, scale, out):
    """:meth:`GpuKernels.sphere_tangent`."""
    n, r, ftype = _row_arrays(Z, X, out)
    lanes, columns = row_layout(r, X.itemsize)
    kernel(f"sphere_tangent_kernel<{lanes}, {columns}, {ftype}>")(grid(n, lanes), (BLOCK,), (
        Z, X, squares, np.float64(scale), out, np.int64(n), np.int32(r)))
    return out


def sphere_retract(X, D, tau, roots, out):
    """:meth:`GpuKernels.sphere_retract` (out float64 or float32, whatever X's type)."""
    n, r, ftype = _row_arrays(X, D)
    _, _, gtype = _row_arrays(out)
    if out.shape != X.shape:
        raise ValueError(f"sphere_retract: out has shape {out.shape}, the factor {X.shape}")
    lanes, columns = row_layout(r, X.itemsize)
    kernel(f"sphere_retract_kernel<{lanes}, {columns}, {ftype}, {gtype}>")(grid(n, lanes), (BLOCK,), (
        X, D, np.float64(tau), roots, out, np.int64(n), np.int32(r)))
    return out


def sphere_decrease(R_new, R, CR_new, CR, squares):
    """:meth:`GpuKernels.sphere_decrease`'s three sums in a device 3-vector, in one pass over the four arrays."""
    n, r, ftype = _row_arrays(R_new, R, CR_new, CR)
    if squares.dtype != np.float64 or squares.shape != (n,):
        raise ValueError("sphere_decrease: squares must be a float64 vector of the factor's rows")
    out = cupy.empty(3)
    lanes, columns = row_layout(r, R.itemsize)
    blocks = _reduce_grid(n * lanes)
    kernel(f"sphere_decrease_kernel<{lanes}, {columns}, {ftype}>")((blocks,), (REDUCE_THREADS,), (
        R_new, R, CR_new, CR, squares, np.int64(n), np.int32(r), cupy.empty(blocks * 3), _ticket(), out))
    return out


PRODUCT_BLOCKS_PER_SM = 8  # the fused product's grid cap: 2048 threads per SM keep its dependent gathers in flight


def sphere_product(indptr, indices, ctype: str, data, R, squares, scale, gradient, product):
    """:meth:`GpuKernels.sphere_product_gradient` on a CSR matrix's arrays (``indptr`` and ``indices`` of the C index
    type ``ctype``, float64 ``data``): <R, C R> as a device 1-vector, without a synchronisation."""
    n, r, ftype = _row_arrays(R, gradient, *(() if product is None else (product,)))
    if squares.dtype != np.float64 or squares.shape != (n,) or indptr.size != n + 1:
        raise ValueError("sphere_product_gradient: the matrix's rows and squares must match the factor's rows")
    lanes, columns = row_layout(r, R.itemsize)
    cap = PRODUCT_BLOCKS_PER_SM * multiprocessors(cupy.cuda.Device().id)
    blocks = max(1, min(-(-n * lanes // REDUCE_THREADS), cap))
    objective = cupy.empty(1)
    keep = product is not None
    kernel(f"sphere_product_kernel<{ctype}, {lanes}, {columns}, {ftype}, {'true' if keep else 'false'}>")(
        (blocks,), (REDUCE_THREADS,), (indptr, indices, data, R, squares, np.float64(scale), gradient,
                                       product if keep else gradient, np.int64(n), np.int32(r), cupy.empty(blocks),
                                       _ticket(), objective))
    return objective


def ensure_tickets() -> None:
    """Creates the current device's tickets now (before a graph capture: an array allocated from a recording's
    private pool would die with the recording)."""
    _ticket(), _row_tickets()
