"""CrossQ on Pendulum-v1: ``python examples/framework_examples/crossq.py``.

Two batch-normalised critics and no target networks; each critic sees the current and
the next state-action pairs in one joined batch, the actor steps after every third
critic step, and Adam runs with ``betas=(0.5, 0.999)`` as in the paper. Uses the actor of
sac.py and the training loop of ddpg.py (one update per environment step after a warm-up
of random actions, one line per episode, solved once the smoothed return exceeds -200).

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``crossq_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the
trained policy's most likely action, ``act(..., deterministic=True)``, default
``crossq_episode.gif``).
"""

import functools

import torch
from _common import parse_args
from ddpg import run
from sac import Actor
from torch import nn

from machin.frame.algorithms import CrossQ


class BNCritic(nn.Module):
    """Q(s, a) with batch normalisation on its input and after each hidden layer."""

    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.BatchNorm1d(state_dim + action_dim),
            nn.Linear(state_dim + action_dim, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    crossq = CrossQ(
        Actor(),
        [BNCritic(), BNCritic()],
        functools.partial(torch.optim.Adam, betas=(0.5, 0.999)),
        nn.MSELoss(),
        batch_size=64,
        actor_learning_rate=2e-3,
        critic_learning_rate=2e-3,
        alpha_learning_rate=5e-3,
        policy_update_delay=3,
        replay_size=100000,
    )
    run(
        crossq,
        episodes=args.episodes,
        seed=args.seed,
        plot=args.plot,
        gif=args.gif,
        name="CrossQ",
        explore=lambda agent, state: agent.act({"state": state})[0],
        greedy=lambda agent, state: agent.act({"state": state}, deterministic=True)[0],
        extra=lambda agent: f"alpha {agent.entropy_alpha:.3f}  ",
    )
