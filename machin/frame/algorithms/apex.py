"""Ape-X: prioritized replay spread over many samplers, trained by a learner.

Samplers (workers) act and store transitions in their own part of a
:class:`~machin.frame.buffers.DistributedPrioritizedBuffer`; learners sample
across every part, send the new priorities back to the parts the samples came
from, and push the trained network to a
:class:`~machin.parallel.server.PushPullModelServer`, from which samplers pull it.

:class:`DQNApex` extends :class:`~machin.frame.algorithms.dqn_per.DQNPer` and
:class:`DDPGApex` extends :class:`~machin.frame.algorithms.ddpg_per.DDPGPer`; both
only add the distributed buffer, the pull before acting and the push after
updating (:class:`ApexMixin`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ...parallel.distributed.rpc_group import RpcGroup
from ...parallel.server import PushPullModelServer
from ...utils.compat import ignores_extra_args, warn_caller
from ..buffers.prioritized_buffer_d import DistributedPrioritizedBuffer
from .ddpg_per import DDPGPer
from .dqn_per import DQNPer
from .utils import first_model_server

__all__ = ["ApexMixin", "DQNApex", "DDPGApex"]


class ApexMixin:
    """Distributed buffer, model pushes and pulls shared by the Ape-X algorithms.

    The host names the network it shares in ``_shared_network`` (an attribute name).
    """

    _shared_network = ""

    def _apex_buffer(self, apex_group: RpcGroup, replay_size: int) -> DistributedPrioritizedBuffer:
        """This process's part of the group-wide prioritized buffer."""
        return DistributedPrioritizedBuffer(type(self).__name__.lower() + "_buffer", apex_group, replay_size)

    def _init_apex(self, apex_group: RpcGroup, model_server: Any, replay_device: Any) -> None:
        # Distributed buffers keep their transitions on the CPU (they travel over RPC);
        # Machin 0.3.4 ignored replay_device here as well.
        if str(replay_device) != "cpu":
            warn_caller(
                f"{type(self).__name__} ignores replay_device={str(replay_device)!r}: its distributed "
                f"buffer always stores transitions on the CPU (as in Machin 0.3.4)."
            )
        self.apex_group = apex_group
        self.model_server = (first_model_server(model_server, type(self).__name__),)
        self.is_syncing = True

    def set_sync(self, is_syncing: bool) -> None:
        """Turn the automatic pull of the shared network before acting on or off.

        Args:
            is_syncing: ``True`` to pull the newest parameters before every act call.
        """
        self.is_syncing = bool(is_syncing)

    def manual_sync(self) -> bool:
        """Load the newest shared network from the model server.

        Returns:
            ``False`` when no learner has pushed yet (the network is unchanged).
        """
        return self.model_server[0].pull(getattr(self, self._shared_network))

    def _maybe_sync(self) -> None:
        if self.is_syncing:
            self.manual_sync()

    def _push(self) -> None:
        """Publish the shared network (a learner calls it after each update)."""
        self.model_server[0].push(getattr(self, self._shared_network))


