"""Deep Deterministic Policy Gradient, written as hooks that its variants override.

:meth:`DDPG.update` reads like the algorithm: sample a batch, compute the Bellman
target with the target networks, regress the critic(s) onto it, then (when due)
push the actor along the critic's gradient and soft-update the targets. Each step
is a small method, so :class:`~machin.frame.algorithms.ddpg_per.DDPGPer`,
:class:`~machin.frame.algorithms.hddpg.HDDPG` and
:class:`~machin.frame.algorithms.td3.TD3` override only the step that differs.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from ..noise.action_space_noise import (
    add_clipped_normal_noise_to_action,
    add_normal_noise_to_action,
    add_ou_noise_to_action,
    add_uniform_noise_to_action,
)
from .base import TorchFramework, pack_result, split_output
from .replay import ReplayMixin, SampledBatch
from .utils import as_column, assert_output_is_probs, hard_update, safe_call, soft_update

__all__ = ["DDPG", "NOISE_MODES", "resolve_noise_mode"]

# The documented default of ``act_with_noise(noise_param=...)``. It fits the
# "uniform" and "normal" modes; left untouched, the other modes use their own
# defaults instead (``_NOISE_DEFAULTS``).
_DEFAULT_NOISE_PARAM = (0.0, 1.0)
_NOISE_DEFAULTS = {"clipped_normal": (0.0, 1.0, -1.0, 1.0), "ou": None}

#: ``act_with_noise`` mode -> the function of :mod:`machin.frame.noise.action_space_noise` it uses.
NOISE_MODES: Dict[str, Callable[..., torch.Tensor]] = {
    "uniform": add_uniform_noise_to_action,
    "normal": add_normal_noise_to_action,
    "clipped_normal": add_clipped_normal_noise_to_action,
    "ou": add_ou_noise_to_action,
}


def resolve_noise_mode(mode: str, noise_param: Any) -> Tuple[Callable[..., torch.Tensor], Any]:
    """Return the noise function of an ``act_with_noise`` mode and the parameters to pass it.

    A ``noise_param`` left at the documented default ``(0.0, 1.0)`` becomes the mode's
    own default (``(0, 1, -1, 1)`` for ``"clipped_normal"``, ``None`` for ``"ou"``).

    Raises:
        ValueError: When ``mode`` is not one of :data:`NOISE_MODES`.
    """
    add_noise = NOISE_MODES.get(mode)
    if add_noise is None:
        raise ValueError(f"Unknown noise type: {mode!r}; mode must be one of {list(NOISE_MODES)}")
    if noise_param is _DEFAULT_NOISE_PARAM:
        noise_param = _NOISE_DEFAULTS.get(mode, noise_param)
    return add_noise, noise_param


def _noise_adder(mode: str, noise_param: Any, ratio: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f(action) -> noisy action`` for one ``act_with_noise`` call; its errors name the mode."""
    add_noise, noise_param = resolve_noise_mode(mode, noise_param)

    def add(action: torch.Tensor) -> torch.Tensor:
        try:
            return add_noise(action, noise_param, ratio)
        except (ValueError, TypeError) as error:  # the noise function says what it expects; add the mode
            raise type(error)(f"act_with_noise(mode={mode!r}): {error}") from error

    return add


class CriticSet(NamedTuple):
    """One trained critic: its attribute name, the network, its target and its optimizer."""

    name: str
    net: nn.Module
    target: nn.Module
    optimizer: torch.optim.Optimizer


