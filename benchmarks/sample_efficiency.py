"""Sample efficiency with rl-baselines3-zoo's hyperparameters (issue #25).

Users bring tuned rl-baselines3-zoo setups to machin. This benchmark trains, with the
zoo's published hyperparameters,

* DQN and PPO on CartPole-v1 (threshold: a greedy return of 475),
* SAC and TD3 on Pendulum-v1 (threshold: a greedy return of -200),

for several seeds. Every 1000 training steps the current policy plays
``--eval-episodes`` (default 5, the zoo's ``n_eval_episodes``) greedy episodes on a
separate evaluation environment. A seed's *steps to threshold* is the training step of
its first evaluation whose mean return reaches the threshold; its *final return* is the
evaluation at the step budget. The table shows per task the median over seeds of both
(each seed's steps in brackets), next to the zoo's published final return and the steps
the issue measured for Stable-Baselines3, plus the CPU seconds of the task (process CPU
time of its runs, training and evaluations, summed over the seeds, and per seed). One
line per seed is printed as it finishes; ``--json PATH`` also writes every evaluation.

Run it by name (it takes minutes; ``python -m benchmarks`` skips it)::

    python -m benchmarks sample_efficiency              # all tasks, 3 seeds
    python -m benchmarks.sample_efficiency --tasks dqn ppo sac td3 --seeds 5 --workers 16
    python -m benchmarks.sample_efficiency --steps-scale 0.05 --seeds 1   # smoke test

Every run is one process with one torch thread; ``--workers`` processes run the
(task, seed) runs in parallel (default: one per core, at most one per run). A run of
SAC (20k updates of 256-256 networks on batches of 256) takes a few minutes of one core.

Targets (issue #25): median steps to the threshold at most 16,000 (DQN), 22,000 (PPO),
3,000 (SAC) and 14,000 (TD3). Published zoo finals: DQN 500 at 50k steps, PPO 500 at
100k, SAC and TD3 about -150 at 20k. Stable-Baselines3 in the issue's comparison: DQN
15,000 median steps to 475, PPO 22,000; for SAC and TD3 the issue found SB3 and machin
alike and gives no separate figure (shown as "= machin").

``--library sb3`` runs the tasks in Stable-Baselines3 instead (it must be
importable; it is not a dependency of machin), with the same settings, seeds and
evaluations, so that both libraries are compared over the same, larger set of seeds::

    python -m benchmarks.sample_efficiency --tasks dqn ppo --seeds 13
    python -m benchmarks.sample_efficiency --tasks dqn ppo --seeds 13 --library sb3

Hyperparameters (the zoo's files, Stable-Baselines3 defaults where the zoo sets nothing)
and how they map onto machin:

DQN, CartPole-v1: 50k steps, MLP 256-256 ReLU, Adam lr 2.3e-3, batch 64, buffer 100k,
    learning_starts 1000, gamma 0.99, train_freq 256, gradient_steps 128,
    target_update_interval 10, exploration 1.0 -> 0.04 over the first 16 % of training,
    Huber loss (``nn.SmoothL1Loss()``, mean), max_grad_norm 10, target ``max_a Q'(s', a)``
    (``mode="fixed_target"``). SB3 counts ``target_update_interval`` in environment steps
    and copies the target only while collecting; with bursts of 128 updates every 256
    steps the target during a burst is therefore the online network as the burst started.
    machin counts updates, and ``update_steps=128`` (a copy after every burst) gives the
    same targets exactly. ``learning_starts`` is also, as in SB3, a phase of uniformly
    random actions (see "Warm-up" below). ``--dqn-mode double`` trains machin's default
    rule instead (the online network picks the next action, the target network values it).
PPO, CartPole-v1: 8 environments, 100k steps, n_steps 32 (rollouts of 256 transitions),
    batch 256, 20 epochs, gamma 0.98, gae_lambda 0.8, ent_coef 0, learning rate linear
    from 1e-3 to 0 and clip range linear from 0.2 to 0 (``LinearSchedule`` driven by the
    trainer's progress), SB3's default MlpPolicy: separate actor and critic MLPs 64-64
    tanh with orthogonal initialisation (gain sqrt(2) for hidden layers, 0.01 for the
    policy output, 1 for the value output), Adam with eps 1e-5, vf_coef 0.5,
    max_grad_norm 0.5, advantages normalised per minibatch, no value clipping. In machin:
    ``joint_update=True`` (epochs over shuffled minibatches of one joint loss, one
    gradient clip over both networks), ``value_target="lambda_return"`` (the critic
    regresses on advantage + V(s), as SB3), ``actor_update_times=20``, the trainer's
    ``rollout_steps=32`` over a ``ParallelWrapperDummy`` of 8 environments (SB3's
    DummyVecEnv); an unfinished rollout tail and a time-limit cut are bootstrapped from the
    critic, as in SB3. The evaluations land exactly on multiples of 1000 (125 group steps).
SAC, Pendulum-v1: 20k steps, Adam lr 1e-3 (actor, critics and temperature), MLP 256-256
    ReLU (SB3's default for SAC), batch 256, buffer 1e6, learning_starts 100, gamma 0.99,
    tau 0.005, one update per step, entropy coefficient "auto": initial alpha 1.0, target
    entropy -1 (minus the action dimension). The actor is SB3's squashed Gaussian
    (log-std clamped to [-20, 2], tanh with the ``log(1 - tanh^2 + 1e-6)`` correction).
TD3, Pendulum-v1: 20k steps, Adam lr 1e-3, MLP 400-300 ReLU (tanh actor output), batch
    256 (the SB3 >= 2.0 default; the zoo file sets none), buffer 200k, learning_starts
    10000, gamma 0.98, Gaussian exploration noise of std 0.1, one update per step,
    policy_delay 2, target_policy_noise 0.2, target_noise_clip 0.5, tau 0.005; noisy and
    smoothed target actions are clamped to the action bounds (``action_range``).

SAC and TD3 act, as SB3 does, in the action space rescaled to [-1, 1]: the networks,
the noise, the clamping and the replay buffer all see actions in [-1, 1] and the
environment receives ``2 * action`` (Pendulum's bounds are +-2).

Warm-up: SB3 neither trains nor uses its policy before ``learning_starts`` steps; it
plays uniformly random actions. The trainer does the same with ``warmup_steps`` and
``random_steps`` of that length (random actions in [-1, 1] for SAC and TD3, through
``random_action``). Small subclasses add ``act_greedy`` where the algorithm has no greedy
act method of its own: PPO's most probable action (argmax of the logits) and SAC's mean
action ``tanh(mu)``. DQN is evaluated with ``act_discrete`` and TD3 with ``act``.

Choices not fixed by the issue: 5 evaluation episodes each time, reset with the same
seeds at every evaluation (the trainer's ``seed + 10**6 + j``; ``--eval-starts fresh``
gives every evaluation new starting states instead, as an evaluation environment that
is not reseeded would); seeds 0 .. n-1; a seed
whose evaluations never reach the threshold counts as infinitely many steps in the
median (shown as ``-``). On a single environment the trainer ends a run with the episode
in progress at the budget (DQN may take up to 499 more steps); the steps and the final
return are read only from evaluations at or before the budget. ``--steps-scale``
shrinks the budgets (not ``learning_starts`` or the schedules' shapes) for smoke tests.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from machin.env.wrappers.openai_gym import ParallelWrapperDummy
from machin.frame.algorithms import DQN, PPO, SAC, TD3
from machin.frame.trainer import Trainer
from machin.utils.schedules import LinearSchedule
from machin.utils.seeding import seed as seed_everything

__all__ = ["main", "run_seed", "TASKS"]

EVAL_EVERY = 1000
# ``--eval-starts fresh``: evaluation k (1, 2, ...) resets its episode j with seed + 10**6 + 1000 k + j
# (new starting states every time, as an evaluation environment that is not reseeded gives)
# instead of seed + 10**6 + j at every evaluation (the trainer's seeding, the default).
_FRESH_STARTS = False
# ``--final-episodes N``: after training, the greedy policy plays N more episodes (reset with
# seed + 2 * 10**6 + j, starts no evaluation used) and their mean is reported as "final N".
_FINAL_EPISODES = 0
# ``--dqn-mode``: the DQN task's target rule; "fixed_target" is SB3's, "double" machin's default.
_DQN_MODE = "fixed_target"
SKIP_MESSAGE = "sample_efficiency: skipped (run by name: python -m benchmarks sample_efficiency)"


@dataclass(frozen=True)
class Task:
    """What one task trains and what its results are compared with."""

    env_id: str
    steps: int  # the zoo's n_timesteps
    threshold: float  # greedy return counted as "reached"
    target: int  # issue #25: median steps to the threshold at most this
    zoo_final: str  # the zoo's published final return
    sb3_steps: str  # steps to the threshold measured for Stable-Baselines3 (issue #25)


TASKS: Dict[str, Task] = {
    "dqn": Task("CartPole-v1", 50_000, 475.0, 16_000, "500 @50k", "15,000"),
    "ppo": Task("CartPole-v1", 100_000, 475.0, 22_000, "500 @100k", "22,000"),
    "sac": Task("Pendulum-v1", 20_000, -200.0, 3_000, "~-150 @20k", "= machin"),
    "td3": Task("Pendulum-v1", 20_000, -200.0, 14_000, "~-150 @20k", "= machin"),
}


# -- networks ------------------------------------------------------------------------
def _mlp(sizes: Sequence[int], activation: Callable[[], nn.Module]) -> nn.Sequential:
    layers: List[nn.Module] = []
    for i, (inp, out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(inp, out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


def _orthogonal(net: nn.Sequential, output_gain: float) -> nn.Sequential:
    """SB3's ``ortho_init``: gain sqrt(2) for hidden layers, ``output_gain`` for the last, zero biases."""
    linears = [m for m in net if isinstance(m, nn.Linear)]
    for layer in linears:
        nn.init.orthogonal_(
            layer.weight, gain=output_gain if layer is linears[-1] else math.sqrt(2)
        )
        nn.init.zeros_(layer.bias)
    return net


