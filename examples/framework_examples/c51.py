"""C51 (categorical distributional double DQN) on CartPole-v0.

Run ``python examples/framework_examples/c51.py``; solved once the smoothed return
stays above 190 for 5 episodes.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``c51_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one greedy episode of
the trained agent, default ``c51_episode.gif``).
"""

import torch
from _cartpole import parse_args, run
from torch import nn

from machin.frame.algorithms import C51


class DistQNet(nn.Module):
    """Returns a probability distribution over ``atoms`` return values for every action."""

    def __init__(self, state_dim=4, action_num=2, atoms=51):
        super().__init__()
        self.action_num, self.atoms = action_num, atoms
        self.net = nn.Sequential(
            nn.Linear(state_dim, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, action_num * atoms),
        )

    def forward(self, state):
        logits = self.net(state).view(-1, self.action_num, self.atoms)
        return torch.softmax(logits, dim=-1)  # q_dist[B, action_num, atoms]


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    c51 = C51(
        DistQNet(),
        DistQNet(),
        torch.optim.Adam,
        0.0,  # value_min: the lowest atom
        200.0,  # value_max: the highest (CartPole-v0's returns reach 200)
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.02,
        learning_rate=3e-3,
        replay_size=20000,
    )
    run(c51, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="C51")
