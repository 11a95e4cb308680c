"""IMPALA: actors play whole episodes, learners correct the policy lag with V-trace.

Samplers act with a (possibly stale) copy of the actor and store each episode as
one :class:`EpisodeTransition` in their part of an
:class:`EpisodeDistributedBuffer`, with the log-probability of every action under
the policy that chose it (``"action_log_prob"``). Learners sample whole episodes
across the group, compute V-trace targets (:func:`vtrace`) with truncated
importance weights, take one actor and one critic step and push the actor to the
model server, from which the samplers pull it.

``IMPALA.from_roles(roles, ...)`` builds the algorithm, its group and its model server
from a :class:`~machin.parallel.distributed.roles.Roles` (learners, samplers and servers
derived from the world's size and rank).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from ...parallel.distributed.roles import Roles
from ...parallel.distributed.rpc_group import RpcGroup
from ...parallel.server import PushPullModelServer
from ...utils.compat import ignores_extra_args
from ..buffers.episode_buffer_d import (  # noqa: F401 (EPISODE_REQUIRED_ATTRS: its old import path)
    EPISODE_REQUIRED_ATTRS,
    EpisodeDistributedBuffer,
    EpisodeTransition,
)
from ..helpers.servers import build_from_roles
from ..returns import vtrace
from ..transition import Transition
from .a2c import A2C
from .base import UpdateResult
from .options import OneLearningRate, Option, positive
from .policy import PolicyBatch, split_actor_output
from .prefetch import LearnerPipeline
from .utils import SharedNetworkSync, as_column

__all__ = ["EpisodeTransition", "EpisodeDistributedBuffer", "IMPALA", "vtrace"]


class IMPALA(OneLearningRate, LearnerPipeline, SharedNetworkSync, A2C):
    """Importance-weighted actor-learner architecture over an RPC group.

    Samplers (members of ``impala_group``) call :meth:`act` and :meth:`store_episode`;
    learners call :meth:`update`, which samples ``batch_size`` **episodes** across the
    group, computes V-trace targets, takes one actor and one critic step and pushes
    the actor to the model server. With syncing on, :meth:`act` first pulls the
    newest actor. The actor is called as in :class:`~machin.frame.algorithms.a2c.A2C`
    and returns ``(action, log_prob, *extras)`` (entropy third when
    ``entropy_weight`` is set).

    Args:
        actor: Policy network.
        critic: State-value network.
        optimizer: Optimizer class (one optimizer each for the actor and the critic).
        criterion: Value loss, ``criterion(target[B, 1], predicted[B, 1])``.
        impala_group: RPC group of every sampler and learner.
        model_server: Tuple whose first element is the :class:`PushPullModelServer` accessor
            of the actor (further elements are ignored, as in Machin 0.3.4).

    The keyword options are listed with their defaults in the constructor's
    documentation below.

    Raises:
        ValueError: When ``isw_clip_rho < isw_clip_c``, ``model_server`` holds no
            accessor, or an option is out of range.
    """

    driver = None
    driver_unavailable = "it is a distributed algorithm with its own worker loop"

    lr_scheduler_args = A2C.lr_scheduler_args.but(default=())
    lr_scheduler_kwargs = A2C.lr_scheduler_kwargs.but(default=())
    batch_size = A2C.batch_size.but(default=5, doc="Episodes per update.")
    replay_size = A2C.replay_size.but(
        default=500, doc="Episodes kept by each member's part of the buffer."
    )
    isw_clip_c = Option(1.0, positive, "Truncation of the trace coefficients ``c``.")
    isw_clip_rho = Option(
        1.0, positive, "Truncation of the importance weights ``rho``; at least ``isw_clip_c``."
    )
    # Fixed by V-trace (one actor and one critic step per update, no GAE, raw advantages):
    actor_update_times = critic_update_times = 1
    gae_lambda = 1.0
    normalize_advantage = False
    value_target = "vtrace"
    _shared_network = "actor"
    _sample_options = {
        "reported_sizes": True
    }  # no round trip for the parts' sizes (one update old)
    joint_update = False
    replay_device = "cpu"
    replay_buffer = None

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        impala_group: RpcGroup,
        model_server: Tuple[PushPullModelServer],
        *_: Any,
        **options: Any,
    ):
        self.impala_group = impala_group
        self._init_sync(model_server, "IMPALA")
        super().__init__(actor, critic, optimizer, criterion, *_, **options)

    def _check_options(self) -> None:
        if self.isw_clip_rho < self.isw_clip_c:
            raise ValueError(
                f"isw_clip_rho must be at least isw_clip_c, got isw_clip_rho={self.isw_clip_rho} and "
                f"isw_clip_c={self.isw_clip_c}"
            )

    def _default_buffer(self) -> EpisodeDistributedBuffer:
        return EpisodeDistributedBuffer("impala_buffer", self.impala_group, self.replay_size)

    @classmethod
    def from_roles(
        cls, roles: Roles, *args: Any, group_name: str = "impala", **kwargs: Any
    ) -> IMPALA:
        """Build IMPALA, its group and its model server from the roles of the processes.

        Every process of the world calls it with the same arguments (and its own
        ``roles``): the constructor's arguments without ``impala_group`` and
        ``model_server``. As :meth:`DQNApex.from_roles
        <machin.frame.algorithms.apex.ApexMixin.from_roles>`: one RPC group over the whole
        world, the model server on ``roles.model_server``, several learners training the
        actor and the critic in ``DistributedDataParallel``, and the episode buffer's parts
        where ``roles.replay`` puts them (samplers send each episode there at once). The
        result also has the attributes ``roles``, ``learner_group`` and ``model_servers``.

        Args:
            roles: This process's :class:`~machin.parallel.distributed.roles.Roles`.
            args: The constructor's positional arguments up to the criterion.
            group_name: Name of the RPC group.
            kwargs: The constructor's keyword options.
        """
        return build_from_roles(
            cls,
            roles,
            args,
            kwargs,
            group_name=group_name,
            ddp_networks=("actor", "critic"),
            replay_chunk=1,
        )

    @property
    def sampled_from(self) -> Counter:
        """Episodes this learner has sampled so far, by name of the member that held them."""
        return Counter(getattr(self.replay_buffer, "sampled_from", {}))

    # -- syncing ------------------------------------------------------------------------
    @ignores_extra_args
    def act(self, state: Dict[str, Any], *, deterministic: bool = False) -> Any:
        """The actor's output ``(action, log_prob, ...)`` (pulling the newest actor first when syncing).

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
            deterministic: Ask the actor for its most likely action (see
                :meth:`A2C.act <machin.frame.algorithms.a2c.A2C.act>`).
        """
        self._maybe_sync()
        return super().act(state, deterministic=deterministic)

    # -- storing ------------------------------------------------------------------------
    def store_transition(self, transition: Any) -> None:
        """Not supported: IMPALA learns from whole episodes.

        Args:
            transition: Ignored.

        Raises:
            NotImplementedError: Always (Machin 0.3.4's type; it is a ``RuntimeError`` too);
                use :meth:`store_episode`.
        """
        raise NotImplementedError(
            "IMPALA stores whole episodes: call store_episode(list_of_steps) instead of store_transition"
        )

    def store_episode(self, episode: List[Union[Transition, Dict[str, Any]]]) -> None:
        """Store an episode as one :class:`EpisodeTransition` in this process's part of the buffer.

        Every step must carry the custom attribute ``"action_log_prob"``: the
        log-probability (a float) of its action under the policy that chose it.

        Raises:
            ValueError: When the episode is empty or a step lacks an attribute.
        """
        self.replay_buffer.append(EpisodeTransition.from_episode(episode))

    # -- update -------------------------------------------------------------------------
    def _episode_batch(self, episode: EpisodeTransition) -> PolicyBatch:
        """V-trace targets and advantages of one episode under the current networks."""
        steps = episode.batch_size
        with torch.no_grad():
            log_prob = split_actor_output(self._eval_act(episode.state, episode.action), "IMPALA")[
                1
            ]
            log_prob = as_column(log_prob, steps, "the actor's log_prob output").view(-1)
            both = {k: torch.cat([episode.state[k], episode.next_state[k]]) for k in episode.state}
            values = as_column(self._criticize(both), 2 * steps, "the critic output").view(-1)
        device = values.device
        behaviour = torch.tensor(episode.action_log_prob, dtype=values.dtype, device=device)
        targets, advantage = vtrace(
            episode.reward.view(-1).to(device, values.dtype),
            values[:steps],
            values[steps:],
            episode.terminal.view(-1).to(device),
            log_prob.to(device, values.dtype) - behaviour,
            self.discount,
            self.isw_clip_rho,
            self.isw_clip_c,
        )
        return PolicyBatch(
            steps, episode.state, episode.action, targets.view(-1, 1), advantage.view(-1, 1)
        )

    @staticmethod
    def _join(batches: List[PolicyBatch]) -> PolicyBatch:
        def cat(dicts: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
            return {k: torch.cat([d[k] for d in dicts]) for k in dicts[0]}

        return PolicyBatch(
            sum(b.size for b in batches),
            cat([b.state for b in batches]),
            cat([b.action for b in batches]),
            torch.cat([b.target_value for b in batches]),
            torch.cat([b.advantage for b in batches]),
        )

    @ignores_extra_args
    def update(
        self, update_value: bool = True, update_policy: bool = True
    ) -> Optional[UpdateResult]:
        """Sample ``batch_size`` episodes across the group, take one actor and one critic step, push the actor.

        Args:
            update_value: Step the critic (otherwise its loss is only measured).
            update_policy: Step the actor (otherwise its loss is only measured).

        The episodes were sampled during the previous update, and the actor is pushed
        without waiting (see :class:`~machin.frame.algorithms.prefetch.LearnerPipeline`):
        the update overlaps both round trips with its work. The first update (and the
        first after an empty buffer or :meth:`flush`) samples and waits.

        Returns:
            ``(policy value, value loss)`` as floats, or ``None`` when the group's
            buffer holds no episode.
        """
        size, sampled = self._prefetched_sample(self.batch_size)
        if size == 0:
            return None
        self._set_mode(True, self.actor, self.critic)
        batch = self._join([self._episode_batch(episode) for episode in sampled[0]])
        policy_value = (self._update_actor if update_policy else self._evaluate_actor)(batch)
        value_loss = (self._update_critic if update_value else self._evaluate_critic)(batch)
        self._set_mode(False, self.actor, self.critic)
        self._publish_nowait()
        return UpdateResult(policy_value, value_loss)
