"""Small offline datasets and the yardsticks of the offline learning tests (CQL, IQL).

* :class:`PointReach` with :func:`point_reach_expert`: a one-dimensional continuous task
  and its expert, cheap enough for learning tests of a few seconds;
* :func:`cartpole_expert`: a scripted expert for CartPole-v1 (push towards where the pole falls);
* :func:`mixed_dataset`: episodes of the expert and of uniformly random actions, as transition
  dicts ready for ``store_episode``;
* :func:`behaviour_cloning`: the supervised baseline, a network fitted to the dataset's actions
  (squared error for continuous actions, cross-entropy for discrete ones);
* :func:`point_reach_data`: the PointReach dataset of the CQL and IQL tests with BC's return.

The policies are evaluated with :func:`machin.frame.offline.evaluate_policy`.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Union

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from machin.frame.offline import evaluate_policy

from .nets import TanhGaussianActor

Policy = Callable[[np.ndarray], np.ndarray]


class PointReach(gym.Env):
    """A point on a line that should reach and stay at 0: the cheapest continuous control task.

    Observation ``[x]`` with ``x`` in ``[-1, 1]`` (uniform at reset), action ``[a]`` in
    ``[-1, 1]``, ``x <- clip(x + 0.2 a, -1, 1)``, reward ``-|x|`` after the move, 20 steps
    per episode (truncated, never terminal). Full speed towards 0 is optimal: a policy that
    averages the expert's actions with random ones moves at half speed and pays for it.
    """

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.x, self.steps = 0.0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.steps = float(self.np_random.uniform(-1.0, 1.0)), 0
        return np.array([self.x], dtype=np.float32), {}

    def step(self, action):
        move = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1.0, 1.0))
        self.x = min(1.0, max(-1.0, self.x + 0.2 * move))
        self.steps += 1
        return np.array([self.x], dtype=np.float32), -abs(self.x), False, self.steps >= 20, {}


def point_reach_expert(obs: np.ndarray) -> np.ndarray:
    """Full speed towards 0, slowing down only to land on it."""
    return np.array([min(1.0, max(-1.0, -5.0 * float(obs[0])))], dtype=np.float32)


def cartpole_expert(obs: np.ndarray) -> int:
    """Action of a scripted CartPole-v1 controller: push towards where the pole is falling."""
    position, velocity, angle, angular_velocity = (float(v) for v in obs)
    return int(angle + 0.5 * angular_velocity + 0.01 * position + 0.1 * velocity > 0)


def _action_dict(env: gym.Env, action) -> Dict[str, torch.Tensor]:
    if isinstance(env.action_space, gym.spaces.Discrete):
        return {"action": torch.tensor([[int(action)]])}
    return {"action": torch.as_tensor(np.asarray(action), dtype=torch.float32).view(1, -1)}


def play(env: gym.Env, policy: Policy, seed: int) -> List[dict]:
    """One episode of ``policy`` as transition dicts (states under the key ``state``)."""
    obs, _ = env.reset(seed=seed)
    steps, done = [], False
    while not done:
        action = policy(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        steps.append(
            {
                "state": {"state": torch.as_tensor(obs, dtype=torch.float32).view(1, -1)},
                "action": _action_dict(env, action),
                "next_state": {"state": torch.as_tensor(next_obs, dtype=torch.float32).view(1, -1)},
                "reward": float(reward),
                "terminal": bool(terminated),
            }
        )
        obs, done = next_obs, terminated or truncated
    return steps


def mixed_dataset(
    env: Union[str, gym.Env], expert: Policy, expert_episodes: int, random_episodes: int, seed: int
) -> List[List[dict]]:
    """Episodes of ``expert`` and of uniformly random actions (seeded), the expert's first.

    ``env`` is a gymnasium id or an environment (closed at the end either way).
    """
    env = gym.make(env) if isinstance(env, str) else env
    env.action_space.seed(seed)
    episodes = [play(env, expert, seed + i) for i in range(expert_episodes)]
    episodes += [
        play(env, lambda _: env.action_space.sample(), seed + 1000 + i)
        for i in range(random_episodes)
    ]
    env.close()
    return episodes


def behaviour_cloning(
    network: nn.Module, episodes: List[List[dict]], *, steps: int, batch_size: int, lr: float = 1e-3
) -> nn.Module:
    """Fit ``network`` (state -> action, or state -> action logits) to the dataset's actions.

    Continuous actions: squared error; discrete actions (integer tensors): cross-entropy.
    """
    steps_data = [step for episode in episodes for step in episode]
    states = torch.cat([step["state"]["state"] for step in steps_data])
    actions = torch.cat([step["action"]["action"] for step in steps_data])
    discrete = not actions.is_floating_point()
    optimizer = torch.optim.Adam(network.parameters(), lr=lr)
    for _ in range(steps):
        index = torch.randint(len(states), (batch_size,))
        output = network(states[index])
        if discrete:
            loss = nn.functional.cross_entropy(output, actions[index].view(-1))
        else:
            loss = (output - actions[index]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return network


def point_reach_data():
    """25 expert and 25 random PointReach episodes (1000 transitions) and BC's return on them."""
    episodes = mixed_dataset(PointReach(), point_reach_expert, 25, 25, seed=0)
    torch.manual_seed(0)
    bc = behaviour_cloning(DeterministicActor(), episodes, steps=500, batch_size=64)
    return episodes, evaluate_policy(lambda s: bc(s["state"]), PointReach(), episodes=20, seed=100)


# -- networks with hand-set outputs, for hand-computed losses -----------------------------------
class ConstantQ(nn.Module):
    """``Q(s, a) = c`` for every state and action (``c`` a parameter)."""

    def __init__(self, value: float = 0.0):
        super().__init__()
        self.c = nn.Parameter(torch.tensor(float(value)))

    def forward(self, state, action):
        return self.c.expand(state.shape[0], 1)


class ConstantV(nn.Module):
    """``V(s) = c`` for every state (``c`` a parameter)."""

    def __init__(self, value: float = 0.0):
        super().__init__()
        self.c = nn.Parameter(torch.tensor(float(value)))

    def forward(self, state):
        return self.c.expand(state.shape[0], 1)


# -- the policies of the learning tests -------------------------------------------------------
class DeterministicActor(nn.Module):
    """state -> action in ``[-action_range, action_range]`` (the behaviour-cloning network)."""

    def __init__(self, state_dim=1, action_range=1.0, hidden=32):
        super().__init__()
        self.action_range = action_range
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state):
        return torch.tanh(self.net(state)) * self.action_range


class SquashedGaussianActor(TanhGaussianActor):
    """TanhGaussianActor that gives its squashed mean when asked for ``deterministic``."""

    def forward(self, state, action=None, deterministic=False):
        if not deterministic:
            return super().forward(state, action)
        h = self.body(state)
        return torch.tanh(self.mu(h)) * self.action_range, torch.zeros(state.shape[0], 1)
