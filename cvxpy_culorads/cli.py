"""The command line ``python -m cvxpy_culorads FILE [options]``: solve an SDPA file or the MaxCut SDP of a graph.
The file (``-``: an SDPA file on standard input, plain or gzip/xz) is read with :func:`~cvxpy_culorads.read_sdpa`
(or, with ``--maxcut``, :func:`~cvxpy_culorads.models.read_graph` and :func:`~cvxpy_culorads.models.maxcut_problem`),
solved with :func:`~cvxpy_culorads.solve`, and summarised on stdout; ``--json`` prints one strict JSON object
instead (non-finite numbers are ``null``; the iteration log goes to stderr; an error gives ``{"error": ...}``),
``--save`` stores the factors and multipliers in an ``.npz`` whose path is checked before anything is read or
solved. No error prints a traceback. Exit codes: 0 a solution was returned (its status may still be inaccurate or a
limit), 1 the solve ended without one (stalled, infeasible, unbounded, numerical error, an error inside the
engine), 2 bad input (a file, a setting, a --save path, a problem too large for the memory), 130 interrupted by
Ctrl-C (the best point so far is still printed and saved).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys

import numpy as np

from cvxpy_culorads import Result, SDPProblem, Settings, Status, __version__, gpu_available, read_sdpa, solve
from cvxpy_culorads.models import GRAPH_FORMATS, goemans_williamson, maxcut_problem, read_graph
from cvxpy_culorads.problem.io import file_stem
from cvxpy_culorads.settings import add_arguments, options_from_arguments

__all__ = ["main"]

EXIT_SOLVED, EXIT_NO_SOLUTION, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
STDIN = "-"


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors become a JSON error object on stdout when ``--json`` was asked for."""

    json_errors = False

    def error(self, message: str):
        if self.json_errors:
            _print_json({"error": {"kind": "bad_input", "message": message}})
        super().error(message)  # usage and message on stderr, exit 2


def _parser(json_errors: bool = False) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m cvxpy_culorads",
        description="Solve a semidefinite program with LoRADS: an SDPA sparse file (.dat-s, .dat-s.gz, "
                    ".dat-s.xz), or with --maxcut the MaxCut SDP of a graph file.")
    parser.add_argument("file", help="SDPA file ('-': read it from standard input), or graph file with --maxcut")
    parser.add_argument("--maxcut", action="store_true",
                        help="FILE is a graph (Gset/rudy, .mtx, .graph, .txt): solve its MaxCut SDP and round it")
    parser.add_argument("--graph-format", choices=GRAPH_FORMATS,
                        help="graph file format (default: from the suffix; no known suffix means rudy)")
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object with the results on stdout")
    parser.add_argument("--save", metavar="FILE.npz", help="save the factors R_k, x_lp and the dual to an .npz")
    parser.add_argument("--quiet", action="store_true", help="no iteration log")
    parser.add_argument("--version", action="version", version=f"cvxpy_culorads {__version__}")
    parser.json_errors = json_errors
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    """The options given on the command line on top of the default settings."""
    return Settings.from_options(**options_from_arguments(args), verbose=not args.quiet)


def _load(args: argparse.Namespace):
    """The problem and, for MaxCut, the graph's weight matrix (``None`` for an SDPA file)."""
    if args.file == STDIN and args.maxcut:
        raise ValueError("standard input ('-') is read as an SDPA file; --maxcut needs a graph file")
    if not args.maxcut:
        return read_sdpa(sys.stdin.buffer if args.file == STDIN else args.file), None
    W = read_graph(args.file, fmt=args.graph_format)
    return maxcut_problem(W, name=file_stem(args.file)), W


def _report(problem: SDPProblem, result: Result, cut: float | None) -> dict:
    """The result's scalars, JSON-ready; ``sdpa_objective`` is the objective in SDPA's max convention."""
    report = {
        "problem": problem.name,
        "status": result.status.value,
        "primal_objective": float(result.primal_objective),
        "dual_objective": float(result.dual_objective),
        "sdpa_objective": -float(result.primal_objective),
        "dual_bound": result.dual_bound,
        "certified_gap": result.certified_gap,
        "criteria": {name: float(value) for name, value in result.criteria.items()},
        "errors": result.errors.as_dict(),
        "iterations": {name: int(value) for name, value in result.iterations.items()},
        "ranks": [int(rank) for rank in result.ranks],
        "solve_time": float(result.solve_time),
        "setup_time": float(result.setup_time),
        "stage_times": {name: float(value) for name, value in result.stage_times.items()},
        "device": result.device,
        "peak_device_bytes": int(result.peak_device_bytes),
        "n": int(sum(problem.block_sizes) + problem.n_lp),
        "m": problem.m,
        "message": result.message,
    }
    if cut is not None:
        report["cut_value"] = cut
    return report


