"""DQN with Hindsight Experience Replay on bit flipping: ``python examples/framework_examples/her_bitflip.py``.

The agent sees 10 random bits and a random goal pattern and flips one bit per step;
the reward is -1 on every step until the bits equal the goal (reward 0, the episode
ends), for at most 10 steps. Random exploration almost never reaches a goal, so plain
DQN sees no reward but -1; HER stores every episode again with goals it did reach.

Solved once the success rate of the last 50 episodes stays above 0.9 for 10 episodes.

Options: ``--episodes N`` (cap), ``--seed S`` and ``--plot PATH`` (learning-curve PNG,
default ``her_bitflip_curve.png``, ``""`` for none).
"""

import gymnasium as gym
import numpy as np
import torch
from _common import Progress, parse_args
from torch import nn

from machin.frame.algorithms import DQN
from machin.frame.buffers import HindsightReplay

N_BITS = 10


class BitFlippingEnv(gym.Env):
    """A goal-conditioned environment in the gymnasium-robotics convention (dict observations)."""

    def __init__(self, n_bits: int = N_BITS):
        self.n_bits = n_bits
        bits = gym.spaces.MultiBinary(n_bits)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = gym.spaces.Discrete(n_bits)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.bits = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self.goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        self.bits[action] = 1.0 - self.bits[action]
        self.steps += 1
        success = bool(reached(self.bits, self.goal, {}))
        reward = float(self.compute_reward(self.bits, self.goal, {}))
        return self._observe(), reward, success, self.steps >= self.n_bits, {"is_success": success}

    def compute_reward(self, achieved_goal, desired_goal, info):
        """0 where all bits equal the goal's, else -1 (vectorised over the leading dimensions)."""
        return (
            -(np.asarray(achieved_goal) != np.asarray(desired_goal)).any(axis=-1).astype(np.float32)
        )

    def _observe(self):
        return {
            "observation": self.bits.copy(),
            "achieved_goal": self.bits.copy(),
            "desired_goal": self.goal.copy(),
        }


def reached(achieved_goal, desired_goal, info):
    """Whether the goal is reached (the episode then ends): the terminal flag of relabelled steps."""
    return (np.asarray(achieved_goal) == np.asarray(desired_goal)).all(axis=-1)


class GoalQNet(nn.Module):
    """Q values of flipping each bit, given the bits and the goal."""

    def __init__(self, n_bits: int = N_BITS):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * n_bits, 128), nn.ReLU(), nn.Linear(128, n_bits))

    def forward(self, observation, desired_goal):
        return self.net(torch.cat([observation, desired_goal], dim=1))


def as_state(observation):
    """The environment's dict of arrays as the state dict of ``[1, n]`` tensors the networks take."""
    return {key: torch.as_tensor(value).view(1, -1) for key, value in observation.items()}


def main():
    args = parse_args(__doc__, episodes=2000, gif=False)
    torch.manual_seed(args.seed)
    env = BitFlippingEnv()
    dqn = DQN(
        GoalQNet(),
        GoalQNet(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=128,
        discount=0.98,
        epsilon_decay=0.999,
        epsilon_min=0.05,
        update_rate=0.05,
    )
    her = HindsightReplay(
        env.compute_reward,
        "future",
        k=4,
        terminal=reached,
        generator=torch.Generator().manual_seed(args.seed),
    )
    progress = Progress(
        "DQN+HER", f"bit flipping ({N_BITS} bits)", solved_reward=-N_BITS, solved_repeat=10
    )
    successes, total_steps = [], 0
    observation, _ = env.reset(seed=args.seed)
    for _ in range(args.episodes):
        state, steps, done, total = as_state(observation), [], False, 0.0
        while not done:
            action = dqn.act_discrete_with_noise(state)
            observation, reward, terminated, truncated, info = env.step(action.item())
            next_state = as_state(observation)
            steps.append(
                {
                    "state": state,
                    "action": {"action": action},
                    "next_state": next_state,
                    "reward": reward,
                    "terminal": terminated,
                }
            )
            state, done, total = next_state, terminated or truncated, total + reward
        her.store_episode(dqn, steps)
        for _ in steps:
            dqn.update()
        total_steps += len(steps)
        successes.append(float(info["is_success"]))
        rate = float(np.mean(successes[-50:]))
        # Every return beats -N_BITS once goals are reached: the success rate decides "solved".
        can_solve = len(successes) >= 50 and rate > 0.9
        if progress.end_episode(total, total_steps, f"success {rate:.2f}  ", can_solve):
            break
        observation, _ = env.reset()
    progress.write_curve(args.plot)


if __name__ == "__main__":
    main()
