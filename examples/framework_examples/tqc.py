"""TQC on Pendulum-v1: ``python examples/framework_examples/tqc.py``.

Truncated quantile critics: two critics of 25 quantiles each; the target drops the 2
highest quantiles per critic from the pooled target quantiles. Uses the actor of sac.py
and the training loop of ddpg.py (one update per environment step after a warm-up of
random actions, one line per episode, solved once the smoothed return exceeds -200).

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``tqc_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the
trained policy's most likely action, ``act(..., deterministic=True)``, default
``tqc_episode.gif``).
"""

import torch
from _common import parse_args
from ddpg import run
from sac import Actor
from torch import nn

from machin.frame.algorithms import TQC


class QuantileCritic(nn.Module):
    """``quantiles[B, M]`` of the return of ``(state, action)``."""

    def __init__(self, state_dim=3, action_dim=1, quantiles=25, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim + action_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, quantiles),
        )

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    tqc = TQC(
        Actor(),
        [QuantileCritic() for _ in range(2)],
        [QuantileCritic() for _ in range(2)],
        torch.optim.Adam,
        top_quantiles_to_drop_per_net=2,
        batch_size=64,
        actor_learning_rate=2e-3,
        critic_learning_rate=2e-3,
        alpha_learning_rate=5e-3,
        update_rate=0.01,
        replay_size=100000,
    )
    run(
        tqc,
        episodes=args.episodes,
        seed=args.seed,
        plot=args.plot,
        gif=args.gif,
        name="TQC",
        explore=lambda agent, state: agent.act({"state": state})[0],
        greedy=lambda agent, state: agent.act({"state": state}, deterministic=True)[0],
        extra=lambda agent: f"alpha {agent.entropy_alpha:.3f}  ",
    )
