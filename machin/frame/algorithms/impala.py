"""IMPALA: actors play whole episodes, learners correct the policy lag with V-trace.

Samplers act with a (possibly stale) copy of the actor and store each episode as
one :class:`EpisodeTransition` in their part of an
:class:`EpisodeDistributedBuffer`, with the log-probability of every action under
the policy that chose it (``"action_log_prob"``). Learners sample whole episodes
across the group, compute V-trace targets (:func:`vtrace`) with truncated
importance weights, take one actor and one critic step and push the actor to the
model server, from which the samplers pull it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ...parallel.distributed.rpc_group import RpcGroup
from ...parallel.server import PushPullModelServer
from ...utils.compat import ignores_extra_args
from ..buffers.buffer_d import DistributedBuffer
from ..transition import Transition, TransitionBase
from .a2c import A2C, PolicyBatch, as_column, split_actor_output
from .base import split_output
from .utils import first_model_server

__all__ = ["EpisodeTransition", "EpisodeDistributedBuffer", "IMPALA", "vtrace"]

EPISODE_REQUIRED_ATTRS = ("state", "action", "next_state", "reward", "terminal", "action_log_prob")


class EpisodeTransition(Transition):
    """A whole episode in one record: the first dimension of every tensor counts the steps.

    Built like a :class:`~machin.frame.transition.Transition`, but tensors may have
    any common number of rows; or from a list of steps with :meth:`from_episode`.
    Custom attributes are never tensors (per-step values are kept as lists).
    """

    _required_batch_size = None

    @classmethod
    def from_episode(cls, episode: Sequence[Union[TransitionBase, Dict[str, Any]]]) -> EpisodeTransition:
        """Join the steps of an episode (``Transition`` objects or dicts) into one record.

        State, action and next-state tensors are concatenated key by key; rewards and
        terminals become ``[T, 1]`` tensors; each custom attribute becomes the list of
        its per-step values.

        Raises:
            ValueError: When the episode is empty or its steps have different attributes.
        """
        episode = list(episode)
        if not episode:
            raise ValueError("episode must hold at least one transition, got an empty list")
        keys = sorted(episode[0].keys())
        for step, t in enumerate(episode):
            if sorted(t.keys()) != keys:
                raise ValueError(
                    f"every step of an episode must have the same attributes: step 0 has {keys}, "
                    f"step {step} has {sorted(t.keys())}"
                )
        missing = [name for name in ("state", "action", "next_state", "reward", "terminal") if name not in keys]
        if missing:
            raise ValueError(f"the steps of the episode are missing required attribute(s) {missing}; they have {keys}")

        def major(name: str) -> Dict[str, torch.Tensor]:
            return {k: torch.cat([t[name][k] for t in episode]) for k in episode[0][name]}

        def sub(name: str) -> torch.Tensor:
            values = [t[name] for t in episode]
            if isinstance(values[0], torch.Tensor):
                return torch.cat([v.reshape(1, -1) for v in values])
            dtype = torch.bool if name == "terminal" else torch.get_default_dtype()
            return torch.tensor([[float(v)] for v in values], dtype=dtype)

        custom = {name: [t[name] for t in episode] for name in keys
                  if name not in ("state", "action", "next_state", "reward", "terminal")}
        return cls(major("state"), major("action"), major("next_state"), sub("reward"), sub("terminal"), **custom)


class EpisodeDistributedBuffer(DistributedBuffer):
    """A distributed buffer whose entries are whole episodes (:class:`EpisodeTransition`).

    Each member keeps up to ``buffer_size`` episodes (the oldest are overwritten);
    appending is local, so a sampler must be a member of ``group``. Sampling picks
    episodes across the group, without replacement, in proportion to each member's
    number of episodes (every episode with ``sample_method="all"``), and returns
    ``(count, ([episodes],))``. Data stays on the CPU.

    Args:
        buffer_name: Name of the buffer, unique in ``group``.
        group: The RPC group whose members hold the parts.
        buffer_size: Maximum number of episodes of the **local** part.
        generator: Optional ``torch.Generator`` seeding the sampling.
    """

    def __init__(self, buffer_name: str, group: RpcGroup, buffer_size: int, *,
                 generator: Optional[torch.Generator] = None):
        self._episodes: List[EpisodeTransition] = []
        self._next = 0
        super().__init__(buffer_name, group, buffer_size, generator=generator)

    def append(self, transition: Union[EpisodeTransition, List[Any]],
               required_attrs: Iterable[str] = EPISODE_REQUIRED_ATTRS) -> int:
        """Store one episode (an :class:`EpisodeTransition` or a list of steps) locally.

        When the local part is full, the oldest episode is overwritten.

        Args:
            transition: The episode; a list of steps (``Transition`` objects or dicts)
                is joined with :meth:`EpisodeTransition.from_episode`.
            required_attrs: Attributes the episode must have (by default the standard
                ones and ``action_log_prob``); ``()`` disables the check.

        Returns:
            Its position in the local part.

        Raises:
            ValueError: When a required attribute is missing, or the episode's
                attributes differ from those already stored.
        """
        episode = transition if isinstance(transition, EpisodeTransition) else EpisodeTransition.from_episode(transition)
        missing = [name for name in required_attrs if name not in episode]
        if missing:
            raise ValueError(
                f"the episode is missing required attribute(s) {missing}; it has {episode.keys()}"
            )
        with self._lock:
            if self._episodes and self._episodes[0].keys() != episode.keys():
                raise ValueError(
                    f"the episode has attributes {episode.keys()}, but the stored episodes have "
                    f"{self._episodes[0].keys()}"
                )
            episode.to("cpu")
            position = self._next
            if position == len(self._episodes):
                self._episodes.append(episode)
            else:
                self._episodes[position] = episode
            self._next = (position + 1) % self.buffer_size
            return position

    def extend(self, transitions: Iterable[Any], required_attrs: Iterable[str] = EPISODE_REQUIRED_ATTRS) -> List[int]:
        """Store several episodes locally.

        Args:
            transitions: The episodes (:class:`EpisodeTransition` objects).
            required_attrs: Attributes every episode must have.
        """
        return [self.append(t, required_attrs) for t in transitions]

    def size(self) -> int:
        """Number of episodes in the local part."""
        return len(self._episodes)

    def clear(self) -> None:
        """Remove every episode from the local part."""
        with self._lock:
            self._episodes, self._next = [], 0

    def _op_sample(self, count: int, _concatenate: bool = True, method: Any = "random_unique",
                   *_: Any) -> Tuple[int, Optional[Tuple[List[EpisodeTransition]]]]:
        with self._lock:
            if method == "all":
                chosen = range(len(self._episodes))
            else:
                count = min(count, len(self._episodes))
                chosen = self._rng.choice(len(self._episodes), size=count, replace=False) if count > 0 else []
            if len(chosen) == 0:
                return 0, None
            return len(chosen), ([self._episodes[i] for i in chosen],)


def vtrace(reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor, terminal: torch.Tensor,
           log_ratio: torch.Tensor, discount: float, clip_rho: float, clip_c: float
           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets and policy-gradient advantages of one episode (1-D tensors of length T).

    With ``rho_t = min(clip_rho, pi/mu)``, ``c_t = min(clip_c, pi/mu)`` (``pi/mu`` is
    ``exp(log_ratio_t)``) and ``g_t = discount * (1 - terminal_t)``::

        delta_t = rho_t * (r_t + g_t * V(x_{t+1}) - V(x_t))
        v_t     = V(x_t) + delta_t + g_t * c_t * (v_{t+1} - V(x_{t+1}))     (v_T = V(x_T))
        A_t     = rho_t * (r_t + g_t * v_{t+1} - V(x_t))

    which unrolls to ``v_s = V(x_s) + sum_t discount^(t-s) (prod_{i<t} c_i) delta_t``.
    ``next_value[t]`` is ``V(x_{t+1})``; after the last step nothing is corrected.

    Args:
        reward: Rewards ``r_t``.
        value: ``V(x_t)``.
        next_value: ``V(x_{t+1})`` (the value of each step's next state).
        terminal: 1 where the episode terminated at the step (no value after it).
        log_ratio: ``log pi(a_t|x_t) - log mu(a_t|x_t)``.
        discount: Discount factor.
        clip_rho: Truncation of the importance weights in ``delta_t`` and ``A_t``.
        clip_c: Truncation of the trace coefficients ``c_t``.

    Returns:
        ``(v, A)``: the value targets and the advantages, both of length T.
    """
    ratio = log_ratio.exp()
    rho = ratio.clamp(max=clip_rho)
    c = ratio.clamp(max=clip_c)
    gamma = discount * (1.0 - terminal.to(value.dtype))
    delta = rho * (reward + gamma * next_value - value)
    correction = torch.zeros_like(value)  # v_t - V(x_t)
    carried = torch.zeros((), dtype=value.dtype, device=value.device)
    for t in reversed(range(value.shape[0])):
        carried = delta[t] + gamma[t] * c[t] * carried
        correction[t] = carried
    targets = value + correction
    next_targets = torch.cat([targets[1:], next_value[-1:]])
    advantage = rho * (reward + gamma * next_targets - value)
    return targets, advantage


