"""How shards exchange data: the :class:`Communicator` contract (all-reduces and grouped halo exchanges between the
shards' devices) and its two implementations.

:class:`NcclCommunicator` runs on GPUs: NCCL's all-reduce and grouped send/receive from CuPy, one communicator per
device, all driven from this process, the exchanges on a side stream of each device. :class:`InProcessCommunicator`
serves where one device holds every shard: the CPU simulation (the shards NumPy arrays of one process, with the same
splitting and the same halo exchange as copies and sums, so that CI tests the partitioned logic without GPUs) or
shards simulated on one GPU (the tests' check of the GPU kernels on shards). NCCL communicators outlive their solve:
:func:`keep_idle` keeps a collected backend's for the next solve of the same GPUs (:func:`idle_communicator`).
"""
from __future__ import annotations

import threading
from typing import Protocol

import numpy as np

__all__ = ["Communicator", "PendingExchange", "InProcessCommunicator", "NcclCommunicator", "idle_communicator",
           "keep_idle"]


class PendingExchange(Protocol):
    """The handle of a started exchange: ``wait`` makes the receive buffers hold the rows sent (in stream order on
    GPUs: the host need not block) and then lets the exchange's buffers go."""

    def wait(self) -> None: ...


class Communicator(Protocol):
    """What the split kernel set and the halo exchange ask of a communicator between k shards (a list of per-shard
    arrays, shard s's on its device, is indexed by shard)."""

    def all_reduce(self, parts) -> None:
        """Every part (device arrays of one shape, one per shard) replaced by the sum of all parts, in place."""
        ...

    def start_exchange(self, transfers) -> PendingExchange:
        """Starts, for each (source shard, send buffer, target shard, receive buffer), receive = send; the receive
        buffers hold the data once the handle's ``wait`` was called."""
        ...


class InProcessCommunicator:
    """Reductions and halo exchanges between shards whose arrays one device holds (NumPy arrays for the CPU
    simulation, or CuPy arrays of one GPU): copies and sums of this process."""

    def all_reduce(self, parts) -> None:
        """Every part (same shape) replaced by the sum of all parts, in place."""
        total = parts[0].copy()
        for part in parts[1:]:
            total += part
        for part in parts:
            part[...] = total

    def start_exchange(self, transfers):
        """For each (source shard, send buffer, target shard, receive buffer): receive = send, done at once (the
        handle's ``wait`` has nothing left to wait for)."""
        for _, send, _, receive in transfers:
            receive[...] = send
        return _Done()


class _Done:
    """The handle of an exchange that has already completed."""

    @staticmethod
    def wait() -> None:
        return None


# CUDA clamps a stream priority beyond the device's range to its highest
HIGHEST_STREAM_PRIORITY = -(2 ** 16)


