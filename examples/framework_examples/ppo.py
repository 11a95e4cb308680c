"""PPO on CartPole-v0: ``python examples/framework_examples/ppo.py``.

Uses the networks and the training loop of a2c.py (same options and solved criterion).
"""

import torch
from _common import parse_args
from a2c import Actor, Critic, run
from torch import nn

from machin.frame.algorithms import PPO

if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    ppo = PPO(
        Actor(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=1000,
        actor_update_times=10,
        critic_update_times=20,
        actor_learning_rate=0.003,
        critic_learning_rate=0.005,
        gae_lambda=0.95,
        surrogate_loss_clip=0.2,
    )
    run(ppo, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="PPO")
