"""Advantage actor-critic (A2C): the on-policy base of PPO and TRPO.

The actor is a stochastic policy that returns ``(action, log_prob, entropy, *extras)``
and the critic a state value. :meth:`A2C.store_episode` computes, for a whole
episode at once, the discounted return of every step (the critic's regression
target, stored as the custom attribute ``"value"``) and its generalized advantage
estimate (``"gae"``). :meth:`A2C.update` trains on what is stored, then empties
the buffer.

Subclasses change small hooks only: :meth:`A2C._policy_loss` (PPO's clipped
surrogate) and :meth:`A2C._update_actor` (TRPO's natural-gradient step).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from ..buffers.buffer import DEFAULT_REQUIRED_ATTRS
from ..returns import returns_and_advantages
from ..transition import Transition, TransitionBase
from .base import Driver, TorchFramework, UpdateResult, split_output
from .compiled import compilable
from .options import (
    ActorCriticOptions,
    BufferOptions,
    Option,
    non_negative,
    one_of,
    optional,
    positive_int,
    probability,
    real,
)
from .policy import (  # noqa: F401 (_take: its old import path)
    PolicyBatch,
    StochasticActing,
    _take,
    split_actor_output,
)
from .utils import as_column, safe_call

# PolicyBatch, split_actor_output and returns_and_advantages live in .policy and
# machin.frame.returns; they stay importable from here (documented at their homes).
__all__ = ["A2C"]

A2C_REQUIRED_ATTRS = DEFAULT_REQUIRED_ATTRS + ("value", "gae")


def _with_custom(transition: Union[TransitionBase, Dict[str, Any]], values: Dict[str, Any]):
    """``transition`` with the custom attributes ``values`` added or replaced (the input is not changed).

    A dict stays a dict (the buffer builds the transition from it, copying its tensors
    once). For a transition object the custom names are sorted, as
    :class:`~machin.frame.transition.Transition` sorts them, so that stored
    transitions keep one attribute order.
    """
    if isinstance(transition, dict):
        return {**transition, **values}
    custom = {name: getattr(transition, name) for name in transition.custom_attr}
    custom.update(values)
    names = sorted(custom)
    return TransitionBase(
        transition.major_attr,
        transition.sub_attr,
        names,
        [getattr(transition, n) for n in transition.major_attr],
        [getattr(transition, n) for n in transition.sub_attr],
        [custom[n] for n in names],
    )


class A2C(StochasticActing, BufferOptions, ActorCriticOptions, TorchFramework):
    """Advantage actor-critic with generalized advantage estimation.

    The actor is called as ``actor(<state keys>, action=None)`` and returns
    ``(action, log_prob, entropy, *extras)``: the action it sampled (or, when an
    ``action`` is passed in, that action unchanged), its log-probability
    (differentiable, shape ``[B]`` or ``[B, 1]``) and the entropy of the
    distribution (only needed when ``entropy_weight`` is set). An actor that also takes
    ``deterministic`` gives :meth:`act` its most likely action (see
    :class:`~machin.frame.algorithms.policy.StochasticActing`). The critic is called
    as ``critic(<state keys>)`` and returns ``value[B, 1]`` (extras are ignored).

    Each :meth:`update` minimises, for the actor,
    ``-mean(log_prob * advantage) + entropy_weight * mean(entropy)`` and, for the
    critic, ``value_weight * criterion(discounted_return, V(s))``, each with its
    own optimizer.

    Args:
        actor: Policy network.
        critic: State-value network.
        optimizer: Optimizer class, called as ``optimizer(params, lr=...)`` once for
            the actor and once for the critic.
        criterion: Value loss, called as ``criterion(target[B, 1], predicted[B, 1])``.

    The keyword options are listed with their defaults in the constructor's
    documentation below; the schedulers take one entry per optimizer (actor, then critic).

    Raises:
        ValueError: When an option is out of range.
    """

    _is_top = ["actor", "critic"]
    _is_restorable = ["actor", "critic"]
    driver = Driver("act", {}, "act", "episode")
    # Whether the policy loss needs the log-probabilities of the stored actions under
    # the policy as it was before the update (PPO's ratio, TRPO's KL).
    _needs_old_log_prob = False

    actor_update_times = Option(5, positive_int, "Actor steps per :meth:`update`.")
    critic_update_times = Option(10, positive_int, "Critic steps per :meth:`update`.")
    actor_learning_rate = ActorCriticOptions.actor_learning_rate.but(default=0.001)
    entropy_weight = Option(
        None,
        optional(real),
        "Weight of the mean entropy in the actor loss (or a schedule); ``None`` ignores the "
        "entropy output. Negative values reward exploration (the usual choice).",
        schedulable=True,
    )
    value_weight = Option(0.5, non_negative, "Factor on the critic loss.")
    gae_lambda = Option(
        1.0,
        probability,
        "GAE lambda in ``[0, 1]``: 1 gives Monte-Carlo advantages, 0 one-step "
        "temporal differences.",
    )
    normalize_advantage = Option(
        True,
        doc="Standardize the advantages of each training batch to mean 0 and standard deviation 1.",
    )
    value_target = Option(
        "return",
        one_of("return", "lambda_return"),
        '``"return"``: the critic regresses on the discounted return (bootstrapped only at a '
        'cut end; as Machin 0.3.4); ``"lambda_return"``: on the GAE lambda-return '
        "``advantage + V(s)``, the usual target with ``gae_lambda < 1``.",
    )
    joint_update = Option(
        False,
        doc="Train both networks on one joint loss (policy loss + ``value_weight`` x "
        "value loss + entropy term) for ``actor_update_times`` epochs over shuffled minibatches "
        "of ``batch_size`` covering every stored sample, with advantages standardized per "
        "minibatch and ``gradient_max`` clipping the norm of the joint gradient (both networks "
        "together), as PPO is usually run; "
        "``False``: 0.3.4's separate actor and critic loops on random minibatches.",
    )

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        self._check_criterion(criterion)
        self.criterion = criterion
        self.actor = actor
        self.critic = critic
        self.actor_optim = self._make_actor_optimizer(optimizer, self.actor_learning_rate)
        self.critic_optim = self._make_optimizer(optimizer, critic, self.critic_learning_rate)
        self.replay_buffer = self._make_buffer(self._default_buffer)

    def _default_buffer(self) -> Buffer:
        return Buffer(self.replay_size, self.replay_device)

    def _optimizers(self):
        return [opt for opt in (self.actor_optim, self.critic_optim) if opt is not None]

    def _make_actor_optimizer(
        self, optimizer: Callable, learning_rate: float
    ) -> Optional[torch.optim.Optimizer]:
        """The actor's optimizer (``None`` for an algorithm that steps the actor itself)."""
        return self._make_optimizer(optimizer, self.actor, learning_rate)

    # -- acting -----------------------------------------------------------------------
    @ignores_extra_args
    def act(self, state: Dict[str, Any], *, deterministic: bool = False) -> Any:
        """The actor's output ``(action, log_prob, entropy, *extras)`` as is: a sampled action,
        or with ``deterministic=True`` the most likely one.

        Args:
            state: State dict ``{key: [B, ...]}`` whose keys name the actor's ``forward`` arguments.
            deterministic: Call the actor with the extra input ``deterministic=True``, for its
                most likely action (see :class:`~machin.frame.algorithms.policy.StochasticActing`).

        Raises:
            TypeError: With ``deterministic=True``, when the actor's ``forward`` takes no
                ``deterministic`` argument.
        """
        self._check_state(state)
        with torch.no_grad():
            return self._actor_output(state, deterministic)

    def _eval_act(self, state: Dict[str, Any], action: Dict[str, Any]) -> Any:
        """Actor output for given actions (the actor must return them unchanged), with gradient."""
        return safe_call(self.actor, state, action)

    def _critic_value(self, state: Dict[str, Any]) -> Any:
        """Critic output for ``state``, with gradient."""
        return safe_call(self.critic, state)

    def _criticize(self, state: Dict[str, Any], *_: Any, **__: Any) -> torch.Tensor:
        """State values ``[B, 1]`` (the critic's first output), with gradient: Machin 0.3.4's
        overridable helper, through which the update computes every value.

        Args:
            state: State dict ``{key: [B, ...]}`` for the critic.
        """
        return split_output(self._critic_value(state))[0]

    def criticize(self, state: Dict[str, Any]) -> Any:
        """State values ``[B, 1]`` (and any extra critic outputs) for ``state``."""
        with torch.no_grad():
            return self._critic_value(state)

    # -- storing ----------------------------------------------------------------------
    def store_transition(self, transition: Union[Transition, Dict[str, Any]]) -> None:
        """Store one step that already carries the custom attributes ``"value"`` and ``"gae"``.

        :meth:`store_episode` computes both; use this only when computing them yourself
        (``"value"``: the critic's regression target, ``"gae"``: the advantage).

        Args:
            transition: A :class:`~machin.frame.transition.Transition` or a dict with ``state``, ``action``, ``next_state``, ``reward``, ``terminal``, ``value`` and ``gae``.

        Raises:
            ValueError: When ``"value"`` or ``"gae"`` (or a standard attribute) is missing.
        """
        if isinstance(transition, (dict, TransitionBase)):
            missing = [name for name in ("value", "gae") if name not in transition]
            if missing:
                raise ValueError(
                    f"{type(self).__name__}.store_transition needs the custom attribute(s) {missing} "
                    f"(the value target and the advantage); the transition has {list(transition.keys())}. "
                    f"Use store_episode to have them computed."
                )
        self.replay_buffer.append(transition, required_attrs=A2C_REQUIRED_ATTRS)

    def store_episode(self, episode: List[Union[Transition, Dict[str, Any]]]) -> None:
        """Compute ``"value"`` and ``"gae"`` for every step of an episode, then store it.

        All states and next states go through the critic in one batched call; returns
        and advantages follow in one reverse pass
        (:func:`~machin.frame.returns.returns_and_advantages`).

        Terminated or truncated: a last step with ``terminal=True`` ends the episode
        (no value after it); a last step with ``terminal=False`` means the episode was
        cut off (e.g. gymnasium's ``truncated``) and its return is bootstrapped from
        the critic's value of that step's ``next_state``. So pass gymnasium's
        ``terminated`` flag as ``terminal``. Alternatively give every transition a
        custom attribute ``truncated`` (bool): a step with ``truncated=True`` is
        bootstrapped even when ``terminal`` is true, and it ends the advantage chain,
        so several episodes may be passed as one list.

        Args:
            episode: The steps, in order (``Transition`` objects or dicts).

        Raises:
            ValueError: When the episode is empty, attributes are missing, or the
                critic does not return one value per state.
        """
        episode = list(episode)
        if not episode:
            raise ValueError("episode must hold at least one transition, got an empty list")
        returns, advantages = self._episode_targets(episode)
        self.replay_buffer.extend(
            [
                _with_custom(t, {"value": g, "gae": a})
                for t, g, a in zip(episode, returns, advantages)
            ],
            required_attrs=A2C_REQUIRED_ATTRS,
        )

    def _episode_targets(
        self, episode: List[Union[TransitionBase, Dict[str, Any]]]
    ) -> Tuple[List[float], List[float]]:
        for step, t in enumerate(episode):
            if not isinstance(t, (dict, TransitionBase)):
                raise TypeError(
                    f"episode[{step}] must be a Transition or a dict, got {type(t).__name__}"
                )
            missing = [name for name in DEFAULT_REQUIRED_ATTRS if name not in t]
            if missing:
                raise ValueError(
                    f"episode[{step}] is missing required attribute(s) {missing}; it has {list(t.keys())}"
                )
        keys = list(episode[0]["state"])
        if sorted(episode[0]["next_state"]) != sorted(keys):
            raise ValueError(
                f"state and next_state must have the same keys, got {sorted(keys)} and "
                f"{sorted(episode[0]['next_state'])}"
            )
        steps = len(episode)
        states = {
            k: torch.cat([t["state"][k] for t in episode] + [t["next_state"][k] for t in episode])
            for k in keys
        }
        with torch.no_grad():
            values = self._criticize(states)
        values = as_column(values, 2 * steps, "the critic output").view(-1).tolist()
        returns, advantages = returns_and_advantages(
            [float(t["reward"]) for t in episode],
            values[:steps],
            values[steps:],
            [bool(t["terminal"]) for t in episode],
            [bool(t["truncated"]) if "truncated" in t else False for t in episode],
            self.discount,
            self.gae_lambda,
        )
        if self.value_target == "lambda_return":
            returns = [a + v for a, v in zip(advantages, values[:steps])]
        return returns, advantages

    # -- update -----------------------------------------------------------------------
    def _sample_all(self, concatenate: bool) -> Optional[PolicyBatch]:
        """Everything stored, oldest first, with old log-probabilities when needed."""
        size, sampled = self.replay_buffer.sample_batch(
            0, concatenate, sample_method="all", sample_attrs=["state", "action"]
        )
        if size == 0:
            return None
        state, action = sampled
        _, (target_value, advantage) = self.replay_buffer.sample_batch(
            0,
            True,
            sample_method="all",
            sample_attrs=["value", "gae"],
            additional_concat_attrs=["value", "gae"],
        )
        batch = PolicyBatch(
            size, state, action, target_value.view(size, 1), advantage.view(size, 1)
        )
        if self._needs_old_log_prob:
            with torch.no_grad():
                batch.old_log_prob = self._evaluate_policy(batch)[0]
        return batch

    def _minibatch(self, batch: PolicyBatch) -> PolicyBatch:
        """``batch_size`` distinct random samples of ``batch`` (all of it when smaller)."""
        if self.batch_size >= batch.size:
            return batch
        generator = getattr(self.replay_buffer, "generator", None)
        return batch.subset(torch.randperm(batch.size, generator=generator)[: self.batch_size])

    def _actor_minibatch(self, batch: PolicyBatch) -> PolicyBatch:
        """A minibatch whose advantages are standardized when ``normalize_advantage`` is set."""
        return self._normalized(self._minibatch(batch))

    def _normalized(self, batch: PolicyBatch) -> PolicyBatch:
        if not self.normalize_advantage or batch.size < 2:
            return batch
        advantage = batch.advantage
        return replace(
            batch, advantage=(advantage - advantage.mean()) / (advantage.std(correction=0) + 1e-8)
        )

    def _evaluate_policy(self, batch: PolicyBatch) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Log-probabilities ``[B, 1]`` of the stored actions and entropies ``[B, 1]`` (or ``None``)."""
        need_entropy = self.entropy_weight is not None
        _, log_prob, entropy = split_actor_output(
            self._eval_act(batch.state, batch.action), type(self).__name__, need_entropy
        )
        log_prob = as_column(log_prob, batch.size, "the actor's log_prob output")
        entropy = (
            as_column(entropy, batch.size, "the actor's entropy output") if need_entropy else None
        )
        return log_prob, entropy

    def _policy_loss(
        self, log_prob: torch.Tensor, old_log_prob: Optional[torch.Tensor], advantage: torch.Tensor
    ) -> torch.Tensor:
        """The policy-gradient loss to minimise: ``-mean(log_prob * advantage)``.

        Args:
            log_prob: Log-probabilities ``[B, 1]`` of the stored actions (with gradient).
            old_log_prob: The same before the update started (``None`` for A2C).
            advantage: Advantages ``[B, 1]``.
        """
        return -(log_prob * advantage.to(log_prob.device)).mean()

    def _actor_loss(
        self, batch: PolicyBatch, log_prob: torch.Tensor, entropy: Optional[torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(policy loss + entropy term, policy loss)``."""
        policy_loss = self._policy_loss(log_prob, batch.old_log_prob, batch.advantage)
        if entropy is None:
            return policy_loss, policy_loss
        return policy_loss + self.entropy_weight * entropy.mean(), policy_loss

    @compilable(("actor",))
    def _actor_objective(self, batch: PolicyBatch) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(actor loss, policy loss)`` on ``batch`` (one compiled step after :meth:`compile`)."""
        return self._actor_loss(batch, *self._evaluate_policy(batch))

    def _update_actor(self, batch: PolicyBatch) -> float:
        """One actor step on ``batch``; returns the policy value (minus the policy loss)."""
        loss, policy_loss = self._actor_objective(batch)
        self._maybe_visualize(loss, "actor")
        self._optimize(loss, self.actor_optim, self.actor, self.gradient_max)
        return -policy_loss.item()

    @compilable(("critic",))
    def _critic_loss(self, batch: PolicyBatch) -> torch.Tensor:
        value = as_column(self._criticize(batch.state), batch.size, "the critic output")
        target = batch.target_value.to(device=value.device, dtype=value.dtype)
        return self.value_weight * self.criterion(target, value)

    def _update_critic(self, batch: PolicyBatch) -> float:
        """One critic step on ``batch``; returns the value loss."""
        loss = self._critic_loss(batch)
        self._maybe_visualize(loss, "critic")
        self._optimize(loss, self.critic_optim, self.critic, self.gradient_max)
        return loss.item()

    def _evaluate_actor(self, batch: PolicyBatch) -> float:
        """Policy value of ``batch`` without a step (``update_policy=False``)."""
        with torch.no_grad():
            return -self._actor_objective(batch)[1].item()

    def _evaluate_critic(self, batch: PolicyBatch) -> float:
        """Value loss of ``batch`` without a step (``update_value=False``)."""
        with torch.no_grad():
            return self._critic_loss(batch).item()

    def _joint_epochs(
        self, batch: PolicyBatch, update_policy: bool, update_value: bool
    ) -> Tuple[float, float]:
        """``actor_update_times`` epochs of joint steps over shuffled minibatches of ``batch``."""
        generator = getattr(self.replay_buffer, "generator", None)
        policy_values, value_losses = [], []
        for _ in range(self.actor_update_times):
            order = torch.randperm(batch.size, generator=generator)
            for start in range(0, batch.size, self.batch_size):
                minibatch = self._normalized(batch.subset(order[start : start + self.batch_size]))
                # The networks are separate, so the joint loss's gradient is each network's own
                # loss's; gradient_max clips the norm of the joint gradient, over both networks.
                loss, policy_loss = self._actor_objective(minibatch)
                value_loss = self._critic_loss(minibatch)
                parts = [(loss, self.actor_optim, self.actor)] if update_policy else []
                if update_value:
                    parts.append((value_loss, self.critic_optim, self.critic))
                if parts:
                    losses, optimizers, networks = zip(*parts)
                    self._optimize(losses, optimizers, networks, self.gradient_max)
                policy_values.append(-policy_loss.item())
                value_losses.append(value_loss.item())
        return UpdateResult(
            sum(policy_values) / len(policy_values), sum(value_losses) / len(value_losses)
        )

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
        """Train on the stored samples, then clear the buffer.

        Runs ``actor_update_times`` actor steps, then ``critic_update_times`` critic
        steps, each on ``batch_size`` distinct samples drawn at random from everything
        stored (all of it when fewer are stored). Call it once per collected episode
        (or group of episodes), not in a loop.

        Args:
            update_value: Step the critic (otherwise its loss is only measured).
            update_policy: Step the actor (otherwise its loss is only measured).
            concatenate_samples: Hand the networks batched tensors (``False``: per-sample lists).

        Returns:
            ``(mean policy value, mean value loss)`` as floats, the policy value being
            minus the policy loss; ``None`` when the buffer is empty.
        """
        self._set_mode(True, self.actor, self.critic)
        batch = self._sample_all(concatenate_samples)  # old log-probs in training mode too
        if batch is None:
            return None
        if self.joint_update:
            result = self._joint_epochs(batch, update_policy, update_value)
            self.replay_buffer.clear()
            self._set_mode(False, self.actor, self.critic)
            return result
        actor_step = self._update_actor if update_policy else self._evaluate_actor
        critic_step = self._update_critic if update_value else self._evaluate_critic
        policy_value = sum(
            actor_step(self._actor_minibatch(batch)) for _ in range(self.actor_update_times)
        )
        value_loss = sum(
            critic_step(self._minibatch(batch)) for _ in range(self.critic_update_times)
        )
        self.replay_buffer.clear()
        self._set_mode(False, self.actor, self.critic)
        return UpdateResult(
            policy_value / self.actor_update_times, value_loss / self.critic_update_times
        )
