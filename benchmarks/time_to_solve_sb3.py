"""Stable-Baselines3's runners for ``time_to_solve`` (SB3 imported only inside a run).

The model of each algorithm is made from the task's zoo settings, and a callback evaluates it
with the harness's :class:`~benchmarks.time_to_solve.Evaluation` (``deterministic=True``),
stopping ``learn`` at the threshold.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import numpy as np

from .time_to_solve import Evaluation, Task, _spaces

__all__ = ["RUNNERS"]


def _rate(value: Any) -> Any:
    """The zoo's ``lin_X`` (``("lin", X)``) as SB3's schedule of the progress left; a number as it is."""
    if isinstance(value, tuple) and value and value[0] == "lin":
        start = value[1]
        return lambda left: left * start
    return value


def _model(task: Task, seed: int) -> Any:
    from stable_baselines3 import DQN, PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    s = task.settings
    common = dict(
        seed=seed, device="cpu", learning_rate=_rate(s["learning_rate"]), gamma=s["gamma"]
    )
    if task.algorithm == "dqn":
        return DQN(
            "MlpPolicy",
            task.env_id,
            batch_size=s["batch_size"],
            buffer_size=s["buffer_size"],
            learning_starts=s["learning_starts"],
            target_update_interval=s["target_update_interval"],
            train_freq=s["train_freq"],
            gradient_steps=s["gradient_steps"],
            exploration_fraction=s["exploration_fraction"],
            exploration_final_eps=s["exploration_final_eps"],
            max_grad_norm=s["max_grad_norm"],
            policy_kwargs={"net_arch": list(s["net_arch"])},
            **common,
        )
    if task.algorithm == "ppo":
        envs = make_vec_env(task.env_id, n_envs=s["n_envs"], seed=seed)
        return PPO(
            "MlpPolicy",
            envs,
            n_steps=s["n_steps"],
            batch_size=s["batch_size"],
            gae_lambda=s["gae_lambda"],
            n_epochs=s["n_epochs"],
            ent_coef=s["ent_coef"],
            clip_range=_rate(s["clip_range"]),
            **common,
        )
    off_policy = dict(
        batch_size=s["batch_size"],
        buffer_size=s["buffer_size"],
        learning_starts=s["learning_starts"],
        tau=s["tau"],
        train_freq=s["train_freq"],
        gradient_steps=s["gradient_steps"],
        policy_kwargs={"net_arch": list(s["net_arch"])},
        **common,
    )
    if task.algorithm == "sac":
        return SAC("MlpPolicy", task.env_id, **off_policy)
    size = _spaces(task.env_id)[1].shape[0]
    noise = NormalActionNoise(np.zeros(size), np.full(size, s["noise_std"]))
    return TD3("MlpPolicy", task.env_id, action_noise=noise, **off_policy)


def _callback(evaluation: Evaluation, discrete: bool) -> Any:
    """A callback that evaluates when the step count crosses an evaluation point and stops
    ``learn`` when the evaluation says so."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Evaluate(BaseCallback):
        def _policy(self, obs: np.ndarray) -> Any:
            action, _ = self.model.predict(obs, deterministic=True)
            return int(action) if discrete else action

        def _on_step(self) -> bool:
            return not evaluation.step(self.model.num_timesteps, self._policy)

    return Evaluate()


def _train(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    model = _model(task, seed)
    discrete = task.algorithm in ("dqn", "ppo")
    model.learn(task.budget, callback=_callback(evaluation, discrete))


RUNNERS: Dict[Tuple[str, str], Callable[[Task, int, Evaluation, Dict[str, Any]], None]] = {
    ("sb3", algorithm): _train for algorithm in ("dqn", "ppo", "sac", "td3")
}
