"""A replay buffer spread over the members of an RPC group.

Each member keeps its own local buffer (on the CPU) and appends to it without
talking to anyone. Sampling asks every member for its share of the batch over
RPC and concatenates the answers. A member's buffer is locked only while it
writes, clears or reads its own rows, so appending is never held up by another
process's sampling for longer than that read.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import torch

from ...parallel.distributed._transport import MemberLostError
from ...parallel.distributed.rpc_group import RpcGroup
from ...parallel.exception import RemoteTraceback
from ...utils.compat import ignores_extra_args
from ..transition import TransitionBase
from .buffer import Buffer

__all__ = ["DistributedBuffer", "NotGroupMemberError", "BufferNameTakenError", "PendingSample"]


class NotGroupMemberError(ValueError, AssertionError):
    """A distributed buffer was built in a process outside its group.

    A :class:`ValueError`, and the :class:`AssertionError` of Machin 0.3.4.
    """


class BufferNameTakenError(ValueError, KeyError):
    """A distributed buffer's name is already registered in its group.

    A :class:`ValueError`, and the :class:`KeyError` of Machin 0.3.4.
    """


def _merge(values: List[Any]) -> Any:
    """Join the same attribute sampled by several members (tensors, lists, dicts of them)."""
    first = values[0]
    if isinstance(first, dict):
        if any(not isinstance(v, dict) or v.keys() != first.keys() for v in values):
            raise ValueError(
                f"members returned different keys for the same attribute: {[sorted(v) for v in values]}; "
                f"every member must store transitions with the same attributes"
            )
        return {key: _merge([v[key] for v in values]) for key in first}
    if isinstance(first, torch.Tensor):
        return torch.cat(values)
    if isinstance(first, list):
        return [item for v in values for item in v]
    raise TypeError(f"cannot join sampled values of type {type(first).__name__}")


def merge_batches(parts: List[Tuple[Any, ...]]) -> Tuple[Any, ...]:
    """Join the attribute tuples sampled by several members, attribute by attribute.

    Args:
        parts: One attribute tuple per member, as :meth:`Buffer.sample_batch` returns them.

    Raises:
        ValueError: If the members sampled different attributes.
    """
    if any(len(part) != len(parts[0]) for part in parts):
        raise ValueError(
            "members returned different numbers of attributes; store the same attributes everywhere"
        )
    return tuple(_merge([part[i] for part in parts]) for i in range(len(parts[0])))


def take_rows(value: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a sampled value (tensor, list, dict or tuple of them); ``None`` stays ``None``."""
    if isinstance(value, dict):
        return {key: take_rows(v, start, stop) for key, v in value.items()}
    if isinstance(value, tuple):
        return tuple(take_rows(v, start, stop) for v in value)
    if value is None:
        return None
    return value[start:stop]