class NcclCommunicator:
    """NCCL communicators of the shards' GPUs, all driven from this process (calls grouped, so one thread can post
    every device's part of a collective).

    The exchanges run on a side stream of each device, at the highest priority: an exchange and the own rows' product
    become ready together (both wait for the gathers of the rows to send), and at equal priority the block scheduler
    hands the SMs to the product's grid first, so that NCCL's kernels would start only as it drained (what that cost:
    docs/decisions/distributed-nccl-exchange.md)."""

    def __init__(self, device_ids):
        import cupy
        from cupy.cuda import nccl
        self.nccl, self.device_ids = nccl, tuple(device_ids)
        self.comms = nccl.NcclCommunicator.initAll(list(self.device_ids))
        self.side = []  # per device, the stream of the exchanges, so that products overlap them
        for device in self.device_ids:
            with cupy.cuda.Device(device):
                try:
                    self.side.append(cupy.cuda.Stream(non_blocking=True, priority=HIGHEST_STREAM_PRIORITY))
                except TypeError:  # CuPy 13 makes no streams with priorities: the exchange waits for the product
                    self.side.append(cupy.cuda.Stream(non_blocking=True))

    def _stream(self):
        import cupy
        return cupy.cuda.get_current_stream().ptr

    def healthy(self) -> bool:
        """Whether NCCL reports no asynchronous error in any of the communicators."""
        try:
            for comm in self.comms:
                comm.check_async_error()
        except self.nccl.NcclError:
            return False
        return True

    def all_reduce(self, parts) -> None:
        import cupy
        nccl = self.nccl
        nccl.groupStart()
        for comm, device, part in zip(self.comms, self.device_ids, parts):
            with cupy.cuda.Device(device):
                comm.allReduce(part.data.ptr, part.data.ptr, part.size, nccl.NCCL_FLOAT64, nccl.NCCL_SUM,
                               self._stream())
        nccl.groupEnd()

    def start_exchange(self, transfers):
        """Posts the grouped sends and receives on each device's side stream, after the work already queued on its
        current stream (which wrote the send buffers); the handle's ``wait`` makes the current streams wait for them.
        The buffers come from the current streams' pools: the handle holds them until ``wait`` has queued that, for
        a buffer freed earlier goes back to its stream's pool at once, where the next allocation may take it while
        NCCL still sends from it (docs/decisions/distributed-nccl-exchange.md)."""
        import cupy
        nccl = self.nccl
        types = {np.dtype(np.float64): nccl.NCCL_FLOAT64, np.dtype(np.float32): nccl.NCCL_FLOAT32}
        involved = sorted({shard for source, _, target, _ in transfers for shard in (source, target)})
        for shard in involved:
            with cupy.cuda.Device(self.device_ids[shard]):
                self.side[shard].wait_event(cupy.cuda.get_current_stream().record())
        nccl.groupStart()
        for source, send, target, receive in transfers:
            with cupy.cuda.Device(self.device_ids[source]):
                self.comms[source].send(send.data.ptr, send.size, types[send.dtype], target, self.side[source].ptr)
            with cupy.cuda.Device(self.device_ids[target]):
                self.comms[target].recv(receive.data.ptr, receive.size, types[receive.dtype], source,
                                        self.side[target].ptr)
        nccl.groupEnd()
        done = []
        for shard in involved:
            with cupy.cuda.Device(self.device_ids[shard]):
                done.append((shard, self.side[shard].record()))
        return _Posted(self.device_ids, done, transfers)


class _Posted:
    """The handle of an exchange posted on the side streams: ``wait`` queues, on each device's current stream, a wait
    for its part (the host does not block), and only then lets the exchange's buffers go."""

    def __init__(self, device_ids, done, transfers):
        self.device_ids, self.done, self.transfers = device_ids, done, transfers

    def wait(self) -> None:
        import cupy
        for shard, event in self.done:
            with cupy.cuda.Device(self.device_ids[shard]):
                cupy.cuda.get_current_stream().wait_event(event)
        self.transfers = None


# NCCL communicators of the process that no solve holds, by their GPUs: a solve's goes back here when its backend is
# collected, as making and destroying them with each solve cost set-up time
# (docs/decisions/distributed-nccl-exchange.md)
_IDLE_COMMUNICATORS: dict[tuple[int, ...], list[NcclCommunicator]] = {}
_IDLE_LOCK = threading.Lock()


def idle_communicator(ids: tuple[int, ...]) -> NcclCommunicator:
    """A communicator of these GPUs that no other solve holds: one kept from an earlier solve, else a new one."""
    with _IDLE_LOCK:
        idle = _IDLE_COMMUNICATORS.get(tuple(ids))
        if idle:
            return idle.pop()
    return NcclCommunicator(ids)


def keep_idle(ids: tuple[int, ...], communicator: NcclCommunicator) -> None:
    """Keeps a collected backend's communicator for the next solve, unless NCCL reported an error in it."""
    if communicator.healthy():
        with _IDLE_LOCK:
            _IDLE_COMMUNICATORS.setdefault(tuple(ids), []).append(communicator)
