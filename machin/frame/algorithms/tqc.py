"""TQC: SAC with distributional critics whose pooled target drops its highest quantiles."""

from __future__ import annotations

from typing import Any, Dict

import torch

from .distributional import quantile_huber_loss, quantile_midpoints
from .options import Option, non_negative, non_negative_int
from .replay import SampledBatch
from .sac_ensemble import EnsembleSAC

__all__ = ["TQC"]


class TQC(EnsembleSAC):
    """Truncated quantile critics (Kuznetsov et al., 2020).

    Each critic is called as ``critic(<state keys>, <action keys>)`` and returns ``M``
    quantiles of the soft return, ``quantiles[B, M]`` (extra outputs after it are
    dropped), at the fractions ``(2m + 1) / 2M``; every critic returns the same ``M``.
    One critic step:

    * the ``N * M`` quantiles of the ``N`` target critics at ``(s', a')``, ``a'`` drawn
      from the actor, are pooled per sample and the ``N * top_quantiles_to_drop_per_net``
      largest are dropped; each kept atom ``z`` gives a target atom
      ``reward + discount * (1 - terminal) * (z - alpha * log_prob(a'|s'))``;
    * every critic regresses its quantiles onto all target atoms with the quantile Huber
      loss (:func:`~machin.frame.algorithms.distributional.quantile_huber_loss`, width
      ``kappa``), averaged over its quantiles, the target atoms and the batch;
    * the targets follow their critics by ``update_rate``.

    The actor minimises ``mean(alpha * log_prob(a|s) - Q(s, a))`` with ``Q`` the mean of
    all quantiles of all critics; alpha is tuned as in SAC. Dropping more quantiles makes
    the target more pessimistic (the paper drops 2 of 25 per critic on most tasks, with 5
    critics).

    Takes the arguments of :class:`~machin.frame.algorithms.sac_ensemble.EnsembleSAC`
    (``actor, critics, critic_targets, optimizer``; no ``criterion``: the loss is the
    quantile Huber loss) and SAC's options, and ``top_quantiles_to_drop_per_net`` and
    ``kappa``. ``reward_function`` receives the kept atoms ``[B, K]`` as ``next_value``.

    Raises:
        ValueError: When a critic returns other than ``[B, M]`` quantiles, the critics
            return different ``M``, or ``top_quantiles_to_drop_per_net`` is not below ``M``.
    """

    top_quantiles_to_drop_per_net = Option(
        2,
        non_negative_int,
        "Quantiles dropped from the pooled target per critic (d); below the number of quantiles.",
    )
    kappa = Option(
        1.0,
        non_negative,
        "Width of the quadratic part of the quantile Huber loss (0: plain quantile regression).",
    )

    def _quantiles(
        self, networks: str, state: Dict[str, Any], action: Dict[str, Any], size: int
    ) -> torch.Tensor:
        """The quantiles ``[B, N, M]`` of every network of the list ``networks``.

        Raises:
            ValueError: When a network does not return ``[B, M]`` quantiles, or the
                networks return different numbers of them.
        """
        outputs = []
        for index in range(len(getattr(self, networks))):
            output, name = self._output_of(networks, index, state, action)
            if not isinstance(output, torch.Tensor) or output.dim() != 2 or output.shape[0] != size:
                shape = (
                    list(output.shape)
                    if isinstance(output, torch.Tensor)
                    else type(output).__name__
                )
                raise ValueError(
                    f"{name} must return quantiles of shape [batch_size, n_quantiles] = "
                    f"[{size}, M], got {shape}"
                )
            if outputs and output.shape[1] != outputs[0].shape[1]:
                raise ValueError(
                    f"{name} returned {output.shape[1]} quantiles and {networks}[0] "
                    f"{outputs[0].shape[1]}: every critic must return the same number"
                )
            outputs.append(output.to(outputs[0].device) if outputs else output)
        return torch.stack(outputs, dim=1)

    def _truncated(self, atoms: torch.Tensor) -> torch.Tensor:
        """The ``N * (M - d)`` smallest of the pooled ``atoms[B, N, M]``, ascending, ``[B, N * (M - d)]``."""
        size, nets, quantiles = atoms.shape
        drop = self.top_quantiles_to_drop_per_net
        if drop >= quantiles:
            raise ValueError(
                f"top_quantiles_to_drop_per_net must be smaller than the critics' number of "
                f"quantiles ({quantiles}), got {drop}"
            )
        pooled = atoms.reshape(size, nets * quantiles).sort(dim=1).values
        return pooled[:, : nets * (quantiles - drop)]

    def _bellman_target(self, batch: SampledBatch, alpha: torch.Tensor) -> torch.Tensor:
        """The target atoms ``[B, N * (M - d)]`` from the truncated pool of target quantiles."""
        with torch.no_grad():
            next_action, next_log_prob = self._sample_action(batch.next_state, batch.size)
            action = self.action_transform_function(next_action, batch.next_state, batch.others)
            atoms = self._quantiles("critic_targets", batch.next_state, action, batch.size)
            return self._soft_bellman(batch, self._truncated(atoms), next_log_prob, alpha)

    def _critic_loss(self, batch: SampledBatch, alpha: torch.Tensor) -> torch.Tensor:
        target = self._bellman_target(batch, alpha)
        quantiles = self._quantiles("critics", batch.state, batch.action, batch.size)
        size, nets, count = quantiles.shape
        tau = quantile_midpoints(count, quantiles.device, quantiles.dtype).repeat(nets)
        # quantile_huber_loss sums over the predicted quantiles: / count averages them per critic
        per_sample = quantile_huber_loss(
            quantiles.reshape(size, nets * count), target.to(quantiles.device), tau, self.kappa
        )
        return per_sample.mean() / count

    def _policy_q(self, state: Dict[str, Any], action: Dict[str, Any], size: int) -> torch.Tensor:
        """The mean of all quantiles of all critics."""
        return self._quantiles("critics", state, action, size).mean(dim=(1, 2)).unsqueeze(1)
