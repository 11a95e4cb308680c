"""Proximal policy optimization: A2C with a clipped surrogate policy loss."""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Tuple, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from .a2c import A2C

__all__ = ["PPO"]


class PPO(A2C):
    """PPO with the clipped surrogate objective.

    Everything but the policy loss is :class:`~machin.frame.algorithms.a2c.A2C`'s
    (same networks, storage, GAE and :meth:`update` loop, see there for the other
    arguments). At the start of :meth:`update` the log-probability of every stored
    action under the current policy is recorded once; each actor step then
    minimises ``-mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))`` with
    ``ratio = exp(log_prob - old_log_prob)``, so the ``actor_update_times`` steps
    of one update cannot push the policy far from where it started.

    Args:
        surrogate_loss_clip: The clipping range ``eps`` (positive).

    Raises:
        ValueError: When ``surrogate_loss_clip`` is not positive, or an A2C option is invalid.
    """

    _needs_old_log_prob = True

    @ignores_extra_args
    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *,
        lr_scheduler: Optional[Callable] = None,
        lr_scheduler_args: Tuple[Tuple, ...] = (),
        lr_scheduler_kwargs: Tuple[Dict, ...] = (),
        batch_size: int = 100,
        actor_update_times: int = 5,
        critic_update_times: int = 10,
        actor_learning_rate: float = 0.001,
        critic_learning_rate: float = 0.001,
        entropy_weight: Optional[float] = None,
        value_weight: float = 0.5,
        surrogate_loss_clip: float = 0.2,
        gradient_max: float = math.inf,
        gae_lambda: float = 1.0,
        discount: float = 0.99,
        normalize_advantage: bool = True,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        replay_buffer: Optional[Buffer] = None,
        visualize: bool = False,
        visualize_dir: str = "",
    ):
        super().__init__(
            actor, critic, optimizer, criterion, lr_scheduler=lr_scheduler,
            lr_scheduler_args=lr_scheduler_args, lr_scheduler_kwargs=lr_scheduler_kwargs,
            batch_size=batch_size, actor_update_times=actor_update_times,
            critic_update_times=critic_update_times, actor_learning_rate=actor_learning_rate,
            critic_learning_rate=critic_learning_rate, entropy_weight=entropy_weight,
            value_weight=value_weight, gradient_max=gradient_max, gae_lambda=gae_lambda,
            discount=discount, normalize_advantage=normalize_advantage, replay_size=replay_size,
            replay_device=replay_device, replay_buffer=replay_buffer, visualize=visualize,
            visualize_dir=visualize_dir,
        )
        self._check_positive(surrogate_loss_clip=surrogate_loss_clip)
        self.surrogate_loss_clip = surrogate_loss_clip

    def _policy_loss(self, log_prob: torch.Tensor, old_log_prob: torch.Tensor,
                     advantage: torch.Tensor) -> torch.Tensor:
        """Minus the clipped surrogate: a ratio clipped in the advantage's favour has no gradient."""
        advantage = advantage.to(log_prob.device)
        ratio = torch.exp(log_prob - old_log_prob.to(log_prob.device))
        clipped = ratio.clamp(1.0 - self.surrogate_loss_clip, 1.0 + self.surrogate_loss_clip)
        return -torch.min(ratio * advantage, clipped * advantage).mean()
