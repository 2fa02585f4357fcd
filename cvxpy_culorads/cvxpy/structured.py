"""The structure-aware CVXPY entry point: ``problem.solve(method="culorads")`` reads the expression tree.

CVXPY's chain (``solver="CULORADS"``, ``cvxpy/conic.py``) vectorises every n x n variable into n^2 scalars
and passes each constraint through that vectorisation, so time and memory grow like n^2 before the engine
starts. This reader builds the :class:`SDPProblem` in time and memory proportional to the data instead: every
objective and constraint is a batch of linear functionals on its expression's entries (sparse lists of
(functional, entry, coefficient)), pushed from the root of the expression down to the variables through the
adjoint of each atom, so no intermediate is ever expanded: ``trace(L @ X)`` (CVXPY writes it
``sum(multiply(L, X.T))``) reaches X as the entries of L, ``diag(X) == 1`` as n diagonal entries, and a sum of
all entries of a PSD variable (``sum(X)``, ``trace(J @ X)``) as the rank-one term 1 1' (``lowrank.LowRank``). PSD
variables (``PSD=True``, or a variable constrained ``>> 0`` directly) become the engine's PSD blocks; any other PSD
constraint, an LMI, becomes a block tied entrywise to its expression; the entries of other variables that some
functional touches become nonnegative engine variables (free ones as x+ - x-; entries nothing touches are 0).
What it does not recognise (an atom, a variable attribute, a constraint kind, complex data) falls back to the
chain, with a line in the verbose log naming it, and the answer is then the chain's. Values and duals return in
CVXPY's conventions, except that a dense n x n value above ``max_value_bytes`` is left unset with a warning
(the factor R of X = R R' is in ``solver_stats.extra_stats.factors``). Parameters are read at every solve:
reading is linear in the data, so re-reading all of it costs what re-reading the changed part would.
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass

import cvxpy as cp
import cvxpy.settings as s
import numpy as np
import scipy.sparse as sp
from cvxpy.atoms.affine import wraps
from cvxpy.atoms.affine.add_expr import AddExpression
from cvxpy.atoms.affine.binary_operators import DivExpression, MulExpression, multiply
from cvxpy.atoms.affine.broadcast_to import broadcast_to
from cvxpy.atoms.affine.concatenate import Concatenate
from cvxpy.atoms.affine.conj import conj
from cvxpy.atoms.affine.diag import diag_mat, diag_vec
from cvxpy.atoms.affine.hstack import Hstack
from cvxpy.atoms.affine.index import index, special_index
from cvxpy.atoms.affine.promote import Promote
from cvxpy.atoms.affine.real import real
from cvxpy.atoms.affine.reshape import reshape
from cvxpy.atoms.affine.sum import Sum
from cvxpy.atoms.affine.trace import Trace
from cvxpy.atoms.affine.transpose import transpose
from cvxpy.atoms.affine.unary_operators import NegExpression
from cvxpy.atoms.affine.upper_tri import upper_tri
from cvxpy.atoms.affine.vstack import Vstack
from cvxpy.constraints import PSD, Equality, Inequality, NonNeg, NonPos, Zero
from cvxpy.expressions.leaf import Leaf
from cvxpy.expressions.variable import Variable
from cvxpy.problems.objective import Maximize, Minimize
from cvxpy.problems.problem import SolverStats
from cvxpy.reductions.solution import Solution, failure_solution

from cvxpy_culorads.cvxpy import (
    conic as cvxpy_interface,  # as a module: the hook may import this file while that one is half-imported
)
from cvxpy_culorads.cvxpy import warm as warm_starts
from cvxpy_culorads.problem.lowrank import LowRank, SparsePlusLowRank
from cvxpy_culorads.problem.sdp import SDPProblem
from cvxpy_culorads.result import Result, Status
from cvxpy_culorads.settings import Settings

__all__ = ["solve_structured", "read_problem", "StructuredModel", "Unsupported", "METHOD_NAME",
           "DEFAULT_MAX_VALUE_BYTES"]

METHOD_NAME = "culorads"
# A dense value larger than this is left unset: 2 GiB holds X up to n = 16384 (G67's n = 1e4 takes 0.8 GB)
DEFAULT_MAX_VALUE_BYTES = 2**31
# Atoms that only select, repeat or rearrange entries are read through their own numeric function applied to
# entry numbers, which costs O(size of their arguments): beyond this many entries the reader gives up instead.
GENERIC_SELECTION_LIMIT = 10**7
# A sum spreads each functional over every entry it adds up: beyond this many coefficients the reader gives up.
SPREAD_LIMIT = 10**8
_SELECTIONS = (reshape, Hstack, Vstack, Concatenate, broadcast_to, special_index, upper_tri, index, transpose)
_PASS_THROUGH = (wraps.Wrap, real, conj)  # the identity on real expressions (wraps only assert attributes)
# CVXPY's solve options about its own compilation: the chain takes them, the reader compiles nothing
_CHAIN_COMPILATION_OPTIONS = ("enforce_dpp", "ignore_dpp", "canon_backend")
_UNSUPPORTED_ATTRIBUTES = ("boolean", "integer", "complex", "imag", "hermitian", "diag", "sparsity", "bounds",
                           "pos", "neg")


class Unsupported(Exception):
    """The model has a part the reader does not handle; the message names it."""


# ---------------------------------------------------------------------------------------------- entry maps
def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _broadcast_index(idx: np.ndarray, out_shape: tuple, arg_shape: tuple) -> np.ndarray:
    """The entry of an argument of ``arg_shape`` that NumPy broadcasting puts at entry ``idx`` (column-major) of
    ``out_shape``."""
    if tuple(arg_shape) == tuple(out_shape):
        return idx
    if _size(arg_shape) == 1:
        return np.zeros_like(idx)
    coords = np.unravel_index(idx, out_shape, order="F")[len(out_shape) - len(arg_shape):]
    picked = tuple(c if d > 1 else np.zeros_like(c) for c, d in zip(coords, arg_shape))
    return np.ravel_multi_index(picked, arg_shape, order="F")


def _entries(value, idx: np.ndarray) -> np.ndarray:
    """Entries ``idx`` (column-major) of a constant, dense or sparse."""
    if sp.issparse(value):
        coo = sp.coo_array(value)
        keys = coo.row.astype(np.int64) + np.int64(value.shape[0]) * coo.col
        order = np.argsort(keys)
        keys, data = keys[order], _real(coo.data[order])
        pos = np.minimum(np.searchsorted(keys, idx), max(keys.size - 1, 0))
        return np.where(keys[pos] == idx, data[pos], 0.0) if keys.size else np.zeros(idx.size)
    array = _real(np.asarray(value))
    return np.full(idx.size, array.item()) if array.size == 1 else array.ravel(order="F")[idx]


def _real(array):
    """A dense constant as floats (complex data is for the chain path)."""
    if np.iscomplexobj(array):
        raise Unsupported("complex data")
    return np.asarray(array, dtype=np.float64)


def _matrix(value):
    """A constant as a 2-D float CSR (sparse) or ndarray (dense) matrix."""
    if sp.issparse(value):
        if np.iscomplexobj(value):
            raise Unsupported("complex data")
        return sp.csr_array(value, dtype=np.float64)
    array = _real(np.asarray(value))
    return array.reshape(array.shape + (1,) * (2 - array.ndim)) if array.ndim < 2 else array


def _coo(matrix):
    """(row, col, val) of a sparse or dense 2-D product, zeros dropped."""
    if sp.issparse(matrix):
        coo = sp.coo_array(matrix)
        return coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data
    rows, cols = np.nonzero(matrix)
    return rows.astype(np.int64), cols.astype(np.int64), matrix[rows, cols]


def _grouped_product(group, inner, vals, width, M):
    """Coefficients (group, inner < width, vals) as a matrix with one row per distinct group, times M: the
    group, new inner index and value of each nonzero of the product."""
    keys, position = np.unique(group, return_inverse=True)
    P = sp.csr_array((vals, (position, inner)), shape=(keys.size, width))
    key, new_inner, new_vals = _coo(P @ M)
    return keys[key], new_inner, new_vals


# ---------------------------------------------------------------------------------------------- the reader
def _is_matrix_transpose(expr) -> bool:
    return isinstance(expr, transpose) and expr.ndim == 2 and (expr.axes is None or tuple(expr.axes) == (1, 0))


def _square_variable(expr):
    """The square 2-D variable that ``expr`` is, or whose transpose it is; else None (sum(X') = sum(X))."""
    if _is_matrix_transpose(expr):
        expr = expr.args[0]
    if isinstance(expr, Variable) and expr.ndim == 2 and expr.shape[0] == expr.shape[1]:
        return expr
    return None


def _constant_entry(value):
    """c when the constant ``value`` is a dense array with every entry equal to c (and not 0), else None."""
    if sp.issparse(value) or np.ndim(value) != 2:
        return None
    value = np.asarray(value)
    if not np.isrealobj(value) or value.size == 0:
        return None
    first = float(value.flat[0])
    return first if first != 0.0 and np.all(value == first) else None


class _Reader:
    """Pushes batches of linear functionals on an expression's entries down to its variables.

    A batch is three arrays of equal length: the functional (row), the entry of the expression (column-major
    index) and the coefficient. At a variable the batch is kept (``terms``); at a constant it is applied
    (``constant``, one value per functional). A sum of all entries of a square variable, c sum(X) (also written
    sum(multiply(c J, X)) or trace(c J @ X) with J all ones), is kept as (rows, coefficients) in ``all_entries``
    instead of n^2 coefficients: on a PSD block it is the rank-one term c 1 1' (``lowrank.LowRank``)."""

    def __init__(self, count: int):
        self.terms: dict = defaultdict(list)
        self.all_entries: dict = defaultdict(list)
        self.constant = np.zeros(count)

    def push(self, expr, rows, idx, vals) -> None:
        keep = vals != 0.0
        if not keep.all():
            rows, idx, vals = rows[keep], idx[keep], vals[keep]
        if rows.size == 0:
            return
        if isinstance(expr, Variable):
            self.terms[expr.id].append((rows, idx, vals))
        elif isinstance(expr, Leaf) or expr.is_constant():
            value = expr.value
            if value is None:
                raise Unsupported(f"{expr.name()} has no value")
            self.constant += np.bincount(rows, vals * _entries(value, idx), minlength=self.constant.size)
        elif isinstance(expr, AddExpression):
            for arg in expr.args:
                self.push(arg, rows, _broadcast_index(idx, expr.shape, arg.shape), vals)
        elif isinstance(expr, NegExpression):
            self.push(expr.args[0], rows, idx, -vals)
        elif isinstance(expr, _PASS_THROUGH):
            if not expr.args[0].is_real():
                raise Unsupported(f"{type(expr).__name__} of a complex expression")
            self.push(expr.args[0], rows, idx, vals)
        elif isinstance(expr, multiply):
            self._multiply(expr, rows, idx, vals)
        elif isinstance(expr, DivExpression):
            numerator, denominator = expr.args
            if not denominator.is_constant():
                raise Unsupported("division by a non-constant expression")
            scale = _entries(denominator.value, _broadcast_index(idx, expr.shape, denominator.shape))
            self.push(numerator, rows, _broadcast_index(idx, expr.shape, numerator.shape), vals / scale)
        elif isinstance(expr, MulExpression):
            self._matmul(expr, rows, idx, vals)
        elif isinstance(expr, Sum):
            self._sum(expr, rows, idx, vals)
        elif isinstance(expr, Trace) and expr.args[0].ndim == 2:
            n = expr.args[0].shape[0]
            diagonal = np.arange(n, dtype=np.int64) * (n + 1)
            self.push(expr.args[0], np.repeat(rows, n), np.tile(diagonal, rows.size), np.repeat(vals, n))
        elif isinstance(expr, diag_mat):
            p, k = expr.args[0].shape[0], expr.k
            row, col = (idx, idx + k) if k >= 0 else (idx - k, idx)
            self.push(expr.args[0], rows, row + p * col, vals)
        elif isinstance(expr, diag_vec):
            n, k = expr.shape[0], expr.k
            row, col = idx % n, idx // n
            on = col - row == k
            self.push(expr.args[0], rows[on], (row if k >= 0 else col)[on], vals[on])
        elif isinstance(expr, Promote):
            self.push(expr.args[0], rows, np.zeros_like(idx), vals)
        elif isinstance(expr, index) and (mapping := self._slices(expr)) is not None:
            self.push(expr.args[0], rows, mapping(idx), vals)
        elif _is_matrix_transpose(expr):
            p = expr.shape[0]
            q = expr.args[0].shape[0]
            self.push(expr.args[0], rows, idx // p + q * (idx % p), vals)
        elif isinstance(expr, _SELECTIONS):
            self._selection(expr, rows, idx, vals)
        else:
            raise Unsupported(f"the atom {type(expr).__name__}")

    def _constant_operand(self, expr):
        lhs, rhs = expr.args
        if lhs.is_constant() and not rhs.is_constant():
            return lhs, rhs
        if rhs.is_constant() and not lhs.is_constant():
            return rhs, lhs
        raise Unsupported(f"a product of two non-constant expressions ({type(expr).__name__})")

    def _multiply(self, expr, rows, idx, vals) -> None:
        weight, other = self._constant_operand(expr)
        coefficients = _entries(weight.value, _broadcast_index(idx, expr.shape, weight.shape))
        self.push(other, rows, _broadcast_index(idx, expr.shape, other.shape), vals * coefficients)

    def _matmul(self, expr, rows, idx, vals) -> None:
        """A @ E or E @ B with A, B constant: each functional's coefficients (as a matrix P on the product's
        entries) become A' P or P B' on E's; rows of P are grouped by functional and column (or row) of the
        product, so only the groups present are multiplied."""
        lhs, rhs = expr.args
        constant, other = self._constant_operand(expr)
        if constant is lhs:
            A = _matrix(lhs.value) if lhs.ndim == 2 else _matrix(lhs.value).T  # a 1-D left operand is a row
            p, s_ = A.shape
            q = _size(rhs.shape) // s_  # columns of E (1 for a vector)
            group, r_new, v_new = _grouped_product(rows * q + idx // p, idx % p, vals, p, A)  # by column
            self.push(other, group // q, r_new + s_ * (group % q), v_new)
        else:
            B = _matrix(rhs.value)  # a 1-D right operand is a column
            s_, q = B.shape
            p = _size(lhs.shape) // s_  # rows of E (1 for a vector)
            group, c_new, v_new = _grouped_product(rows * p + idx % p, idx // p, vals, q, B.T)  # by row
            self.push(other, group // p, group % p + p * c_new, v_new)

    def _sum(self, expr, rows, idx, vals) -> None:
        arg = expr.args[0]
        if expr.axis is None and (variable := _square_variable(arg)) is not None:
            self.all_entries[variable.id].append((rows, vals))
            return
        if expr.axis is None and isinstance(arg, multiply) and arg.shape == arg.args[0].shape == arg.args[1].shape:
            # sum(W * E) (CVXPY's trace(A @ E)): only W's nonzeros reach E, never all of E's entries
            weight, other = self._constant_operand(arg)
            constant = _constant_entry(weight.value)
            if constant is not None and (variable := _square_variable(other)) is not None:  # sum(c J * X) = c sum(X)
                self.all_entries[variable.id].append((rows, vals * constant))
                return
            W = _matrix(weight.value)
            w_rows, w_cols, w_vals = _coo(W)
            entries, per = w_rows + W.shape[0] * w_cols, w_rows.size
            self.push(other, np.repeat(rows, per), np.tile(entries, rows.size),
                      np.repeat(vals, per) * np.tile(w_vals, rows.size))
            return
        if _size(arg.shape) * rows.size > SPREAD_LIMIT:
            raise Unsupported(f"a sum over all {_size(arg.shape)} entries of an expression")
        ids = np.arange(_size(arg.shape), dtype=np.int64).reshape(arg.shape, order="F")
        axes = tuple(range(arg.ndim)) if expr.axis is None else \
            tuple(a % arg.ndim for a in np.atleast_1d(expr.axis))
        moved = np.moveaxis(ids, axes, tuple(range(arg.ndim - len(axes), arg.ndim)))
        groups = moved.reshape((-1, _size([arg.shape[a] for a in axes])), order="F")
        per = groups.shape[1]
        self.push(arg, np.repeat(rows, per), groups[idx].ravel(), np.repeat(vals, per))

    @staticmethod
    def _slices(expr):
        """For basic indexing by slices, the map from the result's entries to the argument's, else None."""
        arg_shape = expr.args[0].shape
        if len(expr.key) != len(arg_shape) or not all(isinstance(k, slice) for k in expr.key):
            return None
        picked = [np.arange(d, dtype=np.int64)[k] for d, k in zip(arg_shape, expr.key)]
        full_shape = tuple(p.size for p in picked)
        if _size(full_shape) != _size(expr.shape):
            return None

        def mapping(idx):
            coords = np.unravel_index(idx, full_shape, order="F") if full_shape else ()
            return np.ravel_multi_index(tuple(p[c] for p, c in zip(picked, coords)), arg_shape, order="F") \
                if arg_shape else idx
        return mapping

    def _selection(self, expr, rows, idx, vals) -> None:
        """An atom that selects or rearranges its arguments' entries: its own numeric function on entry numbers
        (1-based, 0 for an entry no argument fills) says where each result entry comes from."""
        sizes = [_size(arg.shape) for arg in expr.args]
        if sum(sizes) > GENERIC_SELECTION_LIMIT:
            raise Unsupported(f"the atom {type(expr).__name__} on {sum(sizes)} entries")
        starts = np.concatenate([[0], np.cumsum(sizes)])
        numbers = [(np.arange(size, dtype=np.float64) + 1 + start).reshape(arg.shape, order="F")
                   for arg, size, start in zip(expr.args, sizes, starts)]
        source = np.asarray(expr.numeric(numbers)).ravel(order="F").astype(np.int64)[idx] - 1
        for k, arg in enumerate(expr.args):
            mine = (source >= starts[k]) & (source < starts[k + 1])
            self.push(arg, rows[mine], source[mine] - starts[k], vals[mine])


# ---------------------------------------------------------------------------------------------- the model
@dataclass
class _Block:
    """A PSD block of the engine: a variable (X = sign * Z, plus an antisymmetric free part K when the variable
    is not declared symmetric), or the slack Z of an LMI (``constraint``)."""

    order: int
    variable: Variable | None = None
    sign: float = 1.0
    antisymmetric: bool = False
    constraint: PSD | None = None
    tie_rows: np.ndarray | None = None  # the rows sym(expr)_ij - Z_ij = 0 of an LMI block, i <= j


@dataclass
class _Entries:
    """The touched entries of a variable that are engine LP variables: ``keys`` (entry numbers), their first
    LP column, and how an entry is made of columns (``signs``: +1 for x = p, -1 for x = -p, (+1, -1) for
    x = p - q)."""

    keys: np.ndarray
    first_column: int
    signs: tuple


@dataclass
class StructuredModel:
    """A CVXPY problem read into an :class:`SDPProblem`, and what maps the engine's answer back."""

    sdp: SDPProblem
    objective_sign: float  # -1 for Maximize (the engine minimises)
    objective_offset: float
    blocks: list
    entries: dict  # variable id -> the LP columns of its scalars (of K for a PSD block), or None
    constraint_rows: dict  # constraint id -> its engine rows (equalities, inequalities)
    block_of: dict  # variable id -> its PSD block


def read_problem(problem: cp.Problem, name: str = "cvxpy") -> StructuredModel:
    """Read ``problem`` into an :class:`SDPProblem`; raises :class:`Unsupported` naming what it cannot read."""
    objective = problem.objective
    if not isinstance(objective, (Minimize, Maximize)):
        raise Unsupported(f"the objective {type(objective).__name__}")
    variables = problem.variables()
    for var in variables:
        bad = [a for a in _UNSUPPORTED_ATTRIBUTES if var.attributes.get(a)]
        if bad:
            raise Unsupported(f"the variable attribute {bad[0]} of {var.name()}")
        if var.ndim > 2:
            raise Unsupported(f"the {var.ndim}-dimensional variable {var.name()}")

    blocks, by_variable = [], {}
    for var in variables:
        if var.attributes.get("PSD") or var.attributes.get("NSD"):
            by_variable[var.id] = len(blocks)
            blocks.append(_Block(var.shape[0], var, -1.0 if var.attributes.get("NSD") else 1.0))
    equalities, inequalities, lmis = [], [], []
    for constraint in problem.constraints:
        if isinstance(constraint, (Equality, Zero)):
            equalities.append(constraint)
        elif isinstance(constraint, (Inequality, NonNeg, NonPos)):
            inequalities.append(constraint)
        elif isinstance(constraint, PSD):
            expr = constraint.args[0]
            plain = isinstance(expr, Variable) and not any(expr.attributes.get(a) for a in ("nonneg", "nonpos",
                                                                                            "NSD"))
            if plain and expr.id not in by_variable:
                by_variable[expr.id] = len(blocks)
                symmetric = expr.attributes.get("symmetric") or expr.attributes.get("PSD")
                blocks.append(_Block(expr.shape[0], expr, antisymmetric=not symmetric))
            if not (plain and expr.id in by_variable):
                lmis.append(constraint)
        else:
            raise Unsupported(f"the constraint {type(constraint).__name__}")

    # rows: equalities, inequalities, then the ties of each LMI block
    sizes = [c.size for c in equalities + inequalities] + [c.shape[0] * (c.shape[0] + 1) // 2 for c in lmis]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
    m = int(starts[-1])
    reader = _Reader(m)
    constraint_rows = {}
    for k, constraint in enumerate(equalities + inequalities):
        rows = np.arange(starts[k], starts[k + 1], dtype=np.int64)
        expr, sign = _linear_part(constraint)
        reader.push(expr, rows, rows - starts[k], np.full(rows.size, sign))
        constraint_rows[constraint.id] = rows
    for k, constraint in enumerate(lmis, start=len(equalities) + len(inequalities)):
        order = constraint.shape[0]
        upper_i, upper_j = np.triu_indices(order)  # i <= j
        rows = starts[k] + np.arange(upper_i.size, dtype=np.int64)
        off = upper_i != upper_j
        # sym(expr)_ij = (expr_ij + expr_ji) / 2
        reader.push(constraint.args[0], np.concatenate([rows, rows[off]]),
                    np.concatenate([upper_i + order * upper_j, upper_j[off] + order * upper_i[off]]),
                    np.where(np.concatenate([off, np.ones(off.sum(), bool)]), 0.5, 1.0))
        blocks.append(_Block(order, constraint=constraint, tie_rows=rows))
    objective_reader = _Reader(1)
    objective_sign = -1.0 if isinstance(objective, Maximize) else 1.0
    if objective.args[0].size != 1:
        raise Unsupported("a non-scalar objective")
    objective_reader.push(objective.args[0], np.zeros(1, np.int64), np.zeros(1, np.int64),
                          np.array([objective_sign]))

    n_inequality_rows = int(starts[len(equalities) + len(inequalities)] - starts[len(equalities)])
    inequality_rows = np.arange(starts[len(equalities)], starts[len(equalities)] + n_inequality_rows)
    lp = _LPColumns(first=n_inequality_rows)
    C_parts = [([], [], []) for _ in blocks]
    A_parts = [([], [], [], []) for _ in blocks]
    C_ones, A_ones = [0.0] * len(blocks), []  # sum(X) terms of PSD blocks: c 1 1' in C_k, (i, k, c) in A
    entries: dict = {}  # variable id -> the LP columns of its scalars (of K for a PSD block), or None
    for var in variables:
        terms = reader.terms.get(var.id, [])
        objective_terms = objective_reader.terms.get(var.id, [])
        if var.id in by_variable:
            k = by_variable[var.id]
            sign = blocks[k].sign  # K of a non-symmetric variable adds nothing to a sum of all entries
            for rows, vals in reader.all_entries.get(var.id, []):
                A_ones.extend((int(i), k, sign * float(v)) for i, v in zip(rows, vals))
            C_ones[k] += sum(sign * float(vals.sum()) for _, vals in objective_reader.all_entries.get(var.id, []))
            entries[var.id] = _block_terms(blocks[k], terms, objective_terms, A_parts[k], C_parts[k], lp)
        else:
            terms = terms + _spread(var, reader.all_entries.get(var.id, []))
            objective_terms = objective_terms + _spread(var, objective_reader.all_entries.get(var.id, []))
            scalars = _batches(terms, objective_terms, lambda rows, idx, vals, v=var: (rows, _canonical(v, idx), vals))
            entries[var.id] = lp.add(scalars, _signs(var))
    for k, block in enumerate(blocks):
        if block.constraint is not None:
            order = block.order
            upper_i, upper_j = np.triu_indices(order)
            # -Z_ij in row (i, j): the coordinate (j, i) sets both symmetric entries, so -1/2 off the diagonal
            A_parts[k][0].append(block.tie_rows), A_parts[k][1].append(upper_j), A_parts[k][2].append(upper_i)
            A_parts[k][3].append(np.where(upper_i == upper_j, -1.0, -0.5))
    A_lp = sp.coo_array((np.concatenate([np.ones(n_inequality_rows)] + lp.A_vals),
                         (np.concatenate([inequality_rows] + lp.A_rows),
                          np.concatenate([np.arange(n_inequality_rows)] + lp.A_cols))),
                        shape=(m, lp.count)).tocsr()
    c_lp = np.bincount(np.concatenate([np.zeros(0, np.int64)] + lp.c_cols),
                       np.concatenate([np.zeros(0)] + lp.c_vals), minlength=lp.count)
    C = [tuple(map(_cat, parts)) for parts in C_parts]
    C = [c if ones == 0.0 else SparsePlusLowRank(c, _all_ones(b.order, ones)) for c, ones, b in zip(C, C_ones, blocks)]
    try:
        sdp = SDPProblem(-reader.constant, C, [tuple(map(_cat, parts)) for parts in A_parts],
                         block_sizes=[b.order for b in blocks], c_lp=c_lp, A_lp=A_lp, name=name,
                         A_low_rank=[(i, k, _all_ones(blocks[k].order, c)) for i, k, c in A_ones])
    except ValueError as error:  # the chain path says it in its own words
        raise Unsupported(f"a problem the engine rejects ({error})") from None
    return StructuredModel(sdp, objective_sign, float(objective_reader.constant[0]), blocks, entries,
                           constraint_rows, by_variable)


def _all_ones(n: int, weight: float) -> LowRank:
    """weight 1 1' of order n, kept factored."""
    return LowRank(np.ones((n, 1)), [weight])


def _spread(var, all_entries) -> list:
    """The sum(X) terms of a variable that is no PSD block, as ordinary terms on each of its entries."""
    size = _size(var.shape)
    if sum(rows.size for rows, _ in all_entries) * size > SPREAD_LIMIT:
        raise Unsupported(f"a sum over all {size} entries of {var.name()}")
    return [(np.repeat(rows, size), np.tile(np.arange(size, dtype=np.int64), rows.size), np.repeat(vals, size))
            for rows, vals in all_entries]


def _cat(parts) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _linear_part(constraint):
    """The expression g of a constraint g == 0 or g <= 0, and the sign that turns the constraint's own
    expression into g."""
    if isinstance(constraint, NonNeg):  # expr >= 0
        return constraint.args[0], -1.0
    if isinstance(constraint, (NonPos, Zero)):
        return constraint.args[0], 1.0
    return constraint.expr, 1.0  # Equality and Inequality: lhs - rhs


class _LPColumns:
    """The engine's nonnegative variables (after the inequality slacks) and their coefficients: a scalar x is
    one column (x = p, or x = -p for a nonpositive one) or two (x = p - q)."""

    def __init__(self, first: int):
        self.count = first
        self.A_rows, self.A_cols, self.A_vals, self.c_cols, self.c_vals = [], [], [], [], []

    def add(self, batches, signs: tuple) -> _Entries | None:
        """Columns for the scalars that ``batches`` touch, and their coefficients. A batch is (rows, keys,
        coefficients), ``rows`` None for the objective; ``keys`` name the scalars."""
        if not batches:
            return None
        keys = np.unique(np.concatenate([batch[1] for batch in batches]))
        entries = _Entries(keys, self.count, signs)
        self.count += keys.size * len(signs)
        for rows, batch_keys, coefficients in batches:
            position = np.searchsorted(keys, batch_keys)
            for j, sign in enumerate(signs):
                columns = entries.first_column + j * keys.size + position
                if rows is None:
                    self.c_cols.append(columns), self.c_vals.append(sign * coefficients)
                else:
                    self.A_rows.append(rows), self.A_cols.append(columns), self.A_vals.append(sign * coefficients)
        return entries


def _signs(var) -> tuple:
    if var.attributes.get("nonneg"):
        return (1.0,)
    if var.attributes.get("nonpos"):
        return (-1.0,)
    return (1.0, -1.0)


def _canonical(var, idx: np.ndarray) -> np.ndarray:
    """Entry numbers of a variable's entries, one per distinct scalar (a symmetric variable's (i, j) and (j, i)
    are one: the upper one)."""
    if var.attributes.get("symmetric") and var.ndim == 2:
        n = var.shape[0]
        i, j = idx % n, idx // n
        return np.minimum(i, j) + n * np.maximum(i, j)
    return idx


def _batches(terms, objective_terms, scalars):
    """(rows, keys, coefficients) of the constraint terms, then (None, keys, coefficients) of the objective's;
    ``scalars`` maps a term (rows, entries, coefficients) to its scalars' (rows, keys, coefficients)."""
    return [scalars(*term) for term in terms] + [(None, *scalars(*term)[1:]) for term in objective_terms]


def _block_terms(block: _Block, terms, objective_terms, A_part, C_part, lp: _LPColumns) -> _Entries | None:
    """Coordinates of a PSD-block variable's coefficients: M_ij X_ij with X = sign Z, and the coordinate
    (max, min) sets both symmetric entries, so half the coefficient off the diagonal. A variable that is not
    declared symmetric is Z + K with K antisymmetric: K_ij = -K_ji is one free scalar per touched pair i < j
    (returned as its LP columns)."""
    n = block.order
    for rows, idx, vals in terms:
        i, j = idx % n, idx // n
        A_part[0].append(rows), A_part[1].append(np.maximum(i, j)), A_part[2].append(np.minimum(i, j))
        A_part[3].append(block.sign * np.where(i == j, vals, 0.5 * vals))
    for _, idx, vals in objective_terms:
        i, j = idx % n, idx // n
        C_part[0].append(np.maximum(i, j)), C_part[1].append(np.minimum(i, j))
        C_part[2].append(block.sign * np.where(i == j, vals, 0.5 * vals))
    if not block.antisymmetric:
        return None

    def antisymmetric(rows, idx, vals):
        i, j = idx % n, idx // n
        off = i != j
        return rows[off], (np.minimum(i, j) + n * np.maximum(i, j))[off], np.where(i < j, vals, -vals)[off]
    return lp.add(_batches(terms, objective_terms, antisymmetric), (1.0, -1.0))


# ---------------------------------------------------------------------------------------------- solving
def solve_structured(problem: cp.Problem, *, max_value_bytes: float = DEFAULT_MAX_VALUE_BYTES,
                     accept_unknown: bool = False, use_quad_obj: bool = True, **options):
    """``problem.solve(method="culorads", **options)``: read the model directly (module docstring), solve it with
    the engine and store values, duals, status and ``solver_stats`` (``extra_stats`` is the engine's
    :class:`Result`) as CVXPY's own solve does; returns the optimal value.

    ``options`` are :class:`Settings` fields (an unknown name raises ``ValueError``); ``accept_unknown`` is the
    chain path's option of that name; a dense value (a PSD variable's X, a PSD constraint's dual) of more than
    ``max_value_bytes`` is left unset, with a warning that says where its factor is. A model the reader does
    not handle (a quadratic objective among them) is solved by ``problem.solve(solver="CULORADS", ...)`` instead,
    which gets ``use_quad_obj`` (CVXPY's option: whether a solver may take the quadratic objective as it is;
    CULORADS never does, so both values solve the objective through second-order cones). ``verbose`` takes what
    CVXPY takes (``verbose=1``). ``problem.compilation_time`` is the time spent reading this model. CVXPY's
    compilation options (``enforce_dpp``, ``ignore_dpp``, ``canon_backend``) go to the chain when it solves; the
    reader has no compilation to cache, so they change nothing there.
    ``warm_start`` (CVXPY's option, True by default) starts from this problem's last answer (``cvxpy/warm.py``).
    """
    warm_start = options.pop("warm_start", True)  # CVXPY's default: from the last answer (``cvxpy/warm.py``)
    compilation = {name: options.pop(name) for name in _CHAIN_COMPILATION_OPTIONS if name in options}
    if "verbose" in options:
        options["verbose"] = cvxpy_interface.cvxpy_verbose(options["verbose"])
    if not isinstance(use_quad_obj, (bool, np.bool_)):
        raise ValueError(f"use_quad_obj must be True or False, got {use_quad_obj!r}")
    settings = Settings.from_options(**options)
    if not (isinstance(max_value_bytes, (int, float)) and max_value_bytes >= 0):
        raise ValueError(f"max_value_bytes must be a number >= 0, got {max_value_bytes!r}")
    if not isinstance(accept_unknown, (bool, np.bool_)):
        raise ValueError(f"accept_unknown must be True or False, got {accept_unknown!r}")
    start = time.perf_counter()
    try:
        model = read_problem(problem)
    except Unsupported as why:
        if settings.verbose:
            print(f"culorads: the structured reader does not handle {why}; solving through CVXPY's chain",
                  file=sys.stderr)
        return problem.solve(solver="CULORADS", accept_unknown=accept_unknown, use_quad_obj=use_quad_obj,
                             warm_start=warm_start, **compilation, **options)
    setup_time = time.perf_counter() - start
    problem._compilation_time = setup_time  # CVXPY's compilation is this reading
    from cvxpy_culorads.solver.driver import solve  # the engine is imported when first used, as the chain path does

    cache = getattr(problem, "_solver_cache", None)  # CVXPY's per-problem cache, emptied when it recompiles
    result = solve(model.sdp, settings, warm_start=warm_starts.previous_result(cache, warm_starts.STRUCTURED_KEY,
                                                                             warm_start))
    warm_starts.remember(cache, warm_starts.STRUCTURED_KEY, result)
    _store(problem, model, result, setup_time, bool(accept_unknown), max_value_bytes)
    return problem.value


def _store(problem, model: StructuredModel, result: Result, setup_time: float, accept_unknown: bool,
           max_value_bytes: float) -> None:
    """What ``Problem.unpack_results`` does on the chain path: status (the chain's mapping), values, duals,
    value and ``solver_stats``; a status without a solution leaves the values unset, a failed solve raises."""
    status = cvxpy_interface.CULORADS.STATUS_MAP[result.status]
    if result.status is Status.STALLED and accept_unknown:
        status = s.OPTIMAL_INACCURATE
    attr = {s.SOLVE_TIME: result.solve_time, s.SETUP_TIME: setup_time,
            s.NUM_ITERS: sum(result.iterations.values()), s.EXTRA_STATS: result}
    problem._solver_stats = SolverStats.from_dict(attr, cvxpy_interface.CULORADS().name())
    if status in s.ERROR:
        raise cp.error.SolverError(cvxpy_interface.failure_message(result))
    if status not in s.SOLUTION_PRESENT:
        certificate = _certificate_duals(problem, model, result) if result.status is Status.INFEASIBLE else {}
        failure = failure_solution(status, attr, certificate)
        # failure_solution's value is the minimisation's (+inf infeasible, -inf unbounded): the sense's sign
        failure.opt_val = model.objective_sign * failure.opt_val
        problem.unpack(failure)
        return
    too_large = []
    primal = {var.id: _value(var, model, result, max_value_bytes, too_large) for var in problem.variables()}
    duals = _duals(problem, model, result.dual, max_value_bytes, too_large)
    if too_large:
        warnings.warn("culorads: not formed, larger than max_value_bytes = "
                      f"{max_value_bytes:.3g}: {'; '.join(too_large)}", RuntimeWarning, stacklevel=3)
    value = model.objective_sign * (result.primal_objective + model.objective_offset)
    for var in problem.variables():
        var.save_value(primal[var.id])
    for constraint in problem.constraints:
        if constraint.id in duals:
            constraint.save_dual_value(duals[constraint.id])
    problem._value = value
    problem._status = status
    problem._solution = Solution(status, value, primal, duals, attr)


def _lp_values(entries: _Entries | None, x_lp: np.ndarray) -> np.ndarray:
    """The scalars an :class:`_Entries` names, from the engine's nonnegative variables."""
    if entries is None:
        return np.zeros(0)
    count = entries.keys.size
    return sum(sign * x_lp[entries.first_column + j * count:entries.first_column + (j + 1) * count]
               for j, sign in enumerate(entries.signs))


def _value(var, model: StructuredModel, result: Result, max_value_bytes: float, too_large: list):
    """A variable's value: sign R R' (+ K) for a PSD block, else its touched scalars (0 elsewhere)."""
    entries = model.entries.get(var.id)
    if var.id in model.block_of:
        k = model.block_of[var.id]
        n = var.shape[0]
        if 8.0 * n * n > max_value_bytes:
            too_large.append(f"the value of {var.name()} ({n} x {n}); X = R R' with R = "
                             f"prob.solver_stats.extra_stats.factors[{k}]")
            return None
        R = result.factors[k]
        X = model.blocks[k].sign * (R @ R.T)
        if entries is not None:  # the antisymmetric part K_ij = -K_ji of a variable not declared symmetric
            i, j = entries.keys % n, entries.keys // n
            K = _lp_values(entries, result.x_lp)
            X[i, j] += K
            X[j, i] -= K
        return X.reshape(var.shape)
    flat = np.zeros(var.size)
    if entries is not None:
        values = _lp_values(entries, result.x_lp)
        flat[entries.keys] = values
        if var.attributes.get("symmetric") and var.ndim == 2:  # the lower twin of each upper entry
            n = var.shape[0]
            flat[entries.keys // n + n * (entries.keys % n)] = values
    return flat.reshape(var.shape, order="F") if var.ndim else flat.item()


def _certificate_duals(problem, model: StructuredModel, result: Result) -> dict:
    """CVXPY's certificate of infeasibility as the constraints' duals: :func:`_duals` of the Farkas ray y with the
    objective taken as 0 (a PSD constraint gets -A*(y)), the inequalities' duals projected onto y >= 0 (they are
    >= 0 up to the ray's checked violation)."""
    return _duals(problem, model, result.certificate.multipliers, math.inf, [], ray=True)


def _duals(problem, model: StructuredModel, lam, max_value_bytes: float, too_large: list,
           ray: bool = False) -> dict:
    """CVXPY's duals: -lambda on the rows of an equality or inequality (the engine's Lagrangian subtracts
    lambda'(A(X) - b)); the block's dual slack S = C - A*(lambda) for a PSD constraint. With ``ray``, ``lam`` is a
    Farkas ray: see :func:`_certificate_duals`."""
    lam = np.asarray(lam, dtype=np.float64)
    duals = {}
    for constraint in problem.constraints:
        if constraint.id in model.constraint_rows:
            values = -lam[model.constraint_rows[constraint.id]]
            if ray and not isinstance(constraint, (Equality, Zero)):
                values = np.maximum(values, 0.0)
            duals[constraint.id] = values.reshape(constraint.shape, order="F") if constraint.shape else \
                values.item()
    for k, block in enumerate(model.blocks):
        owners = [block.constraint] if block.constraint is not None else [
            c for c in problem.constraints if isinstance(c, PSD) and c.args[0] is block.variable]
        if not owners:
            continue
        n = block.order
        if 8.0 * n * n > max_value_bytes:
            too_large.append(f"the dual of the PSD constraint on a {n} x {n} block")
            continue
        slack = model.sdp.slack_matrix(k, lam).toarray()
        if ray:
            slack -= model.sdp.objective_matrix(k).toarray()
        for constraint in owners:
            duals[constraint.id] = slack
    return duals


cp.Problem.register_solve(METHOD_NAME, solve_structured)
