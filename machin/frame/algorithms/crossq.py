"""CrossQ: SAC with batch-normalised critics and no target networks."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
from torch import nn

from .replay import SampledBatch
from .sac_ensemble import EnsembleSAC

__all__ = ["CrossQ"]


def _joined(first: Dict[str, Any], second: Dict[str, Any], what: str) -> Dict[str, Any]:
    """The inputs of ``second``'s keys, ``first``'s rows on top of ``second``'s (one batch of ``2 B``).

    Args:
        first: Inputs of the first ``B`` rows (tensors ``[B, ...]`` or per-sample lists).
        second: Inputs of the last ``B`` rows, with the keys the network receives.
        what: Name of the inputs, for the messages.
    """
    joined = {}
    for key, value in second.items():
        if key not in first:
            raise ValueError(
                f"the sampled {what} has no key {key!r} (it has {sorted(first)}), which the next "
                f"{what} has: both go into one call of the critics"
            )
        other = first[key]
        if isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor):
            joined[key] = torch.cat([other.to(value.device), value])
        elif isinstance(value, list) and isinstance(other, list):
            joined[key] = other + value
        else:
            raise TypeError(
                f"{what}[{key!r}] cannot be joined into one batch: got {type(other).__name__} and "
                f"{type(value).__name__} (tensors or per-sample lists are joined)"
            )
    return joined


class CrossQ(EnsembleSAC):
    """CrossQ (Bhatt et al., 2024): SAC whose critics use batch normalisation and learn
    without target networks.

    Each critic is called as ``critic(<state keys>, <action keys>)`` and returns its value
    ``[B, 1]`` (or ``[B]``; extra outputs after it are dropped); it should normalise its
    hidden layers with ``nn.BatchNorm1d`` (the paper: batch renormalisation, and wide
    layers). One critic step:

    * ``a'`` is drawn from the actor for the next state, the actor in evaluation mode (its
      normalisation layers use their running statistics);
    * each critic, in training mode, is called **once** on the joined batch
      ``[(s, a); (s', a')]`` of ``2 B`` rows, so that its batch statistics are those of
      both halves; the first ``B`` values are ``Q_i(s, a)``, the last ``B`` (without
      gradient) give the target
      ``reward + discount * (1 - terminal) * (min_i Q_i(s', a') - alpha * log_prob(a'|s'))``;
    * every critic regresses on it with ``criterion(target, Q_i(s, a))``.

    After every ``policy_update_delay``-th critic step (3 by default, as the paper) the
    actor, in training mode, minimises ``mean(alpha * log_prob(a|s) - min_i Q_i(s, a))``
    with the critics in evaluation mode (their running statistics), and alpha is tuned as
    in SAC. The paper uses Adam with ``betas=(0.5, 0.999)``: pass
    ``functools.partial(torch.optim.Adam, betas=(0.5, 0.999))`` as ``optimizer``.

    Acting (:meth:`act`, sampled or with ``deterministic=True``) calls the actor in
    evaluation mode, as SAC does: its normalisation layers use their running statistics,
    so a single state can be acted on and acting changes no statistics.

    There are no target networks: ``CrossQ._is_top == ["actor", "critics"]``, both are
    saved, ``update_rate`` is not an option and ``update(update_target=...)`` has nothing
    to update. Each critic needs the states and actions as tensors (or per-sample lists)
    that can be joined along the batch dimension.

    Args:
        actor: Stochastic policy, as SAC's.
        critics: The critics (two in the paper), a list of networks.
        optimizer: Optimizer class, called as ``optimizer(params, lr=...)`` for the actor,
            for all critics together and for ``log(alpha)``.
        criterion: Value loss of each critic, ``criterion(target[B, 1], predicted[B, 1])``.

    The other options are SAC's and ``update_times`` / ``policy_update_delay``.
    """

    _is_top = ["actor", "critics"]
    _is_restorable = ["actor", "critics"]
    update_rate = None  # no target networks: not an option
    policy_update_delay = EnsembleSAC.policy_update_delay.but(default=3)

    def __init__(
        self,
        actor: nn.Module,
        critics: Sequence[nn.Module],
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(actor, critics, None, optimizer, *_, **options)
        self._check_criterion(criterion)
        self.criterion = criterion

    def _critic_step(
        self, batch: SampledBatch, alpha: torch.Tensor, step: bool
    ) -> Tuple[float, bool]:
        # The next actions come from the actor's running statistics, the critics' batch
        # statistics from the joined batch.
        self._set_mode(False, self.actor)
        self._set_mode(True, *self.critics)
        return super()._critic_step(batch, alpha, step)

    def _actor_and_alpha_losses(
        self, batch: SampledBatch, alpha: torch.Tensor
    ) -> Tuple[List[torch.Tensor], torch.Tensor]:
        # The actor learns in training mode from the critics' running statistics. Computed
        # without gradient (the policy value reported before the first policy step), nothing
        # learns: the actor then uses its running statistics and leaves them unchanged.
        self._set_mode(torch.is_grad_enabled(), self.actor)
        self._set_mode(False, *self.critics)
        return super()._actor_and_alpha_losses(batch, alpha)

    def _critic_loss(self, batch: SampledBatch, alpha: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            next_action, next_log_prob = self._sample_action(batch.next_state, batch.size)
            action = self.action_transform_function(next_action, batch.next_state, batch.others)
        values = self._values(
            "critics",
            _joined(batch.state, batch.next_state, "state"),
            _joined(batch.action, action, "action"),
            2 * batch.size,
        )
        current, following = values[: batch.size], values[batch.size :].detach()
        target = self._soft_bellman(
            batch, following.min(dim=1, keepdim=True).values, next_log_prob, alpha
        )
        return sum(
            self._value_loss(current[:, i : i + 1], target, batch) for i in range(current.shape[1])
        )

    def _policy_q(self, state: Dict[str, Any], action: Dict[str, Any], size: int) -> torch.Tensor:
        """The minimum over the critics."""
        return self._values("critics", state, action, size).min(dim=1, keepdim=True).values
