"""CQL (conservative Q-learning over SAC) on a fixed Pendulum-v1 dataset: ``python examples/framework_examples/cql.py``.

Offline: the agent never acts while it learns. The dataset (see _offline.py) holds 10
episodes of a scripted swing-up controller and 10 of random torques. Each "episode" of
the output is a round of 100 updates followed by one evaluation episode of the policy's
most likely action; the run stops once the smoothed evaluation return exceeds -200.
Plain behaviour cloning on this data averages the controller's torques with random ones;
CQL keeps the Q values of actions the data never took low and follows the better ones.

Options: ``--episodes N`` (rounds), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``cql_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the trained
policy, default ``cql_episode.gif``).
"""

import torch
from _common import parse_args
from _offline import ACTION_RANGE, run
from sac import Actor, Critic
from torch import nn

from machin.frame.algorithms import CQLSAC

if __name__ == "__main__":
    args = parse_args(__doc__, episodes=60)
    torch.manual_seed(args.seed)
    cql = CQLSAC(
        Actor(),
        Critic(),
        Critic(),
        Critic(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        cql_weight=5.0,
        cql_samples=4,
        action_low=-ACTION_RANGE,
        action_high=ACTION_RANGE,
    )
    run(cql, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="CQLSAC")
