"""TD3 on Pendulum-v1: ``python examples/framework_examples/td3.py``.

Uses the networks and the training loop of ddpg.py (same options and solved criterion).
"""

import torch
from _common import parse_args
from ddpg import Critic, networks, run
from torch import nn

from machin.frame.algorithms import TD3

if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    actor, actor_target, critic, critic_target = networks()
    td3 = TD3(
        actor,
        actor_target,
        critic,
        critic_target,
        Critic(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        update_rate=0.005,
        actor_learning_rate=3e-3,
        critic_learning_rate=3e-3,
        policy_noise=0.2,
        noise_clip=0.5,
        policy_update_delay=2,
        replay_size=100000,
    )
    run(td3, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="TD3")
