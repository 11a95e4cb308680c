"""Deep Q-learning: vanilla, fixed-target and double DQN."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch
from torch import nn

from ...utils.compat import ignores_extra_args, warn_caller
from .base import Driver, TorchFramework, pack_result, split_output
from .compiled import compilable
from .options import (
    Option,
    non_negative,
    optional,
    positive,
    positive_int,
    probability,
    unit_interval,
)
from .replay import REQUIRED_ATTRS, ReplayMixin, SampledBatch
from .utils import hard_update, safe_call, soft_update

__all__ = ["DQN", "SampledBatch", "REQUIRED_ATTRS", "BatchDimensionError"]


class BatchDimensionError(ValueError, IndexError):
    """The Q network's output has no batch dimension (a state given without one).

    A ``ValueError``, and an ``IndexError`` (what picking the greedy action raised in Machin 0.3.4).
    """


def _known_mode(name: str, value: Any) -> str:
    """Check of ``mode``, with Machin 0.3.4's phrase."""
    if value not in DQN._modes:
        raise ValueError(f"Unknown DQN mode: {value!r}; {name} must be one of {list(DQN._modes)}")
    return value


class DQN(ReplayMixin, TorchFramework):
    """Deep Q-Network for discrete action spaces.

    ``mode`` selects the target: ``"vanilla"`` bootstraps from the online network
    (which is then also ``qnet_target``), ``"fixed_target"`` from a separate target
    network, and ``"double"`` lets the online network choose the next action and the
    target network evaluate it. A dueling architecture is a property of the network
    and works with every mode.

    Args:
        qnet: Q network: ``forward(<state keys>) -> q_value[B, action_num], <extras>``.
        qnet_target: Target Q network of the same structure (ignored in vanilla mode).
        optimizer: Optimizer class, called as ``optimizer(qnet.parameters(), lr=learning_rate)``.
        criterion: Loss, called as ``criterion(target[B, 1], predicted[B, 1])``.

    The keyword options (``batch_size``, ``discount``, ``mode``, ...) are listed with
    their defaults in the signature, and each is documented as an attribute below.
    """

    _is_top = ["qnet", "qnet_target"]
    _is_restorable = ["qnet_target"]
    driver = Driver("act_discrete_with_noise", {}, "act_discrete", "transition")
    _modes = ("vanilla", "fixed_target", "double")
    #: The mode Machin 0.3.4's class always used whatever ``mode`` said (None: it honoured ``mode``).
    _mode_034: Optional[str] = None
    #: Whether the constructor's ``criterion`` must be a callable (RAINBOW trains without one).
    _criterion_needed: bool = True

    epsilon = Option(
        1.0,
        probability,
        "Exploration rate of :meth:`act_discrete_with_noise`: a number, multiplied "
        "by ``epsilon_decay`` after each exploring call (never below ``epsilon_min``), or a schedule "
        "of the training progress (e.g. ``LinearSchedule(1.0, 0.04, 0.16)``, see "
        ":meth:`set_progress`), which replaces the multiplicative decay.",
        schedulable=True,
    )
    epsilon_decay = Option(
        0.9999, unit_interval, "Factor applied to epsilon after each exploring action."
    )
    epsilon_min = Option(0.0, probability, "Floor of the multiplicative epsilon decay.")
    update_rate = Option(
        0.005,
        optional(unit_interval),
        "Soft target update rate tau (``target = tau * online + (1 - tau) * target``); "
        "``None`` with ``update_steps`` for periodic hard copies.",
    )
    update_steps = Option(
        None,
        optional(positive_int),
        "Copy the online network into the target every this "
        "many updates (only when ``update_rate`` is ``None``).",
    )
    learning_rate = Option(
        0.001,
        positive,
        "Learning rate of the optimizer (or a schedule).",
        schedulable=True,
        schedule_check=non_negative,
    )
    _learning_rate_of = {"learning_rate": ("qnet_optim",)}
    mode = Option(
        "double",
        _known_mode,
        doc='``"vanilla"``, ``"fixed_target"`` or ``"double"``; '
        "checked when set, also after construction (0.3.4 raised at the next update).",
    )

    def __init__(
        self,
        qnet: nn.Module,
        qnet_target: Optional[nn.Module],
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        mode = self.mode
        if self._mode_034 is not None and mode != self._mode_034:
            warn_caller(
                f"{type(self).__name__} trains in mode={mode!r} as asked; note that Machin 0.3.4's "
                f"{type(self).__name__} ignored `mode` and always trained in {self._mode_034!r} mode."
            )
        if (self.update_rate is None) == (self.update_steps is None):
            raise ValueError(
                f"give exactly one of update_rate (soft updates) and update_steps (hard copies), "
                f"got update_rate={self.update_rate!r}, update_steps={self.update_steps!r}"
            )
        if criterion is not None or type(self)._criterion_needed:
            self._check_criterion(criterion)

        self.criterion = criterion
        self._update_counter = 0

        self.qnet = qnet
        if mode == "vanilla":
            self.qnet_target = qnet
        else:
            if qnet_target is None:
                raise ValueError(f"mode {mode!r} needs a qnet_target network")
            self._check_same_structure(qnet_target=(qnet, qnet_target))
            self.qnet_target = qnet_target
            hard_update(self.qnet_target, self.qnet)
        self.qnet_optim = self._make_optimizer(optimizer, self.qnet, self.learning_rate)
        self.replay_buffer = self._make_buffer(self._default_buffer)
        self._uniform = torch.empty(())  # what act_discrete_with_noise draws its epsilon test into

    def _optimizers(self):
        return [self.qnet_optim]

    # -- acting -----------------------------------------------------------------------
    def _q_network(self, use_target: bool) -> nn.Module:
        return self.qnet_target if use_target else self.qnet

    def _greedy_action(self, q_output: torch.Tensor) -> torch.Tensor:
        """Greedy ``[B, 1]`` actions from the network's first output, in a new tensor (exploration may overwrite it)."""
        return q_output.argmax(dim=1, keepdim=True)

    def _act(self, state: Dict[str, Any], use_target: bool):
        self._check_state(state)
        with torch.no_grad():
            output, extras = split_output(safe_call(self._q_network(use_target), state))
        if isinstance(output, torch.Tensor) and output.dim() < 2:
            shapes = {k: list(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
            raise BatchDimensionError(
                f"{type(self._q_network(use_target)).__name__} returned shape {list(output.shape)} for state "
                f"{shapes}, expected [B, action_num]: every state tensor needs a leading batch "
                f"dimension, e.g. tensor[None] or tensor.unsqueeze(0) for a single state"
            )
        return output, extras

    @ignores_extra_args
    def act_discrete(self, state: Dict[str, Any], use_target: bool = False):
        """Greedy action ``[B, 1]`` for ``state``, followed by any extra outputs of the Q network.

        Args:
            state: State dict ``{key: [B, ...]}`` for the Q network.
            use_target: Use the target network instead of the online one.
        """
        output, extras = self._act(state, use_target)
        return pack_result(self._greedy_action(output), extras)

    @ignores_extra_args
    def act_discrete_with_noise(
        self, state: Dict[str, Any], use_target: bool = False, decay_epsilon: bool = True
    ):
        """Epsilon-greedy action ``[B, 1]``, followed by any extra outputs of the Q network.

        Each row is replaced by a uniformly random action with probability
        ``epsilon``; epsilon starts at 1 and is multiplied by ``epsilon_decay`` after
        every call when ``decay_epsilon`` is true.

        Args:
            state: State dict ``{key: [B, ...]}`` for the Q network.
            use_target: Use the target network instead of the online one.
            decay_epsilon: Multiply epsilon by ``epsilon_decay`` after the call.
        """
        output, extras = self._act(state, use_target)
        action = self._greedy_action(output)
        epsilon = self.epsilon
        if action.shape[0] == 1:  # one state (the usual loop): one scalar draw decides
            # The draws of torch.rand(()) and torch.randint_like, from the same generator, without
            # allocating: into a scalar kept for it, and into the new tensor of the greedy action.
            if epsilon > 0.0 and self._uniform.uniform_().item() < epsilon:
                action = action.random_(0, output.shape[1])
        elif epsilon > 0.0:
            explore = torch.rand(action.shape, device=action.device) < epsilon
            if explore.any():
                action = torch.where(explore, torch.randint_like(action, output.shape[1]), action)
        if decay_epsilon and "epsilon" not in self._schedules:  # a schedule replaces the decay
            self.epsilon = max(epsilon * self.epsilon_decay, self.epsilon_min)
        return pack_result(action, extras)

    def criticize(self, state: Dict[str, Any], use_target: bool = False):
        """Q values ``[B, action_num]`` (and extra outputs) for ``state``.

        Args:
            state: State dict ``{key: [B, ...]}`` for the Q network.
            use_target: Evaluate the target network instead of the online one.
        """
        self._check_state(state)
        with torch.no_grad():
            return safe_call(self._q_network(use_target), state)

    # -- hooks a user may override ----------------------------------------------------
    @staticmethod
    def action_get_function(sampled_actions: Dict[str, Any]) -> torch.Tensor:
        """Pick the integer action tensor out of the sampled action dict (key ``"action"``).

        Args:
            sampled_actions: The action dict of a sampled batch.
        """
        return sampled_actions["action"]

    # -- Machin 0.3.4's overridable helpers: the update computes its Q values through them --
    def _criticize(
        self, state: Dict[str, Any], use_target: bool = False, **__: Any
    ) -> torch.Tensor:
        """Q values ``[B, action_num]`` of ``state`` (the Q network's first output), with gradient.

        Args:
            state: State dict ``{key: [B, ...]}`` for the Q network.
            use_target: Evaluate the target network instead of the online one.
        """
        return split_output(safe_call(self._q_network(use_target), state))[0]

    def _act_discrete(
        self, state: Dict[str, Any], use_target: bool = False, **__: Any
    ) -> torch.Tensor:
        """Greedy actions ``[B, 1]`` for ``state`` (double DQN picks its next actions with it).

        Args:
            state: State dict ``{key: [B, ...]}`` for the Q network.
            use_target: Use the target network instead of the online one.
        """
        return self._greedy_action(self._criticize(state, use_target))

    # -- update -----------------------------------------------------------------------
    def _next_value(self, batch: SampledBatch) -> torch.Tensor:
        """Value ``[B, 1]`` of the next state under the mode's target rule (no gradient)."""
        target_q = self._criticize(batch.next_state, True)
        if self.mode == "double":
            next_action = self._act_discrete(batch.next_state).to(target_q.device)
            return target_q.gather(1, next_action)
        return target_q.max(dim=1, keepdim=True).values

    def _bellman_target(self, batch: SampledBatch) -> torch.Tensor:
        with torch.no_grad():
            next_value = self._next_value(batch)
            device = next_value.device
            return self.reward_function(
                batch.reward.to(device),
                self._discount(batch, device),
                next_value,
                batch.terminal.to(device),
                batch.others,
            )

    def _predicted_value(self, batch: SampledBatch) -> torch.Tensor:
        q = self._criticize(batch.state)
        action = self.action_get_function(batch.action).to(device=q.device, dtype=torch.long)
        if action.dim() != 2:
            action = action.view(batch.size, 1)
        return q.gather(1, action)

    @compilable(("qnet",), after="_after_value_loss")
    def _td_loss(self, batch: SampledBatch) -> torch.Tensor:
        """The value loss of ``qnet`` on ``batch`` (one compiled step after :meth:`compile`)."""
        target = self._bellman_target(batch)
        return self._value_loss(self._predicted_value(batch), target, batch)

    def _update_targets(self) -> None:
        if self.mode == "vanilla":
            return
        if self.update_rate is not None:
            soft_update(self.qnet_target, self.qnet, self.update_rate)
        elif self._update_counter % self.update_steps == 0:
            hard_update(self.qnet_target, self.qnet)

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_target: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[float]:
        """Sample a batch, take one optimizer step on the TD loss and update the target.

        Args:
            update_value: Take the optimizer step on ``qnet``.
            update_target: Update ``qnet_target`` (soft update, or hard copy every ``update_steps``).
            concatenate_samples: Concatenate the sampled states into batched tensors
                (``False`` hands the networks per-sample lists).

        Returns:
            The value loss as a float, or ``None`` when the buffer is empty.
        """
        batch = self._sample(concatenate_samples)
        if batch is None:
            return None
        self._set_mode(True, self.qnet)
        loss = self._td_loss(batch)
        self._maybe_visualize(loss, "qnet")
        skipped = getattr(self, "skipped_updates", 0)
        if update_value:
            self._optimize(loss, self.qnet_optim, self.qnet, self.gradient_max)
            self._update_counter += 1
        # A step skipped for a non-finite loss (see TorchFramework._optimize) moves no target either.
        if update_target and getattr(self, "skipped_updates", 0) == skipped:
            self._update_targets()
        self._set_mode(False, self.qnet)
        return loss.item()

    def _post_load(self) -> None:
        hard_update(self.qnet, self.qnet_target)
