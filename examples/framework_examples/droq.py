"""DroQ on Pendulum-v1: ``python examples/framework_examples/droq.py``.

REDQ with two critics regularised by dropout (rate 0.01) and layer normalisation; every
environment step makes 5 critic steps and one actor step (the paper: 20). Uses the
actor of sac.py and the loop and options of redq.py.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``droq_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the
trained policy's most likely action, ``act(..., deterministic=True)``, default
``droq_episode.gif``).
"""

import torch
from _common import parse_args
from redq import OPTIONS, run_ensemble
from sac import Actor
from torch import nn

from machin.frame.algorithms import DroQ


class DropoutCritic(nn.Module):
    """Q(s, a) with dropout and layer normalisation after each hidden layer."""

    def __init__(self, state_dim=3, action_dim=1, hidden=64, rate=0.01):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim + action_dim, hidden),
            nn.Dropout(rate),
            nn.LayerNorm(hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.Dropout(rate),
            nn.LayerNorm(hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    droq = DroQ(
        Actor(),
        [DropoutCritic(), DropoutCritic()],
        [DropoutCritic(), DropoutCritic()],
        torch.optim.Adam,
        nn.MSELoss(),
        update_times=5,
        policy_update_delay=5,
        **OPTIONS,
    )
    run_ensemble(droq, args, "DroQ")
