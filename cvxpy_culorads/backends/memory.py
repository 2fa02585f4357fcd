"""Memory decisions in one place: what a solve, a wider factor, a Lanczos basis and the interior-point method's
dense work need, and whether it fits in the memory the backend reports free (``Backend.free_memory``: the GPU's
free memory, or on the CPU the host memory this process may still use), decided before anything is allocated.

Each estimate's constants are calibrated on one GPU model with CuPy's memory pool (decision record
"device-memory-estimates"); calibrating for another device means changing them here. They serve the CPU as upper
bounds. Where ``backend.free_memory()`` is None (unknown) everything fits.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["DENSE_LIMIT", "fitting_rank", "estimate_device_bytes", "widening_fits", "certificate_reserve",
           "affordable_lanczos_steps", "deflation_fits", "route_entries", "interior_point_routes",
           "interior_point_work_bytes", "interior_point_fits"]

# n_rows x r arrays held at once in the phases, counting CuPy's pool: factor, gradient, step, L-BFGS pairs, C R,
# C D (phase I); U, V, CG vectors (phase II); a split Riemannian phase's halo exchange adds its buffers. With
# POOL_MARGIN it covers the most a phase was measured to hold (decision record "phase-memory-and-n-3e8")
FACTOR_ARRAYS = 12
BUILD_BYTES = 96  # per entry of a symmetric pattern while it is sorted: coordinates, keys, order, permuted copies
# blocks CuPy's pool keeps for reuse, as a factor on the bytes counted (decision record "device-memory-estimates")
POOL_MARGIN = 1.15
# A Lanczos cycle keeps its whole basis (steps x n) and, at a restart, the kept Ritz vectors (a third as many): at
# n = 1e8 sixty vectors are 48 GB. Both may take this share of the free device memory, and the cycle has no fewer
# than MIN_LANCZOS_STEPS vectors (more restarts, same answer).
LANCZOS_MEMORY_SHARE, MIN_LANCZOS_STEPS = 0.5, 20
DENSE_LIMIT = 1000  # blocks up to this order get a dense eigen-decomposition instead (``certify/certificates.py``)
KEPT_RITZ_SHARE = 3  # a restart keeps steps // 3 Ritz vectors


def _factor_arrays_bytes(n_rows: int, columns: int) -> int:
    """Bytes of the phases' FACTOR_ARRAYS float64 arrays of n_rows x ``columns``."""
    return FACTOR_ARRAYS * 8 * n_rows * columns


def estimate_device_bytes(problem, layout, rank: int) -> int:
    """An estimate of the memory a solve needs on its device (the GPU, or the host) at the given rank: the
    operator's build (sorting 64-bit keys over the larger symmetric pattern) or its arrays plus the phases' factor
    arrays, with a margin for the memory pool (``POOL_MARGIN``, from measured peaks: decision record
    "device-memory-estimates"). The Lanczos basis of the certificates is not counted: it is sized to the memory left
    (``certify/certificates.py``)."""
    nnz_A = problem.nnz + layout.n_lp
    c_symmetric = 2 * (sum(c[0].size for c in problem.C_coords) + layout.n_lp)  # entries of C's CSR
    a_symmetric = 2 * nnz_A  # entries of the pattern of A*(y), at most
    build = BUILD_BYTES * max(c_symmetric, a_symmetric)
    operator = 12 * c_symmetric + 2 * 12 * nnz_A + 24 * a_symmetric  # C; A_fold, At_raw; S with its gather
    # low-rank factors: the objective's and the constraints' (dense at worst)
    term_columns = sum(t.rank for t in problem.C_low_rank if t is not None) + sum(
        t.term.rank for t in problem.A_low_rank if t.term is not None)
    operator += 8 * layout.n_rows * term_columns
    factors = _factor_arrays_bytes(layout.n_rows, max(rank, 1))
    return int(POOL_MARGIN * max(build, operator + factors))


def widening_fits(backend, layout, old_width: int, new_width: int) -> bool:
    """Whether the phases' factor arrays fit at ``new_width`` columns beside the certificates' shortest Lanczos
    cycle (``certificate_reserve``) in the memory still free plus the factor's own (``old_width`` columns, which the
    wider factor replaces); always where the free memory is unknown. The arrays the phases held at the old width are
    not counted as free: between phases most are released, and a wider factor that fits only by reusing them can
    run the device out of memory; the reserve keeps room for the next measurement's eigensolver (decision records
    "riemannian-starting-rank" and "escape-memory-check"). A rank increase that would not fit is skipped instead of
    failing inside CUDA."""
    free = backend.free_memory()
    n_rows = layout.n_rows
    need = POOL_MARGIN * _factor_arrays_bytes(n_rows, new_width) + certificate_reserve(layout)
    return free is None or need <= free + 8 * n_rows * old_width


