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
``--halo-precision``: ``Settings.halo_precision`` of the split solve. Printed last: ms per step for each operation,
one device against the shards.
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
from cvxpy_culorads.models import maxcut_problem  # noqa: E402
from cvxpy_culorads.phases import riemannian
from cvxpy_culorads.solver import run as solver_run

from graphs import random_regular_like  # noqa: E402

KERNEL_CALLS = ("lbfgs_direction", "lbfgs_gram", "lbfgs_combine", "sphere_tangent", "sphere_retract", "csr_matmul",
                "inner", "scale_add", "empty_like", "gram", "gather_rows")


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
    args = parser.parse_args(argv)
    backend = select_backend(args.device)
    device_kernels = type(kernels_for(backend))
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
    for k in (None, args.gpus or args.shards):
        solve(small, device=args.device, devices=k, max_iter=5)  # compile the kernels
        profile.reset()
        result = solve(problem, device=args.device, devices=k, max_iter=args.steps, shard_order="given",
                       rank=args.rank, halo_precision=args.halo_precision)
        steps = result.iterations["riemannian"]
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
