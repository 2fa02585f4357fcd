"""Mixed precision (``Settings.precision="mixed"``): the float32 kernels against their float64 twins, both precisions
against independent references, the hand-over from single to double precision, and the setting itself.

The kernels' promise in single precision: float32 stored, float64 sums, row formulas in float64 rounded once. So a
float32 kernel's output equals its float64 twin's on the same inputs (float32 values) to float32's rounding, and its
sums equal the float64 sums of those inputs to float64's rounding, where a float32 accumulation would be ~1e-7 off.
The GPU tests at the end skip without CuPy.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import Settings, Status, solve
from cvxpy_culorads.backends.backend import gpu_available
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import Capability
from cvxpy_culorads.models import bundled_graph, maxcut_problem, read_graph
from cvxpy_culorads.phases import riemannian
from cvxpy_culorads.settings import add_arguments, options_from_arguments, reference_rows

from support import DEVICES, clarabel_value, gset_value, primal_residual, random_maxcut, random_mixed_problem

SINGLE = 1e-6  # float32 results against float64 ones (unit roundoff 6e-8, a few roundings per entry)
SUMS = 1e-13  # float64 sums of float32 values against NumPy's float64 ones
K = CpuKernels()


def _rel(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _factors(seed: int, n: int = 3000, r: int = 13, count: int = 2):
    """``count`` random n x r float32 factors and their float64 copies (the same values)."""
    rng = np.random.default_rng(seed)
    singles = [rng.standard_normal((n, r)).astype(np.float32) for _ in range(count)]
    return singles, [x.astype(np.float64) for x in singles]


# ------------------------------------------------------------------ the setting
def test_the_setting_is_validated_shown_and_on_the_command_line():
    assert Settings().precision == "double"
    assert Settings(precision="mixed").changed() == {"precision": "mixed"}
    for wrong in ("single", "float32", None, 32):
        with pytest.raises(ValueError, match=r"^precision must be 'double' \| 'mixed'"):
            Settings.from_options(precision=wrong)
    row = next(row for row in reference_rows() if row["name"] == "precision")
    assert (row["group"], row["flag"], row["default"]) == ("main", "--precision", "'double'")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert options_from_arguments(parser.parse_args(["--precision", "mixed"])) == {"precision": "mixed"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "half"])


# ------------------------------------------------------------------ float32 kernels against their float64 twins
def test_inner_products_norms_and_gram_matrices_sum_in_double():
    (x, y, z), (x64, y64, z64) = _factors(1, count=3)
    assert K.inner(x, y) == pytest.approx(np.vdot(x64, y64), rel=SUMS)
    assert K.norm(x) == pytest.approx(np.linalg.norm(x64), rel=SUMS)
    assert np.allclose(K.gram([x, y, z]), np.array([[np.vdot(a, b) for b in (x64, y64, z64)]
                                                    for a in (x64, y64, z64)]), rtol=SUMS, atol=0)
    # a float32 accumulation would not hold that: NumPy's own float32 dot is off by far more
    assert abs(float(np.vdot(x, y)) - np.vdot(x64, y64)) > 1e3 * SUMS * abs(np.vdot(x64, y64))


def test_the_sphere_kernels_in_single_precision_match_their_double_twins():
    (R, D), (R64, D64) = _factors(2)
    rng = np.random.default_rng(3)
    roots = rng.uniform(0.5, 2.0, R.shape[0])
    squares = roots * roots
    out = K.sphere_retract(R, D, 0.3, roots, np.empty_like(R))
    assert out.dtype == np.float32
    reference = K.sphere_retract(R64, D64, 0.3, roots, np.empty_like(R64))
    assert _rel(out, reference) <= SINGLE
    # projected into float64: the rows on their spheres to double's rounding, whatever the factor stores
    wide = K.sphere_retract(R, R, 0.0, roots, np.empty(R.shape))
    assert np.allclose(np.linalg.norm(wide, axis=1), roots, rtol=1e-15, atol=0)
    assert _rel(wide, K.sphere_retract(R64, R64, 0.0, roots, np.empty_like(R64))) <= 1e-15
    tangent = K.sphere_tangent(D, R, squares, 2.0, np.empty_like(D))
    assert tangent.dtype == np.float32
    assert _rel(tangent, K.sphere_tangent(D64, R64, squares, 2.0, np.empty_like(D64))) <= SINGLE
    assert K.sphere_tangent(D, R, squares, 2.0, D) is D and np.array_equal(D, tangent)  # in place


def test_the_lbfgs_kernels_in_single_precision_match_their_double_twins():
    (G, s0, y0, s1, y1), doubles = _factors(4, count=5)
    G64, *pairs64 = doubles
    pairs = [K.lbfgs_pair(s0, y0), K.lbfgs_pair(s1, y1)]
    products, products64 = np.empty(2), np.empty(2)
    D = K.lbfgs_direction(G, pairs, products)
    D64 = K.lbfgs_direction(G64, [K.lbfgs_pair(*pairs64[:2]), K.lbfgs_pair(*pairs64[2:])], products64)
    assert D.dtype == np.float32 and _rel(D, D64) <= SINGLE
    assert np.allclose(products, products64, rtol=SINGLE)
    coefficients = np.array([0.5, -1.25, 2.0])
    combined = K.lbfgs_combine([G, s0, y0], coefficients)
    assert combined.dtype == np.float32
    assert _rel(combined, 0.5 * G64 - 1.25 * pairs64[0] + 2.0 * pairs64[1]) <= SINGLE
    step = K.scale_add(s0.copy(), -1.0, y0, 1.0)
    assert step.dtype == np.float32 and _rel(step, pairs64[1] - pairs64[0]) <= SINGLE


def test_c_times_a_single_factor_sums_in_double_and_rounds_once():
    (R,), (R64,) = _factors(5, n=2000, count=1)
    C = sp.random(2000, 2000, density=0.01, random_state=np.random.default_rng(6), format="csr")
    C = (C + C.T).tocsr()
    product = K.csr_matmul(C, R, out=np.empty(R.shape, np.float32))
    exact = C @ R64
    assert product.dtype == np.float32
    assert np.array_equal(product, exact.astype(np.float32))  # the float64 sums, rounded once
    assert K.csr_matmul(C, R).dtype == np.float64  # without out: float64, as before


def test_the_single_line_search_scalars_are_the_projected_objectives():
    # f(P(Y)) for rounded rows to first order, and a decrease whose error shrinks with the step: against the
    # objectives of the exactly projected points, in float64
    n, r = 2000, 9
    rng = np.random.default_rng(7)
    W = sp.random(n, n, density=0.005, random_state=rng, format="csr")
    C = (W + W.T).tocsr()
    roots = rng.uniform(0.5, 2.0, n)
    squares = roots * roots
    R64 = K.sphere_retract(*(2 * [rng.standard_normal((n, r))]), 0.0, roots, np.empty((n, r)))
    D64 = K.sphere_tangent(rng.standard_normal((n, r)), R64, squares, 1.0, np.empty((n, r)))
    R = R64.astype(np.float32)
    for tau in (1e-1, 1e-3, 1e-5):
        R_new = K.sphere_retract(R, D64.astype(np.float32), tau, roots, np.empty_like(R))
        CR_new, CR = (K.csr_matmul(C, X, out=np.empty_like(R)) for X in (R_new, R))
        projected, decrease, product_squares = K.sphere_decrease(R_new, R, CR_new, CR, squares)

        def objective(X):
            P = K.sphere_retract(X, X, 0.0, roots, np.empty(X.shape))
            return float(np.vdot(P, C @ P))
        exact = objective(R_new) - objective(R)
        assert projected == pytest.approx(objective(R_new), rel=SINGLE)  # C R_new's rounding
        # its error shrinks with the step; the difference of the two rounded objectives' stays at ~1e-8 |f|
        error = abs(decrease - exact)
        assert error <= 1e-7 * math.sqrt(tau) * abs(objective(R))
        naive = float(np.vdot(R_new.astype(np.float64), CR_new) - np.vdot(R.astype(np.float64), CR))
        assert tau > 1e-4 or abs(naive - exact) > 100 * error
        assert product_squares == pytest.approx(np.vdot(CR_new.astype(np.float64), CR_new), rel=SUMS)


# ------------------------------------------------------------------ both precisions against references
@pytest.mark.parametrize("precision", ["double", "mixed"])
def test_both_precisions_reach_the_certified_gset_value(precision):
    problem = maxcut_problem(read_graph(bundled_graph("G1")))
    result = solve(problem, device="cpu", precision=precision, tol=1e-6, time_limit=60)
    assert result.status is Status.OPTIMAL, result.summary()
    assert result.iterations["riemannian"] > 0
    assert -result.primal_objective == pytest.approx(gset_value("G1"), rel=1e-6)
    assert result.factors[0].dtype == np.float64 and primal_residual(problem, result) <= 1e-12
    assert any("precision='mixed': the Riemannian phase in single precision" in reason
               for reason in result.plan) == (precision == "mixed")


@pytest.mark.parametrize("device", DEVICES)
def test_both_precisions_match_clarabel(device):
    problem, _ = random_maxcut(60, 0.3, seed=7)
    reference = clarabel_value(problem)
    for precision in ("double", "mixed"):
        result = solve(problem, device=device, algorithm="low_rank", precision=precision,
                       interior_point_handover=False)
        assert result.status is Status.OPTIMAL, result.summary()
        assert result.primal_objective == pytest.approx(reference, rel=2e-5)


def _runs(monkeypatch) -> list[tuple[bool, riemannian.PhaseOutcome]]:
    """(single, outcome) of every Riemannian run of the solves that follow."""
    runs = []
    run = riemannian.RiemannianPhase.run

    def recorded(phase):
        try:
            yield from run(phase)
        finally:
            runs.append((phase.single, phase.outcome))
    monkeypatch.setattr(riemannian.RiemannianPhase, "run", recorded)
    return runs


def test_where_single_precision_stalls_double_precision_finishes_and_the_answer_is_certified(monkeypatch):
    # tol = 1e-9 is beyond what a float32 factor resolves (its gradient measure floors near 1e-7): the single
    # run stalls, the double runs go on from its point, and the answer's measures, recomputed here from the returned
    # factor and multipliers alone, hold tol
    problem, L = random_maxcut(100, 0.2, seed=1)
    runs = _runs(monkeypatch)
    result = solve(problem, device="cpu", algorithm="low_rank", precision="mixed", tol=1e-9,
                   interior_point_handover=False, time_limit=30)
    assert result.status is Status.OPTIMAL, result.summary()
    assert runs[0] == (True, riemannian.PhaseOutcome.STALLED)
    assert any(not single for single, _ in runs[1:])
    R, y = result.factors[0], result.dual
    assert R.dtype == np.float64 and y.dtype == np.float64
    assert primal_residual(problem, result) <= 1e-9
    primal = float(np.vdot(R, -L / 4 @ R))
    assert primal == pytest.approx(result.primal_objective, rel=1e-12)
    bound = y.sum() + 100 * min(0.0, np.linalg.eigvalsh(-L / 4 - np.diag(y))[0])  # diag(X) = 1: tr X = n
    assert (primal - bound) / (1 + abs(primal) + abs(bound)) <= 1e-9  # a feasible point and a valid bound


def test_the_other_phases_and_split_solves_run_in_double_and_say_so(monkeypatch):
    runs = _runs(monkeypatch)
    result = solve(random_mixed_problem(0), device="cpu", precision="mixed", algorithm="low_rank", time_limit=30)
    assert result.iterations["alm"] > 0 and not runs
    assert any("precision='mixed' runs in double precision here" in reason for reason in result.plan)
    n = 1500  # above the order that stays on one device
    edges = np.random.default_rng(8).integers(0, n, (2, 3 * n))
    W = sp.csr_array((np.ones(3 * n), edges), shape=(n, n))
    split = solve(maxcut_problem(((W + W.T) > 0).astype(float)), device="cpu", devices=2, precision="mixed",
                  max_iter=20)
    assert split.status is Status.ITERATION_LIMIT and runs and not any(single for single, _ in runs)
    assert any("split over several devices" in reason for reason in split.plan)


def test_a_single_precision_run_leaves_a_double_point_even_when_stopped(monkeypatch):
    # an iteration limit inside a single run: the state, the answer and its measurement are float64, on the spheres
    problem, _ = random_maxcut(200, 0.1, seed=2)
    runs = _runs(monkeypatch)
    result = solve(problem, device="cpu", algorithm="low_rank", precision="mixed", max_iter=5)
    assert result.status is Status.ITERATION_LIMIT and runs == [(True, None)]
    assert result.factors[0].dtype == np.float64 and primal_residual(problem, result) <= 1e-12


# ------------------------------------------------------------------ the GPU's float32 kernels
gpu = pytest.mark.skipif(not gpu_available(), reason="no CuPy/GPU")


@gpu
@pytest.mark.parametrize("r", [1, 3, 8, 17, 32, 33, 64, 130])
def test_the_gpu_single_kernels_match_the_numpy_twins(r):
    import cupy
    import cupyx.scipy.sparse

    from cvxpy_culorads.backends.gpu_kernels import GpuKernels
    gk = GpuKernels()
    assert Capability.MIXED_PRECISION in gk.capabilities
    n = 5000
    (R, D, G, s0, y0), _ = _factors(10 + r, n=n, r=r, count=5)
    rng = np.random.default_rng(r)
    roots = rng.uniform(0.5, 2.0, n)
    squares = roots * roots
    dev = cupy.asarray
    got = gk.sphere_retract(dev(R), dev(D), 0.3, dev(roots), cupy.empty((n, r), np.float32))
    assert got.dtype == np.float32 and _rel(got.get(), K.sphere_retract(R, D, 0.3, roots, np.empty_like(R))) <= SINGLE
    wide = gk.sphere_retract(dev(R), dev(R), 0.0, dev(roots), cupy.empty((n, r)))
    assert _rel(wide.get(), K.sphere_retract(R, R, 0.0, roots, np.empty((n, r)))) <= 1e-14
    R64 = R.astype(np.float64) + 1e-3  # not float32 values: rounded on the way down
    narrow = gk.sphere_retract(dev(R64), dev(R64), 0.0, dev(roots), cupy.empty((n, r), np.float32))
    assert np.array_equal(narrow.get(), K.sphere_retract(R64, R64, 0.0, roots, np.empty_like(R)))
    tangent = gk.sphere_tangent(dev(D), dev(R), dev(squares), 2.0, cupy.empty((n, r), np.float32))
    assert _rel(tangent.get(), K.sphere_tangent(D, R, squares, 2.0, np.empty_like(D))) <= SINGLE
    products, reference = cupy.empty(2), np.empty(2)
    direction = gk.lbfgs_direction(dev(G), [gk.lbfgs_pair(dev(s0), dev(y0))], products)
    expected = K.lbfgs_direction(G, [K.lbfgs_pair(s0, y0)], reference)
    assert direction.dtype == np.float32 and _rel(direction.get(), expected) <= 10 * SINGLE
    assert np.allclose(products.get(), reference, rtol=10 * SINGLE)
    assert gk.inner(dev(R), dev(D)) == pytest.approx(K.inner(R, D), rel=SUMS)
    assert gk.norm(dev(R)) == pytest.approx(K.norm(R), rel=SUMS)
    assert np.allclose(gk.gram([dev(R), dev(D), dev(G)]), K.gram([R, D, G]), rtol=SUMS)
    step = gk.scale_add(dev(s0), -1.0, dev(y0), 1.0)
    assert step.dtype == np.float32 and _rel(step.get(), K.scale_add(s0.copy(), -1.0, y0, 1.0)) <= SINGLE
    W = sp.random(n, n, density=8.0 / n, random_state=rng, format="csr")
    W = (W + W.T).tocsr()
    W[0, :] = 1.0  # a long row: split into pieces (add_rows_kernel)
    W = W.tocsr()
    product = gk.csr_matmul(cupyx.scipy.sparse.csr_matrix(W), dev(R), out=cupy.empty((n, r), np.float32))
    assert product.dtype == np.float32 and _rel(product.get(), W @ R.astype(np.float64)) <= SINGLE
    CR, CD = (K.csr_matmul(W, X, out=np.empty_like(X)) for X in (R, D))
    scalars = gk.sphere_decrease(dev(D), dev(R), dev(CD), dev(CR), dev(squares))
    assert np.allclose(scalars, K.sphere_decrease(D, R, CD, CR, squares), rtol=1e-12)


@gpu
def test_the_gpu_mixed_solve_reaches_the_certified_gset_value(monkeypatch):
    problem = maxcut_problem(read_graph(bundled_graph("G1")))
    runs = _runs(monkeypatch)
    for precision in ("double", "mixed"):
        runs.clear()
        result = solve(problem, device="gpu", precision=precision, algorithm="low_rank", tol=1e-6, time_limit=60)
        assert result.status is Status.OPTIMAL, result.summary()
        assert -result.primal_objective == pytest.approx(gset_value("G1"), rel=1e-6)
        assert "cpu" not in result.device and runs
        assert any(single for single, _ in runs) == (precision == "mixed")
