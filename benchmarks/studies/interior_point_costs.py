"""The interior-point method's cost model against measured iterations: per instance, seconds per iteration measured and
predicted (``costs.interior_point_iteration_parts``), split into Schur formation, factorisation and the rest, the rest
split further into step lengths, inverses and Cholesky factors, and directions, and a fit of the model's constants for
the device.

Usage::

    python benchmarks/studies/interior_point_costs.py [--sizes NAME,NAME,...] [--device cpu|gpu] [--iterations 6]
        [--time-limit 20] [--exact-steps] [--batched-factor-order N] [--out DIR]

Each instance (default: the Mittelmann instances of ``../shared/data/mittelmann`` and a few SDPLIB ones; a name is
looked up in both folders) is solved with ``algorithm="interior_point"``, at most ``--iterations`` iterations and
``--time-limit`` seconds. The study times each iteration (from the method's resumption to its next progress row), its
calls of ``_schur`` and ``_factorise``, and the rest, synchronising the device around each (which adds a few
synchronisations per iteration to what a solve does); the first iteration, which includes one-off work (CuPy kernel
compilation), is left out of the medians. Instances beyond the method's size limits are listed and skipped.
The rest (total less Schur formation and factorisation) is split into the step lengths (``_step_lengths``: the
boundary distances, ``step_lengths.StepBounds``), the inverses and Cholesky factors (``_inverse_factors`` and
``_take_step``, which factorises the moved iterates) and the directions (``_direction``); what remains is the
residuals and the iteration's bookkeeping. ``--exact-steps`` solves each instance a second time with the step
lengths of exact eigenvalues, one eigvalsh per matrix above order 32 and a host synchronisation per stack (the
reference the Lanczos estimates replaced, kept here: ``exact_distances``), so that one run compares both;
``--batched-factor-order`` overrides ``BATCHED_FACTOR_ORDER`` (the largest order whose inverses and Cholesky factors
are one batched call).
The fit is a relative non-negative least squares per part: factorisation = schur_cube m^3, Schur formation =
route_entry (route entries), rest = group (groups) + cube (sum of n^3); it is fitted on the instances whose method
ran on the device asked for (below block order ``DEVICE_MIN_ORDER`` it runs on the host) and printed as the line to
paste into ``costs.py`` (from the rows of the package's own step lengths). A line per instance as it finishes, then
the fit, then a table of the parts per instance and step-length variant; ``interior_point_costs.json`` (rows, fit,
command, device, commit, date) goes to ``--out``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import scipy.optimize

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cvxpy_culorads as cl  # noqa: E402
from cvxpy_culorads.backends.backend import select_backend  # noqa: E402
from cvxpy_culorads.backends.memory import interior_point_fits, interior_point_routes  # noqa: E402
from cvxpy_culorads.phases import step_lengths  # noqa: E402
from cvxpy_culorads.phases.interior_point import InteriorPointPhase, interior_point_backend  # noqa: E402
from cvxpy_culorads.solver.costs import interior_point_iteration_parts  # noqa: E402

import datasets  # noqa: E402
from report import run_metadata  # noqa: E402
from suites import DATA  # noqa: E402

SDPLIB_DEFAULT = ("truss8", "control5", "qap8", "theta3", "arch4", "hinf12")
PARTS = ("schur", "factorisation", "rest")
# the rest's parts: the methods timed in each (none calls another)
REST_PARTS = {"step_lengths": ("_step_lengths",), "inverses": ("_inverse_factors", "_take_step"),
              "directions": ("_direction",)}


class IterationTimer:
    """Times the interior-point method's iterations, their Schur formation and factorisation and the rest's parts
    (``REST_PARTS``) while installed (``with timer.installed(backend):``); ``iterations`` holds one dict of seconds per
    iteration that made a step."""

    def __init__(self):
        self.iterations: list[dict] = []
        self._current: dict = {}

    @contextlib.contextmanager
    def installed(self, backend):
        iterations = InteriorPointPhase._iterations
        timed_methods = {"_schur": "schur", "_factorise": "factorisation"}
        timed_methods.update({method: part for part, methods in REST_PARTS.items() for method in methods})

        def timed(part, method):
            def call(phase, *args):
                backend.synchronize()
                start = time.perf_counter()
                out = method(phase, *args)
                backend.synchronize()
                self._current[part] = self._current.get(part, 0.0) + time.perf_counter() - start
                return out
            return call

        def timed_iterations(phase):
            backend.synchronize()
            resumed = time.perf_counter()
            for row in iterations(phase):
                backend.synchronize()
                total = time.perf_counter() - resumed
                if "schur" in self._current:  # a step was made since the last row
                    parts = dict(self._current, total=total)
                    parts["rest"] = total - parts["schur"] - parts.get("factorisation", 0.0)
                    parts["other"] = parts["rest"] - sum(parts.get(part, 0.0) for part in REST_PARTS)
                    self.iterations.append(parts)
                self._current = {}
                yield row
                resumed = time.perf_counter()

        with contextlib.ExitStack() as patches:
            for method, part in timed_methods.items():
                patches.enter_context(mock.patch.object(
                    InteriorPointPhase, method, timed(part, getattr(InteriorPointPhase, method))))
            patches.enter_context(mock.patch.object(InteriorPointPhase, "_iterations", timed_iterations))
            yield self


def exact_distances(bounds, factors, directions, lp_parts) -> tuple[float, float]:
    """``step_lengths.StepBounds.distances`` as it was before the Lanczos estimates, the reference of
    ``--exact-steps``: per stack and side the eigenvalues of every congruence L^-1 dX L^-T (one batched call up to
    ``BATCHED_EIGEN_ORDER``, else one per matrix) and a host synchronisation for its smallest; the LP part's ratio on
    the host's terms."""
    xp = bounds.xp
    distances = []
    for side_factors, side_directions, (v, dv) in zip(factors, directions, lp_parts):
        smallest = math.inf
        for L_inv, d in zip(side_factors, side_directions):
            if not bool(xp.isfinite(L_inv).all()):
                smallest = math.nan
                break
            values = step_lengths.each(xp.linalg.eigvalsh, L_inv @ d @ L_inv.swapaxes(-1, -2), xp,
                                          step_lengths.BATCHED_EIGEN_ORDER)
            smallest = min(smallest, float(values[:, 0].min()))
        negative = dv < 0
        ratio = float((-v[negative] / dv[negative]).min()) if v.size and bool(negative.any()) else math.inf
        distances.append(step_lengths.boundary_distance(smallest, ratio))
    return distances[0], distances[1]


