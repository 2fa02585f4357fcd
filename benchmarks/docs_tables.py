"""Regenerate the docs' results pages (``docs/results/*.md``) from the tables under ``benchmarks/results/``.

Usage::

    python3 benchmarks/docs_tables.py            # rewrite the pages
    python3 benchmarks/docs_tables.py --check    # exit 1 if a committed page differs from its regeneration

Every table comes from one ``<suite>/<device>.csv`` and its ``.meta.json`` (``report.write_tables``), headed by the
command, the device, the commit and the date that made it; cells are copied from the CSV as written. A page shows the
current table of each suite and device it covers, then the earlier runs kept in ``results/archive/`` (some of them
in full, where no later run covers their instances), and links to the decision records behind the numbers.
``tests/test_benchmarks.py`` checks that the committed pages are this script's output.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import MITTELMANN_COLUMNS, RESULTS, SHIFT, TARGET_COLUMNS, read_table  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "results"

SOLVE = ["instance", "n", "m", "profile", "value", "reference", "rel_error", "vs_accurate", "seconds", "setup_s",
         "alm_steps", "riemannian_steps", "admm_sweeps", "ipm_iters", "rank", "certificates_s", "certified_gap",
         "status", "peak_gib", "paper_h100_s"]
MULTI = ["n", "edges", "gpus", "halo", "ms_per_step", "products_per_step", "seconds", "setup_s", "riemannian_steps",
         "rank", "certificates_s", "certified_gap", "status", "peak_gib", "speedup"]


@dataclass
class Table:
    path: str  # under benchmarks/results/, without .csv
    heading: str
    columns: list | None = None  # shown where present (default: all)
    keep: tuple = ()  # (column, allowed values): rows shown
    pending: str = ""  # the command that will write a table not measured yet (its section says so meanwhile)


@dataclass
class Page:
    title: str
    intro: str
    current: list
    earlier: list = field(default_factory=list)  # shown in full
    listed: list = field(default_factory=list)  # archived suite/device prefixes listed by their metadata
    records: list = field(default_factory=list)  # (file under docs/decisions/, what it holds)
    figure: str = ""


KERNELS = ("csr_ours", "csr_cupyx", "csr_naive", "samp_sym_ours", "samp_sym_naive", "samp_ours", "pair_ours")

PAGES = {
    "gset.md": Page(
        "Gset MaxCut", "The Gset graphs of `../shared/data/gset` against their certified SDP values "
        "(`python3 benchmarks/run.py --suite gset`).",
        [Table("gset/h100", "One H100", SOLVE), Table("gset/cpu-2core", "CPU, 2 cores", SOLVE)],
        earlier=[Table("archive/gset/h100-c22b6c4", "All 71 graphs on one H100, the engine before the certified "
                       "criterion (accurate and paper profiles)", SOLVE)],
        records=[("stationary-multipliers.md", "the current GPU table's A/B run"),
                 ("riemannian-phase.md", "the Riemannian phase, the default on MaxCut"),
                 ("settings-profiles.md", "the accurate and paper profiles"),
                 ("certified-criterion.md", "certified answers")]),
    "sdplib.md": Page(
        "SDPLIB", "SDPA files of `../shared/data/sdplib` against their known optima (`--suite sdplib`).",
        [Table("sdplib/h100", "One H100", SOLVE), Table("sdplib/cpu-2core", "CPU, 2 cores", SOLVE)],
        earlier=[Table("archive/sdplib/h100-ede3036", "The 21 problems that go to the interior-point finish, "
                       "one H100", SOLVE),
                 Table("archive/sdplib/cpu-2core-compare", "Side by side with SCS and Clarabel through CVXPY, "
                       "CPU, 2 cores", SOLVE + ["scs_s", "scs_value", "scs_status", "clarabel_s", "clarabel_value",
                                                "clarabel_status"])],
        records=[("trace-sphere-fused-step.md", "the current GPU table's A/B run"),
                 ("interior-point-finish.md", "the interior-point finish"),
                 ("small-sdp-routes.md", "small SDPs by route")]),
    "graphs.md": Page(
        "Large sparse MaxCut: delaunay, rgg, sparse",
        "The paper's synthetic MaxCut families, 2^k vertices numbered along a Z-order curve (`benchmarks/graphs.py`), "
        "and `sparse`, a random graph of average degree 4 with no locality (`--suite delaunay|rgg|sparse`).",
        [Table("delaunay/h100", "delaunay, one H100", SOLVE), Table("rgg/h100", "rgg, one H100", SOLVE),
         Table("sparse/h100", "sparse, one H100", SOLVE), Table("delaunay/cpu-2core", "delaunay, CPU, 2 cores", SOLVE)],
        earlier=[Table("archive/delaunay/h100-9121577", "delaunay 2^13 to 2^24, one H100, engine 9121577", SOLVE),
                 Table("archive/rgg/h100-9121577", "rgg 2^15 to 2^24, paper profile, one H100, engine 9121577", SOLVE),
                 Table("archive/sparse/h100-9121577", "sparse 1e6 to 1e8, paper profile, one H100, engine 9121577",
                       SOLVE)],
        listed=["archive/rgg/", "archive/delaunay/cpu-2core"],
        records=[("escape-fresh-start.md", "the current sparse table"),
                 ("stationary-multipliers.md", "the current delaunay and rgg tables"),
                 ("riemannian-starting-rank.md", "the starting rank"),
                 ("phase-two-preconditioner-and-memory.md", "how n = 1e8 came to fit and solve")],
        figure="scaling_gpu.png"),
    "completion.md": Page(
        "Matrix completion", "Nuclear-norm completion of a random low-rank matrix from m entries "
        "(`--suite completion --sizes n1:m[:r]`, an SDP of order n = 2 n1).",
        [Table("completion/h100", "n = 2e4, m = 7.7e6 (the paper's 0.4 s instance), one H100, two runs",
               ["run"] + SOLVE + ["truth_rank", "recovery"])],
        earlier=[Table("archive/completion/h100-9121577", "The paper's sizes to n = 2e7, m = 2e8, one H100, "
                       "engine 9121577", SOLVE + ["truth_rank", "recovery"]),
                 Table("completion-rank/cpu-2core", "The rank of the SDP's optimum by the truth's rank, CPU "
                       "(`benchmarks/studies/completion_rank.py`)")],
        records=[("completion-paper-size.md", "the current table and what was tried"),
                 ("completion-truth-rank.md", "why the suite names the truth's rank"),
                 ("stationary-multipliers.md", "the certificates' share")]),
    "theta.md": Page(
        "Lovász theta", "The Lovász theta function of Hamming graphs H(d, q), θ = q^(d−1) exactly, in both "
        "formulations of `models.theta_problem` (`--suite theta --sizes d:q[:formulation]`).",
        [Table("theta/h100", "H(3,10) and H(4,10), one H100", SOLVE),
         Table("long-rows/h100", "The adjoint product with long rows split or walked whole, one H100 "
               "(`benchmarks/studies/long_rows.py`)")],
        earlier=[Table("archive/theta/h100-64618d3-large", "H(5,10) and H(6,10), low-rank form, one H100", SOLVE)],
        records=[("trace-sphere.md", "phase I on the trace sphere"),
                 ("trace-sphere-fused-step.md", "the current table's A/B run"),
                 ("long-rows-split.md", "long rows split"), ("theta-rank-growth.md", "rank growth, not kept"),
                 ("theta-alm-variants.md", "other variants, not kept")]),
    "mittelmann.md": Page(
        "Mittelmann's sparse SDP benchmark",
        "The instances of `../shared/data/mittelmann` (`--suite mittelmann`), one after another in one process with "
        "the solver's defaults and a time limit each, beside the times on Mittelmann's page (run of 2026-04-25): the "
        "best solver's, COPT 8's (CPU) and cuLoRADS 1.0's (GPU); `benchmarks/datasets.py` has the table of classes, "
        "known values (min form, `value` is the primal objective) and published times. `total_s` is the whole solve "
        "call. Our status promises the certified criterion (primal residual and certified gap within tol, "
        "`certified_gap`); Mittelmann's accuracy rule is stated in the DIMACS errors, given as `pinf`, `dinf` and "
        "`gap`, so rows can be compared like with like. The footer's score is the page's measure: the shifted "
        f"geometric mean of times (shift {SHIFT:g} s), ours counted at the time limit unless optimal, the published "
        "times capped at the same limit, over the instances with a published time.",
        [Table("mittelmann/h200", "One H200, thirteen instances", MITTELMANN_COLUMNS),
         Table("mittelmann/cpu-2core", "CPU, 2 cores", MITTELMANN_COLUMNS)],
        records=[("certified-criterion.md", "what OPTIMAL certifies"),
                 ("interior-point-route.md", "the interior-point route"),
                 ("quantum-chemistry-convergence.md", "the 2-RDM problems"),
                 ("route-cost-model.md", "which method starts"),
                 ("interior-point-finish.md", "the interior-point finish")]),
    "targets.md": Page(
        "Targets", "Issue 51's targets (`--suite targets`, `benchmarks/suites.py`'s `TARGETS`): each instance "
        "solved with the defaults, the other precision (`precision`) and the paper profile in the same run, at its "
        "target's tolerance. A row meets its target (`met`) when its certified gap and primal residual are within "
        "`target_tol` and its time within `target_s`: on the GPU `seconds`, the time after the data reached the "
        "device, as the paper counts (`paper_h100_s`, the paper's H100 time); on the CPU `call_s`, the whole call a "
        "user waits for, by the direct API (`cpu-sparse1e5`) and through CVXPY's `method=\"culorads\"` "
        "(`cpu-sparse1e5-cvxpy`). The targets are the defaults' rows; the other profiles are measured beside them.",
        [Table("targets/h200", "GPU rows, one H200", TARGET_COLUMNS,
               pending="python3 benchmarks/run.py --suite targets --device gpu"),
         Table("targets/h200-followup", "GPU rows rerun after later changes, one H200", TARGET_COLUMNS),
         Table("targets/h200-row-kernels", "GPU rows with the row kernels in registers, one H200", TARGET_COLUMNS),
         Table("targets/h200-complete-archive", "GPU rows with every row kernel prebuilt (no compilation inside a "
               "timed solve), one H200", TARGET_COLUMNS),
         Table("targets/h200-h100-memory", "The large targets on one H200 holding an 80 GB H100's free memory",
               TARGET_COLUMNS),
         Table("targets/cpu-2core", "CPU rows, 2 cores, two runs", ["run"] + TARGET_COLUMNS),
         Table("targets/cpu-2core-followup", "CPU rows after the CPU step's changes, 2 cores", TARGET_COLUMNS)],
        records=[("settings-profiles.md", "the accurate and paper profiles"),
                 ("mixed-precision.md", "the precision setting"),
                 ("certified-criterion.md", "what the certified gap certifies"),
                 ("cvxpy-method-path.md", "the CVXPY path")]),
    "several-gpus.md": Page(
        "Several GPUs", "One problem split by rows over the GPUs of one host (`solve(..., devices=k)`). The "
        "summary compiles the runs named in its rows; the tables below it are `benchmarks/studies/multi_gpu.py` "
        "and `multi_gpu_completion.py` (one GPU against k in one process).",
        [Table("several-gpus/summary", "Where it stands"),
         Table("multi-gpu/2xh200", "Sparse MaxCut n = 1e8, 100 steps, two H200", MULTI),
         Table("multi-gpu/2xh100", "Sparse MaxCut n = 1e8, 100 steps, two H100 (cold)", MULTI),
         Table("multi-gpu-completion/2xh200", "Completion at m = 6·10⁸, two H200",
               ["n1", "m", "gpus", "seconds", "setup_s", "alm_steps", "ms_per_step", "admm_sweeps", "rank",
                "certificates_s", "certified_gap", "primal_residual", "status", "peak_gib", "recovery"])],
        listed=["archive/multi-gpu/", "archive/multi-gpu-completion/"],
        records=[("several-gpus-model.md", "the model for k GPUs and the four-GPU runs"),
                 ("answer-copy-and-communicators.md", "the torus pairs at 1.75–1.81×"),
                 ("halo-precision.md", "the random graph's 100 steps, double and single halos"),
                 ("split-phases-one-and-two.md", "completion on split rows"),
                 ("phase-memory-and-n-3e8.md", "n = 3·10⁸")]),
    "studies.md": Page(
        "Studies' tables", "Tables of the one-off studies in `benchmarks/studies/` that decisions rest on.",
        [Table("kernels/h100", "GPU kernels against cupyx and naive CuPy, one H100 (`kernels_bench.py`; the "
               "tuning knobs' rows are in the CSV)", ["n", "graph", "r", "kernel", "ms", "GBps_noreuse",
                                                      "pct_copy_noreuse", "relerr"], keep=("kernel", KERNELS)),
         Table("lanczos/h100", "One Lanczos step, one H100 (`lanczos_bench.py`)"),
         Table("rank-sweep/h100", "The Riemannian phase's starting rank, one H100 (`rank_sweep.py`)"),
         Table("routes/cpu-2core", "Small SDPs by route, CPU, 2 cores (`routes.py`)",
               ["instance", "n", "m", "blocks", "auto_first", "auto_s", "interior_point_s", "low_rank_s",
                "clarabel_solver_s", "culorads_cvxpy_s", "clarabel_s", "cvxpy_ratio", "auto_steps", "auto_status",
                "value", "clarabel_value"]),
         Table("devices/host-h100", "The host's CPU against the GPU, one H100 machine (`devices.py`)"),
         Table("cvxpy-paths/cpu-2core", "MaxCut through CVXPY, CPU, 2 cores (`cvxpy_paths.py`)"),
         Table("cvxpy-paths/h100", "MaxCut through CVXPY, one H100 (`cvxpy_paths.py`)"),
         Table("warm-start/cpu-2core", "Warm against cold starts in parameter sweeps, CPU (`warm_start.py`)"),
         Table("busy-machine/cpu-2core", "SDPLIB beside a busy process: threads per stage against all cores, CPU "
               "(`busy_machine.py`)")],
        listed=["archive/kernels/"],
        records=[("kernel-byte-model-and-tuning.md", "the kernels' byte model and knobs"),
                 ("lanczos-cuda-graphs.md", "Lanczos from CUDA graphs"),
                 ("riemannian-starting-rank.md", "the rank sweep"), ("small-sdp-routes.md", "routes"),
                 ("device-auto.md", "which device `auto` takes"), ("warm-start.md", "warm starts"),
                 ("threads-per-stage.md", "threads per stage")]),
}


def _cell(value: str) -> str:
    return _text(value.replace("|", "\\|").replace("\n", " "))


def _text(value: str) -> str:
    """``<`` before a letter outside code spans would read as an HTML tag: written ``&lt;`` (renders the same)."""
    parts = value.split("`")
    parts[::2] = [re.sub(r"<(?=[A-Za-z/])", "&lt;", part) for part in parts[::2]]
    return "`".join(parts)


def _header(meta: dict, path: str) -> list[str]:
    lines = [f"- command: `{meta.get('command', 'not recorded')}`",
             f"- device: {meta.get('device_description') or meta.get('device', 'not recorded')}",
             f"- commit: {meta.get('commit', 'not recorded')}"
             + (" (tree modified)" if meta.get("tree") == "modified" else ""),
             f"- date: {meta.get('date', 'not recorded')}",
             f"- data: `benchmarks/results/{path}.csv`"]
    lines += [f"- {key}: {_text(meta[key])}" for key in ("footer", "notes") if meta.get(key)]
    return lines


def render_table(table: Table) -> list[str]:
    if table.pending and not (RESULTS / f"{table.path}.csv").exists():
        return [f"### {table.heading}", "", f"Not measured yet: `{table.pending}` writes "
                f"`benchmarks/results/{table.path}.csv`.", ""]
    rows, meta = read_table(RESULTS / f"{table.path}.csv")
    fields = list(rows[0]) if rows else []
    columns = [c for c in table.columns if c in fields] if table.columns else fields
    if table.keep:
        rows = [row for row in rows if row[table.keep[0]] in table.keep[1]]
    lines = [f"### {table.heading}", "", *_header(meta, table.path), ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c) or "") for c in columns) + " |" for row in rows]
    return lines + [""]


def _listed(prefix: str, shown: set) -> list[str]:
    lines = []
    for csv_path in sorted(RESULTS.glob(f"{prefix}*.csv") if not prefix.endswith("/") else
                           (RESULTS / prefix).glob("*.csv")):
        path = str(csv_path.relative_to(RESULTS).with_suffix(""))
        if path in shown:
            continue
        _, meta = read_table(csv_path)
        lines.append(f"- `benchmarks/results/{path}.csv`: {meta.get('date', 'date not recorded')}, "
                     f"commit {meta.get('commit', 'not recorded')}, {meta.get('device_description', '')}; "
                     f"`{meta.get('command', 'command not recorded')}`")
    return lines


def _page_head(title: str, intro: str) -> list[str]:
    return [f"# {title}", "", "<!-- Generated by benchmarks/docs_tables.py from benchmarks/results/: edit the data "
            "or the script, not this page. -->", "", intro, ""]


def render_page(page: Page) -> str:
    lines = _page_head(page.title, page.intro)
    if page.figure:
        lines += [f"![Solve time against n]({page.figure})", "",
                  "The figure is `benchmarks/plot.py` over the engine-9121577 rgg and delaunay tables below.", ""]
    lines += ["## Current tables", ""]
    for table in page.current:
        lines += render_table(table)
    if page.earlier:
        lines += ["## Earlier runs, in full", "",
                  "Kept in `benchmarks/results/archive/` where no later run covers their instances.", ""]
        for table in page.earlier:
            lines += render_table(table)
    shown = {t.path for t in page.current + page.earlier}
    listed = [line for prefix in page.listed for line in _listed(prefix, shown)]
    if listed:
        lines += ["## Other archived runs", "", *listed, ""]
    if page.records:
        lines += ["## Decision records", ""]
        lines += [f"- [{what}](../decisions/{name})" for name, what in page.records]
        lines += [""]
    return "\n".join(lines).rstrip("\n") + "\n"


INDEX_INTRO = (
    "Measured tables, one current table per suite and device, each headed by the command, the device, the commit and "
    "the date that made it. The data are `benchmarks/results/<suite>/<device>.csv` with `<device>.meta.json`; earlier "
    "runs worth keeping are in `benchmarks/results/archive/`, and the logs that the decision records cite in "
    "`benchmarks/results/archive/<record>/`. GPU numbers were measured on GPUs; timings on one machine vary between "
    "runs (by up to about ±30 % on the lent H100s).\n\n"
    "To add or refresh a table: `python3 benchmarks/run.py --suite <suite> --sizes ... --device gpu` writes "
    "`benchmarks/results/<suite>/<device>.csv` and its metadata; then `python3 benchmarks/docs_tables.py` regenerates "
    "these pages. What was measured and not kept is in the [decision records](../decisions/index.md).")


def render_index() -> str:
    lines = _page_head("Results", INDEX_INTRO) + ["## Pages", ""]
    for name, page in PAGES.items():
        lines.append(f"- [{page.title}]({name}): " + ", ".join(f"`{t.path}`" for t in page.current))
    lines += ["", "## Current data", "", "| suite | device | date | commit | rows |", "|---|---|---|---|---|"]
    for csv_path in sorted(p for p in RESULTS.glob("*/*.csv") if p.parent.name != "archive"):
        rows, meta = read_table(csv_path)
        lines.append(f"| {csv_path.parent.name} | {_cell(meta.get('device_description', csv_path.stem))} | "
                     f"{meta.get('date', 'not recorded')} | {_cell(str(meta.get('commit', 'not recorded')))} | "
                     f"{len(rows)} |")
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    out = {"index.md": render_index()}
    out.update({name: render_page(page) for name, page in PAGES.items()})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed pages, write nothing")
    parser.add_argument("--out", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    stale = []
    for name, text in pages().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run python3 benchmarks/docs_tables.py): " + ", ".join(stale))
        return 1
    print("results pages " + ("up to date" if args.check else f"written to {args.out}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
