"""Collective communication over a subset of the world's processes."""

from typing import Any, List, Optional

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

__all__ = ["CollectiveGroup", "RecvRequest"]


class RecvRequest:
    """The pending receive returned by :meth:`CollectiveGroup.irecv`.

    Args:
        work: The torch work handle of the receive.
        src: The world rank it receives from, or ``None`` for any source.
        group: The process group of the receive.
    """

    def __init__(self, work: Any, src: Optional[int], group: Any):
        self._work = work
        self._src = src
        self._group = group
        self._done = False

    def is_completed(self) -> bool:
        """Whether the tensor has arrived."""
        return self._done or self._work.is_completed()

    def wait(self) -> int:
        """Block until the tensor has arrived; return the world rank of its sender.

        It can be called again after completion and returns the same rank.
        """
        if not self._done:
            self._work.wait()
            if self._src is None:
                self._src = dist.get_global_rank(self._group, self._work._source_rank())
            self._done = True
        return self._src


class CollectiveGroup:
    """A thin wrapper of :mod:`torch.distributed` collectives over one process group.

    Create it with :meth:`World.create_collective_group`, not directly. Ranks in
    the arguments (``src``, ``dst``) and in the results are **world ranks**, as in
    :mod:`torch.distributed`. Unlike torch, :meth:`irecv` returns a request whose
    ``wait()`` gives the sender's rank, so receiving from any source works with the
    asynchronous call too.

    The ``*_multigpu`` variants take one tensor per local device (a list); they
    reduce or copy locally between the list's tensors and run one collective per
    process, so they work with any backend and with CPU tensors as well.

    Args:
        group: The wrapped ``torch.distributed`` process group; usable directly,
            e.g. as ``process_group`` of ``DistributedDataParallel``.
        current_relative_rank: Rank of the current process inside the group.
    """

    def __init__(self, group: Any, current_relative_rank: int):
        self.group = group
        self.current_relative_rank = current_relative_rank
        self.destroyed = False

    @property
    def current_rank(self) -> int:
        """Rank of the current process inside the group (Machin 0.3.4's name of
        ``current_relative_rank``)."""
        return self.current_relative_rank

    def __reduce__(self) -> None:
        raise RuntimeError(
            "CollectiveGroup is not picklable: it wraps this process's process group; "
            "create it in every member process with World.create_collective_group"
        )

    def size(self) -> int:
        """Number of processes in the group."""
        return dist.get_world_size(self.group)

    def destroy(self) -> None:
        """Destroy the process group (in this process). Calling it again does nothing."""
        if not self.destroyed:
            dist.destroy_process_group(self.group)
            self.destroyed = True

    # -- point to point ----------------------------------------------------------------
    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        """Send ``tensor`` to world rank ``dst`` (blocking).

        Args:
            tensor: The tensor to send.
            dst: World rank of the receiver.
            tag: Tag that matches a send with its receive.
        """
        dist.send(tensor, dst, self.group, tag)

    def recv(self, tensor: torch.Tensor, src: Optional[int] = None, tag: int = 0) -> int:
        """Receive into ``tensor`` from world rank ``src`` (any member if ``None``).

        Args:
            tensor: Filled with the received data.
            src: World rank of the sender, or ``None`` for any member.
            tag: Tag that matches a send with its receive.

        Returns:
            The world rank of the sender.
        """
        return dist.recv(tensor, src, self.group, tag)

    def isend(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> Any:
        """Send ``tensor`` to world rank ``dst`` without blocking; returns a request with ``wait()``.

        Args:
            tensor: The tensor to send.
            dst: World rank of the receiver.
            tag: Tag that matches a send with its receive.
        """
        return dist.isend(tensor, dst, self.group, tag)

    def irecv(self, tensor: torch.Tensor, src: Optional[int] = None, tag: int = 0) -> RecvRequest:
        """Receive into ``tensor`` without blocking, from ``src`` or any member if ``None``.

        Args:
            tensor: Filled with the received data.
            src: World rank of the sender, or ``None`` for any member.
            tag: Tag that matches a send with its receive.

        Returns:
            A :class:`RecvRequest`; its ``wait()`` returns the sender's world rank.
        """
        return RecvRequest(dist.irecv(tensor, src, self.group, tag), src, self.group)

    # -- collectives -------------------------------------------------------------------
    def all_gather(
        self, tensor_list: List[torch.Tensor], tensor: torch.Tensor, async_op: bool = False
    ) -> Any:
        """Gather ``tensor`` from every member into ``tensor_list`` on every member.

        Args:
            tensor_list: Receives one tensor per member.
            tensor: This member's tensor.
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        return dist.all_gather(tensor_list, tensor, self.group, async_op)

    def all_reduce(
        self, tensor: torch.Tensor, op: Any = ReduceOp.SUM, async_op: bool = False
    ) -> Any:
        """Reduce ``tensor`` in place across the members; every member gets the result.

        Args:
            tensor: Input and result.
            op: The reduction, a :class:`torch.distributed.ReduceOp` (sum by default).
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        return dist.all_reduce(tensor, op, self.group, async_op)

    def barrier(self, async_op: bool = False) -> Any:
        """Wait until every member arrives.

        Args:
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        return dist.barrier(self.group, async_op)

    def broadcast(self, tensor: torch.Tensor, src: int, async_op: bool = False) -> Any:
        """Copy ``tensor`` of world rank ``src`` into ``tensor`` of every member.

        Args:
            tensor: Sent by ``src``, overwritten on the others.
            src: World rank of the source.
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        return dist.broadcast(tensor, src, self.group, async_op)

    def gather(
        self,
        tensor: torch.Tensor,
        gather_list: Optional[List[torch.Tensor]] = None,
        dst: int = 0,
        async_op: bool = False,
    ) -> Any:
        """Collect ``tensor`` of every member into ``gather_list`` on world rank ``dst``.

        Args:
            tensor: This member's tensor.
            gather_list: On ``dst``, receives one tensor per member.
            dst: World rank that gathers.
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        return dist.gather(tensor, gather_list, dst, self.group, async_op)

    def reduce(
        self, tensor: torch.Tensor, dst: int, op: Any = ReduceOp.SUM, async_op: bool = False
    ) -> Any:
        """Reduce ``tensor`` across the members; only world rank ``dst`` gets the result.

        Args:
            tensor: Input, and the result on ``dst``.
            dst: World rank that receives the result.
            op: The reduction, a :class:`torch.distributed.ReduceOp` (sum by default).
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        return dist.reduce(tensor, dst, op, self.group, async_op)

    def scatter(
        self,
        tensor: torch.Tensor,
        scatter_list: Optional[List[torch.Tensor]] = None,
        src: int = 0,
        async_op: bool = False,
    ) -> Any:
        """Send ``scatter_list[i]`` of world rank ``src`` to the i-th member's ``tensor``.

        Args:
            tensor: Receives this member's part.
            scatter_list: On ``src``, one tensor per member.
            src: World rank that scatters.
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        return dist.scatter(tensor, scatter_list, src, self.group, async_op)

    # -- one tensor per local device -------------------------------------------------
    def all_gather_multigpu(
        self,
        output_tensor_lists: List[List[torch.Tensor]],
        input_tensor_list: List[torch.Tensor],
        async_op: bool = False,
    ) -> Any:
        """All-gather several tensors per process.

        ``output_tensor_lists[i][k * n + j]`` receives ``input_tensor_list[j]`` of the
        k-th member, where ``n = len(input_tensor_list)`` (the same on every member).
        The gather itself is synchronous; with ``async_op`` a completed handle is returned.
        """
        n = len(input_tensor_list)
        stacked = torch.stack([t.to(input_tensor_list[0].device) for t in input_tensor_list])
        gathered = [torch.empty_like(stacked) for _ in range(self.size())]
        dist.all_gather(gathered, stacked, self.group)
        for outputs in output_tensor_lists:
            for k, block in enumerate(gathered):
                for j in range(n):
                    outputs[k * n + j].copy_(block[j])
        return _done_work() if async_op else None

    def all_reduce_multigpu(
        self, tensor_list: List[torch.Tensor], op: Any = ReduceOp.SUM, async_op: bool = False
    ) -> Any:
        """All-reduce the tensors of ``tensor_list`` of every member; each tensor gets the result.

        Args:
            tensor_list: This member's tensors, one per device.
            op: The reduction, a :class:`torch.distributed.ReduceOp` (sum by default).
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        total = self._local_reduce(tensor_list, op)
        dist.all_reduce(total, op, self.group)
        _copy_to_all(total, tensor_list)
        return _done_work() if async_op else None

    def broadcast_multigpu(
        self, tensor_list: List[torch.Tensor], src: int, async_op: bool = False, src_tensor: int = 0
    ) -> Any:
        """Copy ``tensor_list[src_tensor]`` of world rank ``src`` into every tensor of every member.

        Args:
            tensor_list: This member's tensors, one per device.
            src: World rank of the source.
            src_tensor: Index of the source tensor in its list.
            async_op: Return a work handle with ``wait()`` instead of blocking.
        """
        buffer = tensor_list[src_tensor].clone()
        dist.broadcast(buffer, src, self.group)
        _copy_to_all(buffer, tensor_list)
        return _done_work() if async_op else None

    def reduce_multigpu(
        self,
        tensor_list: List[torch.Tensor],
        dst: int,
        op: Any = ReduceOp.SUM,
        async_op: bool = False,
        dst_tensor: int = 0,
    ) -> Any:
        """Reduce the tensors of every member; ``tensor_list[dst_tensor]`` of world rank ``dst`` gets it.

        Args:
            tensor_list: This member's tensors, one per device.
            dst: World rank that receives the result.
            op: The reduction, a :class:`torch.distributed.ReduceOp` (sum by default).
            async_op: Return a work handle with ``wait()`` instead of blocking.
            dst_tensor: Index of the tensor that receives the result.
        """
        total = self._local_reduce(tensor_list, op)
        dist.reduce(total, dst, op, self.group)
        if dist.get_rank() == dst:
            tensor_list[dst_tensor].copy_(total)
        return _done_work() if async_op else None

    @staticmethod
    def _local_reduce(tensor_list: List[torch.Tensor], op: Any) -> torch.Tensor:
        if not tensor_list:
            raise ValueError("tensor_list must hold at least one tensor, got an empty list")
        local = [t.to(tensor_list[0].device) for t in tensor_list]
        stacked = torch.stack(local)
        reducers = {
            ReduceOp.SUM: lambda s: s.sum(0),
            ReduceOp.PRODUCT: lambda s: s.prod(0),
            ReduceOp.MIN: lambda s: s.min(0).values,
            ReduceOp.MAX: lambda s: s.max(0).values,
        }
        if op not in reducers:
            raise ValueError(
                f"op must be ReduceOp.SUM, PRODUCT, MIN or MAX for the multigpu calls, got {op!r}"
            )
        return reducers[op](stacked)


def _copy_to_all(source: torch.Tensor, tensor_list: List[torch.Tensor]) -> None:
    for tensor in tensor_list:
        tensor.copy_(source)


class _DoneWork:
    """A work handle of an operation that has already completed."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _done_work() -> _DoneWork:
    return _DoneWork()
