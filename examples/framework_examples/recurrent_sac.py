"""Recurrent SAC on Pendulum-v1 without the angular velocity: ``python examples/framework_examples/recurrent_sac.py``.

The agent sees only ``cos(angle)`` and ``sin(angle)``, so a memoryless policy cannot
tell which way the pendulum swings; the GRUs of the actor and the critics infer the
velocity from the history. The actor's hidden state at each step is stored with the
step (RecurrentSAC adds the critics' when the episode is stored), and every replayed
sequence starts from the stored states, after a burn-in.

One update per two environment steps after a warm-up; one line per episode with the
smoothed return. Solved once the smoothed return exceeds -300. Options: ``--episodes N``
(cap), ``--seed S`` and ``--plot PATH`` (learning-curve PNG, default
``recurrent_sac_curve.png``, ``""`` for none).
"""

import gymnasium as gym
import numpy as np
import torch
from _common import Progress, parse_args
from torch import nn
from torch.distributions import Normal

from machin.frame.algorithms import RecurrentSAC
from machin.utils import seed as seed_everything

ENV_ID = "Pendulum-v1"
HIDDEN = 32
ACTION_RANGE = 2.0
WARMUP_STEPS = 1000  # five episodes before the first update


class HideVelocity(gym.ObservationWrapper):
    """Keep ``cos(angle)`` and ``sin(angle)`` (observation indices 0 and 1)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)

    def observation(self, observation):
        return observation[:2]


class Actor(nn.Module):
    """One step of a tanh-squashed Gaussian policy over a GRU cell.

    ``forward(state[B, 2], hidden[B, 32] or None) -> (action[B, 1], log_prob[B, 1], new_hidden)``;
    with ``deterministic=True`` the action is the squashed mean.
    """

    def __init__(self, state_dim: int = 2, action_dim: int = 1, size: int = HIDDEN):
        super().__init__()
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRUCell(size, size)
        self.mu = nn.Linear(size, action_dim)
        self.log_sigma = nn.Linear(size, action_dim)

    def forward(self, state, hidden=None, deterministic=False):
        hidden = self.gru(torch.relu(self.fc(state)), hidden)
        mu = self.mu(hidden)
        dist = Normal(mu, self.log_sigma(hidden).clamp(-10, 2).exp())
        raw = mu if deterministic else dist.rsample()
        squashed = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(ACTION_RANGE * (1 - squashed.pow(2)) + 1e-6)
        return squashed * ACTION_RANGE, log_prob.sum(dim=1, keepdim=True), hidden


class Critic(nn.Module):
    """One step of a recurrent Q network: ``(q[B, 1], new_hidden[B, 32])``."""

    def __init__(self, state_dim: int = 2, action_dim: int = 1, size: int = HIDDEN):
        super().__init__()
        self.fc = nn.Linear(state_dim + action_dim, size)
        self.gru = nn.GRUCell(size, size)
        self.head = nn.Linear(size, 1)

    def forward(self, state, action, hidden=None):
        hidden = self.gru(torch.relu(self.fc(torch.cat([state, action], dim=1))), hidden)
        return self.head(hidden), hidden


def main():
    args = parse_args(__doc__, episodes=200, gif=False)
    seed_everything(args.seed)
    sac = RecurrentSAC(
        Actor(),
        *(Critic() for _ in range(4)),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=32,
        actor_learning_rate=2e-3,
        critic_learning_rate=2e-3,
        alpha_learning_rate=2e-3,
        update_rate=0.01,
        replay_size=100000,
        sequence_length=8,
        burn_in=4,
    )
    env = HideVelocity(gym.make(ENV_ID))
    progress, steps = Progress("RecurrentSAC", f"{ENV_ID} without velocity", -300.0, start=None), 0
    for episode in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=args.seed + episode)
        state, hidden = torch.tensor(obs).view(1, -1), torch.zeros(1, HIDDEN)
        done, total, stored = False, 0.0, []
        while not done:
            action, _, next_hidden = sac.act({"state": state, "hidden": hidden})
            obs, reward, terminated, truncated, _ = env.step(action.view(-1).numpy())
            next_state = torch.tensor(obs).view(1, -1)
            # the state dict records the hidden state the actor was given at this step
            stored.append(
                {
                    "state": {"state": state, "hidden": hidden},
                    "action": {"action": action},
                    "next_state": {"state": next_state},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            state, hidden, total = next_state, next_hidden, total + float(reward)
            done, steps = terminated or truncated, steps + 1
        sac.store_episode(stored)
        if steps >= WARMUP_STEPS:
            for _ in range(len(stored) // 2):
                sac.update()
        if progress.end_episode(total, steps):
            break
    env.close()
    progress.write_curve(args.plot)


if __name__ == "__main__":
    main()
