"""Asynchronous advantage actor-critic (A3C): A2C whose optimizer steps happen on gradient servers.

Every process samples and computes the A2C losses on its own data; instead of
stepping local optimizers, each :meth:`A3C.update` sends the resulting gradients, once
per trained network, to a :class:`~machin.parallel.server.PushPullGradServer` (one for
the actor, one for the critic). The servers reduce the gradients of all processes,
step their own copy of each model and publish the new parameters, which every
process pulls back.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from torch import nn

from ...parallel.server import PushPullGradServer
from ...utils.compat import ignores_extra_args
from .a2c import A2C
from .base import UpdateResult
from .options import Option, positive_int

__all__ = ["A3C", "GradPushOptimizer"]


class GradPushOptimizer:
    """Stands in for a local optimizer whose step changes nothing.

    :meth:`TorchFramework._optimize` (zero grads, backward, clip, step) runs as for
    any algorithm and leaves the gradients of the step in ``model``; :meth:`step` only
    records that a step was taken (``stepped``), so that :meth:`A3C.update` knows
    which networks have gradients to push. A step skipped for a non-finite loss
    leaves ``stepped`` as it was.

    Args:
        model: The local model whose gradients are pushed.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.param_groups: list = []  # no local learning rate: the server owns it
        self.stepped = False

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of the local model.

        Args:
            set_to_none: Set the gradients to ``None`` instead of zeroing them.
        """
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """Record that the model holds the gradients of a step (the parameters stay as they are)."""
        self.stepped = True


class A3C(A2C):
    """A2C trained asynchronously by several processes through gradient servers.

    Takes no optimizer: the gradient servers (created with
    :func:`~machin.frame.helpers.servers.grad_server_helper`) own the optimizers and
    learning rates. Each :meth:`update` pushes each trained network's gradients once
    (see there). With syncing on (the default) :meth:`act` first pulls the
    newest actor and :meth:`criticize` the newest critic; turn it off with
    ``set_sync(False)`` and call :meth:`manual_sync` when you choose (e.g. once per
    episode).

    Args:
        actor: Policy network, returning ``(action, log_prob, entropy, *extras)``.
        critic: State-value network.
        criterion: Value loss, called as ``criterion(target[B, 1], predicted[B, 1])``.
        grad_server: ``(actor_server, critic_server)``, two gradient-server accessors.

    The keyword options are A2C's, without the optimizer settings (learning rates and
    schedulers belong to the gradient servers), with ``update_times`` for both iteration counts.

    Raises:
        ValueError: When ``grad_server`` is not a pair of accessors or an option is out of range.
    """

    lr_scheduler = lr_scheduler_args = lr_scheduler_kwargs = None
    driver = None
    driver_unavailable = "it is a distributed algorithm with its own worker loop"
    actor_learning_rate = critic_learning_rate = None
    update_times = Option(
        50,
        positive_int,
        "Accepted as in Machin 0.3.4, which computed the losses of this many "
        "minibatches on unchanged parameters and pushed the last one's gradients; machin "
        "computes and pushes one minibatch's, which is the same push for a fraction of the work.",
    )

    @property
    def actor_update_times(self) -> int:
        """Actor loss evaluations per update: 1 (see ``update_times``)."""
        return 1

    @property
    def critic_update_times(self) -> int:
        """Critic loss evaluations per update: 1 (see ``update_times``)."""
        return 1

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        criterion: Callable,
        grad_server: Tuple[PushPullGradServer, PushPullGradServer],
        *_: Any,
        **options: Any,
    ):
        if not isinstance(grad_server, Sequence) or len(grad_server) != 2:
            raise ValueError(
                f"grad_server must be a pair (actor_server, critic_server) of PushPullGradServer "
                f"accessors, got {grad_server!r}"
            )
        self.grad_server = tuple(grad_server)
        self.is_syncing = True
        super().__init__(actor, critic, None, criterion, *_, **options)

    def _make_optimizer(
        self, optimizer: Any, network: nn.Module, learning_rate: float
    ) -> GradPushOptimizer:
        """A stand-in optimizer for the actor or the critic (``optimizer`` is unused)."""
        return GradPushOptimizer(network)

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
        """Compute the A2C gradients on the stored samples, push them once, then clear the buffer.

        Runs :meth:`A2C.update` once for each network with the local parameters
        fixed (its steps change nothing here, and no pull happens during the update
        whatever :meth:`set_sync` says), which computes the gradients of one
        minibatch. Then these gradients are pushed: the actor's to the actor server
        unless ``update_policy`` is false, the critic's to the critic server unless
        ``update_value`` is false. A push also pulls the newest parameters of that
        network. A network whose every step was skipped (non-finite losses) pushes
        nothing. Arguments and result are :meth:`A2C.update`'s.
        """
        syncing, self.is_syncing = self.is_syncing, False
        for optimizer in (self.actor_optim, self.critic_optim):
            optimizer.stepped = False
        try:
            result = super().update(update_value, update_policy, concatenate_samples)
        finally:
            self.is_syncing = syncing
        for server, network, optimizer in zip(
            self.grad_server, (self.actor, self.critic), (self.actor_optim, self.critic_optim)
        ):
            if optimizer.stepped:
                server.push(network)
        return result

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
    def act(self, state: Dict[str, Any], *, deterministic: bool = False) -> Any:
        """As :meth:`A2C.act <machin.frame.algorithms.a2c.A2C.act>`, pulling the newest actor
        first when syncing.

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
            deterministic: Ask the actor for its most likely action.
        """
        if self.is_syncing:
            self.grad_server[0].pull(self.actor)
        return super().act(state, deterministic=deterministic)

    def criticize(self, state: Dict[str, Any]) -> Any:
        """State values ``[B, 1]`` (pulling the newest critic first when syncing).

        Args:
            state: Keyword inputs of the critic, ``{key: [B, ...]}``.
        """
        if self.is_syncing:
            self.grad_server[1].pull(self.critic)
        return super().criticize(state)
