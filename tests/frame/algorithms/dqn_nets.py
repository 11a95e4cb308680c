"""Small networks and a CartPole training loop shared by the value-based family's tests."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn


class SummingLoss(nn.Module):
    """A criterion that claims per-sample losses (``reduction = "none"``) yet returns their sum."""

    reduction = "none"

    def forward(self, target, predicted):
        return ((target - predicted) ** 2).sum()


class QNet(nn.Module):
    """MLP Q network over a state called ``state``."""

    def __init__(self, state_dim: int = 4, action_num: int = 2, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, action_num),
        )

    def forward(self, state):
        return self.net(state)


class QNetWithHidden(QNet):
    """Returns an extra output after the Q values, like a recurrent network's hidden state."""

    def forward(self, state, hidden=None):
        hidden = torch.zeros(state.shape[0], 3) if hidden is None else hidden + 1
        return self.net(state), hidden


class DuelingQNet(nn.Module):
    def __init__(self, state_dim: int = 4, action_num: int = 2, hidden: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU())
        self.adv = nn.Linear(hidden, action_num)
        self.val = nn.Linear(hidden, 1)

    def forward(self, state):
        h = self.body(state)
        adv = self.adv(h)
        return self.val(h) + adv - adv.mean(dim=1, keepdim=True)


class DistQNet(nn.Module):
    """Distributional Q network: softmax over atoms for each action."""

    def __init__(self, state_dim: int = 4, action_num: int = 2, atoms: int = 51, hidden: int = 64):
        super().__init__()
        self.action_num, self.atoms = action_num, atoms
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, action_num * atoms),
        )

    def forward(self, state):
        return torch.softmax(self.net(state).view(-1, self.action_num, self.atoms), dim=-1)


def transition(state, action, next_state, reward, terminal, **custom):
    return {
        "state": {"state": torch.as_tensor(state, dtype=torch.float32).view(1, -1)},
        "action": {"action": torch.as_tensor([[action]], dtype=torch.long)},
        "next_state": {"state": torch.as_tensor(next_state, dtype=torch.float32).view(1, -1)},
        "reward": float(reward),
        "terminal": bool(terminal),
        **custom,
    }


def train_cartpole(agent, *, seed: int, by_episode: bool = False, warmup_steps: int = 500,
                   max_episodes: int = 400, threshold: float = 150.0, repeat: int = 5):
    """Train on CartPole-v0 until the smoothed return stays above ``threshold``.

    Returns ``(solved_episode or None, total_steps, seconds)``.
    """
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = gym.make("CartPole-v0")
    smoothed, streak, steps, start = 0.0, 0, 0, time.time()
    for episode in range(1, max_episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
        done, total, stored = False, 0.0, []
        while not done:
            action = agent.act_discrete_with_noise({"state": state})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
            step = {"state": {"state": state}, "action": {"action": action},
                    "next_state": {"state": next_state}, "reward": float(reward), "terminal": terminated}
            if by_episode:
                stored.append(step)
            else:
                agent.store_transition(step)
            state, total, done = next_state, total + reward, terminated or truncated
            steps += 1
            if not by_episode and steps > warmup_steps:
                agent.update()
        if by_episode:
            agent.store_episode(stored)
            if steps > warmup_steps:
                for _ in range(len(stored)):
                    agent.update()
        smoothed = 0.9 * smoothed + 0.1 * total
        streak = streak + 1 if smoothed > threshold else 0
        if streak >= repeat:
            env.close()
            return episode, steps, time.time() - start
    env.close()
    return None, steps, time.time() - start
