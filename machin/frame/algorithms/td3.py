"""Twin Delayed DDPG: two critics, target policy smoothing and delayed policy updates."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import torch
from torch import nn

from .base import split_output
from .critics import CriticSet
from .ddpg import DDPG
from .options import Option, non_negative, positive_int
from .replay import SampledBatch
from .utils import hard_update, safe_call

__all__ = ["TD3"]


class TD3(DDPG):
    """TD3 (Fujimoto et al., 2018): DDPG with three changes against value overestimation.

    1. Two critics are trained on the same target, which takes the smaller of the two
       target critics' values.
    2. Target policy smoothing: :meth:`policy_noise_function` adds clipped Gaussian
       noise to the target actor's actions before they are evaluated.
    3. The actor and all targets are updated only on every ``policy_update_delay``-th
       call of :meth:`update`; the critics learn on every call.

    Takes the arguments of :class:`~machin.frame.algorithms.ddpg.DDPG` (with
    ``update_rate=0.005``); ``optimizer`` and ``critic_learning_rate`` also serve the
    second critic, and the learning-rate schedulers take three entries (actor, critic,
    critic2). Its own options are ``policy_noise``, ``noise_clip`` and
    ``policy_update_delay``. In addition:

    Args:
        critic2: The second critic, with the same interface as ``critic``.
        critic2_target: Its target network (hard-copied from ``critic2``).

    Raises:
        ValueError: On a negative noise option or a non-positive delay.
    """

    _is_top = DDPG._is_top + ["critic2", "critic2_target"]
    _is_restorable = DDPG._is_restorable + ["critic2_target"]

    update_rate = DDPG.update_rate.but(default=0.005)
    policy_noise = Option(0.2, non_negative, "Standard deviation of the target smoothing noise.")
    noise_clip = Option(
        0.5, non_negative, "The smoothing noise is clipped to ``[-noise_clip, noise_clip]``."
    )
    policy_update_delay = Option(
        2, positive_int, "Update the actor and the targets once per this many updates."
    )

    def __init__(
        self,
        actor: nn.Module,
        actor_target: nn.Module,
        critic: nn.Module,
        critic_target: nn.Module,
        critic2: nn.Module,
        critic2_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        self._check_same_structure(critic2_target=(critic2, critic2_target))
        super().__init__(
            actor, actor_target, critic, critic_target, optimizer, criterion, *_, **options
        )
        self.critic2, self.critic2_target = critic2, critic2_target
        hard_update(self.critic2_target, self.critic2)
        self.critic2_optim = self._make_optimizer(
            optimizer, self.critic2, self.critic_learning_rate
        )

    def _critics(self) -> List[CriticSet]:
        return super()._critics() + [
            CriticSet("critic2", self.critic2, self.critic2_target, self.critic2_optim)
        ]

    @staticmethod
    def policy_noise_function(
        actions: torch.Tensor, policy_noise: float = 0.2, noise_clip: float = 0.5, *_: Any
    ) -> torch.Tensor:
        """Target policy smoothing: add ``N(0, policy_noise)`` noise clipped to ``+-noise_clip``.

        Override it (as a static method) to change the smoothing. It is called with the
        target actor's raw actions and the ``policy_noise`` and ``noise_clip`` options;
        the result is then clamped to ``action_range`` when that option is set.
        """
        noise = (torch.randn_like(actions) * policy_noise).clamp(-noise_clip, noise_clip)
        return actions + noise

    def _criticize2(
        self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False, **__: Any
    ) -> torch.Tensor:
        """The second critic's value (its first output) of ``action`` in ``state`` (Machin 0.3.4's
        helper; the update does not call it, see :meth:`DDPG._criticize`).

        Args:
            state: State dict for the critic.
            action: Action dict for the critic.
            use_target: Use the second target critic.
        """
        return split_output(
            safe_call(self.critic2_target if use_target else self.critic2, state, action)
        )[0]

    _legacy_hooks = {
        **DDPG._legacy_hooks,
        "_criticize2": "_critic_value(critic, state, action, size, name)",
    }

    def _target_action(self, batch: SampledBatch) -> torch.Tensor:
        smoothed = self.policy_noise_function(
            super()._target_action(batch), self.policy_noise, self.noise_clip
        )
        return self._clamp_action(smoothed)

    def _next_value(self, batch: SampledBatch, next_action: Dict[str, Any]) -> torch.Tensor:
        value = super()._next_value(batch, next_action)
        value2 = self._critic_value(
            self.critic2_target, batch.next_state, next_action, batch.size, "critic2_target"
        )
        return torch.min(value, value2.to(value.device))

    def _policy_step_due(self) -> bool:
        return self.updates_done % self.policy_update_delay == 0
