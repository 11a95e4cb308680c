"""PPO whose actor and critic see the last ``--depth`` observations, flattened.

``python ppo.py [--depth D] [--episodes N] [--seed S] [--plot PATH] [--env ID]``.
With ``--depth 1`` both networks see only the current masked observation: the
memoryless baseline of the tutorial.
"""

from __future__ import annotations

import argparse
from typing import Any, Optional

import torch
from _common import Progress, parse_args
from history import History, make_env, to_state
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import PPO
from machin.utils import seed

DEPTH = 4  # default history depth


def sample_or_score(logits: torch.Tensor, action: Optional[torch.Tensor] = None):
    """``(action[B, 1], log_prob[B], entropy[B])`` of a categorical policy.

    A new action is sampled when ``action`` is None; otherwise the given one is
    scored and returned unchanged (PPO re-evaluates stored actions this way).
    """
    dist = Categorical(logits=logits)
    action = dist.sample().view(-1, 1) if action is None else action
    return action, dist.log_prob(action.view(-1)), dist.entropy()


def mlp(inputs: int, outputs: int, hidden: int = 32) -> nn.Sequential:
    """Two tanh layers of ``hidden`` units."""
    return nn.Sequential(
        nn.Linear(inputs, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, outputs),
    )


class Actor(nn.Module):
    """Categorical policy over the flattened history ``mem[B, depth, obs_dim]``."""

    def __init__(self, history_depth: int, obs_dim: int, action_num: int):
        super().__init__()
        self.net = mlp(history_depth * obs_dim, action_num)

    def forward(self, mem, action=None):
        return sample_or_score(self.net(mem.flatten(start_dim=1)), action)


class Critic(nn.Module):
    """State value from the flattened history (or from one observation ``mem[B, obs_dim]``)."""

    def __init__(self, history_depth: int, obs_dim: int):
        super().__init__()
        self.net = mlp(history_depth * obs_dim, 1)

    def forward(self, mem):
        return self.net(mem.flatten(start_dim=1))


def make_ppo(actor: nn.Module, critic: nn.Module, **overrides: Any) -> PPO:
    """PPO with the settings of this tutorial; ``overrides`` replaces some of them (see rppo.py)."""
    settings = dict(
        batch_size=1000,
        actor_update_times=10,
        critic_update_times=20,
        actor_learning_rate=0.003,
        critic_learning_rate=0.005,
        gae_lambda=0.95,
        surrogate_loss_clip=0.2,
    )
    settings.update(overrides)
    return PPO(actor, critic, torch.optim.Adam, nn.MSELoss(), **settings)


def main(args: argparse.Namespace) -> dict:
    """Train on ``args.env`` and return the run's summary (see ``Progress.finish``)."""
    seed(args.seed)
    env = make_env(args.env)
    obs_shape, action_num = env.observation_space.shape, int(env.action_space.n)
    ppo = make_ppo(Actor(args.depth, obs_shape[0], action_num), Critic(args.depth, obs_shape[0]))
    progress = Progress(f"PPO depth {args.depth}", args.env)
    for episode in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=args.seed + episode)
        history = History(args.depth, obs_shape).append(to_state(obs))
        done, total, transitions = False, 0.0, []
        while not done:
            old_history = history.get()
            action = ppo.act({"mem": old_history})[0]
            obs, reward, terminated, truncated, _ = env.step(action.item())
            new_history = history.append(to_state(obs)).get()
            transitions.append(
                {
                    "state": {"mem": old_history},
                    "action": {"action": action},
                    "next_state": {"mem": new_history},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            total += reward
            done = terminated or truncated
        # on-policy: store the whole episode (returns and advantages are computed), then learn
        ppo.store_episode(transitions)
        ppo.update()
        if progress.record(total):
            break
    env.close()
    return progress.finish(args.plot)


if __name__ == "__main__":
    main(parse_args(__doc__.splitlines()[0], "ppo", depth=DEPTH))
