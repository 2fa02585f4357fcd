"""The interior-point method's cost model against measured iterations: per instance, seconds per iteration measured and
predicted (``costs.interior_point_iteration_parts``), split into Schur formation, factorisation and the rest, and a fit
of the model's constants for the device.

Usage::

    python benchmarks/studies/interior_point_costs.py [--sizes NAME,NAME,...] [--device cpu|gpu] [--iterations 6]
        [--time-limit 20] [--out DIR]

Each instance (default: the Mittelmann instances of ``../shared/data/mittelmann`` and a few SDPLIB ones; a name is
looked up in both folders) is solved with ``algorithm="interior_point"``, at most ``--iterations`` iterations and
``--time-limit`` seconds. The study times each iteration (from the method's resumption to its next progress row), its
calls of ``_schur`` and ``_factorise``, and the rest, synchronising the device around each (which adds a few
synchronisations per iteration to what a solve does); the first iteration, which includes one-off work (CuPy kernel
compilation), is left out of the medians. Instances beyond the method's size limits are listed and skipped.
The fit is a relative non-negative least squares per part: factorisation = schur_cube m^3, Schur formation =
route_entry (route entries), rest = group (groups) + cube (sum of n^3); it is fitted on the instances whose method
ran on the device asked for (below block order ``DEVICE_MIN_ORDER`` it runs on the host) and printed as the line to
paste into ``costs.py``. A line per instance as it finishes, then the fit; ``interior_point_costs.json`` (rows, fit,
command, device, commit, date) goes to ``--out``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
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
from cvxpy_culorads.phases.interior_point import InteriorPointPhase, interior_point_backend  # noqa: E402
from cvxpy_culorads.solver.costs import interior_point_iteration_parts  # noqa: E402

import datasets  # noqa: E402
from report import run_metadata  # noqa: E402
from suites import DATA  # noqa: E402

SDPLIB_DEFAULT = ("truss8", "control5", "qap8", "theta3", "arch4", "hinf12")
PARTS = ("schur", "factorisation", "rest")


class IterationTimer:
    """Times the interior-point method's iterations and their Schur formation and factorisation while installed
    (``with timer.installed(backend):``); ``iterations`` holds one dict of seconds per iteration that made a step."""

    def __init__(self):
        self.iterations: list[dict] = []
        self._current: dict = {}

    @contextlib.contextmanager
    def installed(self, backend):
        schur, factorise, iterations = (InteriorPointPhase._schur, InteriorPointPhase._factorise,
                                        InteriorPointPhase._iterations)

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
                    self.iterations.append(parts)
                self._current = {}
                yield row
                resumed = time.perf_counter()

        with mock.patch.object(InteriorPointPhase, "_schur", timed("schur", schur)), \
                mock.patch.object(InteriorPointPhase, "_factorise", timed("factorisation", factorise)), \
                mock.patch.object(InteriorPointPhase, "_iterations", timed_iterations):
            yield self


def _path(name: str) -> Path:
    for path in (DATA / "mittelmann" / f"{name}.dat-s.xz", DATA / "sdplib" / f"{name}.dat-s",
                 DATA / "sdplib" / f"{name}.dat-s.xz"):
        if path.exists():
            return path
    raise FileNotFoundError(f"{name}: neither in {DATA / 'mittelmann'} nor in {DATA / 'sdplib'}")


def _row(name: str, device: str, iterations: int, time_limit: float) -> dict | None:
    problem = cl.read_sdpa(_path(name))
    routes = interior_point_routes(problem) if interior_point_fits(problem) else None
    row = dict(instance=name, m=problem.m, groups=len(routes or ()), max_order=max(problem.block_sizes, default=0))
    if routes is None:
        print(f"{name}: beyond the interior-point method's size limits, skipped", flush=True)
        return None
    backend = select_backend(device)
    method_backend = interior_point_backend(problem, backend)
    on_gpu = not method_backend.on_host
    timer = IterationTimer()
    with timer.installed(method_backend):
        result = cl.solve(problem, device=device, algorithm="interior_point", max_iter=iterations,
                          time_limit=time_limit)
    measured = timer.iterations[1:] or timer.iterations  # the first includes one-off work
    predicted = interior_point_iteration_parts(problem, on_gpu)
    row.update(method_on="gpu" if on_gpu else "cpu", iterations=len(timer.iterations), status=result.status.value,
               route_entries=sum(route for _, route in routes), cubes=sum(n ** 3 for n, _ in routes))
    for part in PARTS + ("total",):
        row[f"{part}_s"] = float(np.median([it.get(part, 0.0) for it in measured])) if measured else None
        row[f"{part}_predicted_s"] = sum(predicted.values()) if part == "total" else predicted[part]
    print(f"{name}: m={problem.m} groups={row['groups']} on {row['method_on']}, {row['iterations']} iterations, "
          + ", ".join(f"{part} {row[f'{part}_s']:.3g} s (predicted {row[f'{part}_predicted_s']:.3g})"
                      for part in ("total",) + PARTS if row[f"{part}_s"] is not None), flush=True)
    return row


def _relative_nnls(features: list[list[float]], measured: list[float]) -> list[float]:
    """Non-negative coefficients minimising the relative errors sum ((features . c - t) / t)^2."""
    A = np.array(features, dtype=float) / np.array(measured)[:, None]
    scale = np.maximum(A.max(axis=0), 1e-300)  # columns of very different magnitudes (m^3 against group counts)
    coefficients, _ = scipy.optimize.nnls(A / scale, np.ones(len(measured)))
    return (coefficients / scale).tolist()


def fit(rows: list[dict], on_gpu: bool) -> dict | None:
    """The model's constants fitted to the rows whose method ran on the device (None without any)."""
    rows = [row for row in rows if row["total_s"] and (row["method_on"] == "gpu") == on_gpu]
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
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "interior_point_costs"))
    args = parser.parse_args(argv)
    rows = [row for name in args.sizes.split(",") if (row := _row(name, args.device, args.iterations,
                                                                   args.time_limit)) is not None]
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
    path.write_text(json.dumps(dict(run_metadata(device), rows=rows, fit=constants), indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
