"""Run a benchmark suite on one device and write its tables.

Usage::

    python benchmarks/run.py --suite gset [--sizes G1,G22|all] [--device gpu] [--profiles accurate,paper]
    python benchmarks/run.py --suite rgg --sizes 15,17,19,20 --device gpu --profiles paper
    python benchmarks/run.py --suite delaunay --sizes 13,14 --device cpu --compare scs,clarabel
    python benchmarks/run.py --suite completion --sizes 1000:200000,10000:7700000
    python benchmarks/run.py --suite sparse --sizes 1e6,1e7 --profiles paper
    python benchmarks/run.py --suite mittelmann [--sizes trto3,path/to/file.dat-s.xz] --time-limit 300
    python benchmarks/run.py --suite targets [--sizes G67,delaunay20,cpu-sparse1e5-cvxpy|all] --device gpu

Suites and profiles are described in ``suites.py``. For every instance it builds the problem (its time is
``build_s``), then for every profile solves it and records the time after the data reached the device (``seconds``,
the number the paper reports; ``setup_s`` is the compression onto the device), its split over phase I, phase II, the
interior-point finish and the certificates (``alm_s``, ``admm_s``, ``ipm_s``, ``certificates_s``), iterations
(``alm_steps``, ``admm_sweeps``, ``ipm_iters``), rank, the value (of the maximisation for MaxCut and SDPA files, of
the minimisation for ``mittelmann``), the error against a known optimum where the data set has one (``rel_error``) or
against the ``accurate`` profile's value (``vs_accurate``), the three DIMACS errors, the status, the peak device
memory and the paper's H100 time with our ratio. The ``mittelmann`` suite adds the instance's class, the whole call's
time (``total_s``) and the published times, and ends with Mittelmann's score (``report.mittelmann_score``, also in the
metadata). With ``--compare`` the same SDP goes through CVXPY to SCS / Clarabel (up to the sizes of
``compare.PEER_MAX_N``), in the same run, reported on the instance's first row. ``call_s`` is the whole call a user
waits for: ``solve``, or ``problem.solve(method="culorads")`` where the suite builds a CVXPY model (``sparse-cvxpy``).
The ``targets`` suite runs the defaults, the other precision and the paper profile unless ``--profiles`` says
otherwise, each row solved with its target's tolerance and devices, and adds the target and whether it was met
(``suites.Target``); its table shows ``report.TARGET_COLUMNS``. ``--repeat k`` solves each instance k times per
profile (column ``run``). A line per instance as it finishes, then a Markdown table. The table goes to ``--out``
(``benchmarks/results/``) as data, rewritten after every instance (its footer says when it is partial):
``<suite>/<device>.csv`` and ``<suite>/<device>.meta.json`` with the command, the device, the commit and the date
(``report.write_tables``); the device is named by its model (``h100``, ``cpu-2core``). ``docs_tables.py`` regenerates
the docs' results pages from them, and ``plot.py`` draws the time-versus-n figure.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402

import suites  # noqa: E402
from compare import PEER_MAX_N, solve_with  # noqa: E402
from graphs import random_regular_like  # noqa: E402
from report import (  # noqa: E402
    PUBLISHED_COLUMNS,
    SUITE_COLUMNS,
    describe_score,
    device_slug,
    mittelmann_score,
    result_fields,
    write_tables,
)


def call_solver(problem, options: dict):
    """(the engine's Result, seconds of the whole call): ``solve`` for an SDPProblem; for a CVXPY problem
    ``problem.solve(method="culorads")``, cold (its previous answer is another profile's)."""
    start = time.perf_counter()
    if isinstance(problem, cl.SDPProblem):
        result = cl.solve(problem, **options)
    else:
        problem.solve(method="culorads", warm_start=False, **options)
        result = problem.solver_stats.extra_stats
    return result, time.perf_counter() - start


def sizes(problem, result) -> dict:
    """n (the PSD orders and nonnegative variables) and m, of the SDPProblem or of the one CVXPY's model became."""
    if isinstance(problem, cl.SDPProblem):
        return dict(n=sum(problem.block_sizes) + problem.n_lp, m=problem.m)
    return dict(n=sum(len(R) for R in result.factors) + len(result.x_lp), m=len(result.dual))


def solve_row(instance, problem, extra, profile: str, backend, args) -> dict:
    options = dict(device=backend.name, tol=args.tol, time_limit=args.time_limit, verbose=args.verbose)
    result, call_s = call_solver(problem, options | suites.settings_for(instance, profile))
    seconds = result.solve_time - result.setup_time
    value = instance.sign * result.primal_objective
    known = {} if instance.reference is None else dict(
        reference=instance.reference, rel_error=abs(value - instance.reference) / max(1.0, abs(instance.reference)))
    row = dict(instance=instance.name, **sizes(problem, result), profile=profile, value=value, **known,
               **extra(result), **result_fields(result, seconds, instance.paper_seconds), call_s=round(call_s, 3))
    if instance.target is not None:
        row.update(instance.target.columns(row))
    versus = f" (rel. error {row['rel_error']:.1e})" if known else ""
    gap = "none" if result.certified_gap is None else f"{result.certified_gap:.1e}"
    published = "".join(f" {key} {row[key]}" for key in PUBLISHED_COLUMNS if row.get(key, "") != "")
    target = f" target {row['target_s'] or '-'} s met {row['met']}" if instance.target is not None else ""
    print(f"{row['instance']:>22} {profile:>8} n={row['n']:9d} {seconds:8.2f}s (setup {result.setup_time:.2f}s, "
          f"call {call_s:.2f}s) value {row['value']:.8g}{versus} certified gap {gap} residual "
          f"{row['primal_residual']:.1e} DIMACS {row['pinf']:.1e} {row['dinf']:.1e} {row['gap']:.1e} "
          f"{row['status']}{published}{target}", flush=True)
    return row


WARM_UP_RANKS = (1, 2, 3, 5, 9, 17, 33, 65, 129)  # a rank in each bucket of the GPU kernels' instantiations


def warm_up(backend) -> None:
    """Compile the GPU kernels before anything is timed, as a compiled solver would have them: a GPU kernel is
    instantiated per rank bucket (lanes per factor row, columns per lane) and compiled by NVRTC on first use
    (~0.3 s each; 3.5 s on G1 without this), so small MaxCuts are solved from every bucket's rank, one of them
    large enough for the Lanczos path of the dual certificate; the Riemannian phase's kernels likewise."""
    for n, rank, reopt in ((1200, None, 2), (800, None, 0), *((200, r, 2) for r in WARM_UP_RANKS)):
        for algorithm in ("alm_admm", "low_rank"):
            cl.solve(maxcut_problem(random_regular_like(n, 6, seed=1)), device=backend.name, rank=rank,
                     max_iter=300, reopt_level=reopt, algorithm=algorithm)


def save(rows: list[dict], profiles: list, args, argv, device: str, partial: str) -> str:
    """Write the table of ``rows`` (``report.write_tables``) with the summary per profile as its footer, after
    ``partial``; return the Markdown table."""
    summary = []
    for profile in profiles:
        mine = [r for r in rows if r["profile"] == profile]
        met = f", {sum(r['met'] for r in mine)} targets met" if any("met" in r for r in mine) else ""
        summary.append(f"{profile}: {sum(r['seconds'] for r in mine):.2f} s over {len(mine)} instances, "
                       f"{sum(r['status'] == 'optimal' for r in mine)} optimal{met}")
    scores = {}
    if args.suite == "mittelmann":
        for profile in profiles:
            scores[profile] = mittelmann_score([r for r in rows if r["profile"] == profile], args.time_limit)
            summary.append(f"{profile}, {describe_score(scores[profile], args.time_limit)}")
    return write_tables(rows, args.out / args.suite / device_slug(device),
                        f"{args.suite} on {device}, {time.strftime('%Y-%m-%d')}, tol {args.tol:g}",
                        partial + "; ".join(summary), columns=SUITE_COLUMNS.get(args.suite),
                        device=device, script=__file__, argv=sys.argv[1:] if argv is None else argv,
                        suite=args.suite, profiles=profiles, tol=args.tol, time_limit=args.time_limit,
                        **({"score": scores} if scores else {}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(suites.SUITES), required=True)
    parser.add_argument("--sizes", default=None, help="instances: names, exponents k or sizes (see suites.py)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--profiles", default=None, help="comma-separated (suites.PROFILES); default accurate, "
                        "for targets the defaults, the other precision and the paper profile")
    parser.add_argument("--tol", type=float, default=1e-5)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--repeat", type=int, default=1, help="solves per instance and profile (column run)")
    parser.add_argument("--compare", default="", help="comma-separated CVXPY solvers, e.g. scs,clarabel")
    parser.add_argument("--verbose", action="store_true", help="print the solver's iteration log (stderr)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)

    backend = select_backend(args.device)
    profiles = args.profiles.split(",") if args.profiles else list(suites.DEFAULT_PROFILES.get(args.suite,
                                                                                           ("accurate",)))
    peers = [p for p in args.compare.split(",") if p]
    print(f"{args.suite} on {backend.describe()}, profiles {profiles}, tol {args.tol:g}", flush=True)
    if not backend.on_host:
        warm_up(backend)
    rows = []
    chosen = suites.instances(args.suite, args.sizes, backend.name)
    for done, instance in enumerate(chosen, 1):
        start = time.perf_counter()
        problem, extra = instance.build()
        built = round(time.perf_counter() - start, 2)
        group = [dict(solve_row(instance, problem, extra, profile, backend, args), build_s=built,
                      **({"run": run} if args.repeat > 1 else {}))
                 for run in range(1, args.repeat + 1) for profile in profiles]
        accurate = next((r for r in group if r["profile"] == "accurate"), None)
        for row in group if accurate is not None else []:
            row["vs_accurate"] = abs(row["value"] - accurate["value"]) / max(1.0, abs(accurate["value"]))
        peers_here = peers if isinstance(problem, cl.SDPProblem) else []  # a CVXPY model: restated by nobody
        for peer in (p for p in peers_here if group[0]["n"] <= PEER_MAX_N.get(p, 0)):  # once per instance
            outcome = solve_with(problem, peer.upper())
            value = instance.sign * outcome["value"]
            group[0].update({f"{peer}_s": round(outcome["seconds"], 3), f"{peer}_value": value,
                             f"{peer}_status": outcome["status"]})
            print(f"{'':>22} {peer:>8} {outcome['seconds']:8.2f}s value {value:.8g} {outcome['status']}", flush=True)
        rows.extend(group)
        # written after every instance: a run stopped part-way leaves the table of what it finished
        partial = "" if done == len(chosen) else f"partial, {done} of {len(chosen)} instances; "
        table = save(rows, profiles, args, argv, backend.describe(), partial)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
