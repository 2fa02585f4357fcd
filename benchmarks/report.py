"""Shared output of the benchmark scripts: one CSV and one Markdown table per run, and the columns every suite
reports for a solve."""
from __future__ import annotations

import csv
from pathlib import Path


def write_tables(rows: list[dict], stem: Path, title: str, footer: str = "", columns: list | None = None) -> str:
    """Write ``stem.csv`` (all fields) and ``stem.md`` (``columns``, default all); return the Markdown."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))  # rows may add columns of their own
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    columns = columns or fields
    lines = [title, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:  # objective values keep their digits; other floats are measurements
        lines.append("| " + " | ".join(f"{row[c]:.10g}" if c.endswith("value") and isinstance(row.get(c), float) else
                                       f"{row[c]:.3g}" if isinstance(row.get(c), float) else str(row.get(c, ""))
                                       for c in columns) + " |")
    if footer:
        lines += ["", footer]
    text = "\n".join(lines) + "\n"
    stem.with_suffix(".md").write_text(text)
    return text


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


