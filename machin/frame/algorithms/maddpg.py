"""Multi-agent DDPG (MADDPG): decentralised actors, centralised critics.

Every agent ``i`` owns an actor that sees only its own state, optionally an
ensemble of sub-policies, and a critic that sees the states and actions of the
agents listed in ``critic_visible_actors[i]``. :meth:`MADDPG.update` reads like
the algorithm:

1. draw one set of buffer rows per sub-policy; every agent's buffer is read at
   the same rows, so the rows of all agents describe the same time steps;
2. for every agent (in the thread or process pool): sample the rows of the agents
   its critic sees, compute the Bellman target with the target actors and its
   target critic, regress the critic onto it, then push the actor along the
   critic's gradient with the other agents' actions taken from the buffer;
3. soft-update every target network.

Step 2 only writes the networks and optimizers of its own agent and only reads
target networks, which change in step 3, so running the agents in a pool gives
the same numbers as running them one after the other.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ...parallel.pool import CtxPool, ThreadPool
from ...utils import torch_internals
from ...utils.compat import ignores_extra_args
from ..buffers import Buffer, PrioritizedBuffer
from ..buffers.shm_buffer import SHMBuffer, TransitionLike
from ..noise.dispatch import DEFAULT_NOISE_PARAM, noise_adder, resolve_noise_mode
from ..noise.generator import OrnsteinUhlenbeckNoiseGen
from ..transition import as_transition
from .base import TorchFramework, UpdateResult, pack_result, split_output
from .critics import SoftTargets, critic_action_input, value_column
from .legacy_checkpoint import LegacyFile, file_versions, load_legacy_files
from .options import (
    ActorCriticOptions,
    BufferOptions,
    Option,
    SoftTargetOptions,
    non_negative_int,
    one_of,
    optional,
    positive_int,
)
from .replay import REQUIRED_ATTRS, SampledBatch, bellman_target, make_batch, value_loss
from .utils import assert_output_is_probs, hard_update, safe_call
from .worker_copy import WorkerCopy, call_in_worker

# SHMBuffer lives in machin.frame.buffers.shm_buffer; it stays importable from here.
__all__ = ["MADDPG", "SHMBuffer"]

_SAMPLE_ATTRS = ["state", "action", "reward", "next_state", "terminal", "*"]
_POOL_TYPES = ("thread", "process")
# ``(size, positions)`` of the rows one sub-policy trains on, shared by all agents.
Rows = Tuple[int, torch.Tensor]


#: 0.3.4's file name and child-name pattern of each restorable attribute.
_OLD_LAYOUT = {
    "actor_targets": ("all_actor_target", re.compile(r"^actor_(\d+)_(\d+)\.")),
    "critic_targets": ("all_critic_target", re.compile(r"^critic_(\d+)()\.")),
}


def _plain_buffer(name: str, value: Any) -> Buffer:
    if not isinstance(value, Buffer):
        raise TypeError(f"{name} must be a Buffer, got {type(value).__name__}")
    if isinstance(value, PrioritizedBuffer):
        raise ValueError(
            f"{name} must be a Buffer without priorities: MADDPG reads every agent's "
            f"buffer at the same rows, got a {type(value).__name__}"
        )
    return value


class MADDPG(BufferOptions, SoftTargets, ActorCriticOptions, TorchFramework):
    """Multi-agent DDPG with centralised critics and optional policy ensembles.

    Agent ``i`` has ``sub_policy_num + 1`` actors (``actors[i][k]``; the replicas
    start as copies of the given actor and drift apart because each trains on its
    own batch), their targets, a critic ``critics[i]`` and its target. The critic
    is called with ``state_concat_function([states of the visible agents])`` and
    ``action_concat_function([actions of the visible agents])``, in the order of
    ``critic_visible_actors[i]``; the defaults concatenate each key along
    dimension 1, e.g. ``critic(state=cat([s_0, s_1], 1), action=cat([a_0, a_1], 1))``
    for a critic that sees agents 0 and 1. The critic of agent ``i`` regresses onto
    ``r_i + discount * (1 - terminal_i) * Q'_i(s', mu'(s'))``, where every visible
    agent acts with its target actor of the same sub-policy index. The actor
    ``actors[i][k]`` ascends ``Q_i`` with its own action in place of agent ``i``'s
    stored action and the stored actions of the other agents, so it is trained by
    its own loss only. Targets follow by soft updates.

    The agents may be heterogeneous (different state and action sizes, different
    networks). Mixed continuous and discrete action spaces and inferring the
    policies of other agents are not provided.

    Args:
        actors: One actor per agent, called like a DDPG actor:
            ``forward(<state keys>) -> action[B, action_dim], <extras>``.
        actor_targets: One target actor per agent (hard-copied from the actor).
        critics: One critic per agent: ``forward(<concatenated state keys>,
            <concatenated action keys>) -> value[B, 1], <extras>``.
        critic_targets: One target critic per agent (hard-copied from the critic).
        critic_visible_actors: For each critic, the indexes of the agents whose
            states and actions it sees; it must include its own agent, e.g.
            ``[[0, 1], [1, 2], [2, 0]]``.
        optimizer: Optimizer class, called as ``optimizer(net.parameters(), lr=...)``
            once per actor replica and once per critic.
        criterion: Value loss, called as ``criterion(target[B, 1], predicted[B, 1])``.

    The keyword options are listed with their defaults in the constructor's
    documentation below. The schedulers apply to every optimizer, with two entries in
    ``lr_scheduler_args`` / ``lr_scheduler_kwargs``: the first for every actor
    optimizer, the second for every critic optimizer.

    Raises:
        ValueError: On inconsistent network lists, a bad ``critic_visible_actors``,
            a prioritized ``replay_buffer`` or an out-of-range option.
        TypeError: When ``replay_buffer`` is not a Buffer.
    """

    _is_top = ["actors", "actor_targets", "critics", "critic_targets"]
    _is_restorable = ["actor_targets", "critic_targets"]
    driver = None
    driver_unavailable = "it acts for several agents at once"
    _restorable_aliases = {old: new for new, (old, _) in _OLD_LAYOUT.items()}

    sub_policy_num = Option(
        0, non_negative_int, "Extra replicas per actor (ensemble size minus one)."
    )
    update_rate = SoftTargetOptions.update_rate.but(default=0.001)
    batch_size = BufferOptions.batch_size.but(doc="Rows sampled per sub-policy and update.")
    replay_buffer = BufferOptions.replay_buffer.but(
        check=optional(_plain_buffer),
        doc="A Buffer (without priorities) to use instead of the default ones: the first agent stores into it "
        "and every other agent into a deep copy of it.",
    )
    use_jit = Option(
        True,
        doc="Accepted for compatibility with Machin 0.3.4, where it selected TorchScript forward "
        "passes; it changes nothing here (TorchScript is deprecated in PyTorch 2).",
    )
    pool_type = Option(
        "thread",
        one_of(*_POOL_TYPES),
        '``"thread"`` or ``"process"``: how the agents\' updates run '
        "in parallel. Process workers are started at the first update after the networks are moved "
        "to shared memory; worker ``i % pool_size`` trains agent ``i`` and keeps its optimizer state "
        "(see :meth:`close`), and the default buffers become :class:`SHMBuffer`. It needs every "
        'network on ``"cpu"`` or ``"cuda"``.',
    )
    pool_size = Option(
        None,
        optional(positive_int),
        "Number of pool workers; ``None`` uses one per agent, at most "
        "``os.cpu_count()``. A thread pool of size 1 runs the agents in the calling thread.",
    )

    def __init__(
        self,
        actors: Sequence[nn.Module],
        actor_targets: Sequence[nn.Module],
        critics: Sequence[nn.Module],
        critic_targets: Sequence[nn.Module],
        critic_visible_actors: Sequence[Sequence[int]],
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(*_, **options)
        agent_num = self._check_networks(
            actors=actors,
            actor_targets=actor_targets,
            critics=critics,
            critic_targets=critic_targets,
        )
        self.critic_visible_actors = self._check_visibility(critic_visible_actors, agent_num)
        self._check_criterion(criterion)
        self._check_same_structure(
            **{
                f"{kind}_targets[{i}]": (online, target)
                for kind, onlines, targets in (
                    ("actor", actors, actor_targets),
                    ("critic", critics, critic_targets),
                )
                for i, (online, target) in enumerate(zip(onlines, targets))
            }
        )

        self.agent_num = agent_num
        self.criterion = criterion
        self.pool_size = self.pool_size or min(agent_num, os.cpu_count() or 1)
        self._pool: Optional[Union[ThreadPool, List[CtxPool]]] = None
        self._ou_noise: Dict[int, OrnsteinUhlenbeckNoiseGen] = {}

        def ensemble(network: nn.Module) -> nn.ModuleList:
            return nn.ModuleList(
                [network] + [copy.deepcopy(network) for _ in range(self.sub_policy_num)]
            )

        self.actors = nn.ModuleList(ensemble(actor) for actor in actors)
        self.actor_targets = nn.ModuleList(ensemble(target) for target in actor_targets)
        self.critics = nn.ModuleList(critics)
        self.critic_targets = nn.ModuleList(critic_targets)
        if self.pool_type == "process":
            self._check_shareable_devices()
        for online, target in self._online_target_pairs():
            hard_update(target, online)
        self._train_mode(False)

        self.actor_optims = [
            [self._make_optimizer(optimizer, actor, self.actor_learning_rate) for actor in agent]
            for agent in self.actors
        ]
        self.critic_optims = [
            self._make_optimizer(optimizer, critic, self.critic_learning_rate)
            for critic in self.critics
        ]
        replay_buffer = self.replay_buffer
        if replay_buffer is None:
            buffer_class = SHMBuffer if self.pool_type == "process" else Buffer
            self.replay_buffers = [
                buffer_class(self.replay_size, self.replay_device) for _ in range(agent_num)
            ]
        else:
            self.replay_buffers = [replay_buffer] + [
                copy.deepcopy(replay_buffer) for _ in range(agent_num - 1)
            ]

    def _optimizers(self):
        return [optim for agent in self.actor_optims for optim in agent] + self.critic_optims

    def _init_lr_schedulers(self, optimizers):
        # One (actor entry, critic entry) pair spread over all optimizers.
        args, kwargs = self.lr_scheduler_args, self.lr_scheduler_kwargs
        self.lr_scheduler_args = self._per_optimizer("lr_scheduler_args", args)
        self.lr_scheduler_kwargs = self._per_optimizer("lr_scheduler_kwargs", kwargs)
        try:
            super()._init_lr_schedulers(optimizers)
        finally:
            self.lr_scheduler_args, self.lr_scheduler_kwargs = args, kwargs

    # -- construction checks --------------------------------------------------------------
    @staticmethod
    def _check_networks(**network_lists: Sequence[nn.Module]) -> int:
        lengths = {}
        for name, networks in network_lists.items():
            if not isinstance(networks, (list, tuple, nn.ModuleList)) or not networks:
                raise ValueError(
                    f"{name} must be a non-empty list of networks, one per agent, got {networks!r}"
                )
            for index, network in enumerate(networks):
                if not isinstance(network, nn.Module):
                    raise ValueError(
                        f"{name}[{index}] must be an nn.Module, got {type(network).__name__}"
                    )
            lengths[name] = len(networks)
        if len(set(lengths.values())) != 1:
            raise ValueError(
                f"actors, actor_targets, critics and critic_targets must have one network per "
                f"agent each, got lengths {lengths}"
            )
        return len(networks)

    @staticmethod
    def _check_visibility(visible: Sequence[Sequence[int]], agent_num: int) -> List[List[int]]:
        if not isinstance(visible, (list, tuple)) or len(visible) != agent_num:
            raise ValueError(
                f"critic_visible_actors must hold one list of agent indexes per critic "
                f"({agent_num} here), got {visible!r}"
            )
        checked = []
        for critic, indexes in enumerate(visible):
            if (
                not isinstance(indexes, (list, tuple))
                or critic not in indexes
                or len(set(indexes)) != len(indexes)
                or not all(isinstance(i, int) and 0 <= i < agent_num for i in indexes)
            ):
                raise ValueError(
                    f"critic_visible_actors[{critic}] must be a list of distinct agent indexes in "
                    f"[0, {agent_num - 1}] that includes {critic} (the critic's own agent), got {indexes!r}"
                )
            checked.append(list(indexes))
        return checked

    def _check_shareable_devices(self) -> None:
        for name in self._is_top:
            for parameter in getattr(self, name).parameters():
                if parameter.device.type not in ("cpu", "cuda"):
                    raise ValueError(
                        f'pool_type="process" needs every network on "cpu" or "cuda", but '
                        f"{name} has a parameter on {parameter.device}"
                    )

    def _per_optimizer(self, name: str, values: Optional[Sequence]) -> Optional[List[Any]]:
        """Spread the (actor entry, critic entry) pair of a scheduler option over all optimizers."""
        if values is None:
            return None
        if not isinstance(values, (list, tuple)) or len(values) != 2:
            raise ValueError(
                f"{name} must hold two entries, the first for the actor optimizers and the "
                f"second for the critic optimizers, got {values!r}"
            )
        actor_optim_num = self.agent_num * (self.sub_policy_num + 1)
        return [values[0]] * actor_optim_num + [values[1]] * self.agent_num

    def _online_target_pairs(self) -> List[Tuple[nn.Module, nn.Module]]:
        pairs = [
            (actor, target)
            for agent, targets in zip(self.actors, self.actor_targets)
            for actor, target in zip(agent, targets)
        ]
        return pairs + list(zip(self.critics, self.critic_targets))

    def _train_mode(self, training: bool) -> None:
        self._set_mode(training, *(online for online, _ in self._online_target_pairs()))

    def _check_per_agent(self, values: Any, name: str) -> None:
        if not isinstance(values, (list, tuple)) or len(values) != self.agent_num:
            got = (
                f"{len(values)} entries"
                if isinstance(values, (list, tuple))
                else type(values).__name__
            )
            raise ValueError(
                f"{name} must be a list with one entry per agent ({self.agent_num}), got {got}"
            )

    # -- acting -----------------------------------------------------------------------------
    def _actor_outputs(self, states: Sequence[Dict[str, Any]], use_target: bool) -> List[Any]:
        """Each agent's output from a random sub-policy of its (target) ensemble."""
        self._check_per_agent(states, "states")
        for agent, state in enumerate(states):
            self._check_state(state, f"states[{agent}]")
        ensembles = self.actor_targets if use_target else self.actors
        with torch.no_grad():
            return [
                safe_call(self._random_sub_policy(ensembles[agent]), state)
                for agent, state in enumerate(states)
            ]

    @staticmethod
    def _random_sub_policy(ensemble: nn.ModuleList) -> nn.Module:
        if (
            len(ensemble) == 1
        ):  # no ensemble: draw nothing, so seeded runs match plain DDPG-style runs
            return ensemble[0]
        return ensemble[int(torch.randint(len(ensemble), ()))]

    @ignores_extra_args
    def act(self, states: Sequence[Dict[str, Any]], use_target: bool = False) -> List[Any]:
        """Return every agent's actor output for its state, from a random sub-policy.

        Args:
            states: One dictionary of actor inputs (tensors ``[B, ...]``) per agent.
            use_target: Use the target actors.

        Returns:
            One entry per agent: whatever its actor returns (a tuple if several values).

        Raises:
            ValueError: When ``states`` does not hold one entry per agent.
        """
        return self._actor_outputs(states, use_target)

    @ignores_extra_args
    def act_with_noise(
        self,
        states: Sequence[Dict[str, Any]],
        noise_param: Any = DEFAULT_NOISE_PARAM,
        ratio: float = 1.0,
        mode: str = "uniform",
        use_target: bool = False,
    ) -> List[Any]:
        """Return every agent's action plus exploration noise, from a random sub-policy.

        Args:
            states: One dictionary of actor inputs per agent.
            noise_param: Noise parameters as for
                :meth:`~machin.frame.algorithms.ddpg.DDPG.act_with_noise`, the same
                for every agent. In ``"ou"`` mode every agent has its own
                Ornstein-Uhlenbeck process, created on the agent's first call (and
                whenever its action shape changes) from ``noise_param``, a dict of
                :class:`~machin.frame.noise.generator.OrnsteinUhlenbeckNoiseGen`
                keyword arguments or ``None`` for its defaults.
            ratio: Factor applied to the sampled noise.
            mode: ``"uniform"``, ``"normal"``, ``"clipped_normal"`` or ``"ou"``.
            use_target: Use the target actors.

        Returns:
            One entry per agent: the noisy action ``[B, action_dim]``, followed by the
            actor's extra outputs if it has any.

        Raises:
            ValueError: When ``mode`` is unknown, ``noise_param`` does not fit it, or
                ``states`` does not hold one entry per agent.
        """
        add_noise = self._noise_function(mode, noise_param, ratio)
        noisy = []
        for agent, output in enumerate(self._actor_outputs(states, use_target)):
            action, extras = split_output(output)
            noisy.append(pack_result(add_noise(agent, action), extras))
        return noisy

    def _noise_function(
        self, mode: str, noise_param: Any, ratio: float
    ) -> Callable[[int, torch.Tensor], Any]:
        """``f(agent, action) -> noisy action`` for one ``act_with_noise`` call."""
        if mode == "ou":  # one Ornstein-Uhlenbeck process per agent, not DDPG's shared one
            _, noise_param = resolve_noise_mode(mode, noise_param)
            if noise_param is not None and not isinstance(noise_param, Mapping):
                raise ValueError(
                    f"act_with_noise(mode='ou'): noise_param must be None or a dict of "
                    f"OrnsteinUhlenbeckNoiseGen keyword arguments, got {noise_param!r}"
                )
            return lambda agent, action: (
                action + ratio * self._ou_process(agent, action, noise_param)
            )
        add_noise = noise_adder(mode, noise_param, ratio)
        return lambda _agent, action: add_noise(action)

    def _ou_process(
        self, agent: int, action: torch.Tensor, noise_param: Optional[Mapping]
    ) -> torch.Tensor:
        """The next value of ``agent``'s own Ornstein-Uhlenbeck process."""
        process = self._ou_noise.get(agent)
        if process is None or process.shape != action.shape:
            try:
                process = OrnsteinUhlenbeckNoiseGen(
                    action.shape, dtype=action.dtype, **dict(noise_param or {})
                )
            except (TypeError, ValueError) as error:
                raise ValueError(f"act_with_noise(mode='ou'): {error}") from error
            self._ou_noise[agent] = process
        return process(action.device).to(action.dtype)

    def _discrete(
        self,
        states: Sequence[Dict[str, Any]],
        use_target: bool,
        choose: Callable[[torch.Tensor], torch.Tensor],
    ) -> List[Any]:
        results = []
        for output in self._actor_outputs(states, use_target):
            probs, extras = split_output(output)
            assert_output_is_probs(probs)
            results.append(pack_result((choose(probs), probs), extras))
        return results

    def act_discrete(self, states: Sequence[Dict[str, Any]], use_target: bool = False) -> List[Any]:
        """Every agent's most probable action, for actors that output action probabilities.

        Args:
            states: One dictionary of actor inputs per agent; each actor must return
                ``[B, action_num]`` probabilities (non-negative rows summing to 1).
            use_target: Use the target actors.

        Returns:
            One tuple per agent: ``(action [B, 1], probabilities [B, action_num], *extras)``.

        Raises:
            ValueError: When an actor's output is not a batch of probability rows, or
                ``states`` does not hold one entry per agent.
        """
        return self._discrete(states, use_target, lambda probs: probs.argmax(dim=1, keepdim=True))

    def act_discrete_with_noise(
        self, states: Sequence[Dict[str, Any]], use_target: bool = False
    ) -> List[Any]:
        """Like :meth:`act_discrete`, but each action is sampled from its probabilities.

        Args:
            states: One state dict per agent.
            use_target: Use the target actors instead of the online ones.
        """
        return self._discrete(states, use_target, lambda probs: torch.multinomial(probs, 1))

    # -- storing ----------------------------------------------------------------------------
    def store_transitions(self, transitions: Sequence[TransitionLike]) -> None:
        """Store one time step: one transition (or dict) per agent, all from the same step.

        Each transition needs ``state``, ``action``, ``next_state``, ``reward`` and
        ``terminal``. Every transition is checked before any is stored, so the
        agents' buffers stay aligned.

        Args:
            transitions: One :class:`~machin.frame.transition.Transition` or dict per agent, in agent order.

        Raises:
            ValueError: When there is not one transition per agent, or one lacks an
                attribute or does not match what its agent's buffer holds.
        """
        self._check_per_agent(transitions, "transitions")
        self._store([[transition] for transition in transitions])

    def store_episodes(self, episodes: Sequence[Sequence[TransitionLike]]) -> None:
        """Store whole episodes: one list of transitions per agent, of equal lengths.

        Raises:
            ValueError: When there is not one episode per agent, the episodes differ in
                length, or a transition is rejected (see :meth:`store_transitions`).
        """
        self._check_per_agent(episodes, "episodes")
        lengths = [len(episode) for episode in episodes]
        if len(set(lengths)) != 1:
            raise ValueError(
                f"episodes must have one transition per agent and step, so equal lengths; "
                f"got lengths {lengths}"
            )
        self._store(episodes)

    store_transition = store_transitions
    store_episode = store_episodes

    def _store(self, per_agent: Sequence[Sequence[TransitionLike]]) -> None:
        converted = []
        for agent, (buffer, transitions) in enumerate(zip(self.replay_buffers, per_agent)):
            try:
                converted.append([as_transition(t) for t in transitions])
                for transition in converted[-1]:
                    buffer._check(transition, REQUIRED_ATTRS)  # before any buffer is written
            except (TypeError, ValueError) as error:
                raise type(error)(f"agent {agent}: {error}") from error
        for buffer, transitions in zip(self.replay_buffers, converted):
            buffer.extend(transitions, required_attrs=REQUIRED_ATTRS)

    # -- hooks a user may override -------------------------------------------------------------
    @staticmethod
    def _concat(dicts: List[Dict[str, Any]], what: str) -> Dict[str, Any]:
        keys = list(dicts[0])
        for position, entry in enumerate(dicts[1:], start=1):
            if list(entry) != keys:
                raise ValueError(
                    f"the default {what}_concat_function joins the same keys of every visible agent, but "
                    f"the {what} dicts have keys {keys} and {list(entry)} (visible position {position}); "
                    f"override {what}_concat_function for agents with different keys"
                )
        joined = {}
        for key in keys:  # agents may live on different devices: gather on the first one's
            device = dicts[0][key].device
            joined[key] = torch.cat([entry[key].to(device) for entry in dicts], dim=1)
        return joined

    @staticmethod
    def state_concat_function(states: List[Dict[str, Any]], *_: Any) -> Dict[str, Any]:
        """Join the visible agents' state dicts into the critic's state input.

        The default concatenates every key along dimension 1, in the order of
        ``critic_visible_actors``, on the device of the first agent's tensor:
        ``{"state": cat([s_a, s_b], 1)}``.

        Args:
            states: The state dicts of the agents the critic sees, in ``critic_visible_actors`` order.
        """
        return MADDPG._concat(states, "state")

    @staticmethod
    def action_concat_function(actions: List[Dict[str, Any]], *_: Any) -> Dict[str, Any]:
        """Join the visible agents' action dicts into the critic's action input.

        The default concatenates every key along dimension 1, in the order of
        ``critic_visible_actors``, on the device of the first agent's tensor:
        ``{"action": cat([a_a, a_b], 1)}``.

        Args:
            actions: The action dicts of the agents the critic sees, in ``critic_visible_actors`` order.
        """
        return MADDPG._concat(actions, "action")

    action_transform_function = staticmethod(critic_action_input)

    @staticmethod
    @ignores_extra_args  # 0.3.4's MADDPG.reward_function ended in ``*_``
    def reward_function(
        reward: torch.Tensor,
        discount: Union[float, torch.Tensor],
        next_value: torch.Tensor,
        terminal: torch.Tensor,
        others: Optional[Dict[str, Any]] = None,
    ) -> torch.Tensor:
        """Bellman target of an agent's critic: ``reward + discount * (1 - terminal) * next_value``.

        Args:
            reward: The agent's rewards ``[B, 1]``.
            discount: The discount factor.
            next_value: Value of the next states under the target critic ``[B, 1]``.
            terminal: 1 where the agent's episode terminated, ``[B, 1]``.
            others: The agent's custom attributes of the batch, for overrides that need them.
        """
        return bellman_target(reward, discount, next_value, terminal, others)

    # -- update steps -----------------------------------------------------------------------
    _make_batch = staticmethod(make_batch)

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SampledBatch
    ) -> torch.Tensor:
        return value_loss(self.criterion, predicted, target, batch.size)

    def _sample_rows(self) -> Optional[List[Rows]]:
        """One random set of rows per sub-policy (``None`` while the buffers are empty)."""
        sizes = [buffer.size() for buffer in self.replay_buffers]
        if len(set(sizes)) != 1:
            raise RuntimeError(
                f"the agents' replay buffers hold different numbers of transitions {sizes}; "
                f"store steps with store_transitions / store_episodes to keep them aligned"
            )
        if sizes[0] == 0:
            return None
        first = self.replay_buffers[0]
        return [
            Buffer.sample_method_random_unique(first, self.batch_size)
            for _ in range(self.sub_policy_num + 1)
        ]

    def _sample(self, agent: int, rows: Rows, concatenate: bool) -> SampledBatch:
        size, positions = rows
        _, batch = self.replay_buffers[agent].sample_batch(
            size,
            concatenate,
            sample_method=lambda *_: (size, positions),
            sample_attrs=_SAMPLE_ATTRS,
        )
        return self._make_batch(size, batch)

    def _critic_value(
        self,
        agent: int,
        batches: List[SampledBatch],
        states: str,
        actions: List[Dict[str, Any]],
        use_target: bool = False,
    ) -> torch.Tensor:
        """``Q_agent`` ``[B, 1]`` of the visible agents' ``states`` (attribute name) and ``actions``."""
        critic = self.critic_targets[agent] if use_target else self.critics[agent]
        output = safe_call(
            critic,
            self.state_concat_function([getattr(b, states) for b in batches]),
            self.action_concat_function(actions),
        )
        name = f"critic_targets[{agent}]" if use_target else f"critics[{agent}]"
        return value_column(output, batches[0].size, name)

    def _bellman_target(
        self, agent: int, policy: int, batches: List[SampledBatch], own: int
    ) -> torch.Tensor:
        """``r + discount * (1 - terminal) * Q'(s', mu'(s'))`` with sub-policy ``policy``'s target actors."""
        with torch.no_grad():
            next_actions = [
                self.action_transform_function(
                    split_output(safe_call(self.actor_targets[visible][policy], batch.next_state))[
                        0
                    ],
                    batch.next_state,
                    batch.others,
                )
                for visible, batch in zip(self.critic_visible_actors[agent], batches)
            ]
            next_value = self._critic_value(
                agent, batches, "next_state", next_actions, use_target=True
            )
            mine = batches[own]
            device = next_value.device
            return self.reward_function(
                mine.reward.to(device),
                self.discount,
                next_value,
                mine.terminal.to(device),
                mine.others,
            )

    def _update_critic(
        self, agent: int, batches: List[SampledBatch], target: torch.Tensor, step: bool
    ) -> Tuple[float, bool]:
        """Regress ``critics[agent]`` onto ``target`` when ``step``; ``(loss, whether no step was skipped)``."""
        value = self._critic_value(agent, batches, "state", [batch.action for batch in batches])
        loss = self._value_loss(value, target, batches[0])
        self._maybe_visualize(loss, f"critic_{agent}")
        taken = (
            self._optimize(loss, self.critic_optims[agent], self.critics[agent], self.gradient_max)
            if step
            else True
        )
        return loss.item(), taken

    def _update_actor(
        self, agent: int, policy: int, batches: List[SampledBatch], own: int, step: bool
    ) -> Tuple[float, bool]:
        """Ascend ``Q_agent`` with this actor's action and the stored actions of the others.

        Returns ``(policy value, whether no step was skipped)``.
        """
        actor, mine = self.actors[agent][policy], batches[own]
        with torch.set_grad_enabled(step):
            raw, _ = split_output(safe_call(actor, mine.state))
            actions = [batch.action for batch in batches]
            actions[own] = self.action_transform_function(raw, mine.state, mine.others)
            policy_value = self._critic_value(agent, batches, "state", actions).mean()
        taken = True
        if step:
            loss = -policy_value
            self._maybe_visualize(loss, f"actor_{agent}_{policy}")
            taken = self._optimize(loss, self.actor_optims[agent][policy], actor, self.gradient_max)
        return policy_value.item(), taken

    def _update_agent(
        self,
        agent: int,
        rows: List[Rows],
        update_value: bool,
        update_policy: bool,
        concatenate: bool,
    ) -> Tuple[float, float, bool]:
        """Train one agent's critic and sub-policies.

        Returns their mean policy value and value loss, and whether every step asked for was
        taken. A step skipped for a non-finite loss (see :meth:`TorchFramework._optimize`) ends
        the agent's steps in this update.
        """
        visible = self.critic_visible_actors[agent]
        own = visible.index(agent)
        values, losses, taken = [], [], True
        for policy, policy_rows in enumerate(rows):
            batches = [self._sample(other, policy_rows, concatenate) for other in visible]
            target = self._bellman_target(agent, policy, batches, own)
            loss, critic_taken = self._update_critic(agent, batches, target, update_value and taken)
            taken = taken and critic_taken
            value, actor_taken = self._update_actor(
                agent, policy, batches, own, update_policy and taken
            )
            taken = taken and actor_taken
            losses.append(loss)
            values.append(value)
        return sum(values) / len(values), sum(losses) / len(losses), taken

    def _agent_optimizers(self, agent: int) -> List[torch.optim.Optimizer]:
        return self.actor_optims[agent] + [self.critic_optims[agent]]

    def _update_agent_in_worker(
        self,
        agent: int,
        rows: List[Tuple[int, List[int]]],
        update_value: bool,
        update_policy: bool,
        concatenate: bool,
        buffers: Dict[int, Buffer],
        settings: List[List[Dict[str, Any]]],
    ) -> Tuple[float, float, bool]:
        """:meth:`_update_agent` in a process worker, on the shared networks with the worker's optimizers.

        ``buffers`` are the owner's current buffers of the agents ``agent`` sees, and
        ``settings`` the owner's parameter-group entries (e.g. learning rates changed by its
        schedulers) of the agent's optimizers.
        """
        for other, buffer in buffers.items():
            self.replay_buffers[other] = buffer
        for optim, groups in zip(self._agent_optimizers(agent), settings):
            for group, values in zip(optim.param_groups, groups):
                group.update(values)
        self._set_mode(True, *self.actors[agent], self.critics[agent])
        return self._update_agent(agent, rows, update_value, update_policy, concatenate)

    def _optimizer_states(self, agents: List[int]) -> List[List[Dict[str, Any]]]:
        """The state dicts of the optimizers of ``agents`` (read from a process worker)."""
        return [[optim.state_dict() for optim in self._agent_optimizers(agent)] for agent in agents]

    def _update_agents(self, jobs: List[Tuple[Any, ...]]) -> List[Tuple[float, float, bool]]:
        """Run :meth:`_update_agent` for every job, in the pool or in this thread."""
        if self.pool_type == "thread" and self.pool_size == 1:
            return [self._update_agent(*job) for job in jobs]
        if self.pool_type == "thread":
            return self._get_pool().starmap(self._update_agent, jobs)
        workers = self._get_pool()
        pending = []
        for agent, rows, *switches in jobs:
            # The networks are shared already; send the current buffers and optimizer settings.
            buffers = {
                other: self.replay_buffers[other] for other in self.critic_visible_actors[agent]
            }
            rows = [(size, positions.tolist()) for size, positions in rows]
            settings = [
                [
                    {key: value for key, value in group.items() if key != "params"}
                    for group in optim.param_groups
                ]
                for optim in self._agent_optimizers(agent)
            ]
            pending.append(
                workers[agent % len(workers)].apply_async(
                    call_in_worker,
                    ("_update_agent_in_worker", agent, rows, *switches, buffers, settings),
                )
            )
        results = [task.get() for task in pending]
        for optim in self.critic_optims + [o for agent in self.actor_optims for o in agent]:
            torch_internals.mark_stepped_for_schedulers(optim)  # the steps ran in the workers
        # A worker counts its skipped steps in its own copy; an agent skips one step at most.
        self.skipped_updates = getattr(self, "skipped_updates", 0) + sum(
            not taken for *_, taken in results
        )
        return results

    def update(
        self,
        update_value: bool = True,
        update_policy: bool = True,
        update_target: bool = True,
        concatenate_samples: bool = True,
    ) -> Optional[UpdateResult]:
        """Sample the same rows from every agent's buffer and train every agent on them.

        Args:
            update_value: Take optimizer steps on the critics.
            update_policy: Take optimizer steps on the actors.
            update_target: Soft-update every target network afterwards (not after a step
                skipped for a non-finite loss, see :meth:`TorchFramework._optimize`: such an
                update ends that agent's steps and moves no target).
            concatenate_samples: Hand the networks batched tensors (``False``: per-sample
                lists, which the concat functions then receive too).

        Returns:
            ``(mean policy value, mean value loss)`` over agents and sub-policies, as
            floats, or ``None`` while the buffers are empty.

        Raises:
            RuntimeError: When the agents' buffers hold different numbers of transitions.
        """
        rows = self._sample_rows()
        if rows is None:
            return None
        jobs = [
            (agent, rows, update_value, update_policy, concatenate_samples)
            for agent in range(self.agent_num)
        ]
        self._train_mode(True)
        try:
            results = self._update_agents(jobs)
        finally:
            self._train_mode(False)
        policy_values, value_losses, taken = zip(*results)
        if update_target and all(taken):
            self._update_targets()
        return UpdateResult(sum(policy_values) / self.agent_num, sum(value_losses) / self.agent_num)

    # -- pool and checkpoints -------------------------------------------------------------------
    def _get_pool(self) -> Union[ThreadPool, List[CtxPool]]:
        """The thread pool, or one single-process pool per worker (agent ``i`` -> worker ``i % n``)."""
        if self._pool is None:
            if self.pool_type == "thread":
                self._pool = ThreadPool(self.pool_size)
            else:
                for (
                    name
                ) in self._is_top:  # workers write the parameters in place, the owner reads them
                    getattr(self, name).share_memory()
                uses_cuda = any(
                    p.is_cuda for name in self._is_top for p in getattr(self, name).parameters()
                )
                context = WorkerCopy(self)
                self._pool = [
                    CtxPool(
                        1,
                        worker_contexts=[context],
                        is_copy_tensor=False,
                        share_method="cuda" if uses_cuda else "cpu",
                    )
                    for _ in range(min(self.pool_size, self.agent_num))
                ]
        return self._pool

    def close(self) -> None:
        """Stop the internal pool (a later :meth:`update` starts a new one).

        Process workers keep the optimizer states of their agents; they are copied
        back into this framework's optimizers first.
        """
        if isinstance(self._pool, list):
            self._fetch_optimizer_states(self._pool)
        self._stop_pool()

    def _fetch_optimizer_states(self, workers: List[CtxPool]) -> None:
        for index, worker in enumerate(workers):
            agents = list(range(index, self.agent_num, len(workers)))
            for agent, states in zip(
                agents, worker.apply(call_in_worker, ("_optimizer_states", agents))
            ):
                for optim, state in zip(self._agent_optimizers(agent), states):
                    # Own copies: shared CUDA memory dies with the worker that allocated it.
                    optim.load_state_dict(copy.deepcopy(state))

    def _stop_pool(self) -> None:
        pool, self._pool = self._pool, None
        for workers in pool if isinstance(pool, list) else [pool] if pool is not None else []:
            workers.terminate()
            workers.join()

    def __del__(self) -> None:
        if self.__dict__.get("_pool") is not None:
            self._stop_pool()

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None  # a pool cannot be copied; a copy starts its own when it needs one
        return state

    def load(
        self,
        model_dir: str,
        network_map: Optional[Dict[str, str]] = None,
        version: int = -1,
        *,
        trusted: bool = False,
    ) -> None:
        """Load the target networks (then copied into the online ones); see :meth:`TorchFramework.load`.

        A directory written by Machin 0.3.4 (``all_actor_target_<v>.pt`` and
        ``all_critic_target_<v>.pt``, whole pickled modules whose children are named
        ``actor_<agent>_<policy>`` and ``critic_<agent>``) is recognised when it holds no file
        of the current names; reading it needs ``trusted=True``.
        """
        names = self._file_names(network_map)
        if not any(file_versions(model_dir, name) for name in names.values()):
            old_names = {
                attr: _OLD_LAYOUT[attr][0] if name == attr else name for attr, name in names.items()
            }
            common = set.intersection(
                *(file_versions(model_dir, name) for name in old_names.values())
            )
            if common:
                self._load_034(
                    model_dir, old_names, version if version in common else max(common), trusted
                )
                self._post_load()
                return
        super().load(model_dir, network_map, version, trusted=trusted)

    def _load_034(
        self, model_dir: str, old_names: Dict[str, str], version: int, trusted: bool
    ) -> None:
        """Read 0.3.4's ``all_*_target`` files, renaming their keys to this layout."""
        files = {attr: LegacyFile(name, _OLD_LAYOUT[attr][1]) for attr, name in old_names.items()}
        load_legacy_files(
            {attr: getattr(self, attr) for attr in files}, files, model_dir, version, trusted
        )
