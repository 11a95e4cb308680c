"""Implicit Q-learning (Kostrikov et al., 2021): offline RL that never queries unseen actions.

Every value IQL learns is a value of an action the dataset took. A state-value network
``V`` fits an upper expectile of the dataset's ``Q(s, a)`` in each state (close to the best
action the data shows there, without asking ``Q`` about any other action), ``Q`` regresses
on ``reward + discount * V(s')``, and the policy is extracted from the dataset's actions by
advantage-weighted regression: it raises the log-probability of each stored action by a
weight ``exp(beta * (Q(s, a) - V(s)))``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from .base import Driver, TorchFramework, UpdateResult
from .compiled import compilable
from .critics import TwinCritics, value_column
from .options import ActorCriticOptions, Option, non_negative, positive
from .policy import StochasticActing, split_actor_output
from .replay import ReplayMixin, SampledBatch
from .utils import as_column, safe_call

__all__ = ["expectile_loss", "advantage_weights", "IQL"]


def expectile_loss(difference: torch.Tensor, expectile: float) -> torch.Tensor:
    """The asymmetric squared loss whose minimiser is the ``expectile`` of a distribution.

    ``mean(|expectile - 1(difference < 0)| * difference ** 2)``: a positive difference
    (target above the prediction) weighs ``expectile``, a negative one ``1 - expectile``.
    With ``expectile = 0.5`` it is half the mean squared error.

    Args:
        difference: ``target - prediction``, any shape.
        expectile: A number in ``(0, 1)``.
    """
    weight = torch.where(difference < 0, 1.0 - expectile, expectile)
    return (weight * difference.pow(2)).mean()


def advantage_weights(advantage: torch.Tensor, beta: float, max_weight: float) -> torch.Tensor:
    """``min(exp(beta * advantage), max_weight)``, the weights of advantage-weighted regression.

    Args:
        advantage: ``Q(s, a) - V(s)`` of the dataset's actions (no gradient).
        beta: Inverse temperature: 0 weighs every action alike (behaviour cloning), a large
            ``beta`` keeps only the best actions.
        max_weight: Upper bound of a weight (keeps one large advantage from dominating).
    """
    return torch.exp(beta * advantage).clamp(max=max_weight)


def _open_unit_interval(name: str, value: Any) -> Any:
    """Check that ``value`` is a real number in ``(0, 1)``; return it (errors name the option ``name``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a real number in (0, 1), got {value!r} of type {type(value).__name__}"
        )
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return value


