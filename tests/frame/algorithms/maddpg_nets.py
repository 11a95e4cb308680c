"""Networks, transitions and the simple_spread loop shared by the MADDPG tests."""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from machin.frame.transition import Transition


class Actor(nn.Module):
    """Deterministic actor with a ``sigmoid`` output in [0, 1] (the simple_spread action box)."""

    def __init__(self, state_dim: int, action_dim: int, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, action_dim))

    def forward(self, state):
        return torch.sigmoid(self.net(state))


class ActorWithExtra(Actor):
    """Actor that also returns a hidden-state-like extra output."""

    def forward(self, state):
        return super().forward(state), torch.ones(state.shape[0], 2)


class ActorDiscrete(nn.Module):
    """Actor that outputs action probabilities ``[B, action_num]``."""

    def __init__(self, state_dim: int, action_num: int):
        super().__init__()
        self.fc = nn.Linear(state_dim, action_num)

    def forward(self, state):
        return torch.softmax(self.fc(state), dim=1)


class Critic(nn.Module):
    """Centralised critic: ``Q(joint state, joint action) -> [B, 1]``."""

    def __init__(self, state_dim: int, action_dim: int, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim + action_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

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


def make_networks(state_dims: Sequence[int], action_dims: Sequence[int], visible: Sequence[Sequence[int]],
                  critic_class=Critic, actor_class=Actor):
    """actors, actor_targets, critics, critic_targets for agents of the given sizes.

    Critic ``i`` takes the summed state and action sizes of the agents in ``visible[i]``.
    """
    def actors():
        return [actor_class(s, a) for s, a in zip(state_dims, action_dims)]

    def critics():
        return [critic_class(sum(state_dims[j] for j in v), sum(action_dims[j] for j in v)) for v in visible]

    return actors(), actors(), critics(), critics()


def random_step(state_dims: Sequence[int], action_dims: Sequence[int], terminal: bool = False) -> List[Transition]:
    """One time step of random transitions, one per agent."""
    return [
        Transition(state={"state": torch.randn(1, s)}, action={"action": torch.rand(1, a)},
                   next_state={"state": torch.randn(1, s)}, reward=float(torch.randn(())), terminal=terminal)
        for s, a in zip(state_dims, action_dims)
    ]


def parameters(net: nn.Module) -> List[torch.Tensor]:
    """Detached copies of a network's parameters."""
    return [p.detach().clone() for p in net.parameters()]


def same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


# -- simple_spread (3 agents, continuous actions) -------------------------------------------
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
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))

    def forward(self, state):
        push = torch.tanh(self.net(state))
        half = (1 + torch.stack([push[:, 0], -push[:, 0], push[:, 1], -push[:, 1]], dim=1)) / 2
        return torch.cat([torch.zeros_like(push[:, :1]), half], dim=1)


def make_spread():
    """The multi-agent particle environment simple_spread_v3 (PettingZoo parallel API)."""
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=SPREAD_AGENTS, local_ratio=0.5, max_cycles=SPREAD_CYCLES,
                                         continuous_actions=True)


def _as_states(obs: Dict[str, np.ndarray], agents: Sequence[str]) -> List[torch.Tensor]:
    return [torch.as_tensor(obs[name], dtype=torch.float32).view(1, -1) for name in agents]


def run_spread(maddpg=None, *, episodes: int, seed: int, warmup_episodes: int = 10, update_every: int = 1,
               noise_sigma: float = 0.1, critic_only_updates: int = 0) -> Tuple[List[float], float]:
    """Play simple_spread for ``episodes`` episodes; return the mean per-agent return of each.

    Without ``maddpg`` the agents act uniformly at random (the baseline). With it they
    act randomly for ``warmup_episodes`` episodes, then with clipped normal noise, and
    ``maddpg.update()`` runs every ``update_every`` steps after the warm-up (the first
    ``critic_only_updates`` of them leave the actors alone, so that they follow a fitted critic).

    Returns:
        ``(returns per episode, seconds)``.
    """
    env = make_spread()
    rng = np.random.default_rng(seed)
    returns, steps, updates, start = [], 0, 0, time.time()
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        agents = list(env.agents)
        states, total = _as_states(obs, agents), 0.0
        learning = maddpg is not None and episode >= warmup_episodes
        while env.agents:
            if learning:
                actions = maddpg.act_with_noise([{"state": s} for s in states], noise_param=(0.0, noise_sigma),
                                                mode="normal")
                actions = [a.clamp(0.0, 1.0) for a in actions]
            else:
                actions = [torch.as_tensor(rng.random((1, SPREAD_ACTION_DIM)), dtype=torch.float32)
                           for _ in agents]
            obs, rewards, terminated, truncated, _ = env.step(
                {name: a.view(-1).numpy() for name, a in zip(agents, actions)})
            next_states = _as_states(obs, agents)
            if maddpg is not None:
                maddpg.store_transitions([
                    {"state": {"state": s}, "action": {"action": a}, "next_state": {"state": n},
                     "reward": float(rewards[name]), "terminal": bool(terminated[name])}
                    for name, s, a, n in zip(agents, states, actions, next_states)
                ])
            steps += 1
            if learning and steps % update_every == 0:
                maddpg.update(update_policy=updates >= critic_only_updates)
                updates += 1
            total += sum(float(rewards[name]) for name in agents) / len(agents)
            states = next_states
        returns.append(total)
    env.close()
    return returns, time.time() - start


def spread_maddpg(pool_type: str = "thread", pool_size: Optional[int] = 1, **kwargs):
    """A MADDPG for simple_spread where every critic sees all three agents."""
    from machin.frame.algorithms.maddpg import MADDPG

    visible = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    hidden = kwargs.pop("hidden", 64)
    actors = [SpreadActor(SPREAD_STATE_DIM, hidden) for _ in range(2 * SPREAD_AGENTS)]
    critics = [Critic(SPREAD_STATE_DIM * 3, SPREAD_ACTION_DIM * 3, hidden) for _ in range(2 * SPREAD_AGENTS)]
    return MADDPG(actors[:3], actors[3:], critics[:3], critics[3:], visible, torch.optim.Adam, nn.MSELoss(),
                  pool_type=pool_type, pool_size=pool_size, **kwargs)
