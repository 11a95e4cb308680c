"""The one set of small test networks and data helpers of the algorithm tests.

Every family uses these: value networks (DQN, DQNPer, RAINBOW, R2D1), deterministic
actors and critics (DDPG, DDPGPer, HDDPG, TD3, MADDPG), stochastic policies and
value critics (A2C, PPO, TRPO, SAC, A3C, IMPALA), and one comparison helper,
:func:`same`, that also checks the lengths. The environment loops live in
``loops.py``.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import nn
from torch.distributions import Normal

from machin.frame.transition import Transition

# Pendulum-like sizes of the DDPG family's defaults.
STATE_DIM, ACTION_DIM, ACTION_RANGE = 3, 1, 2.0


# -- comparing parameters ---------------------------------------------------------------------
def parameters(net: nn.Module) -> List[torch.Tensor]:
    """Detached copies of a network's parameters."""
    return [p.detach().clone() for p in net.parameters()]


def same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    """Whether two parameter lists have the same length and equal tensors."""
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, outputs),
    )


# -- value networks (DQN family) --------------------------------------------------------------
class SummingLoss(nn.Module):
    """A criterion that claims per-sample losses (``reduction = "none"``) yet returns their sum."""

    reduction = "none"

    def forward(self, target, predicted):
        return ((target - predicted) ** 2).sum()


class QNet(nn.Module):
    """MLP Q network over a state called ``state``."""

    def __init__(self, state_dim: int = 4, action_num: int = 2, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_num),
        )

    def forward(self, state):
        return self.net(state)


class QNetWithHidden(QNet):
    """Returns an extra output after the Q values, like a recurrent network's hidden state."""

    def forward(self, state, hidden=None):
        hidden = torch.zeros(state.shape[0], 3) if hidden is None else hidden + 1
        return self.net(state), hidden


class DuelingQNet(nn.Module):
    def __init__(self, state_dim: int = 4, action_num: int = 2, hidden: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU())
        self.adv = nn.Linear(hidden, action_num)
        self.val = nn.Linear(hidden, 1)

    def forward(self, state):
        h = self.body(state)
        adv = self.adv(h)
        return self.val(h) + adv - adv.mean(dim=1, keepdim=True)


class DistQNet(nn.Module):
    """Distributional Q network: softmax over atoms for each action."""

    def __init__(self, state_dim: int = 4, action_num: int = 2, atoms: int = 51, hidden: int = 64):
        super().__init__()
        self.action_num, self.atoms = action_num, atoms
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_num * atoms),
        )

    def forward(self, state):
        return torch.softmax(self.net(state).view(-1, self.action_num, self.atoms), dim=-1)


class GRUQNet(nn.Module):
    """One time step of a recurrent Q network: ``(q[B, A], new_hidden[B, H])``."""

    def __init__(self, state_dim: int = 2, action_num: int = 2, size: int = 8):
        super().__init__()
        self.size = size
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRUCell(size, size)
        self.head = nn.Linear(size, action_num)

    def forward(self, state, hidden=None):
        hidden = self.gru(torch.relu(self.fc(state)), hidden)
        return self.head(hidden), hidden


def transition(state, action, next_state, reward, terminal, **custom):
    """One discrete-action transition as a dict, states under the key ``state``."""
    return {
        "state": {"state": torch.as_tensor(state, dtype=torch.float32).view(1, -1)},
        "action": {"action": torch.as_tensor([[action]], dtype=torch.long)},
        "next_state": {"state": torch.as_tensor(next_state, dtype=torch.float32).view(1, -1)},
        "reward": float(reward),
        "terminal": bool(terminal),
        **custom,
    }


