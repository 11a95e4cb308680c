"""IQN (implicit quantile network, double target) on CartPole-v0.

Run ``python examples/framework_examples/iqn.py``; solved once the smoothed return
stays above 190 for 5 episodes.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``iqn_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one greedy episode of
the trained agent, default ``iqn_episode.gif``).
"""

import torch
from _cartpole import parse_args, run
from torch import nn

from machin.frame.algorithms import IQN


class ImplicitQuantileNet(nn.Module):
    """Returns the return of every action at the fractions ``tau[B, N]`` it is given.

    The state's features are multiplied by an embedding of ``cos(pi * i * tau)``,
    ``i = 0 .. cosines - 1``, as in the IQN paper.
    """

    def __init__(self, state_dim=4, action_num=2, hidden=64, cosines=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU())
        self.embed = nn.Sequential(nn.Linear(cosines, hidden), nn.ReLU())
        self.head = nn.Sequential(
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, action_num)
        )
        self.register_buffer("frequencies", torch.arange(cosines) * torch.pi)

    def forward(self, state, tau):
        features = self.body(state).unsqueeze(1)  # [B, 1, hidden]
        embedding = self.embed(torch.cos(tau.unsqueeze(-1) * self.frequencies))  # [B, N, hidden]
        return self.head(features * embedding).transpose(1, 2)  # [B, action_num, N]


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    iqn = IQN(
        ImplicitQuantileNet(),
        ImplicitQuantileNet(),
        torch.optim.Adam,
        tau_samples=32,
        target_tau_samples=32,
        policy_tau_samples=16,
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.02,
        learning_rate=3e-3,
        replay_size=20000,
    )
    run(iqn, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="IQN")
