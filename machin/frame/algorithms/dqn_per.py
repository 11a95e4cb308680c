"""Double DQN with prioritized experience replay."""

from __future__ import annotations

from .dqn import DQN
from .replay import PrioritizedReplayMixin

__all__ = ["DQNPer"]


class DQNPer(PrioritizedReplayMixin, DQN):
    """DQN that samples transitions by priority (absolute TD error) and weights losses by importance.

    Takes the arguments of :class:`~machin.frame.algorithms.dqn.DQN`; its default
    replay buffer is a :class:`~machin.frame.buffers.PrioritizedBuffer`. The
    criterion must be a loss module with a ``reduction`` attribute (e.g.
    ``nn.MSELoss()``): each sample's loss is multiplied by its importance-sampling
    weight before averaging, so a ``reduction`` other than ``"none"`` is switched to
    ``"none"`` with a warning, and a criterion without one raises ``RuntimeError``
    (both as in Machin 0.3.4).

    ``mode`` defaults to ``"double"``; another mode is honoured, with a warning that
    Machin 0.3.4's DQNPer ignored ``mode`` and always trained in double mode.
    """

    _mode_034 = "double"
