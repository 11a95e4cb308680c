"""CleanRL's algorithms for ``time_to_solve``, adapted from its published single-file scripts.

CleanRL is a set of scripts, not a library, and its newest release on PyPI, 1.2.0, requires
Python < 3.11 (pip falls back to 0.4.8 of 2021, built on ``gym``). The four scripts the harness
needs are therefore adapted here, from the files of the ``cleanrl-1.2.0`` wheel, over plain
torch and gymnasium (written anew, not copied):

* ``dqn``: ``cleanrl/dqn.py``. Epsilon-greedy with the script's ``linear_schedule`` over
  ``exploration_fraction`` of the run; MSE loss between ``Q(s, a)`` and ``r + gamma * (1 - d) *
  max_a' Q_target(s', a')``; plain Adam, no gradient clipping; the target network copied
  (``tau = 1``) every ``target_update_interval`` steps once ``learning_starts`` have passed.
* ``ppo``: ``cleanrl/ppo.py``. Actor and critic MLPs 64-64 tanh with the script's orthogonal
  ``layer_init``; Adam ``eps=1e-5``; GAE with a step that ended by time limit treated as an end
  (no bootstrap), as the script's ``done`` does; advantages normalised per minibatch; clipped
  surrogate; value loss ``0.5 * mean((V - R)^2)`` weighted by ``vf_coef``; gradient norm 0.5; the
  learning rate annealed as the script's ``anneal_lr`` when the task's rate is linear.
* ``sac``: ``cleanrl/sac_continuous_action.py``. Actions stored in the environment's scale; the
  actor's log-std squashed by tanh into [-5, 2]; twin critics with one optimiser; automatic
  entropy tuning from ``log_alpha = 0`` at the critics' rate, updated after the actor with a
  fresh sample; targets updated by ``tau`` after every update.
* ``td3``: ``cleanrl/td3_continuous_action.py``. Exploration noise ``N(0, scale * noise_std)``,
  target smoothing noise 0.2 clipped at 0.5 (both in the action's scale), the actor and the
  three target networks updated every second update.

What the adaptation changes, and only this: the task's settings replace the scripts' defaults
(network sizes from ``net_arch``, rates, buffer, batch, discount, ``tau``; ``clip_vloss`` off and
SAC's ``policy_frequency`` 1, as SB3's and the zoo's settings have them; the clip range follows a
linear schedule when the zoo's does); off-policy training runs bursts of ``gradient_steps``
updates every ``train_freq`` steps where the scripts do one update every ``train_frequency``
steps; the gymnasium API (``terminated`` is the stored end, an episode cut by the time limit
stores its true last observation, as 1.2.0's ``dqn.py`` does); and a numpy replay buffer
sampled uniformly with replacement stands for SB3's ``ReplayBuffer`` that the scripts import.
PPO's environments step as the old ``gym`` vector environment did: one that ends is reset at
once and its first observation is the next one.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Normal

from .time_to_solve import Evaluation, Task, _schedule_value

__all__ = ["RUNNERS", "SCRIPTS_VERSION", "ReplayBuffer", "linear_schedule"]

#: the CleanRL release whose scripts these adapters follow
SCRIPTS_VERSION = "1.2.0"


# -- shared pieces -------------------------------------------------------------------------------
class ReplayBuffer:
    """Transitions in preallocated arrays, sampled uniformly with replacement."""

    def __init__(
        self, size: int, obs_shape: Sequence[int], action_shape: Sequence[int], action_dtype: Any
    ) -> None:
        self.size, self.pos, self.full = size, 0, False
        self.obs = np.zeros((size, *obs_shape), np.float32)
        self.next_obs = np.zeros((size, *obs_shape), np.float32)
        self.actions = np.zeros((size, *action_shape), action_dtype)
        self.rewards = np.zeros(size, np.float32)
        self.dones = np.zeros(size, np.float32)

    def __len__(self) -> int:
        return self.size if self.full else self.pos

    def add(self, obs: Any, next_obs: Any, action: Any, reward: float, done: bool) -> None:
        """Store one transition, overwriting the oldest when full."""
        i = self.pos
        self.obs[i], self.next_obs[i], self.actions[i] = obs, next_obs, action
        self.rewards[i], self.dones[i] = reward, float(done)
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch_size: int) -> Tuple[torch.Tensor, ...]:
        """``(obs, actions, next_obs, rewards, dones)`` of ``batch_size`` random transitions."""
        index = np.random.randint(0, len(self), size=batch_size)
        arrays = (self.obs, self.actions, self.next_obs, self.rewards, self.dones)
        return tuple(torch.as_tensor(a[index]) for a in arrays)


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """The scripts' epsilon: linear from ``start`` to ``end`` over ``duration`` steps, then ``end``."""
    slope = (end - start) / duration
    return max(slope * t + start, end)