class IQL(StochasticActing, ReplayMixin, TwinCritics, ActorCriticOptions, TorchFramework):
    """Implicit Q-learning: expectile value learning and advantage-weighted policy extraction.

    The actor is called as ``actor(<state keys>, action=None)`` and returns ``(action,
    log_prob, *extras)``; given the dataset's actions (``actor(<state keys>, <action keys>)``)
    it returns their log-probabilities ``[B]`` or ``[B, 1]``. An actor that also takes
    ``deterministic`` gives :meth:`act` its most likely action, what IQL is usually evaluated
    with (see :class:`~machin.frame.algorithms.policy.StochasticActing`). Each critic is
    called as ``critic(<state keys>, <action keys>)`` with the stored actions and returns
    ``q_value[B, 1]``; the value network as ``value_net(<state keys>)`` and returns
    ``value[B, 1]``. The actions may be continuous or discrete: IQL only ever feeds the
    networks actions from the buffer.

    One :meth:`update` on a sampled batch, every loss computed from the networks as they
    were before the update:

    * value network: :func:`expectile_loss` of ``min(Q1', Q2')(s, a) - V(s)`` at
      ``expectile``, with ``Q1', Q2'`` the target critics;
    * critics: both regress on ``reward + discount * (1 - terminal) * V(s')`` with ``criterion``;
    * actor: minimises ``-mean(w * log_prob(a|s))`` with ``w`` the :func:`advantage_weights`
      of ``min(Q1', Q2')(s, a) - V(s)``;
    * targets: soft update by ``update_rate``.

    Args:
        actor: Stochastic policy network.
        critic: First Q network.
        critic_target: Target of the first Q network (hard-copied from ``critic`` now).
        critic2: Second Q network.
        critic2_target: Target of the second Q network (hard-copied from ``critic2`` now).
        value_net: State-value network ``V``.
        optimizer: Optimizer class, called as ``optimizer(params, lr=...)`` for the actor,
            each critic and the value network.
        criterion: Loss of the critics, called as ``criterion(target[B, 1], predicted[B, 1])``.

    The keyword options are listed with their defaults in the constructor's documentation;
    the schedulers take four entries (the actor, critic, critic2 and value optimizers).

    Raises:
        ValueError: When an option is out of range.
    """

    _is_top = ["actor", "critic", "critic2", "value_net", "critic_target", "critic2_target"]
    _is_restorable = ["actor", "critic_target", "critic2_target", "value_net"]
    driver = Driver("act", {}, "act", "transition")

    expectile = Option(
        0.7,
        _open_unit_interval,
        "Expectile tau that the value network fits (0.5: the mean; towards 1: the maximum).",
    )
    beta = Option(
        3.0,
        non_negative,
        "Inverse temperature of the advantage weights exp(beta * advantage) (0: behaviour cloning).",
    )
    max_weight = Option(100.0, positive, "Upper bound of an advantage weight.")
    value_learning_rate = Option(
        0.001,
        positive,
        "Learning rate of the value network's optimizer (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    _learning_rate_of = {
        **ActorCriticOptions._learning_rate_of,
        "value_learning_rate": ("value_optim",),
    }

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        critic_target: nn.Module,
        critic2: nn.Module,
        critic2_target: nn.Module,
        value_net: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        self._set_up_twin_critics(
            critic, critic_target, critic2, critic2_target, optimizer, criterion
        )
        self.actor, self.value_net = actor, value_net
        self.actor_optim = self._make_optimizer(optimizer, actor, self.actor_learning_rate)
        self.value_optim = self._make_optimizer(optimizer, value_net, self.value_learning_rate)
        self.replay_buffer = self._make_buffer(self._default_buffer)

    def _optimizers(self):
        return [self.actor_optim, self.critic_optim, self.critic2_optim, self.value_optim]

    # -- acting -----------------------------------------------------------------------
    @ignores_extra_args
    def act(self, state: Dict[str, Any], *, deterministic: bool = False) -> Any:
        """The actor's output ``(action, log_prob, ...)`` as is: a sampled action, or with
        ``deterministic=True`` the most likely one.

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
            deterministic: Call the actor with the extra input ``deterministic=True``, for its
                most likely action (see :class:`~machin.frame.algorithms.policy.StochasticActing`).

        Raises:
            TypeError: With ``deterministic=True``, when the actor's ``forward`` takes no
                ``deterministic`` argument.
        """
        self._check_state(state)
        with torch.no_grad():
            output = self._actor_output(state, deterministic)
        split_actor_output(output, type(self).__name__)
        return output

    # -- update -----------------------------------------------------------------------
    def _value_of(self, network: nn.Module, size: int, *inputs: Optional[Dict[str, Any]]):
        return value_column(safe_call(network, *inputs), size, type(network).__name__)

    def _dataset_advantage(self, batch: SampledBatch) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(min(Q1', Q2')(s, a) - V(s), V(s))`` of the dataset's actions; only ``V(s)`` has a gradient."""
        with torch.no_grad():
            q = torch.min(
                *(
                    self._value_of(target, batch.size, batch.state, batch.action)
                    for target in (self.critic_target, self.critic2_target)
                )
            )
        value = self._value_of(self.value_net, batch.size, batch.state)
        return q.to(value.device) - value, value

    @compilable(("value_net",))
    def _state_value_loss(self, batch: SampledBatch) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(expectile loss of V, advantage [B, 1] without gradient)``."""
        advantage, _ = self._dataset_advantage(batch)
        return expectile_loss(advantage, self.expectile), advantage.detach()

    @compilable(("critic", "critic2"), after="_after_value_loss")
    def _critic_losses(self, batch: SampledBatch) -> List[torch.Tensor]:
        """The losses of both critics against ``reward + discount * (1 - terminal) * V(s')``."""
        with torch.no_grad():
            next_value = self._value_of(self.value_net, batch.size, batch.next_state)
            device = next_value.device
            target = self.reward_function(
                batch.reward.to(device),
                self._discount(batch, device),
                next_value,
                batch.terminal.to(device),
                batch.others,
            )
        return [
            self._value_loss(
                self._value_of(c, batch.size, batch.state, batch.action), target, batch
            )
            for c in (self.critic, self.critic2)
        ]

    @compilable(("actor",))
    def _actor_loss(
        self, batch: SampledBatch, advantage: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(advantage-weighted negative log-likelihood of the dataset's actions, its negation)``."""
        output = safe_call(self.actor, batch.state, batch.action)
        log_prob = as_column(
            split_actor_output(output, type(self).__name__)[1],
            batch.size,
            "the actor's log_prob output",
        )
        weight = advantage_weights(advantage, self.beta, self.max_weight).to(log_prob.device)
        loss = -(weight * log_prob).mean()
        return loss, -loss.detach()

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        update_target: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
        """Sample a batch; step the critics, the value network and the actor; soft-update the targets.

        Args:
            update_value: Step both critics and the value network.
            update_policy: Step the actor.
            update_target: Soft-update both target critics.
            concatenate_samples: Concatenate the sampled states into batched tensors
                (``False`` hands the networks per-sample lists).

        Returns:
            ``(policy value, value loss)`` as floats: the policy value is the batch mean of
            the weighted log-likelihood the actor ascends, the value loss the mean of the two
            critic losses; ``None`` when the buffer is empty.
        """
        batch = self._sample(concatenate_samples)
        if batch is None:
            return None
        networks = (self.actor, self.critic, self.critic2, self.value_net)
        self._set_mode(True, *networks)
        critic_losses = self._critic_losses(batch)
        value_loss, advantage = self._state_value_loss(batch)
        actor_loss, policy_value = self._actor_loss(batch, advantage)

        # A step skipped for a non-finite loss (see TorchFramework._optimize) stops the steps after
        # it, and the targets stay: such an update changes no network.
        taken = True
        if update_value:
            steps = zip(
                critic_losses + [value_loss],
                (self.critic_optim, self.critic2_optim, self.value_optim),
                (self.critic, self.critic2, self.value_net),
                ("critic", "critic2", "value_net"),
            )
            for loss, optim, network, name in steps:
                self._maybe_visualize(loss, name)
                taken = taken and self._optimize(loss, optim, network, self.gradient_max)
        if update_policy and taken:
            self._maybe_visualize(actor_loss, "actor")
            taken = self._optimize(actor_loss, self.actor_optim, self.actor, self.gradient_max)
        if update_target and taken:
            self._update_targets()
        self._set_mode(False, *networks)
        return UpdateResult(float(policy_value), sum(loss.item() for loss in critic_losses) / 2)
