"""Prioritized replay of fixed-length sequences cut from whole episodes (R2D1/R2D2 style).

Episodes are stored step by step in the column storage of
:class:`~machin.frame.buffers.PrioritizedBuffer`, as n-step transitions (see
:func:`~machin.frame.returns.n_step_episode`) with three bookkeeping
columns: the episode's number, the step's index in it and the episode's length.
Every stored step may start the training part of a sequence; its leaf in the sum
tree holds that sequence's priority (steps that start no sequence, when
``sequence_stride > 1``, get weight 0 and are never drawn). A sampled sequence is a
window around its start, read from the storage rows next to it::

    | burn_in steps before | sequence_length training steps | n_step look-ahead steps |
                           ^ the sampled start step

Positions outside the episode are zero-padded and masked; the position right after
the episode's last step holds the final observation (that step's ``next_state``), so
a time-limit cut can still be bootstrapped from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from ..returns import n_step_episode
from ..transition import TransitionBase, as_transition
from .buffer import DEFAULT_REQUIRED_ATTRS
from .prioritized_buffer import PrioritizedBuffer

__all__ = ["SequenceBatch", "SequenceBuffer"]

_EPISODE, _STEP, _LENGTH = "episode_id", "episode_step", "episode_length"
_BOOKKEEPING = (_EPISODE, _STEP, _LENGTH, "steps")


@dataclass
class SequenceBatch:
    """A batch of ``size`` sequences of ``W = burn_in + sequence_length + n_step`` positions.

    Position ``k`` of sequence ``b`` is episode step ``start_b - burn_in + k``.

    Attributes:
        size: Number of sequences ``B``.
        state: Observation keys (the hidden key removed), each ``[B, W, ...]``: the
            observation before each step, the final observation after the episode's
            last step, zeros elsewhere.
        hidden: The stored hidden state ``[B, ...]`` of each sequence's first real
            step (``None`` when the stored states have no hidden key).
        action: Action keys, each ``[B, W, ...]`` (zeros where ``step_mask`` is false).
        reward: n-step returns ``[B, W]`` (zeros where ``step_mask`` is false).
        terminal: Whether the n-step horizon of each step ends the episode, ``[B, W]`` floats.
        steps: Length ``m`` of each step's n-step horizon ``[B, W]`` (long, 0 on padding):
            step ``k`` bootstraps from position ``k + m``.
        step_mask: ``[B, W]`` bools, true at real episode steps.
        observed: ``[B, W]`` bools, true where ``state`` holds a real observation
            (the real steps and the final observation).
        train_mask: ``[B, sequence_length]`` bools, the real steps of the training part.
        index: Storage rows of the sequence starts (for :meth:`SequenceBuffer.update_sequence_priority`).
        weight: Importance-sampling weights ``[B, 1]`` (largest 1).
    """

    size: int
    state: Dict[str, torch.Tensor]
    hidden: Optional[torch.Tensor]
    action: Dict[str, torch.Tensor]
    reward: torch.Tensor
    terminal: torch.Tensor
    steps: torch.Tensor
    step_mask: torch.Tensor
    observed: torch.Tensor
    train_mask: torch.Tensor
    index: np.ndarray
    weight: torch.Tensor


def _non_negative_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise ValueError(f"{name} must be {kind} integer, got {value!r}")
    return int(value)


class SequenceBuffer(PrioritizedBuffer):
    """Stores whole episodes and samples prioritized fixed-length sequences from them.

    The recurrent state is stored as one key of the ``state`` dict of every step
    (``hidden_key``): the hidden state that was given to the network at that step,
    a tensor whose first dimension is the batch (1). A sampled sequence comes back
    with the stored hidden state of its first real step.

    A sequence's priority is ``priority_eta * max + (1 - priority_eta) * mean`` of the
    absolute TD errors of its training steps (:meth:`update_sequence_priority`);
    new sequences get the largest stored priority (1 when the buffer is empty).

    Args:
        buffer_size: Maximum number of stored steps; the oldest are overwritten.
        buffer_device: Device the stored tensors live on.
        sequence_length: Training steps per sequence.
        burn_in: Steps before the training part that only warm up the hidden state.
        n_step: Horizon of the stored n-step returns (also the look-ahead of a window).
        discount: Discount of the n-step returns.
        sequence_stride: Only every ``sequence_stride``-th step of an episode (0, s, 2s,
            ...) starts a sequence; 1 lets every step start one.
        priority_eta: Weight of the maximum in a sequence priority.
        hidden_key: Key of the hidden state in the stored ``state`` dicts.
        epsilon: Added to every priority (see :class:`PrioritizedBuffer`).
        alpha: Priority exponent.
        beta: Initial importance-sampling exponent.
        beta_increment_per_sampling: Growth of ``beta`` per sample, up to 1.
        generator: Optional ``numpy.random.Generator`` for repeatable sampling.

    Raises:
        ValueError: When an option is out of range.
    """

    def __init__(
        self,
        buffer_size: int = 1_000_000,
        buffer_device: Union[str, torch.device] = "cpu",
        *,
        sequence_length: int = 8,
        burn_in: int = 4,
        n_step: int = 3,
        discount: float = 0.99,
        sequence_stride: int = 1,
        priority_eta: float = 0.9,
        hidden_key: str = "hidden",
        epsilon: float = 1e-2,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_increment_per_sampling: float = 1e-3,
        generator: Optional[np.random.Generator] = None,
    ):
        super().__init__(
            buffer_size,
            buffer_device,
            epsilon,
            alpha,
            beta,
            beta_increment_per_sampling,
            generator=generator,
        )
        self.sequence_length = _non_negative_int("sequence_length", sequence_length, 1)
        self.burn_in = _non_negative_int("burn_in", burn_in, 0)
        self.n_step = _non_negative_int("n_step", n_step, 1)
        self.sequence_stride = _non_negative_int("sequence_stride", sequence_stride, 1)
        if not 0 <= discount <= 1:
            raise ValueError(f"discount must be in [0, 1], got {discount!r}")
        if not 0 <= priority_eta <= 1:
            raise ValueError(f"priority_eta must be in [0, 1], got {priority_eta!r}")
        if not isinstance(hidden_key, str):
            raise TypeError(f"hidden_key must be a string, got {type(hidden_key).__name__}")
        self.discount = discount
        self.priority_eta = priority_eta
        self.hidden_key = hidden_key

    @property
    def window(self) -> int:
        """Positions per sampled sequence: ``burn_in + sequence_length + n_step``."""
        return self.burn_in + self.sequence_length + self.n_step

    def state_dict(self) -> Dict[str, Any]:
        """:meth:`PrioritizedBuffer.state_dict` plus the number of episodes stored."""
        return {**super().state_dict(), "episodes": self._episodes}

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """:meth:`PrioritizedBuffer.check_state_dict`, and the state must hold the episode count.

        Args:
            state: A buffer state, as :meth:`state_dict` returns it.
        """
        from .buffer_state import BufferStateError

        super().check_state_dict(state)
        if not isinstance(state.get("episodes"), int):
            raise BufferStateError(
                "the state of a sequence buffer must hold its episode count ('episodes')"
            )

    def _load_checked_state(self, state: Mapping[str, Any]) -> None:
        super()._load_checked_state(state)
        self._episodes = state["episodes"]

    def clear(self) -> None:
        """Remove every episode and reset all priorities."""
        super().clear()
        self._episodes = 0

    # -- storing ----------------------------------------------------------------------
    def append(
        self,
        transition: Any,
        priority: Optional[float] = None,
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> int:
        """Not available: a sequence buffer stores whole episodes (:meth:`store_episode`).

        Args:
            transition: Ignored.
            priority: Ignored.
            required_attrs: Ignored.

        Raises:
            RuntimeError: Always.
        """
        raise RuntimeError(
            "SequenceBuffer stores whole episodes: call store_episode(episode) instead of append"
        )

    def extend(
        self,
        transitions: Iterable[Any],
        priorities: Optional[Sequence[float]] = None,
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> List[int]:
        """Not available: a sequence buffer stores whole episodes (:meth:`store_episode`).

        Args:
            transitions: Ignored.
            priorities: Ignored.
            required_attrs: Ignored.

        Raises:
            RuntimeError: Always.
        """
        raise RuntimeError(
            "SequenceBuffer stores whole episodes: call store_episode(episode) instead of extend"
        )

    def store_episode(
        self,
        episode: Sequence[Union[TransitionBase, Dict[str, Any]]],
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> List[int]:
        """Store one whole episode (its steps in order) and give its sequences the top priority.

        The last step's ``terminal`` tells whether the episode ended (``True``) or was
        cut by a time limit (``False``: its last steps bootstrap from the final
        observation). Rewards become n-step returns.

        Args:
            episode: The episode's transitions (or dicts of their attributes).
            required_attrs: Attributes every step must have.

        Returns:
            The storage rows used, in step order.

        Raises:
            ValueError: When the episode is empty, longer than ``buffer_size``, uses a
                reserved custom attribute name, or does not fit the stored layout.
        """
        episode = list(episode)
        if not episode:
            raise ValueError("episode must hold at least one transition, got an empty episode")
        if len(episode) > self.buffer_size:
            raise ValueError(
                f"an episode of {len(episode)} steps does not fit in buffer_size={self.buffer_size}"
            )
        length = len(episode)
        steps = []
        for i, t in enumerate(episode):
            if not isinstance(t, dict):
                t = as_transition(t)  # a TypeError for anything but a transition or a dict
                t = dict(t.items())
            fields = dict(t)
            reserved = sorted(set(fields) & set(_BOOKKEEPING))
            if reserved:
                raise ValueError(f"step {i} uses the reserved attribute name(s) {reserved}")
            steps.append({**fields, _EPISODE: self._episodes, _STEP: i, _LENGTH: length})
        rows = n_step_episode(steps, self.n_step, self.discount)
        positions = super().extend(rows, None, required_attrs)
        self._episodes += 1
        starts = np.arange(length) % self.sequence_stride == 0
        self.wt_tree.update_leaf_batch(
            np.where(starts, self.wt_tree.get_leaf_weight(positions), 0.0), positions
        )
        return positions

    # -- priorities -------------------------------------------------------------------
    def sequence_priority(
        self, td_errors: Union[torch.Tensor, np.ndarray], mask: Union[torch.Tensor, np.ndarray]
    ) -> np.ndarray:
        """``priority_eta * max + (1 - priority_eta) * mean`` of ``|td_errors|`` over each row's masked steps.

        Args:
            td_errors: ``[B, T]`` TD errors.
            mask: ``[B, T]`` bools, true at the steps that count.

        Returns:
            ``[B]`` priorities (0 for a row without any step).
        """
        td = np.abs(np.asarray(torch.as_tensor(td_errors).detach().cpu(), dtype=np.float64))
        mask = np.asarray(torch.as_tensor(mask).cpu(), dtype=bool)
        if td.shape != mask.shape or td.ndim != 2:
            raise ValueError(
                f"td_errors and mask must both be [B, T], got shapes {td.shape} and {mask.shape}"
            )
        td = np.where(mask, td, 0.0)
        count = mask.sum(axis=1)
        mean = td.sum(axis=1) / np.maximum(count, 1)
        return self.priority_eta * td.max(axis=1, initial=0.0) + (1 - self.priority_eta) * mean

    def update_sequence_priority(
        self,
        td_errors: Union[torch.Tensor, np.ndarray],
        mask: Union[torch.Tensor, np.ndarray],
        indexes: np.ndarray,
    ) -> None:
        """Set the priorities of the sampled sequences (``indexes``) from their TD errors (see :meth:`sequence_priority`).

        Args:
            td_errors: ``[B, T]`` TD errors of the sampled sequences.
            mask: ``[B, T]`` bools, true at the steps that count.
            indexes: The ``indexes`` returned with the sequences.
        """
        self.update_priority(self.sequence_priority(td_errors, mask), indexes)

    # -- sampling ---------------------------------------------------------------------
    def _column(self, attr: str, key: Optional[str], rows: torch.Tensor, device) -> torch.Tensor:
        """One stored column at storage ``rows`` as a ``[N, ...]`` tensor."""
        column = (
            self._sub[attr]
            if attr in self._sub
            else (self._custom[attr] if key is None else self._major[attr][key])
        )
        return column.gather(rows, True, True, device)

    def sample_sequences(
        self, batch_size: int, device: Union[str, torch.device, None] = None
    ) -> Optional[SequenceBatch]:
        """Draw ``batch_size`` sequence starts by priority and read their windows.

        Args:
            batch_size: Number of sequences (drawn with replacement).
            device: Device of the returned tensors (default: the buffer's device).

        Returns:
            A :class:`SequenceBatch`, or ``None`` when the buffer is empty.
        """
        if self._size == 0 or batch_size <= 0 or self.wt_tree.get_weight_sum() <= 0:
            return None
        index, is_weights = self.sample_index(batch_size)
        return self.read_sequences(index, is_weights, device)

    def sequence_starts(self, positions: Sequence[int]) -> np.ndarray:
        """The storage rows among ``positions`` (as :meth:`store_episode` returns them) that start a sequence.

        Args:
            positions: Storage rows of one stored episode, in step order.
        """
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        return positions[np.arange(positions.size) % self.sequence_stride == 0]

    def read_sequences(
        self,
        index: np.ndarray,
        is_weights: Optional[np.ndarray] = None,
        device: Union[str, torch.device, None] = None,
    ) -> SequenceBatch:
        """Read the windows of the sequences that start at storage rows ``index``.

        Args:
            index: Storage rows of sequence starts (e.g. from :meth:`sequence_starts`).
            is_weights: Their importance-sampling weights (default: all 1).
            device: Device of the returned tensors (default: the buffer's device).

        Returns:
            A :class:`SequenceBatch` whose ``index`` is ``index``.
        """
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        if is_weights is None:
            is_weights = np.ones(index.size)
        out = torch.device(device) if device is not None else self.buffer_device
        dev = self.buffer_device
        start = torch.from_numpy(index).to(dev)
        count, width = len(index), self.window
        step = self._column(_STEP, None, start, dev)  # [B, 1]
        length = self._column(_LENGTH, None, start, dev)
        episode = self._column(_EPISODE, None, start, dev)

        offset = torch.arange(width, device=dev) - self.burn_in
        episode_step = step + offset  # [B, W]
        rows = (start.view(-1, 1) + offset) % self._capacity
        inside = (episode_step >= 0) & (episode_step < length)
        # Rows before the start may have been overwritten by newer episodes.
        same_episode = (
            self._column(_EPISODE, None, rows.view(-1), dev).view(count, width) == episode
        )
        step_mask = inside & same_episode
        final = episode_step == length  # the position of the final observation
        observed = step_mask | final
        safe_rows = torch.where(step_mask, rows, start.view(-1, 1)).view(-1)

        def window(values: torch.Tensor) -> torch.Tensor:
            values = values.view(count, width, *values.shape[1:])
            mask = step_mask.view(count, width, *([1] * (values.dim() - 2)))
            return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=dev))

        state_keys = [k for k in self._major["state"] if k != self.hidden_key]
        state = {k: window(self._column("state", k, safe_rows, dev)) for k in state_keys}
        last_rows = rows.gather(1, (length - step + self.burn_in - 1).clamp(0, width - 1))  # [B, 1]
        has_final = final.any(dim=1)
        last_rows = torch.where(has_final.view(-1, 1), last_rows, start.view(-1, 1)).view(-1)
        final_position = final.nonzero()
        for k in state_keys:
            if k in self._major["next_state"]:
                final_obs = self._column("next_state", k, last_rows, dev)[has_final]
                state[k][final_position[:, 0], final_position[:, 1]] = final_obs.to(state[k].dtype)

        hidden = None
        if self.hidden_key in self._major["state"]:
            first = step_mask.to(torch.int8).argmax(dim=1, keepdim=True)
            hidden = self._column("state", self.hidden_key, rows.gather(1, first).view(-1), dev)
        action = {
            k: window(self._column("action", k, safe_rows, dev)) for k in self._major["action"]
        }
        reward = window(self._column("reward", None, safe_rows, dev).view(-1))
        terminal = window(self._column("terminal", None, safe_rows, dev).view(-1))
        steps = window(self._column("steps", None, safe_rows, dev).view(-1).long())
        train = slice(self.burn_in, self.burn_in + self.sequence_length)

        def move(value):
            if isinstance(value, dict):
                return {k: v.to(out) for k, v in value.items()}
            return None if value is None else value.to(out)

        dtype = torch.get_default_dtype()
        return SequenceBatch(
            size=count,
            state=move(state),
            hidden=move(hidden),
            action=move(action),
            reward=move(reward.to(dtype)),
            terminal=move(terminal.to(dtype)),
            steps=move(steps),
            step_mask=move(step_mask),
            observed=move(observed),
            train_mask=move(step_mask[:, train]),
            index=index,
            weight=torch.as_tensor(is_weights, dtype=dtype, device=out).view(count, 1),
        )