def _print_summary(report: dict, maxcut: bool) -> None:
    errors = report["errors"]
    lines = [
        f"problem            {report['problem']} (n = {report['n']}, m = {report['m']})",
        f"status             {report['status']}",
        f"primal objective   {report['primal_objective']:.10g}",
        f"dual objective     {report['dual_objective']:.10g}",
        f"{'MaxCut SDP bound' if maxcut else 'SDPA objective':<18} {report['sdpa_objective']:.10g}",
        f"certified bound    {'none' if report['dual_bound'] is None else format(report['dual_bound'], '.10g')}",
        f"criteria           {', '.join(f'{k} {v:.2e}' for k, v in report['criteria'].items())}",
        f"errors             primal infeasibility {errors['primal_infeasibility']:.2e}, dual infeasibility "
        f"{errors['dual_infeasibility']:.2e}, gap {errors['gap']:.2e} (cuLoRADS paper), worst constraint "
        f"{errors['max_violation']:.2e}",
        f"ranks              {report['ranks']}",
        f"iterations         {', '.join(f'{k} {v}' for k, v in report['iterations'].items())}",
        f"time               {report['solve_time']:.3f} s on {report['device']} (setup {report['setup_time']:.3f} s, "
        + ", ".join(f"{k} {v:.3f} s" for k, v in report["stage_times"].items()) + ")",
    ]
    if report["peak_device_bytes"]:
        lines.append(f"device memory      {report['peak_device_bytes'] / 2**30:.2f} GiB at the peak")
    if "cut_value" in report:
        lines.append(f"rounded cut        {report['cut_value']:.10g} (Goemans-Williamson)")
    if report["message"]:
        lines.append(f"message            {report['message']}")
    print("\n".join(lines))


def _json_ready(value):
    """``value`` with every non-finite float replaced by None, so that the JSON is strict (RFC 8259)."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _print_json(report: dict) -> None:
    print(json.dumps(_json_ready(report), allow_nan=False))


def _error(message: str, as_json: bool, kind: str = "bad_input", code: int = EXIT_BAD_INPUT) -> int:
    """Report an error on stderr (and as ``{"error": {"kind", "message"}}`` with ``--json``); return ``code``."""
    print(f"error: {message}", file=sys.stderr)
    if as_json:
        _print_json({"error": {"kind": kind, "message": message}})
    return code


def _save_target(path: str) -> str:
    """The file ``np.savez`` writes for ``--save path`` (it appends ``.npz``), checked writable by opening it without
    changing it (a file the check creates is removed); ``OSError`` when it cannot be written."""
    target = path if path.endswith(".npz") else path + ".npz"
    existed = os.path.lexists(target)
    with open(target, "ab"):
        pass
    if not existed:
        os.remove(target)
    return target


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    Argument errors raise ``SystemExit(2)`` from argparse (after the JSON error object, with ``--json``).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(json_errors="--json" in argv).parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:  # outside the solve, which stops by itself with the best point
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    try:
        settings = _settings(args)
    except ValueError as exc:
        return _error(str(exc), args.json)
    if settings.device == "gpu" and not gpu_available():
        return _error("--device gpu: no usable GPU (CuPy is missing or sees no CUDA device); "
                      "use --device cpu or auto", args.json)
    save_target = None
    if args.save:
        try:
            save_target = _save_target(args.save)
        except OSError as exc:
            return _error(f"--save: cannot write the solution there ({exc})", args.json)
    try:
        problem, W = _load(args)
    except (OSError, ValueError) as exc:
        return _error(str(exc), args.json)
    except MemoryError as exc:
        return _error(f"out of memory while reading the problem ({str(exc) or 'no details'})", args.json,
                      "out_of_memory")

    try:
        # With --json, stdout carries the JSON object only.
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            result = solve(problem, settings)
    except ValueError as exc:  # settings that contradict the problem
        return _error(str(exc), args.json)
    except MemoryError as exc:
        return _error(f"out of memory while solving ({str(exc) or 'no details'})", args.json, "out_of_memory")
    except Exception as exc:  # a failure inside the engine is reported, never a traceback
        return _error(f"the solver failed: {type(exc).__name__}: {exc}", args.json, "solver_error", EXIT_NO_SOLUTION)
    cut = None
    if W is not None and result.status.has_solution:
        cut, _ = goemans_williamson(result.factors[0], W, seed=settings.seed)

    report = _report(problem, result, cut)
    if args.json:
        _print_json(report)
    else:
        _print_summary(report, args.maxcut)
    if save_target:
        try:
            np.savez(save_target, **{f"R_{k}": R for k, R in enumerate(result.factors)},
                     x_lp=result.x_lp, dual=result.dual)
        except OSError as exc:
            return _error(f"cannot save the solution: {exc}", False)
    if result.status is Status.INTERRUPTED:
        return EXIT_INTERRUPTED
    return EXIT_SOLVED if result.status.has_solution else EXIT_NO_SOLUTION
