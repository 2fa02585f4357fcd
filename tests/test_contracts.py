"""The written contracts: every kernel set and operator satisfies its Protocol, and a split backend declares what it
lacks, which the plan checks in one place."""
import pytest

from cvxpy_culorads import solve
from cvxpy_culorads.backends.backend import select_backend
from cvxpy_culorads.backends.cpu_kernels import CpuKernels
from cvxpy_culorads.backends.kernels import (
    ALL_CAPABILITIES,
    Capability,
    Kernels,
    missing_capabilities,
    undeclared_gaps,
)
from cvxpy_culorads.models import completion_problem, random_low_rank_instance
from cvxpy_culorads.operators.compressed import CompressedOperator
from cvxpy_culorads.operators.protocol import Operator, SpheresOperator
from cvxpy_culorads.settings import Settings
from cvxpy_culorads.solver.plan import LowRankPhases, plan
from cvxpy_culorads.solver.run import Run

from support import random_maxcut


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


def test_the_plan_refuses_what_a_split_cannot_run():
    problem, _ = random_maxcut(40, 0.3, seed=1)
    with pytest.raises(ValueError, match="blocks of order above"):
        plan(problem, Settings(devices=2))


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
