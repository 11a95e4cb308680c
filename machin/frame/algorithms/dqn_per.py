"""Double DQN with prioritized experience replay."""

from __future__ import annotations

from .dqn import DQN
from .replay import PrioritizedReplayMixin

__all__ = ["DQNPer"]


class DQNPer(PrioritizedReplayMixin, DQN):
    """DQN that samples transitions by priority (absolute TD error) and weights losses by importance.

    Takes the arguments of :class:`~machin.frame.algorithms.dqn.DQN`; its default
    replay buffer is a :class:`~machin.frame.buffers.PrioritizedBuffer`. The
    criterion must return one loss per sample (shape ``[B, 1]`` or ``[B]``), e.g.
    ``nn.MSELoss(reduction="none")``, because each sample's loss is multiplied by
    its importance-sampling weight before averaging; a reducing criterion is refused
    with a ``ValueError`` on the first update.
    """
