"""The weak pair's step, op by op: CUDA events on every device's current stream around each call the Riemannian phase
makes, the torus at n/2 on one GPU against n on two (the same rows per GPU), then cProfiles (cumulative, the
package's functions) of a warm whole solve at n on one GPU and on two.

python3 benchmarks/studies/weak_step_timeline.py N
"""
import cProfile
import io
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.phases import riemannian  # noqa: E402

RECORDS = []
DEVICES = [(0,)]
OUT = os.environ.get("OUT", "/tmp")
TABLES = {}


class Timed:
    def __init__(self, inner):
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def timed(*args, **kwargs):
            events = []
            for d in DEVICES[0]:
                with cupy.cuda.Device(d):
                    e = cupy.cuda.Event()
                    e.record()
                    events.append([d, e, None])
            t = time.perf_counter()
            out = value(*args, **kwargs)
            host = time.perf_counter() - t
            for rec in events:
                with cupy.cuda.Device(rec[0]):
                    rec[2] = cupy.cuda.Event()
                    rec[2].record()
            RECORDS.append((name, events, host))
            return out
        return timed

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)


initialise = riemannian.RiemannianPhase.__init__


def instrumented(phase, *args, **kwargs):
    initialise(phase, *args, **kwargs)
    phase.kernels = Timed(phase.kernels)
    inner = phase.lbfgs.kernels
    phase.lbfgs.kernels = Timed(inner._inner if isinstance(inner, Timed) else inner)
    phase.backend = Timed(phase.backend)
    times = phase.times
    phase.times = Timed(type("T", (), {"times": staticmethod(times)})()).times


def table(label, steps):
    for d in DEVICES[0]:
        with cupy.cuda.Device(d):
            cupy.cuda.Device().synchronize()
    sums, hosts, counts, between = defaultdict(float), defaultdict(float), defaultdict(int), defaultdict(float)
    gaps = {}
    for i, d in enumerate(DEVICES[0]):
        gap, previous = 0.0, None
        for name, events, _ in RECORDS:
            _, start, end = events[i]
            sums[name, d] += cupy.cuda.get_elapsed_time(start, end)
            if previous is not None:
                g = cupy.cuda.get_elapsed_time(previous[1], start)
                gap += g
                between[previous[0] + " -> " + name, d] += g
            previous = (name, end)
        gaps[d] = gap
    for name, _, host in RECORDS:
        hosts[name] += host
        counts[name] += 1
    TABLES[label] = {name: [sums[name, d] / steps for d in DEVICES[0]] for name in hosts}
    TABLES[label]["between calls"] = [gaps[d] / steps for d in DEVICES[0]]
    TABLES[label]["host"] = {name: 1e3 * hosts[name] / steps for name in hosts}
    print(f"\n## {label}: {steps} steps; per step, ms")
    print("| call | count/step | host ms | " + " | ".join(f"GPU {d} ms" for d in DEVICES[0]) + " |")
    print("|---|---|---|" + "---|" * len(DEVICES[0]))
    for name in sorted(hosts, key=lambda n: -sums[n, DEVICES[0][0]]):
        print(f"| {name} | {counts[name] / steps:.2f} | {1e3 * hosts[name] / steps:.3f} | "
              + " | ".join(f"{sums[name, d] / steps:.3f}" for d in DEVICES[0]) + " |")
    print("| between calls | | | " + " | ".join(f"{gaps[d] / steps:.3f}" for d in DEVICES[0]) + " |")
    worst = sorted(between.items(), key=lambda kv: -kv[1])[:10]
    print("largest gaps (per step, ms): " + "; ".join(f"{k[0]} on {k[1]}: {v / steps:.3f}" for k, v in worst),
          flush=True)
    RECORDS.clear()


def solve(problem, devices, label, mode):
    DEVICES[0] = tuple(range(devices)) if devices else (0,)
    riemannian.RiemannianPhase.__init__ = instrumented if mode == "timeline" else initialise
    prof = cProfile.Profile() if mode == "profile" else None
    if prof:
        prof.enable()
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    if prof:
        prof.disable()
    steps, st = r.iterations["riemannian"], r.stage_times
    rest = r.solve_time - r.setup_time - st["riemannian"] - st["certificates"]
    print(f"{label} [{mode}]: {r.status.value} whole {r.solve_time:.2f} set-up {r.setup_time:.2f} steps {steps} "
          f"({1e3 * st['riemannian'] / max(steps, 1):.2f} ms) certificates {st['certificates']:.2f} rest {rest:.2f} "
          f"gap {r.certified_gap}", flush=True)
    if mode == "timeline":
        table(label, steps)
    if prof:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats("cvxpy_culorads", 100)
        with open(f"{OUT}/prof_{label.replace(' ', '_').replace(',', '')}.txt", "w") as f:
            f.write(text.getvalue())


n = int(float(sys.argv[1]))
began = time.perf_counter()
warm_up_all(2, ["double"])
print(f"warm-ups {time.perf_counter() - began:.1f} s", flush=True)
half = graph_problem("torus", n // 2)[0]
solve(half, None, "one GPU n/2", "plain")
solve(half, None, "one GPU n/2", "timeline")
del half
full = graph_problem("torus", n)[0]
solve(full, 2, "two GPUs n", "plain")
solve(full, 2, "two GPUs n", "timeline")
solve(full, 2, "two GPUs n", "profile")
solve(full, None, "one GPU n", "plain")
solve(full, None, "one GPU n", "profile")
one, two = TABLES["one GPU n/2"], TABLES["two GPUs n"]
print("\n| call | one GPU n/2 ms | two GPUs n ms (GPU 0 / 1) | difference |\n|---|---|---|---|")
for name in one:
    if name == "host":
        continue
    a, b = one[name][0], two.get(name, [float("nan")] * 2)
    print(f"| {name} | {a:.3f} | {b[0]:.3f} / {b[1]:.3f} | {max(b) - a:+.3f} |")
print(f"| sum | {sum(v[0] for k, v in one.items() if k != 'host'):.3f} | "
      f"{sum(v[0] for k, v in two.items() if k != 'host'):.3f} | |")
