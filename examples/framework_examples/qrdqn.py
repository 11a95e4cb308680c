"""QR-DQN (quantile regression double DQN) on CartPole-v0.

Run ``python examples/framework_examples/qrdqn.py``; solved once the smoothed return
stays above 190 for 5 episodes.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``qrdqn_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one greedy episode of
the trained agent, default ``qrdqn_episode.gif``).
"""

import torch
from _cartpole import parse_args, run
from torch import nn

from machin.frame.algorithms import QRDQN


class QuantileQNet(nn.Module):
    """Returns ``quantiles`` values of the return of every action, at fractions (2i + 1) / 2N."""

    def __init__(self, state_dim=4, action_num=2, quantiles=32):
        super().__init__()
        self.action_num, self.quantiles = action_num, quantiles
        self.net = nn.Sequential(
            nn.Linear(state_dim, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, action_num * quantiles),
        )

    def forward(self, state):
        return self.net(state).view(-1, self.action_num, self.quantiles)  # [B, action_num, N]


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    qrdqn = QRDQN(
        QuantileQNet(),
        QuantileQNet(),
        torch.optim.Adam,
        kappa=1.0,
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.02,
        learning_rate=3e-3,
        replay_size=20000,
    )
    run(qrdqn, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="QRDQN")
