"""IQL (implicit Q-learning) on a fixed Pendulum-v1 dataset: ``python examples/framework_examples/iql.py``.

Offline: the agent never acts while it learns. The dataset (see _offline.py) holds 10
episodes of a scripted swing-up controller and 10 of random torques. Each "episode" of
the output is a round of 100 updates followed by one evaluation episode of the policy's
most likely action; the run stops once the smoothed evaluation return exceeds -200.
IQL values only the actions in the data: a state-value network fits an upper expectile
of their Q values, and the actor imitates each stored action weighted by
``exp(beta * advantage)``, so the random torques get little weight.

Options: ``--episodes N`` (rounds), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``iql_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the trained
policy, default ``iql_episode.gif``).
"""

import torch
from _common import parse_args
from _offline import run
from sac import Actor, Critic
from torch import nn

from machin.frame.algorithms import IQL


class Value(nn.Module):
    """V(s)."""

    def __init__(self, state_dim=3, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state):
        return self.net(state)


if __name__ == "__main__":
    args = parse_args(__doc__, episodes=60)
    torch.manual_seed(args.seed)
    iql = IQL(
        Actor(),
        Critic(),
        Critic(),
        Critic(),
        Critic(),
        Value(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=128,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        value_learning_rate=1e-3,
        expectile=0.7,
        beta=3.0,
    )
    run(iql, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="IQL")
