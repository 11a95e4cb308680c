"""RAINBOW: distributional double DQN with n-step returns and prioritized replay."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

import torch

from ..returns import n_step_episode
from ..transition import Transition, TransitionBase
from .base import Driver
from .c51 import C51
from .dqn import DQN
from .dqn_per import DQNPer
from .options import Option, positive_int
from .replay import REQUIRED_ATTRS, SampledBatch

__all__ = ["RAINBOW"]

RAINBOW_ATTRS = REQUIRED_ATTRS + ("value", "steps")


class RAINBOW(C51, DQNPer):
    """Categorical (C51) double DQN with n-step returns and prioritized replay.

    The Q network returns a distribution over ``atom_num`` atoms for every action,
    ``q_dist[B, action_num, atom_num]`` with each ``[b, a, :]`` summing to 1 (a
    softmax over the last dimension); the atoms are spread evenly over
    ``[value_min, value_max]``. Noisy or dueling layers are part of the user's
    network. The distributional pieces (acting by the expected value, the projected
    target, the cross-entropy) are :class:`~machin.frame.algorithms.c51.C51`'s, the
    sampling by priority and the importance weights :class:`~machin.frame.algorithms.dqn_per.DQNPer`'s.

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

    _legacy_hooks = C51._legacy_hooks

    mode = "double"
    n_step = 1
    update_rate = DQN.update_rate.but(default=0.001)
    reward_future_steps = Option(3, positive_int, "n of the n-step return.")

    #: The Trainer stores whole episodes: each step's n-step return needs the steps after it.
    driver = Driver("act_discrete_with_noise", {}, "act_discrete", "episode")

    def _step_return(self, batch: SampledBatch) -> torch.Tensor:
        """The n-step return stored as the custom attribute ``value``."""
        return batch.others["value"]

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        """Importance-weighted cross-entropy; each sample's cross-entropy becomes its new priority."""
        cross_entropy = self._cross_entropy(predicted, target)
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
