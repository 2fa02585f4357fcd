"""The CVXPY solver ``CULORADS``: CVXPY's conic standard form in, an :class:`SDPProblem` out, and back.

CVXPY hands a solver ``min c'x s.t. A x + s = b, s in K`` with ``x`` free and ``K`` a product of zero,
nonnegative and √2-scaled PSD cones (upper triangle, column-major); with ``DIR_CONE_KINDS`` it first
moves PSD and nonnegative *variables* out of the slack rows into "direct cones" on entries of ``x``.
:func:`to_sdp_problem` rewrites that form, or for a model in LMI form its dual, as the engine's ``min sum <C_k, X_k> +
c_lp'x_lp s.t. sum <A_ik, X_k> + A_lp x_lp = b, X_k PSD, x_lp >= 0`` (see its docstring for how each part maps) and
returns a :class:`SolutionMap` (:class:`DualMap`) that turns the engine's :class:`Result` back into CVXPY's status,
``x``, row duals and direct-cone duals; :class:`CULORADS` wires both into CVXPY, and :func:`register` makes
``problem.solve(solver="CULORADS")`` find it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import cvxpy.settings as s
import numpy as np
import scipy.sparse as sp
from cvxpy.constraints import ExpCone, NonNeg, PowCone3D, PowConeND, SvecPSD, Zero
from cvxpy.error import SolverError
from cvxpy.reductions.solution import Solution, failure_solution
from cvxpy.reductions.solvers import defines as solver_defines
from cvxpy.reductions.solvers import utilities
from cvxpy.reductions.solvers.conic_solvers.conic_solver import ConicSolver
from cvxpy.reductions.solvers.solver import expand_cones
from cvxpy.utilities.psd_utils import TriangleKind

from cvxpy_culorads.problem.sdp import SDPProblem
from cvxpy_culorads.result import Result, Status
from cvxpy_culorads.settings import Settings

__all__ = ["CULORADS", "SolutionMap", "DualMap", "register", "to_sdp_problem"]

# ExtractDirectCones (cvxpy >= 1.9.3, the version pyproject.toml requires) hands PSD and nonnegative variables
# over as they are; with DIR_CONE_KINDS empty, to_sdp_problem finds the same blocks in the slack rows itself.
_DIRECT_CONE_KINDS = frozenset({"psd_triangle", "nonneg"})

_SQRT2 = np.sqrt(2.0)

# Cones that cvxpy cannot rewrite into Zero/NonNeg/SvecPSD, named after the atoms that create them.
_CONE_DESCRIPTIONS = {
    ExpCone: "exponential cones (from exp, log, entr, log_sum_exp, ...)",
    PowCone3D: "power cones (from power, geo_mean, pnorm, ...)",
    PowConeND: "power cones (from power, geo_mean, pnorm, ...)",
}

CITATION = r"""@article{han2024culorads,
  title   = {Accelerating Low-Rank Factorization-Based Semidefinite Programming Algorithms on {GPU}},
  author  = {Han, Qiushi and Lin, Zhenwei and Liu, Hanwen and Chen, Caihua and Deng, Qi and Ge, Dongdong
             and Ye, Yinyu},
  journal = {arXiv preprint arXiv:2407.15049},
  year    = {2024}
}

@article{han2024lorads,
  title   = {Low-Rank {ADMM} Splitting Approaches for Semidefinite Programming},
  author  = {Han, Qiushi and Li, Chenxi and Lin, Zhenwei and Chen, Caihua and Deng, Qi and Ge, Dongdong
             and Liu, Huikang and Ye, Yinyu},
  journal = {arXiv preprint arXiv:2403.09133},
  year    = {2024}
}
"""


def _svec_positions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Matrix (row, col) of each entry of an upper-triangle, column-major svec of order n."""
    lower_rows, lower_cols = np.tril_indices(n)  # row-major lower = column-major upper, transposed
    return lower_cols, lower_rows


