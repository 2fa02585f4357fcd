"""Run a benchmark script as on a GPU with less memory: the device's memory beyond ``--gib`` is held by one
allocation outside CuPy's pool before the script starts, so that every free-memory check of the solver (the start
rank, a wider factor, the Lanczos basis) sees what the smaller card would leave.

Usage::

    python benchmarks/studies/smaller_card.py --gib 79.65 benchmarks/run.py --suite targets --sizes rgg24 ...

79.65 GiB (81,559 MiB) is an 80 GB H100's memory; on an H200 the script then measures the H100's memory limits at the
H200's speed.
"""
from __future__ import annotations

import argparse
import runpy
import sys


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, required=True, help="the memory of the card to measure as, GiB")
    parser.add_argument("script", help="the script to run, then its arguments")
    args, rest = parser.parse_known_args(argv)
    import cupy

    _, total = cupy.cuda.runtime.memGetInfo()
    held = max(total - int(args.gib * 2**30), 0)
    if held:
        cupy.cuda.runtime.malloc(held)  # a raw allocation, never freed: held until the process ends
    print(f"{held / 2**30:.1f} GiB held; {cupy.cuda.runtime.memGetInfo()[0] / 2**30:.1f} GiB free", flush=True)
    sys.argv = [args.script, *rest]
    runpy.run_path(args.script, run_name="__main__")


if __name__ == "__main__":
    main()