class QNet(nn.Module):
    def __init__(self, obs_dim: int, actions: int):
        super().__init__()
        self.net = _mlp([obs_dim, 256, 256, actions], nn.ReLU)

    def forward(self, state):
        return self.net(state)


class CategoricalActor(nn.Module):
    """SB3's default PPO policy head: MLP 64-64 tanh to logits."""

    def __init__(self, obs_dim: int, actions: int):
        super().__init__()
        self.net = _orthogonal(_mlp([obs_dim, 64, 64, actions], nn.Tanh), 0.01)

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample().view(-1, 1) if action is None else action
        return action, dist.log_prob(action.view(-1)), dist.entropy()

    def greedy(self, state):
        return self.net(state).argmax(dim=1, keepdim=True)


class ValueNet(nn.Module):
    def __init__(self, obs_dim: int):
        super().__init__()
        self.net = _orthogonal(_mlp([obs_dim, 64, 64, 1], nn.Tanh), 1.0)

    def forward(self, state):
        return self.net(state)


class SquashedGaussianActor(nn.Module):
    """SB3's SAC actor: MLP 256-256 ReLU, mean and clamped log-std, tanh-squashed sample."""

    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
        self.body = _mlp([obs_dim, 256, 256], nn.ReLU)
        self.body.append(nn.ReLU())
        self.mu = nn.Linear(256, action_dim)
        self.log_std = nn.Linear(256, action_dim)

    def forward(self, state):
        hidden = self.body(state)
        mu, log_std = self.mu(hidden), self.log_std(hidden).clamp(-20.0, 2.0)
        dist = Normal(mu, log_std.exp())
        raw = dist.rsample()
        action = torch.tanh(raw)
        log_prob = dist.log_prob(raw).sum(dim=1) - torch.log(1 - action.pow(2) + 1e-6).sum(dim=1)
        return action, log_prob.view(-1, 1)

    def greedy(self, state):
        return torch.tanh(self.mu(self.body(state)))


