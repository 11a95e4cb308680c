"""DRQN: a GRU Q network trained with DQNPer on windows of stored observations.

``python drqn.py [--depth D] [--episodes N] [--seed S] [--plot PATH] [--env ID]``.
While acting, the GRU reads one observation per step and carries its hidden state
through the episode; while learning, it is unrolled from a zero hidden state over
the last ``--depth`` observations stored with each transition (a "bootstrapped
random update" that keeps only the Q value of the last step).
"""

from __future__ import annotations

import argparse

import torch
from _common import Progress, parse_args
from history import History, make_env, to_state
from torch import nn

from machin.frame.algorithms import DQNPer
from machin.utils import seed

WARMUP_STEPS = 500
DEPTH = 8  # default history depth


class RecurrentQNet(nn.Module):
    """GRU followed by an MLP head; two branches chosen by the keys it is given.

    * acting: ``forward(mem=[B, obs_dim], hidden=[1, B, H])`` -> ``(q[B, A], hidden)``;
    * updating: ``forward(history_mem=[B, depth, obs_dim])`` -> ``q[B, A]`` of the last step.
    """

    def __init__(self, obs_dim: int, action_num: int, hidden_size: int = 64):
        super().__init__()
        self.hidden_size = hidden_size
        self.gru = nn.GRU(obs_dim, hidden_size, batch_first=True)
        self.head = nn.Sequential(
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, action_num),
        )

    def forward(self, mem=None, hidden=None, history_mem=None):
        if mem is not None:
            # acting: one GRU step from the hidden state the caller carries along
            out, hidden = self.gru(mem.unsqueeze(1), hidden)
            return self.head(out[:, -1]), hidden
        # updating: unroll over the stored window, starting from zeros
        _, last_hidden = self.gru(history_mem)
        return self.head(last_hidden[0])


def main(args: argparse.Namespace) -> dict:
    """Train on ``args.env`` and return the run's summary (see ``Progress.finish``)."""
    seed(args.seed)
    env = make_env(args.env)
    obs_shape, action_num = env.observation_space.shape, int(env.action_space.n)
    q_net, q_net_t = (
        RecurrentQNet(obs_shape[0], action_num),
        RecurrentQNet(obs_shape[0], action_num),
    )
    # a prioritized buffer needs one loss per sample: reduction="none"
    drqn = DQNPer(
        q_net,
        q_net_t,
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    progress = Progress(f"DRQN depth {args.depth}", args.env)
    steps = 0
    for episode in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=args.seed + episode)
        state = to_state(obs)
        history = History(args.depth, obs_shape).append(state)
        hidden = torch.zeros(1, 1, q_net.hidden_size)
        done, total = False, 0.0
        while not done:
            old_history = history.get()
            # the extra output of the Q network (its new hidden state) comes back after the action
            action, hidden = drqn.act_discrete_with_noise({"mem": state, "hidden": hidden})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            state = to_state(obs)
            new_history = history.append(state).get()
            drqn.store_transition(
                {
                    "state": {"history_mem": old_history},
                    "action": {"action": action},
                    "next_state": {"history_mem": new_history},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            steps += 1
            if steps > WARMUP_STEPS:
                drqn.update()
            total += reward
            done = terminated or truncated
        if progress.record(total):
            break
    env.close()
    return progress.finish(args.plot)


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0], "drqn", depth=DEPTH))
