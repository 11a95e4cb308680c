"""A scripted near-expert for Pendulum-v1, and a Minari dataset recorded from it.

The offline examples (and the offline learning tests, which load this file) need a dataset
of good behaviour without downloading one. Instead of a trained agent, this controller
pumps energy into the pendulum until it nearly reaches the top, then holds it upright
with a PD law: a few lines that score about -150 per episode, as a trained SAC does.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

# Pendulum-v1: theta'' = 3 g / (2 l) sin(theta) + 3 / (m l^2) u, with g = 10, m = l = 1.
_GRAVITY_TERM = 15.0
_UPRIGHT_ENERGY = _GRAVITY_TERM  # energy 0.5 theta'^2 + 15 cos(theta) at rest at the top


def expert_action(observation: np.ndarray) -> np.ndarray:
    """The controller's torque (``[1]``, within ``[-2, 2]``) for ``[cos theta, sin theta, theta']``."""
    cos, sin, speed = (float(v) for v in observation)
    angle = math.atan2(sin, cos)  # 0 is upright
    if cos > 0.85:  # near the top: a PD law holds it there
        torque = -(12.0 * angle + 2.5 * speed)
    else:  # pump energy (it grows at the rate 3 u theta') until it is the upright one
        energy = 0.5 * speed**2 + _GRAVITY_TERM * cos
        torque = (2.0 if speed >= 0 else -2.0) if energy < _UPRIGHT_ENERGY else 0.0
    return np.array([min(2.0, max(-2.0, torque))], dtype=np.float32)


def record_dataset(
    dataset_id: str, episodes: int, seed: int, noise: float = 0.0, max_episode_steps: int = 200
):
    """Record ``episodes`` Pendulum-v1 episodes of the controller into a local Minari dataset.

    The dataset is written under ``MINARI_DATASETS_PATH`` with
    ``minari.create_dataset_from_buffers`` (Minari's ``DataCollector`` would do the same
    step by step, but needs ``minari[create]``, which installs jax). ``noise``: the
    standard deviation of Gaussian noise added to the torques (a less-than-expert
    dataset); ``max_episode_steps``: where episodes are truncated.
    """
    import minari
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(seed)
    env = gym.make("Pendulum-v1", max_episode_steps=max_episode_steps)
    recorded = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        steps = {
            "observations": [observation],
            "actions": [],
            "rewards": [],
            "terminations": [],
            "truncations": [],
        }
        done = False
        while not done:
            action = expert_action(observation)
            if noise:
                action = np.clip(action + rng.normal(0.0, noise, 1), -2.0, 2.0).astype(np.float32)
            observation, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(steps, (observation, action, reward, terminated, truncated)):
                steps[key].append(value)
            done = terminated or truncated
        arrays = {key: np.asarray(values) for key, values in steps.items()}
        recorded.append(EpisodeBuffer(id=episode, seed=seed + episode, **arrays))
    return minari.create_dataset_from_buffers(
        dataset_id,
        recorded,
        env=env,
        eval_env=env,
        algorithm_name="scripted energy + PD",
        author="machin",
        author_email="-",
        code_permalink="examples/framework_examples/_pendulum_expert.py",
        description="Pendulum-v1 played by a scripted energy-pumping and PD controller.",
    )
