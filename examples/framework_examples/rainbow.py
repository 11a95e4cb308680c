"""RAINBOW (distributional, n-step, prioritized, double) on CartPole-v0.

Run ``python examples/framework_examples/rainbow.py``; solved once the smoothed return
stays above 190 for 5 episodes.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``rainbow_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one greedy episode of
the trained agent, default ``rainbow_episode.gif``).
"""

import torch
from _cartpole import parse_args, run
from torch import nn

from machin.frame.algorithms import RAINBOW


class DistQNet(nn.Module):
    """Returns a probability distribution over ``atoms`` values for every action."""

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
        return torch.softmax(self.net(state).view(-1, self.action_num, self.atoms), dim=-1)


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    rainbow = RAINBOW(
        DistQNet(),
        DistQNet(),
        torch.optim.Adam,
        0.0,
        100.0,
        reward_future_steps=3,
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.02,
        learning_rate=3e-3,
        replay_size=20000,
    )
    # store_episode computes each step's 3-step return, so whole episodes are stored
    run(
        rainbow,
        episodes=args.episodes,
        seed=args.seed,
        plot=args.plot,
        gif=args.gif,
        store_by_episode=True,
        name="RAINBOW",
    )