def _svec_scale(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The svec factor of each position: 1 on the diagonal, √2 off it."""
    return np.where(rows == cols, 1.0, _SQRT2)


@dataclass
class SolutionMap:
    """How an engine :class:`Result` maps back to CVXPY's standard form (made by :func:`to_sdp_problem`).

    Index arrays refer to entries of CVXPY's ``x`` (``*_x``) or rows of its ``A`` (``*_rows``).
    """

    num_rows: int
    objective: np.ndarray  # c
    kept_constraints: sp.csc_array  # the rows of A that became the engine's equalities
    kept_rows: np.ndarray
    psd_x: list  # per PSD variable block: the entries of x holding its svec, in svec order
    lp_x: np.ndarray  # entries of x that are nonnegative variables (the head of the LP block)
    num_row_slacks: int  # nonnegative slacks of inequality rows (after lp_x in the LP block)
    free_x: np.ndarray  # free entries of x, split as x+ - x- (the tail of the LP block)
    removed_rows: np.ndarray  # selection rows "-coef * x[removed_x] + s = 0" that became variable bounds
    removed_x: np.ndarray
    removed_coef: np.ndarray
    direct_cones: list  # (constraint id, entries of x, svec factors) per cvxpy DirectCone

    def primal(self, result: Result) -> np.ndarray:
        """CVXPY's ``x``: the upper triangles of X_k = R_k R_k', the LP variables and x+ - x-."""
        x = np.zeros(self.objective.size)
        for x_index, R in zip(self.psd_x, result.factors):
            rows, cols = _svec_positions(R.shape[0])
            X = R @ R.T  # cvxpy needs every entry anyway; one GEMM beats gathering row products
            x[x_index] = X[rows, cols]
        x_lp = np.asarray(result.x_lp, dtype=np.float64)
        x[self.lp_x] = x_lp[:self.lp_x.size]
        free_start = self.lp_x.size + self.num_row_slacks
        positive = x_lp[free_start:free_start + self.free_x.size]
        negative = x_lp[free_start + self.free_x.size:]
        x[self.free_x] = positive - negative
        return x

    def status(self, status: Status) -> Status:
        """The engine's status, which is the CVXPY problem's."""
        return status

    def value(self, result: Result) -> float:
        """CVXPY's ``c'x`` at :meth:`primal`."""
        return result.primal_objective

    def duals(self, result: Result) -> tuple[np.ndarray, dict]:
        """CVXPY's row duals and direct-cone duals from the engine's multipliers (:meth:`duals_of`)."""
        return self.duals_of(result.dual)

    def certificate(self, result: Result) -> tuple[np.ndarray, dict]:
        """CVXPY's certificate of infeasibility from the engine's Farkas ray (``result.certificate``)."""
        return self.duals_of(result.certificate.multipliers, ray=True)

    def duals_of(self, lam, ray: bool = False) -> tuple[np.ndarray, dict]:
        """CVXPY's row duals ``y`` (``c + A'y = 0``) and the duals of its direct cones by constraint id.

        With ``lambda`` the engine's multipliers, every kept row has ``y = -lambda`` (so inequality and
        LMI rows get the engine's dual slacks of their slack variables), and the dual slack of every
        other entry of ``x`` is ``w = c - A_kept' lambda``, read in the direct cones' svec scaling.
        With ``ray``, ``lam`` is a Farkas ray and c is taken as 0: ``y`` is then CVXPY's certificate of
        infeasibility (``A'y = 0``, ``b'y < 0``, ``y`` in the dual cone).
        """
        lam = np.asarray(lam, dtype=np.float64)
        objective = np.zeros_like(self.objective) if ray else self.objective
        reduced_cost = objective - self.kept_constraints.T @ lam
        y = np.zeros(self.num_rows)
        y[self.kept_rows] = -lam
        y[self.removed_rows] = reduced_cost[self.removed_x] / self.removed_coef
        by_constraint: dict[int, list] = {}
        for constr_id, x_index, scale in self.direct_cones:  # a batched PSD constraint has several
            by_constraint.setdefault(constr_id, []).append(reduced_cost[x_index] / scale)
        return y, {cid: np.concatenate(parts) for cid, parts in by_constraint.items()}


# the engine's statuses of a model's dual as the model's: an infeasible dual means an unbounded model and back
_DUAL_STATUS = {Status.INFEASIBLE: Status.UNBOUNDED, Status.UNBOUNDED: Status.INFEASIBLE,
                Status.INFEASIBLE_INACCURATE: Status.UNBOUNDED_INACCURATE,
                Status.UNBOUNDED_INACCURATE: Status.INFEASIBLE_INACCURATE}


@dataclass
class DualMap:
    """How an engine :class:`Result` of CVXPY's dual ``max -b'y s.t. A'y + c = 0, y in K*`` (made by
    :func:`to_sdp_problem` for a model in LMI form) maps back: the engine's multipliers are CVXPY's ``x`` (its dual
    slack is ``s = b - A x``), its PSD blocks and nonnegative variables are CVXPY's row duals ``y``."""

    num_rows: int
    num_zero: int
    num_nonneg: int

    def status(self, status: Status) -> Status:
        """The model's status from its dual's (``_DUAL_STATUS``)."""
        return _DUAL_STATUS.get(status, status)

    def value(self, result: Result) -> float:
        """CVXPY's ``c'x`` at :meth:`primal`: minus the engine's dual objective ``-c'lambda``."""
        return -result.dual_objective

    def primal(self, result: Result) -> np.ndarray:
        """CVXPY's ``x``: the engine's multipliers."""
        return np.array(result.dual, dtype=np.float64)

    def duals(self, result: Result) -> tuple[np.ndarray, dict]:
        """CVXPY's row duals: the engine's point (no direct cones in LMI form)."""
        return self._rows(result.factors, result.x_lp), {}

    def certificate(self, result: Result) -> tuple[np.ndarray, dict]:
        """CVXPY's certificate of infeasibility: the engine's primal ray (``A'y = 0``, ``b'y < 0``, ``y`` in K*)."""
        return self._rows(result.certificate.factors, result.certificate.x_lp), {}

    def _rows(self, factors, x_lp) -> np.ndarray:
        """``y`` from the blocks X_k = R_k R_k' (as √2-scaled svecs) and the LP block [y_nonneg | y_zero+ | y_zero-]."""
        x_lp = np.asarray(x_lp, dtype=np.float64)
        zero, nonneg = self.num_zero, self.num_nonneg
        y = np.zeros(self.num_rows)
        y[:zero] = x_lp[nonneg:nonneg + zero] - x_lp[nonneg + zero:nonneg + 2 * zero]
        y[zero:zero + nonneg] = x_lp[:nonneg]
        first = zero + nonneg
        for R in factors:
            rows, cols = _svec_positions(R.shape[0])
            y[first:first + rows.size] = (R @ R.T)[rows, cols] * _svec_scale(rows, cols)
            first += rows.size
        return y


