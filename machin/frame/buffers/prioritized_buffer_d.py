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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...parallel.distributed.rpc_group import RpcGroup
from ...utils.compat import ignores_extra_args
from .buffer_d import DistributedPart, PendingSample, merge_batches, move_to, take_rows
from .prioritized_buffer import PrioritizedBuffer, _priority_array

__all__ = ["DistributedPrioritizedBuffer"]

#: member name -> (local storage indexes, write counters of those slots when sampled)
SampledIndexes = "OrderedDict[str, Tuple[np.ndarray, np.ndarray]]"

#: A queued priority update for one member: (priorities, local storage indexes, write counters).
PriorityUpdate = Tuple[np.ndarray, np.ndarray, np.ndarray]

#: What sampling returns when nothing can be sampled.
EMPTY_SAMPLE = (0, None, None, None)


def _reply_rows(reply: Tuple[Any, ...], start: int, stop: int) -> Tuple[Any, ...]:
    """Rows ``start:stop`` of a member's answer to a sample request (an empty answer stays empty)."""
    size, values, index, probability, taint = reply
    if size == 0 or stop <= start:
        return 0, None, None, None, None
    return (
        stop - start,
        take_rows(values, start, stop),
        index[start:stop],
        probability[start:stop],
        taint[start:stop],
    )


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
        self._known: Dict[
            str, Tuple[float, int]
        ] = {}  # (weight, size) of parts, from the last update
        self._deferring = 0  # depth of deferred_priority_updates blocks
        self._outbox: Dict[str, PriorityUpdate] = {}  # queued priority updates, by member
        self._async_updates = False  # see set_async_priority_updates
        self._join(buffer_name, group, np.random.default_rng() if generator is None else generator)

    # -- taint table ----------------------------------------------------------------------
    @property
    def buffer_version_table(self) -> np.ndarray:
        """The write counter of every local slot (the taint table), as Machin 0.3.4 named it."""
        return self._taint

    def _written(self, positions: List[int]) -> None:
        if (
            len(positions) == 1
        ):  # one stored transition: a scalar write (8 us less than an index array)
            self._taint[positions[0]] += 1
        else:
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
        return self.sample_batch_async(
            batch_size, concatenate, device, sample_attrs, additional_concat_attrs
        ).wait()

    def sample_batch_async(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_attrs: Optional[Sequence[str]] = None,
        additional_concat_attrs: Optional[Sequence[str]] = None,
    ) -> PendingSample:
        """Start :meth:`sample_batch` and return without waiting for the members' draws.

        The split of the batch between members is decided now, from the parts' totals
        (see :meth:`sample_batch`), and the priority updates queued by
        :meth:`set_async_priority_updates` travel with the requests; ``wait()`` on the
        result collects the draws and returns what :meth:`sample_batch` returns. Start
        one sample at a time and wait for it before starting the next.

        Args:
            batch_size: As :meth:`sample_batch`, like ``concatenate``, ``device``,
                ``sample_attrs`` and ``additional_concat_attrs``.
        """
        return self._start_sample(
            1,
            batch_size,
            concatenate,
            device,
            sample_attrs,
            additional_concat_attrs,
            pick=lambda samples: samples[0],
        )

    def sample_batches_async(
        self,
        batches: int,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_attrs: Optional[Sequence[str]] = None,
        additional_concat_attrs: Optional[Sequence[str]] = None,
    ) -> PendingSample:
        """Start ``batches`` samples of ``batch_size`` at once, in one round of requests.

        Each batch is split between the members by its own draw, as :meth:`sample_batch`
        splits one; every member draws the rows of all batches in one go, shuffles them
        and hands each batch its share. The batches are as independent as that many
        :meth:`sample_batch` calls made one after the other without priority updates in
        between. ``wait()`` on the result returns the list of ``batches`` samples, each
        what :meth:`sample_batch` returns (``curr_beta`` grows once per batch). A
        learner that trains on several batches per round trip (the Ape-X learners) pays
        the fixed cost of a request once for all of them.

        Args:
            batches: Number of batches (positive).
            batch_size: Transitions per batch; this and ``concatenate``, ``device``,
                ``sample_attrs`` and ``additional_concat_attrs`` as in :meth:`sample_batch`.

        Raises:
            ValueError: If ``batches`` is not a positive int.
        """
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise ValueError(f"batches must be a positive int, got {batches!r}")
        return self._start_sample(
            batches,
            batch_size,
            concatenate,
            device,
            sample_attrs,
            additional_concat_attrs,
            pick=list,
        )

    def _start_sample(
        self,
        batches: int,
        batch_size: int,
        concatenate: bool,
        device: Any,
        sample_attrs: Optional[Sequence[str]],
        additional_concat_attrs: Optional[Sequence[str]],
        pick: Callable[[List[Any]], Any],
    ) -> PendingSample:
        """Split ``batches`` batches between the parts by their totals and send one request to each."""
        empty = PendingSample({}, lambda _: pick([EMPTY_SAMPLE] * batches))
        if batch_size <= 0:
            return empty
        stats = self._part_totals()
        weights = {m: w for m, (w, size) in stats.items() if w > 0 and size > 0}
        total_weight = sum(weights.values())
        if total_weight <= 0:
            return empty
        total_size = sum(size for _, size in stats.values())
        probabilities = np.array(list(weights.values())) / total_weight
        if batches == 1:  # the same draw as before several batches per request existed
            shares = self._rng.multinomial(batch_size, probabilities)[None]
        else:
            shares = self._rng.multinomial(batch_size, probabilities, size=batches)
        attrs = None if sample_attrs is None else list(sample_attrs)
        extra = None if additional_concat_attrs is None else list(additional_concat_attrs)
        counts = {m: int(n) for m, n in zip(weights, shares.sum(axis=0)) if n > 0}
        updates, self._outbox = self._outbox, {}  # they travel with the requests
        requests = {
            m: ("sample", counts.get(m, 0), concatenate, attrs, extra, batches > 1, updates.get(m))
            for m in [*counts, *(m for m in updates if m not in counts)]
        }
        shares_of = {m: w / total_weight for m, w in weights.items() if m in counts}
        rows_of = {m: shares[:, i] for i, m in enumerate(weights) if m in counts}
        join = partial(self._joined_samples, shares_of, rows_of, total_size, device, pick)
        return PendingSample(self._start(requests), join, self._collect)

    def _joined_samples(
        self,
        shares_of: Dict[str, float],
        rows_of: Dict[str, np.ndarray],
        total_size: int,
        device: Any,
        pick: Callable[[List[Any]], Any],
        replies: Dict[str, Any],
    ) -> Any:
        """Cut each member's rows into the batches' shares and join every batch across members.

        A member that applied priority updates first also reported its new totals.
        """
        for member, reply in list(replies.items()):
            *reply, totals = reply
            replies[member] = tuple(reply)
            if totals is not None:
                self._known[member] = totals
            if member not in rows_of:  # asked only to apply priority updates
                del replies[member]
        batches = len(next(iter(rows_of.values()))) if rows_of else 1
        if batches == 1:
            return pick([self._joined_sample(shares_of, total_size, device, replies)])
        samples, offsets = [], dict.fromkeys(replies, 0)
        for batch in range(batches):
            own = {}
            for member, reply in replies.items():
                start = offsets[member]
                offsets[member] = stop = start + int(rows_of[member][batch])
                own[member] = _reply_rows(reply, start, stop)
            samples.append(self._joined_sample(shares_of, total_size, device, own))
        return pick(samples)

    def _part_totals(self) -> Dict[str, Tuple[float, int]]:
        """``(total priority, size)`` of every holder's part: as last reported, else asked now.

        The parts report their totals with their answers to priority updates; a report
        is used once (then the part is asked again, so that appends are counted).
        """
        known, self._known = self._known, {}
        holders = self._holders()
        missing = [m for m in holders if m not in known]
        if missing:
            known.update(self._call({m: ("weight",) for m in missing}))
        return {m: known[m] for m in holders if m in known}

    def _joined_sample(
        self, shares_of: Dict[str, float], total_size: int, device: Any, replies: Dict[str, Any]
    ) -> Tuple[Any, ...]:
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
        it only queues the update (see there) and returns.

        Args:
            priorities: New priorities, in the order of the sampled values.
            indexes: The ``indexes`` returned by :meth:`sample_batch`.

        Raises:
            ValueError: If the number of priorities differs from the number of indexes, or
                a priority is not a finite number.
        """
        priorities = _priority_array("priorities", priorities)
        counts = [len(index) for index, _ in indexes.values()]
        if sum(counts) != priorities.size:
            raise ValueError(
                f"Dimension of weights and indexes doesn't match: got {priorities.size} priorities for "
                f"{sum(counts)} sampled indexes"
            )
        holders = set(self._holders())
        updates: Dict[str, PriorityUpdate] = {}
        offset = 0
        for (member, (index, taint)), count in zip(indexes.items(), counts):
            if member in holders:
                updates[member] = (priorities[offset : offset + count], index, taint)
            offset += count
        self._queue(updates)
        if not (self._deferring or self._async_updates):
            self._settle()

    @property
    def queued_priority_updates(self) -> int:
        """Transitions whose new priority is queued here, not sent yet (see :meth:`set_async_priority_updates`)."""
        return sum(len(index) for _, index, _ in self._outbox.values())

    def set_async_priority_updates(self, enabled: bool) -> None:
        """Let :meth:`update_priority` queue the new priorities instead of sending them.

        The queued priorities travel to each member with the next sample request (the
        member applies them, then draws), so a learner that samples and updates in
        turn sends one message per member and round instead of two; a member not asked
        for transitions gets a request for none. :meth:`wait_priority_updates` sends
        what is queued at any time and waits until it is applied, and so does turning
        this off. A priority update that fails on a member raises its error from the
        sample (or the wait) that carried it. The Ape-X learners turn it on.

        Args:
            enabled: ``True`` to queue priority updates.
        """
        self._async_updates = bool(enabled)
        if not enabled:
            self.wait_priority_updates()

    def wait_priority_updates(self) -> None:
        """Send the queued priority updates, if any, and wait until every member has applied them.

        Raises:
            Exception: The error of an update that failed on a member (with the remote traceback).
        """
        self._settle()

    @contextmanager
    def deferred_priority_updates(self) -> Iterator[None]:
        """A block in which :meth:`update_priority` queues the updates and returns at once.

        A sample inside the block takes the queued updates along (see
        :meth:`set_async_priority_updates`); the block's end sends the rest and waits
        until every member has applied them (and raises what failed there). Blocks may
        be nested; the outermost one waits. The block belongs to the buffer object, not
        to a thread: open it in the thread that samples and updates.
        """
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if not self._deferring:
                self._settle()

    def _queue(self, updates: Dict[str, PriorityUpdate]) -> None:
        """Add ``updates`` to the queue, member by member."""
        for member, (priorities, index, taint) in updates.items():
            queued = self._outbox.get(member)
            if queued is not None:  # a slot sampled twice takes its later priority, as in the tree
                priorities = np.concatenate([queued[0], priorities])
                index = np.concatenate([queued[1], index])
                taint = np.concatenate([queued[2], taint])
            self._outbox[member] = (priorities, index, taint)

    def _settle(self) -> None:
        """Send the queued updates on their own and wait (each part answers with its new totals)."""
        outbox, self._outbox = self._outbox, {}
        if outbox:
            self._known.update(self._call({m: ("update", *update) for m, update in outbox.items()}))

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
        shuffle: bool = False,
        updates: Optional[PriorityUpdate] = None,
    ):
        with self._lock:
            totals = None if updates is None else self._op_update(*updates)
            local_sum = self.wt_tree.get_weight_sum()
            if count == 0 or self.size() == 0 or local_sum <= 0:
                return 0, None, None, None, None, totals
            # sample_index also advances curr_beta: that is the sampler's business, not this part's.
            beta = self.curr_beta
            index, _ = self.sample_index(count)
            self.curr_beta = beta
            if (
                shuffle
            ):  # the draw is stratified by priority: cut into batches, each needs a random share
                index = index[self._rng.permutation(len(index))]
            probability = self.wt_tree.get_leaf_weight(index) / local_sum
            values = self._gather(
                torch.from_numpy(index), concatenate, None, sample_attrs, additional_concat_attrs
            )
            return count, values, index, probability, self._taint[index].copy(), totals

    def _op_update(
        self, priorities: np.ndarray, index: np.ndarray, taint: np.ndarray
    ) -> Tuple[float, int]:
        with self._lock:
            fresh = self._taint[index] == taint
            PrioritizedBuffer.update_priority(self, priorities[fresh], index[fresh])
            return self._op_weight()
