"""Cumulative cProfiles of a whole solve on one GPU and on two (torus, rank 5, tol 1e-2), then the split product's
pieces timed apart with CUDA events: the whole product, the own rows only, the exchange only, the halo part only.

PYTHONPATH=$PWD python3 timeline2.py N
"""
import cProfile
import io
import pstats
import sys
import time

import cupy

sys.path.insert(0, "benchmarks")
from multi_gpu import graph_problem, warm_up_all  # noqa: E402

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.phases import riemannian  # noqa: E402

CAPTURED = {}
initialise = riemannian.RiemannianPhase.__init__


def capturing(phase, *args, **kwargs):
    initialise(phase, *args, **kwargs)
    CAPTURED["op"] = phase.op


riemannian.RiemannianPhase.__init__ = capturing


def timed(devices, function, repeats=20):
    starts, ends = [], []
    for d in devices:
        with cupy.cuda.Device(d):
            cupy.cuda.Device().synchronize()
            e = cupy.cuda.Event()
            e.record()
            starts.append(e)
    t = time.perf_counter()
    for _ in range(repeats):
        function()
    host = time.perf_counter() - t
    for d in devices:
        with cupy.cuda.Device(d):
            e = cupy.cuda.Event()
            e.record()
            ends.append(e)
    for d in devices:
        with cupy.cuda.Device(d):
            cupy.cuda.Device().synchronize()
    return [cupy.cuda.get_elapsed_time(s, e) / repeats for s, e in zip(starts, ends)], 1e3 * host / repeats


def pieces(devices):
    op = CAPTURED["op"]
    R = op.initial_factor(5, [5], 3)
    rows = [("whole product", lambda: op.objective_times(R))]
    if devices:
        shards, C = op.shards, op.C
        out = op.kernels.empty_like(R)

        def own():
            for s in range(shards.k):
                with shards.on(s):
                    shards.kernels[s].csr_matmul(C.own[s], R.parts[s], out=out.parts[s])

        def exchange():
            buffers, pending = C.exchange.start(R)
            pending.wait()

        buffers, pending = C.exchange.start(R)
        pending.wait()

        def halo():
            for s in range(shards.k):
                if C.halo[s] is not None:
                    with shards.on(s):
                        C.halo[s].add_product(shards.kernels[s], buffers[s], out.parts[s])

        rows += [("own rows only", own), ("exchange only", exchange), ("halo part only", halo),
                 ("inner", lambda: op.kernels.inner(R, out)),
                 ("sample + constraints", lambda: op.constraints(op.sample(R)))]
    else:
        rows += [("inner", lambda: op.kernels.inner(R, R)),
                 ("sample + constraints", lambda: op.constraints(op.sample(R)))]
    ids = (0, 1) if devices else (0,)
    for name, f in rows:
        f()
        device_ms, host_ms = timed(ids, f)
        print(f"| {len(ids)} | {name} | " + " / ".join(f"{v:.3f}" for v in device_ms) + f" | {host_ms:.3f} |",
              flush=True)


n = int(float(sys.argv[1]))
warm_up_all(2, ["double"])
problem = graph_problem("torus", n)[0]
for devices in (None, 2, None):
    prof = cProfile.Profile()
    prof.enable()
    r = cl.solve(problem, device="gpu", devices=devices, rank=5, shard_order="given", tol=1e-2, time_limit=200)
    prof.disable()
    steps, st = r.iterations["riemannian"], r.stage_times
    rest = r.solve_time - r.setup_time - st["riemannian"] - st["certificates"]
    print(f"gpus {devices or 1}: {r.status.value} whole {r.solve_time:.2f} set-up {r.setup_time:.2f} steps {steps} "
          f"({1e3 * st['riemannian'] / max(steps, 1):.2f} ms) certificates {st['certificates']:.2f} rest {rest:.2f}",
          flush=True)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats("cvxpy_culorads", 70)
    print(text.getvalue())
    print("| GPUs | piece | device ms (per GPU) | host ms |\n|---|---|---|---|")
    pieces(devices)
    CAPTURED.clear()
