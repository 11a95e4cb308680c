"""Two seeded CPU runs give identical losses: a guard for refactors of the training code."""

import copy

import gymnasium as gym
import torch
from torch import nn

from machin.frame.algorithms import DDPG, DQN, PPO
from machin.utils import seed

from .frame.algorithms.nets import CategoricalActor, ValueCritic, fill, pendulum_nets

UPDATES = 200


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, state):
        return self.net(state)


def observation(obs):
    return torch.tensor(obs, dtype=torch.float32).view(1, -1)


def dqn_losses(value: int):
    env = gym.make("CartPole-v1")
    seed(value, env)
    online = QNet()
    dqn = DQN(
        online, copy.deepcopy(online), torch.optim.Adam, nn.MSELoss(reduction="sum"), batch_size=32
    )
    obs, _ = env.reset(seed=value)
    losses = []
    while len(losses) < UPDATES:
        state = observation(obs)
        action = dqn.act_discrete_with_noise({"state": state})
        obs, reward, terminated, truncated, _ = env.step(action.item())
        dqn.store_transition(
            {
                "state": {"state": state},
                "action": {"action": action},
                "next_state": {"state": observation(obs)},
                "reward": float(reward),
                "terminal": terminated,
            }
        )
        if terminated or truncated:
            obs, _ = env.reset()
        if dqn.replay_buffer.size() >= 32:
            losses.append(dqn.update())
    return losses


def ddpg_losses(value: int):
    seed(value)
    ddpg = DDPG(*pendulum_nets(), torch.optim.Adam, nn.MSELoss(reduction="sum"), batch_size=32)
    fill(ddpg, 256)
    return [ddpg.update() for _ in range(UPDATES)]


def ppo_losses(value: int):
    env = gym.make("CartPole-v1")
    seed(value, env)
    ppo = PPO(
        CategoricalActor(hidden=16),
        ValueCritic(hidden=16),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=16,
        actor_update_times=1,
        critic_update_times=1,
    )
    losses = []
    while len(losses) < UPDATES:
        obs, _ = env.reset()
        episode, done = [], False
        while not done:
            state = observation(obs)
            action = ppo.act({"state": state})[0]
            obs, reward, terminated, truncated, _ = env.step(action.item())
            done = terminated or truncated
            episode.append(
                {
                    "state": {"state": state},
                    "action": {"action": action},
                    "next_state": {"state": observation(obs)},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
        ppo.store_episode(episode)
        losses.append(ppo.update())
    return losses


def test_dqn_ddpg_and_ppo_are_deterministic_under_a_seed():
    for run in (dqn_losses, ddpg_losses, ppo_losses):
        first, second = run(5), run(5)
        assert len(first) == UPDATES
        assert first == second, f"{run.__name__}: two runs with seed 5 differ"
        assert run(6) != first, f"{run.__name__}: the seed has no effect"
