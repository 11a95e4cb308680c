"""DDPG with prioritized experience replay."""

from __future__ import annotations

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

    update_rate = DDPG.update_rate.but(default=0.005)
