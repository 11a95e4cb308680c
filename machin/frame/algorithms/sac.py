"""Soft actor-critic with twin critics and automatic entropy tuning."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from .base import Driver, TorchFramework, UpdateResult, split_output
from .compiled import compilable
from .critics import TwinCritics, critic_action_input, value_column
from .options import ActorCriticOptions, Option, non_negative, optional, positive
from .policy import StochasticActing, split_actor_output
from .replay import ReplayMixin, SampledBatch
from .utils import as_column, safe_call

__all__ = ["SAC"]


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


class SAC(StochasticActing, ReplayMixin, TwinCritics, ActorCriticOptions, TorchFramework):
    """Soft actor-critic (off-policy, maximum entropy) with a learned temperature alpha.

    The actor is called as ``actor(<state keys>, action=None)`` and returns
    ``(action, log_prob, *extras)`` (an entropy output in third place is accepted
    and ignored: the entropy enters through ``log_prob``). Log-probabilities may
    have shape ``[B]`` or ``[B, 1]``. An actor that also takes ``deterministic`` gives
    :meth:`act` its most likely action (see
    :class:`~machin.frame.algorithms.policy.StochasticActing`). Each critic is called as
    ``critic(<state keys>, action=...)`` (the dict from
    :meth:`action_transform_function`) and returns ``q_value[B, 1]``.

    One :meth:`update` on a sampled batch:

    * critics: both regress on ``reward + discount * (1 - terminal) * (min(Q1', Q2')(s', a') - alpha * log_prob(a'|s'))``
      with ``a'`` drawn from the actor for the next state and ``Q1', Q2'`` the targets;
    * actor: minimises ``mean(alpha * log_prob(a|s) - min(Q1, Q2)(s, a))`` with ``a``
      freshly drawn from the actor;
    * alpha: ``log(alpha)`` minimises ``-mean(log(alpha) * (log_prob + target_entropy))``,
      which raises alpha while the policy's entropy is below ``target_entropy`` and
      lowers it while above;
    * targets: soft update by ``update_rate``.

    Continuous actions must be drawn with ``rsample()`` so that the actor loss
    reaches the actor through the critics (reparameterisation). Discrete actions
    (e.g. ``Categorical(...).sample()``, which carries no gradient) are supported
    with the score-function gradient instead: when the drawn action does not
    require a gradient, the actor minimises
    ``mean(log_prob * stop_gradient(alpha * log_prob - Q - baseline))`` with the
    batch mean as baseline. The critics then receive the integer actions (override
    :meth:`action_transform_function` to one-hot them, for instance) and
    ``target_entropy`` must be given (e.g. ``0.5 * log(action_num)``).

    Args:
        actor: Stochastic policy network.
        critic: First Q network.
        critic_target: Target of the first Q network (hard-copied from ``critic`` now).
        critic2: Second Q network.
        critic2_target: Target of the second Q network (hard-copied from ``critic2`` now).
        optimizer: Optimizer class, called as ``optimizer(params, lr=...)`` for the actor,
            each critic and ``log(alpha)``.
        criterion: Value loss, called as ``criterion(target[B, 1], predicted[B, 1])``.

    The keyword options are listed with their defaults in the constructor's
    documentation below; the schedulers take three entries (the actor, critic and
    critic2 optimizers; alpha's optimizer is not scheduled).

    Raises:
        ValueError: When an option is out of range.
    """

    _is_top = ["actor", "critic", "critic2", "critic_target", "critic2_target"]
    _is_restorable = ["actor", "critic_target", "critic2_target"]
    driver = Driver("act", {}, "act", "transition")

    target_entropy = Option(
        None,
        optional(_number),
        "Entropy the temperature tuning aims at; ``None`` uses minus "
        "the action dimension, read from the first action the actor returns.",
    )
    initial_entropy_alpha = Option(1.0, positive, "Starting temperature alpha.")
    alpha_learning_rate = Option(
        0.001,
        positive,
        "Learning rate of the temperature optimizer (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    _learning_rate_of = {
        **ActorCriticOptions._learning_rate_of,
        "alpha_learning_rate": ("alpha_optim",),
    }

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        critic_target: nn.Module,
        critic2: nn.Module,
        critic2_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        self._set_up_twin_critics(
            critic, critic_target, critic2, critic2_target, optimizer, criterion
        )
        self._set_up_actor_and_buffer(actor, optimizer)

    def _set_up_actor_and_buffer(self, actor: nn.Module, optimizer: Callable) -> None:
        """The actor, ``log(alpha)`` beside it, their optimizers and the replay buffer
        (what every member of the SAC family builds the same way)."""
        self.actor = actor
        first = next(iter(actor.parameters()), None)  # alpha lives beside the actor
        self.log_alpha = torch.tensor(
            math.log(self.initial_entropy_alpha),
            requires_grad=True,
            device=None if first is None else first.device,
        )
        self.actor_optim = self._make_optimizer(optimizer, actor, self.actor_learning_rate)
        self.alpha_optim = self._make_optimizer(
            optimizer, [self.log_alpha], self.alpha_learning_rate
        )
        self.replay_buffer = self._make_buffer(self._default_buffer)

    def _optimizers(self):
        return [self.actor_optim, self.critic_optim, self.critic2_optim]

    @property
    def entropy_alpha(self) -> float:
        """The current temperature alpha."""
        return self.log_alpha.exp().item()

    # -- acting -----------------------------------------------------------------------
    @ignores_extra_args
    def act(self, state: Dict[str, Any], *, deterministic: bool = False) -> Any:
        """The actor's output ``(action, log_prob, ...)`` as is: a sampled action, or with
        ``deterministic=True`` the most likely one (e.g. ``tanh(mean)``).

        The actor acts in evaluation mode (switched to it here when it has layers that
        depend on the mode): batch normalisation uses its running statistics and leaves
        them unchanged, dropout is off. :meth:`update` trains it in training mode.

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
            deterministic: Call the actor with the extra input ``deterministic=True``, for its
                most likely action (see :class:`~machin.frame.algorithms.policy.StochasticActing`).

        Raises:
            TypeError: With ``deterministic=True``, when the actor's ``forward`` takes no
                ``deterministic`` argument.
        """
        self._check_state(state)
        self._set_mode(False, self.actor)
        with torch.no_grad():
            output = self._actor_output(state, deterministic)
        self._resolve_target_entropy(split_actor_output(output, type(self).__name__)[0])
        return output

    def _resolve_target_entropy(self, action: torch.Tensor) -> None:
        """Default ``target_entropy`` to minus the per-sample action dimension."""
        if self.target_entropy is not None:
            return
        if not action.is_floating_point():
            raise ValueError(
                f"target_entropy cannot be derived from discrete actions (the actor returned "
                f"{action.dtype} actions); pass target_entropy explicitly, e.g. 0.5 * log(action_num)"
            )
        self.target_entropy = -float(action[0].numel())

    def _sample_action(self, state: Dict[str, Any], size: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Draw ``(action, log_prob[B, 1])`` from the actor, with gradient."""
        action, log_prob, _ = split_actor_output(safe_call(self.actor, state), type(self).__name__)
        self._resolve_target_entropy(action)
        return action, as_column(log_prob, size, "the actor's log_prob output")

    def _critic_value(
        self, critic: nn.Module, state: Dict[str, Any], action: Dict[str, Any], size: int
    ) -> torch.Tensor:
        return value_column(safe_call(critic, state, action), size, "the critic")

    # -- Machin 0.3.4's helpers (the update picks its critics itself, see DDPG._criticize) --
    def _criticize(
        self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False, **__: Any
    ) -> torch.Tensor:
        """The first critic's value (its first output) of ``action`` in ``state``, with gradient.

        Args:
            state: State dict for the critic.
            action: Action dict for the critic.
            use_target: Use the target critic.
        """
        return split_output(
            safe_call(self.critic_target if use_target else self.critic, state, action)
        )[0]

    def _criticize2(
        self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False, **__: Any
    ) -> torch.Tensor:
        """The second critic's value (its first output) of ``action`` in ``state``, with gradient.

        Args:
            state: State dict for the critic.
            action: Action dict for the critic.
            use_target: Use the second target critic.
        """
        return split_output(
            safe_call(self.critic2_target if use_target else self.critic2, state, action)
        )[0]

    _legacy_hooks = {
        "_criticize": "_critic_value(critic, state, action, size)",
        "_criticize2": "_critic_value(critic, state, action, size)",
    }

    def _min_q(
        self,
        critics: Tuple[nn.Module, nn.Module],
        state: Dict[str, Any],
        action: Dict[str, Any],
        size: int,
    ) -> torch.Tensor:
        return torch.min(*(self._critic_value(c, state, action, size) for c in critics))

    # -- hooks a user may override (as in DDPG; reward_function comes from ReplayMixin) --
    action_transform_function = staticmethod(critic_action_input)

    # -- update -----------------------------------------------------------------------
    def _soft_bellman(
        self,
        batch: SampledBatch,
        next_q: torch.Tensor,
        next_log_prob: torch.Tensor,
        alpha: torch.Tensor,
    ) -> torch.Tensor:
        """``reward_function(reward, discount, next_q - alpha * log_prob(a'|s'), terminal, others)``.

        ``next_q`` is ``[B, 1]`` (or ``[B, K]`` target atoms, as TQC's): the result has its shape.
        """
        next_value = next_q - alpha.to(next_q.device) * next_log_prob.to(next_q.device)
        device = next_value.device
        return self.reward_function(
            batch.reward.to(device),
            self._discount(batch, device),
            next_value,
            batch.terminal.to(device),
            batch.others,
        )

    def _bellman_target(self, batch: SampledBatch, alpha: torch.Tensor) -> torch.Tensor:
        """Soft Bellman target ``[B, 1]`` (no gradient; traced into the compiled critic step)."""
        with torch.no_grad():
            next_action, next_log_prob = self._sample_action(batch.next_state, batch.size)
            next_q = self._min_q(
                (self.critic_target, self.critic2_target),
                batch.next_state,
                self.action_transform_function(next_action, batch.next_state, batch.others),
                batch.size,
            )
            return self._soft_bellman(batch, next_q, next_log_prob, alpha)

    @compilable(("critic", "critic2"), after="_after_value_loss")
    def _critic_losses(self, batch: SampledBatch, alpha: torch.Tensor) -> List[torch.Tensor]:
        """The value losses of both critics against the soft Bellman target (one compiled step)."""
        target = self._bellman_target(batch, alpha)
        return [
            self._value_loss(
                self._critic_value(critic, batch.state, batch.action, batch.size), target, batch
            )
            for critic in (self.critic, self.critic2)
        ]

    def _actor_loss(
        self, batch: SampledBatch, action: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(actor loss, policy value)``: reparameterised, or score-function for non-differentiable actions."""
        critic_action = self.action_transform_function(action, batch.state, batch.others)
        q = self._policy_q(batch.state, critic_action, batch.size)
        soft_q = q - alpha.to(q.device) * log_prob.to(q.device)
        if action.requires_grad:
            loss = -soft_q.mean()
        else:
            weight = soft_q.detach()
            loss = -(log_prob.to(q.device) * (weight - weight.mean())).mean()
        return loss, soft_q.detach().mean()

    def _policy_q(self, state: Dict[str, Any], action: Dict[str, Any], size: int) -> torch.Tensor:
        """The value ``[B, 1]`` of ``action`` that the actor ascends: ``min(Q1, Q2)``."""
        return self._min_q((self.critic, self.critic2), state, action, size)

    @compilable(lambda self: (self.actor, [self.log_alpha]))
    def _actor_and_alpha_losses(
        self, batch: SampledBatch, alpha: torch.Tensor
    ) -> Tuple[List[torch.Tensor], torch.Tensor]:
        """``([actor loss, alpha loss], policy value)`` on freshly drawn actions (one compiled step)."""
        action, log_prob = self._sample_action(batch.state, batch.size)
        actor_loss, policy_value = self._actor_loss(batch, action, log_prob, alpha)
        entropy_gap = (log_prob.detach() + self.target_entropy).mean().to(self.log_alpha.device)
        return [actor_loss, -self.log_alpha * entropy_gap], policy_value

    def _policy_step(
        self, batch: SampledBatch, alpha: torch.Tensor, update_policy: bool, update_alpha: bool
    ) -> Tuple[bool, float]:
        """Step the actor, then alpha (as asked) on fresh actions for ``batch.state``.

        Returns ``(whether no step was skipped for a non-finite loss, policy value)``.
        """
        (actor_loss, alpha_loss), policy_value = self._actor_and_alpha_losses(batch, alpha)
        taken = True
        if update_policy:
            self._maybe_visualize(actor_loss, "actor")
            taken = self._optimize(actor_loss, self.actor_optim, self.actor, self.gradient_max)
        if update_alpha and taken:
            taken = self._optimize(alpha_loss, self.alpha_optim, [self.log_alpha])
        return taken, float(policy_value)

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        update_target: bool = True,
        update_entropy_alpha: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
        """Sample a batch; step the critics, the actor and alpha; soft-update the targets.

        Args:
            update_value: Step both critics.
            update_policy: Step the actor.
            update_target: Soft-update both target critics.
            update_entropy_alpha: Step the temperature alpha towards ``target_entropy``.
            concatenate_samples: Concatenate the sampled states into batched tensors
                (``False`` hands the networks per-sample lists).

        Returns:
            ``(policy value, value loss)`` as floats: the policy value is the batch mean
            of ``min(Q1, Q2)(s, a) - alpha * log_prob(a|s)`` and the value loss the mean
            of the two critic losses; ``None`` when the buffer is empty.
        """
        batch = self._sample(concatenate_samples)
        if batch is None:
            return None
        networks = (self.actor, self.critic, self.critic2)
        self._set_mode(True, *networks)
        alpha = self.log_alpha.detach().exp()

        # ``taken`` turns False at a step skipped for a non-finite loss (see TorchFramework._optimize):
        # the steps after it are not taken and the targets stay (such an update changes no network).
        taken = True
        critic_losses = self._critic_losses(batch, alpha)
        if update_value:
            for loss, critic, optim, name in zip(
                critic_losses,
                (self.critic, self.critic2),
                (self.critic_optim, self.critic2_optim),
                ("critic", "critic2"),
            ):
                self._maybe_visualize(loss, name)
                taken = taken and self._optimize(loss, optim, critic, self.gradient_max)

        policy_taken, policy_value = self._policy_step(
            batch, alpha, update_policy and taken, update_entropy_alpha and taken
        )
        taken = taken and policy_taken
        if update_target and taken:
            self._update_targets()
        self._set_mode(False, *networks)
        return UpdateResult(policy_value, sum(loss.item() for loss in critic_losses) / 2)