def move_to(value: Any, device: Optional[Union[str, torch.device]]) -> Any:
    """Copy the tensors in a sampled value (tensor, list or dict) to ``device``."""
    if device is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: move_to(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [move_to(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(move_to(v, device) for v in value)
    return value


class _Answered:
    """A reply computed in place, waited for like a future."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def wait(self) -> Any:
        return self.value


class PendingSample:
    """A sample whose draws are still travelling from the members.

    ``wait()`` collects the replies (skipping members that cannot be reached, as
    :meth:`DistributedPart._call` does), joins them and returns the sample; later calls
    return the same sample.

    Args:
        futures: The requests in flight, by member (as :meth:`DistributedPart._start` returns them).
        join: Turns the replies, by member, into the sample.
        collect: Waits for the futures; ``None`` for a sample that asked nobody.
    """

    __slots__ = ("_futures", "_join", "_collect", "_result")

    def __init__(
        self,
        futures: Dict[str, Any],
        join: Callable[[Dict[str, Any]], Any],
        collect: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
    ):
        self._futures: Optional[Dict[str, Any]] = futures
        self._join = join
        self._collect = collect
        self._result: Any = None

    def wait(self) -> Any:
        """The sample (see the sampling method that returned this object).

        Raises:
            Exception: What a member raised while drawing (with its remote traceback).
        """
        futures, self._futures = self._futures, None
        if futures is not None:
            replies = self._collect(futures) if self._collect is not None else {}
            self._result = self._join(replies)
        return self._result


class DistributedPart:
    """What both distributed buffers add to their local buffer class.

    The local buffer answers the group through one registered service,
    ``"<buffer_name>/<member>/_buffer_service"``, which dispatches to the
    ``_op_<name>`` methods listed in ``_OPS``.
    """

    _OPS: Tuple[str, ...] = ("size", "clear", "sample")
    #: Operations run in place on this process's own part, without an RPC to itself: those
    #: whose reply shares nothing with the part (a sample's rows may hold stored objects).
    _LOCAL_OPS: Tuple[str, ...] = ("size", "clear")
    _lock: threading.RLock

    @property
    def wr_lock(self) -> threading.RLock:
        """The (reentrant) lock guarding the local part, as Machin 0.3.4 named it."""
        return self._lock

    def _join(self, buffer_name: str, group: RpcGroup, rng: np.random.Generator) -> None:
        if not group.is_member():
            raise NotGroupMemberError(
                f"the current process must be a member of group {group.get_group_members()} to hold "
                f"a part of buffer {buffer_name!r}"
            )
        self.buffer_name = buffer_name
        self.group = group
        self._rng = rng  # splits batches between members
        self._lost: Set[str] = set()  # members that stopped answering (e.g. a killed process)
        try:
            group.register(self._service_key(group.get_cur_name()), self._serve)
        except KeyError:
            raise BufferNameTakenError(
                f"buffer_name {buffer_name!r} is already used in group {group.get_group_name()!r} (its "
                f"service is already registered); each distributed buffer needs a unique name"
            ) from None

    def _service_key(self, member: str) -> str:
        return f"{self.buffer_name}/{member}/_buffer_service"

    def _serve(self, op: str, *args: Any) -> Any:
        if op not in self._OPS:
            raise ValueError(f"unknown buffer operation {op!r}; expected one of {self._OPS}")
        return getattr(self, "_op_" + op)(*args)

    def _holders(self) -> List[str]:
        """Members currently holding a part of this buffer (those that left are skipped)."""
        return [
            m
            for m in self.group.get_group_members()
            if m not in self._lost and self.group.is_registered(self._service_key(m))
        ]

    def _call(self, requests: Dict[str, Tuple[Any, ...]]) -> Dict[str, Any]:
        """Run one operation on several members at once; replies in the order of ``requests``.

        A member that cannot be reached (its process died without leaving the group)
        is left out of the replies and skipped from then on, so that the survivors
        keep working. An exception raised by the operation itself on a member (it
        carries a :class:`~machin.parallel.exception.RemoteTraceback`) propagates.
        """
        return self._collect(self._start(requests))

    def _start(self, requests: Dict[str, Tuple[Any, ...]]) -> Dict[str, Any]:
        """Send ``requests`` without waiting (operations on the own part run in place); see :meth:`_collect`."""
        me = self.group.get_cur_name()
        local = {m for m, args in requests.items() if m == me and args[0] in self._LOCAL_OPS}
        futures = {
            m: self.group.registered_async(self._service_key(m), args=args)
            for m, args in requests.items()
            if m not in local
        }
        for member in local:  # while the others work
            futures[member] = _Answered(self._serve(*requests[member]))
        return {m: futures[m] for m in requests}

    def _collect(self, futures: Dict[str, Any]) -> Dict[str, Any]:
        """Wait for the replies of :meth:`_start` (see :meth:`_call`)."""
        replies = {}
        for member, future in futures.items():
            try:
                replies[member] = future.wait()
            except MemberLostError:  # died, or left (told by the member itself)
                self._lost.add(member)
            except RuntimeError as error:
                if isinstance(error.__cause__, RemoteTraceback):
                    raise
                self._lost.add(member)
        return replies

    # -- local writes, under the lock ---------------------------------------------------
    def extend(
        self,
        transitions: Iterable[Union[TransitionBase, Dict[str, Any]]],
        *args: Any,
        **kwargs: Any,
    ) -> List[int]:
        """Store several transitions in the local buffer (see the local buffer class)."""
        with self._lock:
            positions = super().extend(transitions, *args, **kwargs)
            self._written(positions)
            return positions

    def clear(self) -> None:
        """Remove every transition from the local buffer."""
        with self._lock:
            super().clear()
            self._cleared()

    def _written(self, positions: List[int]) -> None:
        """Hook: storage ``positions`` were just written (under the lock)."""

    def _cleared(self) -> None:
        """Hook: the local buffer was just cleared (under the lock)."""

    # -- group-wide -----------------------------------------------------------------------
    def all_size(self) -> int:
        """Number of transitions stored by all members together."""
        return sum(self._call({m: ("size",) for m in self._holders()}).values())

    def all_clear(self) -> None:
        """Remove every transition from the local buffers of all members."""
        self._call({m: ("clear",) for m in self._holders()})

    def _op_size(self) -> int:
        return self.size()

    def _op_clear(self) -> None:
        self.clear()


class DistributedBuffer(DistributedPart, Buffer):
    """A replay buffer whose transitions stay where they were appended.

    Construct it, with the same ``buffer_name``, on every member of ``group`` that
    stores or samples (then call ``group.barrier()`` before sampling, so every part
    exists). :meth:`append`, :meth:`clear` and :meth:`size` act on the local part
    only; :meth:`all_size`, :meth:`all_clear` and :meth:`sample_batch` on all parts.
    Every member must store transitions with the same attributes. Data is always
    kept on the CPU, whatever the device of the appended tensors.

    Args:
        buffer_name: Name of the buffer, unique in ``group``.
        group: The RPC group whose members hold the parts.
        buffer_size: Maximum size of the **local** part.
        generator: Optional ``torch.Generator`` seeding the sampling, for
            repeatable runs.

    Extra positional and keyword arguments (e.g. a ``buffer_device``) are ignored with an
    :class:`~machin.utils.compat.ExtraArgumentsWarning`, as Machin 0.3.4 ignored them.

    Raises:
        NotGroupMemberError: (a ``ValueError``) If the current process is not a member
            of ``group``.
        BufferNameTakenError: (a ``ValueError``) If ``buffer_name`` is already used there.
    """

    _OPS = DistributedPart._OPS + ("sample_sized",)

    @ignores_extra_args
    def __init__(
        self,
        buffer_name: str,
        group: RpcGroup,
        buffer_size: int,
        *,
        generator: Optional[torch.Generator] = None,
    ):
        self._lock = threading.RLock()
        self._reported_sizes: Dict[str, int] = {}  # see sample_batch_async
        Buffer.__init__(self, buffer_size, "cpu", generator=generator)
        seed = None if generator is None else int(torch.randint(2**62, (1,), generator=generator))
        self._join(buffer_name, group, np.random.default_rng(seed))

    @ignores_extra_args
    def sample_batch(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_method: Union[str, Callable[[Buffer, int], Tuple[int, Any]]] = "random_unique",
        sample_attrs: Optional[List[str]] = None,
        additional_concat_attrs: Optional[List[str]] = None,
    ) -> Tuple[int, Optional[Tuple[Any, ...]]]:
        """Sample a batch from the parts of all members (same contract as :meth:`Buffer.sample_batch`).

        Each member's share is drawn in proportion to its size: without replacement
        over the whole group for ``"random_unique"``, with replacement for
        ``"random"``; ``"all"`` returns everything; a callable method (or another
        ``sample_method_<name>``) is run on each member's part with a share of
        ``batch_size`` proportional to that part's size. Extra positional and keyword
        arguments are ignored with an :class:`~machin.utils.compat.ExtraArgumentsWarning`.

        Raises:
            ~machin.frame.buffers.buffer.SampleMethodError: (a ``ValueError`` and a
                ``RuntimeError``) for an unknown method name, before any member is asked.
        """
        return self.sample_batch_async(
            batch_size, concatenate, device, sample_method, sample_attrs, additional_concat_attrs
        ).wait()

    def sample_batch_async(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_method: Union[str, Callable[[Buffer, int], Tuple[int, Any]]] = "random_unique",
        sample_attrs: Optional[Sequence[str]] = None,
        additional_concat_attrs: Optional[Sequence[str]] = None,
        *,
        reported_sizes: bool = False,
    ) -> PendingSample:
        """Start :meth:`sample_batch` and return without waiting for the members' draws.

        The split of the batch between members is decided now, from their sizes: asked
        for now (a round trip), or with ``reported_sizes`` those the members reported with
        their answers to the previous such sample (asked for only when there is none). A
        learner that samples again and again saves the round trip this way, at the price of
        sizes one sample old (a part that shrank since then may give fewer rows than its
        share). ``wait()`` on the result collects the draws and returns what
        :meth:`sample_batch` returns.

        Args:
            batch_size: As :meth:`sample_batch`, like ``concatenate``, ``device``,
                ``sample_method``, ``sample_attrs`` and ``additional_concat_attrs``.
            reported_sizes: Split by the sizes reported with the previous sample.

        Raises:
            ~machin.frame.buffers.buffer.SampleMethodError: for an unknown method name.
        """
        self._sample_method(sample_method)  # unknown names fail here, before any RPC
        holders = self._holders()
        if sample_method == "all":
            shares = {m: 0 for m in holders}
        else:
            shares = self._share(self._sizes(holders, reported_sizes), batch_size, sample_method)
            shares = {m: n for m, n in shares.items() if n > 0 or reported_sizes}
        op = "sample_sized" if reported_sizes else "sample"
        attrs = None if sample_attrs is None else list(sample_attrs)
        extra = None if additional_concat_attrs is None else list(additional_concat_attrs)
        futures = self._start(
            {m: (op, n, concatenate, sample_method, attrs, extra) for m, n in shares.items()}
        )
        return PendingSample(
            futures, partial(self._joined_sample, device, reported_sizes), self._collect
        )

    def _sizes(self, holders: List[str], reported: bool) -> Dict[str, int]:
        """The size of every holder's part: asked for now, or as reported (asking for the missing ones)."""
        sizes = dict(self._reported_sizes) if reported else {}
        missing = [m for m in holders if m not in sizes]
        if missing:
            sizes.update(self._call({m: ("size",) for m in missing}))
        return {m: sizes[m] for m in holders if m in sizes}

    def _joined_sample(
        self, device: Union[str, torch.device, None], sized: bool, replies: Dict[str, Any]
    ) -> Tuple[int, Any]:
        """The members' draws as one batch (replies of ``"sample_sized"`` carry the part's size first)."""
        if sized:
            self._reported_sizes = {m: size for m, (size, _) in replies.items()}
            replies = {m: reply for m, (_, reply) in replies.items()}
        self._sampled(replies)
        parts = [values for size, values in replies.values() if size > 0]
        if not parts:
            return 0, None
        size = sum(size for size, _ in replies.values())
        return size, move_to(merge_batches(parts), device)

    def _sampled(self, replies: Dict[str, Tuple[int, Any]]) -> None:
        """Hook: the members' replies ``(count, values)`` to a sample, by member."""

    def _share(self, sizes: Dict[str, int], batch_size: int, method: Any) -> Dict[str, int]:
        """Split ``batch_size`` between members of the given sizes."""
        members = list(sizes)
        counts = np.array([sizes[m] for m in members], dtype=np.int64)
        total = int(counts.sum())
        if total == 0 or batch_size <= 0:
            return {}
        if method == "random_unique":
            shares = self._rng.multivariate_hypergeometric(counts, min(batch_size, total))
        elif method == "random":
            shares = self._rng.multinomial(batch_size, counts / total)
        else:  # a callable: proportional, largest remainders first
            exact = counts * batch_size / total
            shares = np.floor(exact).astype(np.int64)
            for i in np.argsort(shares - exact)[: batch_size - int(shares.sum())]:
                shares[i] += 1
        return {m: int(n) for m, n in zip(members, shares)}

    def _op_sample(
        self,
        count: int,
        concatenate: bool,
        method: Any,
        sample_attrs: Optional[List[str]],
        additional_concat_attrs: Optional[List[str]],
    ) -> Tuple[int, Optional[Tuple[Any, ...]]]:
        with self._lock:
            return Buffer.sample_batch(
                self, count, concatenate, None, method, sample_attrs, additional_concat_attrs
            )

    def _op_sample_sized(self, *args: Any) -> Tuple[int, Tuple[int, Optional[Tuple[Any, ...]]]]:
        """``(size of the part, what _op_sample returns)``, both under the lock."""
        with self._lock:
            return self.size(), self._op_sample(*args)
