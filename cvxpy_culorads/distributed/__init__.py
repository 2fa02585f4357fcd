"""One SDP split over several devices: the factor's rows in contiguous shards, halos exchanged between them, all
driven from one process.

Shard s holds the rows [bounds[s], bounds[s + 1]) of every row-space array (the factor R, the gradient, the L-BFGS
pairs, the Lanczos vectors), each on its shard's device. The phases and the eigensolver are the single-device code:
they touch row-space arrays only through the kernel set and the operator, so the algorithm is written once and one
device is the same code with no communication. What crosses devices: the *halo* (C V needs, on shard s, the rows of V
that C's rows in s reference elsewhere, sent while the own rows multiply), *reductions* (inner products, Gram
matrices, Lanczos' Gram-Schmidt coefficients), and the constraint space's values, which live whole on the first
device. The modules, one idea each:

- :mod:`~cvxpy_culorads.distributed.partition`: the shards' bounds, the halos they leave, and the rows' renumbering
  that shrinks them (:class:`RowOrder`);
- :mod:`~cvxpy_culorads.distributed.communicator`: the :class:`Communicator` contract and its NCCL and in-process
  implementations;
- :mod:`~cvxpy_culorads.distributed.arrays`: :class:`Shards`, the split arrays and matrices (:class:`ShardedRows`,
  :class:`ShardedMatrix`, :class:`HaloPart`) and the halo exchange;
- :mod:`~cvxpy_culorads.distributed.kernels`: the kernel contract over shards (:class:`ShardedKernels`);
- :mod:`~cvxpy_culorads.distributed.backend`: :class:`ShardedBackend`, the ``Backend`` contract over shards, and its
  factories, which build it already partitioned at the bounds the split operator chooses;
- :mod:`~cvxpy_culorads.distributed.operators`: the split operators (:class:`ShardedSpheresOperator`,
  :class:`ShardedBlockOperator`).

Why each choice was made, with what was measured: ``docs/decisions/distributed-*.md``.
"""
from cvxpy_culorads.distributed.arrays import (
    HaloExchange,
    HaloPart,
    ShardedMatrix,
    ShardedRows,
    Shards,
    shard_matrices,
)
from cvxpy_culorads.distributed.backend import ShardedBackend, sharded_backend, simulated_backend
from cvxpy_culorads.distributed.communicator import Communicator, InProcessCommunicator, NcclCommunicator
from cvxpy_culorads.distributed.kernels import ShardedKernels
from cvxpy_culorads.distributed.operators import (
    SHARDED_PROBLEMS_MESSAGE,
    ShardedBlockOperator,
    ShardedSpheresOperator,
    position_owner,
)
from cvxpy_culorads.distributed.partition import (
    RowOrder,
    balanced_bounds,
    coordinate_halo_share,
    halo_share,
    shard_bounds,
)

__all__ = ["SHARDED_PROBLEMS_MESSAGE", "RowOrder", "Shards", "ShardedRows", "ShardedMatrix", "HaloPart",
           "HaloExchange", "ShardedKernels", "ShardedBackend", "ShardedSpheresOperator", "ShardedBlockOperator",
           "position_owner", "Communicator", "InProcessCommunicator", "NcclCommunicator", "balanced_bounds",
           "halo_share", "coordinate_halo_share", "shard_bounds", "shard_matrices", "sharded_backend",
           "simulated_backend"]
