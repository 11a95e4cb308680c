"""Deep Deterministic Policy Gradient, written as hooks that its variants override.

:meth:`DDPG.update` reads like the algorithm: sample a batch, compute the Bellman
target with the target networks, regress the critic(s) onto it, then (when due)
push the actor along the critic's gradient and soft-update the targets. Each step
is a small method, so :class:`~machin.frame.algorithms.ddpg_per.DDPGPer`,
:class:`~machin.frame.algorithms.hddpg.HDDPG` and
:class:`~machin.frame.algorithms.td3.TD3` override only the step that differs.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ...utils.compat import ignores_extra_args
from ..noise.dispatch import DEFAULT_NOISE_PARAM as _DEFAULT_NOISE_PARAM
from ..noise.dispatch import NOISE_DEFAULTS as _NOISE_DEFAULTS  # noqa: F401 (old name, kept importable)
from ..noise.dispatch import NOISE_MODES, resolve_noise_mode
from ..noise.dispatch import noise_adder as _noise_adder
from .base import Driver, TorchFramework, UpdateResult, pack_result, split_output
from .compiled import compilable
from .critics import CriticSet, SoftTargets, critic_action_input, value_column
from .options import ActorCriticOptions, Option, SoftTargetOptions, optional
from .replay import ReplayMixin, SampledBatch
from .utils import assert_output_is_probs, hard_update, safe_call

# NOISE_MODES and resolve_noise_mode live in machin.frame.noise.dispatch, CriticSet in
# .critics; they stay importable from here.
__all__ = ["DDPG", "NOISE_MODES", "resolve_noise_mode"]


def _action_range(name: str, value: Any) -> Tuple[Any, Any]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a (low, high) pair, got {value!r}")
    low, high = (torch.as_tensor(v, dtype=torch.get_default_dtype()) for v in value)
    if not bool((low < high).all()):
        raise ValueError(f"{name} must have low < high in every column, got {value!r}")
    return tuple(value)


class DDPG(ReplayMixin, SoftTargets, ActorCriticOptions, TorchFramework):
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

    The keyword options (``batch_size``, ``discount``, ``update_rate``, ...) are listed
    with their defaults in the signature and documented as attributes below; the schedulers take
    one entry per optimizer, the actor's first, then the critics'.

    Raises:
        ValueError: On an out-of-range option.
    """

    _is_top = ["actor", "critic", "actor_target", "critic_target"]
    _is_restorable = ["actor_target", "critic_target"]
    driver = Driver(
        "act_with_noise", {"noise_param": (0.0, 0.1), "mode": "normal"}, "act", "transition"
    )

    update_rate = SoftTargetOptions.update_rate.but(default=0.001)
    action_range = Option(
        None,
        optional(_action_range),
        "``(low, high)`` bounds of the action (numbers, or "
        "tensors broadcast over the action columns): noisy actions of :meth:`act_with_noise` "
        "and TD3's smoothed target actions are clamped to them; ``None``: not clamped (as "
        "Machin 0.3.4).",
    )

    def __init__(
        self,
        actor: nn.Module,
        actor_target: nn.Module,
        critic: nn.Module,
        critic_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        self._check_criterion(criterion)
        self._check_same_structure(
            actor_target=(actor, actor_target), critic_target=(critic, critic_target)
        )
        self.criterion = criterion

        self.actor, self.actor_target = actor, actor_target
        self.critic, self.critic_target = critic, critic_target
        hard_update(self.actor_target, self.actor)
        hard_update(self.critic_target, self.critic)
        self.actor_optim = self._make_optimizer(optimizer, self.actor, self.actor_learning_rate)
        self.critic_optim = self._make_optimizer(optimizer, self.critic, self.critic_learning_rate)
        self.replay_buffer = self._make_buffer(self._default_buffer)
        #: Calls of :meth:`update` that sampled a batch.
        self.updates_done = 0

    def _optimizers(self):
        return [self.actor_optim] + [c.optimizer for c in self._critics()]

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
    def act_with_noise(
        self,
        state: Dict[str, Any],
        noise_param: Any = _DEFAULT_NOISE_PARAM,
        ratio: float = 1.0,
        mode: str = "uniform",
        use_target: bool = False,
    ) -> Any:
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
        return pack_result(self._clamp_action(add_noise(action)), extras)

    def _clamp_action(self, action: torch.Tensor) -> torch.Tensor:
        """``action`` clamped to ``action_range`` (unchanged without one)."""
        if self.action_range is None:
            return action
        low, high = self.action_range
        return torch.clamp(
            action,
            torch.as_tensor(low, dtype=action.dtype, device=action.device),
            torch.as_tensor(high, dtype=action.dtype, device=action.device),
        )

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

    def criticize(
        self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False
    ) -> Any:
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
        return critic_action_input(raw_output_action)

    # -- update steps -------------------------------------------------------------------
    _value_column = staticmethod(value_column)

    def _critic_value(
        self,
        critic: nn.Module,
        state: Dict[str, Any],
        action: Dict[str, Any],
        size: int,
        name: str = "critic",
    ) -> torch.Tensor:
        return self._value_column(safe_call(critic, state, action), size, name)

    # -- Machin 0.3.4's overridable helpers ------------------------------------------------
    def _act(self, state: Dict[str, Any], use_target: bool = False, **__: Any) -> Any:
        """The actor's raw action (its first output) for ``state``, with gradient; the update
        computes the next actions and the actor loss through it.

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
            use_target: Use the target actor.
        """
        return split_output(safe_call(self.actor_target if use_target else self.actor, state))[0]

    def _criticize(
        self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False, **__: Any
    ) -> torch.Tensor:
        """The critic's value (its first output) of ``action`` in ``state``, with gradient.

        The update picks its critics by name (TD3 and SAC have two), so an override of this
        helper is not used by it: override :meth:`_critic_value` instead (a warning says so).

        Args:
            state: State dict for the critic.
            action: Action dict for the critic.
            use_target: Use the target critic.
        """
        return split_output(
            safe_call(self.critic_target if use_target else self.critic, state, action)
        )[0]

    _legacy_hooks = {"_criticize": "_critic_value(critic, state, action, size, name)"}

    def _target_action(self, batch: SampledBatch) -> Any:
        """The target actor's raw action in the next states (TD3 smooths it with noise)."""
        return self._act(batch.next_state, True)

    def _next_value(self, batch: SampledBatch, next_action: Dict[str, Any]) -> torch.Tensor:
        """Value ``[B, 1]`` of the next state (TD3 takes the minimum of two target critics)."""
        return self._critic_value(
            self.critic_target, batch.next_state, next_action, batch.size, "critic_target"
        )

    def _bellman_target(self, batch: SampledBatch) -> torch.Tensor:
        """The Bellman target ``[B, 1]`` of the critics (no gradient; traced into the compiled critic step)."""
        with torch.no_grad():
            next_action = self.action_transform_function(
                self._target_action(batch), batch.next_state, batch.others
            )
            next_value = self._next_value(batch, next_action)
            device = next_value.device
            return self.reward_function(
                batch.reward.to(device),
                self._discount(batch, device),
                next_value,
                batch.terminal.to(device),
                batch.others,
            )

    @compilable(lambda self: [critic.net for critic in self._critics()], after="_after_value_loss")
    def _critic_losses(self, batch: SampledBatch) -> List[torch.Tensor]:
        """The value loss of every critic against the Bellman target (one compiled step after :meth:`compile`)."""
        target = self._bellman_target(batch)
        return [
            self._value_loss(
                self._critic_value(critic.net, batch.state, batch.action, batch.size, critic.name),
                target,
                batch,
            )
            for critic in self._critics()
        ]

    def _update_critics(self, batch: SampledBatch, step: bool) -> float:
        """Regress every critic onto the Bellman target; returns their mean loss.

        A step skipped for a non-finite loss (see :meth:`TorchFramework._optimize`) ends the
        steps: the critics after it are not stepped either.
        """
        losses = self._critic_losses(batch)
        for critic, loss in zip(self._critics(), losses):
            self._maybe_visualize(loss, critic.name)
            if step:
                step = self._optimize(loss, critic.optimizer, critic.net, self.gradient_max)
        return sum(loss.item() for loss in losses) / len(losses)

    def _policy_step_due(self) -> bool:
        """Whether the current update (number ``updates_done``) moves the actor and the targets.

        A question only (TD3 answers it from ``policy_update_delay``).
        """
        return True

    @compilable(("actor",))
    def _actor_loss(self, batch: SampledBatch) -> torch.Tensor:
        """Minus the mean of ``Q(s, mu(s))`` over ``batch`` (one compiled step after :meth:`compile`)."""
        action = self.action_transform_function(self._act(batch.state), batch.state, batch.others)
        return -self._critic_value(self.critic, batch.state, action, batch.size).mean()

    def _update_actor(self, batch: SampledBatch, step: bool) -> float:
        """Ascend ``Q(s, mu(s))`` when ``step``; returns that mean value either way."""
        with torch.set_grad_enabled(step):
            loss = self._actor_loss(batch)
        if step:
            self._maybe_visualize(loss, "actor")
            self._optimize(loss, self.actor_optim, self.actor, self.gradient_max)
        return -loss.item()

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        update_target: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
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
        skipped = getattr(self, "skipped_updates", 0)
        value_loss = self._update_critics(batch, update_value)
        self.updates_done += 1
        due = self._policy_step_due()
        # A step skipped for a non-finite loss (see TorchFramework._optimize) ends the update:
        # the actor and the targets stay as they are (such an update changes no network).
        clean = getattr(self, "skipped_updates", 0) == skipped
        policy_value = self._update_actor(batch, update_policy and due and clean)
        if update_target and due and getattr(self, "skipped_updates", 0) == skipped:
            self._update_targets()
        self._set_mode(False, *online)
        return UpdateResult(policy_value, value_loss)
