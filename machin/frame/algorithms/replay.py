"""What every replay-based algorithm shares: storing, sampling and the Bellman pieces.

:class:`ReplayMixin` is mixed into DQN, DDPG (and their subclasses): it stores
transitions (as n-step transitions when ``n_step > 1``), samples a
:class:`SampledBatch`, computes the per-sample discount and the value loss.
:class:`PrioritizedReplayMixin` swaps in prioritized sampling, importance weights and
priority updates, for DQNPer and DDPGPer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np
import torch

from ...utils.compat import warn_caller
from ..buffers import Buffer, PrioritizedBuffer
from ..buffers.buffer import DEFAULT_REQUIRED_ATTRS
from ..returns import n_step_episode
from ..transition import Transition
from .options import BufferOptions, Option, optional, positive_int

__all__ = [
    "REQUIRED_ATTRS",
    "SampledBatch",
    "make_batch",
    "bellman_target",
    "value_loss",
    "ReplayMixin",
    "PrioritizedReplayMixin",
]

REQUIRED_ATTRS = DEFAULT_REQUIRED_ATTRS  # state, action, next_state, reward, terminal
SAMPLE_ATTRS = ["state", "action", "reward", "next_state", "terminal", "*"]


@dataclass
class SampledBatch:
    """One sampled training batch, as the update hooks of replay-based algorithms see it.

    ``reward`` and ``terminal`` are ``[B, 1]`` float tensors; ``others`` holds the
    custom attributes; ``index`` and ``weight`` are set by prioritized replay, and
    ``priority`` holds the new priorities a compiled loss step computed until they are pushed.

    Attributes:
        size: Number of samples ``B``.
        state: State dict ``{key: [B, ...]}``.
        action: Action dict ``{key: [B, ...]}``.
        next_state: Next-state dict ``{key: [B, ...]}``.
    """

    size: int
    state: Dict[str, Any]
    action: Dict[str, Any]
    reward: torch.Tensor
    next_state: Dict[str, Any]
    terminal: torch.Tensor
    others: Dict[str, Any] = field(default_factory=dict)
    index: Optional[np.ndarray] = None
    weight: Optional[torch.Tensor] = None
    priority: Optional[torch.Tensor] = None


def make_batch(size: int, batch: tuple, **extra: Any) -> SampledBatch:
    """A :class:`SampledBatch` from what a buffer's ``sample_batch`` returned.

    Rewards and terminals become ``[B, 1]`` float tensors (of the default dtype
    unless the rewards are floats already).

    Args:
        size: Number of samples ``B``.
        batch: The sampled ``(state, action, reward, next_state, terminal, others)``,
            i.e. the attributes ``["state", "action", "reward", "next_state", "terminal", "*"]``.
        extra: Further fields of the batch (``index`` and ``weight`` for prioritized replay).
    """
    state, action, reward, next_state, terminal, others = batch
    if not isinstance(reward, torch.Tensor):
        reward = Buffer.make_tensor_from_batch(reward, None, True)
        terminal = Buffer.make_tensor_from_batch(terminal, None, True)
    dtype = reward.dtype if reward.is_floating_point() else torch.get_default_dtype()
    return SampledBatch(
        size,
        state,
        action,
        _column(reward, dtype, size),
        next_state,
        _column(terminal, dtype, size),
        others,
        **extra,
    )


def _column(values: torch.Tensor, dtype: torch.dtype, size: int) -> torch.Tensor:
    """``values`` as a ``[size, k]`` tensor of ``dtype`` (itself when it is one already)."""
    if values.dtype != dtype:
        values = values.to(dtype)
    return values if values.dim() == 2 and values.shape[0] == size else values.view(size, -1)


def bellman_target(
    reward: torch.Tensor,
    discount: Union[float, torch.Tensor],
    next_value: torch.Tensor,
    terminal: torch.Tensor,
    others: Optional[Dict[str, Any]] = None,
) -> torch.Tensor:
    """Bellman target ``reward + discount * (1 - terminal) * next_value`` (terminal as 0/1 floats).

    Args:
        reward: Rewards ``[B, 1]``.
        discount: The discount factor, or ``[B, 1]`` discounts for n-step samples.
        next_value: Value of the next states ``[B, 1]``.
        terminal: 1 where the episode terminated, ``[B, 1]``.
        others: The custom attributes of the batch, for overrides that need them.
    """
    return reward + discount * (1.0 - terminal) * next_value


def value_loss(
    criterion: Callable, predicted: torch.Tensor, target: torch.Tensor, size: int
) -> torch.Tensor:
    """``criterion(target[B, 1], predicted[B, 1])``, the target moved to the prediction's device.

    Args:
        criterion: The value loss.
        predicted: Predicted values (``B`` of them).
        target: Their regression targets (``B`` of them).
        size: Number of samples ``B``.
    """
    shape = (size, 1)
    if predicted.shape != shape:  # a no-op view would still add a node to the backward pass
        predicted = predicted.view(shape)
    if target.shape != shape:
        target = target.view(shape)
    return criterion(target.to(predicted.device), predicted)


def _check_one_value_per_step(owner: str, step: Any) -> None:
    """Raise ``ValueError`` if the ``reward`` or ``terminal`` of ``step`` is a tensor of more than one value.

    The updates read one reward and one flag per transition (``[B, 1]``); a wider tensor
    would be stored and only fail later, inside an update, with a reshape error.
    """
    for name in ("reward", "terminal"):
        value = step.get(name) if isinstance(step, dict) else getattr(step, name, None)
        if isinstance(value, torch.Tensor) and value.numel() != 1:
            raise ValueError(
                f"{owner} stores one {name} per transition (a number or a tensor of shape [1, 1]), but the "
                f"{name} of this transition is a tensor of shape {list(value.shape)}"
            )


class ReplayMixin(BufferOptions):
    """Storing and sampling for algorithms that learn from a replay buffer.

    The host class sets ``replay_buffer`` and ``criterion``; the buffer options and
    ``n_step`` are declared here.
    """

    n_step = Option(
        1,
        positive_int,
        "Learn from n-step returns; ``n_step > 1`` needs whole episodes "
        "(``store_episode``), see :func:`~machin.frame.returns.n_step_episode`.",
    )

    def _default_buffer(self) -> Buffer:
        return Buffer(self.replay_size, self.replay_device)

    # -- storing ----------------------------------------------------------------------
    def store_transition(self, transition: Union[Transition, Dict[str, Any]]) -> None:
        """Store one step with attributes state, action, next_state, reward, terminal.

        Args:
            transition: A :class:`~machin.frame.transition.Transition` or a dict with those attributes.

        Raises:
            ValueError: When an attribute is missing or differs from the stored ones.
            RuntimeError: With ``n_step > 1``, which needs whole episodes.
        """
        if self.n_step > 1:
            raise RuntimeError(
                f"{type(self).__name__} with n_step={self.n_step} computes n-step returns over whole "
                f"episodes: call store_episode instead of store_transition"
            )
        if self.replay_buffer.size() == 0:  # the first step sets the buffer's layout: check it once
            _check_one_value_per_step(type(self).__name__, transition)
        self.replay_buffer.append(transition, required_attrs=REQUIRED_ATTRS)

    def store_episode(self, episode: List[Union[Transition, Dict[str, Any]]]) -> None:
        """Store every step of an episode in one write (as n-step transitions when ``n_step > 1``).

        End the episode with ``terminal=False`` when it was cut by a time limit: its
        last steps then still bootstrap from the last state.
        """
        if episode and self.replay_buffer.size() == 0:
            _check_one_value_per_step(type(self).__name__, episode[0])
        if self.n_step > 1:
            episode = n_step_episode(episode, self.n_step, self.discount)
        self.replay_buffer.extend(episode, required_attrs=REQUIRED_ATTRS)

    # -- sampling ---------------------------------------------------------------------
    def _sample(self, concatenate: bool) -> Optional[SampledBatch]:
        size, batch = self.replay_buffer.sample_batch(
            self.batch_size, concatenate, sample_method="random_unique", sample_attrs=SAMPLE_ATTRS
        )
        if size == 0:
            return None
        return self._make_batch(size, batch)

    _make_batch = staticmethod(make_batch)

    # -- Bellman pieces ---------------------------------------------------------------
    @staticmethod
    def reward_function(
        reward: torch.Tensor,
        discount: Union[float, torch.Tensor],
        next_value: torch.Tensor,
        terminal: torch.Tensor,
        others: Optional[Dict[str, Any]] = None,
    ) -> torch.Tensor:
        """Bellman target ``reward + discount * (1 - terminal) * next_value`` (terminal as 0/1 floats).

        Args:
            reward: Rewards ``[B, 1]``.
            discount: The discount factor, or ``[B, 1]`` discounts for n-step samples.
            next_value: Value of the next states ``[B, 1]``.
            terminal: 1 where the episode terminated, ``[B, 1]``.
            others: The custom attributes of the batch, for overrides that need them.
        """
        return bellman_target(reward, discount, next_value, terminal, others)

    def _discount(self, batch: SampledBatch, device: torch.device) -> Union[float, torch.Tensor]:
        """``discount``, or ``discount ** steps`` per sample for n-step transitions."""
        steps = batch.others.get("steps")
        if steps is None:
            return self.discount
        steps = torch.as_tensor(steps, dtype=torch.get_default_dtype(), device=device).view(-1, 1)
        return self.discount**steps

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        """``criterion(target[B, 1], predicted[B, 1])``."""
        return value_loss(self.criterion, predicted, target, batch.size)

    def _after_value_loss(self, batch: SampledBatch, *_: Any, **__: Any) -> None:
        """Run after a compiled loss step on ``batch`` (prioritized replay pushes priorities here)."""


def _prioritized_buffer(name: str, value: Any) -> PrioritizedBuffer:
    if not isinstance(value, PrioritizedBuffer):
        raise TypeError(f"{name} must be a PrioritizedBuffer, got {type(value).__name__}")
    return value


class PrioritizedReplayMixin(ReplayMixin):
    """Prioritized sampling, importance-weighted losses and absolute-TD-error priorities.

    The criterion must return one loss per sample (shape ``[B, 1]`` or ``[B]``), e.g.
    ``nn.MSELoss(reduction="none")``: each sample's loss is multiplied by its
    importance-sampling weight before averaging.
    """

    replay_buffer = BufferOptions.replay_buffer.but(
        check=optional(_prioritized_buffer),
        doc="A PrioritizedBuffer to use instead of the default one.",
    )

    def _default_buffer(self) -> PrioritizedBuffer:
        return PrioritizedBuffer(self.replay_size, self.replay_device)

    @property
    def criterion(self) -> Optional[Callable]:
        """The per-sample loss; a loss module given with another ``reduction`` is switched to ``"none"``."""
        return self._criterion

    @criterion.setter
    def criterion(self, criterion: Optional[Callable]) -> None:
        # As Machin 0.3.4: a loss module's reduction is switched to "none" (with a warning),
        # and a criterion without a ``reduction`` attribute is refused.
        if criterion is not None:
            if not hasattr(criterion, "reduction"):
                raise RuntimeError(
                    f"Criterion does not have the 'reduction' property: {type(self).__name__} weights "
                    f"each sample's loss by its importance, so it needs a loss module such as "
                    f'nn.MSELoss(reduction="none"); got {criterion!r}'
                )
            if criterion.reduction != "none":
                warn_caller(
                    f"The reduction property of criterion is not 'none' (it is {criterion.reduction!r}); "
                    f"{type(self).__name__} needs one loss per sample and sets it to 'none'."
                )
                criterion.reduction = "none"
        self._criterion = criterion

    def _sample(
        self, concatenate: bool, additional_concat_attrs: Optional[List[str]] = None
    ) -> Optional[SampledBatch]:
        size, batch, index, is_weight = self.replay_buffer.sample_batch(
            self.batch_size,
            concatenate,
            sample_attrs=SAMPLE_ATTRS,
            additional_concat_attrs=additional_concat_attrs,
        )
        if size == 0:
            return None
        weight = torch.as_tensor(is_weight, dtype=torch.get_default_dtype()).view(size, 1)
        return self._make_batch(size, batch, index=index, weight=weight)

    def _per_sample_loss(self, per_sample: torch.Tensor, batch: SampledBatch) -> torch.Tensor:
        """Weight per-sample losses by importance and return their mean."""
        size = batch.size
        if per_sample.dim() == 0 or per_sample.numel() != size:
            raise ValueError(
                f"{type(self).__name__} needs a criterion that returns one loss per sample "
                f"(shape [{size}, 1]); got shape {list(per_sample.shape)}. "
                f'Use e.g. nn.MSELoss(reduction="none") instead of reduction="sum" or "mean".'
            )
        return (per_sample.view(size, 1) * batch.weight.to(per_sample.device)).mean()

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        """Importance-weighted criterion; the sampled transitions get ``|target - predicted|`` as priority."""
        size = batch.size
        target = target.view(size, 1).to(predicted.device)
        loss = self._per_sample_loss(self.criterion(target, predicted.view(size, 1)), batch)
        priority = (predicted.detach().view(size, 1) - target).abs().view(-1)
        if (
            torch.compiler.is_compiling()
        ):  # a compiled loss step: pushed by _after_value_loss once it ran
            batch.priority = priority
        else:
            self._push_priority(priority, batch.index)
        return loss

    def _after_value_loss(self, batch: SampledBatch, *_: Any, **__: Any) -> None:
        if batch.priority is not None:
            self._push_priority(batch.priority, batch.index)
            batch.priority = None

    def _push_priority(self, priority: Union[torch.Tensor, np.ndarray], index: Any) -> None:
        """Give the sampled transitions at ``index`` their new ``priority``, unless one is NaN or infinite.

        Such a priority comes from a loss that is not finite either, whose step
        :meth:`~machin.frame.algorithms.base.TorchFramework._optimize` skips: the update then
        leaves the priorities as they were too (the buffer would refuse them).
        """
        values = priority.cpu().numpy() if isinstance(priority, torch.Tensor) else priority
        if np.isfinite(values).all():
            self.replay_buffer.update_priority(values, index)