class DQNApex(ApexMixin, DQNPer):
    """Double DQN with prioritized replay spread over an RPC group (Ape-X DQN).

    Every member of ``apex_group`` holds a part of the replay buffer (``replay_size``
    transitions at most each; ``replay_buffer.all_size()`` counts them all).
    Samplers call ``act_discrete*`` and ``store_*``; the learner (one, or several
    wrapped in ``DistributedDataParallel`` that all call :meth:`update`) trains.
    With syncing on, :meth:`act_discrete`, :meth:`act_discrete_with_noise` and
    :meth:`criticize` first pull the newest ``qnet``; :meth:`update` pushes it.

    The criterion must return one loss per sample, e.g. ``nn.MSELoss(reduction="none")``
    (see :class:`~machin.frame.algorithms.dqn_per.DQNPer`).

    Args:
        qnet: Q network.
        qnet_target: Target Q network.
        optimizer: Optimizer class.
        criterion: Per-sample loss.
        apex_group: RPC group of every sampler and learner.
        model_server: Tuple whose first element is the :class:`PushPullModelServer`
            accessor of ``qnet`` (further elements are ignored).
        lr_scheduler: See :class:`~machin.frame.algorithms.dqn.DQN`.
        lr_scheduler_args: See :class:`~machin.frame.algorithms.dqn.DQN`.
        lr_scheduler_kwargs: See :class:`~machin.frame.algorithms.dqn.DQN`.
        batch_size: Transitions per update, sampled across the group.
        epsilon_decay: See :class:`~machin.frame.algorithms.dqn.DQN`.
        update_rate: Soft-update rate of the target network.
        update_steps: Hard-update period (with ``update_rate=None``).
        learning_rate: Learning rate.
        discount: Discount factor.
        gradient_max: Maximum gradient norm.
        replay_size: Capacity of this process's part of the buffer.
        replay_device: Ignored (with a warning unless ``"cpu"``): the distributed buffer
            always stores its transitions on the CPU.
        mode: See :class:`~machin.frame.algorithms.dqn.DQN`.
        n_step: See :class:`~machin.frame.algorithms.dqn.DQN`.
        visualize: Draw the loss graph on the first update.
        visualize_dir: Where to write the drawing.

    Raises:
        ValueError: When ``model_server`` holds no accessor, the process is not a
            member of ``apex_group``, or an option is out of range.
    """

    _shared_network = "qnet"

    @ignores_extra_args
    def __init__(
        self,
        qnet: nn.Module,
        qnet_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        apex_group: RpcGroup,
        model_server: Tuple[PushPullModelServer],
        *,
        lr_scheduler: Optional[Callable] = None,
        lr_scheduler_args: tuple = (),
        lr_scheduler_kwargs: tuple = (),
        batch_size: int = 100,
        epsilon_decay: float = 0.9999,
        update_rate: Optional[float] = 0.005,
        update_steps: Optional[int] = None,
        learning_rate: float = 0.001,
        discount: float = 0.99,
        gradient_max: float = math.inf,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        mode: str = "double",
        n_step: int = 1,
        visualize: bool = False,
        visualize_dir: str = "",
    ):
        self._init_apex(apex_group, model_server, replay_device)
        super().__init__(
            qnet, qnet_target, optimizer, criterion,
            lr_scheduler=lr_scheduler, lr_scheduler_args=lr_scheduler_args,
            lr_scheduler_kwargs=lr_scheduler_kwargs, batch_size=batch_size, epsilon_decay=epsilon_decay,
            update_rate=update_rate, update_steps=update_steps, learning_rate=learning_rate,
            discount=discount, gradient_max=gradient_max, replay_size=replay_size,
            replay_buffer=self._apex_buffer(apex_group, replay_size), mode=mode, n_step=n_step,
            visualize=visualize, visualize_dir=visualize_dir,
        )

    def _act(self, state: Dict[str, Any], use_target: bool):
        self._maybe_sync()
        return super()._act(state, use_target)

    def criticize(self, state: Dict[str, Any], use_target: bool = False):
        """Q values for ``state`` (pulling the newest ``qnet`` first when syncing).

        Args:
            state: State dict ``{key: [B, ...]}`` for the Q network.
            use_target: Evaluate the target network instead of the online one.
        """
        self._maybe_sync()
        return super().criticize(state, use_target)

    @ignores_extra_args
    def update(self, update_value: bool = True, update_target: bool = True,
               concatenate_samples: bool = True) -> Optional[float]:
        """One DQNPer update on a batch sampled across the group, then push ``qnet``.

        Priorities of the sampled transitions are updated in the processes that hold them.
        ``qnet`` is pushed to the model server whenever a batch was sampled.

        Args:
            update_value: Take the optimizer step on ``qnet``.
            update_target: Update ``qnet_target`` as :class:`~machin.frame.algorithms.dqn.DQN` does.
            concatenate_samples: Concatenate the sampled states into batched tensors
                (``False`` hands the networks per-sample lists).

        Returns:
            The value loss, or ``None`` when the whole buffer is empty.
        """
        result = super().update(update_value, update_target, concatenate_samples)
        if result is not None:
            self._push()
        return result


