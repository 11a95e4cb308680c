"""Vectorised sampling: many environments, one batched ``act*`` call per step.

:class:`VecSampler` steps a group of environments together. At every step the current
states of all environments that take an action are stacked into one batch, the
framework chooses all their actions in a single ``act*`` call, and each environment
receives its own row. Every environment's steps are kept apart and handed to the
framework as that environment's own episodes (``store_episode``), or step by step
(``store_transition``). Finished environments are reset by the sampler; an episode that
is still running when :meth:`VecSampler.collect` returns goes on at the next call.
:meth:`VecSampler.collect_rollout` collects the fixed-length rollouts of on-policy
algorithms instead: ``n_steps`` steps of every environment, all of them stored, the
unfinished tail of each environment marked as not terminal so that its return is
bootstrapped from the critic.

The environments are a machin parallel wrapper
(:class:`~machin.env.wrappers.openai_gym.ParallelWrapperDummy` or
:class:`~machin.env.wrappers.openai_gym.ParallelWrapperSubProc`) or a gymnasium
``VectorEnv`` in any of its three autoreset modes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from ..env.wrappers.openai_gym import ParallelWrapperDummy, ParallelWrapperSubProc
from .algorithms.utils import Hidden, map_hidden

__all__ = ["EpisodeInfo", "VecSampler", "check_hidden_options", "replay_problem"]

ActionFn = Callable[[Any], Tuple[torch.Tensor, Dict[str, torch.Tensor]]]
CustomFn = Callable[[Any], Dict[str, torch.Tensor]]
HiddenFn = Callable[[Any], Hidden]
_STORE_MODES = ("episode", "transition")


@dataclass(frozen=True)
class EpisodeInfo:
    """Summary of one finished episode, for logging.

    Attributes:
        env_index: Index of the environment that ran the episode.
        episode_return: Sum of the episode's rewards (undiscounted).
        length: Number of steps.
        terminated: The episode reached a terminal state.
        truncated: The episode was cut short (time limit) without reaching a terminal
            state; never true together with ``terminated``.
    """

    env_index: int
    episode_return: float
    length: int
    terminated: bool
    truncated: bool


class _Step(NamedTuple):
    """What one step of all environments gives back (arrays with one row per environment)."""

    next_obs: np.ndarray  # observation reached by the step (the final one at an episode end)
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    obs: np.ndarray  # observation to act on next (after any reset)
    ready: np.ndarray  # environments that take an action at the next step
    reset_states: Optional[Dict[int, Any]] = (
        None  # finished environment -> generator state its reset uses
    )


class _Acted(NamedTuple):
    """The result of one act call, split per acting environment."""

    actions: np.ndarray  # for the environments, in the action space's dtype and shape
    stored: Dict[str, Tuple[torch.Tensor, ...]]  # action dict entries, one [1, ...] view per row
    custom: Dict[str, List[Any]]  # custom attributes, one Python number per row
    hidden: Optional[Hidden] = (
        None  # the new hidden state of the acting rows (batch first), detached
    )


def _flags(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=bool).reshape(-1)


def _hidden_rows(hidden: Hidden) -> List[Hidden]:
    """Split a batch-first hidden state into one ``[1, ...]`` hidden state per row."""
    if isinstance(hidden, tuple):
        return list(zip(*(part.split(1) for part in hidden)))
    return list(hidden.split(1))


def _hidden_tensors(hidden: Any) -> Optional[Tuple[torch.Tensor, ...]]:
    """The tensors of a hidden state, or ``None`` when it is neither a tensor nor a tuple of them."""
    parts = hidden if isinstance(hidden, tuple) else (hidden,)
    if parts and all(isinstance(part, torch.Tensor) and part.dim() > 0 for part in parts):
        return parts
    return None


def check_hidden_options(
    hidden_key: Optional[str], initial_hidden: Any, hidden_fn: Any = None, state_key: str = "state"
) -> None:
    """Check the recurrent options of :class:`VecSampler` (and of the trainer, which passes them on).

    Args:
        hidden_key: Name of the hidden-state argument, or ``None``.
        initial_hidden: The hidden state of one environment at an episode start.
        hidden_fn: Optional extractor of the new hidden state.
        state_key: Key of the observation, which ``hidden_key`` must differ from.

    Raises:
        ValueError: When the options do not go together.
    """
    if hidden_key is None:
        if initial_hidden is not None or hidden_fn is not None:
            raise ValueError(
                "initial_hidden and hidden_fn are only used with hidden_key: pass hidden_key too"
            )
        return
    if not isinstance(hidden_key, str) or hidden_key == state_key:
        raise ValueError(
            f"hidden_key must be a str other than state_key {state_key!r}, got {hidden_key!r}"
        )
    parts = _hidden_tensors(initial_hidden)
    if parts is None or any(part.shape[0] != 1 for part in parts):
        raise ValueError(
            "hidden_key needs initial_hidden: the hidden state of one environment at an episode "
            f"start, a [1, ...] tensor or a tuple of them, got {initial_hidden!r}"
        )


def replay_problem(envs: Any) -> Optional[str]:
    """Why the sampler cannot replay the environments of ``envs`` one by one, or ``None`` when it can.

    Replaying is what an exact resume of a saved run needs (see
    :meth:`VecSampler.state_dict`): each environment is reset from its recorded seed or
    generator state and stepped through its recorded actions, on its own.
    """
    if isinstance(envs, ParallelWrapperSubProc):
        return (
            "its environments run in subprocesses (ParallelWrapperSubProc), where their random generators "
            "cannot be read nor their episodes replayed one by one: use a ParallelWrapperDummy or a gymnasium "
            "SyncVectorEnv"
        )
    if isinstance(envs, VectorEnv):
        if not isinstance(envs, SyncVectorEnv):
            return (
                f"it is a {type(envs).__name__}: of the gymnasium vector environments, only an unwrapped "
                f"SyncVectorEnv lets its environments be replayed one by one"
            )
        if (
            AutoresetMode(envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
            == AutoresetMode.SAME_STEP
        ):
            return (
                "its autoreset mode is SAME_STEP, which resets an environment inside the step that ends its "
                "episode, so the generator state that reset starts from cannot be recorded: use NEXT_STEP "
                "(gymnasium's default) or DISABLED"
            )
    return None


def _generator_state(env: Any) -> Optional[Dict[str, Any]]:
    """The state of a gymnasium environment's ``np_random`` (``None`` for an environment without one)."""
    generator = getattr(getattr(env, "unwrapped", env), "np_random", None)
    return None if generator is None else generator.bit_generator.state


