"""An optional training loop: episodes, evaluation, progress, logs, checkpoints, a curve.

:class:`Trainer` drives a single-process algorithm on a gymnasium environment
through its public API only (``act*``, ``store_*``, ``update``, ``save``), so a
hand-written loop, as in the tutorials, keeps working next to it. How it acts and
stores is the ``driver`` (a :class:`~machin.frame.algorithms.base.Driver`) that the
algorithm's class declares or inherits from its family, and every entry can be overridden:

==================================================  ===========================  ===========================  ===========  =======================
family                                              explores with                evaluates with               stores       updates
==================================================  ===========================  ===========================  ===========  =======================
DQN, DQNPer, RAINBOW, C51, QRDQN, IQN, DiscreteCQL  ``act_discrete_with_noise``  ``act_discrete``             transitions  per step, after warm-up
DDPG, DDPGPer, HDDPG, TD3                           ``act_with_noise`` (normal)  ``act``                      transitions  per step, after warm-up
SAC, TQC, CrossQ, REDQ, DroQ, CQLSAC, IQL           ``act``                      ``act`` (greedy, see below)  transitions  per step, after warm-up
A2C, PPO, TRPO, GAIL                                ``act``                      ``act`` (greedy, see below)  episodes     once per episode
R2D1                                                ``act_discrete_with_noise``  ``act_discrete``             episodes     once per episode
RecurrentSAC, RecurrentTD3                          ``act`` (TD3: with noise)    ``act``                      episodes     once per episode
==================================================  ===========================  ===========================  ===========  =======================

BC and TD3BC learn from a dataset only and have no driver (see :doc:`/offline`).

The stochastic-policy algorithms (SAC and the A2C family) are evaluated with their most
likely action, ``act(state, deterministic=True)``, when their actor's ``forward`` takes a
``deterministic`` argument (see
:class:`~machin.frame.algorithms.policy.StochasticActing`); with an actor that does not,
evaluation samples from the policy as training does. ``eval_act_kwargs`` overrides this
(``{}``: always sample).

R2D1 also needs ``hidden_key`` and ``initial_hidden``: the trainer then feeds the
network's hidden state back at every step, in training and in evaluation.

Given a group of environments (a machin parallel wrapper or a gymnasium ``VectorEnv``)
instead of one, the trainer collects with a :class:`~machin.frame.sampler.VecSampler`:
one batched act call for all environments per step, each environment's episodes
counted, logged and stored as its own.

Beyond the family defaults, the trainer offers the schedules of tuned setups such as
rl-baselines3-zoo: off-policy updates in bursts (``train_freq`` environment steps, then
``gradient_steps`` updates), fixed-length rollouts for on-policy algorithms
(``rollout_steps`` per environment, one update per rollout), evaluation every
``eval_every_steps`` environment steps, and, when the algorithm has a
``set_progress(progress)`` method and :meth:`Trainer.run` is given a ``steps`` limit,
the training progress ``steps_done / steps`` after every step, so that its schedules
(:mod:`machin.utils.schedules`) advance.

Around the loop, evaluation, checkpoints and logs are callbacks
(:mod:`machin.frame.callbacks`): the trainer builds its own from the options below, each
can be replaced, and ``callbacks=[...]`` adds the user's.

With ``save_every`` (or a :class:`~machin.frame.run_checkpoint.RunCheckpoint` among the
callbacks) the whole run is saved every so many steps and on SIGTERM / SIGINT, and
``run(..., resume=True)`` continues it exactly from the newest complete save (see the
documentation's page "Resuming training").

MADDPG (several agents) and the distributed algorithms
(A3C, IMPALA, DQNApex, DDPGApex) have no defaults: their loops differ, so a
:class:`Trainer` is only made for them when ``act_method``, ``eval_act_method`` and
``store`` are all given.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import VectorEnv

from ..env.wrappers.openai_gym import ParallelWrapperDummy, ParallelWrapperSubProc
from ..utils.save_env import SaveEnv
from ..utils.schedules import check_progress
from ._trainer_options import (
    Acting,
    Updates,
    acting_options,
    check_group_options,
    check_number,
    check_parts,
    check_random_options,
    check_run_options,
    check_save_options,
    evaluation_options,
    resume_problem,
    update_options,
)
from .algorithms.run_state import random_state, set_random_state
from .algorithms.utils import Hidden
from .callbacks import (
    BestCheckpoint,
    Callback,
    CSVLogger,
    EpisodeEnd,
    EpisodeGif,
    Evaluation,
    Evaluator,
    LearningCurve,
    ProgressBar,
    TensorBoardLogger,
    run_directories,
)
from .run_checkpoint import (
    ALGORITHM_FILE,
    FORMAT,
    RunCheckpoint,
    RunCheckpointError,
    check_storable,
    default_save_directory,
    read_trainer_state,
)
from .sampler import VecSampler, replay_problem

__all__ = ["Trainer", "TrainResult"]

EnvSource = Union[gym.Env, Callable[[], gym.Env], str]
EnvGroup = Union[ParallelWrapperDummy, ParallelWrapperSubProc, VectorEnv]
_ENV_GROUPS = (ParallelWrapperDummy, ParallelWrapperSubProc, VectorEnv)


@dataclass
class _LiveEpisode:
    """The training episode in progress on a single environment.

    ``steps`` holds its steps not stored yet (in episode mode, all of them; with rollouts,
    those of the rollout in progress), ``actions`` every action since the reset with
    ``seed``, so that a resumed run can replay the episode to where it was saved.
    """

    state: Dict[str, Any]
    seed: Optional[int] = None
    steps: List[Dict[str, Any]] = field(default_factory=list)
    actions: List[Any] = field(default_factory=list)
    total: float = 0.0
    done: bool = False


class _Halted(Exception):
    """Raised after the step in which :meth:`Trainer.halt` was called, to leave the loop at once."""


@dataclass
class TrainResult:
    """What one :meth:`Trainer.run` did.

    Attributes:
        episodes: Training episodes played.
        steps: Environment steps taken in training.
        returns: The return of every training episode.
        eval_returns: ``(episode, mean evaluation return)`` of every evaluation, ``episode``
            being the number of training episodes finished when it ran.
        best_eval_return: The best mean evaluation return (``-inf`` without evaluations).
        best_version: Version of the best checkpoint (the episode it was taken at; with
            ``eval_every_steps``, the training step), or ``None`` when none was written.
        solved_episode: Episode at which ``solved_reward`` was reached, or ``None``.
        paths: Files and directories written, by kind: ``"csv"``, ``"tensorboard"``,
            ``"checkpoints"``, ``"curve"``, ``"gif"`` (only those written).
        eval_steps: The training steps taken when each evaluation ran (one entry per
            entry of ``eval_returns``).
        interrupted: The run was halted in the middle (by :meth:`Trainer.halt`, e.g. when a
            :class:`~machin.frame.run_checkpoint.RunCheckpoint` saved it on SIGTERM).
    """

    episodes: int = 0
    steps: int = 0
    returns: List[float] = field(default_factory=list)
    eval_returns: List[Tuple[int, float]] = field(default_factory=list)
    best_eval_return: float = -math.inf
    best_version: Optional[int] = None
    solved_episode: Optional[int] = None
    paths: Dict[str, str] = field(default_factory=dict)
    eval_steps: List[int] = field(default_factory=list)
    interrupted: bool = False


class Trainer:
    """Train an algorithm on a gymnasium environment, evaluate it, log and checkpoint.

    Args:
        framework: The algorithm (an instance of the DQN, DDPG, SAC, A2C or R2D1 families, or
            any object with the same methods when ``act_method``, ``eval_act_method`` and
            ``store`` are all given).
        env: A gymnasium environment, a function making one (called once) or a registered
            gymnasium id such as ``"CartPole-v1"`` (made with ``gymnasium.make``); or a
            group of environments (:class:`~machin.env.wrappers.openai_gym.ParallelWrapperDummy`,
            :class:`~machin.env.wrappers.openai_gym.ParallelWrapperSubProc` or a
            gymnasium ``VectorEnv``), stepped together by a
            :class:`~machin.frame.sampler.VecSampler`; the trainer does not close a group.
        eval_env: Environment for evaluation, a function making one or a gymnasium id.
            ``None``: call ``env`` again when it is a function (make it again when it is an
            id), else evaluate on ``env`` itself (an
            evaluation never interrupts a training episode). A group of environments
            is never used for evaluation: give ``eval_env`` or set ``eval_interval=0``.
        act_method: Name of the exploring act method (default from the class's ``driver``).
        act_kwargs: Keyword arguments of every exploring act call (default: the family's
            when ``act_method`` is not given, else none).
        eval_act_method: Name of the act method used in evaluation.
        eval_act_kwargs: Keyword arguments of every evaluation act call. Default
            ``{"deterministic": True}`` for a stochastic-policy algorithm (SAC, the A2C
            family) evaluated with ``act`` whose actor's ``forward`` takes ``deterministic``,
            else none.
        store: ``"transition"`` (``store_transition`` after every step) or ``"episode"``
            (``store_episode`` after each episode, every step carrying ``truncated``).
        updates_per_step: ``update()`` calls per environment step once ``warmup_steps``
            steps were taken; fractions accumulate (0.25: every fourth step). In
            transition mode they follow each step; in episode mode the updates due are
            made right after each stored episode. Default 1 in transition mode, 0 in
            episode mode.
        updates_per_episode: ``update()`` calls after each episode (once ``warmup_steps``
            steps were taken). Default 1 in episode mode, 0 in transition mode.
        train_freq: Updates in bursts instead of ``updates_per_step``: a burst every
            ``train_freq`` environment steps (counted over all environments of a group),
            or ``(n, "step")`` / ``(n, "episode")`` for every ``n`` steps / finished
            episodes. Bursts due before more than ``warmup_steps`` steps were taken are
            skipped. Default 1 step when only ``gradient_steps`` is given.
        gradient_steps: ``update()`` calls per burst; ``-1`` makes as many as
            environment steps were taken since the previous burst. Default 1 when only
            ``train_freq`` is given. Bursts follow the step that completes them in
            transition mode and the next stored episode in episode mode.
        rollout_steps: Fixed-length rollouts for on-policy algorithms (the zoo's
            ``n_steps``): every rollout takes ``rollout_steps`` steps of the environment
            (of each environment of a group), stores the finished episodes and the
            unfinished tail (not terminal, so its return is bootstrapped from the
            critic) with ``store_episode``, then calls ``update()`` once. Episodes run on
            across rollouts. Needs episode mode and excludes ``updates_per_step``,
            ``updates_per_episode``, ``train_freq``, ``gradient_steps`` and
            ``warmup_steps``.
        warmup_steps: Environment steps before the first update.
        random_steps: The first ``random_steps`` training steps play uniformly random
            actions instead of calling ``act_method`` (the zoo's ``learning_starts``
            phase, usually given with ``warmup_steps`` of the same length). They are
            stored like any other step. A single environment and transition mode only.
        random_action: Makes one random action, in the form ``act_method`` returns
            (before ``action_to_env``), from torch's random generator. Default for a
            ``Discrete`` space: an int64 ``[1, 1]`` tensor in ``[0, n)``; for a bounded
            ``Box``: a ``[1, *shape]`` tensor of the default dtype, uniform within the
            bounds. Give it when ``action_to_env`` is given (the networks' actions are
            then not in the environment's units) or for any other space.
        state_key: Name of the network's ``forward`` argument receiving the observation.
        obs_to_state: Maps an observation to a state tensor ``[1, ...]`` (put under
            ``state_key``) or to a whole state dict. Default: a float tensor of the
            observation with a leading batch dimension. Not available with a group of
            environments, whose sampler makes the state tensors itself.
        action_to_env: Maps the action tensor to what ``env.step`` takes. Default: an
            int for ``Discrete`` spaces, an array clipped to the bounds for ``Box``.
        eval_interval: Evaluate every this many training episodes (0: never). Default 10,
            or 0 when ``eval_every_steps`` is given.
        eval_every_steps: Evaluate every this many training environment steps instead
            (``None`` or 0: never), as soon as the step count reaches a multiple of it
            (once when a group's step passes several); on the training environment itself
            the evaluation waits for the end of the episode in progress.
        eval_episodes: Episodes per evaluation.
        smoothing: Weight of the past in the smoothed training return, in ``[0, 1)``.
        solved_reward: Stop once the smoothed training return is above this for
            ``solved_repeat`` consecutive episodes (``None``: never stop early).
        solved_repeat: See ``solved_reward``.
        log_dir: Run directory (a path, created if missing) or a
            :class:`~machin.utils.save_env.SaveEnv` whose trial directories are used;
            ``None`` writes nothing.
        tensorboard: Write TensorBoard scalars into the run directory.
        gif_env: An environment made with ``render_mode="rgb_array"`` (or a function
            making one, or a gymnasium id, made with that render mode): at the end of :meth:`run` one evaluation episode is played on it
            and written as ``episode.gif``. Needs ``log_dir``.
        progress: Show a tqdm progress bar with the smoothed return (on a standard error
            that is not a terminal, plain lines instead: see
            :class:`~machin.frame.callbacks.ProgressBar`).
        hidden_key: For recurrent networks: name of the hidden-state argument. Every
            act call then also gets ``{hidden_key: hidden}``; the new hidden state is
            the last element of the act output; each stored step holds the given one in
            its ``state`` dict and the new one in its ``next_state`` dict; every episode
            (training, evaluation, GIF) starts from ``initial_hidden``.
        initial_hidden: The hidden state of one environment at an episode start, a
            ``[1, ...]`` tensor or a tuple of them (needed with ``hidden_key``).
        seed: Training episode ``i`` resets the environment with ``seed + i`` and
            evaluation episode ``j`` with ``seed + 10**6 + j`` (so every evaluation plays
            the same starts). In a group, environment ``i`` is reset with ``seed + i``
            once and then continues its own random stream. Networks and exploration are
            seeded by the caller (:func:`machin.utils.seed`).
        callbacks: :class:`~machin.frame.callbacks.Callback` objects called at every event
            of a run, after the trainer's own parts.
        evaluator: Replaces the :class:`~machin.frame.callbacks.Evaluator` made from
            ``eval_interval`` and ``eval_every_steps``; :meth:`evaluate` plays its
            ``evaluate`` episodes.
        loggers: Replace the loggers made from ``log_dir``, ``tensorboard``, ``progress``
            and ``gif_env`` (a list of callbacks; ``[]`` logs nothing).
        checkpointer: Replaces the :class:`~machin.frame.callbacks.BestCheckpoint` made
            with ``log_dir`` (assign ``trainer.checkpointer = None`` to write no checkpoints).
        save_every: Save the whole run every this many training steps, on SIGTERM / SIGINT
            and at its end, into ``<log_dir>/saves`` (a
            :class:`~machin.frame.run_checkpoint.RunCheckpoint`, called after every other
            part), so that ``run(..., resume=True)`` can continue it. Needs ``log_dir``,
            ``seed`` and a single environment or a group whose environments can be
            replayed one by one (a ``ParallelWrapperDummy`` or a gymnasium
            ``SyncVectorEnv`` not in ``SAME_STEP`` autoreset mode).

    Attributes:
        evaluator: The part that evaluates (an :class:`~machin.frame.callbacks.Evaluator`).
        checkpointer: The part that saves the networks, or ``None``.
        loggers: The parts that log (a list of callbacks).
        callbacks: The user's callbacks.
        run_checkpoint: The :class:`~machin.frame.run_checkpoint.RunCheckpoint` made for
            ``save_every``, or ``None``.
        resumed_from: The save the run in progress continues (``None``: it started afresh).
        result: The :class:`TrainResult` of the run in progress (or of the last run).
        episode_limit: The ``episodes`` limit of the run in progress.
        step_limit: The ``steps`` limit of the run in progress.

    Raises:
        TypeError: If the framework has no defaults and a method is not given, an
            environment is neither a ``gym.Env``, nor callable, nor an id, the action space needs
            an ``action_to_env``, or a part is not a callback.
        ValueError: If an option is out of range, a named method does not exist, the
            recurrent options do not go together or gymnasium cannot make an environment id
            (the message names the id).
    """

    def __init__(
        self,
        framework: Any,
        env: Union[EnvSource, EnvGroup],
        *,
        eval_env: Optional[EnvSource] = None,
        act_method: Optional[str] = None,
        act_kwargs: Optional[Dict[str, Any]] = None,
        eval_act_method: Optional[str] = None,
        eval_act_kwargs: Optional[Dict[str, Any]] = None,
        store: Optional[str] = None,
        updates_per_step: Optional[float] = None,
        updates_per_episode: Optional[int] = None,
        train_freq: Union[int, Tuple[int, str], None] = None,
        gradient_steps: Optional[int] = None,
        rollout_steps: Optional[int] = None,
        warmup_steps: int = 0,
        random_steps: int = 0,
        random_action: Optional[Callable[[], Any]] = None,
        state_key: str = "state",
        obs_to_state: Optional[Callable[[Any], Any]] = None,
        action_to_env: Optional[Callable[[torch.Tensor], Any]] = None,
        eval_interval: Optional[int] = None,
        eval_every_steps: Optional[int] = None,
        eval_episodes: int = 5,
        smoothing: float = 0.9,
        solved_reward: Optional[float] = None,
        solved_repeat: int = 5,
        log_dir: Union[str, os.PathLike, SaveEnv, None] = None,
        tensorboard: bool = True,
        gif_env: Optional[EnvSource] = None,
        progress: bool = True,
        hidden_key: Optional[str] = None,
        initial_hidden: Optional[Hidden] = None,
        seed: Optional[int] = None,
        callbacks: Optional[List[Callback]] = None,
        evaluator: Optional[Evaluator] = None,
        loggers: Optional[List[Callback]] = None,
        checkpointer: Optional[Callback] = None,
        save_every: Optional[int] = None,
    ) -> None:
        acting = acting_options(
            framework,
            act_method,
            act_kwargs,
            eval_act_method,
            eval_act_kwargs,
            store,
            hidden_key,
            initial_hidden,
            state_key,
        )
        updates = update_options(
            acting.store,
            updates_per_step,
            updates_per_episode,
            train_freq,
            gradient_steps,
            rollout_steps,
            warmup_steps,
        )
        self.eval_interval, self.eval_every_steps = evaluation_options(
            eval_interval, eval_every_steps, eval_episodes
        )
        check_run_options(smoothing, solved_reward, solved_repeat, seed, log_dir, gif_env)
        check_random_options(
            random_steps, random_action, isinstance(env, _ENV_GROUPS), acting.store, hidden_key
        )
        check_parts(callbacks, evaluator, loggers, checkpointer)
        check_save_options(
            save_every, log_dir, replay_problem(env) if isinstance(env, _ENV_GROUPS) else None, seed
        )
        self.framework = framework
        self._keep(acting, updates)
        self.eval_episodes, self.random_steps = eval_episodes, random_steps
        self.state_key, self.hidden_key, self.initial_hidden = state_key, hidden_key, initial_hidden
        self.obs_to_state = obs_to_state or _default_obs_to_state
        self.smoothing, self.solved_reward, self.solved_repeat = (
            float(smoothing),
            solved_reward,
            solved_repeat,
        )
        self.log_dir, self.tensorboard, self.progress, self.seed = (
            log_dir,
            tensorboard,
            progress,
            seed,
        )
        self.sampler = self._group_sampler(env, eval_env, obs_to_state)
        self._environments(env, eval_env, gif_env, action_to_env, random_action)
        self._set_parts(callbacks, evaluator, loggers, checkpointer)
        self.run_checkpoint = None
        if save_every is not None:
            self.run_checkpoint = RunCheckpoint(default_save_directory(log_dir), every=save_every)
        self._reset_run_state(None, None)

    def _keep(self, acting: Acting, updates: Updates) -> None:
        """Keep the checked acting and update options as attributes of the same names."""
        self.act_method, self.act_kwargs = acting.act_method, acting.act_kwargs
        self.eval_act_method, self.eval_act_kwargs = acting.eval_act_method, acting.eval_act_kwargs
        self.store = acting.store
        self.updates_per_step, self.updates_per_episode = (
            updates.updates_per_step,
            updates.updates_per_episode,
        )
        self.train_freq, self.gradient_steps = updates.train_freq, updates.gradient_steps
        self.rollout_steps, self.warmup_steps = updates.rollout_steps, updates.warmup_steps

    def _set_parts(
        self,
        callbacks: Optional[List[Callback]],
        evaluator: Optional[Evaluator],
        loggers: Optional[List[Callback]],
        checkpointer: Optional[Callback],
    ) -> None:
        """The evaluator, checkpointer and loggers (the given ones, else those the options ask for), the callbacks."""
        self.evaluator = (
            evaluator
            if evaluator is not None
            else Evaluator(self.eval_interval, self.eval_every_steps)
        )
        directories = None if self.log_dir is None else run_directories(self.log_dir)
        if checkpointer is None and directories is not None:
            checkpointer = BestCheckpoint(directories["checkpoints"])
        self.checkpointer = checkpointer
        self.loggers = self._default_loggers(directories) if loggers is None else list(loggers)
        self.callbacks = list(callbacks or [])
        self._parts: List[Callback] = []  # those of the run in progress

    def _default_loggers(self, directories: Optional[Dict[str, str]]) -> List[Callback]:
        """The loggers that ``log_dir``, ``tensorboard``, ``progress`` and ``gif_env`` ask for."""
        loggers: List[Callback] = []
        if directories is not None:
            loggers.append(CSVLogger(directories["log"]))
            if self.tensorboard:
                loggers.append(TensorBoardLogger(directories["tensorboard"]))
        if self.progress:
            loggers.append(ProgressBar())
        if directories is not None:
            loggers.append(LearningCurve(directories["images"]))
            if self.gif_env is not None:
                loggers.append(EpisodeGif(self.gif_env, directories["images"]))
        return loggers

    # -- environments -------------------------------------------------------------------
    def _group_sampler(self, env: Any, eval_env: Any, obs_to_state: Any) -> Optional[VecSampler]:
        """The sampler that steps a group of environments, or ``None`` for a single environment."""
        if not isinstance(env, _ENV_GROUPS):
            return None
        check_group_options(obs_to_state, eval_env, self.eval_interval, self.eval_every_steps)
        return VecSampler(
            self.framework,
            env,
            act_method=self.act_method,
            act_kwargs=self.act_kwargs,
            state_key=self.state_key,
            store=self.store,
            seed=self.seed,
            hidden_key=self.hidden_key,
            initial_hidden=self.initial_hidden,
        )

    def _environments(
        self, env: Any, eval_env: Any, gif_env: Any, action_to_env: Any, random_action: Any
    ) -> None:
        """Make the environments, check the ones that need it and pick the action conversions.

        On an error the environments made so far are closed.
        """
        self._owned: List[gym.Env] = []  # environments made from factories, closed by close()
        try:
            self.env = None if self.sampler is not None else self._make("env", env)
            if eval_env is None and self.sampler is None:
                eval_env = env if not isinstance(env, gym.Env) else self.env
            self.eval_env = None if eval_env is None else self._make("eval_env", eval_env)
            self.gif_env = None if gif_env is None else self._make("gif_env", gif_env)
            self._check_environment_use()
            acting_env = self.env or self.eval_env or self.gif_env
            self.action_to_env = action_to_env or (
                None if acting_env is None else _default_action_to_env(acting_env.action_space)
            )
            if self.random_steps and random_action is None:
                if action_to_env is not None:
                    raise TypeError(
                        "random_steps with action_to_env needs random_action: a function returning a random "
                        "action in the form act_method returns (the networks' units, before action_to_env)"
                    )
                random_action = _default_random_action(self.env.action_space)
            self.random_action = random_action
        except BaseException:
            self.close()  # the environments made so far
            raise

    def _check_environment_use(self) -> None:
        """The GIF needs frames; rollouts keep an episode running, so they cannot share it with evaluation."""
        if self.gif_env is not None and getattr(self.gif_env, "render_mode", None) != "rgb_array":
            raise ValueError(
                f"gif_env must be made with render_mode='rgb_array', got render_mode="
                f"{getattr(self.gif_env, 'render_mode', None)!r}"
            )
        if (
            self.rollout_steps is not None
            and self.env is not None
            and self.eval_env is self.env
            and (self.eval_interval or self.eval_every_steps)
        ):
            raise ValueError(
                "rollout_steps keeps episodes running between rollouts, so an evaluation on the training "
                "environment itself would interrupt one: give eval_env (or env as a function, which makes "
                "a second environment) or eval_interval=0"
            )

    def _make(self, name: str, source: EnvSource) -> gym.Env:
        if isinstance(source, gym.Env):
            return source
        if isinstance(source, str):
            env = _make_by_id(name, source)
            self._owned.append(env)
            return env
        if not callable(source):
            raise TypeError(
                f"{name} must be a gymnasium.Env, a function making one or a gymnasium id, "
                f"got {type(source).__name__}"
            )
        env = source()
        if not isinstance(env, gym.Env):
            raise TypeError(
                f"the function given as {name} must return a gymnasium.Env, got "
                f"{type(env).__name__}"
            )
        self._owned.append(env)
        return env

    def close(self) -> None:
        """Close the environments the trainer made from functions (given instances stay open)."""
        for env in self._owned:
            env.close()
        self._owned.clear()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # -- one episode --------------------------------------------------------------------
    def _state(self, obs: Any) -> Dict[str, Any]:
        state = self.obs_to_state(obs)
        return state if isinstance(state, dict) else {self.state_key: state}

    def _act(
        self, method: str, state: Dict[str, Any], kwargs: Dict[str, Any]
    ) -> Tuple[torch.Tensor, Any]:
        """The action, and the new hidden state for a recurrent network (else ``None``)."""
        with torch.no_grad():
            output = getattr(self.framework, method)(state, **kwargs)
        action = output[0] if isinstance(output, tuple) else output
        if self.hidden_key is None:
            return action, None
        if not isinstance(output, tuple) or len(output) < 2:
            raise ValueError(
                f"{type(self.framework).__name__}.{method} must return (action, ..., new_hidden) "
                f"with hidden_key, got {type(output).__name__}"
            )
        return action, output[-1]

    def _initial_state(self, obs: Any) -> Dict[str, Any]:
        """The state dict of an episode's first observation (with ``initial_hidden`` for a recurrent network)."""
        state = self._state(obs)
        if self.hidden_key is not None:
            state = {**state, self.hidden_key: self.initial_hidden}
        return state

    def _env_step(
        self,
        env: gym.Env,
        state: Dict[str, Any],
        method: str,
        kwargs: Dict[str, Any],
        at_random: bool = False,
    ) -> Tuple[Dict[str, Any], bool, bool]:
        """Act on ``state`` (``at_random``: with ``random_action``) and step ``env``: the step to
        store, ``terminated`` and ``truncated``."""
        action, hidden = (
            (self.random_action(), None) if at_random else self._act(method, state, kwargs)
        )
        obs, reward, terminated, truncated, _ = env.step(self.action_to_env(action))
        next_state = self._state(obs)
        if self.hidden_key is not None:
            next_state = {**next_state, self.hidden_key: hidden}
        step = {
            "state": state,
            "action": {"action": action},
            "next_state": next_state,
            "reward": float(reward),
            "terminal": bool(terminated),
        }
        return step, bool(terminated), bool(truncated)

    def play_episode(
        self, env: gym.Env, seed: Optional[int] = None, frames: Optional[List[np.ndarray]] = None
    ) -> Tuple[float, int]:
        """Play one episode with ``eval_act_method``, storing and updating nothing.

        Args:
            env: The environment to play on.
            seed: The seed of its reset.
            frames: When given, every rendered frame is appended to it.

        Returns:
            ``(return, length)`` of the episode.
        """
        return self._play(env, seed, frames=frames)

    def evaluation_seed(self, index: int) -> Optional[int]:
        """The reset seed of evaluation episode ``index``: ``seed + 10**6 + index`` (``None`` without ``seed``)."""
        return None if self.seed is None else self.seed + 10**6 + index

    def _play(
        self, env: gym.Env, seed: Optional[int], frames: Optional[List[np.ndarray]] = None
    ) -> Tuple[float, int]:
        """Play one evaluation episode (storing nothing). Returns (return, length)."""
        obs, _ = env.reset(seed=seed)
        state = self._initial_state(obs)
        total, length, done = 0.0, 0, False
        while not done:
            if frames is not None:
                frames.append(env.render())
            step, terminated, truncated = self._env_step(
                env, state, self.eval_act_method, self.eval_act_kwargs
            )
            total, length, done = total + step["reward"], length + 1, terminated or truncated
            state = step["next_state"]
        if frames is not None:
            frames.append(env.render())
        return total, length

    def _start_episode(self, seed: Optional[int]) -> _LiveEpisode:
        """Reset the training environment with ``seed``: the new episode in progress."""
        obs, _ = self.env.reset(seed=seed)
        return _LiveEpisode(self._initial_state(obs), seed)

    def _train_episode(self, live: _LiveEpisode) -> float:
        """Play the training episode in progress to its end, store it and make the updates due; its return."""
        while not live.done:
            self._train_step(live)
        self._live = None
        self._learn_from_episode(live.steps)
        return live.total

    def _train_step(self, live: _LiveEpisode) -> None:
        """One step of the episode in progress: act, step, store (or keep the step), count, update, tell the parts."""
        at_random = self._steps < self.random_steps
        step, terminated, truncated = self._env_step(
            self.env, live.state, self.act_method, self.act_kwargs, at_random
        )
        live.actions.append(step["action"]["action"])
        live.total += step["reward"]
        live.state, live.done = step["next_state"], terminated or truncated
        if self.store == "transition":
            self.framework.store_transition(step)
        else:
            step["truncated"] = truncated and not terminated
            live.steps.append(step)
        self._count_steps(1)
        if self.store == "transition":
            self._spend_credit()
        self._step_done(1)

    def _step_done(self, transitions: int) -> None:
        """``on_step`` to every part; then leave the loop if the run was halted."""
        self._emit("on_step", transitions)
        if self._halt_requested:
            raise _Halted()

    def _learn_from_episode(self, episode: List[Dict[str, Any]]) -> None:
        """Store a finished training episode (in episode mode) and make the updates due after it."""
        if episode:
            self.framework.store_episode(episode)
        self._episode_done()
        self._spend_credit()
        if self._steps > self.warmup_steps:
            self._update(self.updates_per_episode)

    def _single_rollout(self) -> List[float]:
        """One rollout of ``rollout_steps`` steps on the training environment; the returns of the episodes it ended.

        The episode in progress (``_live``) continues from the previous rollout; at the end
        its steps of this rollout are stored as a tail, not terminal. The steps taken and
        the returns of the episodes ended so far in this rollout are kept on the trainer,
        so that a save in the middle of a rollout holds them.
        """
        finished = self._rollout_finished
        while self._rollout_taken < self.rollout_steps:
            live = self._live
            if live is None:
                self._episodes_started += 1
                seed = None if self.seed is None else self.seed + self._episodes_started
                obs, _ = self.env.reset(seed=seed)
                live = self._live = _LiveEpisode(self._initial_state(obs), seed)
            step, terminated, truncated = self._env_step(
                self.env, live.state, self.act_method, self.act_kwargs
            )
            step["truncated"] = truncated and not terminated
            live.steps.append(step)
            live.actions.append(step["action"]["action"])
            live.total += step["reward"]
            live.state = step["next_state"]
            self._rollout_taken += 1
            self._count_steps(1)
            if terminated or truncated:
                self.framework.store_episode(live.steps)
                finished.append(live.total)
                self._live = None
                self._episode_done()
            self._step_done(1)
        if self._live is not None and self._live.steps:
            self.framework.store_episode(self._live.steps)
            self._live.steps = []
        self._rollout_taken, self._rollout_finished = 0, []
        return finished

    # -- schedules: updates and progress --------------------------------------------------
    def _reset_run_state(self, episodes: Optional[int], steps: Optional[int]) -> None:
        """Start the counters of a run limited to ``episodes`` and ``steps`` (``None``: no limit)."""
        self._steps, self._credit = 0, 0.0
        self.episode_limit, self.step_limit = episodes, steps
        self._burst_mark, self._burst_episodes = 0, 0
        self._update_sums: Dict[str, float] = {}
        self._updates = 0
        self._live: Optional[_LiveEpisode] = None
        self._episodes_started = self._rollout_taken = 0
        self._rollout_finished: List[float] = []
        self._stop_requested = self._halt_requested = False
        self._smoothed, self._streak = 0.0, 0
        self._resumed_random: Optional[Dict[str, Any]] = None
        self.resumed_from: Optional[str] = None
        self.result = TrainResult()
        set_progress = getattr(self.framework, "set_progress", None)
        self._set_progress = set_progress if steps is not None and callable(set_progress) else None

    @property
    def steps(self) -> int:
        """Training environment steps taken in the run in progress (or the last run)."""
        return self._steps

    def _count_steps(self, transitions: int) -> None:
        """Count training steps: the updates they earn and the algorithm's progress."""
        before = self._steps
        self._steps += transitions
        if self.train_freq is None:
            if self._steps > self.warmup_steps:
                self._credit += transitions * self.updates_per_step
        elif self.train_freq[1] == "step":
            bursts = self._steps // self.train_freq[0] - before // self.train_freq[0]
            if bursts:
                self._burst(bursts)
        if self._set_progress is not None:
            self._set_progress(check_progress(min(1.0, self._steps / self.step_limit)))

    def _episode_done(self) -> None:
        """Count a finished training episode (for bursts every ``n`` episodes)."""
        if self.train_freq is not None and self.train_freq[1] == "episode":
            self._burst_episodes += 1
            if self._burst_episodes % self.train_freq[0] == 0:
                self._burst(1)

    def _burst(self, count: int) -> None:
        """Owe the updates of ``count`` bursts (none before the warm-up is over)."""
        if self._steps > self.warmup_steps:
            if self.gradient_steps > 0:
                self._credit += count * self.gradient_steps
            else:  # -1: as many updates as steps since the previous burst
                self._credit += self._steps - self._burst_mark
        self._burst_mark = self._steps

    def _spend_credit(self) -> None:
        """Make the per-step updates that are due (fractions carry over)."""
        self._update(int(self._credit))
        self._credit -= int(self._credit)

    def _update(self, times: int) -> None:
        """Call ``update()`` ``times`` times and sum what it returns, by name."""
        for _ in range(times):
            result = self.framework.update()
            if result is None:  # e.g. not enough samples yet
                continue
            values = result if isinstance(result, tuple) else (result,)
            for name, value in zip(_update_names(len(values)), values):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._update_sums[name] = self._update_sums.get(name, 0.0) + float(value)
            self._updates += 1

    # -- evaluation ---------------------------------------------------------------------
    def evaluate(self, episodes: Optional[int] = None) -> float:
        """Mean return of evaluation episodes, played with ``eval_act_method`` and stored nowhere.

        The episodes are those of the evaluator's ``evaluate`` (by default
        :meth:`Evaluator.evaluate <machin.frame.callbacks.Evaluator.evaluate>`).

        Args:
            episodes: Number of episodes (default ``eval_episodes``).

        Returns:
            The mean undiscounted return.

        Raises:
            ValueError: If ``episodes`` is not a positive integer.
        """
        episodes = self.eval_episodes if episodes is None else episodes
        check_number("episodes", episodes, minimum=1, integer=True)
        if self.eval_env is None:
            raise ValueError(
                "this trainer has no evaluation environment: give eval_env when it trains on a group"
            )
        return self.evaluator.evaluate(self, episodes)

    def record_evaluation(self, mean_return: float, by_steps: bool = False) -> Evaluation:
        """Record an evaluation of the run in progress and tell every part (``on_evaluation``).

        It is added to ``result.eval_returns`` and ``result.eval_steps``, and raises
        ``result.best_eval_return`` when it improves on it.

        Args:
            mean_return: The evaluation's mean return.
            by_steps: Whether a step count made it due: its checkpoint version is then the
                step count, else the number of finished training episodes.

        Returns:
            The :class:`~machin.frame.callbacks.Evaluation` the parts received.
        """
        result = self.result
        result.eval_returns.append((result.episodes, mean_return))
        result.eval_steps.append(self._steps)
        improved = mean_return > result.best_eval_return
        if improved:
            result.best_eval_return = mean_return
        evaluation = Evaluation(
            mean_return,
            result.episodes,
            self._steps,
            self._steps if by_steps else result.episodes,
            by_steps,
            improved,
        )
        self._emit("on_evaluation", evaluation)
        return evaluation

    # -- saving and resuming -----------------------------------------------------------
    def check_resumable(self) -> None:
        """Raise a ``ValueError`` unless this trainer's runs can be saved and resumed exactly.

        That needs a ``seed`` and a single training environment or a group whose
        environments the sampler can replay one by one
        (:func:`~machin.frame.sampler.replay_problem`).
        """
        why = resume_problem(
            None if self.sampler is None else self.sampler.replay_problem(), self.seed
        )
        if why is not None:
            raise ValueError(f"a run of this trainer cannot be saved for an exact resume: {why}")

    def _setup(self) -> Dict[str, Any]:
        """The options a save must have been made with to be resumed by this trainer."""
        return {
            "algorithm": _class_name(self.framework),
            "store": self.store,
            "act_method": self.act_method,
            "seed": self.seed,
            "warmup_steps": self.warmup_steps,
            "random_steps": self.random_steps,
            "rollout_steps": self.rollout_steps,
        }

    def state_dict(self) -> Dict[str, Any]:
        """The run's state between two training steps, besides the algorithm's (what a save keeps).

        That is the counters, the result so far, the training episode in progress (its
        reset seed, actions, current state and the steps it has not stored), on a group the
        sampler's :meth:`~machin.frame.sampler.VecSampler.state_dict` (every environment's
        episode in progress, and the progress of the collect call in progress) and what
        the parts' ``state_dict`` return. Only valid during :meth:`run`, at a step boundary.
        """
        live = self._live
        state = {
            "format": FORMAT,
            "setup": self._setup(),
            "counters": {
                "steps": self._steps,
                "credit": self._credit,
                "burst_mark": self._burst_mark,
                "burst_episodes": self._burst_episodes,
                "updates": self._updates,
                "update_sums": dict(self._update_sums),
                "smoothed": self._smoothed,
                "streak": self._streak,
                "stop_requested": self._stop_requested,
                "episodes_started": self._episodes_started,
                "rollout_taken": self._rollout_taken,
                "rollout_finished": list(self._rollout_finished),
            },
            "result": asdict(self.result),
            "episode": None
            if live is None
            else {
                "seed": live.seed,
                "state": live.state,
                "steps": live.steps,
                "actions": live.actions,
                "total": live.total,
                "done": live.done,
            },
            "group": None if self.sampler is None else self.sampler.state_dict(),
            "parts": [[_class_name(part), part.state_dict()] for part in _stateful(self._parts)],
        }
        check_storable("the trainer's state", state)
        return state

    def _resume(self) -> None:
        """Continue the newest complete save of the run checkpoint, if there is one (see :meth:`run`)."""
        saving = [part for part in self._parts if isinstance(part, RunCheckpoint)]
        if len(saving) != 1:
            raise ValueError(
                f"run(resume=True) resumes from the saves of a RunCheckpoint: give save_every (or "
                f"one RunCheckpoint among the callbacks), got {len(saving)} RunCheckpoint parts"
            )
        self.check_resumable()
        path = saving[0].newest()
        if path is None:
            return
        state = read_trainer_state(path, self.framework)
        self._check_state(state, path)
        self.framework.resume(os.path.join(path, ALGORITHM_FILE))
        self._resumed_random = random_state()
        self._apply_state(state, path)

    def _check_state(self, state: Dict[str, Any], path: str) -> None:
        """Raise :class:`RunCheckpointError` unless the save was made by a trainer set up as this one."""
        saved_setup = state.get("setup") or {}
        for name, value in self._setup().items():
            if saved_setup.get(name) != value:
                raise RunCheckpointError(
                    f"cannot resume from {path!r}: it was saved with {name}="
                    f"{saved_setup.get(name)!r}, this trainer has {name}={value!r}"
                )
        saved_parts = [name for name, _ in state["parts"]]
        mine = [_class_name(part) for part in _stateful(self._parts)]
        if saved_parts != mine:
            raise RunCheckpointError(
                f"cannot resume from {path!r}: it was saved with the parts {saved_parts} "
                f"(those with a state, in order), this run has {mine}"
            )

    def _apply_state(self, state: Dict[str, Any], path: str) -> None:
        """Load the checked trainer state: counters, result, the episode in progress (replayed), the parts."""
        counters = state["counters"]
        self._steps, self._credit = counters["steps"], counters["credit"]
        self._burst_mark, self._burst_episodes = counters["burst_mark"], counters["burst_episodes"]
        self._updates, self._update_sums = counters["updates"], dict(counters["update_sums"])
        self._smoothed, self._streak = counters["smoothed"], counters["streak"]
        self._stop_requested = counters["stop_requested"]
        self._episodes_started, self._rollout_taken = (
            counters["episodes_started"],
            counters["rollout_taken"],
        )
        self._rollout_finished = list(counters["rollout_finished"])
        self.result = TrainResult(**state["result"])
        self._live = None if state["episode"] is None else self._replay(state["episode"], path)
        if self.sampler is not None:
            try:
                self.sampler.load_state_dict(state["group"])
            except ValueError as error:
                raise RunCheckpointError(f"cannot resume from {path!r}: {error}") from None
        for part, (_, saved) in zip(_stateful(self._parts), state["parts"]):
            part.load_state_dict(saved)
        self.resumed_from = path

    def _replay(self, saved: Dict[str, Any], path: str) -> _LiveEpisode:
        """Reset the training environment with the saved seed and replay the saved actions."""
        obs, _ = self.env.reset(seed=saved["seed"])
        actions = saved["actions"]
        for index, action in enumerate(actions):
            obs, _, terminated, truncated, _ = self.env.step(self.action_to_env(action))
            if (terminated or truncated) and index + 1 < len(actions):
                raise RunCheckpointError(
                    f"cannot resume from {path!r}: replaying the episode in progress (reset "
                    f"with seed {saved['seed']}), it ended after {index + 1} of its "
                    f"{len(actions)} actions"
                )
        replayed = self._state(obs)
        if any(not _same(value, saved["state"].get(key)) for key, value in replayed.items()):
            raise RunCheckpointError(
                f"cannot resume from {path!r}: replaying the episode in progress (reset with seed "
                f"{saved['seed']}, then its {len(actions)} actions) did not lead to the saved observation, so the "
                f"environment does not repeat itself given its seed and the actions"
            )
        return _LiveEpisode(
            saved["state"],
            saved["seed"],
            list(saved["steps"]),
            list(actions),
            saved["total"],
            saved["done"],
        )

    # -- the loop -----------------------------------------------------------------------
    def run(
        self, episodes: Optional[int] = None, steps: Optional[int] = None, resume: bool = False
    ) -> TrainResult:
        """Train until ``episodes`` episodes or ``steps`` steps are done, or the task is solved.

        An episode is never cut: with ``steps``, the run ends after the episode in which
        the step count reaches it (with ``rollout_steps``, after the rollout in which it
        does, and with ``episodes``, after the rollout's update). A callback that returns
        ``False`` also ends the run at the end of an episode, and :meth:`halt` right
        after the current step. Each call counts from episode 1 again and rewrites the
        files in ``log_dir`` (unless it resumes, see below); the framework keeps what it
        has learned. With ``steps`` and a framework that has a ``set_progress(progress)``
        method, ``set_progress(min(1, steps_done / steps))`` is called at the start and
        after every training step (of the whole group), before the updates and
        evaluations that follow the step. Without ``steps`` the progress is unknown: options
        given a schedule stay where they are, and such a run starts with a ``UserWarning``
        that names them.

        With ``resume=True``, the run continues from the newest complete save of the
        trainer's :class:`~machin.frame.run_checkpoint.RunCheckpoint` (``save_every``)
        instead of starting from episode 1: the algorithm, the counters, the result so far
        (returns, evaluation history), the parts' states (the CSV file and the TensorBoard
        event files are cut back to what they held at the save) and the training episode
        in progress, replayed on the environment from its reset seed and its actions. The
        limits count the whole run, the part before the save included. Without a save,
        the run starts afresh (``resumed_from`` stays ``None``). The trainer must be built
        as the saved one was (same algorithm class and architecture, same options).

        Args:
            episodes: Maximum number of training episodes.
            steps: Maximum number of training environment steps.
            resume: Continue the saved run (see above).

        Returns:
            A :class:`TrainResult`.

        Raises:
            ValueError: If neither limit is given or one is not a positive integer, or
                ``resume`` is given without a ``RunCheckpoint``.
            RunCheckpointError: (a ``ValueError``) If the newest save is damaged, foreign,
                made with other options or parts, or its episode in progress does not
                replay to the saved observation; the message names the save.
        """
        if episodes is None and steps is None:
            raise ValueError("run needs a limit: give episodes, steps or both")
        for name, value in (("episodes", episodes), ("steps", steps)):
            if value is not None:
                check_number(name, value, minimum=1, integer=True)
        self._reset_run_state(episodes, steps)
        if steps is None:
            _warn_fixed_schedules(self.framework)
        parts = (
            self.evaluator,
            self.checkpointer,
            *self.loggers,
            *self.callbacks,
            self.run_checkpoint,
        )
        self._parts = [part for part in parts if part is not None]
        if resume:
            try:
                self._resume()
            except BaseException:
                self._parts = []
                raise
        result, completed = self.result, False
        try:
            self._emit("on_training_start")
            if self._set_progress is not None:
                self._set_progress(check_progress(min(1.0, self._steps / steps)))
            if self._resumed_random is not None:  # as at the save, whatever the parts did since
                set_random_state(self._resumed_random)
            self._episodes_loop(episodes, steps)
            completed = True
        except _Halted:
            result.interrupted = True
        finally:
            result.steps = self._steps
            self._finish(completed)
        return result

    def halt(self) -> None:
        """End the run right after the current training step, in the middle of its episode.

        Every part still receives that step's ``on_step``; :meth:`run` then returns with
        ``result.interrupted`` set, and the parts get ``on_training_end`` with
        ``completed=False``.
        """
        self._halt_requested = True

    def _episodes_loop(self, episodes: Optional[int], steps: Optional[int]) -> None:
        """Count, smooth and announce every training episode; stop when solved or asked to."""
        result = self.result
        for episode, total in enumerate(
            self._training_episodes(episodes, steps), start=result.episodes + 1
        ):
            smoothed = (
                total
                if episode == 1
                else self.smoothing * self._smoothed + (1 - self.smoothing) * total
            )
            self._smoothed = smoothed
            result.episodes, result.steps = episode, self._steps
            result.returns.append(total)
            losses = {name: value / self._updates for name, value in self._update_sums.items()}
            self._emit("on_episode_end", EpisodeEnd(episode, self._steps, total, smoothed, losses))
            above = self.solved_reward is not None and smoothed > self.solved_reward
            self._streak = self._streak + 1 if above else 0
            if above and self._streak >= self.solved_repeat:
                result.solved_episode = episode
                return
            if self._stop_requested:
                return

    def _emit(self, event: str, *args: Any) -> None:
        """Call ``event`` of every part; one returning ``False`` asks the run to stop."""
        for part in self._parts:
            if getattr(part, event)(self, *args) is False:
                self._stop_requested = True

    def _finish(self, completed: bool) -> None:
        """``on_training_end`` to every part, even when one fails (the first error is raised after)."""
        error: Optional[BaseException] = None
        for part in self._parts:
            try:
                part.on_training_end(self, completed)
            except BaseException as caught:  # the other parts still close their files
                error = error or caught
        self._parts = []
        if error is not None:
            raise error

    def _training_episodes(self, episodes: Optional[int], steps: Optional[int]) -> Iterator[float]:
        """Play, store and learn; yield the return of each training episode as it ends.

        The update results summed since the previous episode are in ``_update_sums``
        when an episode is yielded.
        """
        count = self.result.episodes

        def more() -> bool:
            return (
                (episodes is None or count < episodes)
                and (steps is None or self._steps < steps)
                and not self._stop_requested
            )

        while more() or self._unfinished():
            if self.rollout_steps is not None:
                returns = self._rollout()
                for total in returns:  # all of them with a steps limit: the rollout is over anyway
                    count += 1
                    yield total
                    self._update_sums, self._updates = {}, 0
                    if episodes is not None and count >= episodes:
                        return
            elif self.sampler is None:
                count += 1
                if self._live is None:
                    self._live = self._start_episode(
                        None if self.seed is None else self.seed + count
                    )
                yield self._train_episode(self._live)
                self._update_sums, self._updates = {}, 0
            else:
                for total in self._group_episode():
                    count += 1
                    yield total
                    self._update_sums, self._updates = {}, 0
                    if not more():
                        return

    def _unfinished(self) -> bool:
        """Whether a resumed run is inside a training episode (a rollout) it must finish first.

        Between episodes (rollouts) of a run that was not resumed, it never is. On a group,
        it is when the sampler was saved inside a collect call.
        """
        if self.sampler is not None:
            return self.sampler.resumes_a_call
        if self.rollout_steps is not None:
            return self._rollout_taken > 0
        return self._live is not None

    def _rollout(self) -> List[float]:
        """One rollout and its update; the returns of the episodes it ended."""
        if self.sampler is None:
            returns = self._single_rollout()
        else:
            infos = self.sampler.collect_rollout(self.rollout_steps, on_step=self._after_group_step)
            returns = [info.episode_return for info in infos]
        self._update(1)
        return returns

    def _group_episode(self) -> Iterator[float]:
        """Step the group until an episode ends; after each ended episode, its updates, then its return.

        The sampler stores the steps; the updates follow the same schedule as on one environment.
        """
        for info in self.sampler.collect(episodes=1, on_step=self._after_group_step):
            if self.store == "episode":
                self._spend_credit()
            if self._steps > self.warmup_steps:
                self._update(self.updates_per_episode)
            yield info.episode_return

    def _after_group_step(self, transitions: int, finished: List[Any]) -> None:
        """Count the steps and episodes of a group, make the updates due (transition mode), tell the parts."""
        self._count_steps(transitions)
        for _ in finished:
            self._episode_done()
        if self.store == "transition":
            self._spend_credit()
        self._step_done(transitions)


def _warn_fixed_schedules(framework: Any) -> None:
    """Warn that the scheduled options of ``framework`` cannot move in a run without ``steps``."""
    scheduled = sorted(getattr(framework, "scheduled_options", None) or ())
    if not scheduled:
        return
    values = ", ".join(f"{name}={getattr(framework, name)!r}" for name in scheduled)
    warnings.warn(
        f"{type(framework).__name__}'s scheduled option(s) {scheduled} follow the training "
        f"progress steps_done / steps, and this run has no steps limit: they stay at {values} "
        f"for the whole run. Give run(steps=N) (episodes may be given too) to move them",
        UserWarning,
        stacklevel=3,
    )


def _class_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _stateful(parts: List[Callback]) -> List[Callback]:
    """The parts whose class has a ``state_dict`` of its own."""
    return [part for part in parts if type(part).state_dict is not Callback.state_dict]


def _same(value: Any, saved: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return (
            isinstance(saved, torch.Tensor)
            and value.shape == saved.shape
            and torch.equal(value, saved)
        )
    return value == saved


def _update_names(count: int) -> Tuple[str, ...]:
    """Names of the values ``update()`` returns: a loss, or actor-critic's policy value and value loss."""
    if count == 1:
        return ("loss",)
    if count == 2:
        return ("policy_value", "value_loss")
    return tuple(f"update_{i}" for i in range(count))


def _make_by_id(name: str, env_id: str) -> gym.Env:
    """``gymnasium.make(env_id)`` (``gif_env`` with ``render_mode="rgb_array"``); a ``ValueError``
    naming the option and the id when gymnasium cannot make it."""
    kwargs = {"render_mode": "rgb_array"} if name == "gif_env" else {}
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.Error as error:
        raise ValueError(
            f"{name} {env_id!r}: gymnasium cannot make this environment id ({error})"
        ) from error


def _default_obs_to_state(obs: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(obs), dtype=torch.get_default_dtype()).unsqueeze(0)


def _default_random_action(space: gym.Space) -> Callable[[], torch.Tensor]:
    """A uniformly random action for ``space`` in the form the default ``action_to_env`` takes."""
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        return lambda: torch.randint(n, (1, 1))
    if isinstance(space, gym.spaces.Box) and space.is_bounded("both"):
        low = torch.as_tensor(space.low, dtype=torch.get_default_dtype()).reshape(1, *space.shape)
        span = (
            torch.as_tensor(space.high, dtype=torch.get_default_dtype()).reshape(1, *space.shape)
            - low
        )
        return lambda: low + torch.rand(low.shape) * span
    raise TypeError(
        f"random_steps needs random_action for the action space {space!r} (defaults exist for "
        f"Discrete and bounded Box spaces)"
    )


def _default_action_to_env(space: gym.Space) -> Callable[[torch.Tensor], Any]:
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return lambda action: start + int(action.reshape(-1)[0].item())
    if isinstance(space, gym.spaces.Box):
        return lambda action: np.clip(
            action.detach().cpu().numpy().reshape(space.shape), space.low, space.high
        )
    raise TypeError(
        f"give action_to_env for the action space {space!r} (defaults exist for Discrete and Box)"
    )
