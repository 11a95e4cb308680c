"""C51: categorical distributional DQN (Bellemare, Dabney and Munos, 2017)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

from .distributional import DistributionalMixin, categorical_projection
from .dqn import DQN
from .options import real
from .replay import SampledBatch

__all__ = ["C51"]


class C51(DistributionalMixin, DQN):
    """Categorical DQN: the return of every action is a distribution over fixed atoms.

    The Q network returns ``q_dist[B, action_num, atom_num]``, each ``[b, a, :]`` a
    probability distribution (a softmax over the last dimension), followed by any extra
    outputs. The ``atom_num >= 2`` atoms are spread evenly over
    ``[value_min, value_max]``; ``atom_num`` is the size of the network's last
    dimension. Actions are chosen by the expected value ``sum_k p_k z_k``.

    The target moves every atom of the next state's distribution (the action chosen as
    DQN's ``mode`` says; ``"double"`` by default) to ``r + discount * (1 - terminal) * z``,
    through :meth:`reward_function`, and projects it back onto the atoms
    (:func:`~machin.frame.algorithms.distributional.categorical_projection`). The loss is
    the cross-entropy between that target and the predicted distribution of the stored
    action, averaged over the batch; there is no criterion.

    Args:
        qnet: Distributional Q network.
        qnet_target: Target network of the same structure (ignored in vanilla mode).
        optimizer: Optimizer class.
        value_min: Smallest atom value.
        value_max: Largest atom value.

    The keyword options are :class:`~machin.frame.algorithms.dqn.DQN`'s (``n_step > 1``
    learns from n-step returns of stored episodes).
    """

    _legacy_hooks = DistributionalMixin._legacy_hooks
    _output_shape = "q_dist[batch_size, action_num, atom_num]"
    _min_size = 2

    def __init__(
        self,
        qnet: nn.Module,
        qnet_target: Optional[nn.Module],
        optimizer: Callable,
        value_min: float,
        value_max: float,
        *_: Any,
        **options: Any,
    ):
        real("value_min", value_min)
        real("value_max", value_max)
        if not value_min < value_max:
            raise ValueError(
                f"value_min must be below value_max, got {value_min!r} and {value_max!r}"
            )
        super().__init__(qnet, qnet_target, optimizer, None, *_, **options)
        self.value_min = value_min
        self.value_max = value_max

    # -- distributions ----------------------------------------------------------------
    def _support(self, dist: torch.Tensor) -> torch.Tensor:
        """The atom values ``[atom_num]`` of ``dist``'s last dimension."""
        return torch.linspace(
            self.value_min, self.value_max, dist.shape[-1], device=dist.device, dtype=dist.dtype
        )

    def _expected_value(self, dist: torch.Tensor) -> torch.Tensor:
        return (dist * self._support(dist)).sum(dim=-1)

    # -- update -----------------------------------------------------------------------
    def _step_return(self, batch: SampledBatch) -> torch.Tensor:
        """The return ``[B, 1]`` the atoms are shifted by (the reward; RAINBOW: its n-step value)."""
        return batch.reward

    def _bellman_target(self, batch: SampledBatch) -> torch.Tensor:
        """The target distribution ``[B, atom_num]``: Bellman-shifted atoms projected back onto the support."""
        with torch.no_grad():
            next_dist = self._next_distribution(batch)
            device = next_dist.device
            support = self._support(next_dist)
            shifted = self.reward_function(
                self._step_return(batch).to(device=device, dtype=support.dtype).view(-1, 1),
                self._discount(batch, device),
                support.view(1, -1),
                batch.terminal.to(device),
                batch.others,
            )
            return categorical_projection(
                shifted.expand_as(next_dist), next_dist, self.value_min, self.value_max
            )

    @staticmethod
    def _cross_entropy(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-sample cross-entropy ``[B]`` of the predicted distributions against the targets."""
        return -(target.to(predicted.device) * predicted.clamp_min(1e-8).log()).sum(dim=-1)

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        """The cross-entropy of ``predicted`` against ``target``, averaged over the batch."""
        return self._cross_entropy(predicted, target).mean()
