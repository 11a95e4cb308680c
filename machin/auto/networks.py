"""Small default networks that ``python -m machin.auto generate`` writes into configs.

Each is a multilayer perceptron over a flat observation (``state``, shape ``[B, state_dim]``)
with ``hidden`` units in each of ``layers`` hidden layers (ReLU), and takes only JSON
arguments, so a config can name it by its class path. Action bounds are lists of numbers.

The stochastic actors take ``deterministic``: with ``deterministic=True`` they return their
most likely action (the argmax, the mean, the squashed mean) in their usual output, as
``act(state, deterministic=True)`` of SAC and the A2C family asks
(:class:`~machin.frame.algorithms.policy.StochasticActing`).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import nn
from torch.distributions import Categorical, Normal


def mlp(inputs: int, outputs: int, hidden: int = 64, layers: int = 2) -> nn.Sequential:
    """A perceptron from ``inputs`` to ``outputs`` features: ``layers`` hidden layers of
    ``hidden`` units with ReLU, then a linear output layer."""
    modules = []
    size = inputs
    for _ in range(layers):
        modules += [nn.Linear(size, hidden), nn.ReLU()]
        size = hidden
    modules.append(nn.Linear(size, outputs))
    return nn.Sequential(*modules)


class _Bounds(nn.Module):
    """Holds the centre and half-width of a box of actions as buffers (saved with the network)."""

    def __init__(self, low: Sequence[float], high: Sequence[float]):
        super().__init__()
        low_t = torch.as_tensor(low, dtype=torch.float32).view(1, -1)
        high_t = torch.as_tensor(high, dtype=torch.float32).view(1, -1)
        self.register_buffer("centre", (high_t + low_t) / 2)
        self.register_buffer("half_width", (high_t - low_t) / 2)

    def forward(self, unit: torch.Tensor) -> torch.Tensor:
        """Map ``unit`` in ``[-1, 1]`` into the box."""
        return self.centre + self.half_width * unit


class QNet(nn.Module):
    """Q values of every discrete action: ``state -> [B, action_num]`` (DQN family).

    Args:
        state_dim: Size of the flat observation.
        action_num: Number of discrete actions.
        hidden: Units of each hidden layer.
        layers: Number of hidden layers.
    """

    def __init__(self, state_dim: int, action_num: int, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.net = mlp(state_dim, action_num, hidden, layers)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """The output for a batch of flat observations ``state``."""
        return self.net(state)


class DistributionalQNet(nn.Module):
    """A probability distribution over ``atoms`` values per action: ``[B, action_num, atoms]`` (RAINBOW).

    Args:
        state_dim, action_num, hidden, layers: As for :class:`QNet`.
        atoms: Number of values of each distribution.
    """

    def __init__(
        self, state_dim: int, action_num: int, atoms: int = 51, hidden: int = 64, layers: int = 2
    ):
        super().__init__()
        self.action_num, self.atoms = action_num, atoms
        self.net = mlp(state_dim, action_num * atoms, hidden, layers)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """The output for a batch of flat observations ``state``."""
        return torch.softmax(self.net(state).view(-1, self.action_num, self.atoms), dim=-1)


class DeterministicActor(nn.Module):
    """An action inside the box ``[low, high]``, through ``tanh`` (DDPG family).

    Args:
        state_dim, hidden, layers: As for :class:`QNet`.
        action_dim: Size of the action.
        low, high: The bounds of the action box, one number per dimension.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        low: Sequence[float],
        high: Sequence[float],
        hidden: int = 64,
        layers: int = 2,
    ):
        super().__init__()
        self.net = mlp(state_dim, action_dim, hidden, layers)
        self.bounds = _Bounds(low, high)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """The output for a batch of flat observations ``state``."""
        return self.bounds(torch.tanh(self.net(state)))


