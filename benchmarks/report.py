"""Shared output of the benchmark scripts: results as data, and the columns every suite reports for a solve.

A run writes ``<suite>/<device>.csv`` (one row per solve, all fields) and ``<suite>/<device>.meta.json`` under
``benchmarks/results/`` (or ``--out``): the command line, the device, the commit (``git rev-parse --short HEAD``,
``tree: modified`` when the working tree differs from it) and the UTC date that made the table, with its title and
footer. A new run of the same suite on the same device replaces the table; an older table worth keeping goes to
``results/archive/`` by hand, with its metadata. ``docs_tables.py`` turns the tables into the results pages of the
docs. The Markdown table is printed, not written. ``mittelmann_score`` is the measure of Mittelmann's benchmark pages:
the shifted geometric mean of times (shift 10 s, a failure counted at the time limit), of ours and of each published
column over the instances where both exist.
"""
from __future__ import annotations

import csv
import datetime
import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["RESULTS", "write_tables", "result_fields", "run_metadata", "device_slug", "read_table",
           "SHIFT", "PUBLISHED_COLUMNS", "MITTELMANN_COLUMNS", "TARGET_COLUMNS", "SUITE_COLUMNS",
           "shifted_geometric_mean", "mittelmann_score", "describe_score"]

RESULTS = Path(__file__).resolve().parent / "results"
_ROOT = Path(__file__).resolve().parents[1]

SHIFT = 10.0  # seconds, as on Mittelmann's pages
PUBLISHED_COLUMNS = ("best_s", "copt_s", "culorads_s")
# The mittelmann table shown: ours (status, time, value against the known one, the certified gap and the three
# DIMACS errors, in which Mittelmann's accuracy rule is stated) beside the published times.
MITTELMANN_COLUMNS = ["instance", "category", "n", "m", "status", "total_s", "value", "reference", "rel_error",
                      "certified_gap", "pinf", "dinf", "gap", "primal_residual", "best_s", "best_solver", "copt_s",
                      "culorads_s", "page_name"]
# The targets table shown: each solve's outcome beside its target (``suites.Target``) and the paper's H100 time.
TARGET_COLUMNS = ["instance", "n", "m", "profile", "status", "seconds", "call_s", "certified_gap", "primal_residual",
                  "target_s", "target_tol", "met", "paper_h100_s", "rank", "peak_gib"]
SUITE_COLUMNS = {"mittelmann": MITTELMANN_COLUMNS, "targets": TARGET_COLUMNS}  # other suites: every column


