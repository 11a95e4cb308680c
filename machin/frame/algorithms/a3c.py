"""Asynchronous advantage actor-critic (A3C): A2C whose optimizer steps happen on gradient servers.

Every process samples, computes the A2C losses on its own data and, instead of
stepping a local optimizer, pushes its gradients to a
:class:`~machin.parallel.server.PushPullGradServer` (one for the actor, one for the
critic). The servers reduce the gradients of all processes, step their own copy of
each model and publish the new parameters, which every process pulls back.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ...parallel.server import PushPullGradServer
from ...utils.compat import ignores_extra_args
from ..buffers import Buffer
from .a2c import A2C

__all__ = ["A3C", "GradPushOptimizer"]


class GradPushOptimizer:
    """Stands in for a local optimizer: :meth:`step` sends the gradients to a gradient server.

    It lets :meth:`TorchFramework._optimize` (zero grads, backward, clip, step) run
    unchanged, the step being a push of ``model``'s gradients followed by a pull of
    the newest parameters.

    Args:
        server: Accessor of the gradient server managing the model.
        model: The local model whose gradients are pushed.
    """

    def __init__(self, server: PushPullGradServer, model: nn.Module):
        self.server = server
        self.model = model
        self.param_groups: list = []  # no local learning rate: the server owns it

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of the local model.

        Args:
            set_to_none: Set the gradients to ``None`` instead of zeroing them.
        """
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """Push the gradients to the server, then pull the newest parameters."""
        self.server.push(self.model)


class A3C(A2C):
    """A2C trained asynchronously by several processes through gradient servers.

    Takes no optimizer: the gradient servers (created with
    :func:`~machin.frame.helpers.servers.grad_server_helper`) own the optimizers and
    learning rates. Each :meth:`update` runs ``update_times`` actor steps and
    ``update_times`` critic steps; every step pushes the local gradients and pulls
    the parameters back. With syncing on (the default) :meth:`act` first pulls the
    newest actor and :meth:`criticize` the newest critic; turn it off with
    ``set_sync(False)`` and call :meth:`manual_sync` when you choose (e.g. once per
    episode).

    Args:
        actor: Policy network, returning ``(action, log_prob, entropy, *extras)``.
        critic: State-value network.
        criterion: Value loss, called as ``criterion(target[B, 1], predicted[B, 1])``.
        grad_server: ``(actor_server, critic_server)``, two gradient-server accessors.
        batch_size: Samples per training step (all stored samples when fewer).
        entropy_weight: See :class:`~machin.frame.algorithms.a2c.A2C`.
        value_weight: Factor on the critic loss.
        gradient_max: Maximum gradient norm before a push (``inf``: no clipping).
        gae_lambda: GAE lambda in ``[0, 1]``.
        discount: Discount factor in ``[0, 1]``.
        update_times: Actor steps and critic steps per :meth:`update`.
        normalize_advantage: Standardize the advantages of each training batch.
        replay_size: Capacity of the default (local) buffer.
        replay_device: Device of the default buffer.
        replay_buffer: A buffer to use instead of the default one.
        visualize: Draw each loss graph on the first update.
        visualize_dir: Where to write the drawings.

    Raises:
        ValueError: When ``grad_server`` is not a pair of accessors or an option is out of range.
    """

    @ignores_extra_args
    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        criterion: Callable,
        grad_server: Tuple[PushPullGradServer, PushPullGradServer],
        *,
        batch_size: int = 100,
        entropy_weight: Optional[float] = None,
        value_weight: float = 0.5,
        gradient_max: float = math.inf,
        gae_lambda: float = 1.0,
        discount: float = 0.99,
        update_times: int = 50,
        normalize_advantage: bool = True,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        replay_buffer: Optional[Buffer] = None,
        visualize: bool = False,
        visualize_dir: str = "",
    ):
        if not isinstance(grad_server, Sequence) or len(grad_server) != 2:
            raise ValueError(
                f"grad_server must be a pair (actor_server, critic_server) of PushPullGradServer "
                f"accessors, got {grad_server!r}"
            )
        self.grad_server = tuple(grad_server)
        self.is_syncing = True
        super().__init__(
            actor, critic, None, criterion,
            batch_size=batch_size, actor_update_times=update_times, critic_update_times=update_times,
            entropy_weight=entropy_weight, value_weight=value_weight, gradient_max=gradient_max,
            gae_lambda=gae_lambda, discount=discount, normalize_advantage=normalize_advantage,
            replay_size=replay_size, replay_device=replay_device, replay_buffer=replay_buffer,
            visualize=visualize, visualize_dir=visualize_dir,
        )

    def _make_optimizer(self, optimizer: Any, network: nn.Module, learning_rate: float) -> GradPushOptimizer:
        """A push-to-server "optimizer" for the actor or the critic (``optimizer`` is unused)."""
        server = self.grad_server[0] if network is self.actor else self.grad_server[1]
        return GradPushOptimizer(server, network)

    # -- syncing ------------------------------------------------------------------------
    def set_sync(self, is_syncing: bool) -> None:
        """Turn the automatic pull before :meth:`act` / :meth:`criticize` on or off.

        Args:
            is_syncing: ``True`` to pull the newest parameters before every call.
        """
        self.is_syncing = bool(is_syncing)

    def manual_sync(self) -> None:
        """Pull the newest actor and critic parameters from the servers."""
        self.grad_server[0].pull(self.actor)
        self.grad_server[1].pull(self.critic)

    @ignores_extra_args
    def act(self, state: Dict[str, Any]) -> Any:
        """Sample an action (pulling the newest actor first when syncing).

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
        """
        if self.is_syncing:
            self.grad_server[0].pull(self.actor)
        return super().act(state)

    def criticize(self, state: Dict[str, Any]) -> Any:
        """State values ``[B, 1]`` (pulling the newest critic first when syncing).

        Args:
            state: Keyword inputs of the critic, ``{key: [B, ...]}``.
        """
        if self.is_syncing:
            self.grad_server[1].pull(self.critic)
        return super().criticize(state)