class QCritic(nn.Module):
    """``Q(state, action) -> [B, 1]`` for continuous actions (DDPG family, SAC).

    Args:
        state_dim, hidden, layers: As for :class:`QNet`.
        action_dim: Size of the action.
    """

    def __init__(self, state_dim: int, action_dim: int, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.net = mlp(state_dim + action_dim, 1, hidden, layers)

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The value of taking ``action`` in ``state``."""
        return self.net(torch.cat([state, action], dim=1))


class ValueCritic(nn.Module):
    """``V(state) -> [B, 1]`` (A2C family).

    Args:
        state_dim, hidden, layers: As for :class:`QNet`.
    """

    def __init__(self, state_dim: int, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.net = mlp(state_dim, 1, hidden, layers)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """The output for a batch of flat observations ``state``."""
        return self.net(state)


class CategoricalActor(nn.Module):
    """Samples a discrete action or scores a given one: ``(action [B, 1], log_prob [B], entropy [B])``.

    Args:
        state_dim, action_num, hidden, layers: As for :class:`QNet`.
    """

    def __init__(self, state_dim: int, action_num: int, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.net = mlp(state_dim, action_num, hidden, layers)

    def forward(
        self,
        state: torch.Tensor,
        action: Optional[torch.Tensor] = None,
        deterministic: bool = False,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample an action for ``state`` (``deterministic``: the most probable one), or score
        the given ``action``."""
        logits = self.net(state)
        dist = Categorical(logits=logits)
        if action is None:
            action = logits.argmax(dim=1) if deterministic else dist.sample()
            action = action.view(-1, 1)
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class GaussianActor(nn.Module):
    """A diagonal Gaussian policy with a learned, state-independent log standard deviation:
    ``(action [B, action_dim], log_prob [B, 1], entropy [B, 1])`` (A2C family on boxes).

    Actions are not squashed: the trainer clips them to the box when it steps the environment.

    Args:
        state_dim, hidden, layers: As for :class:`QNet`.
        action_dim: Size of the action.
        initial_log_std: The log standard deviation before training.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        hidden: int = 64,
        layers: int = 2,
        initial_log_std: float = 0.0,
    ):
        super().__init__()
        self.net = mlp(state_dim, action_dim, hidden, layers)
        self.log_std = nn.Parameter(torch.full((1, action_dim), float(initial_log_std)))

    def forward(
        self,
        state: torch.Tensor,
        action: Optional[torch.Tensor] = None,
        deterministic: bool = False,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample an action for ``state`` (``deterministic``: the mean), or score the given
        ``action``."""
        mean = self.net(state)
        dist = Normal(mean, self.log_std.clamp(-20, 2).exp().expand_as(mean))
        if action is None:
            action = mean if deterministic else dist.sample()
        return (
            action,
            dist.log_prob(action).sum(dim=1, keepdim=True),
            dist.entropy().sum(dim=1, keepdim=True),
        )


class SquashedGaussianActor(nn.Module):
    """A Gaussian policy squashed by ``tanh`` into ``[low, high]``, sampled with ``rsample``:
    ``(action, log_prob [B, 1], entropy [B, 1])``; the log-probability accounts for the
    squashing (SAC).

    Args:
        state_dim, hidden, layers: As for :class:`QNet`.
        action_dim: Size of the action.
        low, high: The bounds of the action box, one number per dimension.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        low: Sequence[float],
        high: Sequence[float],
        hidden: int = 64,
        layers: int = 2,
    ):
        super().__init__()
        self.body = mlp(state_dim, hidden, hidden, layers - 1) if layers > 1 else nn.Identity()
        width = hidden if layers > 1 else state_dim
        self.mean = nn.Linear(width, action_dim)
        self.log_std = nn.Linear(width, action_dim)
        self.bounds = _Bounds(low, high)

    def forward(
        self,
        state: torch.Tensor,
        action: Optional[torch.Tensor] = None,
        deterministic: bool = False,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample an action for ``state`` (``deterministic``: the squashed mean), or score the
        given ``action``."""
        features = torch.relu(self.body(state)) if not isinstance(self.body, nn.Identity) else state
        mean = self.mean(features)
        dist = Normal(mean, self.log_std(features).clamp(-20, 2).exp())
        if action is None:
            raw = mean if deterministic else dist.rsample()
        else:
            unit = (action - self.bounds.centre) / self.bounds.half_width
            raw = torch.atanh(unit.clamp(-0.999, 0.999))
        squashed = torch.tanh(raw)
        correction = torch.log(self.bounds.half_width * (1 - squashed.pow(2)) + 1e-6)
        log_prob = (dist.log_prob(raw) - correction).sum(dim=1, keepdim=True)
        return self.bounds(squashed), log_prob, dist.entropy().sum(dim=1, keepdim=True)
