"""The GPU kernels' launch geometry (``gpu_launch``'s lane groups, row layouts and grids): plain arithmetic, checked
where CuPy is not installed, so that CI covers the layouts every row kernel is launched with."""
from __future__ import annotations

import pytest

from cvxpy_culorads.backends.gpu_launch import BLOCK, grid, lanes_for_rank, row_layout


def test_lane_groups_are_powers_of_two_that_never_straddle_a_warp():
    for r in range(1, 600):
        lanes = lanes_for_rank(r)
        assert 32 % lanes == 0 and BLOCK % lanes == 0
        assert lanes >= min(r, 32) and (lanes == 1 or lanes // 2 < min(r, 32))


def test_row_layout_covers_each_row_with_few_instances():
    for r in range(1, 600):
        for itemsize in (8, 4):
            lanes, columns = row_layout(r, itemsize)
            assert lanes * columns >= r and lanes <= 32 and 32 % lanes == 0
            assert columns & (columns - 1) == 0 and (columns == 1 or lanes * columns // 2 < r)  # no wasted power
        assert row_layout(r, 4)[0] == max(1, row_layout(r, 8)[0] // 2)
    # in double, ranks up to 64 share two column counts: few template instances serve the common ranks
    assert {row_layout(r, 8)[1] for r in range(1, 65)} == {1, 2}


@pytest.mark.parametrize("groups,lanes", [(1, 1), (1000, 8), (2**20, 32), (BLOCK // 32, 32), (BLOCK // 32 + 1, 32)])
def test_the_grid_gives_every_group_its_lanes_in_the_fewest_blocks(groups, lanes):
    (blocks,) = grid(groups, lanes)
    assert blocks * BLOCK >= groups * lanes > (blocks - 1) * BLOCK
