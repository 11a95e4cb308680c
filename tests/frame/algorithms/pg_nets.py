"""Networks and training loops shared by the stochastic-policy family's tests (A2C, PPO, TRPO, SAC)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Normal


def mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, outputs))


class CategoricalActor(nn.Module):
    """Discrete policy: ``(action[B, 1], log_prob[B], entropy[B])``; log-probs of given actions."""

    def __init__(self, state_dim: int = 4, action_num: int = 2, hidden: int = 32):
        super().__init__()
        self.net = mlp(state_dim, action_num, hidden)

    def forward(self, state, action=None):
        # What torch.distributions.Categorical computes, without its per-call overhead.
        log_probs = torch.log_softmax(self.net(state), dim=1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=1)
        return action, log_probs.gather(1, action.view(-1, 1).long()).view(-1), entropy


class ColumnCategoricalActor(CategoricalActor):
    """Like :class:`CategoricalActor`, with ``[B, 1]`` log-probs and entropies and an extra output."""

    def forward(self, state, action=None):
        action, log_prob, entropy = super().forward(state, action)
        return action, log_prob.view(-1, 1), entropy.view(-1, 1), "extra"


class ValueCritic(nn.Module):
    def __init__(self, state_dim: int = 4, hidden: int = 32):
        super().__init__()
        self.net = mlp(state_dim, 1, hidden)

    def forward(self, state):
        return self.net(state)


class TanhGaussianActor(nn.Module):
    """Continuous policy squashed into ``[-action_range, action_range]``, drawn with ``rsample``."""

    def __init__(self, state_dim: int = 3, action_dim: int = 1, action_range: float = 2.0, hidden: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, action_dim)
        self.log_sigma = nn.Linear(hidden, action_dim)
        self.action_range = action_range

    def forward(self, state, action=None):
        h = self.body(state)
        dist = Normal(self.mu(h), self.log_sigma(h).clamp(-10, 2).exp())
        raw = dist.rsample() if action is None else torch.atanh((action / self.action_range).clamp(-0.999, 0.999))
        squashed = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(self.action_range * (1 - squashed.pow(2)) + 1e-6)
        return squashed * self.action_range, log_prob.sum(dim=1, keepdim=True), dist.entropy()


class QCritic(nn.Module):
    def __init__(self, state_dim: int = 3, action_dim: int = 1, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim + action_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


def step_dict(state, action, next_state, reward, terminal, **custom):
    """One transition as a dict, states under the key ``state``."""
    return {
        "state": {"state": torch.as_tensor(state, dtype=torch.float32).view(1, -1)},
        "action": {"action": torch.as_tensor(action).view(1, -1)},
        "next_state": {"state": torch.as_tensor(next_state, dtype=torch.float32).view(1, -1)},
        "reward": float(reward),
        "terminal": bool(terminal),
        **custom,
    }


def train_on_policy_cartpole(agent, *, seed: int, max_episodes: int = 400, threshold: float = 150.0,
                             episodes_per_update: int = 1):
    """Train an A2C-like agent on CartPole-v0 until the smoothed return exceeds ``threshold``.

    The smoothed return starts at 0 and follows ``0.9 * smoothed + 0.1 * return``.
    Returns ``(episode or None, total_steps, wall seconds, CPU seconds of this process)``.
    """
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = gym.make("CartPole-v0")
    smoothed, steps, start, cpu_start = 0.0, 0, time.time(), time.process_time()
    for episode in range(1, max_episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
        done, total, stored = False, 0.0, []
        while not done:
            action = agent.act({"state": state})[0]
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
            stored.append({"state": {"state": state}, "action": {"action": action},
                           "next_state": {"state": next_state}, "reward": float(reward),
                           "terminal": terminated})
            state, total, done = next_state, total + reward, terminated or truncated
            steps += 1
        agent.store_episode(stored)
        if episode % episodes_per_update == 0:
            agent.update()
        smoothed = 0.9 * smoothed + 0.1 * total
        if smoothed > threshold:
            env.close()
            return episode, steps, time.time() - start, time.process_time() - cpu_start
    env.close()
    return None, steps, time.time() - start, time.process_time() - cpu_start


def train_sac_pendulum(agent, *, seed: int, max_episodes: int = 60, threshold: float = -400.0,
                       warmup_steps: int = 300):
    """Train SAC on Pendulum-v1 (one update per step after a warm-up of random actions).

    The smoothed return starts at the first episode's return and follows
    ``0.9 * smoothed + 0.1 * return``. Returns ``(episode or None, total_steps, wall seconds,
    CPU seconds of this process)``.
    """
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    smoothed, steps, start, cpu_start = None, 0, time.time(), time.process_time()
    for episode in range(1, max_episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, 3)
        done, total = False, 0.0
        while not done:
            if steps < warmup_steps:
                action = torch.tensor(env.action_space.sample(), dtype=torch.float32).view(1, 1)
            else:
                action = agent.act({"state": state})[0]
            obs, reward, terminated, truncated, _ = env.step(action.view(1).numpy())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, 3)
            agent.store_transition({"state": {"state": state}, "action": {"action": action},
                                    "next_state": {"state": next_state}, "reward": float(reward),
                                    "terminal": terminated})
            state, total, done = next_state, total + reward, terminated or truncated
            steps += 1
            if steps >= warmup_steps:
                agent.update()
        smoothed = total if smoothed is None else 0.9 * smoothed + 0.1 * total
        if smoothed > threshold:
            env.close()
            return episode, steps, time.time() - start, time.process_time() - cpu_start
    env.close()
    return None, steps, time.time() - start, time.process_time() - cpu_start
