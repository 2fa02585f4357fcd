"""The written contracts: every kernel set and operator satisfies its Protocol, and a split backend declares what it
lacks, which the plan checks in one place."""
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import cvxpy_culorads
from cvxpy_culorads import solve
from cvxpy_culorads.backends.backend import CpuBackend, GpuBackend, gpu_available, select_backend
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import (
    ALL_CAPABILITIES,
    Capability,
    Kernels,
    missing_capabilities,
    undeclared_gaps,
)
from cvxpy_culorads.backends.protocol import Backend
from cvxpy_culorads.distributed import ShardedKernels, ShardedSpheresOperator, simulated_backend
from cvxpy_culorads.models import completion_problem, random_low_rank_instance
from cvxpy_culorads.operators.compressed import BlockLayout, CompressedOperator
from cvxpy_culorads.operators.protocol import Operator, SpheresOperator
from cvxpy_culorads.phases.interior_point import DEVICE_MIN_ORDER, InteriorPointPhase, interior_point_backend
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.plan import LowRankPhases, plan
from cvxpy_culorads.solver.run import Run

from support import DEVICES, random_maxcut, random_mixed_problem


def _run(problem, **options) -> Run:
    settings = Settings.from_options(device="cpu", **options)
    return Run(problem, settings, plan(problem, settings))


def test_the_cpu_kernel_set_meets_the_whole_contract():
    kernels = CpuKernels()
    assert isinstance(kernels, Kernels) and kernels.capabilities == ALL_CAPABILITIES
    assert not missing_capabilities(kernels, Capability) and not undeclared_gaps(kernels)
    assert select_backend("cpu").kernels().capabilities == ALL_CAPABILITIES


def test_one_device_operator_meets_the_whole_contract():
    problem, _ = random_maxcut(60, 0.2, seed=1)
    op = CompressedOperator(problem, select_backend("cpu"))
    assert isinstance(op, Operator) and isinstance(op, SpheresOperator)


@pytest.mark.parametrize("k", [2, 3])
def test_split_operators_meet_their_contracts_and_declare_what_they_lack(k):
    graph, _ = random_maxcut(1200, 0.005, seed=2)
    spheres = _run(graph, devices=k)
    assert spheres.plan.phases is LowRankPhases.SPHERES
    assert isinstance(spheres.op, SpheresOperator) and not isinstance(spheres.op, Operator)
    rows, cols, values, _ = random_low_rank_instance(600, 600, 3, 12000, seed=4)
    completion = completion_problem(rows, cols, values, (600, 600))
    block = _run(completion, devices=k)
    assert isinstance(block.op, Operator)
    lacking = missing_capabilities(block.op.kernels, Capability)
    assert Capability.DEFLATION in lacking and Capability.SPHERES in lacking
    assert Capability.PHASE_II not in lacking  # phases I and II run on split rows
    assert not undeclared_gaps(block.op.kernels) and not undeclared_gaps(spheres.op.kernels)


def test_the_plan_keeps_on_one_device_what_a_split_cannot_run():
    problem, _ = random_maxcut(40, 0.3, seed=1)
    decided = plan(problem, Settings(devices=2))
    assert not decided.split and "order up to 1000" in decided.split_refused
    assert decided.reasons[0].startswith("one device although devices=2")


def test_the_plan_follows_the_structure_and_the_algorithm_and_the_result_keeps_its_reasons():
    problem, _ = random_maxcut(60, 0.2, seed=5)
    assert plan(problem, Settings()).phases is LowRankPhases.SPHERES
    assert plan(problem, Settings(algorithm="alm_admm")).phases is LowRankPhases.ALM_ADMM
    result = solve(problem, device="cpu", algorithm="low_rank", interior_point_handover=False)
    assert result.plan[0].startswith("L-BFGS on the product of spheres")
    assert solve(problem, device="cpu", algorithm="alm_admm", interior_point_handover=False).plan[0] == \
        "phases I (ALM) and II (ADMM): algorithm='alm_admm'"


def test_a_set_that_drops_a_method_without_declaring_it_breaks_the_contract():
    class Partial(CpuKernels):
        capabilities = ALL_CAPABILITIES - {Capability.DEFLATION}
        cg_step = None  # not covered: phase II is still declared

    assert undeclared_gaps(Partial()) == {"cg_step"}


# ------------------------------------------------------------------ the Backend contract
def _unmet(backend) -> set[str]:
    """The members of the Backend protocol that ``backend`` lacks: a data member absent, a method absent, not
    callable or taking other parameters than the protocol's."""
    unmet = {name for name in Backend.__annotations__ if not hasattr(backend, name)}
    for name, method in vars(Backend).items():
        if name.startswith("_") or not callable(method):
            continue
        own = getattr(backend, name, None)
        expected = list(inspect.signature(method).parameters)[1:]  # without self
        if not callable(own) or list(inspect.signature(own).parameters) != expected:
            unmet.add(name)
    return unmet


def test_the_backend_check_finds_a_missing_or_changed_method():
    class Missing(CpuBackend):
        free_memory = None

    class Changed(CpuBackend):
        def csr(self, matrix, dtype):
            return super().csr(matrix)

    assert _unmet(Missing()) == {"free_memory"} and _unmet(Changed()) == {"csr"}
    assert _unmet(object()) >= {"xp", "on_host", "to_host_into", "kernels"}


