"""DQN that sees the last ``--depth`` observations, flattened into one input.

``python dqn.py [--depth D] [--episodes N] [--seed S] [--plot PATH] [--env ID]``.
With ``--depth 1`` the agent sees only the current masked observation: the
memoryless baseline of the tutorial.
"""

from __future__ import annotations

import argparse

import torch
from _common import Progress, parse_args
from history import History, make_env, to_state
from torch import nn

from machin.frame.algorithms import DQN
from machin.utils import seed

WARMUP_STEPS = 500
DEPTH = 4  # default history depth


class QNet(nn.Module):
    """An MLP over the flattened history ``mem[B, depth, obs_dim]``."""

    def __init__(self, history_depth: int, obs_dim: int, action_num: int, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(history_depth * obs_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_num),
        )

    def forward(self, mem):
        return self.net(mem.flatten(start_dim=1))


def main(args: argparse.Namespace) -> dict:
    """Train on ``args.env`` and return the run's summary (see ``Progress.finish``)."""
    seed(args.seed)
    env = make_env(args.env)
    obs_shape, action_num = env.observation_space.shape, int(env.action_space.n)
    dqn = DQN(
        QNet(args.depth, obs_shape[0], action_num),
        QNet(args.depth, obs_shape[0], action_num),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    progress = Progress(f"DQN depth {args.depth}", args.env)
    steps = 0
    for episode in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=args.seed + episode)
        history = History(args.depth, obs_shape).append(to_state(obs))
        done, total = False, 0.0
        while not done:
            old_history = history.get()
            action = dqn.act_discrete_with_noise({"mem": old_history})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            new_history = history.append(to_state(obs)).get()
            # every transition carries its own window of observations
            dqn.store_transition(
                {
                    "state": {"mem": old_history},
                    "action": {"action": action},
                    "next_state": {"mem": new_history},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            steps += 1
            if steps > WARMUP_STEPS:
                dqn.update()
            total += reward
            done = terminated or truncated
        if progress.record(total):
            break
    env.close()
    return progress.finish(args.plot)


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0], "dqn", depth=DEPTH))
