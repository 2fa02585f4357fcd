"""Second-order steps on the product of spheres (issue 12): Riemannian trust regions against the Riemannian phase's
L-BFGS, counted in products with C, for MaxCut min <C, R R'> over unit rows (C = -L/4).

Usage::

    python benchmarks/studies/trust_regions.py sparse:2e4:40 delaunay:15:42 [--targets 1e-5,1e-6,1e-7]

Each argument is ``graph:size:columns`` (``sparse``: ``graphs.random_regular_like(n, 4)`` as in the suite
``sparse``; ``delaunay``: ``graphs.delaunay_graph(k)``). Both methods start from the same uniform random factor
and stop at the last target of the gradient measure ||grad||_F ||R||_F / (1 + |<C, X>|) (the Riemannian phase's).
L-BFGS is the phase's step (memory 2, Armijo backtracking from tau = 1, curvature pairs without transport);
trust regions are Absil-Baker-Gallivan's with Steihaug's truncated CG, the inner solve stopped at
||r|| <= ||g|| min(||g||, 0.1) or ``--max-inner`` iterations. A line per method gives the products at each
target reached and the certified gap of the last point (lambda_min of C - Diag(lambda): dense up to order 1e4, ARPACK
above). NumPy/SciPy
only: a prototype for counting, not a fast implementation.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cvxpy_culorads.backends.cpu_kernels import CpuKernels  # noqa: E402

import graphs  # noqa: E402

ARMIJO, BACKTRACKS, FIRST_STEP = 1e-4, 30, 0.1  # as in cvxpy_culorads/riemannian.py


class Counted:
    """C with a count of its products."""

    def __init__(self, C):
        self.C, self.products = C, 0

    def times(self, V):
        self.products += 1
        return self.C @ V


def _row_dots(A, B):
    return np.einsum("ij,ij->i", A, B)


def _tangent(Z, R):
    """Z's tangent part at the unit rows of R (the phase's kernel), in new memory."""
    return CpuKernels.sphere_tangent(Z, R, np.ones(R.shape[0]), 1.0, np.empty_like(Z))


def _retract(R, D=None, tau=0.0):
    """The rows of R + tau D scaled to unit norm (the phase's retraction), in new memory."""
    return CpuKernels.sphere_retract(R, R if D is None else D, tau, np.ones(R.shape[0]), np.empty_like(R))


def _measure(G, R, objective):
    return np.linalg.norm(G) * np.linalg.norm(R) / (1.0 + abs(objective))


class _Targets:
    """The gradient targets still ahead, and the products at which each was reached."""

    def __init__(self, targets):
        self.ahead, self.reached = sorted(targets, reverse=True), {}

    def note(self, measure, products) -> bool:
        """Record the targets ``measure`` meets; True once none is left."""
        while self.ahead and measure <= self.ahead[0]:
            self.reached[self.ahead.pop(0)] = products
        return not self.ahead


def lbfgs(C: Counted, R, targets, memory=2, max_steps=4000):
    R = _retract(R)
    CR = C.times(R)
    objective = np.vdot(R, CR)
    G = 2.0 * _tangent(CR, R)
    pairs, progress = [], _Targets(targets)
    for _ in range(max_steps):
        if progress.note(_measure(G, R, objective), C.products):
            break
        q, history = G.copy(), []
        for s, y in reversed(pairs):
            rho = 1.0 / np.vdot(y, s)
            alpha = rho * np.vdot(s, q)
            q -= alpha * y
            history.append((rho, alpha, s, y))
        if pairs:
            q *= np.vdot(pairs[-1][0], pairs[-1][1]) / np.vdot(pairs[-1][1], pairs[-1][1])
        for rho, alpha, s, y in reversed(history):
            q += (alpha - rho * np.vdot(y, q)) * s
        D = _tangent(-q, R)
        slope = np.vdot(D, G)
        if slope >= 0:
            pairs, D = [], -G
            slope = np.vdot(D, G)
        tau = 1.0 if pairs else FIRST_STEP * math.sqrt(R.shape[0] / np.vdot(G, G))
        for _ in range(BACKTRACKS):
            R_new = _retract(R, D, tau)
            CR_new = C.times(R_new)
            new_objective = np.vdot(R_new, CR_new)
            if new_objective <= objective + ARMIJO * tau * slope:
                break
            tau *= 0.5
        G_new = 2.0 * _tangent(CR_new, R_new)
        pairs = (pairs + [(R_new - R, G_new - G)])[-memory:]
        R, CR, objective, G = R_new, CR_new, new_objective, G_new
    return R, CR, objective, progress.reached


def trust_regions(C: Counted, R, targets, max_outer=60, max_inner=1000):
    R = _retract(R)
    CR = C.times(R)
    objective = np.vdot(R, CR)
    radius_max = math.sqrt(R.shape[0])
    radius = radius_max / 8.0
    progress = _Targets(targets)
    for _ in range(max_outer):
        euclidean = 2.0 * CR
        G = _tangent(euclidean, R)
        weights = _row_dots(euclidean, R)
        if progress.note(_measure(G, R, objective), C.products):
            break

        eta, H_eta = np.zeros_like(R), np.zeros_like(R)
        r, d = G.copy(), -G
        rr = np.vdot(r, r)
        stop = math.sqrt(rr) * min(math.sqrt(rr), 0.1)
        for _ in range(max_inner):
            Hd = _hessian(C, R, weights, d)
            curvature = np.vdot(d, Hd)
            ee, ed, dd = np.vdot(eta, eta), np.vdot(eta, d), np.vdot(d, d)
            alpha = rr / curvature if curvature > 0 else math.inf
            if curvature <= 0 or ee + 2 * alpha * ed + alpha * alpha * dd >= radius ** 2:
                to_boundary = (-ed + math.sqrt(ed * ed + dd * (radius ** 2 - ee))) / dd
                eta, H_eta = eta + to_boundary * d, H_eta + to_boundary * Hd
                break
            eta, H_eta, r = eta + alpha * d, H_eta + alpha * Hd, r + alpha * Hd
            rr_new = np.vdot(r, r)
            if math.sqrt(rr_new) <= stop:
                break
            d = -r + (rr_new / rr) * d
            rr = rr_new
        model_decrease = np.vdot(G, eta) + 0.5 * np.vdot(eta, H_eta)
        R_new = _retract(R, eta, 1.0)
        CR_new = C.times(R_new)
        new_objective = np.vdot(R_new, CR_new)
        ratio = (new_objective - objective) / model_decrease if model_decrease < 0 else -1.0
        if ratio < 0.25:
            radius /= 4.0
        elif ratio > 0.75 and math.isclose(math.sqrt(np.vdot(eta, eta)), radius, rel_tol=1e-8):
            radius = min(2.0 * radius, radius_max)
        if ratio > 0.1:
            R, CR, objective = R_new, CR_new, new_objective
    return R, CR, objective, progress.reached


def _hessian(C: Counted, R, weights, U):
    """P_R(2 C U) - U diag(<(2 C R)_i, r_i>): the Riemannian Hessian on unit spheres (the Weingarten term last)."""
    return _tangent(2.0 * C.times(U), R) - weights[:, None] * U


DENSE_ORDER = 10_000  # up to this order lambda_min is a dense eigvalsh: ARPACK did not converge on delaunay 2^13


def certified_gap(C, R, CR, objective) -> float:
    """n max(0, -lambda_min(C - Diag(lambda))) / (1 + |<C, X>|) with the stationary lambda_i = <(C R)_i, r_i>."""
    slack = sp.csr_array(C - sp.diags(_row_dots(CR, R)))
    if slack.shape[0] <= DENSE_ORDER:
        smallest = np.linalg.eigvalsh(slack.toarray())[0]
    else:
        top = sla.eigsh(slack, k=1, which="LA", return_eigenvectors=False, tol=1e-3)[0]
        shifted = sp.identity(slack.shape[0], format="csr") * top - slack
        smallest = top - sla.eigsh(shifted, k=1, which="LA", return_eigenvectors=False, tol=1e-10)[0]
    return R.shape[0] * max(0.0, -smallest) / (1.0 + abs(objective))


def _cost_matrix(graph: str, size: str):
    if graph == "sparse":
        W = graphs.random_regular_like(int(float(size)), 4, seed=1)
    elif graph == "delaunay":
        W = graphs.delaunay_graph(int(size), seed=0)
    else:
        raise ValueError(f"graph must be sparse or delaunay, got {graph!r}")
    W = sp.csr_array(W)
    return sp.csr_array(-0.25 * (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="graph:size:columns, e.g. sparse:2e4:40 or delaunay:15:42")
    parser.add_argument("--targets", default="1e-5,1e-6,1e-7")
    parser.add_argument("--max-inner", type=int, default=1000)
    args = parser.parse_args()
    targets = [float(v) for v in args.targets.split(",")]
    for spec in args.runs:
        graph, size, columns = spec.split(":")
        C = _cost_matrix(graph, size)
        start = np.random.default_rng(0).uniform(-1.0, 1.0, (C.shape[0], int(columns)))
        methods = {"lbfgs": lbfgs,
                   "trust_regions": lambda C, R, t: trust_regions(C, R, t, max_inner=args.max_inner)}
        for name, method in methods.items():
            counted, began = Counted(C), time.perf_counter()
            R, CR, objective, reached = method(counted, start.copy(), targets)
            products = ", ".join(f"{t:g}: {reached.get(t, '-')}" for t in targets)
            print(f"{spec:18s} {name:13s} products to each target {{{products}}} (all: {counted.products}); "
                  f"certified gap {certified_gap(C, R, CR, objective):.1e}; {time.perf_counter() - began:.1f} s",
                  flush=True)


if __name__ == "__main__":
    main()
