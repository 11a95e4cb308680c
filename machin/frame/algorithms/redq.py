"""REDQ and DroQ: SAC with an ensemble of critics and many critic steps per environment step."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

import torch
from torch import nn

from ...utils.compat import warn_caller
from .base import _mode_sensitive
from .options import Option, positive_int
from .replay import SampledBatch
from .sac_ensemble import EnsembleSAC

__all__ = ["REDQ", "DroQ"]


class REDQ(EnsembleSAC):
    """Randomized ensembled double Q-learning (Chen et al., 2021): SAC with ``N`` critics,
    a target that takes the minimum over a random subset of ``M`` of them, and a high
    update-to-data ratio.

    Each critic is called as ``critic(<state keys>, <action keys>)`` and returns its value
    ``[B, 1]`` (or ``[B]``; extra outputs after it are dropped). One critic step, on its
    own batch:

    * ``M = subset_size`` target critics are drawn at random (torch's generator), and every
      critic regresses, with ``criterion(target, Q_i(s, a))``, on
      ``reward + discount * (1 - terminal) * (min_{j in subset} Q'_j(s', a') - alpha * log_prob(a'|s'))``,
      ``a'`` drawn from the actor for the next state; only the ``M`` drawn targets are evaluated;
    * the targets follow their critics by ``update_rate`` (soft update).

    :meth:`update` takes ``update_times`` such steps (``G``, 20 by default); after every
    ``policy_update_delay``-th one (20 by default: once per call) the actor minimises
    ``mean(alpha * log_prob(a|s) - mean_i Q_i(s, a))``, the mean over **all** critics, and
    alpha is tuned as in SAC. Call ``update()`` once per environment step.

    Takes the arguments of :class:`~machin.frame.algorithms.sac_ensemble.EnsembleSAC`
    (``actor, critics, critic_targets, optimizer``) and SAC's options, and in addition:

    Args:
        criterion: Value loss of each critic, ``criterion(target[B, 1], predicted[B, 1])``.

    Raises:
        ValueError: When ``subset_size`` exceeds the number of critics.
    """

    update_times = EnsembleSAC.update_times.but(default=20)
    policy_update_delay = EnsembleSAC.policy_update_delay.but(default=20)
    subset_size = Option(
        2,
        positive_int,
        "M: the number of target critics drawn for each target, whose minimum it takes "
        "(at most the number of critics).",
    )

    def __init__(
        self,
        actor: nn.Module,
        critics: Sequence[nn.Module],
        critic_targets: Sequence[nn.Module],
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(actor, critics, critic_targets, optimizer, *_, **options)
        self._check_criterion(criterion)
        self.criterion = criterion
        self._check_subset_size()

    def _check_subset_size(self) -> None:
        count = len(self.critic_targets)
        if self.subset_size > count:
            raise ValueError(
                f"subset_size must be at most the number of critics ({count}), got {self.subset_size}"
            )

    def _target_subset(self) -> List[int]:
        """``subset_size`` distinct indices of target critics, drawn at random."""
        self._check_subset_size()
        return torch.randperm(len(self.critic_targets))[: self.subset_size].tolist()

    def _bellman_target(self, batch: SampledBatch, alpha: torch.Tensor) -> torch.Tensor:
        """The soft target ``[B, 1]`` with the minimum over a random subset of the target critics."""
        with torch.no_grad():
            next_action, next_log_prob = self._sample_action(batch.next_state, batch.size)
            action = self.action_transform_function(next_action, batch.next_state, batch.others)
            values = self._values(
                "critic_targets", batch.next_state, action, batch.size, self._target_subset()
            )
            next_q = values.min(dim=1, keepdim=True).values
            return self._soft_bellman(batch, next_q, next_log_prob, alpha)

    def _critic_loss(self, batch: SampledBatch, alpha: torch.Tensor) -> torch.Tensor:
        target = self._bellman_target(batch, alpha)
        values = self._values("critics", batch.state, batch.action, batch.size)
        return sum(
            self._value_loss(values[:, i : i + 1], target, batch) for i in range(values.shape[1])
        )

    def _policy_q(self, state: Dict[str, Any], action: Dict[str, Any], size: int) -> torch.Tensor:
        """The mean value over all critics."""
        return self._values("critics", state, action, size).mean(dim=1, keepdim=True)


class DroQ(REDQ):
    """DroQ (Hiraoka et al., 2022): REDQ with a small ensemble of critics regularised by
    dropout and layer normalisation.

    The algorithm is :class:`REDQ`'s; what differs are the critics, which are yours: put
    ``nn.Dropout`` (the paper: rate 0.01) and ``nn.LayerNorm`` after each hidden layer, and
    give two critics (with ``subset_size=2``, the default, the target takes the minimum over
    both). Dropout is active whenever :meth:`update` runs, in the critics and their targets
    alike, and off while acting. The paper's setting is ``update_times=20`` with one policy
    step per update (``policy_update_delay=20``), the defaults.

    Warns (``UserWarning``) when no critic has a dropout layer (a module whose behaviour
    differs between training and evaluation mode, see
    :meth:`~machin.frame.algorithms.base.TorchFramework._set_mode`; a network that applies
    dropout functionally declares ``mode_sensitive = True``).
    """

    def __init__(
        self,
        actor: nn.Module,
        critics: Sequence[nn.Module],
        critic_targets: Sequence[nn.Module],
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(actor, critics, critic_targets, optimizer, criterion, *_, **options)
        if not any(_mode_sensitive(critic) for critic in self.critics):
            warn_caller(
                f"DroQ's critics are meant to use dropout, but none of the {len(self.critics)} "
                f"critics ({type(self.critics[0]).__name__}, ...) has a dropout layer; without one "
                f"this is REDQ with {len(self.critics)} critics"
            )