class IMPALA(A2C):
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
        lr_scheduler: See :class:`~machin.frame.algorithms.a2c.A2C`.
        lr_scheduler_args: See :class:`~machin.frame.algorithms.a2c.A2C`.
        lr_scheduler_kwargs: See :class:`~machin.frame.algorithms.a2c.A2C`.
        batch_size: Episodes per update.
        learning_rate: Learning rate of both optimizers.
        isw_clip_c: Truncation of the trace coefficients ``c``.
        isw_clip_rho: Truncation of the importance weights ``rho``; at least ``isw_clip_c``.
        entropy_weight: Weight of the mean entropy in the actor loss (``None``: unused).
        value_weight: Factor on the critic loss.
        gradient_max: Maximum gradient norm.
        discount: Discount factor.
        replay_size: Episodes kept by each member's part of the buffer.
        visualize: Draw the loss graphs on the first update.
        visualize_dir: Where to write the drawings.

    Raises:
        ValueError: When ``isw_clip_rho < isw_clip_c``, ``model_server`` holds no
            accessor, or an option is out of range.
    """

    @ignores_extra_args
    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        impala_group: RpcGroup,
        model_server: Tuple[PushPullModelServer],
        *,
        lr_scheduler: Optional[Callable] = None,
        lr_scheduler_args: Tuple[Tuple, ...] = (),
        lr_scheduler_kwargs: Tuple[Dict, ...] = (),
        batch_size: int = 5,
        learning_rate: float = 0.001,
        isw_clip_c: float = 1.0,
        isw_clip_rho: float = 1.0,
        entropy_weight: Optional[float] = None,
        value_weight: float = 0.5,
        gradient_max: float = math.inf,
        discount: float = 0.99,
        replay_size: int = 500,
        visualize: bool = False,
        visualize_dir: str = "",
    ):
        self._check_positive(isw_clip_c=isw_clip_c, isw_clip_rho=isw_clip_rho)
        if isw_clip_rho < isw_clip_c:
            raise ValueError(
                f"isw_clip_rho must be at least isw_clip_c, got isw_clip_rho={isw_clip_rho} and "
                f"isw_clip_c={isw_clip_c}"
            )
        server = first_model_server(model_server, "IMPALA")
        self.isw_clip_c = isw_clip_c
        self.isw_clip_rho = isw_clip_rho
        self.impala_group = impala_group
        self.model_server = (server,)
        self.is_syncing = True
        super().__init__(
            actor, critic, optimizer, criterion,
            lr_scheduler=lr_scheduler, lr_scheduler_args=lr_scheduler_args,
            lr_scheduler_kwargs=lr_scheduler_kwargs, batch_size=batch_size, actor_update_times=1,
            critic_update_times=1, actor_learning_rate=learning_rate, critic_learning_rate=learning_rate,
            entropy_weight=entropy_weight, value_weight=value_weight, gradient_max=gradient_max,
            discount=discount, normalize_advantage=False,
            replay_buffer=EpisodeDistributedBuffer("impala_buffer", impala_group, replay_size),
            visualize=visualize, visualize_dir=visualize_dir,
        )

    # -- syncing ------------------------------------------------------------------------
    def set_sync(self, is_syncing: bool) -> None:
        """Turn the automatic pull of the actor before :meth:`act` on or off.

        Args:
            is_syncing: ``True`` to pull the newest actor before every act call.
        """
        self.is_syncing = bool(is_syncing)

    def manual_sync(self) -> bool:
        """Load the newest actor from the model server (``False`` when none was pushed yet)."""
        return self.model_server[0].pull(self.actor)

    @ignores_extra_args
    def act(self, state: Dict[str, Any]) -> Any:
        """The actor's output ``(action, log_prob, ...)`` (pulling the newest actor first when syncing).

        Args:
            state: State dict ``{key: [B, ...]}`` for the actor.
        """
        if self.is_syncing:
            self.manual_sync()
        return super().act(state)

    # -- storing ------------------------------------------------------------------------
    def store_transition(self, transition: Any) -> None:
        """Not supported: IMPALA learns from whole episodes.

        Args:
            transition: Ignored.

        Raises:
            RuntimeError: Always; use :meth:`store_episode`.
        """
        raise RuntimeError("IMPALA stores whole episodes: call store_episode(list_of_steps) instead of store_transition")

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
            log_prob = split_actor_output(self._eval_act(episode.state, episode.action), "IMPALA")[1]
            log_prob = as_column(log_prob, steps, "the actor's log_prob output").view(-1)
            both = {k: torch.cat([episode.state[k], episode.next_state[k]]) for k in episode.state}
            values = as_column(split_output(self._criticize(both))[0], 2 * steps, "the critic output").view(-1)
        device = values.device
        behaviour = torch.tensor(episode.action_log_prob, dtype=values.dtype, device=device)
        targets, advantage = vtrace(
            episode.reward.view(-1).to(device, values.dtype), values[:steps], values[steps:],
            episode.terminal.view(-1).to(device), log_prob.to(device, values.dtype) - behaviour,
            self.discount, self.isw_clip_rho, self.isw_clip_c,
        )
        return PolicyBatch(steps, episode.state, episode.action, targets.view(-1, 1), advantage.view(-1, 1))

    @staticmethod
    def _join(batches: List[PolicyBatch]) -> PolicyBatch:
        def cat(dicts: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
            return {k: torch.cat([d[k] for d in dicts]) for k in dicts[0]}

        return PolicyBatch(
            sum(b.size for b in batches), cat([b.state for b in batches]), cat([b.action for b in batches]),
            torch.cat([b.target_value for b in batches]), torch.cat([b.advantage for b in batches]),
        )

    @ignores_extra_args
    def update(self, update_value: bool = True, update_policy: bool = True) -> Optional[Tuple[float, float]]:
        """Sample ``batch_size`` episodes across the group, take one actor and one critic step, push the actor.

        Args:
            update_value: Step the critic (otherwise its loss is only measured).
            update_policy: Step the actor (otherwise its loss is only measured).

        Returns:
            ``(policy value, value loss)`` as floats, or ``None`` when the group's
            buffer holds no episode.
        """
        size, sampled = self.replay_buffer.sample_batch(self.batch_size)
        if size == 0:
            return None
        self._set_mode(True, self.actor, self.critic)
        batch = self._join([self._episode_batch(episode) for episode in sampled[0]])
        policy_value = (self._update_actor if update_policy else self._evaluate_actor)(batch)
        value_loss = (self._update_critic if update_value else self._evaluate_critic)(batch)
        self._set_mode(False, self.actor, self.critic)
        self.model_server[0].push(self.actor)
        return policy_value, value_loss