class DeterministicActor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int]):
        super().__init__()
        self.net = nn.Sequential(_mlp([obs_dim, *hidden, action_dim], nn.ReLU), nn.Tanh())

    def forward(self, state):
        return self.net(state)


class QCritic(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int]):
        super().__init__()
        self.net = _mlp([obs_dim + action_dim, *hidden, 1], nn.ReLU)

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


# -- greedy act methods where the algorithm has none -----------------------------------
class _ActGreedy:
    """``act_greedy(state)``: the actor network's own ``greedy`` action."""

    def act_greedy(self, state):
        with torch.no_grad():
            return self.actor.greedy(state["state"])


class BenchPPO(_ActGreedy, PPO):
    pass


class BenchSAC(_ActGreedy, SAC):
    pass


def _uniform_unit_action() -> torch.Tensor:
    """A random action of the rescaled space [-1, 1] (one action dimension)."""
    return torch.rand(1, 1) * 2 - 1


# -- one run ---------------------------------------------------------------------------
def _unscaler(env_id: str) -> Callable[[torch.Tensor], np.ndarray]:
    """Map an action in [-1, 1] to the bounds of ``env_id``'s action space (SB3's ``unscale_action``)."""
    probe = gym.make(env_id)
    space = probe.action_space
    probe.close()
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)

    def to_env(action: torch.Tensor) -> np.ndarray:
        scaled = np.clip(action.detach().cpu().numpy().reshape(space.shape), -1.0, 1.0)
        return (low + (scaled + 1.0) * 0.5 * (high - low)).astype(space.dtype)

    return to_env