def device_slug(description: str, count: int = 1) -> str:
    """A file name for the device a table was measured on: ``gpu (NVIDIA H100 80GB HBM3, CuPy 14.2.0)`` -> ``h100``,
    ``cpu (NumPy/SciPy)`` -> ``cpu-<cores>core`` (this machine's cores), ``count`` GPUs -> ``2xh100``."""
    if description.startswith("cpu"):
        return f"cpu-{os.cpu_count()}core"
    model = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Z]?)\b", description)
    name = model.group(1) if model else re.sub(r"[^a-z0-9]+", "-", description.lower()).strip("-")
    return f"{count}x{name.lower()}" if count > 1 else name.lower()


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_metadata(device: str | None = None, script: str | Path | None = None, argv: list | None = None) -> dict:
    """What made a table: the command line as typed from the repository root (``script`` and ``argv``, default the
    process's), the device, the commit and whether the tree differed from it, the date (UTC)."""
    script = Path(script or sys.argv[0]).resolve()
    shown = script.relative_to(_ROOT) if script.is_relative_to(_ROOT) else script
    argv = sys.argv[1:] if argv is None else argv
    modified = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return dict(command=shlex.join(["python3", str(shown), *argv]), device=device or "not recorded",
                commit=_git("rev-parse", "--short", "HEAD") or "not recorded", tree="modified" if modified else "clean",
                date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def write_tables(rows: list[dict], stem: Path, title: str, footer: str = "", columns: list | None = None,
                 device: str | None = None, script: str | Path | None = None, argv: list | None = None,
                 **meta) -> str:
    """Write ``stem.csv`` (all fields) and ``stem.meta.json`` (``run_metadata``, the title, the footer, the columns
    to show and ``meta``); return the Markdown table of ``columns`` (default all)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))  # rows may add columns of their own
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    info = dict(run_metadata(device, script, argv), title=title, **({"footer": footer} if footer else {}),
                **({"columns": list(columns)} if columns else {}), **meta)
    stem.with_suffix(".meta.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    columns = columns or fields
    lines = [title, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    objective = ("value", "reference")  # objective values keep their digits; other floats are measurements
    for row in rows:
        lines.append("| " + " | ".join(f"{row[c]:.10g}" if c.endswith(objective) and isinstance(row.get(c), float) else
                                       f"{row[c]:.3g}" if isinstance(row.get(c), float) else str(row.get(c, ""))
                                       for c in columns) + " |")
    if footer:
        lines += ["", footer]
    return "\n".join(lines) + "\n"


def read_table(csv_path: Path) -> tuple[list[dict], dict]:
    """The rows of a results table (strings, as written) and its metadata."""
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    meta_path = csv_path.with_suffix(".meta.json")
    return rows, json.loads(meta_path.read_text()) if meta_path.exists() else {}


def result_fields(result, seconds: float, paper_seconds) -> dict:
    """The columns every suite reports for one solve: ``seconds`` is the time compared with the paper's
    ``paper_seconds`` (None where the paper has no entry)."""
    return dict(seconds=round(seconds, 3), setup_s=round(result.setup_time, 3),
                alm_steps=result.iterations["alm"], admm_sweeps=result.iterations["admm"],
                riemannian_steps=result.iterations["riemannian"],
                ipm_iters=result.iterations["interior_point"], rank=max(result.ranks),
                alm_s=round(result.stage_times["alm"], 3), admm_s=round(result.stage_times["admm"], 3),
                riemannian_s=round(result.stage_times["riemannian"], 3),
                ipm_s=round(result.stage_times["interior_point"], 3),
                certificates_s=round(result.stage_times["certificates"], 3),
                certified_gap=result.certified_gap if result.certified_gap is not None else "",
                primal_residual=result.errors.primal_residual, max_violation=result.errors.max_violation,
                pinf=result.errors.primal_infeasibility, dinf=result.errors.dual_infeasibility,
                gap=result.errors.gap, status=result.status.value,
                peak_gib=round(result.peak_device_bytes / 2**30, 3),
                paper_h100_s=paper_seconds if paper_seconds is not None else "",
                ratio=round(seconds / paper_seconds, 2) if paper_seconds else "")


def shifted_geometric_mean(times, shift: float = SHIFT) -> float:
    """exp(mean(log(t + shift))) - shift: Mittelmann's mean of times, in which a second matters less on a long
    solve than on a short one."""
    times = list(times)
    return math.exp(math.fsum(math.log(t + shift) for t in times) / len(times)) - shift


def _seconds(value) -> float | None:
    return None if value in (None, "") else float(value)


def mittelmann_score(rows: list[dict], time_limit: float) -> dict:
    """Per published column: over the rows where it has a time, the shifted geometric mean of ours (``total_s``, the
    whole solve call, or ``time_limit`` unless the status is optimal) and of the published times capped at
    ``time_limit`` (a solver slower than our limit would have failed under it), their ratio, and how many of ours
    were solved. ``rows`` are the suite's rows (as written or as read back from the CSV)."""
    out = {}
    for column in PUBLISHED_COLUMNS:
        timed = [(row, published) for row in rows if (published := _seconds(row.get(column))) is not None]
        if not timed:
            continue
        solved = [row["status"] == "optimal" for row, _ in timed]
        ours = shifted_geometric_mean(float(row["total_s"]) if ok else time_limit
                                      for (row, _), ok in zip(timed, solved))
        theirs = shifted_geometric_mean(min(published, time_limit) for _, published in timed)
        out[column] = dict(instances=len(timed), solved=sum(solved), ours=round(ours, 3), published=round(theirs, 3),
                           ratio=round(ours / theirs, 3))
    return out


def describe_score(scores: dict, time_limit: float) -> str:
    """One sentence per published column, for the printed summary and the table's footer."""
    names = dict(best_s="the best published", copt_s="COPT", culorads_s="cuLoRADS")
    parts = [f"against {names[column]}: {s['ours']:.3g} s ours ({s['solved']}/{s['instances']} optimal) vs "
             f"{s['published']:.3g} s, ratio {s['ratio']:.3g}" for column, s in scores.items()]
    if not parts:
        return "no instance with a published time"
    return (f"Mittelmann's score (shifted geometric mean, shift {SHIFT:g} s; failures at the {time_limit:g} s limit, "
            f"published times capped at it) " + "; ".join(parts))
