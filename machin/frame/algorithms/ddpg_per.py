"""DDPG with prioritized experience replay."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer, PrioritizedBuffer
from .ddpg import DDPG
from .replay import PrioritizedReplayMixin

__all__ = ["DDPGPer"]


class DDPGPer(PrioritizedReplayMixin, DDPG):
    """DDPG that samples transitions by priority and weights the critic loss by importance.

    Takes the arguments of :class:`~machin.frame.algorithms.ddpg.DDPG` (with
    ``update_rate=0.005``); the default replay buffer is a
    :class:`~machin.frame.buffers.PrioritizedBuffer`, and a custom ``replay_buffer`` must
    be one too. After each critic loss the priorities of the sampled transitions are
    set to their ``|target - Q|``.

    The ``criterion`` must be a loss module with a ``reduction`` attribute (e.g.
    ``nn.MSELoss()``): every sample's loss is multiplied by its importance-sampling
    weight before averaging, so a ``reduction`` other than ``"none"`` is switched to
    ``"none"`` with a warning, and a criterion without one raises ``RuntimeError``
    (both as in Machin 0.3.4). The actor loss is not weighted.

    Raises:
        TypeError: When ``replay_buffer`` is not a ``PrioritizedBuffer``.
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
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        replay_buffer: Optional[Buffer] = None,
        visualize: bool = False,
        visualize_dir: str = "",
        n_step: int = 1,
    ):
        if replay_buffer is not None and not isinstance(replay_buffer, PrioritizedBuffer):
            raise TypeError(
                f"replay_buffer of DDPGPer must be a PrioritizedBuffer, got {type(replay_buffer).__name__}"
            )
        super().__init__(
            actor, actor_target, critic, critic_target, optimizer, criterion,
            lr_scheduler=lr_scheduler, lr_scheduler_args=lr_scheduler_args,
            lr_scheduler_kwargs=lr_scheduler_kwargs, batch_size=batch_size, update_rate=update_rate,
            actor_learning_rate=actor_learning_rate, critic_learning_rate=critic_learning_rate,
            discount=discount, gradient_max=gradient_max, replay_size=replay_size,
            replay_device=replay_device, replay_buffer=replay_buffer, visualize=visualize,
            visualize_dir=visualize_dir, n_step=n_step,
        )
