"""A prioritized replay buffer spread over the members of an RPC group.

Each member keeps a local buffer with its own weight tree. Sampling first reads
every member's total weight, splits the batch between members in proportion to
those totals, and lets each member draw its share by priority. Each member's
lock is held only while it draws and reads its rows, never until the priorities
are updated, so appending stays local and is never held up for long (the
"design #3" of the Machin tutorial).

Because appends continue between sampling and the priority update, a sampled
slot may be overwritten by a new transition before its new priority arrives. A
**taint table** (one write counter per slot) detects this: the counters are read
at sampling time and travel with the indexes; an update whose counter changed
since is dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from functools import partial
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...parallel.distributed.rpc_group import RpcGroup
from ...utils.compat import ignores_extra_args
from .buffer_d import DistributedPart, PendingSample, merge_batches, move_to
from .prioritized_buffer import PrioritizedBuffer, _priority_array

__all__ = ["DistributedPrioritizedBuffer"]

#: member name -> (local storage indexes, write counters of those slots when sampled)
SampledIndexes = "OrderedDict[str, Tuple[np.ndarray, np.ndarray]]"

#: What sampling returns when nothing can be sampled.
EMPTY_SAMPLE = (0, None, None, None)


class DistributedPrioritizedBuffer(DistributedPart, PrioritizedBuffer):
    """A prioritized replay buffer whose transitions stay where they were appended.

    Construct it, with the same ``buffer_name``, on every member of ``group``
    (then call ``group.barrier()`` before sampling). :meth:`append`, :meth:`clear`
    and :meth:`size` act on the local part only; :meth:`all_size`,
    :meth:`all_clear`, :meth:`sample_batch` and :meth:`update_priority` on all
    parts. Data is always kept on the CPU.

    The sampling probability of a transition is its weight over the sum of all
    members' weights, as read at the start of the sampling (the sums may be
    slightly stale by the time members draw; with large buffers the difference is
    negligible). Importance-sampling weights use the total size of all parts and
    this buffer's ``curr_beta``, which starts at ``beta`` and grows after every
    :meth:`sample_batch` call.

    ``epsilon``, ``alpha``, ``beta`` and ``beta_increment_per_sampling`` are
    keyword-only (Machin 0.3.4 ignored them and always used the defaults). Other
    extra positional and keyword arguments are ignored with an
    :class:`~machin.utils.compat.ExtraArgumentsWarning`.

    Args:
        buffer_name: Name of the buffer, unique in ``group``.
        group: The RPC group whose members hold the parts.
        buffer_size: Maximum size of the **local** part.
        epsilon: See :class:`PrioritizedBuffer`.
        alpha: See :class:`PrioritizedBuffer`.
        beta: See :class:`PrioritizedBuffer`.
        beta_increment_per_sampling: See :class:`PrioritizedBuffer`.
        generator: Optional ``numpy.random.Generator`` for repeatable sampling
            (the local draws and the split between members).

    Raises:
        ~machin.frame.buffers.buffer_d.NotGroupMemberError: (a ``ValueError``) If the
            current process is not a member of ``group``.
        ~machin.frame.buffers.buffer_d.BufferNameTakenError: (a ``ValueError``) If
            ``buffer_name`` is already used there.
    """

    _OPS = ("size", "clear", "weight", "sample", "update")
    _LOCAL_OPS = ("size", "clear", "weight", "update")

    @ignores_extra_args
    def __init__(
        self,
        buffer_name: str,
        group: RpcGroup,
        buffer_size: int,
        *,
        epsilon: float = 1e-2,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_increment_per_sampling: float = 1e-3,
        generator: Optional[np.random.Generator] = None,
    ):
        self._lock = threading.RLock()
        PrioritizedBuffer.__init__(
            self,
            buffer_size,
            "cpu",
            epsilon,
            alpha,
            beta,
            beta_increment_per_sampling,
            generator=generator,
        )
        self._taint = np.zeros(buffer_size, dtype=np.int64)
        self._known: Dict[str, Tuple[float, int]] = {}  # (weight, size) of parts, from the last update
        self._deferring = 0  # depth of deferred_priority_updates blocks
        self._pending: Optional[Dict[str, Any]] = None  # a deferred update's requests in flight
        self._async_updates = False  # see set_async_priority_updates
        self._join(buffer_name, group, np.random.default_rng() if generator is None else generator)

    # -- taint table ----------------------------------------------------------------------
    @property
    def buffer_version_table(self) -> np.ndarray:
        """The write counter of every local slot (the taint table), as Machin 0.3.4 named it."""
        return self._taint

    def _written(self, positions: List[int]) -> None:
        self._taint[positions] += 1

    def _cleared(self) -> None:
        taint = getattr(self, "_taint", None)  # absent while the base class initializes
        if taint is not None:
            taint += 1

    # -- sampling -------------------------------------------------------------------------
    @ignores_extra_args
    def sample_batch(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_attrs: Optional[List[str]] = None,
        additional_concat_attrs: Optional[List[str]] = None,
    ):
        """Sample ``batch_size`` transitions by priority from the parts of all members.

        Each member's share of the batch is drawn in proportion to the total priority
        of its part; the member then samples its share by priority. A part's total
        priority is the one it reported with its answer to the last priority update
        (saving a round trip per batch; each report is used once), or asked for now when
        there is none. The
        importance-sampling weights use the same totals, so they match the draw.

        Args:
            batch_size: How many transitions to draw, over the whole group.
            concatenate: Return tensors of shape ``[B, ...]`` (``True``) or per-sample lists.
            device: Device of the returned tensors (default: the CPU, where the parts keep them).
            sample_attrs: Attributes to return, in order, as in :meth:`Buffer.sample_batch`.
            additional_concat_attrs: Custom attributes to return as ``[B, 1]`` tensors.

        Extra positional and keyword arguments are ignored with an
        :class:`~machin.utils.compat.ExtraArgumentsWarning`.

        Returns:
            ``(size, values, indexes, is_weights)``: ``values`` as in
            :meth:`Buffer.sample_batch`; ``indexes`` an ``OrderedDict`` mapping each
            member that contributed, in the order of ``values``, to ``(local
            storage indexes, write counters of those slots)``, to pass back to
            :meth:`update_priority`; ``is_weights`` the importance-sampling weights
            (max 1). ``(0, None, None, None)`` when nothing can be sampled.
        """
        return self.sample_batch_async(batch_size, concatenate, device, sample_attrs, additional_concat_attrs).wait()

    def sample_batch_async(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_attrs: Optional[Sequence[str]] = None,
        additional_concat_attrs: Optional[Sequence[str]] = None,
    ) -> PendingSample:
        """Start :meth:`sample_batch` and return without waiting for the members' draws.

        The split of the batch between members is decided now (a priority update in
        flight is waited for first, as its answer carries the parts' totals); ``wait()``
        on the result collects the draws and returns what :meth:`sample_batch` returns.
        Start one sample at a time and wait for it before starting the next.

        Args:
            batch_size: As :meth:`sample_batch`, like ``concatenate``, ``device``,
                ``sample_attrs`` and ``additional_concat_attrs``.
        """
        if batch_size <= 0:
            return PendingSample({}, lambda _: EMPTY_SAMPLE)
        stats = self._part_totals()
        weights = {m: w for m, (w, size) in stats.items() if w > 0 and size > 0}
        total_weight = sum(weights.values())
        if total_weight <= 0:
            return PendingSample({}, lambda _: EMPTY_SAMPLE)
        total_size = sum(size for _, size in stats.values())
        shares = self._rng.multinomial(batch_size, np.array(list(weights.values())) / total_weight)
        attrs = None if sample_attrs is None else list(sample_attrs)
        extra = None if additional_concat_attrs is None else list(additional_concat_attrs)
        requests = {m: ("sample", int(n), concatenate, attrs, extra) for m, n in zip(weights, shares) if n > 0}
        shares_of = {m: w / total_weight for m, w in weights.items() if m in requests}
        return PendingSample(self._start(requests), partial(self._joined_sample, shares_of, total_size, device),
                             self._collect)

    def _part_totals(self) -> Dict[str, Tuple[float, int]]:
        """``(total priority, size)`` of every holder's part: as last reported, else asked now.

        A reported total is used once; the priority update in flight, if any, is waited
        for first (its answer brings the newest totals).
        """
        self._settle()
        known, self._known = self._known, {}
        holders = self._holders()
        missing = [m for m in holders if m not in known]
        if missing:
            known.update(self._call({m: ("weight",) for m in missing}))
        return {m: known[m] for m in holders if m in known}

    def _joined_sample(self, shares_of: Dict[str, float], total_size: int, device: Any,
                       replies: Dict[str, Any]) -> Tuple[Any, ...]:
        """The members' draws as one batch, with indexes and importance-sampling weights."""
        parts, probabilities = [], []
        indexes: SampledIndexes = OrderedDict()
        for member, (size, values, index, local_probability, taint) in replies.items():
            if size == 0:
                continue
            parts.append(values)
            indexes[member] = (index, taint)
            probabilities.append(local_probability * shares_of[member])
        if not parts:
            return EMPTY_SAMPLE
        probability = np.concatenate(probabilities)
        with self._lock:
            beta = self.curr_beta
            self.curr_beta = min(1.0, beta + self.beta_increment_per_sampling)
        is_weights = np.power(np.maximum(probability, 1e-300) * total_size, -beta)
        is_weights /= is_weights.max()
        return len(probability), move_to(merge_batches(parts), device), indexes, is_weights

    def update_priority(self, priorities: np.ndarray, indexes: SampledIndexes) -> None:
        """Set new priorities for sampled transitions, where they live.

        Updates for slots overwritten (or cleared) since they were sampled are
        dropped; so are those of members that left. Inside
        :meth:`deferred_priority_updates`, or after :meth:`set_async_priority_updates`,
        it returns without waiting for the members.

        Args:
            priorities: New priorities, in the order of the sampled values.
            indexes: The ``indexes`` returned by :meth:`sample_batch`.

        Raises:
            ValueError: If the number of priorities differs from the number of indexes, or
                a priority is not a finite number.
            Exception: The error of the priority update still in flight, if it failed.
        """
        priorities = _priority_array("priorities", priorities)
        counts = [len(index) for index, _ in indexes.values()]
        if sum(counts) != priorities.size:
            raise ValueError(
                f"Dimension of weights and indexes doesn't match: got {priorities.size} priorities for "
                f"{sum(counts)} sampled indexes"
            )
        holders = set(self._holders())
        requests: Dict[str, Tuple[Any, ...]] = {}
        offset = 0
        for (member, (index, taint)), count in zip(indexes.items(), counts):
            if member in holders:
                requests[member] = ("update", priorities[offset : offset + count], index, taint)
            offset += count
        # each part answers with its new (weight, size)
        self._settle()
        if self._deferring or self._async_updates:
            self._pending = self._start(requests)
        else:
            self._known.update(self._call(requests))

    def set_async_priority_updates(self, enabled: bool) -> None:
        """Let every :meth:`update_priority` return without waiting for the members.

        At most one update is in flight: the next :meth:`update_priority` or
        :meth:`sample_batch` waits for it first and raises its error, if it failed;
        :meth:`wait_priority_updates` waits for it at any time, and so does turning this
        off. The Ape-X learners turn it on.

        Args:
            enabled: ``True`` to stop waiting for priority updates.
        """
        self._async_updates = bool(enabled)
        if not enabled:
            self.wait_priority_updates()

    def wait_priority_updates(self) -> None:
        """Wait until the priority update in flight, if any, is applied everywhere.

        Raises:
            Exception: The error of an update that failed on a member (with the remote traceback).
        """
        self._settle()

    @contextmanager
    def deferred_priority_updates(self) -> Iterator[None]:
        """A block in which :meth:`update_priority` returns without waiting for the members.

        The updates are sent at once; the block's end waits until every member has
        applied them (and raises what failed there), and so does the next
        :meth:`sample_batch` or :meth:`update_priority` inside the block. Blocks may be
        nested; the outermost one waits. The block belongs to the buffer object, not to a
        thread: open it in the thread that samples and updates.
        """
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if not self._deferring:
                self._settle()

    def _settle(self) -> None:
        """Wait for the priority update in flight, if any (its answer carries the parts' totals)."""
        pending, self._pending = self._pending, None
        if pending:
            self._known.update(self._collect(pending))

    # -- what each member does for the sampler ----------------------------------------------
    def _op_weight(self) -> Tuple[float, int]:
        with self._lock:
            return self.wt_tree.get_weight_sum(), self.size()

    def _op_sample(
        self,
        count: int,
        concatenate: bool,
        sample_attrs: Optional[List[str]],
        additional_concat_attrs: Optional[List[str]],
    ):
        with self._lock:
            local_sum = self.wt_tree.get_weight_sum()
            if self.size() == 0 or local_sum <= 0:
                return 0, None, None, None, None
            # sample_index also advances curr_beta: that is the sampler's business, not this part's.
            beta = self.curr_beta
            index, _ = self.sample_index(count)
            self.curr_beta = beta
            probability = self.wt_tree.get_leaf_weight(index) / local_sum
            values = self._gather(
                torch.from_numpy(index), concatenate, None, sample_attrs, additional_concat_attrs
            )
            return count, values, index, probability, self._taint[index].copy()

    def _op_update(self, priorities: np.ndarray, index: np.ndarray, taint: np.ndarray) -> Tuple[float, int]:
        with self._lock:
            fresh = self._taint[index] == taint
            PrioritizedBuffer.update_priority(self, priorities[fresh], index[fresh])
            return self._op_weight()
