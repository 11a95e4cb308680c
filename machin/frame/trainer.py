"""An optional training loop: episodes, evaluation, progress, logs, checkpoints, a curve.

:class:`Trainer` drives any single-process algorithm on a gymnasium environment
through its public API only (``act*``, ``store_*``, ``update``, ``save``), so a
hand-written loop, as in the tutorials, keeps working next to it. How it acts and
stores is chosen from the algorithm's family and can be overridden:

===========================  =============================  =================  ===========================
family                       explores with                  stores             updates
===========================  =============================  =================  ===========================
DQN, DQNPer, RAINBOW         ``act_discrete_with_noise``    each transition    once per step after warm-up
DDPG, DDPGPer, HDDPG, TD3    ``act_with_noise`` (normal)    each transition    once per step after warm-up
SAC                          ``act``                        each transition    once per step after warm-up
A2C, PPO, TRPO               ``act``                        whole episodes     once per episode
===========================  =============================  =================  ===========================

Evaluation plays ``eval_episodes`` episodes without exploration (``act_discrete``
for the DQN family, ``act`` for the others; the stochastic policies of SAC and the
A2C family still sample) and stores nothing. With a ``log_dir`` the trainer writes
``progress.csv`` (one row per episode), TensorBoard scalars, the best evaluated
networks under ``checkpoints/`` and ``learning_curve.png``.
"""

from __future__ import annotations

import csv
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import gymnasium as gym
import numpy as np
import torch

from .algorithms.a2c import A2C
from .algorithms.base import TorchFramework
from .algorithms.ddpg import DDPG
from .algorithms.dqn import DQN
from .algorithms.sac import SAC

__all__ = ["Trainer", "TrainResult"]

EnvSource = Union[gym.Env, Callable[[], gym.Env]]

# family -> (explore method, its kwargs, evaluation method, store mode)
_FAMILIES: List[Tuple[type, str, Dict[str, Any], str, str]] = [
    (DQN, "act_discrete_with_noise", {}, "act_discrete", "transition"),
    (DDPG, "act_with_noise", {"noise_param": (0.0, 0.1), "mode": "normal"}, "act", "transition"),
    (SAC, "act", {}, "act", "transition"),
    (A2C, "act", {}, "act", "episode"),
]
_CSV_FIELDS = ["episode", "steps", "return", "smoothed", "eval_return", "seconds"]


@dataclass
class TrainResult:
    """What :meth:`Trainer.run` did.

    Attributes:
        episodes: Training episodes played.
        steps: Environment steps taken in training.
        returns: The return of every training episode.
        eval_returns: ``(episode, mean evaluation return)`` of every evaluation.
        best_eval_return: The best mean evaluation return (``-inf`` without evaluations).
        best_version: Version of the best checkpoint (the episode it was taken at), or
            ``None`` when none was written.
        solved_episode: Episode at which ``solved_reward`` was reached, or ``None``.
        paths: Files written: ``"csv"``, ``"curve"``, ``"checkpoints"``, ``"tensorboard"``.
    """

    episodes: int = 0
    steps: int = 0
    returns: List[float] = field(default_factory=list)
    eval_returns: List[Tuple[int, float]] = field(default_factory=list)
    best_eval_return: float = -math.inf
    best_version: Optional[int] = None
    solved_episode: Optional[int] = None
    paths: Dict[str, str] = field(default_factory=dict)


