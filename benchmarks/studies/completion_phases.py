"""Matrix completion's phases I and II: ALM steps, ADMM sweeps and CG iterations per variant, with the H200 time they
predict (decision record "completion-phase-two").

Usage, from the repository root on the CPU (counts, which the GPU repeats where it follows the same trajectory)::

    OMP_NUM_THREADS=1 python benchmarks/studies/completion_phases.py --sizes 5000:1925000 \\
        --variants defaults,cg_loose,cg_tight,rank10,handover34,handover34_hf4

Each size ``n1:m`` is the completion instance of ``benchmarks/run.py --suite completion`` (an n1 x n1 matrix of rank
5, m observed entries), solved with ``tol`` 1e-5 on the CPU for each variant (``VARIANTS``: settings, a
:class:`Tuning`, a probe (``PROBES``: code variants set for one solve), and optionally the ALM step at which phase I's
first run is made to hand over: the H200 handed over at n1 = 1e4, m = 7.7e6 at a quarter of the penalty at which the
CPU does, and these variants put the CPU on that path). A row gives phase I's first hand-over (the exit test that fired,
``ALMPhase.phase_two_exit``, or "forced", and the penalty there), the ALM steps, the ADMM sweeps, the CG solves and
iterations of phase II (in total and per sweep), the certified gap, the status, and the H200 time the counts predict:
ALM steps x 3 ms + CG iterations x (47 ms / the CG iterations per sweep of the defaults) + 52 ms of certificates, the
unit costs of the defaults' solve of n1 = 1e4, m = 7.7e6 on one H200 (``--suite targets --sizes completion2e4``),
times m / 7.7e6 for other sizes. Variants with the same phase I (no ``phase1_tol``, ``rank`` or ``seed`` setting, no
probe of phase I (``PHASE_ONE_PROBES``), the same hand-over step) start phase II from the point the first of them
handed over (phase I is deterministic, so its steps are counted again): on two loaded cores a phase I at m = 7.7e6
takes minutes.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.models import completion_problem, random_low_rank_instance  # noqa: E402
from cvxpy_culorads.operators.compressed import CompressedOperator  # noqa: E402
from cvxpy_culorads.phases import admm, alm  # noqa: E402
from cvxpy_culorads.solver import strategies  # noqa: E402
from cvxpy_culorads.solver.tuning import DEFAULT_TUNING  # noqa: E402

from report import write_tables  # noqa: E402

H200_ALM_STEP, H200_SWEEP, H200_CERTIFICATES, H200_M = 3e-3, 47e-3, 52e-3, 7_700_000  # s, at m = H200_M
TRUTH_RANK = 5


def _warm_v_from_u(self, shift, fixed, start, tol, check_every):
    """Probe: V's CG starts from the fresh U instead of the last V (U's solve keeps the last U)."""
    return _solve_factor(self, shift, fixed, fixed if start is self.V else start, tol, check_every)


def _block_jacobi(self, F):
    """Probe (host arrays): the inverse of the row-block-diagonal part of I + J'J for constraints of one coordinate
    each, diagonal or not. Row i's block is I plus, over its positions p = (i, j), w_p f_j f_j' / 4 (w_p f_i f_i' on
    the diagonal), w_p = sum_e A_fold[e, p]^2; the blocks come from one product with the rows' outer products."""
    rows, cols, n, r = self.rows, self.cols, F.shape[0], F.shape[1]
    weights = np.bincount(self.A_fold.indices, weights=self.A_fold.data ** 2, minlength=self.positions)
    off = rows != cols
    weights = np.where(off, weights / 4.0, weights)
    coupling = sp.csr_matrix((np.concatenate([weights[off], weights[off], weights[~off]]),
                              (np.concatenate([rows[off], cols[off], rows[~off]]),
                               np.concatenate([cols[off], rows[off], cols[~off]]))), shape=(n, n))
    blocks = (coupling @ (F[:, :, None] * F[:, None, :]).reshape(n, r * r)).reshape(n, r, r) + np.eye(r)
    inverses = np.linalg.inv(blocks)
    return lambda V: np.einsum("nrs,ns->nr", inverses, V)


def _hand_over_at(step: int):
    """Probe: phase I's first run hands over at ``step`` (or earlier by its own tests; the exit is named "forced"
    otherwise), at a smaller penalty than it would: the H200's trajectory at n1 = 1e4, m = 7.7e6 handed over after 30
    steps, where the CPU's goes on to step 41 at four times the penalty."""
    def exit_test(self, progress):
        return _phase_two_exit(self, progress) or ("forced" if self.steps >= step else None)
    return exit_test


