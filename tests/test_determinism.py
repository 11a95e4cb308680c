"""Two seeded CPU runs give identical losses: a guard for refactors of the training code."""

import gymnasium as gym
import torch
from torch import nn

from machin.frame.algorithms import DQN
from machin.utils import seed


def dqn_losses(value: int, updates: int = 200):
    env = gym.make("CartPole-v1")
    seed(value, env)
    qnet = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))

    class QNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = qnet

        def forward(self, state):
            return self.net(state)

    import copy

    online = QNet()
    dqn = DQN(online, copy.deepcopy(online), torch.optim.Adam, nn.MSELoss(reduction="sum"), batch_size=32)
    obs, _ = env.reset(seed=value)
    losses = []
    while len(losses) < updates:
        state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
        action = dqn.act_discrete_with_noise({"state": state})
        obs, reward, terminated, truncated, _ = env.step(action.item())
        dqn.store_transition({"state": {"state": state}, "action": {"action": action},
                              "next_state": {"state": torch.tensor(obs, dtype=torch.float32).view(1, 4)},
                              "reward": float(reward), "terminal": terminated})
        if terminated or truncated:
            obs, _ = env.reset()
        if dqn.replay_buffer.size() >= 32:
            losses.append(dqn.update())
    return losses


def test_dqn_is_deterministic_under_a_seed():
    first, second = dqn_losses(5), dqn_losses(5)
    assert len(first) == 200
    assert first == second
    assert dqn_losses(6) != first
