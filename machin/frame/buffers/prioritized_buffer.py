"""Prioritized experience replay on a vectorised sum tree."""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...utils.compat import ignores_extra_args
from ..transition import TransitionBase
from .buffer import DEFAULT_REQUIRED_ATTRS, Buffer

__all__ = ["WeightTree", "PrioritizedBuffer"]


# Priority types that PrioritizedBuffer.append turns into a weight without numpy.
_FAST_PRIORITIES = frozenset((float, int, np.float64, np.float32, np.int64))


def _non_negative_number(name: str, value: Any) -> float:
    """``value`` as a float, or a ValueError naming ``name`` if it is not a finite, non-negative number."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ValueError(f"{name} must be a finite, non-negative number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite, non-negative number, got {value!r}")
    return value


def _priority_array(name: str, priorities: Any) -> np.ndarray:
    """``priorities`` as a flat float64 array, or a ValueError naming ``name`` for non-numbers or non-finite ones."""
    what = "a finite number" if name == "priority" else "finite numbers"
    try:
        array = np.asarray(priorities, dtype=np.float64).reshape(-1)
    except (
        TypeError,
        ValueError,
        OverflowError,
    ) as error:  # OverflowError: an int past float range
        shown = priorities[0] if name == "priority" and isinstance(priorities, list) else priorities
        raise ValueError(f"{name} must be {what}, got {shown!r} ({error})") from None
    finite = np.isfinite(array)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        where = "" if name == "priority" else f" at position {bad}"
        raise ValueError(f"{name} must be {what}, got {array[bad]}{where}")
    return array


class WeightTree:
    """A sum tree over ``size`` non-negative leaf weights.

    Read as the flat array :attr:`weights`, the tree lists the leaves first and the root
    last; each level holds the pairwise sums of the level below. The leaves are padded with
    zeros to a power of two, as in Machin 0.3.4: for leaves ``[1, 2, 3, 4]`` that is
    ``[1, 2, 3, 4, 3, 7, 10]``, and for ``[1, 1, 1, 1, 3]`` it is
    ``[1, 1, 1, 1, 3, 0, 0, 0, 2, 2, 3, 0, 4, 3, 7]``.

    Inside, it is one heap-ordered array: node ``j`` has the children ``2j`` and ``2j + 1``,
    the root is node 1, and the leaves are the nodes from ``L`` on, ``L`` being the power of
    two at or above ``size`` (the nodes past the last leaf stay 0 and change no sum). The
    ancestors of a leaf are then its node number shifted right by 1, 2, ..., so an update adds
    the change of every leaf to all of its ancestors in one vectorised operation (for one leaf
    or a whole batch) instead of walking the levels one by one. Additions round, so the inner
    sums are rebuilt exactly from the leaves after every ``max(size, 4096)`` leaf updates (an
    amortised cost of a few element operations per update). Searches walk down level by
    level for a whole batch of weights at once.

    The largest leaf is kept per block of ``2**k`` leaves (``k`` about half the depth): a
    block's maximum follows its leaves when they grow, and a block whose largest leaf was
    lowered is marked and rescanned only when the maximum is next asked for.

    Args:
        size: Number of leaves.
    """

    def __init__(self, size: int):
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"WeightTree size must be a positive integer, got {size!r}")
        self.size = int(size)
        first = 1 << (self.size - 1).bit_length()  # the node of leaf 0
        self._first_leaf = first
        self._tree = np.zeros(2 * first)  # node 0 is unused
        depth = first.bit_length()
        self._ancestor_shifts = np.arange(1, depth, dtype=np.int64)
        # Nodes of each level, leaves first, padding included (``depth`` levels).
        self._level_sizes = [first >> level for level in range(depth)]
        self._block_shift = min(depth - 1, max(6, depth // 2))
        self._bind_views()
        self._block_max = np.zeros(self._blocks.shape[0])  # an upper bound where _dirty
        self._dirty = np.zeros(self._blocks.shape[0], dtype=bool)
        self._any_dirty = False
        self._max: Optional[float] = 0.0  # the largest leaf, None when it must be recomputed
        self._owner = np.zeros(self.size, dtype=np.int64)  # scratch space of update_leaf_batch
        self._order = np.arange(0, dtype=np.int64)
        self._updates = 0  # leaf updates since the inner sums were last rebuilt exactly
        self._rebuild_after = max(self.size, 4096)

    def _bind_views(self) -> None:
        """The views of ``_tree``: the leaves, and the leaves in blocks (padding included)."""
        first = self._first_leaf
        self._leaves = self._tree[first : first + self.size]
        self._blocks = self._tree[first:].reshape(-1, 1 << self._block_shift)

    def __getstate__(self) -> Dict[str, Any]:
        # Views would be pickled (and deep-copied) as separate arrays: rebuild them instead.
        state = self.__dict__.copy()
        del state["_leaves"], state["_blocks"]
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind_views()

    # -- layout, read-only (the attribute names of Machin 0.3.4) ---------------------
    def _level(self, level: int) -> np.ndarray:
        """The nodes of ``level`` (0: the leaves), a view."""
        start = self._first_leaf >> level
        return self._tree[start : start + self._level_sizes[level]]

    @property
    def weights(self) -> np.ndarray:
        """Every node as one flat array, leaves first and root last (a copy)."""
        return np.concatenate([self._level(level) for level in range(len(self._level_sizes))])

    @property
    def depth(self) -> int:
        """Number of levels, leaves and root included."""
        return len(self._level_sizes)

    @property
    def sizes(self) -> np.ndarray:
        """Number of nodes of each level, leaves first."""
        return np.array(self._level_sizes, dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """Start of each level in :attr:`weights`, leaves first, followed by the array length."""
        return np.cumsum([0] + self._level_sizes, dtype=np.int64)

    @property
    def max_leaf(self) -> float:
        """Largest leaf weight (same as :meth:`get_leaf_max`)."""
        return self.get_leaf_max()

    # -- queries --------------------------------------------------------------------
    def get_weight_sum(self) -> float:
        """Sum of all leaf weights."""
        return float(self._tree[1])

    def get_leaf_max(self) -> float:
        """Largest leaf weight."""
        if self._max is None:
            if self._any_dirty:
                dirty = np.flatnonzero(self._dirty)
                self._block_max[dirty] = self._blocks[dirty].max(axis=1)
                self._dirty[dirty] = False
                self._any_dirty = False
            self._max = float(self._block_max.max())
        return self._max

    def get_leaf_all_weights(self) -> np.ndarray:
        """A copy of the leaf weights, shape ``(size,)``."""
        return self._leaves.copy()

    def _check_index(self, index: np.ndarray) -> None:
        if index.size and (index.min() < 0 or index.max() >= self.size):
            raise ValueError(
                f"Index has elements out of boundary: leaf index out of range [0, {self.size - 1}]: "
                f"got {index.min()}..{index.max()}"
            )

    def get_leaf_weight(
        self, index: Union[int, Sequence[int], np.ndarray]
    ) -> Union[float, np.ndarray]:
        """Weight of one leaf (``float``) or of several (``ndarray``).

        Args:
            index: A leaf index, or a sequence of them.
        """
        scalar = np.isscalar(index)
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        self._check_index(idx)
        weights = self._leaves[idx]
        return float(weights[0]) if scalar else weights

    def find_leaf_index(
        self, weight: Union[float, Sequence[float], np.ndarray]
    ) -> Union[int, np.ndarray]:
        """Index of the leaf whose cumulative interval contains ``weight``.

        ``weight`` should lie in ``[0, weight_sum]``; values outside are clipped.
        A scalar gives an ``int``, a sequence an ``ndarray``.
        """
        scalar = np.isscalar(weight)
        w = np.array(weight, dtype=np.float64).reshape(-1)
        node = np.ones(w.shape, dtype=np.int64)
        tree = self._tree
        for _ in range(len(self._level_sizes) - 1):
            left = node * 2
            left_w = tree[left]
            right = w > left_w
            w -= left_w * right  # subtracts left_w exactly where the walk turns right
            node = left + right
        # Never land past the last leaf (or on the zero padding) when rounding pushed w past the sum.
        index = np.minimum(node - self._first_leaf, self.size - 1)
        return int(index[0]) if scalar else index

    # -- updates --------------------------------------------------------------------
    def _set_one(self, index: int, weight: float) -> None:
        """Set one leaf (checked by the caller): every append."""
        tree = self._tree
        node = self._first_leaf + index
        old = float(tree[node])
        tree[node] = weight
        tree[node >> self._ancestor_shifts] += weight - old
        block = index >> self._block_shift
        block_max = self._block_max[block]
        if weight >= block_max:
            self._block_max[block] = weight
        elif old >= block_max:  # the block's largest leaf was lowered
            self._dirty[block] = True
            self._any_dirty = True
        largest = self._max
        if largest is not None:
            if weight >= largest:
                self._max = float(weight)
            elif old >= largest:
                self._max = None
        self._updates += 1
        if self._updates >= self._rebuild_after:
            self._rebuild_sums()

    def _set_many(self, indexes: np.ndarray, weights: np.ndarray) -> None:
        """Set several leaves (int64 indexes in range, finite non-negative float64 weights)."""
        n = indexes.size
        if n == 1:
            self._set_one(int(indexes[0]), float(weights[0]))
            return
        if self._order.size < n:
            self._order = np.arange(n, dtype=np.int64)
        order = self._order[:n]
        # Keep one occurrence per leaf, the last one, as ``leaves[indexes] = weights`` would.
        self._owner[indexes] = order
        last = self._owner[indexes] == order
        indexes, weights = indexes[last], weights[last]
        nodes = indexes + self._first_leaf
        tree = self._tree
        old = tree[nodes]
        tree[nodes] = weights
        np.add.at(tree, nodes[:, None] >> self._ancestor_shifts, (weights - old)[:, None])
        blocks = indexes >> self._block_shift
        lowered = old >= self._block_max[blocks]
        np.maximum.at(self._block_max, blocks, weights)
        lowered &= weights < old  # the largest leaf of these blocks went down
        self._dirty[blocks[lowered]] = True
        self._any_dirty = True
        self._max = None
        self._updates += indexes.size
        if self._updates >= self._rebuild_after:
            self._rebuild_sums()

    def _rebuild_sums(self) -> None:
        """Recompute every inner node from the leaves, level by level."""
        tree, start = self._tree, self._first_leaf
        while start > 1:  # the level at [start, 2 * start) sums into [start // 2, start)
            tree[start // 2 : start] = tree[start : 2 * start : 2] + tree[start + 1 : 2 * start : 2]
            start //= 2
        self._updates = 0

    def update_leaf(self, weight: float, index: int) -> None:
        """Set the weight of one leaf.

        Args:
            weight: The new weight.
            index: The leaf index.
        """
        if not isinstance(index, (int, np.integer)) or isinstance(
            weight, (list, tuple, np.ndarray)
        ):
            self.update_leaf_batch([weight], [index])  # the batch path explains what is wrong
            return
        weight, index = float(weight), int(index)
        if not 0 <= index < self.size:
            raise ValueError(
                f"Index has elements out of boundary: leaf index out of range [0, {self.size - 1}]: "
                f"got {index}..{index}"
            )
        if not (weight >= 0 and math.isfinite(weight)):
            raise ValueError("leaf weights must be finite and non-negative")
        self._set_one(index, weight)

    def update_leaf_batch(
        self, weights: Union[Sequence[float], np.ndarray], indexes: Union[Sequence[int], np.ndarray]
    ) -> None:
        """Set the weights of several leaves (when an index repeats, the last weight wins).

        Args:
            weights: The new weights.
            indexes: Their leaf indexes.
        """
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        idx = np.asarray(indexes, dtype=np.int64).reshape(-1)
        if w.shape != idx.shape:
            raise ValueError(
                f"Dimension of weights and indexes doesn't match: got {w.size} weights for "
                f"{idx.size} indexes"
            )
        if not idx.size:
            return
        self._check_index(idx)
        if np.any(w < 0) or not np.all(np.isfinite(w)):
            raise ValueError("leaf weights must be finite and non-negative")
        self._set_many(idx, w)

    def update_all_leaves(self, weights: Union[Sequence[float], np.ndarray]) -> None:
        """Replace the leaves with ``weights`` (length 0 to ``size``; the rest become 0) and rebuild."""
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.size > self.size:
            raise ValueError(
                f"Weights size must match tree size: got {w.size} weights for a tree of "
                f"{self.size} leaves (fewer are allowed; the other leaves become 0)"
            )
        if np.any(w < 0) or not np.all(np.isfinite(w)):
            raise ValueError("leaf weights must be finite and non-negative")
        self._leaves[:] = 0.0
        self._leaves[: w.size] = w
        self._rebuild_sums()
        self._block_max[:] = self._blocks.max(axis=1)
        self._dirty[:] = False
        self._any_dirty = False
        self._max = float(self._block_max.max())

    def print_weights(self, precision: int = 2) -> None:
        """Print the tree level by level, root first (for debugging).

        Args:
            precision: Decimals printed per weight.
        """
        for level in reversed(range(len(self._level_sizes))):
            print(" ".join(f"{v:.{precision}f}" for v in self._level(level)))


class PrioritizedBuffer(Buffer):
    """A replay buffer that samples transitions in proportion to their priority.

    The probability of transition ``j`` is ``p_j**alpha / sum_i p_i**alpha`` with
    ``p = |priority| + epsilon``; importance-sampling weights
    ``(N * P(j))**(-curr_beta)`` are divided by their batch maximum. ``curr_beta``
    starts at ``beta`` and grows by ``beta_increment_per_sampling`` after every
    sample, up to 1; :meth:`clear` sets it back to ``beta``.

    Extra positional and keyword arguments of the constructor are ignored with an
    :class:`~machin.utils.compat.ExtraArgumentsWarning`, as Machin 0.3.4 ignored them.

    Args:
        buffer_size: Maximum number of transitions.
        buffer_device: Device the stored tensors live on.
        epsilon: Added to every priority so that none has zero probability.
        alpha: How strongly priorities shape sampling (0 = uniform).
        beta: Initial importance-sampling exponent.
        beta_increment_per_sampling: Growth of ``beta`` per :meth:`sample_batch` call.
        generator: Optional ``numpy.random.Generator`` for repeatable sampling
            (default: numpy's global random state).
        check_finite: Check stored values as :class:`~machin.frame.buffers.buffer.Buffer` does.

    Raises:
        ValueError: When ``epsilon``, ``alpha``, ``beta`` or ``beta_increment_per_sampling``
            is not a finite, non-negative number (the message names it). Priorities must
            be finite numbers, always.
    """

    @ignores_extra_args
    def __init__(
        self,
        buffer_size: int = 1_000_000,
        buffer_device: Union[str, torch.device] = "cpu",
        epsilon: float = 1e-2,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_increment_per_sampling: float = 1e-3,
        *,
        generator: Optional[np.random.Generator] = None,
        check_finite: bool = True,
    ):
        super().__init__(buffer_size, buffer_device, check_finite=check_finite)
        for name, value in (
            ("epsilon", epsilon),
            ("alpha", alpha),
            ("beta", beta),
            ("beta_increment_per_sampling", beta_increment_per_sampling),
        ):
            _non_negative_number(name, value)
        self.epsilon = epsilon
        self.alpha = alpha
        self.beta = beta
        self.curr_beta = beta
        self.beta_increment_per_sampling = beta_increment_per_sampling
        self.rng = generator
        self.wt_tree = WeightTree(buffer_size)

    def state_dict(self) -> Dict[str, Any]:
        """:meth:`Buffer.state_dict` plus the weight tree, ``curr_beta`` and the numpy generator's state."""
        from .buffer_state import priority_state

        return {**super().state_dict(), "priority": priority_state(self)}

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """:meth:`Buffer.check_state_dict`, and the weight tree must fit this buffer's.

        Args:
            state: A buffer state, as :meth:`state_dict` returns it.
        """
        from .buffer_state import BufferStateError, check_priority_state

        super().check_state_dict(state)
        if not isinstance(state.get("priority"), Mapping):
            raise BufferStateError(
                "the state of a prioritized buffer must hold its priorities ('priority')"
            )
        check_priority_state(self, state["priority"])

    def _load_checked_state(self, state: Mapping[str, Any]) -> None:
        from .buffer_state import apply_priority_state

        super()._load_checked_state(state)
        apply_priority_state(self, state["priority"])

    def clear(self) -> None:
        """Remove every transition, reset all priorities to zero and ``curr_beta`` to ``beta``."""
        super().clear()
        if hasattr(self, "wt_tree"):
            self.wt_tree = WeightTree(self.buffer_size)
            self.curr_beta = self.beta

    def _normalize_priority(self, priority: Union[float, np.ndarray]) -> np.ndarray:
        return (np.abs(np.asarray(priority, dtype=np.float64)) + self.epsilon) ** self.alpha

    def _default_weight(self) -> float:
        return self.wt_tree.get_leaf_max() if self._size else 1.0

    def _one_weight(self, priority: Any) -> Optional[float]:
        """``(|priority| + epsilon) ** alpha`` of a finite Python/numpy float or int, ``None`` for anything else."""
        if type(priority) not in _FAST_PRIORITIES:
            return None
        try:
            value = abs(float(priority))
            weight = (value + self.epsilon) ** self.alpha
        except OverflowError:
            return None
        # (a NaN priority with alpha 0 gives a weight of 1): the array path names the problem
        return weight if math.isfinite(value) and math.isfinite(weight) else None

    def append(
        self,
        transition: Union[TransitionBase, Dict[str, Any]],
        priority: Optional[float] = None,
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> int:
        """Store one transition with a sampling priority.

        Args:
            transition: The transition; a dict is turned into a :class:`Transition`.
            priority: Its priority, e.g. an absolute TD error; it is stored as
                ``(|priority| + epsilon) ** alpha``. ``None`` gives it the largest stored
                priority (1 when the buffer is empty), so a new transition is likely to
                be sampled soon.
            required_attrs: Attributes that must be present; ``()`` disables the check.

        Returns:
            The storage position of the new row.

        Raises:
            ValueError: As :meth:`Buffer.append`, or when ``priority`` is not finite.
        """
        return self.extend([transition], None if priority is None else [priority], required_attrs)[
            0
        ]

    def extend(
        self,
        transitions: Iterable[Union[TransitionBase, Dict[str, Any]]],
        priorities: Optional[Sequence[float]] = None,
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> List[int]:
        """Store several transitions at once, each with its priority (default as in :meth:`append`).

        Args:
            transitions: The transitions (or dicts) to store.
            priorities: One priority per transition (``None``: the default of :meth:`append` for each).
            required_attrs: Attributes every transition must have.
        """
        if type(transitions) is not list:
            transitions = list(transitions)
        if priorities is not None and len(priorities) != len(transitions):
            raise ValueError(f"got {len(priorities)} priorities for {len(transitions)} transitions")
        default = self._default_weight()
        # Checked before anything is stored, so a bad priority leaves the buffer unchanged.
        normalized = None
        if priorities is not None:
            # One number (every append with a priority) without numpy; anything else, and any problem, through it.
            one = self._one_weight(priorities[0]) if len(priorities) == 1 else None
            normalized = (
                [one]
                if one is not None
                else self._normalize_priority(
                    _priority_array(
                        "priority" if len(transitions) == 1 else "priorities", priorities
                    )
                )
            )
            if one is None and not np.all(np.isfinite(normalized)):
                raise ValueError(
                    f"priorities must be finite after (|p| + epsilon) ** alpha, got {list(priorities)}"
                )
        positions = super().extend(transitions, required_attrs)
        if len(positions) == 1:  # every append
            self.wt_tree._set_one(
                positions[0], float(default if normalized is None else normalized[-1])
            )
        elif normalized is None:
            self.wt_tree.update_leaf_batch(np.full(len(positions), default), positions)
        else:
            self.wt_tree.update_leaf_batch(normalized[-len(positions) :], positions)
        return positions

    def update_priority(self, priorities: np.ndarray, indexes: np.ndarray) -> None:
        """Set new priorities (e.g. ``|TD error|``) for the storage ``indexes`` returned by sampling.

        Raises:
            ValueError: When a priority is not a finite number, or an index names a slot
                that holds no transition (nothing is changed then).
        """
        try:
            values = np.asarray(priorities, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            values = _priority_array("priorities", priorities)  # raises, naming the problem
        indexes = np.asarray(indexes, dtype=np.int64).reshape(-1)
        if values.size != indexes.size:
            raise ValueError(
                f"Dimension of weights and indexes doesn't match: got {values.size} priorities for "
                f"{indexes.size} indexes"
            )
        if not indexes.size:
            return
        # One reduction each: negative indexes are huge as unsigned numbers.
        if indexes.view(np.uint64).max() >= self._size:
            bad = indexes[(indexes < 0) | (indexes >= self._size)][0]
            raise ValueError(
                f"update_priority: index {bad} is out of range, it holds no transition (the buffer stores {self._size}, at "
                f"indexes 0..{self._size - 1}); pass the indexes returned by sample_batch"
            )
        weights = self._normalize_priority(values)
        if not math.isfinite(
            weights @ weights
        ):  # a NaN or infinity anywhere (or an overflow) makes it so
            _priority_array("priorities", priorities)  # raises for a non-finite priority
            if not np.all(np.isfinite(weights)):
                raise ValueError(
                    f"priorities must be finite after (|p| + epsilon) ** alpha, got {values.tolist()}"
                )
        self.wt_tree._set_many(indexes, weights)

    def _uniform(self, n: int) -> np.ndarray:
        return self.rng.random(n) if self.rng is not None else np.random.random(n)

    def sample_index(self, batch_size: int) -> Tuple[np.ndarray, np.ndarray]:
        """Draw ``batch_size`` storage indexes by priority; returns them and their IS weights.

        The weights use the current ``curr_beta``, which then grows by ``beta_increment_per_sampling``.
        """
        total = self.wt_tree.get_weight_sum()
        segment = total / batch_size
        targets = (np.arange(batch_size) + self._uniform(batch_size)) * segment
        index = self.wt_tree.find_leaf_index(np.minimum(targets, total))
        # Leaves past the filled part have weight 0 and are never chosen unless all are 0
        # (or rounding pushes a target past the last filled leaf).
        index = np.minimum(index, self._size - 1)
        probability = self.wt_tree.get_leaf_weight(index) / total
        is_weights = np.power(np.maximum(probability, 1e-300) * self._size, -self.curr_beta)
        self.curr_beta = min(1.0, self.curr_beta + self.beta_increment_per_sampling)
        is_weights /= is_weights.max()
        return index, is_weights

    @ignores_extra_args
    def sample_batch(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_attrs: Optional[List[str]] = None,
        additional_concat_attrs: Optional[List[str]] = None,
    ):
        """Sample ``batch_size`` transitions by priority.

        The sum of the stored priorities is cut into ``batch_size`` equal segments and
        one transition is drawn from each, with probability proportional to its
        priority (stratified sampling); a transition with a large priority can be drawn
        more than once.

        Args:
            batch_size: How many transitions to draw.
            concatenate: Return tensors of shape ``[B, ...]`` (``True``) or per-sample lists.
            device: Device of the returned tensors (default: the buffer's device).
            sample_attrs: Attributes to return, in order, as in :meth:`Buffer.sample_batch`.
            additional_concat_attrs: Custom attributes to return as ``[B, 1]`` tensors.

        There is no ``sample_method``: extra positional and keyword arguments (such as a
        ``sample_method`` meant for :class:`Buffer`) are ignored with an
        :class:`~machin.utils.compat.ExtraArgumentsWarning`.

        Returns:
            ``(size, values, indexes, is_weights)``: ``values`` as in
            :meth:`Buffer.sample_batch`, the storage ``indexes`` to pass to
            :meth:`update_priority`, and the importance-sampling weights (max 1).
            ``(0, None, None, None)`` when the buffer is empty or ``batch_size <= 0``.
        """
        if self._size == 0 or batch_size <= 0 or self.wt_tree.get_weight_sum() <= 0:
            return 0, None, None, None
        index, is_weights = self.sample_index(batch_size)
        values = self._gather(
            torch.from_numpy(index), concatenate, device, sample_attrs, additional_concat_attrs
        )
        return batch_size, values, index, is_weights
