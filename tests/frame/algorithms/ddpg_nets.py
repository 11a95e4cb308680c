"""Networks and helpers shared by the tests of the DDPG family (DDPG, DDPGPer, HDDPG, TD3)."""

from __future__ import annotations

import time
from typing import Callable, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from machin.frame.transition import Transition

STATE_DIM, ACTION_DIM, ACTION_RANGE = 3, 1, 2.0


class Actor(nn.Module):
    """Deterministic actor for Pendulum-like tasks: ``tanh`` output scaled to the action range."""

    def __init__(self, state_dim: int = STATE_DIM, action_dim: int = ACTION_DIM,
                 action_range: float = ACTION_RANGE, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, action_dim))
        self.action_range = action_range

    def forward(self, state):
        return torch.tanh(self.net(state)) * self.action_range


class Critic(nn.Module):
    """Q(state, action) -> [B, 1]."""

    def __init__(self, state_dim: int = STATE_DIM, action_dim: int = ACTION_DIM, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim + action_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


class ActorDiscrete(nn.Module):
    """Actor that outputs action probabilities [B, action_num]."""

    def __init__(self, state_dim: int = STATE_DIM, action_num: int = 4):
        super().__init__()
        self.fc = nn.Linear(state_dim, action_num)

    def forward(self, state):
        return torch.softmax(self.fc(state), dim=1)


class ActorWithExtra(Actor):
    """Actor that also returns a hidden-state-like extra output."""

    def forward(self, state, hidden=None):
        return super().forward(state), torch.ones(state.shape[0], 2)


class LinearActor(nn.Module):
    """``a = w * s`` with one scalar state and action: for hand-computed targets."""

    def __init__(self, w: float):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[w]]))

    def forward(self, state):
        return state @ self.w


class LinearCritic(nn.Module):
    """``Q = u * s + v * a``: for hand-computed targets."""

    def __init__(self, u: float, v: float):
        super().__init__()
        self.u = nn.Parameter(torch.tensor(u))
        self.v = nn.Parameter(torch.tensor(v))

    def forward(self, state, action):
        return self.u * state + self.v * action


def pendulum_nets(hidden: int = 16) -> Tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """actor, actor_target, critic, critic_target with small hidden layers."""
    return Actor(hidden=hidden), Actor(hidden=hidden), Critic(hidden=hidden), Critic(hidden=hidden)


def random_transition(terminal: bool = False, reward: float = None) -> Transition:
    """One Pendulum-shaped transition with random tensors."""
    return Transition(
        state={"state": torch.randn(1, STATE_DIM)},
        action={"action": torch.rand(1, ACTION_DIM) * 4 - 2},
        next_state={"state": torch.randn(1, STATE_DIM)},
        reward=float(torch.randn(()).item()) if reward is None else reward,
        terminal=terminal,
    )


def fill(algorithm, count: int = 64) -> None:
    """Store ``count`` random transitions as one episode."""
    algorithm.store_episode([random_transition() for _ in range(count)])


def parameters(net: nn.Module):
    """Detached copies of a network's parameters."""
    return [p.detach().clone() for p in net.parameters()]


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def run_pendulum(algorithm, act: Callable, *, seed: int, threshold: float, max_episodes: int,
                 warmup_steps: int = 1000) -> Tuple[float, int, int, float, float]:
    """Train on Pendulum-v1 (200-step episodes) until the smoothed return beats ``threshold``.

    ``act(state_tensor) -> action tensor [1, 1]`` chooses the exploring action. One update
    follows every environment step once ``warmup_steps`` random steps are stored.

    Returns:
        ``(smoothed return, episodes, environment steps, wall seconds, CPU seconds)`` at the end.
    """
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    smoothed, steps, start, cpu_start = None, 0, time.time(), time.process_time()
    for episode in range(1, max_episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.as_tensor(obs, dtype=torch.float32).view(1, -1)
        total, done, episode_steps = 0.0, False, []
        while not done:
            if steps < warmup_steps:
                action = torch.as_tensor(env.action_space.sample()).view(1, -1)
            else:
                action = act(state).clamp(-ACTION_RANGE, ACTION_RANGE)
            obs, reward, terminated, truncated, _ = env.step(action.numpy().reshape(-1))
            next_state = torch.as_tensor(obs, dtype=torch.float32).view(1, -1)
            episode_steps.append(Transition(state={"state": state}, action={"action": action},
                                            next_state={"state": next_state}, reward=float(reward),
                                            terminal=bool(terminated)))
            algorithm.store_transition(episode_steps[-1])
            state, total, steps, done = next_state, total + float(reward), steps + 1, terminated or truncated
            if steps >= warmup_steps:
                algorithm.update()
        smoothed = total if smoothed is None else 0.9 * smoothed + 0.1 * total
        if smoothed > threshold:
            break
    env.close()
    return smoothed, episode, steps, time.time() - start, time.process_time() - cpu_start