def _path(name: str) -> Path:
    for path in (DATA / "mittelmann" / f"{name}.dat-s.xz", DATA / "sdplib" / f"{name}.dat-s",
                 DATA / "sdplib" / f"{name}.dat-s.xz"):
        if path.exists():
            return path
    raise FileNotFoundError(f"{name}: neither in {DATA / 'mittelmann'} nor in {DATA / 'sdplib'}")


def _row(name: str, device: str, iterations: int, time_limit: float, steps: str) -> dict | None:
    problem = cl.read_sdpa(_path(name))
    routes = interior_point_routes(problem) if interior_point_fits(problem) else None
    row = dict(instance=name, steps=steps, m=problem.m, groups=len(routes or ()),
               max_order=max(problem.block_sizes, default=0))
    if routes is None:
        print(f"{name}: beyond the interior-point method's size limits, skipped", flush=True)
        return None
    backend = select_backend(device)
    method_backend = interior_point_backend(problem, backend)
    on_gpu = not method_backend.on_host
    timer = IterationTimer()
    reference = mock.patch.object(step_lengths.StepBounds, "distances", exact_distances) if steps == "exact" \
        else contextlib.nullcontext()
    with timer.installed(method_backend), reference:
        result = cl.solve(problem, device=device, algorithm="interior_point", max_iter=iterations,
                          time_limit=time_limit)
    measured = timer.iterations[1:] or timer.iterations  # the first includes one-off work
    predicted = interior_point_iteration_parts(problem, on_gpu)
    row.update(method_on="gpu" if on_gpu else "cpu", iterations=len(timer.iterations), status=result.status.value,
               route_entries=sum(route for _, route in routes), cubes=sum(n ** 3 for n, _ in routes))
    for part in PARTS + ("total",) + tuple(REST_PARTS) + ("other",):
        row[f"{part}_s"] = float(np.median([it.get(part, 0.0) for it in measured])) if measured else None
    for part in PARTS + ("total",):
        row[f"{part}_predicted_s"] = sum(predicted.values()) if part == "total" else predicted[part]
    print(f"{name} ({steps} step lengths): m={problem.m} groups={row['groups']} on {row['method_on']}, "
          f"{row['iterations']} iterations, "
          + ", ".join(f"{part} {row[f'{part}_s']:.3g} s (predicted {row[f'{part}_predicted_s']:.3g})"
                      for part in ("total",) + PARTS if row[f"{part}_s"] is not None), flush=True)
    return row


