"""Mittelmann's sparse SDP benchmark (../shared/data/mittelmann): the smallest instance of each class that two cores
solve in seconds, against the README's known values, with the certified bound recomputed from the returned
multipliers; honest statuses where the method does not finish in a short time limit; and the benchmark's table
(``benchmarks/datasets.py``) against the README it was transcribed from. Skipped where the data folder is absent."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cvxpy_culorads import Settings, Status, read_sdpa, solve
from cvxpy_culorads.certify.bounds import TraceBounds

from support import data_file, primal_residual

_spec = importlib.util.spec_from_file_location(
    "_culorads_bench_datasets", Path(__file__).resolve().parents[1] / "benchmarks" / "datasets.py")
datasets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(datasets)

TOL = Settings().tol
# The known values carry 4 to 10 significant digits (torusg3-8's verified interval is 7e-7 wide relative to it).
KNOWN_PRECISION = 1e-6


def _problem(name: str):
    return read_sdpa(data_file("mittelmann", f"{name}.dat-s.xz"))


def _known(name: str) -> float:
    return datasets.MITTELMANN[name].known


def _dual_slack(problem, lam: np.ndarray, k: int) -> np.ndarray:
    """S_k = C_k - sum_i lam_i A_ik, dense, from the problem's coordinates (each sets both symmetric entries)."""
    coeff, n = problem.A_coords[k], problem.block_sizes[k]
    M = sp.coo_matrix((lam[coeff.con] * coeff.val, (coeff.row, coeff.col)), shape=(n, n)).toarray()
    return problem.objective_matrix(k).toarray() - (M + M.T - np.diag(np.diag(M)))


def _independent_bound(problem, lam: np.ndarray, traces=None) -> float | None:
    """b'lam less what the slack's negative eigenvalues (dense eigvalsh) and negative LP entries can cost, through
    ``traces`` (tr X_k fixed by the constraints, derived by hand) or else the package's trace bounds."""
    thetas = [max(0.0, -np.linalg.eigvalsh(_dual_slack(problem, lam, k))[0]) for k in range(problem.num_blocks)]
    sigmas = np.maximum(0.0, -(problem.c_lp - problem.A_lp.T @ lam)) if problem.n_lp else np.zeros(0)
    if traces is not None:
        return float(problem.b @ lam - np.dot(thetas, traces) - sigmas.sum())
    return TraceBounds.of(problem).dual_bound(float(problem.b @ lam), thetas, sigmas).value


def _check_near_known(result, known: float):
    # OPTIMAL promises certified_gap <= tol: primal - bound <= tol (1 + |primal| + |bound|) ~ tol (1 + 2 |known|), and
    # the bound is at most the optimum, so the primal value is within 2 tol (1 + |known|) above it; below it only by
    # what a primal residual within tol can gain
    assert abs(result.primal_objective - known) <= 2 * TOL * (1 + abs(known))
    if result.dual_bound is not None:
        assert result.dual_bound <= known + KNOWN_PRECISION * (1 + abs(known))


@pytest.mark.parametrize("name, traces", [("toruspm3-8-50", (512.0,)), ("torusg3-8", (512.0,)),
                                          ("hamming_8_3_4", (1.0,))])
def test_maxcut_and_theta_reach_the_known_value_with_a_certificate(name, traces):
    # MaxCut fixes diag X = 1 (tr X = n); the theta SDP has tr X = 1 among its constraints
    problem = _problem(name)
    result = solve(problem, device="cpu", time_limit=60)
    assert result.status is Status.OPTIMAL, result.summary()
    assert primal_residual(problem, result) <= TOL
    _check_near_known(result, _known(name))
    independent = _independent_bound(problem, result.dual, traces)
    scale = 1.0 + abs(result.primal_objective) + abs(independent)
    # the reported bound uses lower estimates of lambda_min: never above the exact one, and below it by less than
    # the certified gap allows
    assert independent - TOL * scale <= result.dual_bound <= independent + 1e-9 * scale
    assert independent <= _known(name) + KNOWN_PRECISION * (1 + abs(_known(name)))


def test_copositivity_reaches_zero():
    problem = _problem("copo14")  # 14 blocks of order 14 and 364 nonnegative variables
    result = solve(problem, device="cpu", time_limit=60)
    assert result.status is Status.OPTIMAL, result.summary()
    assert primal_residual(problem, result) <= TOL
    _check_near_known(result, 0.0)


@pytest.mark.parametrize("name", ["buck3", "vibra3"])
def test_truss_problems_within_a_short_limit_are_honest(name):
    # the low-rank phases take 10-35 s on two cores here: whatever the status, it must not claim more than it has,
    # and the error it reports is the returned point's
    problem, known = _problem(name), _known(name)
    result = solve(problem, device="cpu", time_limit=6)
    assert primal_residual(problem, result) == pytest.approx(result.errors.primal_residual, rel=1e-6, abs=1e-12)
    if result.status is Status.OPTIMAL:
        assert primal_residual(problem, result) <= TOL
        _check_near_known(result, known)
        return
    assert result.status in {Status.INACCURATE, Status.TIME_LIMIT, Status.STALLED, Status.ITERATION_LIMIT}
    assert max(result.criteria.values()) > TOL or result.status is Status.TIME_LIMIT
    if result.status is Status.INACCURATE:
        assert max(result.criteria.values()) <= Settings().inaccurate_tol
    slack = KNOWN_PRECISION * (1 + abs(known))
    if result.dual_bound is not None:  # a certified bound holds at any multiplier, converged or not
        assert result.dual_bound <= known + slack
    independent = _independent_bound(problem, result.dual)
    assert independent is None or independent <= known + slack


def _readme_rows() -> dict[str, list[str]]:
    text = data_file("mittelmann", "README.md").read_text()
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()
            if line.startswith("| `")]
    return {re.sub(r"\.dat-s\.xz$", "", row[0].strip("`")): row for row in rows}


def _seconds(text: str, pattern: str) -> float | None:
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


def test_the_table_is_the_readme_transcribed():
    rows = _readme_rows()
    files = {path.name.removesuffix(".dat-s.xz") for path in data_file("mittelmann").glob("*.dat-s.xz")}
    assert set(rows) == files == set(datasets.MITTELMANN)
    for name, entry in datasets.MITTELMANN.items():
        known, best, culorads = rows[name][4], rows[name][5], rows[name][6]
        first = known.split()[0]
        assert entry.known == (None if first == "—" else float(first)), name
        assert entry.best_s == _seconds(best, r": (\d+) s "), name
        assert entry.best_solver == (re.search(r": \d+ s (\S+)", best).group(1) if entry.best_s else ""), name
        assert entry.copt_s == _seconds(best, r"\(COPT (\d+) s\)"), name
        assert entry.culorads_s == _seconds(culorads, r"^(\d+) s$"), name
        assert entry.page_name == (best.split(":")[0] if entry.best_s else ""), name
