"""Double DQN on CartPole-v0: ``python examples/framework_examples/dqn.py``.

Solved once the smoothed return stays above 190 for 5 episodes.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``dqn_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one greedy episode of
the trained agent, default ``dqn_episode.gif``).
"""

import torch
from _cartpole import parse_args, run
from torch import nn

from machin.frame.algorithms import DQN


class QNet(nn.Module):
    def __init__(self, state_dim=4, action_num=2):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, action_num),
        )

    def forward(self, state):
        return self.net(state)


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    dqn = DQN(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        mode="double",
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    run(dqn, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="DQN")