def table(rows: list[dict]) -> str:
    """Median seconds per iteration of each part, one line per instance and step-length variant."""
    columns = ("total", "schur", "factorisation") + tuple(REST_PARTS) + ("other",)
    lines = [f"{'instance':24s} {'steps':9s} {'iters':>5s} " + " ".join(f"{c[:13]:>13s}" for c in columns)]
    for row in rows:
        values = " ".join(f"{row[f'{c}_s']:13.4f}" if row[f"{c}_s"] is not None else f"{'-':>13s}" for c in columns)
        lines.append(f"{row['instance'][:24]:24s} {row['steps']:9s} {row['iterations']:5d} {values}")
    return "\n".join(lines)


def _relative_nnls(features: list[list[float]], measured: list[float]) -> list[float]:
    """Non-negative coefficients minimising the relative errors sum ((features . c - t) / t)^2."""
    A = np.array(features, dtype=float) / np.array(measured)[:, None]
    scale = np.maximum(A.max(axis=0), 1e-300)  # columns of very different magnitudes (m^3 against group counts)
    coefficients, _ = scipy.optimize.nnls(A / scale, np.ones(len(measured)))
    return (coefficients / scale).tolist()


def fit(rows: list[dict], on_gpu: bool) -> dict | None:
    """The model's constants fitted to the rows whose method ran on the device (None without any)."""
    rows = [row for row in rows if row["total_s"] and (row["method_on"] == "gpu") == on_gpu
            and row["steps"] == "estimated"]
    if not rows:
        return None
    group, cube = _relative_nnls([[row["groups"], row["cubes"]] for row in rows], [row["rest_s"] for row in rows])
    route_entry, = _relative_nnls([[row["route_entries"]] for row in rows], [row["schur_s"] for row in rows])
    schur_cube, = _relative_nnls([[row["m"] ** 3] for row in rows], [row["factorisation_s"] for row in rows])
    return dict(group=group, cube=cube, route_entry=route_entry, schur_cube=schur_cube, instances=len(rows))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(list(datasets.MITTELMANN) + list(SDPLIB_DEFAULT)),
                        help="instance names, comma-separated (Mittelmann or SDPLIB)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--iterations", type=int, default=6, help="progress rows per instance (steps: one fewer)")
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per instance")
    parser.add_argument("--exact-steps", action="store_true",
                        help="also solve each instance with the step lengths of exact eigenvalues (the reference)")
    parser.add_argument("--batched-factor-order", type=int, default=step_lengths.BATCHED_FACTOR_ORDER,
                        help="the largest order whose inverses and Cholesky factors are one batched call")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "interior_point_costs"))
    args = parser.parse_args(argv)
    step_lengths.BATCHED_FACTOR_ORDER = args.batched_factor_order
    variants = ("estimated", "exact") if args.exact_steps else ("estimated",)
    rows = [row for name in args.sizes.split(",") for steps in variants
            if (row := _row(name, args.device, args.iterations, args.time_limit, steps)) is not None]
    constants = fit(rows, args.device == "gpu")
    if constants is not None:
        name = "IPM_GPU" if args.device == "gpu" else "IPM_CPU"
        print(f"fitted on {constants['instances']} instances; for costs.py:")
        print(f"{name} = _IterationCosts({constants['group']:.2g}, {constants['cube']:.2g}, "
              f"{constants['route_entry']:.2g}, {constants['schur_cube']:.2g})")
    device = select_backend(args.device).describe()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"interior_point_costs_{args.device}.json"
    path.write_text(json.dumps(dict(run_metadata(device), rows=rows, fit=constants,
                                    batched_factor_order=args.batched_factor_order), indent=1))
    print(f"wrote {path}")
    print(f"median seconds per iteration (BATCHED_FACTOR_ORDER {args.batched_factor_order}):")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
