"""Proximal policy optimization: A2C with a clipped surrogate policy loss."""

from __future__ import annotations

import torch

from .a2c import A2C
from .options import Option, non_negative, positive

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

    Raises:
        ValueError: When ``surrogate_loss_clip`` is not positive, or an A2C option is invalid.
    """

    _needs_old_log_prob = True

    lr_scheduler_args = A2C.lr_scheduler_args.but(default=())
    lr_scheduler_kwargs = A2C.lr_scheduler_kwargs.but(default=())
    surrogate_loss_clip = Option(
        0.2,
        positive,
        "The clipping range ``eps`` of the surrogate objective (or a "
        "schedule, e.g. ``LinearSchedule(0.2, 0.0)``).",
        schedulable=True,
        schedule_check=non_negative,
    )

    def _policy_loss(
        self, log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantage: torch.Tensor
    ) -> torch.Tensor:
        """Minus the clipped surrogate: a ratio clipped in the advantage's favour has no gradient."""
        advantage = advantage.to(log_prob.device)
        ratio = torch.exp(log_prob - old_log_prob.to(log_prob.device))
        clipped = ratio.clamp(1.0 - self.surrogate_loss_clip, 1.0 + self.surrogate_loss_clip)
        return -torch.min(ratio * advantage, clipped * advantage).mean()