def certificate_reserve(layout) -> float:
    """Bytes the certificates' shortest Lanczos cycle needs on the largest block that takes Lanczos (zero where
    every block gets a dense eigen-decomposition)."""
    large = [n for n in layout.sizes if n > DENSE_LIMIT]
    return MIN_LANCZOS_STEPS * _lanczos_step_bytes(max(large, default=0))


def fitting_rank(problem, layout, rank: int, narrowest: int, backend) -> int:
    """The initial rank to start from, checked before anything is allocated: ``rank`` when the solve fits in the free
    memory at it (``estimate_device_bytes``; always where the free memory is unknown); else the widest rank from
    ``narrowest`` up that fits with the certificates' shortest Lanczos cycle beside it (a start that fills the memory
    leaves the dual certificate none: decision record "device-memory-estimates"); else ``narrowest`` if the solve
    fits there; else a MemoryError that names the estimate and the free memory. (Rank growth is checked when it
    happens, ``widening_fits``.)"""
    free = backend.free_memory()
    if free is None or estimate_device_bytes(problem, layout, rank) <= free:
        return rank
    room = free - certificate_reserve(layout)
    low, high = narrowest - 1, rank  # the widest r in [narrowest, rank) with estimate(r) <= room, if any
    while high - low > 1:
        middle = (low + high) // 2
        if estimate_device_bytes(problem, layout, middle) <= room:
            low = middle
        else:
            high = middle
    if low >= narrowest:
        return low
    need = estimate_device_bytes(problem, layout, narrowest)
    if need <= free:
        return narrowest
    elsewhere = "a machine" if backend.on_host else "device='cpu', a device"
    raise MemoryError(
        f"{problem.name}: the solve needs about {_in_units(need)} of {backend.memory} at its initial rank "
        f"{narrowest} (estimated before allocating) but {_in_units(free)} are free; use {elsewhere} with more "
        "memory, a smaller rank (setting 'rank') or a smaller problem")


