"""QR-DQN: distributional DQN by quantile regression (Dabney, Rowland, Bellemare and Munos, 2018)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import torch
from torch import nn

from .distributional import DistributionalMixin, quantile_huber_loss, quantile_midpoints
from .dqn import DQN
from .options import Option, non_negative
from .replay import SampledBatch

__all__ = ["QRDQN", "Quantiles"]


class Quantiles(NamedTuple):
    """The predicted quantile ``values[B, N]`` of the stored actions and their fractions
    ``taus``, ``[B, N]`` or ``[1, N]`` (shared by every sample)."""

    values: torch.Tensor
    taus: torch.Tensor


class QRDQN(DistributionalMixin, DQN):
    """Quantile regression DQN: the network returns quantiles of each action's return.

    The Q network returns ``quantiles[B, action_num, N]`` (followed by any extra
    outputs): the values of the return at the fixed fractions
    ``tau_i = (2i + 1) / 2N``, ``i = 0 .. N-1``, where ``N`` is the size of the
    network's last dimension (200 in the paper; a few dozen are plenty for small
    tasks). Nothing keeps them sorted; actions are chosen by their mean.

    The target takes the next state's quantiles (the action chosen as DQN's ``mode``
    says, ``"double"`` by default) through :meth:`reward_function`,
    ``r + discount * (1 - terminal) * theta_j``, as ``N`` samples of the return; the loss
    is the quantile Huber loss of the stored action's quantiles against them
    (:func:`~machin.frame.algorithms.distributional.quantile_huber_loss`, width
    ``kappa``), averaged over the batch. There is no criterion.

    Args:
        qnet: Quantile network.
        qnet_target: Target network of the same structure (ignored in vanilla mode).
        optimizer: Optimizer class.

    The keyword options are :class:`~machin.frame.algorithms.dqn.DQN`'s and ``kappa``.
    """

    _legacy_hooks = DistributionalMixin._legacy_hooks
    _output_shape = "quantiles[batch_size, action_num, quantile_num]"

    kappa = Option(
        1.0,
        non_negative,
        "Width of the quadratic part of the quantile Huber loss (0: plain quantile regression).",
    )

    def __init__(
        self,
        qnet: nn.Module,
        qnet_target: Optional[nn.Module],
        optimizer: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(qnet, qnet_target, optimizer, None, *_, **options)

    def _fractions(self, output: torch.Tensor) -> torch.Tensor:
        return quantile_midpoints(output.shape[-1], output.device, output.dtype).view(1, -1)

    def _expected_value(self, dist: torch.Tensor) -> torch.Tensor:
        return dist.mean(dim=-1)

    # -- update -----------------------------------------------------------------------
    def _bellman_target(self, batch: SampledBatch) -> torch.Tensor:
        """Samples ``[B, N']`` of the target return: ``r + discount * (1 - terminal) * theta``."""
        with torch.no_grad():
            next_quantiles = self._next_distribution(batch)
            device = next_quantiles.device
            return self.reward_function(
                batch.reward.to(device=device, dtype=next_quantiles.dtype),
                self._discount(batch, device),
                next_quantiles,
                batch.terminal.to(device),
                batch.others,
            )

    def _predicted_value(self, batch: SampledBatch) -> Quantiles:
        """The online network's quantiles ``[B, N]`` of the stored actions (with gradient), with their fractions."""
        quantiles, taus, _ = self._network_output(self.qnet, batch.state, "online")
        values = self._of_actions(quantiles, self._taken_actions(batch, quantiles.device))
        return Quantiles(values, taus)

    def _value_loss(
        self, predicted: Quantiles, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        """The quantile Huber loss of ``predicted`` against the target samples, averaged over the batch."""
        target = target.to(predicted.values.device)
        return quantile_huber_loss(predicted.values, target, predicted.taus, self.kappa).mean()