class _Variables:
    """The entries of ``x`` that are cone variables, and the rows of ``A`` that said so."""

    def __init__(self, num_x: int, num_rows: int):
        self.owned = np.zeros(num_x, dtype=bool)
        self.psd: list = []  # (order n, entries of x in svec order) per PSD block
        self.nonneg: list = []  # arrays of entries of x that are >= 0
        self.direct_cones: list = []  # (constraint id, entries of x, svec factors) per cvxpy DirectCone
        self.row_x = np.full(num_rows, -1)  # per row "-a x_j + s = 0" taken as a variable: j, else -1
        self.row_coef = np.ones(num_rows)  # and its a

    def take_direct_cones(self, cones) -> None:
        """cvxpy's direct cones: PSD and nonnegative variables already out of the rows."""
        for cone in cones:
            x_index = np.asarray(cone.indices, dtype=np.int64)
            if cone.kind == "psd_triangle":
                n = cone.extras["psd_k"]
                self.psd.append((n, x_index))
                scale = _svec_scale(*_svec_positions(n))
            elif cone.kind == "nonneg":
                self.nonneg.append(x_index)
                scale = np.ones(x_index.size)
            else:
                raise SolverError(f"CULORADS got a direct cone of kind {cone.kind!r} it did not ask for")
            self.direct_cones.append((cone.constr_id, x_index, scale))
            self.owned[x_index] = True

    def take_selection_rows(self, A: sp.csr_array, b: np.ndarray, dims) -> list:
        """Cone rows that merely select free entries of x (cvxpy < 1.9.3, or parameters in A): SvecPSD
        blocks ``-svec(X) + s = 0`` become PSD variables, rows ``-a x_j + s = 0`` (a > 0) nonnegative
        ones. Returns the other SvecPSD blocks, the LMIs, as (order, rows)."""
        single = np.diff(A.indptr) == 1
        col = np.full(A.shape[0], -1)
        col[single] = A.indices[A.indptr[:-1][single]]
        val = np.zeros(A.shape[0])
        val[single] = A.data[A.indptr[:-1][single]]

        lmi_blocks = []
        first_row = dims.zero + dims.nonneg
        for n in dims.psd:
            rows = np.arange(first_row, first_row + n * (n + 1) // 2)
            first_row = rows[-1] + 1
            cols, scale = col[rows], _svec_scale(*_svec_positions(n))
            if (np.any(cols < 0) or np.any(b[rows]) or self.owned[cols].any()
                    or np.unique(cols).size != cols.size
                    or not np.allclose(val[rows], -scale, rtol=1e-12, atol=0)):
                lmi_blocks.append((n, rows))
                continue
            self.psd.append((n, cols))
            self._take_rows(rows, cols, scale)

        rows = np.arange(dims.zero, dims.zero + dims.nonneg)
        rows = rows[(col[rows] >= 0) & (val[rows] < 0) & (b[rows] == 0)]
        rows = rows[~self.owned[col[rows]]]
        _, first = np.unique(col[rows], return_index=True)  # one row per entry; others stay rows
        rows = rows[np.sort(first)]
        self.nonneg.append(col[rows])
        self._take_rows(rows, col[rows], -val[rows])
        return lmi_blocks

    def _take_rows(self, rows, cols, coef) -> None:
        self.row_x[rows] = cols
        self.row_coef[rows] = coef
        self.owned[cols] = True


def to_sdp_problem(data: dict, dualize: bool | None = None) -> tuple[SDPProblem, SolutionMap | DualMap]:
    """Rewrite the data of ``problem.get_problem_data("CULORADS")`` as an :class:`SDPProblem` (``dualize``: None
    solves a model in LMI form as its dual, as below; False never does, True wherever the model is in LMI form).

    How each part of ``A x + s = b`` maps (everything is sparse-matrix algebra, O(nnz(A) + size(x))):

    - PSD variables (cvxpy's PSD direct cones, or SvecPSD rows that are exactly a √2-scaled selection
      of distinct entries of ``x``) become PSD blocks with no extra constraint.
    - Nonnegative variables (nonneg direct cones, or rows ``-a x_j + s = 0``) become LP variables.
    - Zero rows become equalities; inequality rows become equalities with a nonnegative slack; other
      PSD rows (general LMIs) become equalities with a PSD slack block ``S = b - A x`` entry by entry,
      n(n+1)/2 rows per LMI. Declaring matrix variables ``PSD=True`` keeps them out of this path.
    - Entries of ``x`` owned by no cone are free. The engine has only PSD and nonnegative variables,
      so each becomes ``x+ - x-`` with two LP variables: this keeps the primal route that makes
      ``Variable(PSD=True)`` models cheap (m stays the number of user constraints), costs two columns
      per free scalar, and the drift of ``x+`` and ``x-`` along ``x+ = x-`` is invisible to the
      constraints. (Dualizing instead would turn every entry of a PSD variable into an equality.)
      The price: the dual must meet ``c_j = A_j' lambda`` exactly for both halves, which a
      first-order method reaches slowly when LMI-form models have many free scalars.

    A model in LMI form (every entry of ``x`` free, some PSD rows) with fewer entries of ``x`` than rows is solved
    as its dual instead (:func:`_dual_form`, mapped back by :class:`DualMap`): one equality per entry of ``x`` and
    no free splits, where the form above takes one per svec entry and two columns per entry of ``x``. The split
    costs more than its size: without a Slater point (an LMI with a singular constant block, as the fidelity SDP
    of a pure state has) the interior-point method stalls on the primal form 3e-5 to 1e-3 off, and solves the dual
    to tol (decision record "exact-statuses-and-cvxpy-duals").

    PSD blocks come in the order: variable blocks, then LMI slack blocks; the LP block is
    ``[nonnegative variables | inequality slacks | x+ | x-]``. For an svec position p = (r, c) of
    ``x``-entry ``j`` the block matrices are ``A_ik[r, c] = A[i, j] / 2`` off the diagonal and
    ``A[i, j]`` on it (``x_j`` stands for both ``X[r, c]`` and ``X[c, r]``); ``C_k`` likewise from ``c``.
    """
    dims = data[ConicSolver.DIMS]
    if dims.soc or dims.exp or dims.p3d or dims.pnd:
        raise SolverError("CULORADS handles only zero, nonnegative and PSD cones; got the data of "
                          f"another solver? (cone dimensions: {dims})")
    A = sp.csr_array(data[s.A])
    b = np.asarray(data[s.B], dtype=np.float64)
    c = np.asarray(data[s.C], dtype=np.float64)
    num_rows, num_x = A.shape
    num_zero, num_nonneg = dims.zero, dims.nonneg

    variables = _Variables(num_x, num_rows)
    variables.take_direct_cones(data.get("dir_cones", []))
    lmi_blocks = variables.take_selection_rows(A, b, dims)
    lmi_form = bool(lmi_blocks) and not variables.owned.any()
    if lmi_form and (num_x < num_rows if dualize is None else dualize):
        return _dual_form(A, b, c, dims)

    keep = variables.row_x < 0
    kept_rows = np.flatnonzero(keep)
    engine_row = np.cumsum(keep) - 1  # the engine's constraint index of each kept row of A
    A_kept = sp.csc_array(A[kept_rows])
    m = kept_rows.size

    block_sizes, objectives, coefficients = [], [], []
    for n, x_index in variables.psd:
        rows_n, cols_n = _svec_positions(n)
        entry_weight = np.where(rows_n == cols_n, 1.0, 0.5)  # x_j counts X[r, c] and X[c, r]
        block = sp.coo_array(A_kept[:, x_index])
        coefficients.append((block.row, rows_n[block.col], cols_n[block.col],
                             block.data * entry_weight[block.col]))
        values = c[x_index] * entry_weight
        # coordinates, not a sparse matrix: no symmetry check, which is costly on tiny models (decision record
        # "small-sdp-routes")
        nonzero = values != 0
        objectives.append((rows_n[nonzero], cols_n[nonzero], values[nonzero]))
        block_sizes.append(n)
    for n, rows in lmi_blocks:
        rows_n, cols_n = _svec_positions(n)
        coefficients.append((engine_row[rows], rows_n, cols_n, 1.0 / _svec_scale(rows_n, cols_n)))
        objectives.append(None)
        block_sizes.append(n)

    lp_x = np.concatenate(variables.nonneg)  # never empty: the selection rows add a part
    free_x = np.flatnonzero(~variables.owned)
    removed_rows = np.flatnonzero(variables.row_x >= 0)
    slack_rows = engine_row[kept_rows[(kept_rows >= num_zero) & (kept_rows < num_zero + num_nonneg)]]
    slacks = sp.csc_array((np.ones(slack_rows.size), (slack_rows, np.arange(slack_rows.size))),
                          shape=(m, slack_rows.size))
    A_free = A_kept[:, free_x]
    A_lp = sp.hstack([A_kept[:, lp_x], slacks, A_free, -A_free], format="csc")
    c_lp = np.concatenate([c[lp_x], np.zeros(slack_rows.size), c[free_x], -c[free_x]])

    problem = SDPProblem(b[kept_rows], objectives, coefficients, block_sizes=block_sizes,
                         c_lp=c_lp, A_lp=A_lp, name="cvxpy")
    mapping = SolutionMap(
        num_rows=num_rows, objective=c, kept_constraints=A_kept, kept_rows=kept_rows,
        psd_x=[x_index for _, x_index in variables.psd], lp_x=lp_x, num_row_slacks=slack_rows.size,
        free_x=free_x, removed_rows=removed_rows, removed_x=variables.row_x[removed_rows],
        removed_coef=variables.row_coef[removed_rows], direct_cones=variables.direct_cones)
    return problem, mapping


def _dual_form(A: sp.csr_array, b: np.ndarray, c: np.ndarray, dims) -> tuple[SDPProblem, DualMap]:
    """CVXPY's dual ``min b'y s.t. A'y = -c, y in K*`` as an :class:`SDPProblem`: one equality per entry of ``x``,
    the PSD rows' duals as PSD blocks (the √2-scaled svec as for LMI slacks), the inequality rows' as nonnegative
    variables and the equality rows' as y+ - y-."""
    columns = sp.csc_array(A.T)  # column p: row p of A; row j: the engine's equality of x_j
    zero, nonneg = dims.zero, dims.nonneg
    block_sizes, objectives, coefficients = [], [], []
    first = zero + nonneg
    for n in dims.psd:
        rows_n, cols_n = _svec_positions(n)
        scale = _svec_scale(rows_n, cols_n)
        block = sp.coo_array(columns[:, first:first + rows_n.size])
        coefficients.append((block.row, rows_n[block.col], cols_n[block.col], block.data / scale[block.col]))
        values = b[first:first + rows_n.size] / scale
        nonzero = values != 0
        objectives.append((rows_n[nonzero], cols_n[nonzero], values[nonzero]))
        block_sizes.append(n)
        first += rows_n.size
    equalities = columns[:, :zero]
    A_lp = sp.hstack([columns[:, zero:zero + nonneg], equalities, -equalities], format="csc")
    c_lp = np.concatenate([b[zero:zero + nonneg], b[:zero], -b[:zero]])
    problem = SDPProblem(-c, objectives, coefficients, block_sizes=block_sizes, c_lp=c_lp, A_lp=A_lp,
                         name="cvxpy dual")
    return problem, DualMap(num_rows=A.shape[0], num_zero=zero, num_nonneg=nonneg)


def _unsupported_parts(problem_form, supported) -> list[str]:
    """What in the problem CULORADS cannot take, each with the solver to use instead."""
    parts = []
    if problem_form.is_mixed_integer():
        parts.append("integer or boolean variables: use a mixed-integer solver such as SCIP or HiGHS")
    cones, _, _ = expand_cones(set(problem_form.cones()), supported)
    for description in sorted({_CONE_DESCRIPTIONS.get(cone, f"{cone.__name__} constraints")
                               for cone in cones - supported}):
        parts.append(f"{description}: use Clarabel or SCS")
    return parts


class _SolverOutput(NamedTuple):
    """What ``solve_via_data`` hands to ``invert``."""

    result: Result
    mapping: SolutionMap | DualMap
    setup_time: float
    accept_unknown: bool


class CULORADS(ConicSolver):
    """An interface for the cuLoRADS low-rank SDP solver (GPU when available, else CPU).

    All :class:`Settings` are solver options: ``problem.solve(solver="CULORADS", tol=1e-6,
    device="cpu")``. After a solve, ``problem.solver_stats.extra_stats`` is the engine's
    :class:`Result`, whose ``factors`` give X_k = R_k R_k' without forming X (the PSD variable blocks
    come first, in the order cvxpy lists them); for a model solved as its dual (``DualMap``) the Result is the dual's.
    """

    # Solver capabilities.
    MIP_CAPABLE = False
    SUPPORTED_CONSTRAINTS = [Zero, NonNeg, SvecPSD]  # SOC arrives as an LMI: cvxpy rewrites it to PSD
    PSD_TRIANGLE_KIND = TriangleKind.UPPER
    PSD_SQRT2_SCALING = True
    DIR_CONE_KINDS = _DIRECT_CONE_KINDS

    STATUS_MAP = {
        Status.OPTIMAL: s.OPTIMAL,
        Status.INACCURATE: s.OPTIMAL_INACCURATE,
        Status.STALLED: s.SOLVER_ERROR,  # OPTIMAL_INACCURATE with the option accept_unknown=True
        Status.INFEASIBLE: s.INFEASIBLE,
        Status.UNBOUNDED: s.UNBOUNDED,
        Status.INFEASIBLE_INACCURATE: s.INFEASIBLE_INACCURATE,
        Status.UNBOUNDED_INACCURATE: s.UNBOUNDED_INACCURATE,
        Status.TIME_LIMIT: s.USER_LIMIT,
        Status.ITERATION_LIMIT: s.USER_LIMIT,
        Status.INTERRUPTED: s.USER_LIMIT,
        Status.NUMERICAL_ERROR: s.SOLVER_ERROR,
    }

    def name(self):
        """The name of the solver."""
        return "CULORADS"

    def import_solver(self) -> None:
        """Imports the solver."""
        from cvxpy_culorads.solver import driver  # noqa: F401

    def can_solve(self, problem_form) -> bool:
        """Whether the problem suits CULORADS; raises ``SolverError`` saying why not.

        Raising (instead of returning False) replaces cvxpy's bare "cannot solve this problem" with
        the unsupported part and an alternative. cvxpy asks only for solvers the user named (this one
        is not among its default or fallback solvers), so it never interrupts a solver search.
        """
        parts = _unsupported_parts(problem_form, frozenset(self.SUPPORTED_CONSTRAINTS))
        if parts:
            raise SolverError(
                "CULORADS cannot solve this problem: it has " + "; ".join(parts) + ". CULORADS "
                "handles linear and quadratic objectives with linear equalities, inequalities and PSD "
                "constraints (second-order cones and quadratic objectives reach it as LMIs).")
        return super().can_solve(problem_form)

    def apply(self, problem):
        """Returns the solver data (with cvxpy's direct cones) and the data to invert the solution."""
        data, inverse_data = super().apply(problem)
        data["dir_cones"] = list(getattr(problem, "dir_cones", []))
        return data, inverse_data

    def solve_via_data(self, data, warm_start: bool, verbose: bool, solver_opts, solver_cache=None):
        """Converts the data to an :class:`SDPProblem` and runs the engine.

        ``solver_opts`` are :class:`Settings` fields, and ``accept_unknown`` (as in CVXPY's Clarabel interface:
        True reports a STALLED solve's best point as ``optimal_inaccurate`` instead of ``solver_error``); an
        unknown name raises ``ValueError``. With ``warm_start`` the engine starts from the last answer kept in
        ``solver_cache`` (``cvxpy/warm.py``).
        """
        from cvxpy_culorads.cvxpy.warm import CHAIN_KEY, previous_result, remember
        from cvxpy_culorads.solver.driver import solve

        options = {key: value for key, value in solver_opts.items() if key not in ("use_quad_obj", "accept_unknown")}
        accept_unknown = solver_opts.get("accept_unknown", False)
        if not isinstance(accept_unknown, (bool, np.bool_)):
            raise ValueError(f"accept_unknown must be True or False, got {accept_unknown!r}")
        settings = Settings.from_options(verbose=cvxpy_verbose(verbose), **options)
        start = time.perf_counter()
        problem, mapping = to_sdp_problem(data)
        setup_time = time.perf_counter() - start
        result = solve(problem, settings, warm_start=previous_result(solver_cache, CHAIN_KEY, warm_start))
        remember(solver_cache, CHAIN_KEY, result)
        return _SolverOutput(result, mapping, setup_time, bool(accept_unknown))

    def invert(self, solution: _SolverOutput, inverse_data):
        """Returns the solution to the original problem given the inverse_data."""
        result, mapping = solution.result, solution.mapping
        model_status = mapping.status(result.status)
        status = self.STATUS_MAP[model_status]
        if result.status is Status.STALLED and solution.accept_unknown:
            status = s.OPTIMAL_INACCURATE
        attr = {
            s.SOLVE_TIME: result.solve_time,
            s.SETUP_TIME: solution.setup_time,
            s.NUM_ITERS: sum(result.iterations.values()),
            s.EXTRA_STATS: result,
        }
        if status in s.ERROR:
            raise SolverError(failure_message(result))
        if model_status is Status.INFEASIBLE:
            return failure_solution(status, attr, self._dual_values(mapping.certificate(result), inverse_data,
                                                                    ray=True))
        if status not in s.SOLUTION_PRESENT:
            return failure_solution(status, attr)

        dual_vars = self._dual_values(mapping.duals(result), inverse_data)
        primal_vars = {inverse_data[self.VAR_ID]: mapping.primal(result)}
        opt_val = mapping.value(result) + inverse_data[s.OFFSET]
        return Solution(status, opt_val, primal_vars, dual_vars, attr)

    def _dual_values(self, duals: tuple[np.ndarray, dict], inverse_data, ray: bool = False) -> dict:
        """The duals of every constraint by id from CVXPY's row duals and direct-cone duals (of a certificate of
        infeasibility with ``ray``: the inequality rows' duals, >= 0 up to the ray's checked violation, are projected
        onto the nonnegative cone, as a certificate's must lie in it)."""
        row_duals, dual_vars = duals
        dims = inverse_data[ConicSolver.DIMS]
        num_zero = dims.zero
        if ray:
            row_duals[num_zero:num_zero + dims.nonneg] = np.maximum(row_duals[num_zero:num_zero + dims.nonneg], 0.0)
        dual_vars.update(utilities.get_dual_values(
            row_duals[:num_zero], utilities.extract_dual_value, inverse_data[self.EQ_CONSTR]))
        dual_vars.update(utilities.get_dual_values(
            row_duals[num_zero:], utilities.extract_dual_value, inverse_data[self.NEQ_CONSTR]))
        return dual_vars

    def cite(self, data):
        """Returns bibtex citation for the solver.

        Parameters
        ----------
        data : dict
            Data generated via an apply call.
        """
        return CITATION


def failure_message(result: Result) -> str:
    """The ``SolverError`` message of a solve without an answer: CVXPY's own words with the engine's reason."""
    return (f"Solver 'CULORADS' failed: {result.message}. Try another solver, or solve with verbose=True for more "
            "information.")


def cvxpy_verbose(verbose) -> bool:
    """CVXPY's ``verbose`` as a setting: CVXPY takes any truthy value (``verbose=1``); anything but a bool or an
    integer is refused as the setting refuses it."""
    if isinstance(verbose, (bool, np.bool_, int, np.integer)):
        return bool(verbose)
    return Settings.from_options(verbose=verbose).verbose


def register() -> CULORADS:
    """Make ``solve(solver="CULORADS")`` find this solver; calling it again changes nothing.

    cvxpy has no plugin mechanism: it looks names up in ``SOLVER_MAP_CONIC``. The name stays out of
    ``cvxpy.settings.SOLVERS`` (that would forbid ``solve(solver=CULORADS())``) and out of the list
    cvxpy searches when no solver is named, so cvxpy never picks CULORADS unless asked to.
    """
    solver = solver_defines.SOLVER_MAP_CONIC.get("CULORADS")
    if not isinstance(solver, CULORADS):
        solver = CULORADS()
        solver_defines.SOLVER_MAP_CONIC[solver.name()] = solver
    return solver


register()  # importing the interface is registering it: cvxpy_culorads imports it once CVXPY is imported