def _set_generator_state(env: Any, state: Dict[str, Any]) -> None:
    getattr(env, "unwrapped", env).np_random.bit_generator.state = state


class _WrapperEnvs:
    """A machin parallel wrapper; finished environments are reset right after the step."""

    def __init__(self, wrapper: Union[ParallelWrapperDummy, ParallelWrapperSubProc]) -> None:
        self.wrapper = wrapper
        self.size = wrapper.size()
        self.action_space = wrapper.action_space
        self.observation_space = wrapper.observation_space
        self.problem = replay_problem(wrapper)  # why it cannot be replayed, or None
        self.replayable = self.problem is None
        self._all = np.ones(self.size, dtype=bool)

    def reset(self, seeds: Optional[List[int]]) -> np.ndarray:
        if seeds is not None:
            self.wrapper.seed(seeds)
        return np.stack(self.wrapper.reset())

    def generator_state(self, index: int) -> Optional[Dict[str, Any]]:
        """The generator state of environment ``index`` (``None`` when it cannot be read)."""
        return _generator_state(self.wrapper._envs[index]) if self.replayable else None

    def restart(self, index: int, state: Dict[str, Any], pending: bool) -> Optional[np.ndarray]:
        """Reset environment ``index`` from generator ``state``; its observation (the wrapper never waits)."""
        _set_generator_state(self.wrapper._envs[index], state)
        return self.wrapper.reset(idx=[index])[0]

    def step_one(self, index: int, action: np.ndarray) -> Tuple[np.ndarray, bool]:
        """Step environment ``index`` alone: its observation and whether its episode ended."""
        obs, _, done, _ = self.wrapper.step([action], idx=[index])
        return obs[0], bool(done[0])

    def step(self, actions: np.ndarray) -> _Step:
        obs, reward, _, infos = self.wrapper.step(actions)
        next_obs = np.stack(obs)
        terminated = _flags([info["terminated"] for info in infos])
        truncated = _flags([info["truncated"] for info in infos])
        done = np.flatnonzero(terminated | truncated)
        current, reset_states = next_obs, {}
        if done.size:
            reset_states = {index: self.generator_state(index) for index in done.tolist()}
            current = next_obs.copy()
            current[done] = np.stack(self.wrapper.reset(idx=done.tolist()))
        return _Step(
            next_obs,
            np.asarray(reward, dtype=np.float64),
            terminated,
            truncated,
            current,
            self._all,
            reset_states,
        )


class _GymVectorEnvs:
    """A gymnasium ``VectorEnv``, in whichever autoreset mode it was built with.

    * ``NEXT_STEP`` (gymnasium's default): an environment that finished is reset by the
      following ``step`` call, which ignores its action and yields no transition; it
      takes no part in that step's ``act`` call.
    * ``SAME_STEP``: the step that ends an episode already returns the reset observation;
      the final one is read from ``info["final_obs"]``.
    * ``DISABLED``: finished environments are reset here with ``reset_mask``.
    """

    def __init__(self, env: VectorEnv) -> None:
        self.env = env
        self.size = env.num_envs
        self.action_space = env.single_action_space
        self.observation_space = env.single_observation_space
        self.mode = AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        self.problem = replay_problem(env)  # why it cannot be replayed, or None
        self.replayable = self.problem is None
        self._all = np.ones(self.size, dtype=bool)

    def reset(self, seeds: Optional[List[int]]) -> np.ndarray:
        obs, _ = self.env.reset(seed=seeds)
        return np.array(obs)

    def generator_state(self, index: int) -> Optional[Dict[str, Any]]:
        """The generator state of environment ``index`` (``None`` when it cannot be read)."""
        return _generator_state(self.env.envs[index]) if self.replayable else None

    def restart(self, index: int, state: Dict[str, Any], pending: bool) -> Optional[np.ndarray]:
        """Reset environment ``index`` from generator ``state`` and return its observation.

        ``pending``: the environment waits for the reset that the next step makes
        (``NEXT_STEP``): only its generator is set and the vector environment told.
        """
        env = self.env.envs[index]
        _set_generator_state(env, state)
        if pending:
            self.env._autoreset_envs[index] = True
            return None
        return env.reset()[0]

    def step_one(self, index: int, action: np.ndarray) -> Tuple[np.ndarray, bool]:
        """Step environment ``index`` alone: its observation and whether its episode ended."""
        obs, _, terminated, truncated, _ = self.env.envs[index].step(action)
        return obs, bool(terminated or truncated)

    def step(self, actions: np.ndarray) -> _Step:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        obs = np.array(obs)  # a copy: a vector env built with copy=False reuses its array
        terminated, truncated = _flags(terminated), _flags(truncated)
        done = terminated | truncated
        next_obs, current, ready = obs, obs, self._all
        # the generators before the resets: NEXT_STEP resets at the next step, DISABLED below
        reset_states = {
            index: self.generator_state(index) for index in np.flatnonzero(done).tolist()
        }
        if self.mode == AutoresetMode.NEXT_STEP:
            ready = ~done
        elif done.any():
            if self.mode == AutoresetMode.SAME_STEP:
                next_obs = obs.copy()
                final = info["final_obs"]
                for index in np.flatnonzero(done):
                    next_obs[index] = final[index]
            else:
                current = obs.copy()
                reset_obs, _ = self.env.reset(options={"reset_mask": done})
                current[done] = np.asarray(reset_obs)[done]
        return _Step(
            next_obs,
            np.asarray(reward, dtype=np.float64),
            terminated,
            truncated,
            current,
            ready,
            reset_states,
        )