# -- deterministic actors and critics (DDPG family, MADDPG) ------------------------------------
class Actor(nn.Module):
    """Deterministic actor for Pendulum-like tasks: ``tanh`` output scaled to the action range."""

    def __init__(
        self,
        state_dim: int = STATE_DIM,
        action_dim: int = ACTION_DIM,
        action_range: float = ACTION_RANGE,
        hidden: int = 16,
    ):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_dim),
        )
        self.action_range = action_range

    def forward(self, state):
        return torch.tanh(self.net(state)) * self.action_range


class ActorWithExtra(Actor):
    """Actor that also returns a hidden-state-like extra output."""

    def forward(self, state, hidden=None):
        return super().forward(state), torch.ones(state.shape[0], 2)


class SigmoidActor(nn.Module):
    """Deterministic actor with a ``sigmoid`` output in [0, 1] (the simple_spread action box)."""

    def __init__(self, state_dim: int, action_dim: int, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_dim),
        )

    def forward(self, state):
        return torch.sigmoid(self.net(state))


class SigmoidActorWithExtra(SigmoidActor):
    """:class:`SigmoidActor` that also returns a hidden-state-like extra output."""

    def forward(self, state):
        return super().forward(state), torch.ones(state.shape[0], 2)


class ActorDiscrete(nn.Module):
    """Actor that outputs action probabilities ``[B, action_num]``."""

    def __init__(self, state_dim: int = STATE_DIM, action_num: int = 4):
        super().__init__()
        self.fc = nn.Linear(state_dim, action_num)

    def forward(self, state):
        return torch.softmax(self.fc(state), dim=1)


class Critic(nn.Module):
    """``Q(state, action) -> [B, 1]`` (for MADDPG: the joint state and action of the visible agents)."""

    def __init__(self, state_dim: int = STATE_DIM, action_dim: int = ACTION_DIM, hidden: int = 16):
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


class RecordingCritic(Critic):
    """Critic that remembers the ``(state, action)`` inputs of its calls."""

    def __init__(self, state_dim: int, action_dim: int):
        super().__init__(state_dim, action_dim)
        self.calls: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, state, action):
        self.calls.append((state.detach().clone(), action.detach().clone()))
        return super().forward(state, action)


class LinearActor(nn.Module):
    """``a = w * s`` with one scalar state and action: for hand-computed targets."""

    def __init__(self, w: float):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[w]]))

    def forward(self, state):
        return state @ self.w


class LinearCritic(nn.Module):
    """``Q = u * s + v * a``: for hand-computed targets."""

    def __init__(self, u: float, v: float):
        super().__init__()
        self.u = nn.Parameter(torch.tensor(u))
        self.v = nn.Parameter(torch.tensor(v))

    def forward(self, state, action):
        return self.u * state + self.v * action


def pendulum_nets(hidden: int = 16) -> Tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """actor, actor_target, critic, critic_target with small hidden layers."""
    return Actor(hidden=hidden), Actor(hidden=hidden), Critic(hidden=hidden), Critic(hidden=hidden)


def random_transition(terminal: bool = False, reward: float = None) -> Transition:
    """One Pendulum-shaped transition with random tensors."""
    return Transition(
        state={"state": torch.randn(1, STATE_DIM)},
        action={"action": torch.rand(1, ACTION_DIM) * 4 - 2},
        next_state={"state": torch.randn(1, STATE_DIM)},
        reward=float(torch.randn(()).item()) if reward is None else reward,
        terminal=terminal,
    )


def fill(algorithm, count: int = 64) -> None:
    """Store ``count`` random Pendulum-shaped transitions as one episode."""
    algorithm.store_episode([random_transition() for _ in range(count)])


def make_networks(
    state_dims: Sequence[int],
    action_dims: Sequence[int],
    visible: Sequence[Sequence[int]],
    critic_class=Critic,
    actor_class=SigmoidActor,
):
    """MADDPG's actors, actor_targets, critics, critic_targets for agents of the given sizes.

    Critic ``i`` takes the summed state and action sizes of the agents in ``visible[i]``.
    """

    def actors():
        return [actor_class(s, a) for s, a in zip(state_dims, action_dims)]

    def critics():
        return [
            critic_class(sum(state_dims[j] for j in v), sum(action_dims[j] for j in v))
            for v in visible
        ]

    return actors(), actors(), critics(), critics()