def _mlp(sizes: Sequence[int], activation: Callable[[], nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: List[nn.Module] = []
    for i, (inp, out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(inp, out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


def _soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.data.copy_(tau * s.data + (1.0 - tau) * t.data)


def _set_rate(optimizers: Sequence[torch.optim.Optimizer], rate: Any, left: float) -> None:
    """The task's learning rate at ``left`` of the run left (a linear rate decays to zero)."""
    value = _schedule_value(rate, left)
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = value


def _env(env_id: str, seed: int) -> Tuple[gym.Env, np.ndarray]:
    env = gym.make(env_id)
    env.action_space.seed(seed)
    return env, env.reset(seed=seed)[0]


def _tensor(obs: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(obs, dtype=torch.float32).view(1, -1)


def _step(env: gym.Env, obs: np.ndarray, action: Any, buffer: ReplayBuffer) -> np.ndarray:
    """One environment step stored in ``buffer``; the next observation (reset after an end)."""
    next_obs, reward, terminated, truncated, _ = env.step(action)
    buffer.add(obs, next_obs, action, float(reward), bool(terminated))
    return env.reset()[0] if terminated or truncated else next_obs


# -- DQN (cleanrl/dqn.py) ---------------------------------------------------------------------------
def dqn_update(
    q: nn.Module, target: nn.Module, optimizer: Any, batch: Tuple, gamma: float
) -> torch.Tensor:
    """One DQN step: MSE to ``r + gamma * (1 - d) * max Q_target(s')``; returns the loss."""
    obs, actions, next_obs, rewards, dones = batch
    with torch.no_grad():
        target_max = target(next_obs).max(dim=1).values
        td_target = rewards + gamma * target_max * (1.0 - dones)
    old_val = q(obs).gather(1, actions.long().view(-1, 1)).squeeze(1)
    loss = F.mse_loss(td_target, old_val)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def _dqn(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    s = task.settings
    env, obs = _env(task.env_id, seed)
    q = _mlp([env.observation_space.shape[0], *s["net_arch"], int(env.action_space.n)])
    target = copy.deepcopy(q)
    optimizer = torch.optim.Adam(q.parameters(), lr=_schedule_value(s["learning_rate"]))
    buffer = ReplayBuffer(s["buffer_size"], env.observation_space.shape, (), np.int64)
    draw = random.Random(seed)

    def greedy(o: np.ndarray) -> int:
        with torch.no_grad():
            return int(q(_tensor(o)).argmax(dim=1))

    duration = s["exploration_fraction"] * task.budget
    for step in range(1, task.budget + 1):
        eps = linear_schedule(1.0, s["exploration_final_eps"], duration, step - 1)
        action = env.action_space.sample() if draw.random() < eps else greedy(obs)
        obs = _step(env, obs, action, buffer)
        if step > s["learning_starts"]:
            if step % s["train_freq"] == 0:
                _set_rate([optimizer], s["learning_rate"], 1.0 - step / task.budget)
                for _ in range(s["gradient_steps"]):
                    dqn_update(q, target, optimizer, buffer.sample(s["batch_size"]), s["gamma"])
            if step % s["target_update_interval"] == 0:
                target.load_state_dict(q.state_dict())
        if evaluation.step(step, greedy):
            break
    env.close()


# -- PPO (cleanrl/ppo.py) ----------------------------------------------------------------------------
def _layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class PPOAgent(nn.Module):
    """The script's ``Agent``: separate actor and critic MLPs 64-64 tanh."""

    def __init__(self, obs_dim: int, actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            _layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            _layer_init(nn.Linear(64, 64)), nn.Tanh(),
            _layer_init(nn.Linear(64, 1), std=1.0),
        )  # fmt: skip
        self.actor = nn.Sequential(
            _layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            _layer_init(nn.Linear(64, 64)), nn.Tanh(),
            _layer_init(nn.Linear(64, actions), std=0.01),
        )  # fmt: skip

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: Any = None) -> Tuple[torch.Tensor, ...]:
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


@dataclass
class Rollout:
    """``n_steps x n_envs`` tensors of one rollout and what follows it."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    values: torch.Tensor
    next_obs: torch.Tensor
    next_done: torch.Tensor


def _step_all(
    envs: List[gym.Env], actions: np.ndarray
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step every environment; one that ends (terminated or truncated) is reset at once."""
    observations, rewards, dones = [], [], []
    for env, action in zip(envs, actions):
        obs, reward, terminated, truncated, _ = env.step(int(action))
        done = terminated or truncated
        observations.append(env.reset()[0] if done else obs)
        rewards.append(reward)
        dones.append(float(done))
    return np.stack(observations), np.asarray(rewards, np.float32), np.asarray(dones, np.float32)


def ppo_rollout(
    agent: PPOAgent,
    envs: List[gym.Env],
    next_obs: torch.Tensor,
    next_done: torch.Tensor,
    n_steps: int,
) -> Rollout:
    """``n_steps`` steps of every environment with the current policy."""
    n = len(envs)
    obs = torch.zeros((n_steps, n, next_obs.shape[1]))
    actions, logprobs, rewards, dones, values = (torch.zeros((n_steps, n)) for _ in range(5))
    for t in range(n_steps):
        obs[t], dones[t] = next_obs, next_done
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
        values[t], actions[t], logprobs[t] = value.flatten(), action, logprob
        stepped, reward, done = _step_all(envs, action.numpy())
        rewards[t] = torch.as_tensor(reward)
        next_obs = torch.as_tensor(stepped, dtype=torch.float32)
        next_done = torch.as_tensor(done)
    return Rollout(obs, actions, logprobs, rewards, dones, values, next_obs, next_done)


def ppo_advantages(
    agent: PPOAgent, r: Rollout, gamma: float, lam: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The script's GAE: ``(advantages, returns)``, bootstrapped from the value after the rollout."""
    with torch.no_grad():
        next_value = agent.get_value(r.next_obs).reshape(1, -1)
        advantages = torch.zeros_like(r.rewards)
        last = torch.zeros(r.rewards.shape[1])
        for t in reversed(range(r.rewards.shape[0])):
            if t == r.rewards.shape[0] - 1:
                nonterminal, next_values = 1.0 - r.next_done, next_value
            else:
                nonterminal, next_values = 1.0 - r.dones[t + 1], r.values[t + 1]
            delta = r.rewards[t] + gamma * next_values * nonterminal - r.values[t]
            advantages[t] = last = delta + gamma * lam * nonterminal * last
    return advantages, advantages + r.values


def ppo_optimise(
    agent: PPOAgent,
    optimizer: Any,
    r: Rollout,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    s: Dict[str, Any],
    clip: float,
) -> None:
    """``n_epochs`` shuffled passes in minibatches of ``batch_size`` (the script's update)."""
    b_obs = r.obs.reshape(-1, r.obs.shape[-1])
    b_logprobs, b_actions = r.logprobs.reshape(-1), r.actions.reshape(-1)
    b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
    indices = np.arange(b_obs.shape[0])
    for _ in range(s["n_epochs"]):
        np.random.shuffle(indices)
        for start in range(0, len(indices), s["batch_size"]):
            mb = indices[start : start + s["batch_size"]]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                b_obs[mb], b_actions.long()[mb]
            )
            ratio = (newlogprob - b_logprobs[mb]).exp()
            mb_adv = b_advantages[mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(
                -mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - clip, 1 + clip)
            ).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb]) ** 2).mean()
            loss = pg_loss - s["ent_coef"] * entropy.mean() + v_loss * 0.5
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()


def _ppo(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    s = task.settings
    envs = [gym.make(task.env_id) for _ in range(s["n_envs"])]
    first = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    next_obs = torch.as_tensor(np.stack(first), dtype=torch.float32)
    next_done = torch.zeros(len(envs))
    agent = PPOAgent(next_obs.shape[1], int(envs[0].action_space.n))
    optimizer = torch.optim.Adam(
        agent.parameters(), lr=_schedule_value(s["learning_rate"]), eps=1e-5
    )

    def greedy(o: np.ndarray) -> int:
        with torch.no_grad():
            return int(agent.actor(_tensor(o)).argmax(dim=1))

    rollout = s["n_steps"] * s["n_envs"]
    updates = math.ceil(task.budget / rollout)
    for update in range(1, updates + 1):
        left = 1.0 - (update - 1.0) / updates
        _set_rate([optimizer], s["learning_rate"], left)
        r = ppo_rollout(agent, envs, next_obs, next_done, s["n_steps"])
        next_obs, next_done = r.next_obs, r.next_done
        advantages, returns = ppo_advantages(agent, r, s["gamma"], s["gae_lambda"])
        ppo_optimise(
            agent, optimizer, r, advantages, returns, s, _schedule_value(s["clip_range"], left)
        )
        if evaluation.step(update * rollout, greedy):
            break
    for env in envs:
        env.close()


# -- SAC (cleanrl/sac_continuous_action.py) --------------------------------------------------------
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SoftQNetwork(nn.Module):
    """``Q(s, a)``: an MLP ReLU on ``[s, a]`` (actions in the environment's scale)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = _mlp([obs_dim + action_dim, *hidden, 1])

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, a], 1))


class _Scaled(nn.Module):
    """An actor whose actions in [-1, 1] are mapped to the action space's bounds."""

    def __init__(self, space: gym.spaces.Box) -> None:
        super().__init__()
        self.register_buffer(
            "action_scale", torch.as_tensor((space.high - space.low) / 2.0, dtype=torch.float32)
        )
        self.register_buffer(
            "action_bias", torch.as_tensor((space.high + space.low) / 2.0, dtype=torch.float32)
        )


class SACActor(_Scaled):
    """The script's SAC actor: mean and tanh-squashed log-std heads on an MLP ReLU."""

    def __init__(self, obs_dim: int, space: gym.spaces.Box, hidden: Sequence[int]) -> None:
        super().__init__(space)
        action_dim = int(np.prod(space.shape))
        self.body = nn.Sequential(_mlp([obs_dim, *hidden]), nn.ReLU())
        self.fc_mean = nn.Linear(hidden[-1], action_dim)
        self.fc_logstd = nn.Linear(hidden[-1], action_dim)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.body(x)
        log_std = torch.tanh(self.fc_logstd(x))
        return self.fc_mean(x), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)

    def get_action(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(sampled action, its log-probability, the mean's action)``, in the env's scale."""
        mean, log_std = self(x)
        normal = Normal(mean, log_std.exp())
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        log_prob = normal.log_prob(x_t) - torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        action = y_t * self.action_scale + self.action_bias
        return (
            action,
            log_prob.sum(1, keepdim=True),
            torch.tanh(mean) * self.action_scale + self.action_bias,
        )


@dataclass
class SACParts:
    """The networks, optimisers and entropy temperature of one SAC run."""

    actor: SACActor
    qf1: SoftQNetwork
    qf2: SoftQNetwork
    qf1_target: SoftQNetwork
    qf2_target: SoftQNetwork
    q_optimizer: torch.optim.Optimizer
    actor_optimizer: torch.optim.Optimizer
    log_alpha: torch.Tensor
    a_optimizer: torch.optim.Optimizer
    target_entropy: float
    alpha: float = 1.0


def sac_parts(obs_dim: int, space: gym.spaces.Box, hidden: Sequence[int], rate: float) -> SACParts:
    """The script's networks and optimisers: one Adam for both critics, one for the actor."""
    action_dim = int(np.prod(space.shape))
    actor = SACActor(obs_dim, space, hidden)
    qf1, qf2 = (SoftQNetwork(obs_dim, action_dim, hidden) for _ in range(2))
    log_alpha = torch.zeros(1, requires_grad=True)
    return SACParts(
        actor, qf1, qf2, copy.deepcopy(qf1), copy.deepcopy(qf2),
        torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=rate),
        torch.optim.Adam(actor.parameters(), lr=rate),
        log_alpha, torch.optim.Adam([log_alpha], lr=rate), -float(action_dim),
    )  # fmt: skip


def sac_update(p: SACParts, batch: Tuple, gamma: float, tau: float) -> None:
    """One SAC step of the script: both critics, the actor, the temperature, the targets."""
    obs, actions, next_obs, rewards, dones = batch
    with torch.no_grad():
        next_actions, next_log_pi, _ = p.actor.get_action(next_obs)
        min_next = torch.min(
            p.qf1_target(next_obs, next_actions), p.qf2_target(next_obs, next_actions)
        )
        next_q = rewards + (1 - dones) * gamma * (min_next - p.alpha * next_log_pi).view(-1)
    qf_loss = F.mse_loss(p.qf1(obs, actions).view(-1), next_q) + F.mse_loss(
        p.qf2(obs, actions).view(-1), next_q
    )
    p.q_optimizer.zero_grad()
    qf_loss.backward()
    p.q_optimizer.step()
    pi, log_pi, _ = p.actor.get_action(obs)
    min_q_pi = torch.min(p.qf1(obs, pi), p.qf2(obs, pi)).view(-1)
    actor_loss = (p.alpha * log_pi.view(-1) - min_q_pi).mean()
    p.actor_optimizer.zero_grad()
    actor_loss.backward()
    p.actor_optimizer.step()
    with torch.no_grad():
        _, log_pi, _ = p.actor.get_action(obs)
    alpha_loss = (-p.log_alpha * (log_pi + p.target_entropy)).mean()
    p.a_optimizer.zero_grad()
    alpha_loss.backward()
    p.a_optimizer.step()
    p.alpha = p.log_alpha.exp().item()
    _soft_update(p.qf1_target, p.qf1, tau)
    _soft_update(p.qf2_target, p.qf2, tau)


def _sac(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    s = task.settings
    env, obs = _env(task.env_id, seed)
    space = env.action_space
    p = sac_parts(
        env.observation_space.shape[0], space, s["net_arch"], _schedule_value(s["learning_rate"])
    )
    buffer = ReplayBuffer(s["buffer_size"], env.observation_space.shape, space.shape, np.float32)

    def greedy(o: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return p.actor.get_action(_tensor(o))[2].numpy()[0]

    def explore(o: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return p.actor.get_action(_tensor(o))[0].numpy()[0]

    optimizers = [p.q_optimizer, p.actor_optimizer, p.a_optimizer]
    _off_policy_loop(task, env, obs, buffer, explore, greedy, evaluation, optimizers,
                     lambda batch: sac_update(p, batch, s["gamma"], s["tau"]))  # fmt: skip
    env.close()


def _off_policy_loop(
    task: Task,
    env: gym.Env,
    obs: np.ndarray,
    buffer: ReplayBuffer,
    explore: Callable,
    greedy: Callable,
    evaluation: Evaluation,
    optimizers: Sequence,
    update: Callable,
) -> None:
    """The scripts' loop: random actions for ``learning_starts`` steps, then the exploring
    policy; a burst of ``gradient_steps`` updates every ``train_freq`` steps after that."""
    s = task.settings
    for step in range(1, task.budget + 1):
        action = env.action_space.sample() if step <= s["learning_starts"] else explore(obs)
        obs = _step(env, obs, action, buffer)
        if step > s["learning_starts"] and step % s["train_freq"] == 0:
            _set_rate(optimizers, s["learning_rate"], 1.0 - step / task.budget)
            for _ in range(s["gradient_steps"]):
                update(buffer.sample(s["batch_size"]))
        if evaluation.step(step, greedy):
            break


# -- TD3 (cleanrl/td3_continuous_action.py) --------------------------------------------------------
class TD3Actor(_Scaled):
    """The script's deterministic actor: an MLP ReLU, tanh, scaled to the action space."""

    def __init__(self, obs_dim: int, space: gym.spaces.Box, hidden: Sequence[int]) -> None:
        super().__init__(space)
        self.net = _mlp([obs_dim, *hidden, int(np.prod(space.shape))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(x)) * self.action_scale + self.action_bias


@dataclass
class TD3Parts:
    """The networks and optimisers of one TD3 run, and its update count."""

    actor: TD3Actor
    actor_target: TD3Actor
    qf1: SoftQNetwork
    qf2: SoftQNetwork
    qf1_target: SoftQNetwork
    qf2_target: SoftQNetwork
    q_optimizer: torch.optim.Optimizer
    actor_optimizer: torch.optim.Optimizer
    low: float
    high: float
    updates: int = 0


def td3_parts(obs_dim: int, space: gym.spaces.Box, hidden: Sequence[int], rate: float) -> TD3Parts:
    """The script's networks and optimisers: one Adam for both critics, one for the actor."""
    action_dim = int(np.prod(space.shape))
    actor = TD3Actor(obs_dim, space, hidden)
    qf1, qf2 = (SoftQNetwork(obs_dim, action_dim, hidden) for _ in range(2))
    return TD3Parts(
        actor, copy.deepcopy(actor), qf1, qf2, copy.deepcopy(qf1), copy.deepcopy(qf2),
        torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=rate),
        torch.optim.Adam(actor.parameters(), lr=rate),
        float(space.low[0]), float(space.high[0]),
    )  # fmt: skip


def td3_update(
    p: TD3Parts, batch: Tuple, gamma: float, tau: float, policy_frequency: int = 2
) -> None:
    """One TD3 step of the script: both critics; every ``policy_frequency`` updates the actor
    and the targets."""
    obs, actions, next_obs, rewards, dones = batch
    with torch.no_grad():
        noise = (torch.randn_like(actions) * 0.2).clamp(-0.5, 0.5) * p.actor_target.action_scale
        next_actions = (p.actor_target(next_obs) + noise).clamp(p.low, p.high)
        min_next = torch.min(
            p.qf1_target(next_obs, next_actions), p.qf2_target(next_obs, next_actions)
        )
        next_q = rewards + (1 - dones) * gamma * min_next.view(-1)
    qf_loss = F.mse_loss(p.qf1(obs, actions).view(-1), next_q) + F.mse_loss(
        p.qf2(obs, actions).view(-1), next_q
    )
    p.q_optimizer.zero_grad()
    qf_loss.backward()
    p.q_optimizer.step()
    p.updates += 1
    if p.updates % policy_frequency == 0:
        actor_loss = -p.qf1(obs, p.actor(obs)).mean()
        p.actor_optimizer.zero_grad()
        actor_loss.backward()
        p.actor_optimizer.step()
        _soft_update(p.actor_target, p.actor, tau)
        _soft_update(p.qf1_target, p.qf1, tau)
        _soft_update(p.qf2_target, p.qf2, tau)


def _td3(task: Task, seed: int, evaluation: Evaluation, options: Dict[str, Any]) -> None:
    s = task.settings
    env, obs = _env(task.env_id, seed)
    space = env.action_space
    p = td3_parts(
        env.observation_space.shape[0], space, s["net_arch"], _schedule_value(s["learning_rate"])
    )
    buffer = ReplayBuffer(s["buffer_size"], env.observation_space.shape, space.shape, np.float32)

    def greedy(o: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return p.actor(_tensor(o)).numpy()[0]

    def explore(o: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            action = p.actor(_tensor(o))
            action += torch.normal(0.0, p.actor.action_scale * s["noise_std"])
        return action.numpy()[0].clip(space.low, space.high)

    optimizers = [p.q_optimizer, p.actor_optimizer]
    _off_policy_loop(task, env, obs, buffer, explore, greedy, evaluation, optimizers,
                     lambda batch: td3_update(p, batch, s["gamma"], s["tau"]))  # fmt: skip
    env.close()


RUNNERS: Dict[Tuple[str, str], Callable[[Task, int, Evaluation, Dict[str, Any]], None]] = {
    ("cleanrl", "dqn"): _dqn,
    ("cleanrl", "ppo"): _ppo,
    ("cleanrl", "sac"): _sac,
    ("cleanrl", "td3"): _td3,
}
