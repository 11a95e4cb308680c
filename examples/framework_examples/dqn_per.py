"""DQN with prioritized replay on CartPole-v0: ``python examples/framework_examples/dqn_per.py``.

Solved once the smoothed return stays above 190 for 5 episodes.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``dqn_per_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one greedy episode of
the trained agent, default ``dqn_per_episode.gif``).
"""

import torch
from _cartpole import parse_args, run
from dqn import QNet
from torch import nn

from machin.frame.algorithms import DQNPer

if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    # the criterion must keep one loss per sample: it is weighted by importance before averaging
    dqn_per = DQNPer(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    run(
        dqn_per, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="DQNPer"
    )
