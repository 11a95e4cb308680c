"""Twin Delayed DDPG: two critics, target policy smoothing and delayed policy updates."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from .ddpg import DDPG, CriticSet
from .dqn import SampledBatch
from .utils import hard_update

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
    critic2). In addition:

    Args:
        critic2: The second critic, with the same interface as ``critic``.
        critic2_target: Its target network (hard-copied from ``critic2``).
        policy_noise: Standard deviation of the target smoothing noise.
        noise_clip: The smoothing noise is clipped to ``[-noise_clip, noise_clip]``.
        policy_update_delay: Update the actor and the targets once per this many updates.

    Raises:
        ValueError: On a negative noise option or a non-positive delay.
    """

    _is_top = DDPG._is_top + ["critic2", "critic2_target"]
    _is_restorable = DDPG._is_restorable + ["critic2_target"]

    @ignores_extra_args
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
        *,
        lr_scheduler: Optional[Callable] = None,
        lr_scheduler_args: Optional[Sequence[Sequence]] = None,
        lr_scheduler_kwargs: Optional[Sequence[Dict[str, Any]]] = None,
        batch_size: int = 100,
        update_rate: float = 0.005,
        actor_learning_rate: float = 0.0005,
        critic_learning_rate: float = 0.001,
        discount: float = 0.99,
        gradient_max: float = math.inf,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        policy_update_delay: int = 2,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        replay_buffer: Optional[Buffer] = None,
        visualize: bool = False,
        visualize_dir: str = "",
        n_step: int = 1,
    ):
        if not policy_noise >= 0 or not noise_clip >= 0:
            raise ValueError(
                f"policy_noise and noise_clip must be non-negative, got {policy_noise!r} and {noise_clip!r}"
            )
        if not isinstance(policy_update_delay, int) or isinstance(policy_update_delay, bool) \
                or policy_update_delay < 1:
            raise ValueError(f"policy_update_delay must be a positive integer, got {policy_update_delay!r}")
        super().__init__(
            actor, actor_target, critic, critic_target, optimizer, criterion,
            lr_scheduler=None, batch_size=batch_size, update_rate=update_rate,
            actor_learning_rate=actor_learning_rate, critic_learning_rate=critic_learning_rate,
            discount=discount, gradient_max=gradient_max, replay_size=replay_size,
            replay_device=replay_device, replay_buffer=replay_buffer, visualize=visualize,
            visualize_dir=visualize_dir, n_step=n_step,
        )
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self.policy_update_delay = policy_update_delay
        self._update_count = 0
        self._check_same_structure(critic2_target=(critic2, critic2_target))
        self.critic2, self.critic2_target = critic2, critic2_target
        hard_update(self.critic2_target, self.critic2)
        self.critic2_optim = self._make_optimizer(optimizer, self.critic2, critic_learning_rate)
        self._init_lr_schedulers(lr_scheduler, lr_scheduler_args, lr_scheduler_kwargs,
                                 [self.actor_optim, self.critic_optim, self.critic2_optim])

    def _critics(self) -> List[CriticSet]:
        return super()._critics() + [CriticSet("critic2", self.critic2, self.critic2_target, self.critic2_optim)]

    @staticmethod
    def policy_noise_function(actions: torch.Tensor, policy_noise: float = 0.2,
                              noise_clip: float = 0.5, *_: Any) -> torch.Tensor:
        """Target policy smoothing: add ``N(0, policy_noise)`` noise clipped to ``+-noise_clip``.

        Override it (as a static method) to change the smoothing, e.g. to also clamp
        the result to the action bounds. It is called with the target actor's raw
        actions and the ``policy_noise`` and ``noise_clip`` options.
        """
        noise = (torch.randn_like(actions) * policy_noise).clamp(-noise_clip, noise_clip)
        return actions + noise

    def _target_action(self, batch: SampledBatch) -> torch.Tensor:
        return self.policy_noise_function(super()._target_action(batch), self.policy_noise, self.noise_clip)

    def _target_value(self, batch: SampledBatch, next_action: Dict[str, Any]) -> torch.Tensor:
        value = super()._target_value(batch, next_action)
        value2 = self._q(self.critic2_target, batch.next_state, next_action, batch.size, "critic2_target")
        return torch.min(value, value2.to(value.device))

    def _should_update_policy(self) -> bool:
        self._update_count += 1
        return self._update_count % self.policy_update_delay == 0