def random_step(
    state_dims: Sequence[int], action_dims: Sequence[int], terminal: bool = False
) -> List[Transition]:
    """One time step of random transitions, one per agent."""
    return [
        Transition(
            state={"state": torch.randn(1, s)},
            action={"action": torch.rand(1, a)},
            next_state={"state": torch.randn(1, s)},
            reward=float(torch.randn(())),
            terminal=terminal,
        )
        for s, a in zip(state_dims, action_dims)
    ]


# -- simple_spread (3 agents, continuous actions) ---------------------------------------------
SPREAD_AGENTS, SPREAD_STATE_DIM, SPREAD_ACTION_DIM, SPREAD_CYCLES = 3, 18, 5, 25


class SpreadActor(nn.Module):
    """Actor for simple_spread: a planar push ``(x, y)`` in [-1, 1]^2 written as the env's 5 numbers.

    simple_spread's continuous action is ``[no-op, +x, -x, +y, -y]`` in [0, 1]^5 and only the
    differences ``+x - (-x)`` and ``+y - (-y)`` move the agent; this actor outputs
    ``[0, (1 + x) / 2, (1 - x) / 2, (1 + y) / 2, (1 - y) / 2]``, so no saturated output pair can
    cancel out and its gradient never vanishes on redundant coordinates.
    """

    def __init__(self, state_dim: int = 18, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 2),
        )

    def forward(self, state):
        push = torch.tanh(self.net(state))
        half = (1 + torch.stack([push[:, 0], -push[:, 0], push[:, 1], -push[:, 1]], dim=1)) / 2
        return torch.cat([torch.zeros_like(push[:, :1]), half], dim=1)


def spread_maddpg(pool_type: str = "thread", pool_size=1, **kwargs):
    """A MADDPG for simple_spread where every critic sees all three agents."""
    from machin.frame.algorithms.maddpg import MADDPG

    visible = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    hidden = kwargs.pop("hidden", 64)
    actors = [SpreadActor(SPREAD_STATE_DIM, hidden) for _ in range(2 * SPREAD_AGENTS)]
    critics = [
        Critic(SPREAD_STATE_DIM * 3, SPREAD_ACTION_DIM * 3, hidden)
        for _ in range(2 * SPREAD_AGENTS)
    ]
    return MADDPG(
        actors[:3],
        actors[3:],
        critics[:3],
        critics[3:],
        visible,
        torch.optim.Adam,
        nn.MSELoss(),
        pool_type=pool_type,
        pool_size=pool_size,
        **kwargs,
    )


# -- stochastic policies and value critics (A2C, PPO, TRPO, SAC, A3C, IMPALA) ------------------
class CategoricalActor(nn.Module):
    """Discrete policy: ``(action[B, 1], log_prob[B], entropy[B])``; log-probs of given actions."""

    def __init__(self, state_dim: int = 4, action_num: int = 2, hidden: int = 32):
        super().__init__()
        self.net = mlp(state_dim, action_num, hidden)

    def forward(self, state, action=None):
        # What torch.distributions.Categorical computes, without its per-call overhead.
        log_probs = torch.log_softmax(self.net(state), dim=1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=1)
        return action, log_probs.gather(1, action.view(-1, 1).long()).view(-1), entropy


class ColumnCategoricalActor(CategoricalActor):
    """Like :class:`CategoricalActor`, with ``[B, 1]`` log-probs and entropies and an extra output."""

    def forward(self, state, action=None):
        action, log_prob, entropy = super().forward(state, action)
        return action, log_prob.view(-1, 1), entropy.view(-1, 1), "extra"


