"""Recurrent SAC on Pendulum-v1 without the angular velocity: ``python examples/framework_examples/recurrent_sac.py``.

The agent sees only ``cos(angle)`` and ``sin(angle)``, so a memoryless policy cannot
tell which way the pendulum swings; the GRUs of the actor and the critics infer the
velocity from the history. The actor's hidden state at each step is stored with the
step (RecurrentSAC adds the critics' when the episode is stored), and every replayed
sequence starts from the stored states, after a burn-in. The networks run over whole
windows (``unroll="sequence"``): ``nn.GRU`` takes ``[B, T, ...]`` inputs and returns
its state after every step.

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


def head(size: int, outputs: int) -> nn.Module:
    """Two layers from the GRU's state to ``outputs`` values."""
    return nn.Sequential(nn.Linear(size, size), nn.ReLU(), nn.Linear(size, outputs))


def run_gru(gru: nn.GRU, inputs, hidden):
    """The GRU's states after every step ``[B, T, H]``, from ``hidden[B, H]`` (``None``: zeros)."""
    states, _ = gru(inputs, None if hidden is None else hidden.unsqueeze(0).contiguous())
    return states


class Actor(nn.Module):
    """A tanh-squashed Gaussian policy over a GRU, run over windows (``unroll="sequence"``).

    ``forward(state[B, T, 2], hidden[B, 32] or None) -> (action[B, T, 1], log_prob[B, T, 1],
    hidden states after every step[B, T, 32])``; with ``deterministic=True`` the action is
    the squashed mean. RecurrentSAC calls it with ``T = 1`` to act.
    """

    def __init__(self, state_dim: int = 2, action_dim: int = 1, size: int = HIDDEN):
        super().__init__()
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRU(size, size, batch_first=True)
        self.mu = head(size, action_dim)
        self.log_sigma = head(size, action_dim)

    def forward(self, state, hidden=None, deterministic=False):
        states = run_gru(self.gru, torch.relu(self.fc(state)), hidden)
        mu = self.mu(states)
        dist = Normal(mu, self.log_sigma(states).clamp(-5, 2).exp())
        raw = mu if deterministic else dist.rsample()
        squashed = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(ACTION_RANGE * (1 - squashed.pow(2)) + 1e-6)
        return squashed * ACTION_RANGE, log_prob.sum(dim=-1, keepdim=True), states


class Critic(nn.Module):
    """A recurrent Q network over windows: ``(q[B, T, 1], hidden states[B, T, 32])``."""

    def __init__(self, state_dim: int = 2, action_dim: int = 1, size: int = HIDDEN):
        super().__init__()
        self.fc = nn.Linear(state_dim + action_dim, size)
        self.gru = nn.GRU(size, size, batch_first=True)
        self.head = head(size, 1)

    def forward(self, state, action, hidden=None):
        inputs = torch.relu(self.fc(torch.cat([state, action], dim=-1)))
        states = run_gru(self.gru, inputs, hidden)
        return self.head(states), states


def main():
    args = parse_args(__doc__, episodes=200, gif=False)
    seed_everything(args.seed)
    sac = RecurrentSAC(
        Actor(),
        *(Critic() for _ in range(4)),
        torch.optim.Adam,
        nn.MSELoss(),
        unroll="sequence",  # one call per window part instead of one per time step
        batch_size=16,
        actor_learning_rate=3e-3,
        critic_learning_rate=3e-3,
        alpha_learning_rate=5e-3,
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