def _in_units(size: float) -> str:
    """A number of bytes in binary units, three digits: "1.5 KiB", "22.4 GiB"."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:.3g} TiB"


DEFLATION_ARRAYS = 3  # a deflated eigenvalue problem's n x q arrays: the orthonormal range, S Q and a product


def affordable_lanczos_steps(backend, n: int) -> int:
    """The longest Lanczos cycle whose basis fits the free memory (no bound where it is unknown)."""
    free = backend.free_memory()
    return n if free is None else max(MIN_LANCZOS_STEPS, int(LANCZOS_MEMORY_SHARE * free / _lanczos_step_bytes(n)))


def _lanczos_step_bytes(n: int) -> float:
    """Bytes of one step of a Lanczos cycle of order n: its basis vector and its share of the kept Ritz vectors."""
    return 8 * n * (1 + 1 / KEPT_RITZ_SHARE)


def deflation_fits(backend, n: int, q: int) -> bool:
    """Whether the n x q arrays of an eigenvalue problem deflated against a q-dimensional range fit in half the
    free memory (the Lanczos basis takes what is left; always where the free memory is unknown)."""
    free = backend.free_memory()
    return free is None or DEFLATION_ARRAYS * 8 * n * q <= LANCZOS_MEMORY_SHARE * free


# Sizes up to which the interior-point method may run at all; within them its estimated time decides (``costs.py``)
# and its memory must fit (``interior_point_work_bytes``)
INTERIOR_POINT_MAX_CONSTRAINTS = 40000  # the dense m x m Schur complement and its Cholesky factor: 13 GB each
INTERIOR_POINT_MAX_BLOCK_ORDER = 4000  # dense inverse, Cholesky and eigenvalue problems of this order per iteration
# float64 entries of one band of a block's positions x positions Schur matrix built at once (``_Block.schur``): large
# enough to be one long kernel on a GPU, small enough that the four a band takes are a few hundred MB
INTERIOR_POINT_BAND_ENTRIES = 2 ** 24
# Consecutive blocks that the method holds as one block-diagonal matrix, up to this order: an iteration makes about a
# dozen small LAPACK and NumPy calls per block (inverses, Cholesky factors, step-length eigenvalues), each costing
# microseconds of dispatch for a few hundred flops, while the merged matrix's cubic cost is still negligible
INTERIOR_POINT_GROUP_ORDER = 32


# Flops of the dense route's GEMMs (X A_j Z: 4 n^3 per constraint) that take as long as one entry of the positions
# route's gathered products: 5.0 s for 3.1e7 entries against 2.7 s for 1.1e10 flops on rose13, 0.28 s for 3.1e6
# against 8.0 s for 7.2e10 on trto3 (2-core CPU; decision record "interior-point-route")
DENSE_ROUTE_FLOPS_PER_ENTRY = 600


def route_entries(positions: int, constraints: int, n: int) -> tuple[bool, int]:
    """(whether the positions route is the cheaper, the cheaper route's work in entries of the positions route:
    |positions|^2 gathered products, or the dense route's 4 m_k n^3 GEMM flops at ``DENSE_ROUTE_FLOPS_PER_ENTRY``)."""
    by_positions, dense = positions * positions, 4 * constraints * n ** 3 // DENSE_ROUTE_FLOPS_PER_ENTRY
    return by_positions <= dense, min(by_positions, dense)


def _route_memory(positions: int, constraints: int, n: int) -> int:
    """Entries of a block's Schur route's arrays: W = K A' (positions x m_k) and four bands of K, or W, the dense
    constraint matrices and a band of their products X A_j Z."""
    band = INTERIOR_POINT_BAND_ENTRIES + n * n
    if route_entries(positions, constraints, n)[0]:
        return positions * constraints + 4 * min(positions * positions, band)
    return positions * constraints + constraints * n * n + 2 * min(constraints * n * n, band)


def interior_point_work_bytes(problem) -> int | None:
    """An estimate of the method's memory (the m x m Schur complement, its factor and a copy; each block's Schur
    route and a score of n_k x n_k iterates and directions), or None when the problem is beyond its size limits."""
    too_large = any(n > INTERIOR_POINT_MAX_BLOCK_ORDER for n in problem.block_sizes)
    if problem.m > INTERIOR_POINT_MAX_CONSTRAINTS or too_large:
        return None
    entries = 3 * problem.m ** 2 + 4 * problem.n_lp
    entries += sum(_route_memory(*shape) + 20 * shape[2] ** 2 for shape in _group_shapes(problem))
    return 8 * entries


def interior_point_groups(sizes) -> list[list[int]]:
    """The PSD blocks (indices, consecutive) that the interior-point method holds together as one block-diagonal
    matrix: groups of total order up to ``INTERIOR_POINT_GROUP_ORDER``, a larger block alone."""
    groups, order = [], math.inf
    for k, n in enumerate(sizes):
        if order + n > INTERIOR_POINT_GROUP_ORDER:
            groups.append([])
            order = 0
        groups[-1].append(k)
        order += n
    return groups


def _group_shapes(problem) -> list[tuple[int, int, int]]:
    """Per group of blocks (:func:`interior_point_groups`): the positions its constraints touch, the constraints
    touching it, its order. The method sees low-rank terms expanded (only small problems reach it)."""
    problem = problem.expanded()
    out = []
    for members in interior_point_groups(problem.block_sizes):
        coefficients = [problem.A_coords[k] for k in members]
        positions = sum(np.unique(c.row * n + c.col).size
                        for c, n in zip(coefficients, (problem.block_sizes[k] for k in members)))
        constraints = np.unique(np.concatenate([c.con for c in coefficients])).size
        out.append((positions, constraints, sum(problem.block_sizes[k] for k in members)))
    return out


def interior_point_routes(problem) -> list[tuple[int, int]]:
    """Per group of blocks (:func:`interior_point_groups`), its order and the entries of the interior-point method's
    Schur-complement work (its smaller route, :func:`route_entries`)."""
    return [(n, route_entries(positions, constraints, n)[1]) for positions, constraints, n in _group_shapes(problem)]


def interior_point_fits(problem) -> bool:
    """Whether the problem is within the interior-point method's size limits (the driver offers it only such
    problems, ``Settings.lorads.interior_point_handover``; whether it starts is the cost model's estimate, whether it
    runs the free memory's)."""
    return interior_point_work_bytes(problem) is not None