def _tol_exit_anywhere(self, progress):
    """Probe: phase I's exit "tol" without its stationarity test (eta <= 0.1 / rho), as before it had one."""
    eta, self.eta = self.eta, 0.0
    try:
        return _phase_two_exit(self, progress)
    finally:
        self.eta = eta


def _slack_penalty_run(self):
    """Probe: phase II starts at a penalty of at least the largest eigenvalue of its slack s C - A*(lambda), where
    the slack's top modes cannot run away (decision record "completion-phase-two"), then runs as usual. The eigenvalue
    comes from SciPy's or CuPy's ``eigsh``, on the device the slack is on."""
    st = self.state
    slack = self.op.slack_matrix(st.lam / st.c_scale)
    eigsh = scipy.sparse.linalg.eigsh if self.backend.on_host else _cupy_eigsh()
    top = st.c_scale * float(eigsh(slack, k=1, which="LA", tol=1e-2, return_eigenvectors=False)[0])
    st.rho = max(st.rho, top)
    self.rho_max = max(self.rho_max, st.rho)
    return (yield from _admm_run(self))


def _cupy_eigsh():
    from cupyx.scipy.sparse.linalg import eigsh
    return eigsh


_solve_factor = admm.ADMMPhase._solve_factor
_phase_two_exit = alm.ALMPhase.phase_two_exit
_admm_run = admm.ADMMPhase.run
# probe name: the attributes it sets for one solve
PROBES = {
    "warm_v_from_u": [(admm.ADMMPhase, "_solve_factor", _warm_v_from_u)],
    "block_jacobi": [(CompressedOperator, "normal_preconditioner", _block_jacobi)],
    "diverge10": [(admm, "DIVERGENCE_FACTOR", 10.0)],  # phase II restarts once its infeasibility grew 10x, not 100x
    "tol_exit_anywhere": [(alm.ALMPhase, "phase_two_exit", _tol_exit_anywhere)],
    "slack_penalty": [(admm.ADMMPhase, "run", _slack_penalty_run)],
}
PHASE_ONE_PROBES = ("tol_exit_anywhere",)  # a variant with one of these runs its own phase I

# name: (settings, tuning changes, probe or None[, the ALM step at which phase I's first run hands over])
VARIANTS = {
    "defaults": ({}, {}, None),
    "cg_loose": ({}, dict(admm_cg_tolerance=(1e-1, 1e-3)), None),
    "cg_looser": ({}, dict(admm_cg_tolerance=(1.0, 1e-2)), None),
    "cg_tight": ({}, dict(admm_cg_tolerance=(1e-3, 1e-5)), None),
    "warm_v_from_u": ({}, {}, "warm_v_from_u"),
    "block_jacobi": ({}, {}, "block_jacobi"),
    "phase1_1e-4": (dict(phase1_tol=1e-4), {}, None),
    "phase1_1e-5": (dict(phase1_tol=1e-5), {}, None),
    "rank10": (dict(rank=10), {}, None),
    "rank15": (dict(rank=15), {}, None),
    "tol_exit_anywhere": ({}, {}, "tol_exit_anywhere"),
    "handover30": ({}, {}, None, 30),
    "handover30_hf4": (dict(heuristic_factor=4.0), {}, None, 30),
    "handover30_slack_penalty": ({}, {}, "slack_penalty", 30),
    "handover25": ({}, {}, None, 25),
    "handover25_slack_penalty": ({}, {}, "slack_penalty", 25),
    "handover34": ({}, {}, None, 34),
    "handover34_hf4": (dict(heuristic_factor=4.0), {}, None, 34),
    "handover34_hf10": (dict(heuristic_factor=10.0), {}, None, 34),
    "handover34_diverge10": ({}, {}, "diverge10", 34),
    "handover34_slack_penalty": ({}, {}, "slack_penalty", 34),
    "seed1": (dict(seed=1), {}, None),
    "seed2": (dict(seed=2), {}, None),
    "seed2_phase1_1e-4": (dict(seed=2, phase1_tol=1e-4), {}, None),
}
PHASE_ONE_SETTINGS = ("phase1_tol", "rank", "seed")  # a variant with one of these runs its own phase I