class DDPGApex(ApexMixin, DDPGPer):
    """DDPG with prioritized replay spread over an RPC group (Ape-X DDPG).

    Like :class:`DQNApex`, for the actor: with syncing on, :meth:`act`,
    :meth:`act_with_noise`, :meth:`act_discrete`, :meth:`act_discrete_with_noise`
    and :meth:`criticize` first pull the newest actor; :meth:`update` pushes it.
    One ``learning_rate`` serves both the actor and the critic.

    Args:
        actor: Actor network.
        actor_target: Target actor.
        critic: Critic network.
        critic_target: Target critic.
        optimizer: Optimizer class.
        criterion: Per-sample loss, e.g. ``nn.MSELoss(reduction="none")``.
        apex_group: RPC group of every sampler and learner.
        model_server: Tuple whose first element is the :class:`PushPullModelServer`
            accessor of the actor (further elements are ignored).
        lr_scheduler: See :class:`~machin.frame.algorithms.ddpg.DDPG`.
        lr_scheduler_args: See :class:`~machin.frame.algorithms.ddpg.DDPG`.
        lr_scheduler_kwargs: See :class:`~machin.frame.algorithms.ddpg.DDPG`.
        batch_size: Transitions per update, sampled across the group.
        update_rate: Soft-update rate of the target networks.
        learning_rate: Learning rate of the actor and of the critic.
        discount: Discount factor.
        gradient_max: Maximum gradient norm.
        replay_size: Capacity of this process's part of the buffer.
        replay_device: Ignored (with a warning unless ``"cpu"``): the distributed buffer
            always stores its transitions on the CPU.
        visualize: Draw the loss graphs on the first update.
        visualize_dir: Where to write the drawings.

    Raises:
        ValueError: When ``model_server`` holds no accessor, the process is not a
            member of ``apex_group``, or an option is out of range.
    """

    _shared_network = "actor"

    @ignores_extra_args
    def __init__(
        self,
        actor: nn.Module,
        actor_target: nn.Module,
        critic: nn.Module,
        critic_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        apex_group: RpcGroup,
        model_server: Tuple[PushPullModelServer],
        *,
        lr_scheduler: Optional[Callable] = None,
        lr_scheduler_args: Sequence[Sequence] = (),
        lr_scheduler_kwargs: Sequence[Dict[str, Any]] = (),
        batch_size: int = 100,
        update_rate: float = 0.005,
        learning_rate: float = 0.001,
        discount: float = 0.99,
        gradient_max: float = math.inf,
        replay_size: int = 500000,
        replay_device: Union[str, torch.device] = "cpu",
        visualize: bool = False,
        visualize_dir: str = "",
    ):
        self._init_apex(apex_group, model_server, replay_device)
        super().__init__(
            actor, actor_target, critic, critic_target, optimizer, criterion,
            lr_scheduler=lr_scheduler, lr_scheduler_args=lr_scheduler_args,
            lr_scheduler_kwargs=lr_scheduler_kwargs, batch_size=batch_size, update_rate=update_rate,
            actor_learning_rate=learning_rate, critic_learning_rate=learning_rate, discount=discount,
            gradient_max=gradient_max, replay_size=replay_size,
            replay_buffer=self._apex_buffer(apex_group, replay_size),
            visualize=visualize, visualize_dir=visualize_dir,
        )

    def _actor_output(self, state: Dict[str, Any], use_target: bool):
        self._maybe_sync()
        return super()._actor_output(state, use_target)

    def criticize(self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False) -> Any:
        """The critic's output for ``state`` and ``action`` (pulling the newest actor first when syncing).

        Args:
            state: Keyword inputs of the critic (the state keys).
            action: Action dictionary, e.g. ``{"action": tensor}``.
            use_target: Use ``critic_target`` instead of ``critic``.
        """
        self._maybe_sync()
        return super().criticize(state, action, use_target)

    @ignores_extra_args
    def update(self, update_value: bool = True, update_policy: bool = True, update_target: bool = True,
               concatenate_samples: bool = True) -> Optional[Tuple[float, float]]:
        """One DDPGPer update on a batch sampled across the group, then push the actor.

        Priorities of the sampled transitions are updated in the processes that hold them.

        Args:
            update_value: Take an optimizer step on the critic.
            update_policy: Take an optimizer step on the actor.
            update_target: Soft-update the target networks.
            concatenate_samples: Hand the networks batched tensors (``False``: per-sample lists).

        Returns:
            ``(mean policy value, value loss)``, or ``None`` when the whole buffer is empty.
        """
        result = super().update(update_value, update_policy, update_target, concatenate_samples)
        if result is not None:
            self._push()
        return result
