"""Behaviour cloning: an actor trained to reproduce the actions of a dataset."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch
from torch import nn
from torch.nn import functional

from ...utils.compat import ignores_extra_args
from .base import TorchFramework, pack_result, split_output
from .options import Option, non_negative, one_of, positive
from .policy import StochasticActing, split_actor_output
from .replay import ReplayMixin, SampledBatch
from .utils import safe_call

__all__ = ["BC"]

POLICY_TYPES = ("deterministic", "stochastic", "discrete")


class BC(StochasticActing, ReplayMixin, TorchFramework):
    """Behaviour cloning: supervised learning of the dataset's action in each state.

    It learns from whatever its replay buffer holds, typically a dataset loaded with
    :func:`~machin.frame.offline.load_minari` (pass ``replay_buffer=...``) or transitions
    stored with ``store_episode``; :meth:`update` needs no environment. Rewards and
    next states are not read. The actor is one of three kinds (``policy_type``):

    * ``"deterministic"``: ``forward(<state keys>) -> action[B, action_dim], <extras>``;
      the loss is ``criterion(dataset action, predicted action)`` (default
      ``nn.MSELoss()``).
    * ``"stochastic"``: ``forward(<state keys>, action=None) -> (action, log_prob, ...)``,
      the convention of machin's A2C / PPO actors (Gaussian or categorical): given the
      dataset's action it returns that action's log-probability, and the loss is its
      negative mean (maximum likelihood).
    * ``"discrete"``: ``forward(<state keys>) -> logits[B, action_num], <extras>`` for
      actions stored as indices ``[B, 1]``; the loss is the cross entropy.

    Args:
        actor: The policy network, called by keyword (see
            :func:`~machin.frame.algorithms.utils.safe_call`).
        optimizer: Optimizer class, called as ``optimizer(actor.parameters(), lr=...)``.
        criterion: The loss of a deterministic actor, called as
            ``criterion(target[B, action_dim], predicted[B, action_dim])``; ``None``:
            ``nn.MSELoss()``. The other kinds have their own loss and take none.

    The keyword options are listed with their defaults in the signature and documented as
    attributes below.

    Raises:
        ValueError: On an out-of-range option, or a criterion given to a stochastic or
            discrete actor.
    """

    _is_top = ["actor"]
    _is_restorable = ["actor"]
    driver = None
    driver_unavailable = (
        "it learns from a fixed dataset: load one into its replay buffer "
        "(machin.frame.offline.load_minari) and call update()"
    )

    policy_type = Option(
        "deterministic",
        one_of(*POLICY_TYPES),
        "The kind of actor: ``'deterministic'``, ``'stochastic'`` or ``'discrete'`` (see above).",
    )
    learning_rate = Option(
        0.001,
        positive,
        "Learning rate of the actor's optimizer (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    _learning_rate_of = {"learning_rate": ("actor_optim",)}
    # Behaviour cloning reads neither returns nor discounts: these replay options are fixed.
    n_step = 1
    discount = 1.0

    def __init__(
        self,
        actor: nn.Module,
        optimizer: Callable,
        criterion: Optional[Callable] = None,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        if criterion is not None:
            if self.policy_type != "deterministic":
                raise ValueError(
                    f"criterion is the loss of a deterministic actor; a {self.policy_type} actor "
                    f"has its own loss, so give criterion=None, got {criterion!r}"
                )
            self._check_criterion(criterion)
        self.criterion = nn.MSELoss() if criterion is None else criterion
        self.actor = actor
        self.actor_optim = self._make_optimizer(optimizer, self.actor, self.learning_rate)
        self.replay_buffer = self._make_buffer(self._default_buffer)
        #: Calls of :meth:`update` that sampled a batch.
        self.updates_done = 0

    def _optimizers(self):
        return [self.actor_optim]

    @property
    def eval_act_method(self) -> str:
        """The act method :func:`~machin.frame.offline.evaluate_policy` plays with:
        ``"act_discrete"`` for a discrete actor, else ``"act"``."""
        return "act_discrete" if self.policy_type == "discrete" else "act"

    def can_act_deterministically(self) -> bool:
        """Whether ``act(state, deterministic=True)`` asks the actor for its most likely action
        (a stochastic actor whose ``forward`` takes ``deterministic``)."""
        return self.policy_type == "stochastic" and super().can_act_deterministically()

    # -- acting -----------------------------------------------------------------------
    @ignores_extra_args
    def act(self, state: Dict[str, Any], deterministic: bool = False) -> Any:
        """The actor's output for ``state``, unchanged (a tuple if it returns several values).

        Args:
            state: Keyword inputs of the actor, tensors of shape ``[B, ...]``.
            deterministic: For a stochastic actor: its most likely action instead of a
                sample (see :class:`~machin.frame.algorithms.policy.StochasticActing`).
                Deterministic and discrete actors ignore it.
        """
        self._check_state(state)
        with torch.no_grad():
            if self.policy_type == "stochastic":
                return self._actor_output(state, deterministic)
            return safe_call(self.actor, state)

    @ignores_extra_args
    def act_discrete(self, state: Dict[str, Any]) -> Any:
        """The most likely action of a discrete actor.

        Args:
            state: Keyword inputs of the actor, which returns logits ``[B, action_num]``.

        Returns:
            ``(action [B, 1], probabilities [B, action_num], *extras)``.

        Raises:
            ValueError: When ``policy_type`` is not ``"discrete"``.
        """
        if self.policy_type != "discrete":
            raise ValueError(
                f"act_discrete needs policy_type='discrete', this BC has "
                f"policy_type={self.policy_type!r}"
            )
        logits, extras = split_output(self.act(state))
        return pack_result((logits.argmax(dim=1, keepdim=True), logits.softmax(dim=1)), extras)

    # -- learning ---------------------------------------------------------------------
    def _dataset_action(self, batch: SampledBatch) -> torch.Tensor:
        """The one action tensor of the batch (its action dict must hold exactly one)."""
        if len(batch.action) != 1:
            raise ValueError(
                f"BC learns one action per transition: the stored action dict must hold one "
                f"tensor, it holds {sorted(batch.action)}"
            )
        return next(iter(batch.action.values()))

    def _bc_loss(self, batch: SampledBatch) -> torch.Tensor:
        """The imitation loss of the actor on ``batch`` (see the class docstring)."""
        target = self._dataset_action(batch)
        if self.policy_type == "stochastic":
            output = safe_call(self.actor, batch.state, batch.action)
            _, log_prob, _ = split_actor_output(output, "BC")
            return -log_prob.mean()
        predicted = split_output(safe_call(self.actor, batch.state))[0]
        if self.policy_type == "discrete":
            return functional.cross_entropy(predicted, target.reshape(-1).long())
        return self.criterion(target.to(predicted.device), predicted)

    @ignores_extra_args
    def update(
        self, update_policy: bool = True, concatenate_samples: bool = True
    ) -> Optional[float]:
        """Sample a batch and take one imitation step.

        Args:
            update_policy: Take an optimizer step on the actor (``False``: only compute the loss).
            concatenate_samples: Hand the actor batched tensors (``False``: per-sample lists).

        Returns:
            The loss, or ``None`` when the replay buffer is empty.
        """
        batch = self._sample(concatenate_samples)
        if batch is None:
            return None
        self._set_mode(True, self.actor)
        with torch.set_grad_enabled(update_policy):
            loss = self._bc_loss(batch)
        if update_policy:
            self._maybe_visualize(loss, "actor")
            self._optimize(loss, self.actor_optim, self.actor, self.gradient_max)
        self._set_mode(False, self.actor)
        self.updates_done += 1
        return loss.item()