def _round_trip(backend, array):
    """Host copies of ``array``, placed on the backend, by each of the backend's three ways."""
    placed = backend.asarray(array)
    into = np.zeros_like(array)
    backend.to_host_into([(placed, into)])
    return backend.to_host(placed), backend.to_host_together([placed, placed])[1], into


def test_the_cpu_backend_meets_the_contract_and_reports_the_hosts_memory(monkeypatch):
    backend = select_backend("cpu")
    assert isinstance(backend, CpuBackend) and isinstance(backend, Backend) and not _unmet(backend)
    assert backend.on_host and backend.wide_sparse_indices and backend.memory == "host memory"
    monkeypatch.setattr("cvxpy_culorads.backends.backend.available_bytes", lambda: 12345)
    assert backend.free_memory() == 12345 and backend.pool_bytes() == 0
    array = np.arange(12.0).reshape(4, 3)
    for copy in _round_trip(backend, array):
        np.testing.assert_array_equal(copy, array)
    matrix = backend.csr(sp.random(5, 4, density=0.5, random_state=1))
    assert isinstance(matrix, backend.sparse.csr_matrix)
    assert isinstance(backend.kernels(), Kernels)


@pytest.mark.skipif(not gpu_available(), reason="no CuPy/GPU")
def test_the_gpu_backend_meets_the_contract():
    backend = select_backend("gpu")
    assert isinstance(backend, GpuBackend) and isinstance(backend, Backend) and not _unmet(backend)
    assert not backend.on_host and backend.memory == "device memory"
    assert 0 < backend.free_memory()
    array = np.arange(12.0).reshape(4, 3)
    for copy in _round_trip(backend, array):
        np.testing.assert_array_equal(copy, array)
    assert isinstance(backend.kernels(), Kernels)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bounds", [[0, 40, 100], [0, 10, 10, 100]])
def test_a_split_backend_is_built_partitioned_and_meets_the_contract(bounds, device, monkeypatch):
    backend = simulated_backend(device, len(bounds) - 1, np.array(bounds))
    assert isinstance(backend, Backend) and not _unmet(backend) and not hasattr(backend, "partition")
    np.testing.assert_array_equal(backend.shards.bounds, bounds)
    assert isinstance(backend.kernels(), ShardedKernels) and backend.kernels().shards is backend.shards
    assert backend.on_host is (device == "cpu") and backend.name == device
    if device == "cpu":  # the shards share the host: a row-space array fits where it fits whole
        monkeypatch.setattr("cvxpy_culorads.backends.backend.available_bytes", lambda: 12345)
        assert backend.free_memory() == 12345
    rows = np.arange(300.0).reshape(100, 3)
    split = backend.shards.split(rows)
    small = backend.asarray(np.arange(5.0))
    for copy in (backend.to_host(split), backend.to_host_together([small, split])[1]):
        np.testing.assert_array_equal(copy, rows)
    into = np.zeros_like(rows)
    backend.to_host_into([(split, into)])
    np.testing.assert_array_equal(into, rows)
    with pytest.raises(ValueError, match="3 shards need 4 bounds"):
        simulated_backend(device, 3, np.array([0, 100]))


def test_a_split_operator_serves_the_partition_it_is_given():
    problem, _ = random_maxcut(1200, 0.005, seed=2)
    layout = BlockLayout.of(problem)
    chosen = ShardedSpheresOperator.bounds(problem, layout, 2)
    for bounds in (chosen, np.array([0, 300, 1200])):
        backend = simulated_backend("cpu", 2, bounds)
        op = ShardedSpheresOperator(problem, backend, True, layout)
        assert op.shards is backend.shards
        R = np.random.default_rng(0).standard_normal((1200, 3))
        np.testing.assert_allclose(backend.to_host(op.objective_times(op.split(R))),
                                   problem.objective_matrix(0) @ R, rtol=1e-13, atol=1e-12)
    with pytest.raises(ValueError, match="split 1000 rows, the problem has 1200"):
        ShardedSpheresOperator(problem, simulated_backend("cpu", 2, np.array([0, 500, 1000])), True, layout)


def test_no_package_code_branches_on_the_device_kind():
    package = Path(cvxpy_culorads.__file__).parent
    for path in package.rglob("*.py"):
        text = path.read_text()
        assert "is_gpu" not in text, path
        assert not re.search(r"\.name\s*[!=]=\s*[\"'](cpu|gpu)[\"']", text), path


def test_the_interior_point_method_runs_on_the_backend_the_solve_gives_it():
    class Given(CpuBackend):
        pass

    tiny, larger = random_mixed_problem(2), random_maxcut(DEVICE_MIN_ORDER, 0.2, seed=1)[0]
    given = Given()
    assert isinstance(interior_point_backend(tiny, given), CpuBackend)
    assert not isinstance(interior_point_backend(tiny, given), Given)  # tiny blocks: the host's
    assert interior_point_backend(larger, given) is given
    run = _run(tiny)
    phase = InteriorPointPhase(tiny, given, run.state, run.op.layout, run.norms, 1e-6, run.op.row_scale,
                               home=run.backend)
    assert phase.backend is given and phase.home is run.backend
    for _ in phase.run():
        pass
    assert phase.best is not None and isinstance(run.state.R, np.ndarray)