class DDPG(ReplayMixin, TorchFramework):
    """Deep Deterministic Policy Gradient for continuous (or probability-vector) actions.

    The actor maps states to actions; the critic maps states and actions to a value
    ``[B, 1]``. The critic regresses onto ``r + discount * (1 - terminal) * Q'(s', mu'(s'))``
    computed with the target networks; the actor ascends ``Q(s, mu(s))``; targets follow
    their online networks by soft updates.

    Networks are called by keyword (see :func:`~machin.frame.algorithms.utils.safe_call`):
    the keys of the state dictionaries name the actor's ``forward`` arguments, and the
    critic receives the state keys plus the keys of the action dictionary (``"action"``
    by default, see :meth:`action_transform_function`).

    Args:
        actor: Actor: ``forward(<state keys>) -> action[B, action_dim], <extras>``; for
            :meth:`act_discrete` it returns probabilities ``[B, action_num]``.
        actor_target: Target actor of the same structure (hard-copied from ``actor``).
        critic: Critic: ``forward(<state keys>, action) -> value[B, 1], <extras>``.
        critic_target: Target critic of the same structure (hard-copied from ``critic``).
        optimizer: Optimizer class, called as ``optimizer(net.parameters(), lr=...)`` once
            for the actor and once for every critic.
        criterion: Value loss, called as ``criterion(target[B, 1], predicted[B, 1])``,
            e.g. ``nn.MSELoss()``.
        lr_scheduler: Scheduler class, called once per optimizer (actor first, then the
            critics) as ``lr_scheduler(optimizer_i, *lr_scheduler_args[i], **lr_scheduler_kwargs[i])``.
        lr_scheduler_args: One tuple of positional arguments per optimizer,
            e.g. ``((actor_lr_func,), (critic_lr_func,))``.
        lr_scheduler_kwargs: One dict of keyword arguments per optimizer.
        batch_size: Transitions sampled per update.
        update_rate: Soft update rate tau: ``target = tau * online + (1 - tau) * target``.
        actor_learning_rate: Learning rate of the actor optimizer.
        critic_learning_rate: Learning rate of the critic optimizer(s).
        discount: Discount factor gamma.
        gradient_max: Maximum gradient norm of each network (``inf``: no clipping).
        replay_size: Capacity of the default replay buffer.
        replay_device: Device of the default replay buffer.
        replay_buffer: A buffer to use instead of the default one (``replay_size`` and
            ``replay_device`` are then ignored).
        visualize: Draw the graph of each loss on the first update.
        visualize_dir: Directory for those drawings.
        n_step: Learn from n-step returns; ``n_step > 1`` needs whole episodes
            (:meth:`store_episode`), see :func:`~machin.frame.algorithms.returns.n_step_episode`.

    Raises:
        ValueError: On an out-of-range option.
    """

    _is_top = ["actor", "critic", "actor_target", "critic_target"]
    _is_restorable = ["actor_target", "critic_target"]

    @ignores_extra_args
    def __init__(
        self,
        actor: nn.Module,
        actor_target: nn.Module,
        critic: nn.Module,
        critic_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *,
        lr_scheduler: Optional[Callable] = None,
        lr_scheduler_args: Optional[Sequence[Sequence]] = None,
        lr_scheduler_kwargs: Optional[Sequence[Dict[str, Any]]] = None,
        batch_size: int = 100,
        update_rate: float = 0.001,
        actor_learning_rate: float = 0.0005,
        critic_learning_rate: float = 0.001,
        discount: float = 0.99,
        gradient_max: float = math.inf,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        replay_buffer: Optional[Buffer] = None,
        visualize: bool = False,
        visualize_dir: str = "",
        n_step: int = 1,
    ):
        super().__init__(visualize=visualize, visualize_dir=visualize_dir)
        if not 0 < update_rate <= 1:
            raise ValueError(f"update_rate must be in (0, 1], got {update_rate!r}")
        if not 0 <= discount <= 1:
            raise ValueError(f"discount must be in [0, 1], got {discount!r}")
        self._check_positive(batch_size=batch_size, actor_learning_rate=actor_learning_rate,
                             critic_learning_rate=critic_learning_rate, gradient_max=gradient_max)
        self._check_criterion(criterion)
        self._check_same_structure(actor_target=(actor, actor_target), critic_target=(critic, critic_target))
        self.batch_size = batch_size
        self.update_rate = update_rate
        self.discount = discount
        self.n_step = self._check_n_step(n_step)
        self.gradient_max = gradient_max
        self.criterion = criterion

        self.actor, self.actor_target = actor, actor_target
        self.critic, self.critic_target = critic, critic_target
        hard_update(self.actor_target, self.actor)
        hard_update(self.critic_target, self.critic)
        self.actor_optim = self._make_optimizer(optimizer, self.actor, actor_learning_rate)
        self.critic_optim = self._make_optimizer(optimizer, self.critic, critic_learning_rate)
        self._init_lr_schedulers(lr_scheduler, lr_scheduler_args, lr_scheduler_kwargs,
                                 [self.actor_optim, self.critic_optim])
        self.replay_buffer = self._make_buffer(
            replay_buffer, lambda: self._default_buffer(replay_size, replay_device))

    def _critics(self) -> List[CriticSet]:
        """Every critic the algorithm trains (TD3 adds its second one)."""
        return [CriticSet("critic", self.critic, self.critic_target, self.critic_optim)]

    def _online_target_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        return [(self.actor, self.actor_target)] + [(c.net, c.target) for c in self._critics()]

    # -- acting -----------------------------------------------------------------------
    def _actor_output(self, state: Dict[str, Any], use_target: bool):
        self._check_state(state)
        with torch.no_grad():
            return safe_call(self.actor_target if use_target else self.actor, state)

    @ignores_extra_args
    def act(self, state: Dict[str, Any], use_target: bool = False) -> Any:
        """Return the actor's output for ``state`` unchanged (a tuple if it returns several values).

        Args:
            state: Keyword inputs of the actor, tensors of shape ``[B, ...]``.
            use_target: Use ``actor_target`` instead of ``actor``.
        """
        return self._actor_output(state, use_target)

    @ignores_extra_args
    def act_with_noise(self, state: Dict[str, Any], noise_param: Any = _DEFAULT_NOISE_PARAM,
                       ratio: float = 1.0, mode: str = "uniform", use_target: bool = False) -> Any:
        """Return the actor's action plus exploration noise, then the actor's extra outputs.

        Args:
            state: Keyword inputs of the actor.
            noise_param: Noise parameters in the form ``mode`` expects: ``(min, max)`` for
                ``"uniform"``, ``(mean, sigma)`` for ``"normal"``,
                ``(mean, sigma, clip_min, clip_max)`` for ``"clipped_normal"`` (each may
                instead be a list of one tuple per action column), and a dict of
                :class:`~machin.frame.noise.generator.OrnsteinUhlenbeckNoiseGen` keyword
                arguments or ``None`` for ``"ou"``. Left at its default, the
                ``"clipped_normal"`` and ``"ou"`` modes use their own defaults
                (``(0, 1, -1, 1)`` and ``None``). The ``"ou"`` generator is shared and
                its parameters only apply when it is created (see
                :func:`~machin.frame.noise.action_space_noise.add_ou_noise_to_action`).
            ratio: Factor applied to the sampled noise.
            mode: ``"uniform"``, ``"normal"``, ``"clipped_normal"`` or ``"ou"``.
            use_target: Use ``actor_target`` instead of ``actor``.

        Returns:
            The noisy action ``[B, action_dim]``, followed by the actor's extra outputs.

        Raises:
            ValueError: When ``mode`` is unknown or ``noise_param`` does not fit it.
        """
        add_noise = _noise_adder(mode, noise_param, ratio)
        action, extras = split_output(self._actor_output(state, use_target))
        return pack_result(add_noise(action), extras)

    def _probabilities(self, state: Dict[str, Any], use_target: bool):
        probs, extras = split_output(self._actor_output(state, use_target))
        assert_output_is_probs(probs)
        return probs, extras

    @ignores_extra_args
    def act_discrete(self, state: Dict[str, Any], use_target: bool = False) -> Any:
        """Most probable action for an actor that outputs action probabilities.

        Args:
            state: Keyword inputs of the actor, which must return ``[B, action_num]``
                probabilities (non-negative rows summing to 1).
            use_target: Use ``actor_target`` instead of ``actor``.

        Returns:
            ``(action [B, 1], probabilities [B, action_num], *extras)``.

        Raises:
            ValueError: When the actor's output is not a batch of probability rows.
        """
        probs, extras = self._probabilities(state, use_target)
        return pack_result((probs.argmax(dim=1, keepdim=True), probs), extras)

    @ignores_extra_args
    def act_discrete_with_noise(self, state: Dict[str, Any], use_target: bool = False) -> Any:
        """Like :meth:`act_discrete`, but the action is sampled from the probabilities.

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
            use_target: Use the target actor instead of the online one.
        """
        probs, extras = self._probabilities(state, use_target)
        return pack_result((torch.multinomial(probs, 1), probs), extras)

    def criticize(self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False) -> Any:
        """Return the critic's output (value ``[B, 1]`` and extras) for ``state`` and ``action``.

        Args:
            state: Keyword inputs of the critic (the state keys).
            action: Action dictionary, e.g. ``{"action": tensor}``.
            use_target: Use ``critic_target`` instead of ``critic``.
        """
        with torch.no_grad():
            return safe_call(self.critic_target if use_target else self.critic, state, action)

    # -- hooks a user may override ----------------------------------------------------
    @staticmethod
    def action_transform_function(raw_output_action: Any, *_: Any) -> Dict[str, Any]:
        """Turn the actor's action into the critic's action input (default ``{"action": raw}``).

        It is called with the raw action, then the (next) state dictionary and the
        dictionary of custom attributes of the sampled batch, and must return a
        dictionary shaped like the stored ``Transition.action``.

        Args:
            raw_output_action: The actor's action output.
        """
        return {"action": raw_output_action}

    # -- update steps -------------------------------------------------------------------
    @staticmethod
    def _value_column(output: Any, size: int, network: str) -> torch.Tensor:
        return as_column(split_output(output)[0], size, f"{network} output")

    def _q(self, critic: nn.Module, state: Dict[str, Any], action: Dict[str, Any], size: int,
           name: str = "critic") -> torch.Tensor:
        return self._value_column(safe_call(critic, state, action), size, name)

    def _target_action(self, batch: SampledBatch) -> Any:
        """The target actor's raw action in the next states (TD3 smooths it with noise)."""
        return split_output(safe_call(self.actor_target, batch.next_state))[0]

    def _target_value(self, batch: SampledBatch, next_action: Dict[str, Any]) -> torch.Tensor:
        """Value ``[B, 1]`` of the next state (TD3 takes the minimum of two target critics)."""
        return self._q(self.critic_target, batch.next_state, next_action, batch.size, "critic_target")

    def _bellman_target(self, batch: SampledBatch) -> torch.Tensor:
        with torch.no_grad():
            next_action = self.action_transform_function(self._target_action(batch), batch.next_state,
                                                         batch.others)
            next_value = self._target_value(batch, next_action)
            device = next_value.device
            return self.reward_function(batch.reward.to(device), self._discount(batch, device), next_value,
                                        batch.terminal.to(device), batch.others)

    def _update_critics(self, batch: SampledBatch, target: torch.Tensor, step: bool) -> float:
        """Regress every critic onto ``target``; returns their mean loss."""
        losses = []
        for critic in self._critics():
            value = self._q(critic.net, batch.state, batch.action, batch.size, critic.name)
            loss = self._value_loss(value, target, batch)
            self._maybe_visualize(loss, critic.name)
            if step:
                self._optimize(loss, critic.optimizer, critic.net, self.gradient_max)
            losses.append(loss.item())
        return sum(losses) / len(losses)

    def _should_update_policy(self) -> bool:
        """Whether this update moves the actor and the targets (TD3 delays them)."""
        return True

    def _update_actor(self, batch: SampledBatch, step: bool) -> float:
        """Ascend ``Q(s, mu(s))`` when ``step``; returns that mean value either way."""
        with torch.set_grad_enabled(step):
            raw, _ = split_output(safe_call(self.actor, batch.state))
            action = self.action_transform_function(raw, batch.state, batch.others)
            policy_value = self._q(self.critic, batch.state, action, batch.size).mean()
        if step:
            loss = -policy_value
            self._maybe_visualize(loss, "actor")
            self._optimize(loss, self.actor_optim, self.actor, self.gradient_max)
        return policy_value.item()

    def _update_targets(self) -> None:
        for online, target in self._online_target_pairs():
            soft_update(target, online, self.update_rate)

    @ignores_extra_args
    def update(self, update_value: bool = True, update_policy: bool = True, update_target: bool = True,
               concatenate_samples: bool = True) -> Optional[Tuple[float, float]]:
        """Sample a batch and take one training step.

        Args:
            update_value: Take an optimizer step on the critic(s).
            update_policy: Take an optimizer step on the actor (when due).
            update_target: Soft-update the target networks (when due).
            concatenate_samples: Hand the networks batched tensors (``False``: per-sample lists).

        Returns:
            ``(mean policy value, value loss)`` as floats, or ``None`` when the replay
            buffer is empty. The policy value is ``Q(s, mu(s))`` averaged over the batch.
        """
        batch = self._sample(concatenate_samples)
        if batch is None:
            return None
        online = [net for net, _ in self._online_target_pairs()]
        self._set_mode(True, *online)
        target = self._bellman_target(batch)
        skipped = getattr(self, "skipped_updates", 0)
        value_loss = self._update_critics(batch, target, update_value)
        due = self._should_update_policy()
        policy_value = self._update_actor(batch, update_policy and due)
        # A step skipped for a non-finite loss (see TorchFramework._optimize) moves no target either.
        if update_target and due and getattr(self, "skipped_updates", 0) == skipped:
            self._update_targets()
        self._set_mode(False, *online)
        return policy_value, value_loss

    def _post_load(self) -> None:
        for online, target in self._online_target_pairs():
            hard_update(online, target)
