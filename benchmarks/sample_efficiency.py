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

    python -m benchmarks sample_efficiency              # issue #25's four tasks, 3 seeds
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

Issue #45 adds three algorithms that sb3-contrib also has, run the same way and compared
with it side by side (``--library both`` runs each seed in machin, then in
Stable-Baselines3 / sb3-contrib, and ends with the comparison table)::

    python -m benchmarks.sample_efficiency --tasks qrdqn tqc crossq --seeds 5 --library both \
        --workers 1 --stop-at-threshold --json runs.json

QR-DQN, CartPole-v1 (the zoo's qrdqn.yml): DQN's settings above, 10 quantiles per action
    (the network returns ``quantiles[B, 2, 10]``), the quantile Huber loss (kappa 1), no
    gradient clipping (the zoo sets no ``max_grad_norm``, sb3-contrib's default is
    none), target ``max_a`` of the target network's mean (``mode="fixed_target"``),
    copied after every burst of 128 updates as for DQN.
TQC, Pendulum-v1 (the zoo's tqc.yml has only a Pendulum-v0 entry, used here without its
    gSDE exploration, which machin does not have; both sides explore with the plain
    squashed Gaussian): 20k steps, Adam lr 1e-3 (actor, critics, temperature), MLP 64-64
    ReLU for the actor and each critic, train_freq 64 with 64 updates, and sb3-contrib's
    defaults: 2 critics of 25 quantiles, the 2 highest per critic dropped from the pooled
    target, batch 256, buffer 1e6, learning_starts 100, gamma 0.99, tau 0.005, entropy
    "auto" (initial alpha 1, target entropy -1).
CrossQ, Pendulum-v1 (the zoo's crossq.yml): 20k steps, policy_delay 2, MLP 256-256 for
    the actor and each of the 2 critics, and sb3-contrib's defaults: Adam lr 1e-3 with
    betas (0.5, 0.999) (in machin also for the temperature, which sb3-contrib steps with
    the default betas), batch 256, buffer 1e6, learning_starts 100, one update per step,
    entropy "auto". The networks normalise as sb3-contrib's: a normalisation layer before
    every linear layer of a critic (and one after the actor's last hidden layer), momentum
    0.01, eps 1e-3. sb3-contrib's ``BatchRenorm1d`` behaves as batch normalisation for its
    first 100k steps (its warm-up), longer than these runs, so the machin networks use
    ``nn.BatchNorm1d`` (which normalises with the biased batch variance, ``BatchRenorm1d``
    with the unbiased one: a factor 511/512 on a batch of 512).

``--stop-at-threshold`` ends a run at its first evaluation that reaches the threshold (its
steps to threshold are then known; its final return is that evaluation). Every run also
reports the CPU time of its evaluations apart, and the table shows the *training* CPU per
environment step: (process CPU time - evaluation CPU time) / steps taken, which leaves out
the greedy episodes (on CartPole, a good policy's 5 evaluation episodes are 2,500 steps
per 1000 training steps).

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
from machin.frame.algorithms import DQN, PPO, QRDQN, SAC, TD3, TQC, CrossQ
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
# ``--stop-at-threshold``: the return that ends a run at the evaluation reaching it (None: never).
_STOP_AT: Optional[float] = None
SKIP_MESSAGE = "sample_efficiency: skipped (run by name: python -m benchmarks sample_efficiency)"


@dataclass(frozen=True)
class Task:
    """What one task trains and what its results are compared with."""

    env_id: str
    steps: int  # the zoo's n_timesteps
    threshold: float  # greedy return counted as "reached"
    target: Optional[int]  # issue #25: median steps to the threshold at most this (None: none set)
    zoo_final: str  # the zoo's published final return
    sb3_steps: str  # steps to the threshold measured for Stable-Baselines3 (issue #25)


TASKS: Dict[str, Task] = {
    "dqn": Task("CartPole-v1", 50_000, 475.0, 16_000, "500 @50k", "15,000"),
    "ppo": Task("CartPole-v1", 100_000, 475.0, 22_000, "500 @100k", "22,000"),
    "sac": Task("Pendulum-v1", 20_000, -200.0, 3_000, "~-150 @20k", "= machin"),
    "td3": Task("Pendulum-v1", 20_000, -200.0, 14_000, "~-150 @20k", "= machin"),
    # issue #45: compared with sb3-contrib (--library both), no target of their own
    "qrdqn": Task("CartPole-v1", 50_000, 475.0, None, "-", "--library sb3"),
    "tqc": Task("Pendulum-v1", 20_000, -200.0, None, "-", "--library sb3"),
    "crossq": Task("Pendulum-v1", 20_000, -200.0, None, "-", "--library sb3"),
}
# the tasks run when none are named: issue #25's
DEFAULT_TASKS = ("dqn", "ppo", "sac", "td3")
# the order in which run() starts the tasks: the longest runs first
_DURATION_ORDER = ("sac", "crossq", "td3", "tqc", "dqn", "qrdqn", "ppo")


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


class QuantileNet(nn.Module):
    """sb3-contrib's QR-DQN network: MLP 256-256 ReLU to ``quantiles`` values per action, ``[B, A, N]``."""

    def __init__(self, obs_dim: int, actions: int, quantiles: int):
        super().__init__()
        self.shape = (actions, quantiles)
        self.net = _mlp([obs_dim, 256, 256, actions * quantiles], nn.ReLU)

    def forward(self, state):
        return self.net(state).view(-1, *self.shape)


def _normalised_mlp(sizes: Sequence[int]) -> nn.Sequential:
    """sb3-contrib's CrossQ layers: a normalisation before every linear layer, ReLU between them."""
    layers: List[nn.Module] = []
    for i, (inp, out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [nn.BatchNorm1d(inp, eps=1e-3, momentum=0.01), nn.Linear(inp, out)]
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class SquashedGaussianActor(nn.Module):
    """SB3's SAC actor: MLP ReLU (256-256 by default), mean and clamped log-std, tanh-squashed sample.

    ``normalised=True``: sb3-contrib's CrossQ actor, a normalisation layer before each
    linear layer of the body and after its last hidden layer.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        normalised: bool = False,
    ):
        super().__init__()
        if normalised:
            self.body = _normalised_mlp([obs_dim, *hidden])
            self.body.append(nn.ReLU())
            self.body.append(nn.BatchNorm1d(hidden[-1], eps=1e-3, momentum=0.01))
        else:
            self.body = _mlp([obs_dim, *hidden], nn.ReLU)
            self.body.append(nn.ReLU())
        self.mu = nn.Linear(hidden[-1], action_dim)
        self.log_std = nn.Linear(hidden[-1], action_dim)

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
    """``Q(s, a)``: MLP ReLU on ``[s, a]`` to ``outputs`` values (TQC's quantiles; sb3-contrib's
    CrossQ critic with ``normalised=True``)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int],
        outputs: int = 1,
        normalised: bool = False,
    ):
        super().__init__()
        sizes = [obs_dim + action_dim, *hidden, outputs]
        self.net = _normalised_mlp(sizes) if normalised else _mlp(sizes, nn.ReLU)

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


class BenchTQC(_ActGreedy, TQC):
    pass


class BenchCrossQ(_ActGreedy, CrossQ):
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
    """The trainer, its evaluation episodes reset with :func:`_eval_seed`, the CPU time of its
    evaluations summed in ``eval_cpu``; it halts at an evaluation reaching ``_STOP_AT``."""

    evaluations = 0
    final = False
    eval_cpu = 0.0

    def evaluate(self, episodes: Optional[int] = None) -> float:
        self.evaluations += 1
        started = time.process_time()
        mean = super().evaluate(episodes)
        self.eval_cpu += time.process_time() - started
        if _STOP_AT is not None and not self.final and mean >= _STOP_AT:
            self.halt()
        return mean

    def evaluation_seed(self, index: int) -> Optional[int]:
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
        result.eval_cpu = self.eval_cpu
        return result


def _zoo_q_options() -> Dict[str, Any]:
    """The options DQN and QR-DQN share (rl-zoo's CartPole settings; a fresh epsilon schedule)."""
    return dict(
        update_rate=None,
        update_steps=128,
        learning_rate=2.3e-3,
        batch_size=64,
        replay_size=100_000,
        discount=0.99,
        epsilon=LinearSchedule(1.0, 0.04, 0.16),
    )


def _q_learning_trainer(framework: Any, task: Task, seed: int, eval_episodes: int) -> _Trainer:
    """The trainer of the DQN-like tasks (rl-zoo's CartPole settings): 1000 random steps, then
    128 updates every 256 steps."""
    return _Trainer(
        framework,
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


def _train_dqn(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    dqn = DQN(
        QNet(4, 2),
        QNet(4, 2),
        torch.optim.Adam,
        nn.SmoothL1Loss(),
        mode=_DQN_MODE,
        gradient_max=10.0,
        **_zoo_q_options(),
    )
    return _q_learning_trainer(dqn, task, seed, eval_episodes).train(steps)


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
    return _soft_actor_critic_trainer(sac, task, seed, eval_episodes, train_freq=1).train(steps)


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


def _train_qrdqn(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    qrdqn = QRDQN(
        QuantileNet(4, 2, 10),
        QuantileNet(4, 2, 10),
        torch.optim.Adam,
        mode="fixed_target",
        kappa=1.0,
        **_zoo_q_options(),
    )
    return _q_learning_trainer(qrdqn, task, seed, eval_episodes).train(steps)


def _soft_actor_critic_trainer(
    framework: Any, task: Task, seed: int, eval_episodes: int, train_freq: int
) -> _Trainer:
    """The trainer of the SAC-like tasks: actions in [-1, 1], 100 random steps, ``train_freq``
    steps between bursts of as many updates."""
    return _Trainer(
        framework,
        _make(task.env_id),
        eval_env=_make(task.env_id),
        act_method="act",
        eval_act_method="act_greedy",
        action_to_env=_unscaler(task.env_id),
        train_freq=train_freq,
        gradient_steps=train_freq,
        warmup_steps=100,
        random_steps=100,
        random_action=_uniform_unit_action,
        eval_every_steps=EVAL_EVERY,
        eval_episodes=eval_episodes,
        seed=seed,
        progress=False,
    )


def _train_tqc(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    hidden = (64, 64)
    tqc = BenchTQC(
        SquashedGaussianActor(3, 1, hidden),
        [QCritic(3, 1, hidden, outputs=25) for _ in range(2)],
        [QCritic(3, 1, hidden, outputs=25) for _ in range(2)],
        torch.optim.Adam,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        alpha_learning_rate=1e-3,
        batch_size=256,
        replay_size=1_000_000,
        discount=0.99,
        update_rate=0.005,
        initial_entropy_alpha=1.0,
        target_entropy=-1.0,
        top_quantiles_to_drop_per_net=2,
        kappa=1.0,
    )
    return _soft_actor_critic_trainer(tqc, task, seed, eval_episodes, train_freq=64).train(steps)


def _train_crossq(task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    hidden = (256, 256)
    # evaluation mode (running statistics) for acting until the first update, as SB3 acts:
    # CrossQ switches the modes only inside update(), and one state is no batch to normalise
    actor = SquashedGaussianActor(3, 1, hidden, normalised=True).eval()
    crossq = BenchCrossQ(
        actor,
        [QCritic(3, 1, hidden, normalised=True) for _ in range(2)],
        functools.partial(torch.optim.Adam, betas=(0.5, 0.999)),
        nn.MSELoss(),
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        alpha_learning_rate=1e-3,
        batch_size=256,
        replay_size=1_000_000,
        discount=0.99,
        initial_entropy_alpha=1.0,
        target_entropy=-1.0,
        policy_update_delay=2,
    )
    return _soft_actor_critic_trainer(crossq, task, seed, eval_episodes, train_freq=1).train(steps)


_TRAIN = {
    "dqn": _train_dqn,
    "ppo": _train_ppo,
    "sac": _train_sac,
    "td3": _train_td3,
    "qrdqn": _train_qrdqn,
    "tqc": _train_tqc,
    "crossq": _train_crossq,
}


# -- the same runs with Stable-Baselines3 (``--library sb3``) ----------------------------
def _sb3_classic(name: str, task: Task, seed: int) -> Any:
    """The Stable-Baselines3 model of task ``name`` (dqn, ppo, sac, td3) with the zoo's settings."""
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3 import TD3 as SB3TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    if name == "dqn":
        return SB3DQN(
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
    if name == "ppo":
        return SB3PPO(
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
    if name == "sac":  # the zoo sets only the learning rate; the rest are SB3's defaults
        return SB3SAC("MlpPolicy", task.env_id, learning_rate=1e-3, seed=seed, device="cpu")
    return SB3TD3(
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


def _sb3_contrib(name: str, task: Task, seed: int) -> Any:
    """The sb3-contrib model of task ``name`` (qrdqn, tqc, crossq) with the zoo's settings."""
    from sb3_contrib import QRDQN as SB3QRDQN
    from sb3_contrib import TQC as SB3TQC
    from sb3_contrib import CrossQ as SB3CrossQ

    if name == "qrdqn":
        return SB3QRDQN(
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
            policy_kwargs={"net_arch": [256, 256], "n_quantiles": 10},
            seed=seed,
            device="cpu",
        )
    if name == "tqc":  # the zoo's Pendulum-v0 entry without gSDE; the rest are the defaults
        return SB3TQC(
            "MlpPolicy",
            task.env_id,
            learning_rate=1e-3,
            train_freq=64,
            gradient_steps=64,
            policy_kwargs={"net_arch": [64, 64]},
            seed=seed,
            device="cpu",
        )
    return SB3CrossQ(
        "MlpPolicy",
        task.env_id,
        policy_delay=2,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
    )


def _import_sb3(name: str) -> None:
    """Import the package that task ``name`` needs in SB3 (so that no run's CPU time counts the
    import); a clear exit where it is missing."""
    package = "sb3-contrib" if name in ("qrdqn", "tqc", "crossq") else "stable-baselines3"
    try:
        if package == "sb3-contrib":
            import sb3_contrib  # noqa: F401
        else:
            import stable_baselines3  # noqa: F401
    except ImportError as error:
        raise SystemExit(
            f"--library sb3 with task {name!r} needs {package} importable "
            f"(pip install {package}; it is not a dependency of machin): {error}"
        ) from error


def _sb3_model(name: str, task: Task, seed: int) -> Any:
    """Task ``name``'s model in Stable-Baselines3 or sb3-contrib."""
    if name in ("qrdqn", "tqc", "crossq"):
        return _sb3_contrib(name, task, seed)
    return _sb3_classic(name, task, seed)


def _sb3_greedy_return(model: Any, env: gym.Env, seed: int, discrete: bool) -> float:
    """Return of one greedy (``deterministic=True``) episode of ``model`` on ``env`` reset with ``seed``."""
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(int(action) if discrete else action)
        total, done = total + float(reward), terminated or truncated
    return total


def _sb3_evaluator(model: Any, env_id: str, seed: int, eval_episodes: int) -> Any:
    """The callback that evaluates ``model`` as the trainer does; its ``curve`` collects the results."""
    from stable_baselines3.common.callbacks import BaseCallback

    discrete = isinstance(model.action_space, gym.spaces.Discrete)
    curve = types.SimpleNamespace(eval_steps=[], eval_returns=[], steps=0, evaluations=0)
    curve.eval_cpu, curve.env, curve.discrete = 0.0, gym.make(env_id), discrete

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            now = self.model.num_timesteps
            if now // EVAL_EVERY <= (now - self.training_env.num_envs) // EVAL_EVERY:
                return True
            started = time.process_time()
            curve.evaluations += 1
            mean = statistics.mean(
                _sb3_greedy_return(
                    self.model, curve.env, _eval_seed(seed, curve.evaluations, j), discrete
                )
                for j in range(eval_episodes)
            )
            curve.eval_steps.append(now // EVAL_EVERY * EVAL_EVERY)
            curve.eval_returns.append((None, mean))  # as the trainer: (episode, mean)
            curve.eval_cpu += time.process_time() - started
            return _STOP_AT is None or mean < _STOP_AT

    callback = Evaluate()
    callback.curve = curve
    return callback


def _train_sb3(name: str, task: Task, steps: int, seed: int, eval_episodes: int) -> Any:
    """Train ``name`` with Stable-Baselines3 (sb3-contrib for QR-DQN, TQC and CrossQ) and the
    zoo's settings, evaluated like the machin runs.

    Evaluations: ``eval_episodes`` greedy (``deterministic=True``) episodes every ``EVAL_EVERY`` steps,
    reset with the seeds the trainer uses (``seed + 10**6 + j``).
    """
    model = _sb3_model(name, task, seed)
    callback = _sb3_evaluator(model, task.env_id, seed, eval_episodes)
    curve = callback.curve
    model.learn(steps, callback=callback)
    curve.steps = model.num_timesteps
    curve.final_eval = None
    if _FINAL_EPISODES:
        started = time.process_time()
        curve.final_eval = statistics.mean(
            _sb3_greedy_return(model, curve.env, seed + 2 * 10**6 + j, curve.discrete)
            for j in range(_FINAL_EPISODES)
        )
        curve.eval_cpu += time.process_time() - started
    curve.env.close()
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
    stop_at_threshold: bool = False,
) -> Dict[str, Any]:
    """Train task ``name`` with seed ``seed``; return its evaluations and summary (a JSON-able dict).

    ``library="sb3"`` trains it with Stable-Baselines3 (sb3-contrib for QR-DQN, TQC and
    CrossQ) instead. ``eval_starts="fresh"`` resets every evaluation's episodes with seeds of
    its own (see ``_FRESH_STARTS``); ``final_episodes`` adds a final evaluation of that many
    episodes (``final_eval``, see ``_FINAL_EPISODES``); ``dqn_mode`` is the machin DQN's
    ``mode`` (see ``_DQN_MODE``); ``stop_at_threshold`` ends the run at the first evaluation
    that reaches the task's threshold.

    Keys: ``task``, ``library``, ``seed``, ``budget``, ``steps_taken``, ``eval_steps``, ``eval_returns``,
    ``steps_to_threshold`` (``None``: never reached), ``final_return`` (the last evaluation at
    or before the budget; ``None`` when there was none), ``cpu_seconds`` (the process's CPU
    time), ``eval_cpu_seconds`` (the part spent in evaluations), ``train_cpu_ms_per_step``
    (the rest per training step taken), ``wall_seconds`` and ``stopped_at_threshold``.

    Raises:
        ValueError: When ``name`` or ``library`` is not known.
    """
    global _FRESH_STARTS, _FINAL_EPISODES, _DQN_MODE, _STOP_AT
    if name not in TASKS:
        raise ValueError(f"name must be one of {sorted(TASKS)}, got {name!r}")
    if library not in ("machin", "sb3"):
        raise ValueError(f"library must be 'machin' or 'sb3', got {library!r}")
    task = TASKS[name]
    _FRESH_STARTS, _FINAL_EPISODES, _DQN_MODE = eval_starts == "fresh", final_episodes, dqn_mode
    _STOP_AT = task.threshold if stop_at_threshold else None
    budget = max(1, int(round(task.steps * steps_scale)))
    if library == "sb3":
        _import_sb3(name)
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
        "eval_cpu_seconds": result.eval_cpu,
        "train_cpu_ms_per_step": 1000 * (cpu - result.eval_cpu) / max(1, result.steps),
        "wall_seconds": wall,
        "final_episodes": final_episodes,
        "stopped_at_threshold": stop_at_threshold,
    }


def _run_job(job: tuple) -> Dict[str, Any]:
    return run_seed(*job)


# -- the table -------------------------------------------------------------------------
def _steps_text(value: Optional[float]) -> str:
    return "-" if value is None or math.isinf(value) else f"{value:,.0f}"


def _summary_row(name: str, mine: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The row of task ``name`` from its runs ``mine`` (one library, sorted by seed)."""
    task = TASKS[name]
    steps = [
        math.inf if r["steps_to_threshold"] is None else float(r["steps_to_threshold"])
        for r in mine
    ]
    finals = [r["final_return"] for r in mine if r["final_return"] is not None]
    evals = [r["final_eval"] for r in mine if r.get("final_eval") is not None]
    per_step = [r["train_cpu_ms_per_step"] for r in mine if "train_cpu_ms_per_step" in r]
    median_steps = statistics.median(steps)
    reached = not math.isinf(median_steps)
    return {
        "task": name,
        "library": mine[0].get("library", "machin"),
        "env": task.env_id,
        "seeds": len(mine),
        "budget": mine[0]["budget"],
        "threshold": task.threshold,
        "median_steps": median_steps if reached else None,
        "steps": [None if math.isinf(s) else s for s in steps],
        "target": task.target,
        "meets_target": None if task.target is None else reached and median_steps <= task.target,
        "final_median": statistics.median(finals) if finals else None,
        "final_eval_median": statistics.median(evals) if evals else None,
        "final_episodes": mine[0].get("final_episodes", 0),
        "zoo_final": task.zoo_final,
        "sb3_steps": task.sb3_steps,
        "cpu_seconds": sum(r["cpu_seconds"] for r in mine),
        "train_cpu_ms_per_step": statistics.median(per_step) if per_step else None,
        "stopped_at_threshold": any(r.get("stopped_at_threshold") for r in mine),
    }


def summarize(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per task and library: medians over its seeds, the comparison figures, CPU
    seconds (summed over seeds) and the median training CPU per step."""
    rows = []
    for name in TASKS:
        for library in ("machin", "sb3"):
            mine = sorted(
                (r for r in runs if r["task"] == name and r.get("library", "machin") == library),
                key=lambda r: r["seed"],
            )
            if mine:
                rows.append(_summary_row(name, mine))
    return rows


def _target_text(row: Dict[str, Any]) -> str:
    if row["target"] is None:
        return "-"
    return f"<= {row['target']:,} {'ok' if row['meets_target'] else 'MISSED'}"


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
        "train CPU ms/step",
    ]
    table = [header]
    for row in rows:
        per_seed = ", ".join(_steps_text(s) for s in row["steps"])
        final = "-" if row["final_median"] is None else f"{row['final_median']:.1f}"
        if row["final_eval_median"] is not None:
            final += f" ({row['final_episodes']} episodes: {row['final_eval_median']:.1f})"
        if row["stopped_at_threshold"]:
            final += " (stopped at thr)"
        per_step = row.get("train_cpu_ms_per_step")
        table.append(
            [
                row["task"] + ("" if row.get("library", "machin") == "machin" else " (SB3)"),
                f"{row['env']} ({row['threshold']:g})",
                str(row["seeds"]),
                f"{row['budget']:,}",
                f"{_steps_text(row['median_steps'])} ({per_seed})",
                _target_text(row),
                final,
                row["zoo_final"],
                row["sb3_steps"],
                f"{row['cpu_seconds']:.0f} ({row['cpu_seconds'] / row['seeds']:.0f})",
                "-" if per_step is None else f"{per_step:.2f}",
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for i, line in enumerate(table):
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip(), flush=True
        )
        if i == 0:
            print("  ".join("-" * width for width in widths), flush=True)


def _ratio(mine: Optional[float], theirs: Optional[float]) -> Optional[float]:
    return None if mine is None or theirs is None or theirs == 0 else mine / theirs


def comparison(rows: List[Dict[str, Any]]) -> List[str]:
    """Markdown lines comparing machin with Stable-Baselines3 / sb3-contrib, task by task (tasks
    run in both): median steps to the threshold, the median training CPU per step, their
    ratios, and issue #45's target (machin within 1.1x of the steps, at most 1.0x the CPU per step).
    """
    lines = [
        "| task | seeds | machin median steps (per seed) | SB3 median steps (per seed) | steps ratio "
        "| machin train CPU ms/step | SB3 train CPU ms/step | CPU ratio | target met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    by_key = {(row["task"], row.get("library", "machin")): row for row in rows}
    for name in TASKS:
        mine, theirs = by_key.get((name, "machin")), by_key.get((name, "sb3"))
        if mine is None or theirs is None:
            continue
        steps = _ratio(mine["median_steps"], theirs["median_steps"])
        cpu = _ratio(mine["train_cpu_ms_per_step"], theirs["train_cpu_ms_per_step"])
        if steps is None:  # a side that never reached the threshold in the median
            met = "yes" if mine["median_steps"] is not None else "no"
        else:
            met = "yes" if steps <= 1.1 else "no"
        met += ", " + ("yes" if cpu is not None and cpu <= 1.0 else "no")
        cells = [
            f"{name}, {mine['env']} ({mine['threshold']:g})",
            f"{mine['seeds']} / {theirs['seeds']}",
            *(
                f"{_steps_text(row['median_steps'])} ({', '.join(_steps_text(s) for s in row['steps'])})"
                for row in (mine, theirs)
            ),
            "-" if steps is None else f"{steps:.2f}",
            *(
                "-"
                if row["train_cpu_ms_per_step"] is None
                else f"{row['train_cpu_ms_per_step']:.2f}"
                for row in (mine, theirs)
            ),
            "-" if cpu is None else f"{cpu:.2f}",
            met,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines if len(lines) > 2 else []


def _jobs(tasks: Sequence[str], seeds: int, library: str, options: tuple) -> List[tuple]:
    """The ``run_seed`` argument tuples: per task and seed, machin's run before SB3's for ``"both"``;
    the longest tasks first, so that the last worker to finish does not start late."""
    libraries = ("machin", "sb3") if library == "both" else (library,)
    steps_scale, eval_episodes, eval_starts, final_episodes, dqn_mode, stop = options
    jobs = [
        (name, seed, steps_scale, eval_episodes, lib, eval_starts, final_episodes, dqn_mode, stop)
        for name in tasks
        for seed in range(seeds)
        for lib in libraries
    ]
    jobs.sort(key=lambda job: _DURATION_ORDER.index(job[0]))
    return jobs


def _report(result: Dict[str, Any]) -> None:
    """Print the line of one finished run."""
    final = "-" if result["final_return"] is None else f"{result['final_return']:.1f}"
    library = "" if result["library"] == "machin" else " (SB3)"
    print(
        f"  {result['task']}{library} seed {result['seed']}: steps to threshold "
        f"{_steps_text(result['steps_to_threshold'])}, final {final}, "
        f"{result['cpu_seconds']:.0f} CPU s ({result['eval_cpu_seconds']:.0f} evaluating, "
        f"{result['train_cpu_ms_per_step']:.2f} ms per training step), "
        f"{result['wall_seconds']:.0f} s",
        flush=True,
    )


def _write_json(path: Optional[str], runs: List[Dict[str, Any]]) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump({"rows": summarize(runs), "runs": runs}, handle, indent=1)


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
    stop_at_threshold: bool = False,
) -> List[Dict[str, Any]]:
    """Run every (task, seed) (in both libraries for ``library="both"``), ``workers`` at a time;
    print one line per run, the table and, with both libraries, the comparison. ``json_path``
    is rewritten after every run, so an interrupted benchmark keeps the runs it finished."""
    options = (steps_scale, eval_episodes, eval_starts, final_episodes, dqn_mode, stop_at_threshold)
    jobs = _jobs(tasks, seeds, library, options)
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    print(
        f"{library}: {len(jobs)} runs ({', '.join(tasks)} x {seeds} seeds), {workers} worker process(es), "
        f"one torch thread each, budgets x{steps_scale:g}, evaluation starts: {eval_starts}"
        + (f", DQN mode {dqn_mode}" if "dqn" in tasks and library != "sb3" else "")
        + (", each run stops at its threshold" if stop_at_threshold else ""),
        flush=True,
    )
    started, runs = time.perf_counter(), []
    if workers == 1:
        results = map(_run_job, jobs)
    else:
        pool = multiprocessing.get_context("spawn").Pool(workers, maxtasksperchild=1)
        results = pool.imap_unordered(_run_job, jobs)
    try:
        for result in results:
            runs.append(result)
            _report(result)
            _write_json(json_path, runs)
    finally:
        if workers > 1:
            pool.terminate()
            pool.join()
    rows = summarize(runs)
    print_table(rows)
    for line in comparison(rows):
        print(line, flush=True)
    print(
        f"total wall time {time.perf_counter() - started:.0f} s; 'final' is the last greedy return at "
        f"or before the budget; steps '-': threshold not reached",
        flush=True,
    )
    if json_path:
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
    parser.add_argument(
        "--tasks",
        nargs="+",
        choices=list(TASKS),
        default=list(DEFAULT_TASKS),
        help=f"default: {' '.join(DEFAULT_TASKS)} (issue #25's)",
    )
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
        choices=["machin", "sb3", "both"],
        default="machin",
        help="train with machin (default), with Stable-Baselines3 (sb3-contrib for qrdqn, tqc "
        "and crossq; it must be importable) under the same settings and evaluations, or "
        "with both, each seed in machin and then in SB3, followed by the comparison table",
    )
    parser.add_argument(
        "--stop-at-threshold",
        action="store_true",
        help="end each run at its first evaluation that reaches the threshold",
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
        args.stop_at_threshold,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
