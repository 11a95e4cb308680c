"""Hysteretic DDPG: different learning rates for rising and falling value estimates."""

from __future__ import annotations

import torch

from .ddpg import DDPG
from .options import Option, non_negative
from .replay import SampledBatch

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
    ``update_rate=0.005``), plus the options ``q_increase_rate`` and ``q_decrease_rate``.

    Raises:
        ValueError: When a rate is negative.
    """

    update_rate = DDPG.update_rate.but(default=0.005)
    q_increase_rate = Option(1.0, non_negative, "Scale of positive TD errors (the estimate rises).")
    q_decrease_rate = Option(1.0, non_negative, "Scale of negative TD errors (the estimate falls).")

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        current = predicted.detach()
        delta = target.view_as(current).to(current.device) - current
        rate = torch.where(delta > 0, self.q_increase_rate, self.q_decrease_rate).to(delta.dtype)
        return super()._value_loss(predicted, current + rate * delta, batch)
