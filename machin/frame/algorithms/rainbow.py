"""RAINBOW: distributional double DQN with n-step returns and prioritized replay."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Union

import torch
from torch import nn

from ..returns import n_step_episode
from ..transition import Transition, TransitionBase
from .base import Driver
from .dqn import DQN
from .dqn_per import DQNPer
from .options import Option, positive_int
from .replay import REQUIRED_ATTRS, SampledBatch
from .utils import safe_call

__all__ = ["RAINBOW"]

RAINBOW_ATTRS = REQUIRED_ATTRS + ("value", "steps")


class RAINBOW(DQNPer):
    """Categorical (C51) double DQN with n-step returns and prioritized replay.

    The Q network returns a distribution over ``atom_num`` atoms for every action,
    ``q_dist[B, action_num, atom_num]`` with each ``[b, a, :]`` summing to 1 (a
    softmax over the last dimension); the atoms are spread evenly over
    ``[value_min, value_max]``. Noisy or dueling layers are part of the user's
    network.

    :meth:`store_episode` computes the n-step return of every step
    (``reward_future_steps`` = n) and points the step at the state n steps later
    (fewer at the end of an episode), so the target is
    ``value + discount**steps * (1 - terminal) * z`` projected onto the atoms.
    :meth:`store_transition` is for users who compute this themselves: the
    transition must carry the custom attribute ``value`` (the discounted reward sum)
    and its ``next_state`` must be the state ``steps`` steps later (``steps``
    defaults to ``reward_future_steps``).

    Args:
        qnet: Distributional Q network.
        qnet_target: Target network of the same structure.
        optimizer: Optimizer class.
        value_min: Smallest atom value.
        value_max: Largest atom value.

    The keyword options are :class:`~machin.frame.algorithms.dqn.DQN`'s, without
    ``criterion`` (the loss is the cross-entropy between distributions), ``mode``
    (always double) and ``n_step`` (``reward_future_steps`` instead).
    """

    # The distributional update reads the Q network's distributions directly.
    _legacy_hooks = {
        "_criticize": "_predicted_value(batch) and _bellman_target(batch)",
        "_act_discrete": "_bellman_target(batch)",
    }

    _criterion_needed = False
    mode = "double"
    n_step = 1
    update_rate = DQN.update_rate.but(default=0.001)
    reward_future_steps = Option(3, positive_int, "n of the n-step return.")

    #: The Trainer stores whole episodes: each step's n-step return needs the steps after it.
    driver = Driver("act_discrete_with_noise", {}, "act_discrete", "episode")

    def __init__(
        self,
        qnet: nn.Module,
        qnet_target: nn.Module,
        optimizer: Callable,
        value_min: float,
        value_max: float,
        *_: Any,
        **options: Any,
    ):
        if not value_min < value_max:
            raise ValueError(
                f"value_min must be below value_max, got {value_min!r} and {value_max!r}"
            )
        super().__init__(qnet, qnet_target, optimizer, None, *_, **options)
        self.value_min = value_min
        self.value_max = value_max

    # -- distributions ----------------------------------------------------------------
    def _support(self, dist: torch.Tensor) -> torch.Tensor:
        return torch.linspace(
            self.value_min, self.value_max, dist.shape[-1], device=dist.device, dtype=dist.dtype
        )

    def _check_dist(self, dist: torch.Tensor) -> None:
        if dist.dim() != 3:
            raise ValueError(
                f"RAINBOW needs a Q network returning q_dist[batch_size, action_num, atom_num], "
                f"got shape {list(dist.shape)}"
            )

    def _greedy_action(self, q_output: torch.Tensor) -> torch.Tensor:
        self._check_dist(q_output)
        expected = (q_output * self._support(q_output)).sum(dim=-1)
        return expected.argmax(dim=1, keepdim=True)

    def _bellman_target(self, batch: SampledBatch) -> torch.Tensor:
        """The target distribution ``[B, atom_num]``: Bellman-shifted atoms projected back onto the support."""
        with torch.no_grad():
            target_dist = safe_call(self.qnet_target, batch.next_state)
            target_dist = target_dist[0] if isinstance(target_dist, tuple) else target_dist
            self._check_dist(target_dist)
            online_dist = safe_call(self.qnet, batch.next_state)
            online_dist = online_dist[0] if isinstance(online_dist, tuple) else online_dist
            next_action = self._greedy_action(online_dist).to(target_dist.device)
            atoms = target_dist.shape[-1]
            next_dist = target_dist.gather(
                1, next_action.view(-1, 1, 1).expand(-1, 1, atoms)
            ).squeeze(1)

            device = next_dist.device
            support = self._support(next_dist)
            shifted = self.reward_function(
                batch.others["value"].to(device=device, dtype=support.dtype).view(-1, 1),
                self._discount(batch, device),
                support.view(1, -1),
                batch.terminal.to(device),
                batch.others,
            ).clamp(self.value_min, self.value_max)
            return self._project(shifted, next_dist, support)

    def _project(
        self, shifted: torch.Tensor, probs: torch.Tensor, support: torch.Tensor
    ) -> torch.Tensor:
        """Spread each shifted atom's probability over its two neighbouring support atoms."""
        atoms = support.shape[0]
        delta = (self.value_max - self.value_min) / (atoms - 1)
        position = (shifted - self.value_min) / delta
        lower = position.floor().long().clamp(0, atoms - 1)
        upper = position.ceil().long().clamp(0, atoms - 1)
        upper_weight = position - lower.to(position.dtype)
        lower_weight = 1.0 - upper_weight
        projected = torch.zeros_like(probs)
        projected.scatter_add_(1, lower, probs * lower_weight)
        projected.scatter_add_(1, upper, probs * upper_weight)
        # When the position is an exact atom, lower == upper and the weights sum to 1 there.
        return projected

    def _predicted_value(self, batch: SampledBatch) -> torch.Tensor:
        """Distribution ``[B, atom_num]`` of the taken actions (with gradient)."""
        dist = safe_call(self.qnet, batch.state)
        dist = dist[0] if isinstance(dist, tuple) else dist
        self._check_dist(dist)
        action = self.action_get_function(batch.action).to(device=dist.device, dtype=torch.long)
        return dist.gather(1, action.view(-1, 1, 1).expand(-1, 1, dist.shape[-1])).squeeze(1)

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        cross_entropy = -(target.to(predicted.device) * predicted.clamp_min(1e-8).log()).sum(dim=-1)
        loss = self._per_sample_loss(cross_entropy, batch)
        if (
            torch.compiler.is_compiling()
        ):  # pushed after the compiled step (see PrioritizedReplayMixin)
            batch.priority = cross_entropy.detach()
        else:
            self._push_priority(cross_entropy.detach(), batch.index)
        return loss

    def _sample(self, concatenate: bool, additional_concat_attrs=None) -> Optional[SampledBatch]:
        return super()._sample(concatenate, ["value", "steps"])

    # -- storing ----------------------------------------------------------------------
    def _with_steps(
        self, transition: Union[TransitionBase, Dict[str, Any]]
    ) -> Union[TransitionBase, Dict]:
        if isinstance(transition, dict):
            return (
                transition
                if "steps" in transition
                else {**transition, "steps": self.reward_future_steps}
            )
        if "steps" in transition or not isinstance(transition, Transition):
            return transition
        return Transition(**dict(transition.items()), steps=self.reward_future_steps)

    def store_transition(self, transition: Union[Transition, Dict[str, Any]]) -> None:
        """Store one step that already carries its n-step return as the custom attribute ``value``.

        Args:
            transition: A :class:`~machin.frame.transition.Transition` or dict with the usual attributes and ``value``.
        """
        self.replay_buffer.append(self._with_steps(transition), required_attrs=RAINBOW_ATTRS)

    def store_episode(self, episode: List[Union[Transition, Dict[str, Any]]]) -> None:
        """Store an episode, computing each step's n-step return and n-step-ahead next state."""
        self.replay_buffer.extend(
            n_step_episode(episode, self.reward_future_steps, self.discount, "value"),
            required_attrs=RAINBOW_ATTRS,
        )
