"""Log-log figure of solve time versus n from the CSV files of ``run.py``, like the paper's scaling plots.

Usage::

    python benchmarks/plot.py benchmarks/results/rgg/h100.csv benchmarks/results/delaunay/h100.csv \
        --out docs/results/scaling_gpu.png

One series per (file, profile), points marked by status (filled: optimal); the paper's H100 times, where
the rows carry them, as black crosses. Needs matplotlib (``pip install matplotlib``), which the solver
itself does not.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("scaling.png"))
    args = parser.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    paper_n, paper_s = [], []
    for path in args.csv:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        for profile in dict.fromkeys(row.get("profile", "accurate") for row in rows):
            mine = sorted((r for r in rows if r.get("profile", "accurate") == profile), key=lambda r: int(r["n"]))
            n = [int(r["n"]) for r in mine]
            seconds = [float(r["seconds"]) for r in mine]
            line, = ax.plot(n, seconds, "-", label=f"{path.stem} ({profile})")
            for x, y, r in zip(n, seconds, mine):
                ax.plot(x, y, "o", color=line.get_color(), fillstyle="full" if r["status"] == "optimal" else "none")
        for r in rows:
            if r.get("paper_h100_s"):
                paper_n.append(int(r["n"]))
                paper_s.append(float(r["paper_h100_s"]))
    if paper_n:
        ax.plot(paper_n, paper_s, "kx", markersize=8, label="cuLoRADS paper (H100)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (order of the PSD variable)")
    ax.set_ylabel("solve time after setup (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
