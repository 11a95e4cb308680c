"""Recurrent PPO: a GRU actor whose hidden state is stored with every transition.

``python rppo.py [--episodes N] [--seed S] [--plot PATH] [--env ID]``.
The actor reads one observation per step and carries its hidden state through
the episode. Each stored state holds the observation and the hidden state the
actor had before seeing it, so PPO can score the stored actions again with one
GRU step (no back-propagation through time). The critic sees the current
observation only.
"""

from __future__ import annotations

import argparse

import torch
from _common import Progress, parse_args
from history import make_env, to_state
from ppo import Critic, make_ppo, sample_or_score
from torch import nn

from machin.utils import seed


class RecurrentActor(nn.Module):
    """``forward(mem[B, obs_dim], hidden[B, 1, H], action=None)`` -> ``(action, log_prob, entropy, hidden)``.

    Hidden states are kept batch-first (``[B, 1, H]``) so that they can be stored
    and batched like any other state entry; the GRU itself wants ``[1, B, H]``.
    """

    def __init__(self, obs_dim: int, action_num: int, hidden_size: int = 32):
        super().__init__()
        self.hidden_size = hidden_size
        self.gru = nn.GRU(obs_dim, hidden_size, batch_first=True)
        self.head = nn.Sequential(
            nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, action_num)
        )

    def forward(self, mem, hidden, action=None):
        out, hidden = self.gru(mem.unsqueeze(1), hidden.transpose(0, 1).contiguous())
        return (*sample_or_score(self.head(out[:, -1]), action), hidden.transpose(0, 1))


def main(args: argparse.Namespace) -> dict:
    """Train on ``args.env`` and return the run's summary (see ``Progress.finish``)."""
    seed(args.seed)
    env = make_env(args.env)
    obs_dim, action_num = env.observation_space.shape[0], int(env.action_space.n)
    actor = RecurrentActor(obs_dim, action_num)
    # Each update also changes how the GRU writes later hidden states; with ppo.py's ten actor
    # steps per update and no entropy bonus this actor collapsed onto a single action.
    rppo = make_ppo(actor, Critic(1, obs_dim), actor_update_times=3, entropy_weight=-0.01)
    progress = Progress("RPPO", args.env)
    for episode in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=args.seed + episode)
        state, hidden = to_state(obs), torch.zeros(1, 1, actor.hidden_size)
        done, total, transitions = False, 0.0, []
        while not done:
            # the actor's extra output, its new hidden state, comes last
            action, _, _, next_hidden = rppo.act({"mem": state, "hidden": hidden})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = to_state(obs)
            transitions.append(
                {
                    "state": {"mem": state, "hidden": hidden},
                    "action": {"action": action},
                    "next_state": {"mem": next_state, "hidden": next_hidden},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            state, hidden = next_state, next_hidden
            total += reward
            done = terminated or truncated
        rppo.store_episode(transitions)
        rppo.update()
        if progress.record(total):
            break
    env.close()
    return progress.finish(args.plot)


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0], "rppo"))
