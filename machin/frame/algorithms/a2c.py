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

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from ..buffers.buffer import DEFAULT_REQUIRED_ATTRS
from ..transition import Transition, TransitionBase
from .base import TorchFramework, split_output
from .utils import as_column, safe_call  # noqa: F401 (as_column is also imported from here)

__all__ = ["A2C", "PolicyBatch", "returns_and_advantages"]

A2C_REQUIRED_ATTRS = DEFAULT_REQUIRED_ATTRS + ("value", "gae")


# -- helpers shared by the stochastic-policy family -------------------------------------
def split_actor_output(output: Any, owner: str, need_entropy: bool = False) -> Tuple[Any, ...]:
    """Check that a stochastic actor returned ``(action, log_prob, <entropy>, ...)``.

    Returns ``(action, log_prob, entropy_or_None)``.

    Args:
        output: What the actor returned.
        owner: Name of the algorithm, for the error message.
        need_entropy: Whether the entropy (third output) is required.

    Raises:
        ValueError: When the output is not a tuple of at least two values (three
            when ``need_entropy``).
    """
    needed = 3 if need_entropy else 2
    if not isinstance(output, tuple) or len(output) < needed:
        got = f"a tuple of {len(output)} values" if isinstance(output, tuple) else type(output).__name__
        wanted = "(action, log_prob, entropy, ...)" if need_entropy else "(action, log_prob, ...)"
        reason = " because entropy_weight is set" if need_entropy else ""
        raise ValueError(f"the actor of {owner} must return {wanted}{reason}, got {got}")
    return output[0], output[1], output[2] if len(output) > 2 else None


def returns_and_advantages(
    reward: Sequence[float], value: Sequence[float], next_value: Sequence[float],
    terminal: Sequence[bool], truncated: Sequence[bool], discount: float, gae_lambda: float,
) -> Tuple[List[float], List[float]]:
    """Discounted returns and GAE advantages of consecutive steps, in one reverse pass.

    Step ``t`` ends a chain of steps when it is terminal, truncated, or the last one.
    A terminal step that is not truncated has no future value (``terminal_t`` below
    is 1 only for those); any other step bootstraps from the value of its next
    state, so a chain cut short by truncation still sees the value of where it
    stopped::

        delta_t  = r_t + discount * (1 - terminal_t) * V(s'_t) - V(s_t)
        A_t      = delta_t + discount * gae_lambda * A_{t+1}          (A = 0 past a chain end)
        G_t      = r_t + discount * G_{t+1}                           inside a chain
        G_t      = r_t + discount * (1 - terminal_t) * V(s'_t)       at a chain end

    With ``gae_lambda == 1`` the advantage is ``G_t - V(s_t)`` (the Monte-Carlo
    advantage, bootstrapped at truncation).

    Args:
        reward: Reward of each step.
        value: Critic value of each step's state.
        next_value: Critic value of each step's next state.
        terminal: Whether the episode terminated at the step.
        truncated: Whether the episode was cut off (time limit) at the step.
        discount: Discount factor gamma.
        gae_lambda: GAE lambda.

    Returns:
        ``(returns, advantages)``, two lists of floats.
    """
    steps = len(reward)
    returns, advantages = [0.0] * steps, [0.0] * steps
    future_return = future_advantage = 0.0
    for t in reversed(range(steps)):
        terminated = terminal[t] and not truncated[t]
        bootstrap = 0.0 if terminated else discount * next_value[t]
        if terminated or truncated[t] or t == steps - 1:
            future_return = bootstrap
            future_advantage = 0.0
        else:
            future_return *= discount
            future_advantage *= discount * gae_lambda
        delta = reward[t] + bootstrap - value[t]
        future_advantage = advantages[t] = delta + future_advantage
        future_return = returns[t] = reward[t] + future_return
    return returns, advantages


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
        transition.major_attr, transition.sub_attr, names,
        [getattr(transition, n) for n in transition.major_attr],
        [getattr(transition, n) for n in transition.sub_attr],
        [custom[n] for n in names],
    )


def _take(data: Any, index: torch.Tensor, index_list: List[int]) -> Any:
    """Rows ``index`` of a tensor, a list, or a dict of either."""
    if isinstance(data, dict):
        return {k: _take(v, index, index_list) for k, v in data.items()}
    if isinstance(data, torch.Tensor):
        return data[index.to(data.device)]
    return [data[i] for i in index_list]


