"""Asynchronous advantage actor-critic (A3C): A2C whose optimizer steps happen on gradient servers.

Every process samples, computes the A2C losses on its own data and, instead of
stepping a local optimizer, pushes its gradients to a
:class:`~machin.parallel.server.PushPullGradServer` (one for the actor, one for the
critic). The servers reduce the gradients of all processes, step their own copy of
each model and publish the new parameters, which every process pulls back.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Sequence, Tuple

from torch import nn

from ...parallel.server import PushPullGradServer
from ...utils.compat import ignores_extra_args
from .a2c import A2C
from .options import Option, positive_int

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

    The keyword options are A2C's, without the optimizer settings (learning rates and
    schedulers belong to the gradient servers), with ``update_times`` for both step counts.

    Raises:
        ValueError: When ``grad_server`` is not a pair of accessors or an option is out of range.
    """

    lr_scheduler = lr_scheduler_args = lr_scheduler_kwargs = None
    driver = None
    driver_unavailable = "it is a distributed algorithm with its own worker loop"
    actor_learning_rate = critic_learning_rate = None
    update_times = Option(50, positive_int, "Actor steps and critic steps per :meth:`update`.")

    @property
    def actor_update_times(self) -> int:
        """Actor steps per update: ``update_times``."""
        return self.update_times

    @property
    def critic_update_times(self) -> int:
        """Critic steps per update: ``update_times``."""
        return self.update_times

    def __init__(self, actor: nn.Module, critic: nn.Module, criterion: Callable,
                 grad_server: Tuple[PushPullGradServer, PushPullGradServer]):
        if not isinstance(grad_server, Sequence) or len(grad_server) != 2:
            raise ValueError(
                f"grad_server must be a pair (actor_server, critic_server) of PushPullGradServer "
                f"accessors, got {grad_server!r}"
            )
        self.grad_server = tuple(grad_server)
        self.is_syncing = True
        super().__init__(actor, critic, None, criterion)

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
