"""Copies of a 1e8 x 5 float64 factor (4 GB) to fresh host memory, variants: as now (get into np.empty), the
destination's pages touched first on the pool, and staged through pinned buffers with the host's copy out of them
on the pool; one GPU, then the halves on two GPUs at once (a thread per GPU). Then NCCL communicators' set-up and
teardown."""
import os
import sys
import threading
import time

import cupy
import cupyx
import numpy as np

from cvxpy_culorads.hostpasses import map_chunks

N, R = int(float(sys.argv[1])) if len(sys.argv) > 1 else 100_000_000, 5


def as_now(dev, host):
    dev.get(out=host)


def touched(dev, host):
    flat = host.reshape(-1)
    map_chunks(lambda s: flat[s].fill(0.0), flat.size)
    dev.get(out=host)


def staged(stage_mb, buffers=2):
    def copy(dev, host):
        flat_dev, flat = dev.reshape(-1), host.reshape(-1)
        per = (stage_mb << 20) // flat.itemsize
        pinned = [cupyx.empty_pinned(per, flat.dtype) for _ in range(buffers)]
        stream = cupy.cuda.get_current_stream()
        starts = list(range(0, flat.size, per))
        events = [None] * len(starts)

        def issue(i):
            a, b = starts[i], min(starts[i] + per, flat.size)
            flat_dev[a:b].get(stream=stream, out=pinned[i % buffers][:b - a], blocking=False)
            events[i] = stream.record()
        for i in range(min(buffers, len(starts))):
            issue(i)
        for i, a in enumerate(starts):
            b = min(a + per, flat.size)
            events[i].synchronize()
            src = pinned[i % buffers]
            map_chunks(lambda s, a=a, src=src: np.copyto(flat[a + s.start:a + s.stop], src[s]), b - a)
            if i + buffers < len(starts):
                issue(i + buffers)
    return copy


VARIANTS = {"as now": as_now, "pages touched first": touched, "staged 64 MB x2": staged(64),
            "staged 256 MB x2": staged(256), "staged 32 MB x3": staged(32, 3)}
rows = []
with cupy.cuda.Device(0):
    whole = cupy.random.random((N, R))
halves = []
for d in (0, 1):
    with cupy.cuda.Device(d):
        halves.append(cupy.random.random((N // 2, R)))
for d in (0, 1):
    cupy.cuda.Device(d).synchronize()
reference = whole[:1000].get()
for repeat in range(2):
    for name, f in VARIANTS.items():
        host = np.empty((N, R))
        t = time.perf_counter()
        with cupy.cuda.Device(0):
            f(whole, host)
        one = time.perf_counter() - t
        assert np.array_equal(host[:1000], reference) and np.array_equal(host[-5:], whole[-5:].get())
        del host
        outs = [np.empty((N // 2, R)) for _ in range(2)]
        t = time.perf_counter()

        def run(d, f=f, outs=outs):
            with cupy.cuda.Device(d):
                f(halves[d], outs[d])
        threads = [threading.Thread(target=run, args=(d,)) for d in (0, 1)]
        [th.start() for th in threads]
        [th.join() for th in threads]
        two = time.perf_counter() - t
        assert np.array_equal(outs[1][-3:], halves[1][-3:].get())
        del outs
        rows.append((repeat, name, one, two))
        print(f"copy repeat {repeat} {name:22s} one GPU {one:.3f} s  two GPUs {two:.3f} s", flush=True)
from cvxpy_culorads.distributed import NcclCommunicator  # noqa: E402

for _ in range(3):
    t = time.perf_counter()
    comm = NcclCommunicator((0, 1))
    made = time.perf_counter() - t
    t = time.perf_counter()
    del comm
    import gc
    gc.collect()
    print(f"NCCL communicators: made in {made:.3f} s, gone in {time.perf_counter() - t:.3f} s", flush=True)
THP = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
print(f"host cores {len(os.sched_getaffinity(0))}; THP {THP}")
