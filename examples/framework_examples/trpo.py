"""TRPO on CartPole-v0: ``python examples/framework_examples/trpo.py``.

Uses the networks and the training loop of a2c.py (same options and solved
criterion). The actor has no optimizer: each update takes one natural-gradient step
whose KL divergence stays under ``kl_max_delta``, on ``batch_size`` samples (here more
than an episode holds, so on all of them).
"""

import torch
from _common import parse_args
from a2c import Actor, Critic, run
from torch import nn

from machin.frame.algorithms import TRPO

if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    trpo = TRPO(
        Actor(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=1000,
        critic_update_times=20,
        critic_learning_rate=0.005,
        gae_lambda=0.95,
        kl_max_delta=0.02,
    )
    run(trpo, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="TRPO")