def _array_space(space: Any, what: str) -> Tuple[Tuple[int, ...], np.dtype]:
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(
            f"VecSampler needs an array {what} space (Box, Discrete, MultiDiscrete or "
            f"MultiBinary), got {space!r}"
        )
    return tuple(shape), np.dtype(dtype)


def _check_count(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def _env_group(envs: Any) -> Union[_WrapperEnvs, _GymVectorEnvs]:
    """The sampler's view of a supported group of environments."""
    if isinstance(envs, (ParallelWrapperDummy, ParallelWrapperSubProc)):
        return _WrapperEnvs(envs)
    if isinstance(envs, VectorEnv):
        return _GymVectorEnvs(envs)
    raise TypeError(
        "envs must be a ParallelWrapperDummy, a ParallelWrapperSubProc or a gymnasium "
        f"VectorEnv, got {type(envs).__name__}"
    )


def _check_sampler_options(
    framework: Any,
    act_kwargs: Any,
    state_key: Any,
    action_key: Any,
    store: Any,
    seed: Any,
    state_dtype: Any,
    functions: Dict[str, Any],
) -> None:
    """The type and value checks of :class:`VecSampler`'s options (``functions``: the optional callables)."""
    if act_kwargs is not None and not isinstance(act_kwargs, dict):
        raise TypeError(f"act_kwargs must be a dict or None, got {type(act_kwargs).__name__}")
    for name, key in (("state_key", state_key), ("action_key", action_key)):
        if not isinstance(key, str):
            raise TypeError(f"{name} must be a str, got {key!r} of type {type(key).__name__}")
    if store not in _STORE_MODES:
        raise ValueError(f"store must be one of {_STORE_MODES}, got {store!r}")
    store_name = f"store_{store}"
    if not callable(getattr(framework, store_name, None)):
        raise ValueError(
            f'store="{store}" needs framework.{store_name}, which '
            f"{type(framework).__name__} does not have"
        )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int or None, got {seed!r} of type {type(seed).__name__}")
    if state_dtype is not None and not isinstance(state_dtype, torch.dtype):
        raise TypeError(f"state_dtype must be a torch.dtype or None, got {state_dtype!r}")
    for name, function in functions.items():
        if function is not None and not callable(function):
            raise TypeError(f"{name} must be callable or None, got {function!r}")


class VecSampler:
    """Collect experience from N environments with one batched ``act*`` call per step.

    At every step the states of the environments that act are stacked into
    ``{state_key: tensor[M, *obs_shape]}`` and passed to ``framework.<act_method>``
    with ``act_kwargs``. The first element of the result (or the result itself when it
    is not a tuple) is the action batch ``[M, ...]``: row ``k`` goes to the ``k``-th
    acting environment, converted to the action space's dtype and shape (a discrete
    action ``[M, 1]`` becomes one integer per environment), and is stored as
    ``{action_key: row}``. Pass ``action_fn`` when the action to store differs from the
    one the environment receives.

    Each step of environment ``i`` becomes the transition::

        {"state": {state_key: s[1, ...]}, "action": {action_key: a[1, ...]},
         "next_state": {state_key: s'[1, ...]}, "reward": float,
         "terminal": terminated, "truncated": truncated}

    ``terminal`` is gymnasium's ``terminated`` flag; ``truncated`` is true only for a
    step that ended the episode by a time limit without reaching a terminal state (so
    both are never true together, and the learner bootstraps from ``next_state`` at a
    time-limit cut). The steps of one environment form its episodes: with
    ``store="episode"`` each finished episode is passed to ``framework.store_episode``
    as one list, in order (and :meth:`collect_rollout` also stores the unfinished
    tail of each environment at the end of a fixed-length rollout); with
    ``store="transition"`` every step is passed to
    ``framework.store_transition`` as soon as it happens. Episodes that finish at the
    same step are stored in environment order. Stored state tensors are rows (views) of
    the batch tensors, so ``next_state`` of one step and ``state`` of the next hold the
    same values.

    **Recurrent networks.** With ``hidden_key``, the sampler keeps one hidden state per
    environment and feeds it back: every act call also receives
    ``{hidden_key: hidden[M, ...]}`` (the rows of the acting environments), the new
    hidden state is read from the act output (its last element, or ``hidden_fn(output)``)
    and kept, and a finished environment starts its next episode from
    ``initial_hidden`` again. Each stored step records the hidden state the network was
    given in its ``state`` dict and the new one in its ``next_state`` dict, both under
    ``hidden_key``, as :class:`~machin.frame.algorithms.r2d1.R2D1` and the DRQN pattern
    expect. Hidden states are batch first (``[M, ...]``, as ``nn.GRUCell`` or a network
    that transposes an ``nn.GRU`` state); a tuple of such tensors (an LSTM's
    ``(h, c)``) is kept and stored part by part as a tuple.

    The environments are reset on the first :meth:`collect` (environment ``i`` with
    ``seed + i`` when ``seed`` is given); later resets, after each finished episode, are
    not seeded, so every environment continues its own random stream. The sampler does
    not close the environments.

    Args:
        framework: Any machin algorithm (or an object with the same ``act*`` /
            ``store_*`` / ``update`` methods).
        envs: A :class:`~machin.env.wrappers.openai_gym.ParallelWrapperDummy`, a
            :class:`~machin.env.wrappers.openai_gym.ParallelWrapperSubProc` or a
            gymnasium ``VectorEnv`` (any autoreset mode).
        act_method: Name of the framework's method that chooses actions, e.g.
            ``"act"``, ``"act_discrete"``, ``"act_discrete_with_noise"``,
            ``"act_with_noise"``.
        act_kwargs: Extra keyword arguments of every act call, e.g.
            ``{"noise_param": (0.0, 0.2), "mode": "normal"}`` for ``act_with_noise``, or
            ``{"deterministic": True}`` with ``act_method="act"`` of SAC or the A2C family
            for the policy's most likely actions (playing a trained agent; its actor must
            take ``deterministic``, see
            :class:`~machin.frame.algorithms.policy.StochasticActing`).
        state_key: Key of the observation in the state dictionaries (the name of the
            network's ``forward`` argument).
        action_key: Key of the action in the stored action dictionaries.
        store: ``"episode"`` (``store_episode`` per finished episode) or
            ``"transition"`` (``store_transition`` per step).
        seed: Seed of the first reset (environment ``i`` gets ``seed + i``); ``None``
            leaves the environments unseeded.
        state_dtype: dtype of the state tensors; ``None`` means
            ``torch.get_default_dtype()`` (pass e.g. ``torch.uint8`` to keep images small).
        action_fn: Maps the act output to ``(actions for the environments [M, ...],
            {key: stored action [M, ...]})``; ``None`` takes the first element of the
            output for both.
        custom_fn: Maps the act output to extra per-step attributes, ``{name: tensor}``
            with one number per acting environment (shape ``[M]`` or ``[M, 1]``); each
            step stores its number as a custom attribute, e.g.
            ``lambda output: {"action_log_prob": output[1]}`` for IMPALA.
        hidden_key: Name of the network's hidden-state argument and of its key in the
            stored state dicts; ``None`` (the default) for networks without memory.
        initial_hidden: The hidden state an episode starts from, for one environment:
            a ``[1, ...]`` tensor (e.g. ``torch.zeros(1, hidden_size)``) or a tuple of
            them. Required with ``hidden_key``.
        hidden_fn: Maps the act output to the new hidden state ``[M, ...]``; ``None``
            takes the output's last element (where machin's ``act*`` methods put the
            network's extra outputs).

    Attributes:
        total_steps: Transitions taken over the sampler's life.
        total_episodes: Episodes finished over the sampler's life.

    Raises:
        TypeError: If ``envs`` is not a supported environment group, its spaces are not
            array spaces, or an option has the wrong type.
        ValueError: If ``act_method`` is not a method of ``framework``, ``store`` is
            unknown, ``framework`` lacks the store method it needs, or the recurrent
            options do not go together.
    """

    def __init__(
        self,
        framework: Any,
        envs: Union[ParallelWrapperDummy, ParallelWrapperSubProc, VectorEnv],
        *,
        act_method: str = "act",
        act_kwargs: Optional[Dict[str, Any]] = None,
        state_key: str = "state",
        action_key: str = "action",
        store: str = "episode",
        seed: Optional[int] = None,
        state_dtype: Optional[torch.dtype] = None,
        action_fn: Optional[ActionFn] = None,
        custom_fn: Optional[CustomFn] = None,
        hidden_key: Optional[str] = None,
        initial_hidden: Optional[Hidden] = None,
        hidden_fn: Optional[HiddenFn] = None,
    ) -> None:
        self._envs = _env_group(envs)
        self._act = self._find_act(framework, act_method)
        _check_sampler_options(
            framework,
            act_kwargs,
            state_key,
            action_key,
            store,
            seed,
            state_dtype,
            {"action_fn": action_fn, "custom_fn": custom_fn, "hidden_fn": hidden_fn},
        )
        check_hidden_options(hidden_key, initial_hidden, hidden_fn, state_key)

        self.framework = framework
        self.act_method = act_method
        self.act_kwargs = dict(act_kwargs or {})
        self.state_key = state_key
        self.action_key = action_key
        self.store = store
        self.seed = seed
        self.state_dtype = state_dtype
        self.action_fn = action_fn
        self.custom_fn = custom_fn
        self.hidden_key = hidden_key
        self.initial_hidden = (
            None if initial_hidden is None else map_hidden(torch.Tensor.detach, initial_hidden)
        )
        self.hidden_fn = hidden_fn
        self._store = getattr(framework, f"store_{store}")
        _array_space(self._envs.observation_space, "observation")
        self._action_shape, self._action_dtype = _array_space(self._envs.action_space, "action")
        self._action_size = math.prod(self._action_shape)

        self._started = False
        self._seeded = False
        self._obs: Optional[torch.Tensor] = None
        self._ready = np.ones(self.size, dtype=bool)
        self._hidden: Optional[Hidden] = (
            None  # [size, ...]: every environment's current hidden state
        )
        self._episodes: List[List[Dict[str, Any]]] = [[] for _ in range(self.size)]
        self._returns = [0.0] * self.size
        self._lengths = [0] * self.size
        self._update_credit = 0.0
        # how each environment's episode in progress began ({"seed": ...} or {"random": generator state})
        # and the actions it took since, so that a resumed run can replay it
        self._starts: List[Dict[str, Any]] = [{} for _ in range(self.size)]
        self._actions: List[List[np.ndarray]] = [[] for _ in range(self.size)]
        self._call: Optional[Dict[str, Any]] = None  # progress of the collect call in progress
        self._resumed_call: Optional[Dict[str, Any]] = (
            None  # a saved call, which the next call continues
        )
        self.total_steps = 0
        self.total_episodes = 0

    @staticmethod
    def _find_act(framework: Any, act_method: str) -> Callable[..., Any]:
        if not isinstance(act_method, str):
            raise TypeError(
                f"act_method must be a str, got {act_method!r} of type {type(act_method).__name__}"
            )
        method = getattr(framework, act_method, None)
        if not callable(method):
            known = sorted(
                name
                for name in dir(framework)
                if name.startswith("act") and callable(getattr(framework, name, None))
            )
            raise ValueError(
                f"act_method {act_method!r} is not a method of {type(framework).__name__}; "
                f"its act methods are {known}"
            )
        return method

    @property
    def size(self) -> int:
        """Number of environments."""
        return self._envs.size

    # -- resetting and conversion -------------------------------------------------------

    def reset(self) -> None:
        """Reset every environment and drop the episodes in progress (nothing is stored).

        :meth:`collect` calls it once by itself; the first reset is seeded with
        ``seed + i`` for environment ``i`` when ``seed`` was given.
        """
        seeds = None
        if self.seed is not None and not self._seeded:
            seeds = [self.seed + index for index in range(self.size)]
        self._starts = [
            {"seed": seeds[index]}
            if seeds is not None
            else {"random": self._envs.generator_state(index)}
            for index in range(self.size)
        ]
        self._actions = [[] for _ in range(self.size)]
        self._obs = self._to_tensor(self._envs.reset(seeds))
        if self.hidden_key is not None:
            self._hidden = map_hidden(
                lambda h: h.repeat(self.size, *([1] * (h.dim() - 1))), self.initial_hidden
            )
        self._seeded = True
        self._started = True
        self._ready = np.ones(self.size, dtype=bool)
        self._episodes = [[] for _ in range(self.size)]
        self._returns = [0.0] * self.size
        self._lengths = [0] * self.size

    def _to_tensor(self, obs: np.ndarray) -> torch.Tensor:
        dtype = self.state_dtype or torch.get_default_dtype()
        return torch.as_tensor(obs).to(dtype)

    def _choose_actions(
        self, state: torch.Tensor, rows: int, hidden: Optional[Hidden] = None
    ) -> _Acted:
        """One act call for ``rows`` environments: their actions, and per row what to store."""
        inputs = {self.state_key: state}
        if self.hidden_key is not None:
            inputs[self.hidden_key] = hidden
        output = self._act(inputs, **self.act_kwargs)
        if self.action_fn is not None:
            action, stored = self.action_fn(output)
        else:
            action = output[0] if isinstance(output, tuple) else output
            stored = {self.action_key: action}
        custom = self.custom_fn(output) if self.custom_fn is not None else {}
        where = f"{type(self.framework).__name__}.{self.act_method}"
        for name, value in (("action", action), *stored.items(), *custom.items()):
            if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] != rows:
                got = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(
                    f"{where} must return a tensor with one row per acting environment for "
                    f"{name!r}: expected {rows} rows, got {got}"
                )
        for name, value in custom.items():
            if value.numel() != rows:
                raise ValueError(
                    f"custom_fn must give one number per acting environment for {name!r}: "
                    f"expected shape [{rows}] or [{rows}, 1], got {list(value.shape)}"
                )
        array = action.detach().cpu().numpy()
        if array.size != rows * self._action_size:
            raise ValueError(
                f"{where} returned actions of shape {list(action.shape)}, which cannot be "
                f"split into {rows} actions of shape {self._action_shape} for "
                f"{self._envs.action_space!r}"
            )
        return _Acted(
            array.reshape((rows, *self._action_shape)).astype(self._action_dtype, copy=False),
            {key: value.split(1) for key, value in stored.items()},
            {key: value.detach().reshape(-1).tolist() for key, value in custom.items()},
            None if self.hidden_key is None else self._new_hidden(output, rows, hidden, where),
        )

    def _new_hidden(self, output: Any, rows: int, given: Hidden, where: str) -> Hidden:
        """The new hidden state in the act output, checked against the one that was given."""
        if self.hidden_fn is not None:
            new = self.hidden_fn(output)
        elif isinstance(output, tuple) and len(output) > 1:
            new = output[-1]
        else:
            raise ValueError(
                f"{where} must return the new hidden state as the last element of a tuple "
                f"(or pass hidden_fn), got {type(output).__name__}"
            )
        parts, given_parts = _hidden_tensors(new), _hidden_tensors(given)
        if (
            parts is None
            or len(parts) != len(given_parts)
            or any(
                part.shape[1:] != old.shape[1:] or part.shape[0] != rows
                for part, old in zip(parts, given_parts)
            )
        ):
            shapes = [list(p.shape) for p in parts] if parts is not None else type(new).__name__
            raise ValueError(
                f"the new hidden state from {where} must have the shape of the given one "
                f"{[list(p.shape) for p in given_parts]} (one row per acting environment), got {shapes}"
            )
        return map_hidden(torch.Tensor.detach, new)

    # -- one step of every environment ------------------------------------------------

    def _step(self) -> Tuple[int, List[EpisodeInfo]]:
        """Step all environments once; return the number of transitions and the finished episodes."""
        acting = np.flatnonzero(self._ready)
        given = self._hidden
        if acting.size == self.size:
            acted = self._choose_actions(self._obs, self.size, given)
            actions = acted.actions
        else:  # gymnasium NEXT_STEP: environments being reset ignore their action
            actions = np.zeros((self.size, *self._action_shape), dtype=self._action_dtype)
            acted = _Acted(actions, {}, {})
            if acting.size:
                rows = torch.from_numpy(acting)
                if given is not None:
                    given = map_hidden(lambda h: h[rows], given)
                acted = self._choose_actions(self._obs[rows], acting.size, given)
                actions[acting] = acted.actions
        result = self._envs.step(actions)
        if self._envs.replayable:
            self._record(acting, actions, result.reset_states)
        next_state = self._to_tensor(result.next_obs)
        state = self._obs
        self._obs = next_state if result.obs is result.next_obs else self._to_tensor(result.obs)
        self._ready = result.ready

        # Per-row views, each batch split in one call; plain Python scalars.
        states, next_states = state.split(1), next_state.split(1)
        if acted.hidden is not None:
            given_rows, new_rows = _hidden_rows(given), _hidden_rows(acted.hidden)
            self._keep_hidden(acting, acted.hidden)
        rewards = result.reward.tolist()
        terminals, truncations = result.terminated.tolist(), result.truncated.tolist()
        finished = []
        for row, index in enumerate(acting.tolist()):
            reward, terminated, truncated = rewards[index], terminals[index], truncations[index]
            transition = {
                "state": {self.state_key: states[index]},
                "action": {key: value[row] for key, value in acted.stored.items()},
                "next_state": {self.state_key: next_states[index]},
                "reward": reward,
                "terminal": terminated,
                "truncated": truncated and not terminated,
                **{key: value[row] for key, value in acted.custom.items()},
            }
            if acted.hidden is not None:
                transition["state"][self.hidden_key] = given_rows[row]
                transition["next_state"][self.hidden_key] = new_rows[row]
            self._returns[index] += reward
            self._lengths[index] += 1
            if self.store == "transition":
                self._store(transition)
            else:
                self._episodes[index].append(transition)
            if terminated or truncated:
                finished.append(self._finish(index, terminated, truncated and not terminated))
        self.total_steps += acting.size
        return acting.size, finished

    def _record(
        self, acting: np.ndarray, actions: np.ndarray, reset_states: Dict[int, Any]
    ) -> None:
        """Keep the actions of the acting environments; a finished one starts a new record from its reset."""
        for index in acting.tolist():
            self._actions[index].append(actions[index].copy())
        for index, state in reset_states.items():
            self._starts[index], self._actions[index] = {"random": state}, []

    def _keep_hidden(self, acting: np.ndarray, new: Hidden) -> None:
        """Store the acting rows' new hidden states (a fresh tensor: stored rows stay untouched)."""
        if acting.size == self.size:
            self._hidden = new
            return
        rows = torch.from_numpy(acting)

        def scatter(current: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
            updated = current.clone()
            updated[rows] = part
            return updated

        self._hidden = map_hidden(scatter, self._hidden, new)

    def _finish(self, index: int, terminated: bool, truncated: bool) -> EpisodeInfo:
        if self._hidden is not None:  # the next episode starts from the initial hidden state

            def restart(current: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
                current = current.clone()
                current[index] = initial[0]
                return current

            self._hidden = map_hidden(restart, self._hidden, self.initial_hidden)
        if self.store == "episode":
            self._store(self._episodes[index])
            self._episodes[index] = []
        info = EpisodeInfo(index, self._returns[index], self._lengths[index], terminated, truncated)
        self._returns[index], self._lengths[index] = 0.0, 0
        self.total_episodes += 1
        return info

    # -- public loop ----------------------------------------------------------------------

    def collect(
        self,
        steps: Optional[int] = None,
        episodes: Optional[int] = None,
        *,
        updates_per_step: float = 0.0,
        on_step: Optional[Callable[[int, List[EpisodeInfo]], None]] = None,
    ) -> List[EpisodeInfo]:
        """Step every environment until ``steps`` transitions or ``episodes`` episodes.

        All environments always step together, so the last step may overshoot ``steps``
        by up to ``size - 1`` transitions and ``episodes`` by the other episodes ending at
        the same step. With both limits, the first one reached stops the loop. Episodes
        still running afterwards continue at the next call.

        Args:
            steps: Stop once this many transitions (summed over environments) were taken
                in this call.
            episodes: Stop once this many episodes finished in this call.
            updates_per_step: Call ``framework.update()`` this many times per transition
                (fractions accumulate across steps and calls), right after each step, e.g.
                ``1.0`` for one update per environment step.
            on_step: Called after each step (and its updates) as
                ``on_step(transitions_taken, episodes_finished)``.

        Returns:
            The episodes that finished during this call, in the order they finished.

        Raises:
            ValueError: If both limits are ``None``, a limit is not a positive integer,
                ``updates_per_step`` is negative, or updates are asked for and the
                framework has no ``update`` method; also when the act method's output
                does not have one row per acting environment.
        """
        if steps is None and episodes is None:
            raise ValueError("collect needs steps or episodes (or both), got neither")
        _check_count("steps", steps)
        _check_count("episodes", episodes)
        if (
            isinstance(updates_per_step, bool)
            or not isinstance(updates_per_step, (int, float))
            or not updates_per_step >= 0
        ):
            raise ValueError(
                f"updates_per_step must be a non-negative number, got {updates_per_step!r}"
            )
        if updates_per_step > 0 and not callable(getattr(self.framework, "update", None)):
            raise ValueError(
                f"updates_per_step={updates_per_step!r} needs framework.update, which "
                f"{type(self.framework).__name__} does not have"
            )
        if not self._started:
            self.reset()
        call = self._begin_call("collect", {"steps": steps, "episodes": episodes})
        finished = call["finished"]
        while (steps is None or call["taken"] < steps) and (
            episodes is None or len(finished) < episodes
        ):
            count, done = self._step()
            call["taken"] += count
            finished.extend(done)
            if updates_per_step > 0:
                self._update_credit += count * updates_per_step
                for _ in range(int(self._update_credit)):
                    self.framework.update()
                self._update_credit -= int(self._update_credit)
            if on_step is not None:
                on_step(count, done)
        self._call = None
        return finished

    def collect_rollout(
        self,
        n_steps: int,
        *,
        on_step: Optional[Callable[[int, List[EpisodeInfo]], None]] = None,
    ) -> List[EpisodeInfo]:
        """Step every environment ``n_steps`` times and store all of it, finished episodes or not.

        The fixed-length rollout of on-policy algorithms (A2C, PPO, TRPO; the ``n_steps``
        of Stable-Baselines3). Needs ``store="episode"``. During the rollout every
        episode that ends is passed to ``framework.store_episode`` as usual. At the end,
        each environment's steps since its last stored piece (its *tail*, an episode
        still running) are passed to ``store_episode`` too, environment by environment;
        the tail's last step has ``terminal=False`` and ``truncated=False`` and its
        ``next_state`` is the observation the environment is in, so A2C's
        ``store_episode`` bootstraps the tail's return from the critic's value of that
        state. The environments are not reset: the next rollout continues the same
        episodes, from those observations, and the first piece it stores of such an
        episode starts where the tail stopped (steps taken by an earlier
        :meth:`collect` and not stored yet are part of it). A real terminal state is
        stored with ``terminal=True``, a time-limit cut with ``terminal=False`` and
        ``truncated=True``, as in :meth:`collect`.

        Each environment contributes ``n_steps`` transitions, so a rollout stores
        ``n_steps * size`` of them, except on a gymnasium ``VectorEnv`` in ``NEXT_STEP``
        autoreset mode, where the step that resets an environment takes no transition
        (one fewer per episode end). Call ``framework.update()`` after the rollout.

        Args:
            n_steps: Steps of every environment (vector steps), a positive integer.
            on_step: Called after each step as ``on_step(transitions_taken, episodes_finished)``.

        Returns:
            The episodes that finished during the rollout, in the order they finished; an
            episode that started in an earlier rollout is reported whole (its full return
            and length).

        Raises:
            ValueError: If the sampler's ``store`` is not ``"episode"`` or ``n_steps`` is
                not a positive integer.
            TypeError: If ``on_step`` is given and not callable.
        """
        if self.store != "episode":
            raise ValueError(
                f'collect_rollout stores each environment\'s piece with store_episode: it needs store="episode", '
                f"got store={self.store!r}"
            )
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
            raise ValueError(f"n_steps must be a positive integer, got {n_steps!r}")
        if on_step is not None and not callable(on_step):
            raise TypeError(f"on_step must be callable or None, got {on_step!r}")
        if not self._started:
            self.reset()
        call = self._begin_call("collect_rollout", {"n_steps": n_steps})
        finished = call["finished"]
        while call["taken"] < n_steps:
            count, done = self._step()
            call["taken"] += 1
            finished.extend(done)
            if on_step is not None:
                on_step(count, done)
        for index, tail in enumerate(self._episodes):
            if tail:  # the episode goes on: its return and length keep counting for its EpisodeInfo
                self._episodes[index] = []
                self._store(tail)
        self._call = None
        return finished

    def _begin_call(self, kind: str, limits: Dict[str, Any]) -> Dict[str, Any]:
        """The progress of a new call: that of the saved call when the sampler was resumed inside one."""
        resumed, self._resumed_call = self._resumed_call, None
        if resumed is None:
            self._call = {"kind": kind, "limits": limits, "taken": 0, "finished": []}
        elif (resumed["kind"], resumed["limits"]) != (kind, limits):
            raise ValueError(
                f"the sampler was saved inside {resumed['kind']}({resumed['limits']}), which must be "
                f"continued first, got {kind}({limits})"
            )
        else:
            self._call = resumed
        return self._call

    # -- saving and resuming --------------------------------------------------------------

    @property
    def resumes_a_call(self) -> bool:
        """Whether the sampler was loaded from a state saved inside a collect call, which the next call continues."""
        return self._resumed_call is not None

    def replay_problem(self) -> Optional[str]:
        """Why this sampler's state cannot be saved for an exact resume, or ``None`` when it can."""
        return self._envs.problem

    def state_dict(self) -> Dict[str, Any]:
        """The sampler's state, from which :meth:`load_state_dict` continues exactly.

        It holds the current observations, hidden states and counters, the steps not
        stored yet, the progress of the collect call in progress (a state taken from
        ``on_step`` is continued by the next call of the same kind and limits), and, for
        every environment, how its episode in progress began (the seed or the generator
        state of its reset) and the actions it took since. It contains only tensors,
        numbers, strings, ``None`` and containers of them.

        Raises:
            ValueError: If the environments cannot be replayed one by one (see
                :func:`replay_problem`), or an environment's reset was not recorded.
        """
        why = self.replay_problem()
        if why is not None:
            raise ValueError(f"the sampler's state cannot be saved for an exact resume: {why}")
        unknown = [
            index
            for index, start in enumerate(self._starts)
            if self._started and start.get("seed") is None and start.get("random") is None
        ]
        if unknown:
            raise ValueError(
                f"the sampler's state cannot be saved for an exact resume: the environments {unknown} "
                f"have no np_random generator whose state their reset could be replayed from"
            )
        call = self._call
        return {
            "size": self.size,
            "started": self._started,
            "seeded": self._seeded,
            "obs": self._obs,
            "ready": self._ready.tolist(),
            "hidden": self._hidden,
            "episodes": [list(e) for e in self._episodes],
            "returns": list(self._returns),
            "lengths": list(self._lengths),
            "update_credit": self._update_credit,
            "total_steps": self.total_steps,
            "total_episodes": self.total_episodes,
            "starts": [
                {
                    "seed": start.get("seed"),
                    "random": start.get("random"),
                    "actions": self._action_rows(i),
                }
                for i, start in enumerate(self._starts)
            ],
            "call": None
            if call is None
            else {**call, "finished": [asdict(info) for info in call["finished"]]},
        }

    def _action_rows(self, index: int) -> torch.Tensor:
        """The actions of environment ``index`` since its reset, as one ``[k, *action_shape]`` tensor."""
        rows = self._actions[index]
        array = (
            np.stack(rows) if rows else np.zeros((0, *self._action_shape), dtype=self._action_dtype)
        )
        return torch.from_numpy(np.ascontiguousarray(array))

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of a sampler built the same way.

        The environments are reset as the first :meth:`collect` did, then every
        environment whose episode began later is reset from its recorded generator state,
        and each one replays its recorded actions; the observation reached must be the
        saved one.

        Raises:
            ValueError: If the environments cannot be replayed, the state is of another
                number of environments, or an environment does not replay to its saved
                observation (it is not deterministic given its seed and actions).
        """
        why = self.replay_problem()
        if why is not None:
            raise ValueError(f"the sampler cannot resume exactly: {why}")
        if state["size"] != self.size:
            raise ValueError(
                f"the saved sampler stepped {state['size']} environments, this one steps {self.size}"
            )
        ready = np.asarray(state["ready"], dtype=bool)
        if state["started"]:
            self._replay(state["starts"], state["obs"], ready)
        self._started, self._seeded, self._obs, self._ready = (
            state["started"],
            state["seeded"],
            state["obs"],
            ready,
        )
        self._hidden, self._episodes = state["hidden"], [list(e) for e in state["episodes"]]
        self._returns, self._lengths = list(state["returns"]), list(state["lengths"])
        self._update_credit = state["update_credit"]
        self.total_steps, self.total_episodes = state["total_steps"], state["total_episodes"]
        self._starts = [
            {key: start[key] for key in ("seed", "random") if start[key] is not None}
            for start in state["starts"]
        ]
        self._actions = [list(start["actions"].numpy().copy()) for start in state["starts"]]
        call = state["call"]
        self._resumed_call = (
            None
            if call is None
            else {**call, "finished": [EpisodeInfo(**info) for info in call["finished"]]}
        )
        self._call = None

    def _replay(
        self, starts: List[Dict[str, Any]], saved_obs: torch.Tensor, ready: np.ndarray
    ) -> None:
        """Bring every environment back to its saved place: reset, restart from the generator, replay."""
        seeds = None if self.seed is None else [self.seed + index for index in range(self.size)]
        first = self._envs.reset(seeds)
        for index, start in enumerate(starts):
            if start["random"] is not None:
                obs = self._envs.restart(index, start["random"], pending=not ready[index])
                how = "from its recorded generator state"
            elif start["seed"] is not None and seeds is not None and start["seed"] == seeds[index]:
                obs, how = first[index], f"with seed {start['seed']}"
            else:
                raise ValueError(
                    f"environment {index} was saved in an episode begun with seed {start['seed']}, "
                    f"but this sampler seeds it with {None if seeds is None else seeds[index]}"
                )
            actions = start["actions"].numpy()
            for step, action in enumerate(actions):
                obs, done = self._envs.step_one(index, action)
                if done:
                    raise ValueError(
                        f"environment {index}: replaying its episode in progress (reset {how}), it "
                        f"ended after {step + 1} of its {len(actions)} actions"
                    )
            if ready[index] and not torch.equal(self._to_tensor(np.asarray(obs)), saved_obs[index]):
                raise ValueError(
                    f"environment {index}: replaying its episode in progress (reset {how}, then its "
                    f"{len(actions)} actions) did not lead to the saved observation, so the "
                    f"environment does not repeat itself given its seed and the actions"
                )
