"""DDPG with prioritized replay on Pendulum-v1: ``python examples/framework_examples/ddpg_per.py``.

Uses the networks and the training loop of ddpg.py (same options and solved criterion).
"""

import torch
from _common import parse_args
from ddpg import networks, run
from torch import nn

from machin.frame.algorithms import DDPGPer

if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    # the criterion must keep one loss per sample: it is weighted by importance before averaging
    ddpg_per = DDPGPer(
        *networks(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        update_rate=0.005,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        replay_size=100000,
    )
    run(
        ddpg_per,
        episodes=args.episodes,
        seed=args.seed,
        plot=args.plot,
        gif=args.gif,
        name="DDPGPer",
    )