class PhaseTwoProbe:
    """Counts phase II's CG solves and iterations, and replays phase I from a hand-over point already reached."""

    def __init__(self):
        self.cg_iterations = self.cg_solves = 0
        # key -> (R, lam, Avals, objective, rho, c_scale, ranks, ALM steps, the exit that fired)
        self.hand_overs: dict = {}
        self.key = None  # the hand-over to replay or record in this solve
        self.first_alm = True
        self.replayed_steps = 0
        self.exit = self.exit_rho = None  # phase I's first hand-over: the exit test that fired and the penalty

    def conjugate_gradient(self, *args, **kwargs):
        x, iterations = _conjugate_gradient(*args, **kwargs)
        self.cg_solves += 1
        self.cg_iterations += iterations
        return x, iterations

    def run_alm(self, run, alm):
        first, self.first_alm = self.first_alm, False
        st = run.state
        if first and self.key in self.hand_overs:
            R, lam, Avals, st.objective, st.rho, st.c_scale, ranks, self.replayed_steps, self.exit = \
                self.hand_overs[self.key]
            st.R, st.lam, st.Avals, st.ranks = R.copy(), lam.copy(), Avals.copy(), list(ranks)
            self.exit_rho = st.rho
            return None
        stop = _run_alm(run, alm)
        if first:
            self.exit, self.exit_rho = alm.exit or (alm.outcome and alm.outcome.value), st.rho
        if first and self.key is not None and stop is None:
            self.hand_overs[self.key] = (st.R.copy(), st.lam.copy(), st.Avals.copy(), st.objective, st.rho,
                                         st.c_scale, list(st.ranks), alm.steps, self.exit)
        return stop

    def start(self, key):
        self.cg_iterations = self.cg_solves = self.replayed_steps = 0
        self.key, self.first_alm = key, True
        self.exit = self.exit_rho = None


_conjugate_gradient, _run_alm = admm.conjugate_gradient, strategies._run_alm


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000:1925000", help="n1:m values, comma-separated")
    parser.add_argument("--variants", default="defaults,cg_loose,cg_tight,warm_v_from_u,rank10",
                        help=f"comma-separated, of {', '.join(VARIANTS)}; defaults is run first")
    parser.add_argument("--no-replay", action="store_true", help="run phase I in every solve")
    parser.add_argument("--out", type=Path, default=None, help="write the table to OUT.{csv,md}")
    args = parser.parse_args(argv)

    probe = PhaseTwoProbe()
    admm.conjugate_gradient, strategies._run_alm = probe.conjugate_gradient, probe.run_alm
    names = ["defaults"] + [v for v in args.variants.split(",") if v != "defaults"]
    rows = []
    for size in args.sizes.split(","):
        n1, m = (int(float(v)) for v in size.split(":"))
        r, c, v, _ = random_low_rank_instance(n1, n1, TRUTH_RANK, m, seed=0)
        problem = completion_problem(r, c, v, (n1, n1), name=f"completion{n1}")
        scale = m / H200_M
        cg_per_sweep_defaults = None
        for name in names:
            settings, tuning, probe_name, *hand_over = VARIANTS[name]
            own_phase_one = any(k in settings for k in PHASE_ONE_SETTINGS) or probe_name in PHASE_ONE_PROBES
            probe.start(None if args.no_replay or own_phase_one else (size, *hand_over))
            patches = PROBES.get(probe_name, []) + [(alm.ALMPhase, "phase_two_exit", _hand_over_at(step))
                                                    for step in hand_over]
            saved = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in patches]
            for owner, attribute, value in patches:
                setattr(owner, attribute, value)
            start = time.perf_counter()
            try:
                result = cl.solve(problem, device="cpu", tol=1e-5, tuning=DEFAULT_TUNING.replace(**tuning),
                                  **settings)
            finally:
                for owner, attribute, value in saved:
                    setattr(owner, attribute, value)
            seconds = time.perf_counter() - start
            steps = result.iterations["alm"] + probe.replayed_steps
            sweeps = result.iterations["admm"]
            per_sweep = probe.cg_iterations / max(sweeps, 1)
            if name == "defaults":
                cg_per_sweep_defaults = max(per_sweep, 1.0)
            predicted = scale * (steps * H200_ALM_STEP + probe.cg_iterations * H200_SWEEP / cg_per_sweep_defaults
                                 + H200_CERTIFICATES)
            row = dict(n=2 * n1, m=m, variant=name, rank=max(result.ranks), exit=probe.exit,
                       exit_rho=probe.exit_rho and round(probe.exit_rho, 3), alm_steps=steps, admm_sweeps=sweeps,
                       cg_solves=probe.cg_solves, cg_iterations=probe.cg_iterations,
                       cg_per_sweep=round(per_sweep, 2), certified_gap=result.certified_gap,
                       status=result.status.value, predicted_h200_s=round(predicted, 3),
                       cpu_s=round(seconds, 1), replayed=probe.replayed_steps > 0)
            print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
            rows.append(row)
    if args.out is not None:
        print(write_tables(rows, args.out, f"completion phases I and II on the CPU, {time.strftime('%Y-%m-%d')}",
                           "predicted_h200_s: ALM steps x 3 ms + CG iterations x 47 ms / (the defaults' CG "
                           "iterations per sweep) + 52 ms, times m / 7.7e6; replayed: phase I replayed from the "
                           "defaults' hand-over", device="cpu (NumPy/SciPy)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