class Trainer:
    """Train an algorithm on a gymnasium environment, evaluate it, log and checkpoint.

    Args:
        framework: The algorithm (DQN, DDPG, SAC or A2C families, or any object with the
            same methods when ``act_method``, ``eval_act_method`` and ``store`` are given).
        env: A gymnasium environment or a function making one (called once).
        eval_env: Environment for evaluation (or a function making one); ``None`` makes a
            second one from ``env``'s spec when possible, else evaluates on ``env``.
        act_method: Name of the exploring act method (default: from the family table).
        act_kwargs: Keyword arguments of every exploring act call.
        eval_act_method: Name of the act method used in evaluation.
        store: ``"transition"`` (``store_transition`` every step) or ``"episode"``
            (``store_episode`` at the end of each episode, with a ``truncated`` flag).
        updates_per_step: ``update()`` calls per environment step (transition mode;
            fractions accumulate). Default 1.
        updates_per_episode: ``update()`` calls after each episode. Default: 1 in episode
            mode, 0 in transition mode.
        warmup_steps: Environment steps before the first update.
        state_key: Name of the network's ``forward`` argument receiving the observation.
        obs_to_state: Maps an observation to the state tensor ``[1, ...]`` (default: a
            float tensor of the observation with a leading batch dimension).
        action_to_env: Maps the action tensor to what ``env.step`` takes (default: an int
            for discrete spaces, a clipped array of the space's shape for boxes).
        eval_interval: Evaluate every this many training episodes (0: never).
        eval_episodes: Episodes per evaluation.
        smoothing: Weight of the past in the smoothed training return.
        solved_reward: Stop once the smoothed training return exceeds it for
            ``solved_repeat`` consecutive episodes (``None``: never stop early).
        solved_repeat: See ``solved_reward``.
        log_dir: Directory for the CSV, TensorBoard, checkpoints and the curve (created;
            ``None`` writes nothing).
        tensorboard: Write TensorBoard scalars into ``log_dir/tensorboard``.
        progress: Show a tqdm progress bar.
        seed: Episode ``i`` resets the training environment with ``seed + i`` and
            evaluation episode ``j`` of an evaluation with ``seed + 10**6 + j``.

    Raises:
        TypeError: If the framework's family is unknown and the methods are not given,
            or an option has the wrong type.
        ValueError: If an option is out of range or a named method does not exist.
    """

    def __init__(
        self,
        framework: Any,
        env: EnvSource,
        *,
        eval_env: Optional[EnvSource] = None,
        act_method: Optional[str] = None,
        act_kwargs: Optional[Dict[str, Any]] = None,
        eval_act_method: Optional[str] = None,
        store: Optional[str] = None,
        updates_per_step: float = 1.0,
        updates_per_episode: Optional[int] = None,
        warmup_steps: int = 0,
        state_key: str = "state",
        obs_to_state: Optional[Callable[[Any], torch.Tensor]] = None,
        action_to_env: Optional[Callable[[torch.Tensor], Any]] = None,
        eval_interval: int = 10,
        eval_episodes: int = 5,
        smoothing: float = 0.9,
        solved_reward: Optional[float] = None,
        solved_repeat: int = 5,
        log_dir: Optional[str] = None,
        tensorboard: bool = True,
        progress: bool = True,
        seed: Optional[int] = None,
    ) -> None:
        family = next((f for f in _FAMILIES if isinstance(framework, f[0])), None)
        if family is None and None in (act_method, eval_act_method, store):
            raise TypeError(
                f"Trainer knows the DQN, DDPG, SAC and A2C families; for "
                f"{type(framework).__name__} give act_method, eval_act_method and store"
            )
        _, default_act, default_kwargs, default_eval, default_store = family or (None, "", {}, "", "")
        self.framework = framework
        self.act_method = act_method or default_act
        self.act_kwargs = dict(default_kwargs if act_kwargs is None and act_method is None else act_kwargs or {})
        self.eval_act_method = eval_act_method or default_eval
        for name in ("act_method", "eval_act_method"):
            if not callable(getattr(framework, getattr(self, name), None)):
                raise ValueError(f"{name} {getattr(self, name)!r} is not a method of {type(framework).__name__}")
        self.store = store or default_store
        if self.store not in ("transition", "episode"):
            raise ValueError(f"store must be 'transition' or 'episode', got {self.store!r}")
        if updates_per_episode is None:
            updates_per_episode = 1 if self.store == "episode" else 0
        for name, value in (("updates_per_step", updates_per_step), ("updates_per_episode", updates_per_episode),
                            ("warmup_steps", warmup_steps), ("eval_interval", eval_interval)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        if isinstance(eval_episodes, bool) or not isinstance(eval_episodes, int) or eval_episodes < 1:
            raise ValueError(f"eval_episodes must be a positive integer, got {eval_episodes!r}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
        if isinstance(solved_repeat, bool) or not isinstance(solved_repeat, int) or solved_repeat < 1:
            raise ValueError(f"solved_repeat must be a positive integer, got {solved_repeat!r}")
        self.updates_per_step = updates_per_step if self.store == "transition" else 0.0
        self.updates_per_episode = int(updates_per_episode)
        self.warmup_steps = warmup_steps
        self.state_key = state_key
        self._owned: List[gym.Env] = []  # environments the trainer made, closed by close()
        self.env = self._make(env)
        self.eval_env = self._eval_env(eval_env)
        self.obs_to_state = obs_to_state or _default_obs_to_state
        self.action_to_env = action_to_env or _default_action_to_env(self.env.action_space)
        self.eval_interval = int(eval_interval)
        self.eval_episodes = eval_episodes
        self.smoothing = smoothing
        self.solved_reward = solved_reward
        self.solved_repeat = solved_repeat
        self.log_dir = log_dir
        self.tensorboard = tensorboard
        self.progress = progress
        self.seed = seed
        self._writer = None

    def _make(self, source: EnvSource) -> gym.Env:
        if isinstance(source, gym.Env) or not callable(source):
            return source
        env = source()
        self._owned.append(env)
        return env

    def _eval_env(self, eval_env: Optional[EnvSource]) -> gym.Env:
        if eval_env is not None:
            return self._make(eval_env)
        spec = getattr(self.env, "spec", None)
        return self._make(lambda: gym.make(spec)) if spec is not None else self.env

    def close(self) -> None:
        """Close the environments the trainer made from factories (or from ``env``'s spec)."""
        for env in self._owned:
            env.close()
        self._owned.clear()

    # -- one episode --------------------------------------------------------------------
    def _act(self, method: str, state: torch.Tensor, kwargs: Dict[str, Any]) -> torch.Tensor:
        output = getattr(self.framework, method)({self.state_key: state}, **kwargs)
        return output[0] if isinstance(output, tuple) else output

    def _play(self, env: gym.Env, method: str, kwargs: Dict[str, Any], seed: Optional[int],
              learn: bool, counters: Dict[str, float]) -> float:
        """Play one episode; when ``learn``, store it and update as configured. Returns its return."""
        obs, _ = env.reset(seed=seed)
        state = self.obs_to_state(obs)
        total, done, episode = 0.0, False, []
        while not done:
            with torch.no_grad():
                action = self._act(method, state, kwargs)
            obs, reward, terminated, truncated, _ = env.step(self.action_to_env(action))
            next_state = self.obs_to_state(obs)
            total += float(reward)
            done = terminated or truncated
            if learn:
                step = {"state": {self.state_key: state}, "action": {"action": action},
                        "next_state": {self.state_key: next_state}, "reward": float(reward),
                        "terminal": bool(terminated)}
                counters["steps"] += 1
                if self.store == "transition":
                    self.framework.store_transition(step)
                    if counters["steps"] > self.warmup_steps:
                        counters["credit"] += self.updates_per_step
                        self._update(int(counters["credit"]), counters)
                        counters["credit"] -= int(counters["credit"])
                else:
                    step["truncated"] = bool(truncated and not terminated)
                    episode.append(step)
            state = next_state
        if learn:
            if episode:
                self.framework.store_episode(episode)
            if counters["steps"] > self.warmup_steps:
                self._update(self.updates_per_episode, counters)
        return total

    def _update(self, times: int, counters: Dict[str, float]) -> None:
        for _ in range(times):
            result = self.framework.update()
            if result is None:
                continue
            values = result if isinstance(result, tuple) else (result,)
            names = ("policy_value", "value_loss") if len(values) == 2 else ("loss",)
            for name, value in zip(names, values):
                if isinstance(value, (int, float)):
                    counters.setdefault(name, 0.0)
                    counters[name] += float(value)
            counters["updates"] += 1

    def evaluate(self, episodes: Optional[int] = None) -> float:
        """Mean return of ``episodes`` (default ``eval_episodes``) episodes played without exploring.

        Args:
            episodes: Number of episodes.

        Returns:
            The mean undiscounted return.
        """
        episodes = self.eval_episodes if episodes is None else episodes
        counters: Dict[str, float] = {}
        returns = [
            self._play(self.eval_env, self.eval_act_method, {},
                       None if self.seed is None else self.seed + 10**6 + i, False, counters)
            for i in range(episodes)
        ]
        return float(np.mean(returns))

    # -- the loop -----------------------------------------------------------------------
    def run(self, episodes: int) -> TrainResult:
        """Train for up to ``episodes`` episodes (fewer when ``solved_reward`` is reached).

        Args:
            episodes: Maximum number of training episodes.

        Returns:
            A :class:`TrainResult`.

        Raises:
            ValueError: If ``episodes`` is not a positive integer.
        """
        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
        result = TrainResult()
        rows = self._open_logs(result)
        counters: Dict[str, float] = {"steps": 0, "credit": 0.0, "updates": 0}
        smoothed, streak, start = None, 0, time.time()
        bar = _progress_bar(episodes, self.progress)
        try:
            for episode in range(1, episodes + 1):
                seed = None if self.seed is None else self.seed + episode
                for key in ("policy_value", "value_loss", "loss"):
                    counters.pop(key, None)
                counters["updates"] = 0
                total = self._play(self.env, self.act_method, self.act_kwargs, seed, True, counters)
                smoothed = total if smoothed is None else self.smoothing * smoothed + (1 - self.smoothing) * total
                result.episodes, result.steps = episode, int(counters["steps"])
                result.returns.append(total)
                eval_return = None
                if self.eval_interval and episode % self.eval_interval == 0:
                    eval_return = self.evaluate()
                    result.eval_returns.append((episode, eval_return))
                    if eval_return > result.best_eval_return:
                        result.best_eval_return = eval_return
                        self._checkpoint(episode, result)
                self._log(rows, episode, result.steps, total, smoothed, eval_return, time.time() - start, counters)
                if bar is not None:
                    bar.set_postfix(smoothed=f"{smoothed:.1f}", steps=result.steps)
                    bar.update(1)
                streak = streak + 1 if self.solved_reward is not None and smoothed > self.solved_reward else 0
                if self.solved_reward is not None and streak >= self.solved_repeat:
                    result.solved_episode = episode
                    break
        finally:
            if bar is not None:
                bar.close()
            self._close_logs(rows, result)
        return result

    # -- output -------------------------------------------------------------------------
    def _open_logs(self, result: TrainResult) -> Optional[Tuple[Any, Any]]:
        if self.log_dir is None:
            return None
        os.makedirs(self.log_dir, exist_ok=True)
        result.paths["csv"] = os.path.join(self.log_dir, "progress.csv")
        handle = open(result.paths["csv"], "w", newline="")  # noqa: SIM115 (closed by _close_logs)
        writer = csv.DictWriter(handle, fieldnames=_CSV_FIELDS)
        writer.writeheader()
        if self.tensorboard:
            from tensorboardX import SummaryWriter

            result.paths["tensorboard"] = os.path.join(self.log_dir, "tensorboard")
            self._writer = SummaryWriter(result.paths["tensorboard"])
        return handle, writer

    def _log(self, rows: Optional[Tuple[Any, Any]], episode: int, steps: int, total: float, smoothed: float,
             eval_return: Optional[float], seconds: float, counters: Dict[str, float]) -> None:
        if rows is None:
            return
        handle, writer = rows
        writer.writerow({"episode": episode, "steps": steps, "return": total, "smoothed": smoothed,
                         "eval_return": "" if eval_return is None else eval_return, "seconds": round(seconds, 3)})
        handle.flush()
        if self._writer is not None:
            self._writer.add_scalar("train/return", total, episode)
            self._writer.add_scalar("train/smoothed_return", smoothed, episode)
            if eval_return is not None:
                self._writer.add_scalar("eval/return", eval_return, episode)
            for key in ("policy_value", "value_loss", "loss"):
                if key in counters and counters["updates"]:
                    self._writer.add_scalar(f"train/{key}", counters[key] / counters["updates"], episode)

    def _checkpoint(self, episode: int, result: TrainResult) -> None:
        if self.log_dir is None or not isinstance(self.framework, TorchFramework):
            return
        result.paths["checkpoints"] = os.path.join(self.log_dir, "checkpoints")
        self.framework.save(result.paths["checkpoints"], version=episode)
        result.best_version = episode

    def _close_logs(self, rows: Optional[Tuple[Any, Any]], result: TrainResult) -> None:
        if rows is None:
            return
        rows[0].close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if result.returns:
            from ..utils.media import create_learning_curve

            result.paths["curve"] = create_learning_curve(
                result.returns, self.log_dir, "learning_curve", title=type(self.framework).__name__,
                smoothing=self.smoothing,
            )


def _default_obs_to_state(obs: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(obs), dtype=torch.get_default_dtype()).unsqueeze(0)


def _default_action_to_env(space: gym.Space) -> Callable[[torch.Tensor], Any]:
    if isinstance(space, gym.spaces.Discrete):
        return lambda action: int(action.reshape(-1)[0].item())
    if isinstance(space, gym.spaces.Box):
        return lambda action: np.clip(action.detach().cpu().numpy().reshape(space.shape), space.low, space.high)
    raise TypeError(f"give action_to_env for the action space {space!r}")


def _progress_bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="episode", dynamic_ncols=True)
