"""Where a Riemannian step's time goes, on one device and with k shards that the same device holds (or k GPUs).

Usage::

    python benchmarks/studies/step_profile.py [--n 1e7] [--shards 2] [--steps 60] [--device gpu] [--gpus k] [--rank R]
                                      [--halo-precision single|double]

The MaxCut SDP of ``graphs.random_regular_like(n, 4, seed=1)`` runs ``--steps`` Riemannian steps on the one-device
path and with k simulated shards (``sharding.simulated_backend``, numbering kept: ``shard_order="given"``). Every
call of the kernel set inside the phase, the halo exchange's gather and copies, and the per-shard products are timed
with the device synchronised before and after, so that each row is the time that operation's work alone takes
(exclusive of the rows it calls); ``other`` is the rest of the phase (host work, launches). The synchronisation
costs time of its own: the totals run above ``shard_overhead.py``'s, which does not synchronise; compare rows, not
totals, with it. ``--gpus k``: the shards on k real GPUs (NCCL; every device synchronised around each call, so
the exchange overlaps nothing here) instead of simulated on one. ``--rank R``: the solves start from R columns.
``--halo-precision``: ``Settings.halo_precision`` of the split solve. ``--precision``: ``Settings.precision``
(``mixed``: float32 factor-sized arrays). ``--unfused``: the step without ``Capability.FUSED_STEP``, for a comparison
in the same session. ``--shards 1``: the one-device path alone. Printed last: ms per step for
each operation, one device against the shards, then the byte model of the one-device step.

The byte model (decision record "fused-riemannian-step"): with F = n r v the bytes of one factor-sized array (v = 8,
or 4 in mixed precision), m the L-BFGS pairs held (``lbfgs_memory``), K = 2m + 1 and the graph's bytes
E = nnz (4 + 8) + 4 (n + 1) (int32 indices, float64 values), each call moves: ``lbfgs_direction`` 2K F + F (a Gram
pass over K arrays, a combination over them and its store), ``lbfgs_sphere_direction`` (2K + 5) F (the Gram pass also
reads the previous point and gradient and the new point and stores the new pair; the combination also reads the
point), ``sphere_tangent``, ``sphere_retract``, ``scale_add`` 3 F, ``inner`` 2 F, ``csr_matmul`` E + 2 F and
``sphere_product_gradient`` E + 2 F (+ F where C R is kept): the product's gathered rows counted once, as if the
cache served every repeat. The floor is a step that reads the graph once and touches each array it needs once:
reads the point, the gradient, the direction and the 2m pair arrays, writes the new point, its gradient, the
direction and the new pair, E + (2m + 8) F. The ratio compares the measured step with the floor's bytes at the
device's copy bandwidth (measured here: a copy of 2 GiB, or 256 MiB on the CPU).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cvxpy_culorads import distributed as sharding  # noqa: E402
from cvxpy_culorads import solve
from cvxpy_culorads.backends.backend import kernels_for, select_backend  # noqa: E402
from cvxpy_culorads.backends.kernels import Capability  # noqa: E402
from cvxpy_culorads.models import maxcut_problem  # noqa: E402
from cvxpy_culorads.phases import riemannian
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver import run as solver_run

from graphs import random_regular_like  # noqa: E402

KERNEL_CALLS = ("lbfgs_direction", "lbfgs_gram", "lbfgs_combine", "sphere_tangent", "sphere_retract", "csr_matmul",
                "inner", "scale_add", "empty_like", "gram", "gather_rows", "sphere_product_gradient",
                "lbfgs_sphere_direction", "sphere_decrease")


def call_bytes(n: int, r: int, nnz: int, pairs: int, value: int) -> tuple[dict, int]:
    """The byte model (module docstring): bytes per call of each kernel, and the floor of one step."""
    F, K = n * r * value, 2 * pairs + 1
    graph = nnz * (4 + 8) + 4 * (n + 1)
    model = {"lbfgs_direction": (2 * K + 1) * F, "lbfgs_sphere_direction": (2 * K + 5) * F,
             "sphere_tangent": 3 * F, "sphere_retract": 3 * F, "scale_add": 3 * F, "inner": 2 * F,
             "csr_matmul": graph + 2 * F, "sphere_product_gradient": graph + (2 if value == 8 else 3) * F,
             "sphere_decrease": 4 * F}
    return model, graph + (2 * pairs + 8) * F


def copy_bandwidth(xp, synchronize, nbytes: int) -> float:
    """Bytes per second of a device copy (read and write counted), the best of five."""
    x = xp.ones(nbytes // 8)
    y = xp.empty_like(x)
    best = float("inf")
    for _ in range(5):
        synchronize()
        start = time.perf_counter()
        y[...] = x
        synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * x.nbytes / best


class Profile:
    """Exclusive seconds and calls per label, recorded while a Riemannian phase runs."""

    def __init__(self, synchronize):
        self.synchronize = synchronize
        self.active = False
        self.seconds, self.calls = defaultdict(float), defaultdict(int)
        self._children: list[float] = []

    def timed(self, label_of, function):
        def wrapper(*args, **kwargs):
            if not self.active:
                return function(*args, **kwargs)
            self.synchronize()
            self._children.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.synchronize()
                elapsed = time.perf_counter() - start
                label = label_of(args, kwargs)
                self.seconds[label] += elapsed - self._children.pop()
                self.calls[label] += 1
                if self._children:
                    self._children[-1] += elapsed
        return wrapper

    def patch(self, cls, name: str, label_of=None) -> None:
        original = next(klass.__dict__[name] for klass in cls.__mro__ if name in klass.__dict__)
        static = isinstance(original, staticmethod)
        function = original.__func__ if static else original
        timed = self.timed(label_of or (lambda args, kwargs: name), function)
        setattr(cls, name, staticmethod(timed) if static else timed)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def _product_label(prefix: str):
    def label(args, kwargs):
        return f"{prefix}csr_matmul" + (" (halo part)" if kwargs.get("beta", 0.0) == 1.0 else "")
    return label


def instrument(profile: Profile, device_kernels) -> None:
    for name in KERNEL_CALLS:
        if hasattr(device_kernels, name):
            label = _product_label("") if name == "csr_matmul" else None
            profile.patch(device_kernels, name, label)
        if name in sharding.ShardedKernels.__dict__:
            label = (_product_label("sharded ") if name == "csr_matmul"
                     else (lambda args, kwargs, n=name: f"sharded {n}"))
            profile.patch(sharding.ShardedKernels, name, label)
    profile.patch(sharding.HaloExchange, "start", lambda args, kwargs: "halo gather")
    profile.patch(sharding.InProcessCommunicator, "start_exchange", lambda args, kwargs: "halo copy (simulated)")
    profile.patch(sharding.NcclCommunicator, "start_exchange", lambda args, kwargs: "halo send/receive (NCCL)")
    original_run = riemannian.RiemannianPhase.run

    def run(phase):
        profile.active = True
        try:
            yield from original_run(phase)
        finally:
            profile.active = False
    riemannian.RiemannianPhase.run = run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="1e7")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--gpus", type=int, default=None, help="split over this many GPUs instead of --shards")
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--halo-precision", choices=("single", "double"), default="double")
    parser.add_argument("--precision", choices=("double", "mixed"), default="double")
    parser.add_argument("--unfused", action="store_true", help="the step without Capability.FUSED_STEP")
    args = parser.parse_args(argv)
    backend = select_backend(args.device)
    device_kernels = type(kernels_for(backend))
    if args.unfused:
        device_kernels.capabilities = device_kernels.capabilities - {Capability.FUSED_STEP}
    if args.gpus:
        import cupy

        def synchronize():
            for device in range(args.gpus):
                cupy.cuda.Device(device).synchronize()
    else:
        synchronize = backend.synchronize
        solver_run.sharded_backend = sharding.simulated_backend  # the devices setting then means shards on this device
    profile = Profile(synchronize)
    instrument(profile, device_kernels)
    n = int(float(args.n))
    W = random_regular_like(n, 4, seed=1, device=args.device)
    problem = maxcut_problem(W if args.device == "cpu" else W.get())
    small = maxcut_problem(random_regular_like(1200, 6, seed=1))
    columns = {}
    splits = (None,) if (args.gpus or args.shards) == 1 else (None, args.gpus or args.shards)
    for k in splits:
        # compile (or load) the kernels at the profiled rank: a kernel's first call loads its module, which the
        # rows would otherwise count as ``other``
        solve(small, device=args.device, devices=k, max_iter=5, rank=args.rank, precision=args.precision)
        profile.reset()
        result = solve(problem, device=args.device, devices=k, max_iter=args.steps, shard_order="given",
                       rank=args.rank, halo_precision=args.halo_precision,
                       precision=args.precision if k is None else "double")
        steps = result.iterations["riemannian"]
        result_ranks = result.ranks
        phase = result.stage_times["riemannian"]
        times = {label: 1e3 * seconds / steps for label, seconds in profile.seconds.items()}
        times["other"] = 1e3 * phase / steps - sum(times.values())
        times["phase (synchronised)"] = 1e3 * phase / steps
        columns[k or 1] = (times, {label: calls / steps for label, calls in profile.calls.items()})
        print(f"{k or 1} shard(s): {steps} steps, {1e3 * phase / steps:.2f} ms per step (synchronised), "
              f"rank {max(result.ranks)}", flush=True)
    labels = sorted({label for times, _ in columns.values() for label in times},
                    key=lambda label: (label.startswith("phase"), label == "other", label))
    keys = list(columns)
    print(f"\nn = {n:.3g}, {args.device}: ms per step (calls per step)")
    print("| operation | " + " | ".join(f"{k} shard(s)" for k in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for label in labels:
        cells = []
        for k in keys:
            times, calls = columns[k]
            cells.append(f"{times[label]:.2f}" + (f" ({calls[label]:.1f})" if label in calls else "")
                         if label in times else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    times, calls = columns[1]
    value = 4 if args.precision == "mixed" else 8
    model, floor = call_bytes(n, max(result_ranks), problem_nnz(W), LBFGS_PAIRS, value)
    xp = backend.xp
    bandwidth = copy_bandwidth(xp, backend.synchronize, (2 << 30) if args.device == "gpu" else (256 << 20))
    moved = sum(model[label] * calls[label] for label in model if label in calls)
    step = times["phase (synchronised)"]
    step_kind = f"{args.precision}, {'unfused' if args.unfused else 'fused'}"
    print(f"\nbyte model, one device ({step_kind}, rank {max(result_ranks)}, {LBFGS_PAIRS} pairs; copy "
          f"bandwidth {bandwidth / 1e9:.0f} GB/s): GB per step (GB/s achieved)")
    for label in sorted(label for label in model if label in calls):
        gb = model[label] * calls[label] / 1e9
        print(f"| {label} | {gb:.3f} ({gb / max(times[label], 1e-9) * 1e3:.0f}) |")
    floor_ms = 1e3 * floor / bandwidth
    print(f"| step | {moved / 1e9:.3f} GB in {step:.2f} ms ({moved / step / 1e6:.0f} GB/s) | floor "
          f"{floor / 1e9:.3f} GB = {floor_ms:.2f} ms | step/floor {step / floor_ms:.2f} |")
    return 0


LBFGS_PAIRS = Settings().lorads.lbfgs_memory  # the pairs the phase holds by default


def problem_nnz(W) -> int:
    """Stored entries of the MaxCut objective's matrix: the graph's edges both ways and the diagonal."""
    return int(W.nnz) + W.shape[0]


if __name__ == "__main__":
    sys.exit(main())
