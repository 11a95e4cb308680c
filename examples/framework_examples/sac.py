"""SAC on Pendulum-v1: ``python examples/framework_examples/sac.py``.

Uses the training loop of ddpg.py: one update per environment step after a warm-up
of random actions, one line per episode with the smoothed return (0.9 / 0.1, started
at the first episode's return) and the entropy weight alpha; the run stops once the
smoothed return exceeds -200.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``sac_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the
trained policy's most likely action, ``sac.act(..., deterministic=True)``, default
``sac_episode.gif``).
"""

import torch
from _common import parse_args
from ddpg import ACTION_RANGE, run
from torch import nn
from torch.distributions import Normal

from machin.frame.algorithms import SAC


class Actor(nn.Module):
    """Gaussian policy squashed by tanh into the action range, drawn with ``rsample``.

    Returns ``(action, log_prob, entropy)``; the log-probability accounts for the
    squashing, so actions are never clamped. With ``deterministic=True`` (what
    ``SAC.act(..., deterministic=True)`` passes) the action is the squashed mean, the
    policy's most likely action.
    """

    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.mu = nn.Linear(hidden, action_dim)
        self.log_sigma = nn.Linear(hidden, action_dim)

    def forward(self, state, action=None, deterministic=False):
        h = self.body(state)
        mu = self.mu(h)
        dist = Normal(mu, self.log_sigma(h).clamp(-10, 2).exp())
        if action is not None:
            raw = torch.atanh((action / ACTION_RANGE).clamp(-0.999, 0.999))
        else:
            raw = mu if deterministic else dist.rsample()
        squashed = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(ACTION_RANGE * (1 - squashed.pow(2)) + 1e-6)
        return squashed * ACTION_RANGE, log_prob.sum(dim=1, keepdim=True), dist.entropy()


class Critic(nn.Module):
    """Q(s, a)."""

    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim + action_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    sac = SAC(
        Actor(),
        Critic(),
        Critic(),
        Critic(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        actor_learning_rate=2e-3,
        critic_learning_rate=2e-3,
        alpha_learning_rate=5e-3,
        update_rate=0.01,
        replay_size=100000,
    )
    # The training loop of ddpg.py, exploring with the sampled policy and recording the most
    # likely action.
    run(
        sac,
        episodes=args.episodes,
        seed=args.seed,
        plot=args.plot,
        gif=args.gif,
        name="SAC",
        explore=lambda agent, state: agent.act({"state": state})[0],
        greedy=lambda agent, state: agent.act({"state": state}, deterministic=True)[0],
        extra=lambda agent: f"alpha {agent.entropy_alpha:.3f}  ",
    )
