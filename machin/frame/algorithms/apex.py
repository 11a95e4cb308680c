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

``DQNApex.from_roles(roles, ...)`` and ``DDPGApex.from_roles(roles, ...)`` build the
algorithm, its group and its model server from a
:class:`~machin.parallel.distributed.roles.Roles` (learners, samplers and servers derived
from the world's size and rank), so one script runs on any number of processes.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ...parallel.distributed.roles import Roles
from ...parallel.distributed.rpc_group import RpcGroup
from ...parallel.server import PushPullModelServer
from ...utils.compat import ignores_extra_args, warn_caller
from ..buffers.prioritized_buffer_d import DistributedPrioritizedBuffer
from ..helpers.servers import build_from_roles
from .base import TorchFramework, UpdateResult
from .ddpg_per import DDPGPer
from .dqn_per import DQNPer
from .options import BufferOptions, OneLearningRate, Option, positive_int
from .prefetch import LearnerPipeline
from .replay import SAMPLE_ATTRS, SampledBatch
from .utils import SharedNetworkSync

__all__ = ["ApexMixin", "DQNApex", "DDPGApex"]


def _cpu_only(name: str, value: Any) -> Any:
    # Distributed buffers keep their transitions on the CPU (they travel over RPC);
    # Machin 0.3.4 ignored replay_device here as well.
    if str(value) != "cpu":
        warn_caller(
            f"Apex ignores {name}={str(value)!r}: its distributed buffer always stores transitions "
            f"on the CPU (as in Machin 0.3.4)."
        )
    return value


class ApexMixin(LearnerPipeline, SharedNetworkSync):
    """Distributed buffer, model pushes and pulls shared by the Ape-X algorithms.

    The host names the network it shares in ``_shared_network`` (an attribute name, see
    :class:`~machin.frame.algorithms.utils.SharedNetworkSync`) and the constructor
    parameters of the networks that several learners train together in ``_ddp_networks``.

    A learner's update overlaps its round trips with its work
    (:class:`~machin.frame.algorithms.prefetch.LearnerPipeline`). It asks the group for
    ``prefetch_batches`` batches in one round of requests and trains on them one after
    the other; the next request leaves when the first of them is taken, so it travels
    while the learner trains (the first update, and the first after an empty buffer or
    :meth:`flush`, samples and waits). A batch is therefore **sampled up to twice
    ``prefetch_batches`` updates earlier**, with the priorities known then, which
    Ape-X's asynchronous replay tolerates by design. The new priorities are queued and
    travel with the next request; the network is pushed without waiting, at most one
    push in flight. An error of either is raised by a later update, or by
    :meth:`flush`, which also runs when the world stops.
    """

    _ddp_networks: Tuple[str, ...] = ()
    lr_scheduler_args = TorchFramework.lr_scheduler_args.but(default=())
    lr_scheduler_kwargs = TorchFramework.lr_scheduler_kwargs.but(default=())
    batch_size = BufferOptions.batch_size.but(
        doc="Transitions per update, sampled across the group."
    )
    replay_size = BufferOptions.replay_size.but(
        doc="Capacity of this process's part of the buffer."
    )
    replay_device = BufferOptions.replay_device.but(
        check=_cpu_only,
        doc='Ignored (with a warning unless ``"cpu"``): the distributed buffer always stores its '
        "transitions on the CPU.",
    )
    prefetch_batches = Option(
        8,
        positive_int,
        "Batches the learner requests from the group in one round trip and trains on one after "
        "the other (each request pays the messages' fixed cost once; a batch may be up to twice "
        "that many updates old). 1 requests one batch per update, during the previous update.",
    )
    replay_buffer = None  # always this group's distributed buffer
    driver = None
    driver_unavailable = "it is a distributed algorithm with its own worker loop"

    @classmethod
    def from_roles(
        cls,
        roles: Roles,
        *args: Any,
        group_name: Optional[str] = None,
        replay_chunk: int = 32,
        **kwargs: Any,
    ) -> Any:
        """Build the algorithm, its group and its model server from the roles of the processes.

        Every process of the world calls it, after starting its
        :class:`~machin.parallel.distributed.World`, with the same arguments (and its own
        ``roles``): the constructor's arguments without ``apex_group`` and ``model_server``.
        It creates the RPC group of the whole world (named ``group_name``, by default the
        class name in lower case), the model server on ``roles.model_server`` and, with
        several learners, their collective group, in which the learners' trained networks
        are wrapped in ``DistributedDataParallel``. The replay buffer's parts stay where
        ``roles.replay`` puts them: on each sampler by default; with ``"learners"`` or
        ``"servers"``, samplers send their transitions there, ``replay_chunk`` at a time
        (at once after a terminal one). It returns once every part exists.

        The result also has the attributes ``roles``, ``learner_group`` (the learners'
        :class:`~machin.parallel.distributed.CollectiveGroup` or ``None``) and
        ``model_servers``. The old way, a group and model servers passed to the
        constructor, works as before.

        Args:
            roles: This process's :class:`~machin.parallel.distributed.roles.Roles`, e.g.
                ``Roles.from_world()``.
            args: The constructor's positional arguments up to the criterion.
            group_name: Name of the RPC group.
            replay_chunk: Transitions a sampler sends at once to a replay held elsewhere.
            kwargs: The constructor's keyword options.

        Raises:
            ValueError: When ``roles`` does not describe the running world.
            TypeError: When ``roles`` is not a ``Roles``.
        """
        return build_from_roles(
            cls,
            roles,
            args,
            kwargs,
            group_name=group_name or cls.__name__.lower(),
            ddp_networks=cls._ddp_networks,
            replay_chunk=replay_chunk,
        )

    def _default_buffer(self) -> DistributedPrioritizedBuffer:
        """This process's part of the group-wide prioritized buffer (priority updates do not wait)."""
        buffer = DistributedPrioritizedBuffer(
            type(self).__name__.lower() + "_buffer", self.apex_group, self.replay_size
        )
        buffer.set_async_priority_updates(True)
        return buffer

    def _init_apex(self, apex_group: RpcGroup, model_server: Any) -> None:
        self.apex_group = apex_group
        self._init_sync(model_server, type(self).__name__)

    def _update_and_publish(self, update: Callable[[], Any]) -> Any:
        """Run one update, then push the shared network without waiting, if it trained.

        The update's priorities and the push travel while the next update runs; the
        next ones wait for them (see :class:`~machin.frame.algorithms.prefetch.LearnerPipeline`).
        """
        result = update()
        if result is not None:
            self._publish_nowait()
        return result

    def _sample(
        self, concatenate: bool, additional_concat_attrs: Optional[List[str]] = None
    ) -> Optional[SampledBatch]:
        """The batch sampled across the group during the previous update (see :meth:`_prefetched_sample`)."""
        extra = None if additional_concat_attrs is None else tuple(additional_concat_attrs)
        size, batch, index, is_weight = self._prefetched_sample(
            self.batch_size, concatenate, None, tuple(SAMPLE_ATTRS), extra
        )
        if size == 0:
            return None
        counts = self.__dict__.setdefault("_sampled_from", Counter())
        for member, (sampled, _) in index.items():
            counts[member] += len(sampled)
        weight = torch.as_tensor(is_weight, dtype=torch.get_default_dtype()).view(size, 1)
        return self._make_batch(size, batch, index=index, weight=weight)

    @property
    def sampled_from(self) -> Counter:
        """Transitions this learner has sampled so far, by name of the member that held them."""
        return Counter(self.__dict__.get("_sampled_from", {}))


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

    The keyword options are :class:`~machin.frame.algorithms.dqn.DQN`'s, without
    ``replay_buffer`` (the group's distributed buffer is always used).

    Raises:
        ValueError: When ``model_server`` holds no accessor, the process is not a
            member of ``apex_group``, or an option is out of range.
    """

    _shared_network = "qnet"
    _ddp_networks = ("qnet",)

    def __init__(
        self,
        qnet: nn.Module,
        qnet_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        apex_group: RpcGroup,
        model_server: Tuple[PushPullModelServer],
        *_: Any,
        **options: Any,
    ):
        self._init_apex(apex_group, model_server)
        super().__init__(qnet, qnet_target, optimizer, criterion, *_, **options)

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
    def update(
        self,
        update_value: bool = True,
        update_target: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[float]:
        """One DQNPer update on a batch sampled across the group, then push ``qnet``.

        Priorities of the sampled transitions are updated in the processes that hold them.
        ``qnet`` is pushed to the model server whenever a batch was sampled. The batch was
        sampled during the previous update, and the priorities and the push are sent
        without waiting (see :class:`ApexMixin`).

        Args:
            update_value: Take the optimizer step on ``qnet``.
            update_target: Update ``qnet_target`` as :class:`~machin.frame.algorithms.dqn.DQN` does.
            concatenate_samples: Concatenate the sampled states into batched tensors
                (``False`` hands the networks per-sample lists).

        Returns:
            The value loss, or ``None`` when the whole buffer is empty.
        """
        return self._update_and_publish(
            partial(super().update, update_value, update_target, concatenate_samples)
        )


class DDPGApex(OneLearningRate, ApexMixin, DDPGPer):
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

    The keyword options are :class:`~machin.frame.algorithms.ddpg.DDPG`'s, with one
    ``learning_rate`` instead of the actor's and the critic's, and without ``n_step`` and
    ``replay_buffer`` (the group's distributed buffer is always used).

    Raises:
        ValueError: When ``model_server`` holds no accessor, the process is not a
            member of ``apex_group``, or an option is out of range.
    """

    _shared_network = "actor"
    _ddp_networks = ("actor", "critic")

    n_step = 1

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
        *_: Any,
        **options: Any,
    ):
        self._init_apex(apex_group, model_server)
        super().__init__(
            actor, actor_target, critic, critic_target, optimizer, criterion, *_, **options
        )

    def _actor_output(self, state: Dict[str, Any], use_target: bool):
        self._maybe_sync()
        return super()._actor_output(state, use_target)

    def criticize(
        self, state: Dict[str, Any], action: Dict[str, Any], use_target: bool = False
    ) -> Any:
        """The critic's output for ``state`` and ``action`` (pulling the newest actor first when syncing).

        Args:
            state: Keyword inputs of the critic (the state keys).
            action: Action dictionary, e.g. ``{"action": tensor}``.
            use_target: Use ``critic_target`` instead of ``critic``.
        """
        self._maybe_sync()
        return super().criticize(state, action, use_target)

    @ignores_extra_args
    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        update_target: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
        """One DDPGPer update on a batch sampled across the group, then push the actor.

        Priorities of the sampled transitions are updated in the processes that hold them.
        The batch was sampled during the previous update, and the priorities and the push
        are sent without waiting (see :class:`ApexMixin`).

        Args:
            update_value: Take an optimizer step on the critic.
            update_policy: Take an optimizer step on the actor.
            update_target: Soft-update the target networks.
            concatenate_samples: Hand the networks batched tensors (``False``: per-sample lists).

        Returns:
            ``(mean policy value, value loss)``, or ``None`` when the whole buffer is empty.
        """
        return self._update_and_publish(
            partial(super().update, update_value, update_policy, update_target, concatenate_samples)
        )
