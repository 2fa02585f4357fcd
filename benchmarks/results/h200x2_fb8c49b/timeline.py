"""Where a Riemannian step's device time goes, one GPU against two: CUDA events on every device's current stream
around each top-level call the phase makes (kernels, operator, backend), the stream time between calls counted as
"between" (the host's own code: the phase's Python, a sync's return). Then a cProfile of one more solve each.

PYTHONPATH=$PWD python3 timeline.py N [profile]
"""
import cProfile
import io
import os
import pstats
import sys
import time
from collections import defaultdict

import cupy

sys.path.insert(0, "benchmarks")
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.phases import riemannian  # noqa: E402

RECORDS = []  # (name, [(device, start, end)], host seconds)
DEVICES = [(0,)]
DEVICE = os.environ.get("TIMELINE_DEVICE", "gpu")


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
    phase.lbfgs.kernels = Timed(phase.lbfgs.kernels if not isinstance(phase.lbfgs.kernels, Timed)
                                else phase.lbfgs.kernels._inner)
    phase.backend = Timed(phase.backend)
    times = phase.times
    phase.times = Timed(type("T", (), {"times": staticmethod(times)})()).times


def table(label, steps):
    for d in DEVICES[0]:
        with cupy.cuda.Device(d):
            cupy.cuda.Device().synchronize()
    sums, hosts, counts = defaultdict(float), defaultdict(float), defaultdict(int)
    between = defaultdict(float)
    per_device = {}
    for d_index, d in enumerate(DEVICES[0]):
        total = gap = 0.0
        previous = None
        for name, events, _host in RECORDS:
            _, start, end = events[d_index]
            ms = cupy.cuda.get_elapsed_time(start, end)
            sums[name, d] += ms
            total += ms
            if previous is not None:
                g = cupy.cuda.get_elapsed_time(previous[1], start)
                gap += g
                between[previous[0] + " -> " + name, d] += g
            previous = (name, end)
        per_device[d] = (total, gap)
    for name, _events, host in RECORDS:
        hosts[name] += host
        counts[name] += 1
    print(f"\n## {label}: {steps} steps; per step, ms")
    print("| call | count/step | host ms | " + " | ".join(f"GPU {d} ms" for d in DEVICES[0]) + " |")
    print("|---|---|---|" + "---|" * len(DEVICES[0]))
    for name in sorted(hosts, key=lambda n: -sums[n, DEVICES[0][0]]):
        print(f"| {name} | {counts[name] / steps:.2f} | {1e3 * hosts[name] / steps:.3f} | "
              + " | ".join(f"{sums[name, d] / steps:.3f}" for d in DEVICES[0]) + " |")
    print("| between calls | | | " + " | ".join(f"{per_device[d][1] / steps:.3f}" for d in DEVICES[0]) + " |")
    print("| all | | | " + " | ".join(f"{sum(per_device[d]) / steps:.3f}" for d in DEVICES[0]) + " |")
    worst = sorted(between.items(), key=lambda kv: -kv[1])[:8]
    print("largest gaps (per step, ms): " + "; ".join(f"{k[0]} on {k[1]}: {v / steps:.3f}" for k, v in worst))
    RECORDS.clear()


def solve(problem, devices, profile=False):
    DEVICES[0] = (0, 1) if devices else (0,)
    kwargs = dict(device=DEVICE, devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    if profile:
        riemannian.RiemannianPhase.__init__ = initialise
        prof = cProfile.Profile()
        prof.enable()
    else:
        riemannian.RiemannianPhase.__init__ = instrumented
    r = cl.solve(problem, **kwargs)
    steps, st = r.iterations["riemannian"], r.stage_times
    rest = r.solve_time - r.setup_time - st["riemannian"] - st["certificates"]
    print(f"gpus {devices or 1} {'profiled' if profile else 'timeline'}: {r.status.value} whole {r.solve_time:.2f} "
          f"set-up {r.setup_time:.2f} steps {steps} ({1e3 * st['riemannian'] / max(steps, 1):.2f} ms) "
          f"certificates {st['certificates']:.2f} rest {rest:.2f} gap {r.certified_gap}", flush=True)
    if profile:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(35)
        print(text.getvalue())
    else:
        table(f"gpus {devices or 1}", steps)


n = int(float(sys.argv[1]))
if DEVICE == "gpu":
    warm_up_all(2, ["double"])
problem = graph_problem("torus", n)[0]
for devices in (None, 2):
    solve(problem, devices)
if len(sys.argv) > 2:
    for devices in (None, 2):
        solve(problem, devices, profile=True)
