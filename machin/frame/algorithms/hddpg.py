"""Hysteretic DDPG: different learning rates for rising and falling value estimates."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from .ddpg import DDPG
from .dqn import SampledBatch

__all__ = ["HDDPG"]


class HDDPG(DDPG):
    """DDPG whose critic learns at different rates from positive and negative TD errors.

    With ``delta = target - Q(s, a)``, the critic regresses onto
    ``Q(s, a) + rate * delta`` (held constant), where ``rate`` is ``q_increase_rate``
    when ``delta > 0`` and ``q_decrease_rate`` otherwise. With a squared-error
    criterion this scales the gradient of each sample by its rate. A smaller
    ``q_decrease_rate`` makes the critic optimistic, which helps when other agents or a
    noisy environment make good actions look bad now and then. With both rates 1 it is
    DDPG.

    Takes the arguments of :class:`~machin.frame.algorithms.ddpg.DDPG` (with
    ``update_rate=0.005``), plus:

    Args:
        q_increase_rate: Scale of positive TD errors (the estimate rises).
        q_decrease_rate: Scale of negative TD errors (the estimate falls).

    Raises:
        ValueError: When a rate is negative.
    """

    @ignores_extra_args
    def __init__(
        self,
        actor: nn.Module,
        actor_target: nn.Module,
        critic: nn.Module,
        critic_target: nn.Module,
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
        q_increase_rate: float = 1.0,
        q_decrease_rate: float = 1.0,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        replay_buffer: Optional[Buffer] = None,
        visualize: bool = False,
        visualize_dir: str = "",
        n_step: int = 1,
    ):
        for name, rate in (("q_increase_rate", q_increase_rate), ("q_decrease_rate", q_decrease_rate)):
            if not rate >= 0:
                raise ValueError(f"{name} must be non-negative, got {rate!r}")
        super().__init__(
            actor, actor_target, critic, critic_target, optimizer, criterion,
            lr_scheduler=lr_scheduler, lr_scheduler_args=lr_scheduler_args,
            lr_scheduler_kwargs=lr_scheduler_kwargs, batch_size=batch_size, update_rate=update_rate,
            actor_learning_rate=actor_learning_rate, critic_learning_rate=critic_learning_rate,
            discount=discount, gradient_max=gradient_max, replay_size=replay_size,
            replay_device=replay_device, replay_buffer=replay_buffer, visualize=visualize,
            visualize_dir=visualize_dir, n_step=n_step,
        )
        self.q_increase_rate = q_increase_rate
        self.q_decrease_rate = q_decrease_rate

    def _value_loss(self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch) -> torch.Tensor:
        current = predicted.detach()
        delta = target.view_as(current).to(current.device) - current
        rate = torch.where(delta > 0, self.q_increase_rate, self.q_decrease_rate).to(delta.dtype)
        return super()._value_loss(predicted, current + rate * delta, batch)
