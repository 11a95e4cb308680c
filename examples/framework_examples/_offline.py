"""What the offline examples (cql.py, iql.py) share: a Pendulum dataset and the training loop.

The dataset mixes episodes of the scripted controller of _pendulum_expert.py
(energy-pumping swing-up, then a PD controller near the top) with episodes of uniformly
random torques, half and half: the
data an offline algorithm must learn from without ever acting in the environment. The
loop trains on it and, after every round of updates, plays one episode with the
policy's most likely action to show how far it has come.
"""

from __future__ import annotations

from typing import Callable, List

import gymnasium as gym
import numpy as np
import torch
from _common import Progress, record_episode
from _pendulum_expert import expert_action

ENV_ID = "Pendulum-v1"
ACTION_RANGE = 2.0  # Pendulum torques lie in [-2, 2]


def play(env: gym.Env, policy: Callable[[np.ndarray], np.ndarray], seed: int) -> List[dict]:
    """One episode of ``policy`` as transitions ready for ``store_episode``."""
    obs, _ = env.reset(seed=seed)
    episode, done = [], False
    while not done:
        action = policy(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        episode.append(
            {
                "state": {"state": torch.tensor(obs, dtype=torch.float32).view(1, -1)},
                "action": {"action": torch.tensor(action, dtype=torch.float32).view(1, -1)},
                "next_state": {"state": torch.tensor(next_obs, dtype=torch.float32).view(1, -1)},
                "reward": float(reward),
                "terminal": bool(terminated),
            }
        )
        obs, done = next_obs, terminated or truncated
    return episode


def store_mixed_dataset(agent, episodes_each: int, seed: int) -> None:
    """Store ``episodes_each`` scripted and as many random episodes in ``agent``'s buffer."""
    env = gym.make(ENV_ID)
    env.action_space.seed(seed)
    for i in range(episodes_each):
        agent.store_episode(play(env, expert_action, seed + i))
        agent.store_episode(play(env, lambda _: env.action_space.sample(), seed + 1000 + i))
    env.close()
    print(f"dataset: {agent.replay_buffer.size()} transitions, half scripted, half random")


def run(agent, *, episodes: int, seed: int, plot: str, gif: str, name: str, updates: int = 100):
    """``episodes`` rounds of ``updates`` updates, each followed by one greedy evaluation episode.

    The progress lines show each evaluation return, and as "steps" the updates done so
    far; the learning curve shows the evaluation returns; ``gif`` records one more episode.
    """
    store_mixed_dataset(agent, episodes_each=10, seed=seed)
    env = gym.make(ENV_ID)

    def greedy(state: torch.Tensor) -> torch.Tensor:
        return agent.act({"state": state}, deterministic=True)[0]

    progress = Progress(name, ENV_ID, solved_reward=-200.0, start=None)
    for round_index in range(1, episodes + 1):
        for _ in range(updates):
            agent.update()

        def policy(obs):
            with torch.no_grad():
                return (
                    greedy(torch.tensor(obs, dtype=torch.float32).view(1, -1)).numpy().reshape(-1)
                )

        total = sum(step["reward"] for step in play(env, policy, seed + 10000 + round_index))
        if progress.end_episode(total, round_index * updates):
            break
    env.close()
    progress.write_curve(plot)
    if gif:
        record_episode(ENV_ID, greedy, gif, seed=seed)
    return progress.solved