@dataclass
class PolicyBatch:
    """Samples for one on-policy training step.

    ``target_value`` (the discounted return) and ``advantage`` are ``[B, 1]`` float
    tensors; ``old_log_prob`` is the ``[B, 1]`` log-probability of each action under
    the policy as it was when :meth:`A2C.update` started (``None`` for algorithms
    that do not need it).

    Attributes:
        size: Number of samples ``B``.
        state: State dict of the samples, ``{key: [B, ...]}``.
        action: Action dict of the samples.
    """

    size: int
    state: Dict[str, Any]
    action: Dict[str, Any]
    target_value: torch.Tensor
    advantage: torch.Tensor
    old_log_prob: Optional[torch.Tensor] = None

    def subset(self, index: torch.Tensor) -> PolicyBatch:
        """The samples at positions ``index``."""
        index_list = index.tolist()
        old = None if self.old_log_prob is None else _take(self.old_log_prob, index, index_list)
        return PolicyBatch(
            len(index_list), _take(self.state, index, index_list), _take(self.action, index, index_list),
            _take(self.target_value, index, index_list), _take(self.advantage, index, index_list), old,
        )


class A2C(TorchFramework):
    """Advantage actor-critic with generalized advantage estimation.

    The actor is called as ``actor(<state keys>, action=None)`` and returns
    ``(action, log_prob, entropy, *extras)``: the action it sampled (or, when an
    ``action`` is passed in, that action unchanged), its log-probability
    (differentiable, shape ``[B]`` or ``[B, 1]``) and the entropy of the
    distribution (only needed when ``entropy_weight`` is set). The critic is called
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
        lr_scheduler: Scheduler class, called once per optimizer (actor, then critic) as
            ``lr_scheduler(optimizer, *lr_scheduler_args[i], **lr_scheduler_kwargs[i])``.
        lr_scheduler_args: One tuple of positional arguments per optimizer.
        lr_scheduler_kwargs: One dict of keyword arguments per optimizer.
        batch_size: Samples per training step (all stored samples when fewer).
        actor_update_times: Actor steps per :meth:`update`.
        critic_update_times: Critic steps per :meth:`update`.
        actor_learning_rate: Learning rate of the actor optimizer.
        critic_learning_rate: Learning rate of the critic optimizer.
        entropy_weight: Weight of the mean entropy in the actor loss; ``None`` ignores
            the entropy output. Negative values reward exploration (the usual choice).
        value_weight: Factor on the critic loss.
        gradient_max: Maximum gradient norm of each network (``inf``: no clipping).
        gae_lambda: GAE lambda in ``[0, 1]``: 1 gives Monte-Carlo advantages, 0
            one-step temporal differences.
        discount: Discount factor gamma in ``[0, 1]``.
        normalize_advantage: Standardize the advantages of each training batch to
            mean 0 and standard deviation 1.
        replay_size: Capacity of the default buffer.
        replay_device: Device of the default buffer.
        replay_buffer: A buffer to use instead of the default one.
        visualize: Draw each loss graph on the first update.
        visualize_dir: Where to write the drawings.

    Raises:
        ValueError: When an option is out of range.
    """

    _is_top = ["actor", "critic"]
    _is_restorable = ["actor", "critic"]
    # Whether the policy loss needs the log-probabilities of the stored actions under
    # the policy as it was before the update (PPO's ratio, TRPO's KL).
    _needs_old_log_prob = False

    @ignores_extra_args
    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *,
        lr_scheduler: Optional[Callable] = None,
        lr_scheduler_args: Optional[Tuple[Tuple, ...]] = None,
        lr_scheduler_kwargs: Optional[Tuple[Dict, ...]] = None,
        batch_size: int = 100,
        actor_update_times: int = 5,
        critic_update_times: int = 10,
        actor_learning_rate: float = 0.001,
        critic_learning_rate: float = 0.001,
        entropy_weight: Optional[float] = None,
        value_weight: float = 0.5,
        gradient_max: float = math.inf,
        gae_lambda: float = 1.0,
        discount: float = 0.99,
        normalize_advantage: bool = True,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        replay_buffer: Optional[Buffer] = None,
        visualize: bool = False,
        visualize_dir: str = "",
    ):
        super().__init__(visualize=visualize, visualize_dir=visualize_dir)
        for name, count in (("batch_size", batch_size), ("actor_update_times", actor_update_times),
                            ("critic_update_times", critic_update_times)):
            if not isinstance(count, int) or isinstance(count, bool):
                raise TypeError(f"{name} must be a positive integer, got {count!r} of type {type(count).__name__}")
            if count < 1:
                raise ValueError(f"{name} must be a positive integer, got {count!r}")
        self._check_positive(actor_learning_rate=actor_learning_rate,
                             critic_learning_rate=critic_learning_rate, gradient_max=gradient_max)
        for name, fraction in (("gae_lambda", gae_lambda), ("discount", discount)):
            if not 0 <= fraction <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {fraction!r}")
        self._check_criterion(criterion)
        if not value_weight >= 0:
            raise ValueError(f"value_weight must be non-negative, got {value_weight!r}")

        self.batch_size = batch_size
        self.actor_update_times = actor_update_times
        self.critic_update_times = critic_update_times
        self.entropy_weight = entropy_weight
        self.value_weight = value_weight
        self.gradient_max = gradient_max
        self.gae_lambda = gae_lambda
        self.discount = discount
        self.normalize_advantage = normalize_advantage
        self.criterion = criterion

        self.actor = actor
        self.critic = critic
        self.actor_optim = self._make_actor_optimizer(optimizer, actor_learning_rate)
        self.critic_optim = self._make_optimizer(optimizer, critic, critic_learning_rate)
        optimizers = [opt for opt in (self.actor_optim, self.critic_optim) if opt is not None]
        self._init_lr_schedulers(lr_scheduler, lr_scheduler_args, lr_scheduler_kwargs, optimizers)
        self.replay_buffer = self._make_buffer(replay_buffer, lambda: Buffer(replay_size, replay_device))

    def _make_actor_optimizer(self, optimizer: Callable, learning_rate: float) -> Optional[torch.optim.Optimizer]:
        """The actor's optimizer (``None`` for an algorithm that steps the actor itself)."""
        return self._make_optimizer(optimizer, self.actor, learning_rate)

    # -- acting -----------------------------------------------------------------------
    @ignores_extra_args
    def act(self, state: Dict[str, Any]) -> Any:
        """Sample an action: the actor's output ``(action, log_prob, entropy, *extras)`` as is.

        Args:
            state: State dict ``{key: [B, ...]}`` whose keys name the actor's ``forward`` arguments.
        """
        self._check_state(state)
        with torch.no_grad():
            return safe_call(self.actor, state)

    def _eval_act(self, state: Dict[str, Any], action: Dict[str, Any]) -> Any:
        """Actor output for given actions (the actor must return them unchanged), with gradient."""
        return safe_call(self.actor, state, action)

    def _criticize(self, state: Dict[str, Any]) -> Any:
        """Critic output for ``state``, with gradient."""
        return safe_call(self.critic, state)

    def criticize(self, state: Dict[str, Any]) -> Any:
        """State values ``[B, 1]`` (and any extra critic outputs) for ``state``."""
        with torch.no_grad():
            return self._criticize(state)

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
        and advantages follow in one reverse pass (:func:`returns_and_advantages`).

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
            [_with_custom(t, {"value": g, "gae": a}) for t, g, a in zip(episode, returns, advantages)],
            required_attrs=A2C_REQUIRED_ATTRS,
        )

    def _episode_targets(self, episode: List[Union[TransitionBase, Dict[str, Any]]]
                         ) -> Tuple[List[float], List[float]]:
        for step, t in enumerate(episode):
            if not isinstance(t, (dict, TransitionBase)):
                raise TypeError(f"episode[{step}] must be a Transition or a dict, got {type(t).__name__}")
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
        states = {k: torch.cat([t["state"][k] for t in episode] + [t["next_state"][k] for t in episode])
                  for k in keys}
        with torch.no_grad():
            values = split_output(self._criticize(states))[0]
        values = as_column(values, 2 * steps, "the critic output").view(-1).tolist()
        return returns_and_advantages(
            [float(t["reward"]) for t in episode], values[:steps], values[steps:],
            [bool(t["terminal"]) for t in episode], [bool(t["truncated"]) if "truncated" in t else False for t in episode],
            self.discount, self.gae_lambda,
        )

    # -- update -----------------------------------------------------------------------
    def _sample_all(self, concatenate: bool) -> Optional[PolicyBatch]:
        """Everything stored, oldest first, with old log-probabilities when needed."""
        size, sampled = self.replay_buffer.sample_batch(
            0, concatenate, sample_method="all", sample_attrs=["state", "action"])
        if size == 0:
            return None
        state, action = sampled
        _, (target_value, advantage) = self.replay_buffer.sample_batch(
            0, True, sample_method="all", sample_attrs=["value", "gae"], additional_concat_attrs=["value", "gae"])
        batch = PolicyBatch(size, state, action, target_value.view(size, 1), advantage.view(size, 1))
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
        batch = self._minibatch(batch)
        if not self.normalize_advantage:
            return batch
        advantage = batch.advantage
        return replace(batch, advantage=(advantage - advantage.mean()) / (advantage.std(correction=0) + 1e-8))

    def _evaluate_policy(self, batch: PolicyBatch) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Log-probabilities ``[B, 1]`` of the stored actions and entropies ``[B, 1]`` (or ``None``)."""
        need_entropy = self.entropy_weight is not None
        _, log_prob, entropy = split_actor_output(
            self._eval_act(batch.state, batch.action), type(self).__name__, need_entropy)
        log_prob = as_column(log_prob, batch.size, "the actor's log_prob output")
        entropy = as_column(entropy, batch.size, "the actor's entropy output") if need_entropy else None
        return log_prob, entropy

    def _policy_loss(self, log_prob: torch.Tensor, old_log_prob: Optional[torch.Tensor],
                     advantage: torch.Tensor) -> torch.Tensor:
        """The policy-gradient loss to minimise: ``-mean(log_prob * advantage)``.

        Args:
            log_prob: Log-probabilities ``[B, 1]`` of the stored actions (with gradient).
            old_log_prob: The same before the update started (``None`` for A2C).
            advantage: Advantages ``[B, 1]``.
        """
        return -(log_prob * advantage.to(log_prob.device)).mean()

    def _actor_loss(self, batch: PolicyBatch, log_prob: torch.Tensor,
                    entropy: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(policy loss + entropy term, policy loss)``."""
        policy_loss = self._policy_loss(log_prob, batch.old_log_prob, batch.advantage)
        if entropy is None:
            return policy_loss, policy_loss
        return policy_loss + self.entropy_weight * entropy.mean(), policy_loss

    def _update_actor(self, batch: PolicyBatch) -> float:
        """One actor step on ``batch``; returns the policy value (minus the policy loss)."""
        loss, policy_loss = self._actor_loss(batch, *self._evaluate_policy(batch))
        self._maybe_visualize(loss, "actor")
        self._optimize(loss, self.actor_optim, self.actor, self.gradient_max)
        return -policy_loss.item()

    def _critic_loss(self, batch: PolicyBatch) -> torch.Tensor:
        value = as_column(split_output(self._criticize(batch.state))[0], batch.size, "the critic output")
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
            return -self._actor_loss(batch, *self._evaluate_policy(batch))[1].item()

    def _evaluate_critic(self, batch: PolicyBatch) -> float:
        """Value loss of ``batch`` without a step (``update_value=False``)."""
        with torch.no_grad():
            return self._critic_loss(batch).item()

    @ignores_extra_args
    def update(self, update_value: bool = True, update_policy: bool = True,
               concatenate_samples: bool = True) -> Optional[Tuple[float, float]]:
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
        actor_step = self._update_actor if update_policy else self._evaluate_actor
        critic_step = self._update_critic if update_value else self._evaluate_critic
        policy_value = sum(actor_step(self._actor_minibatch(batch)) for _ in range(self.actor_update_times))
        value_loss = sum(critic_step(self._minibatch(batch)) for _ in range(self.critic_update_times))
        self.replay_buffer.clear()
        self._set_mode(False, self.actor, self.critic)
        return policy_value / self.actor_update_times, value_loss / self.critic_update_times
