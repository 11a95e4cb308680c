"""machin's runners for ``time_to_solve``: the hand-written loop and the fastest configuration.

Both build the same frameworks from a task's zoo settings (the networks of
``sample_efficiency``); ``machin-loop`` drives them with the documented hand-written loop,
``machin-fast`` with the :class:`~machin.frame.trainer.Trainer` and ``compile()``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from machin.env.wrappers.openai_gym import ParallelWrapperDummy
from machin.frame.algorithms import DQN, PPO, SAC, TD3
from machin.frame.sampler import VecSampler
from machin.frame.trainer import Trainer
from machin.utils.schedules import LinearSchedule

from .sample_efficiency import (
    CategoricalActor,
    DeterministicActor,
    QCritic,
    QNet,
    SquashedGaussianActor,
    ValueNet,
)
from .time_to_solve import Evaluation, Task, _scaled_env_actions, _spaces

__all__ = ["RUNNERS", "build"]


def _rate(value: Any) -> Any:
    """The zoo's ``lin_X`` (``("lin", X)``) as machin's schedule; a number as it is."""
    if isinstance(value, tuple) and value and value[0] == "lin":
        return LinearSchedule(value[1], 0.0)
    return value


def _state(obs: np.ndarray) -> Dict[str, torch.Tensor]:
    return {"state": torch.as_tensor(obs, dtype=torch.float32).view(1, -1)}


def _dqn(task: Task) -> DQN:
    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    nets = [QNet(obs_space.shape[0], int(act_space.n)) for _ in range(2)]
    return DQN(
        *nets,
        torch.optim.Adam,
        nn.SmoothL1Loss(),
        mode="fixed_target",
        update_rate=None,
        update_steps=s["gradient_steps"],
        learning_rate=_rate(s["learning_rate"]),
        batch_size=s["batch_size"],
        replay_size=s["buffer_size"],
        discount=s["gamma"],
        gradient_max=s["max_grad_norm"],
        epsilon=LinearSchedule(1.0, s["exploration_final_eps"], s["exploration_fraction"]),
    )


def _ppo(task: Task) -> PPO:
    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    rate = _rate(s["learning_rate"])
    return PPO(
        CategoricalActor(obs_space.shape[0], int(act_space.n)),
        ValueNet(obs_space.shape[0]),
        functools.partial(torch.optim.Adam, eps=1e-5),
        nn.MSELoss(),
        joint_update=True,
        value_target="lambda_return",
        batch_size=s["batch_size"],
        actor_update_times=s["n_epochs"],
        critic_update_times=s["n_epochs"],
        discount=s["gamma"],
        gae_lambda=s["gae_lambda"],
        value_weight=0.5,
        gradient_max=0.5,
        entropy_weight=-s["ent_coef"] if s["ent_coef"] else None,
        normalize_advantage=True,
        actor_learning_rate=rate,
        critic_learning_rate=rate,
        surrogate_loss_clip=_rate(s["clip_range"]),
    )


def _sac(task: Task) -> SAC:
    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    o, a, hidden = obs_space.shape[0], act_space.shape[0], tuple(s["net_arch"])
    rate = _rate(s["learning_rate"])
    return SAC(
        SquashedGaussianActor(o, a, hidden),
        *[QCritic(o, a, hidden) for _ in range(4)],
        torch.optim.Adam,
        nn.MSELoss(),
        actor_learning_rate=rate,
        critic_learning_rate=rate,
        alpha_learning_rate=rate,
        batch_size=s["batch_size"],
        replay_size=s["buffer_size"],
        discount=s["gamma"],
        update_rate=s["tau"],
        initial_entropy_alpha=1.0,
        target_entropy=-float(a),
    )


def _td3(task: Task) -> TD3:
    s = task.settings
    obs_space, act_space = _spaces(task.env_id)
    o, a, hidden = obs_space.shape[0], act_space.shape[0], tuple(s["net_arch"])
    actors = [DeterministicActor(o, a, hidden) for _ in range(2)]
    critics = [QCritic(o, a, hidden) for _ in range(4)]
    return TD3(
        *actors,
        *critics,
        torch.optim.Adam,
        nn.MSELoss(),
        actor_learning_rate=_rate(s["learning_rate"]),
        critic_learning_rate=_rate(s["learning_rate"]),
        batch_size=s["batch_size"],
        replay_size=s["buffer_size"],
        discount=s["gamma"],
        update_rate=s["tau"],
        policy_noise=0.2,
        noise_clip=0.5,
        policy_update_delay=2,
        action_range=(-1.0, 1.0),
    )


_BUILD = {"dqn": _dqn, "ppo": _ppo, "sac": _sac, "td3": _td3}


def build(task: Task) -> Any:
    """The machin framework of ``task`` with its zoo settings."""
    return _BUILD[task.algorithm](task)


def greedy_policy(framework: Any, task: Task) -> Callable[[np.ndarray], Any]:
    """The evaluation policy: observation -> the action the environment takes."""
    act_space = _spaces(task.env_id)[1]
    if task.algorithm == "dqn":
        return lambda obs: int(framework.act_discrete(_state(obs)))
    if task.algorithm == "ppo":
        return lambda obs: int(framework.actor.greedy(_state(obs)["state"]))
    to_env = _scaled_env_actions(act_space)
    if task.algorithm == "td3":
        return lambda obs: to_env(framework.act(_state(obs)))
    return lambda obs: to_env(framework.actor.greedy(_state(obs)["state"]))


def _explore(
    framework: Any, task: Task
) -> Tuple[Callable[[Dict], torch.Tensor], Callable[[], torch.Tensor]]:
    """(exploring act, random action) of an off-policy task, actions as the buffer stores them."""
    act_space = _spaces(task.env_id)[1]
    if task.algorithm == "dqn":
        return framework.act_discrete_with_noise, lambda: torch.randint(int(act_space.n), (1, 1))
    size = act_space.shape[0]
    random = lambda: torch.rand(1, size) * 2 - 1  # noqa: E731
    if task.algorithm == "td3":
        noise = (0.0, task.settings["noise_std"])
        return lambda state: framework.act_with_noise(state, noise, mode="normal"), random
    return lambda state: framework.act(state)[0], random


# -- machin-loop ----------------------------------------------------------------------------
def _loop_off_policy(
    task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]
) -> None:
    """DQN, SAC, TD3 written out: act, step, store_transition, bursts of update()."""
    s = task.settings
    framework = build(task)
    act, random_action = _explore(framework, task)
    to_env = int if task.algorithm == "dqn" else _scaled_env_actions(_spaces(task.env_id)[1])
    greedy = greedy_policy(framework, task)
    env = gym.make(task.env_id)
    state = _state(env.reset(seed=seed)[0])
    for step in range(1, task.budget + 1):
        framework.set_progress(min(1.0, step / task.budget))
        with torch.no_grad():
            action = random_action() if step <= s["learning_starts"] else act(state)
        obs, reward, terminated, truncated, _ = env.step(to_env(action))
        next_state = _state(obs)
        framework.store_transition(
            {
                "state": state,
                "action": {"action": action},
                "next_state": next_state,
                "reward": float(reward),
                "terminal": bool(terminated),
            }
        )
        state = _state(env.reset()[0]) if terminated or truncated else next_state
        if step > s["learning_starts"] and step % s["train_freq"] == 0:
            for _ in range(s["gradient_steps"]):
                framework.update()
        if evaluation.step(step, greedy):
            break
    env.close()


def _loop_ppo(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    """PPO as docs/sampler.rst writes it: collect_rollout, then update(), until stopped."""
    s = task.settings
    ppo = build(task)
    greedy = greedy_policy(ppo, task)
    make = functools.partial(_make_env, task.env_id)
    with ParallelWrapperDummy([make] * s["n_envs"]) as envs:
        sampler = VecSampler(ppo, envs, seed=seed)
        steps = 0
        while steps < task.budget:
            ppo.set_progress(min(1.0, steps / task.budget))
            sampler.collect_rollout(s["n_steps"])
            ppo.update()
            steps += s["n_steps"] * s["n_envs"]
            if evaluation.step(steps, greedy):
                break


def _make_env(env_id: str, _index: int = 0) -> gym.Env:
    return gym.make(env_id)


# -- machin-fast ----------------------------------------------------------------------------
class _StoppingTrainer(Trainer):
    """The trainer, its evaluations recorded in an :class:`Evaluation` that may halt the run."""

    evaluation: Evaluation

    def evaluate(self, episodes=None) -> float:
        policy = greedy_policy(self.framework, self.task)
        stop = self.evaluation.evaluate(self.steps, policy)
        if stop:
            self.halt()
        return self.evaluation.returns[-1]


def _fast(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    """The trainer with the zoo's bursts (or PPO's rollouts over a group) and compile()
    (left out with ``options["compile"]`` false)."""
    s = task.settings
    framework = build(task)
    if options.get("compile", True):
        framework.compile()
    make = functools.partial(_make_env, task.env_id)
    settings: Dict[str, Any] = dict(
        eval_env=make,
        eval_every_steps=task.eval_every,
        eval_episodes=evaluation.episodes,
        seed=seed,
        progress=False,
        tensorboard=False,
    )
    if task.algorithm == "ppo":
        envs = ParallelWrapperDummy([make] * s["n_envs"])
        settings.update(env=envs, rollout_steps=s["n_steps"])
    else:
        random_action = _explore(framework, task)[1]
        settings.update(
            env=make,
            train_freq=s["train_freq"],
            gradient_steps=s["gradient_steps"],
            warmup_steps=s["learning_starts"],
            random_steps=s["learning_starts"],
            random_action=random_action,
        )
        settings.update(_act_options(task))
    trainer = _StoppingTrainer(framework, **settings)
    trainer.evaluation, trainer.task = evaluation, task
    with trainer:
        trainer.run(steps=task.budget)
    if task.algorithm == "ppo":
        envs.close()


def _act_options(task: Task) -> Dict[str, Any]:
    if task.algorithm == "dqn":
        return {"act_method": "act_discrete_with_noise", "eval_act_method": "act_discrete"}
    to_env = {"action_to_env": _scaled_env_actions(_spaces(task.env_id)[1])}
    if task.algorithm == "td3":
        noise = {"noise_param": (0.0, task.settings["noise_std"]), "mode": "normal"}
        return dict(to_env, act_method="act_with_noise", act_kwargs=noise, eval_act_method="act")
    return dict(to_env, act_method="act")


RUNNERS: Dict[Tuple[str, str], Callable[[Task, int, Evaluation, Dict[str, Any]], None]] = {
    ("machin-loop", "dqn"): _loop_off_policy,
    ("machin-loop", "sac"): _loop_off_policy,
    ("machin-loop", "td3"): _loop_off_policy,
    ("machin-loop", "ppo"): _loop_ppo,
    ("machin-fast", "dqn"): _fast,
    ("machin-fast", "sac"): _fast,
    ("machin-fast", "td3"): _fast,
    ("machin-fast", "ppo"): _fast,
}