def _make(env_id: str) -> Callable[..., gym.Env]:
    return functools.partial(_make_env, env_id)


def _make_env(env_id: str, _index: int = 0) -> gym.Env:
    return gym.make(env_id)


def _eval_seed(seed: int, evaluation: int, episode: int) -> int:
    """Reset seed of evaluation episode ``episode`` of evaluation number ``evaluation`` (from 1)."""
    return seed + 10**6 + episode + (1000 * evaluation if _FRESH_STARTS else 0)


class _Trainer(Trainer):
    """The trainer, its evaluation episodes reset with :func:`_eval_seed`."""

    evaluations = 0
    final = False

    def evaluate(self, episodes: Optional[int] = None) -> float:
        self.evaluations += 1
        return super().evaluate(episodes)

    def _eval_seed(self, index: int) -> Optional[int]:
        if self.seed is None:
            return None
        return (
            self.seed + 2 * 10**6 + index
            if self.final
            else _eval_seed(self.seed, self.evaluations, index)
        )

    def train(self, steps: int) -> Any:
        """``run(steps=steps)``, then the final evaluation of ``_FINAL_EPISODES`` episodes (``final_eval``)."""
        with self:
            result = self.run(steps=steps)
            result.final_eval = None
            if _FINAL_EPISODES:
                self.final = True
                result.final_eval = self.evaluate(_FINAL_EPISODES)
        return result


