"""Hysteretic DDPG on Pendulum-v1: ``python examples/framework_examples/hddpg.py``.

Negative TD errors move the critic at half the rate of positive ones. Uses the
networks and the training loop of ddpg.py (same options and solved criterion).
"""

import torch
from _common import parse_args
from ddpg import networks, run
from torch import nn

from machin.frame.algorithms import HDDPG

if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    hddpg = HDDPG(
        *networks(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        update_rate=0.005,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        q_increase_rate=1.0,
        q_decrease_rate=0.5,
        replay_size=100000,
    )
    run(hddpg, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="HDDPG")
