"""TD3+BC: TD3 whose actor also clones the dataset's actions, for offline learning."""

from __future__ import annotations

import torch
from torch.nn import functional

from .compiled import compilable
from .options import Option, non_negative
from .replay import SampledBatch
from .td3 import TD3

__all__ = ["TD3BC"]


class TD3BC(TD3):
    """TD3+BC (Fujimoto & Gu, 2021): TD3 with a behaviour-cloning term in the actor's loss.

    The critics learn exactly as in :class:`~machin.frame.algorithms.td3.TD3`. The actor
    minimises ``-lambda * mean Q(s, pi(s)) + mean (pi(s) - a)^2`` over the sampled
    dataset transitions ``(s, a)``, with ``lambda = alpha / mean |Q(s, pi(s))|`` (no
    gradient through ``lambda``): the critic term is normalised by the scale of the
    values, so one ``alpha`` suits tasks whose returns differ in scale. A large ``alpha``
    approaches TD3, ``alpha = 0`` is behaviour cloning.

    It learns from what its replay buffer holds, typically a dataset loaded with
    :func:`~machin.frame.offline.load_minari` (pass ``replay_buffer=...``); :meth:`update`
    needs no environment. The paper also normalises the states by the dataset's mean and
    standard deviation; do that in the networks or before loading when the state
    features differ much in scale.

    Takes the arguments and options of :class:`~machin.frame.algorithms.td3.TD3`; its own
    option is ``alpha``. The ``policy_value`` that :meth:`update` returns is minus the
    actor's whole loss.

    Raises:
        ValueError: On an out-of-range option.
    """

    driver = None
    driver_unavailable = (
        "it learns from a fixed dataset: load one into its replay buffer "
        "(machin.frame.offline.load_minari) and call update()"
    )

    alpha = Option(
        2.5,
        non_negative,
        "Weight of the critic's term in the actor's loss, relative to the behaviour-cloning term.",
    )

    @compilable(("actor",))
    def _actor_loss(self, batch: SampledBatch) -> torch.Tensor:
        """``-lambda * mean Q(s, pi(s))`` plus the squared distance of ``pi(s)`` to the dataset's actions."""
        action = self.action_transform_function(self._act(batch.state), batch.state, batch.others)
        value = self._critic_value(self.critic, batch.state, action, batch.size)
        weight = self.alpha / value.abs().mean().detach().clamp_min(1e-6)
        cloning = sum(
            functional.mse_loss(predicted, batch.action[key].to(predicted.device))
            for key, predicted in action.items()
        )
        return -weight * value.mean() + cloning