def _train_dqn(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    dqn = DQN(
        QNet(4, 2),
        QNet(4, 2),
        torch.optim.Adam,
        nn.SmoothL1Loss(),
        mode=_DQN_MODE,
        update_rate=None,
        update_steps=128,
        learning_rate=2.3e-3,
        batch_size=64,
        replay_size=100_000,
        discount=0.99,
        gradient_max=10.0,
        epsilon=LinearSchedule(1.0, 0.04, 0.16),
    )
    trainer = _Trainer(
        dqn,
        _make(task.env_id),
        eval_env=_make(task.env_id),
        act_method="act_discrete_with_noise",
        eval_act_method="act_discrete",
        train_freq=256,
        gradient_steps=128,
        warmup_steps=1000,
        random_steps=1000,
        eval_every_steps=EVAL_EVERY,
        eval_episodes=eval_episodes,
        seed=seed,
        progress=False,
    )
    return trainer.train(steps)


def _train_ppo(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    ppo = BenchPPO(
        CategoricalActor(4, 2),
        ValueNet(4),
        functools.partial(torch.optim.Adam, eps=1e-5),
        nn.MSELoss(),
        joint_update=True,
        value_target="lambda_return",
        batch_size=256,
        actor_update_times=20,
        critic_update_times=20,
        discount=0.98,
        gae_lambda=0.8,
        value_weight=0.5,
        gradient_max=0.5,
        entropy_weight=None,
        normalize_advantage=True,
        actor_learning_rate=LinearSchedule(1e-3, 0.0),
        critic_learning_rate=LinearSchedule(1e-3, 0.0),
        surrogate_loss_clip=LinearSchedule(0.2, 0.0),
    )
    with ParallelWrapperDummy([_make(task.env_id)] * 8) as envs:
        trainer = _Trainer(
            ppo,
            envs,
            eval_env=_make(task.env_id),
            eval_act_method="act_greedy",
            rollout_steps=32,
            eval_every_steps=EVAL_EVERY,
            eval_episodes=eval_episodes,
            seed=seed,
            progress=False,
        )
        return trainer.train(steps)


def _train_sac(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    critics = [QCritic(3, 1, (256, 256)) for _ in range(4)]
    sac = BenchSAC(
        SquashedGaussianActor(3, 1),
        *critics,
        torch.optim.Adam,
        nn.MSELoss(),
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        alpha_learning_rate=1e-3,
        batch_size=256,
        replay_size=1_000_000,
        discount=0.99,
        update_rate=0.005,
        initial_entropy_alpha=1.0,
        target_entropy=-1.0,
    )
    trainer = _Trainer(
        sac,
        _make(task.env_id),
        eval_env=_make(task.env_id),
        act_method="act",
        eval_act_method="act_greedy",
        action_to_env=_unscaler(task.env_id),
        train_freq=1,
        gradient_steps=1,
        warmup_steps=100,
        random_steps=100,
        random_action=_uniform_unit_action,
        eval_every_steps=EVAL_EVERY,
        eval_episodes=eval_episodes,
        seed=seed,
        progress=False,
    )
    return trainer.train(steps)


def _train_td3(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    hidden = (400, 300)
    td3 = TD3(
        DeterministicActor(3, 1, hidden),
        DeterministicActor(3, 1, hidden),
        QCritic(3, 1, hidden),
        QCritic(3, 1, hidden),
        QCritic(3, 1, hidden),
        QCritic(3, 1, hidden),
        torch.optim.Adam,
        nn.MSELoss(),
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        batch_size=256,
        replay_size=200_000,
        discount=0.98,
        update_rate=0.005,
        policy_noise=0.2,
        noise_clip=0.5,
        policy_update_delay=2,
        action_range=(-1.0, 1.0),
    )
    trainer = _Trainer(
        td3,
        _make(task.env_id),
        eval_env=_make(task.env_id),
        act_method="act_with_noise",
        act_kwargs={"noise_param": (0.0, 0.1), "mode": "normal"},
        eval_act_method="act",
        action_to_env=_unscaler(task.env_id),
        train_freq=1,
        gradient_steps=1,
        warmup_steps=10_000,
        random_steps=10_000,
        random_action=_uniform_unit_action,
        eval_every_steps=EVAL_EVERY,
        eval_episodes=eval_episodes,
        seed=seed,
        progress=False,
    )
    return trainer.train(steps)


_TRAIN = {"dqn": _train_dqn, "ppo": _train_ppo, "sac": _train_sac, "td3": _train_td3}


# -- the same runs with Stable-Baselines3 (``--library sb3``) ----------------------------
def _train_sb3(name: str, task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    """Train ``name`` with Stable-Baselines3 and the zoo's settings, evaluated like the machin runs.

    Evaluations: ``eval_episodes`` greedy (``deterministic=True``) episodes every ``EVAL_EVERY`` steps,
    reset with the seeds the trainer uses (``seed + 10**6 + j``).
    """
    try:
        from stable_baselines3 import DQN as SB3DQN
        from stable_baselines3 import PPO as SB3PPO
        from stable_baselines3 import SAC as SB3SAC
        from stable_baselines3 import TD3 as SB3TD3
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.noise import NormalActionNoise
    except ImportError as error:
        raise SystemExit(
            "--library sb3 needs stable-baselines3 importable (pip install stable-baselines3)"
        ) from error
    if name == "dqn":
        model = SB3DQN(
            "MlpPolicy",
            task.env_id,
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16,
            exploration_final_eps=0.04,
            policy_kwargs={"net_arch": [256, 256]},
            seed=seed,
            device="cpu",
        )
    elif name == "ppo":
        model = SB3PPO(
            "MlpPolicy",
            make_vec_env(task.env_id, n_envs=8, seed=seed),
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=lambda left: left * 1e-3,
            clip_range=lambda left: left * 0.2,
            seed=seed,
            device="cpu",
        )
    elif name == "sac":  # the zoo sets only the learning rate; the rest are SB3's defaults
        model = SB3SAC("MlpPolicy", task.env_id, learning_rate=1e-3, seed=seed, device="cpu")
    else:
        model = SB3TD3(
            "MlpPolicy",
            task.env_id,
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            action_noise=NormalActionNoise(np.zeros(1), np.full(1, 0.1)),
            gradient_steps=1,
            train_freq=1,
            learning_rate=1e-3,
            policy_kwargs={"net_arch": [400, 300]},
            seed=seed,
            device="cpu",
        )
    discrete = isinstance(model.action_space, gym.spaces.Discrete)
    eval_env = gym.make(task.env_id)
    curve = types.SimpleNamespace(eval_steps=[], eval_returns=[], steps=0, evaluations=0)

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            now = self.model.num_timesteps
            if now // EVAL_EVERY > (now - self.training_env.num_envs) // EVAL_EVERY:
                returns = []
                curve.evaluations += 1
                for j in range(eval_episodes):
                    obs, _ = eval_env.reset(seed=_eval_seed(seed, curve.evaluations, j))
                    total, done = 0.0, False
                    while not done:
                        action, _ = self.model.predict(obs, deterministic=True)
                        obs, reward, terminated, truncated, _ = eval_env.step(
                            int(action) if discrete else action
                        )
                        total, done = total + float(reward), terminated or truncated
                    returns.append(total)
                curve.eval_steps.append(now // EVAL_EVERY * EVAL_EVERY)
                curve.eval_returns.append(
                    (None, statistics.mean(returns))
                )  # as the trainer: (episode, mean)
            return True

    model.learn(steps, callback=Evaluate())
    curve.steps = model.num_timesteps
    curve.final_eval = None
    if _FINAL_EPISODES:
        returns = []
        for j in range(_FINAL_EPISODES):
            obs, _ = eval_env.reset(seed=seed + 2 * 10**6 + j)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = eval_env.step(
                    int(action) if discrete else action
                )
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        curve.final_eval = statistics.mean(returns)
    eval_env.close()
    return curve


def run_seed(
    name: str,
    seed: int,
    steps_scale: float = 1.0,
    eval_episodes: int = 5,
    library: str = "machin",
    eval_starts: str = "same",
    final_episodes: int = 0,
    dqn_mode: str = "fixed_target",
) -> Dict[str, Any]:
    """Train task ``name`` with seed ``seed``; return its evaluations and summary (a JSON-able dict).

    ``library="sb3"`` trains it with Stable-Baselines3 instead. ``eval_starts="fresh"`` resets
    every evaluation's episodes with seeds of its own (see ``_FRESH_STARTS``); ``final_episodes``
    adds a final evaluation of that many episodes (``final_eval``, see ``_FINAL_EPISODES``);
    ``dqn_mode`` is the machin DQN's ``mode`` (see ``_DQN_MODE``).

    Keys: ``task``, ``library``, ``seed``, ``budget``, ``steps_taken``, ``eval_steps``, ``eval_returns``,
    ``steps_to_threshold`` (``None``: never reached), ``final_return`` (the evaluation at the
    budget; ``None`` when there was none), ``cpu_seconds`` and ``wall_seconds``.
    """
    global _FRESH_STARTS, _FINAL_EPISODES, _DQN_MODE
    _FRESH_STARTS, _FINAL_EPISODES, _DQN_MODE = eval_starts == "fresh", final_episodes, dqn_mode
    task = TASKS[name]
    budget = max(1, int(round(task.steps * steps_scale)))
    torch.set_num_threads(1)
    seed_everything(seed)
    cpu, wall = time.process_time(), time.perf_counter()
    if library == "sb3":
        result = _train_sb3(name, task, budget, seed, eval_episodes)
    else:
        result = _TRAIN[name](task, budget, seed, eval_episodes)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    curve = [
        (s, float(r)) for s, (_, r) in zip(result.eval_steps, result.eval_returns) if s <= budget
    ]
    reached = next((s for s, r in curve if r >= task.threshold), None)
    return {
        "task": name,
        "library": library,
        "seed": seed,
        "budget": budget,
        "steps_taken": result.steps,
        "eval_steps": [s for s, _ in curve],
        "eval_returns": [r for _, r in curve],
        "steps_to_threshold": reached,
        "final_return": curve[-1][1] if curve else None,
        "final_eval": getattr(result, "final_eval", None),
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "final_episodes": final_episodes,
    }


def _run_job(job: tuple) -> Dict[str, Any]:
    return run_seed(*job)


# -- the table -------------------------------------------------------------------------
def _steps_text(value: Optional[float]) -> str:
    return "-" if value is None or math.isinf(value) else f"{value:,.0f}"


def summarize(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per task: medians over its seeds, the comparison figures, CPU seconds (summed over seeds)."""
    rows = []
    for name in TASKS:
        mine = sorted((r for r in runs if r["task"] == name), key=lambda r: r["seed"])
        if not mine:
            continue
        task = TASKS[name]
        steps = [
            math.inf if r["steps_to_threshold"] is None else float(r["steps_to_threshold"])
            for r in mine
        ]
        finals = [r["final_return"] for r in mine if r["final_return"] is not None]
        evals = [r["final_eval"] for r in mine if r.get("final_eval") is not None]
        final_episodes = mine[0].get("final_episodes", 0)
        median_steps = statistics.median(steps)
        rows.append(
            {
                "task": name,
                "env": task.env_id,
                "seeds": len(mine),
                "budget": mine[0]["budget"],
                "threshold": task.threshold,
                "median_steps": None if math.isinf(median_steps) else median_steps,
                "steps": [None if math.isinf(s) else s for s in steps],
                "target": task.target,
                "meets_target": not math.isinf(median_steps) and median_steps <= task.target,
                "final_median": statistics.median(finals) if finals else None,
                "final_eval_median": statistics.median(evals) if evals else None,
                "final_episodes": final_episodes,
                "zoo_final": task.zoo_final,
                "sb3_steps": task.sb3_steps,
                "cpu_seconds": sum(r["cpu_seconds"] for r in mine),
            }
        )
    return rows


def print_table(rows: List[Dict[str, Any]]) -> None:
    header = [
        "task",
        "env",
        "seeds",
        "budget",
        "median steps to thr (per seed)",
        "target",
        "final (median)",
        "zoo final",
        "SB3 steps",
        "CPU s (per seed)",
    ]
    table = [header]
    for row in rows:
        per_seed = ", ".join(_steps_text(s) for s in row["steps"])
        verdict = "ok" if row["meets_target"] else "MISSED"
        final = "-" if row["final_median"] is None else f"{row['final_median']:.1f}"
        if row["final_eval_median"] is not None:
            final += f" ({row['final_episodes']} episodes: {row['final_eval_median']:.1f})"
        table.append(
            [
                row["task"],
                f"{row['env']} ({row['threshold']:g})",
                str(row["seeds"]),
                f"{row['budget']:,}",
                f"{_steps_text(row['median_steps'])} ({per_seed})",
                f"<= {row['target']:,} {verdict}",
                final,
                row["zoo_final"],
                row["sb3_steps"],
                f"{row['cpu_seconds']:.0f} ({row['cpu_seconds'] / row['seeds']:.0f})",
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for i, line in enumerate(table):
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip(), flush=True
        )
        if i == 0:
            print("  ".join("-" * width for width in widths), flush=True)


def run(
    tasks: Sequence[str],
    seeds: int,
    workers: Optional[int],
    steps_scale: float = 1.0,
    eval_episodes: int = 5,
    json_path: Optional[str] = None,
    library: str = "machin",
    eval_starts: str = "same",
    final_episodes: int = 0,
    dqn_mode: str = "fixed_target",
) -> List[Dict[str, Any]]:
    """Run every (task, seed), ``workers`` at a time; print one line per run and the table."""
    jobs = [
        (name, seed, steps_scale, eval_episodes, library, eval_starts, final_episodes, dqn_mode)
        for name in tasks
        for seed in range(seeds)
    ]
    # the longest runs first, so that the last worker to finish does not start late
    jobs.sort(key=lambda job: {"sac": 0, "td3": 1, "dqn": 2, "ppo": 3}[job[0]])
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    print(
        f"{library}: {len(jobs)} runs ({', '.join(tasks)} x {seeds} seeds), {workers} worker process(es), "
        f"one torch thread each, budgets x{steps_scale:g}, evaluation starts: {eval_starts}"
        + (f", DQN mode {dqn_mode}" if "dqn" in tasks and library == "machin" else ""),
        flush=True,
    )
    started, runs = time.perf_counter(), []

    def report(result: Dict[str, Any]) -> None:
        runs.append(result)
        final = "-" if result["final_return"] is None else f"{result['final_return']:.1f}"
        print(
            f"  {result['task']} seed {result['seed']}: steps to threshold "
            f"{_steps_text(result['steps_to_threshold'])}, final {final}, "
            f"{result['cpu_seconds']:.0f} CPU s, {result['wall_seconds']:.0f} s",
            flush=True,
        )

    if workers == 1:
        for job in jobs:
            report(_run_job(job))
    else:
        with multiprocessing.get_context("spawn").Pool(workers, maxtasksperchild=1) as pool:
            for result in pool.imap_unordered(_run_job, jobs):
                report(result)
    rows = summarize(runs)
    print_table(rows)
    print(
        f"total wall time {time.perf_counter() - started:.0f} s; 'final' is the greedy return at the budget; "
        f"steps '-': threshold not reached",
        flush=True,
    )
    if json_path:
        with open(json_path, "w") as handle:
            json.dump({"rows": rows, "runs": runs}, handle, indent=1)
        print(f"wrote {json_path}", flush=True)
    return rows


def main(argv: Optional[List[str]] = None) -> Optional[List[Dict[str, Any]]]:
    """Run the benchmark, but only when asked for by name (``python -m benchmarks sample_efficiency``)."""
    if argv is None:
        if "sample_efficiency" not in sys.argv[1:]:
            print(SKIP_MESSAGE, flush=True)
            return None
        argv = []
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sample_efficiency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. n-1 per task (default 3)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="parallel processes (default: the number of cores); 1 runs in this process",
    )
    parser.add_argument(
        "--steps-scale",
        type=float,
        default=1.0,
        help="multiply the zoo's step budgets, e.g. 0.05 for a smoke test",
    )
    parser.add_argument(
        "--eval-episodes", type=int, default=5, help="greedy episodes per evaluation (default 5)"
    )
    parser.add_argument(
        "--json", default=None, help="also write the rows and every run's evaluations here"
    )
    parser.add_argument(
        "--library",
        choices=["machin", "sb3"],
        default="machin",
        help="train with machin (default) or with Stable-Baselines3 "
        "(which must be importable) under the same settings and evaluations",
    )
    parser.add_argument(
        "--eval-starts",
        choices=["same", "fresh"],
        default="same",
        help="reset the evaluation episodes with the same seeds every time (default, the "
        "trainer's seeding) or with new seeds at every evaluation",
    )
    parser.add_argument(
        "--final-episodes",
        type=int,
        default=0,
        help="after training, evaluate the greedy policy on this many more episodes and report "
        "their mean next to the last evaluation (default 0: none)",
    )
    parser.add_argument(
        "--dqn-mode",
        choices=["fixed_target", "double"],
        default="fixed_target",
        help="machin DQN's target rule: SB3's max over the target network (default) or machin's "
        "default double DQN",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or (args.workers is not None and args.workers < 1) or args.steps_scale <= 0:
        parser.error("--seeds and --workers must be positive, --steps-scale greater than 0")
    if args.final_episodes < 0:
        parser.error("--final-episodes must be 0 or more")
    return run(
        args.tasks,
        args.seeds,
        args.workers,
        args.steps_scale,
        args.eval_episodes,
        args.json,
        args.library,
        args.eval_starts,
        args.final_episodes,
        args.dqn_mode,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