class ValueCritic(nn.Module):
    def __init__(self, state_dim: int = 4, hidden: int = 32):
        super().__init__()
        self.net = mlp(state_dim, 1, hidden)

    def forward(self, state):
        return self.net(state)


class TanhGaussianActor(nn.Module):
    """Continuous policy squashed into ``[-action_range, action_range]``, drawn with ``rsample``."""

    def __init__(
        self, state_dim: int = 3, action_dim: int = 1, action_range: float = 2.0, hidden: int = 64
    ):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.mu = nn.Linear(hidden, action_dim)
        self.log_sigma = nn.Linear(hidden, action_dim)
        self.action_range = action_range

    def forward(self, state, action=None):
        h = self.body(state)
        dist = Normal(self.mu(h), self.log_sigma(h).clamp(-10, 2).exp())
        raw = (
            dist.rsample()
            if action is None
            else torch.atanh((action / self.action_range).clamp(-0.999, 0.999))
        )
        squashed = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(self.action_range * (1 - squashed.pow(2)) + 1e-6)
        return squashed * self.action_range, log_prob.sum(dim=1, keepdim=True), dist.entropy()


class QCritic(nn.Module):
    def __init__(self, state_dim: int = 3, action_dim: int = 1, hidden: int = 64):
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


def step_dict(state, action, next_state, reward, terminal, **custom):
    """One transition as a dict, states under the key ``state``, the action as given."""
    return {
        "state": {"state": torch.as_tensor(state, dtype=torch.float32).view(1, -1)},
        "action": {"action": torch.as_tensor(action).view(1, -1)},
        "next_state": {"state": torch.as_tensor(next_state, dtype=torch.float32).view(1, -1)},
        "reward": float(reward),
        "terminal": bool(terminal),
        **custom,
    }


def episode_steps(
    length: int,
    state_dim: int = 4,
    *,
    seed: int = 0,
    discrete: bool = True,
    action_dim: int = 1,
    terminal_at_end: bool = True,
    **custom,
):
    """A chained episode of ``length`` random steps (``next_state`` of one is ``state`` of the next)."""
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(length + 1, state_dim, generator=gen)
    steps = []
    for i in range(length):
        action = [[i % 2]] if discrete else torch.rand(1, action_dim, generator=gen) * 2 - 1
        steps.append(
            step_dict(
                states[i],
                action,
                states[i + 1],
                float(i % 3) - 0.5,
                terminal_at_end and i == length - 1,
                **custom,
            )
        )
    return steps


# -- quantile networks (QR-DQN, IQN) ----------------------------------------------------------
class QuantileQNet(nn.Module):
    """QR-DQN network: ``quantiles[B, action_num, quantile_num]``."""

    def __init__(
        self, state_dim: int = 4, action_num: int = 2, quantiles: int = 8, hidden: int = 32
    ):
        super().__init__()
        self.action_num, self.quantiles = action_num, quantiles
        self.net = mlp(state_dim, action_num * quantiles, hidden)

    def forward(self, state):
        return self.net(state).view(-1, self.action_num, self.quantiles)


class ImplicitQuantileNet(nn.Module):
    """IQN network: state features times a cosine embedding of ``tau[B, N]`` -> ``[B, action_num, N]``."""

    def __init__(
        self, state_dim: int = 4, action_num: int = 2, hidden: int = 32, cosines: int = 16
    ):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU())
        self.embed = nn.Sequential(nn.Linear(cosines, hidden), nn.ReLU())
        self.head = nn.Sequential(
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, action_num)
        )
        self.register_buffer("frequencies", torch.arange(cosines) * torch.pi)

    def forward(self, state, tau):
        features = self.body(state).unsqueeze(1)  # [B, 1, H]
        cosine = torch.cos(tau.unsqueeze(-1) * self.frequencies)  # [B, N, C]
        return self.head(features * self.embed(cosine)).transpose(1, 2)  # [B, A, N]
