"""Building blocks of the recurrent-networks tutorial.

* :class:`History` keeps the last ``history_depth`` observations of an episode and
  hands them out as one ``(1, depth, *state_shape)`` tensor, zero-padded at the start.
* :class:`MaskVelocity` turns CartPole into a partially observable problem: the cart
  and pole velocities (observation indices 1 and 3) are removed, so a single
  observation shows where things are but not where they are going.
* :func:`make_env` builds the masked CartPole (the default), or an Atari game read
  from its 128 bytes of RAM when the optional ``ale-py`` package is installed.

Running this file plays ``--episodes`` random episodes on the masked task and shows
how a History fills up: ``python history.py [--episodes N] [--depth D]``.
"""

from __future__ import annotations

import argparse
from typing import Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

MASKED_CARTPOLE = "CartPole-v0"


class History:
    """The last ``history_depth`` observations, oldest first, zero-padded at the start.

    Args:
        history_depth: Number of observations kept (1 keeps only the newest one).
        state_shape: Shape of one observation without a batch dimension, e.g. ``(2,)``.

    Raises:
        ValueError: When ``history_depth`` is not a positive integer.
    """

    def __init__(self, history_depth: int, state_shape: Sequence[int]):
        if (
            isinstance(history_depth, bool)
            or not isinstance(history_depth, int)
            or history_depth < 1
        ):
            raise ValueError(f"history_depth must be a positive integer, got {history_depth!r}")
        self.state_shape: Tuple[int, ...] = tuple(int(s) for s in state_shape)
        self.history = [torch.zeros(self.state_shape) for _ in range(history_depth)]

    def append(self, state: torch.Tensor) -> History:
        """Push the newest observation and drop the oldest one.

        Args:
            state: A float32 tensor of shape ``state_shape``, or ``(1, *state_shape)``
                (the batch-of-one form used in transitions).

        Returns:
            The history itself, so that ``history.append(s).get()`` works.

        Raises:
            TypeError: When ``state`` is not a float32 tensor.
            ValueError: When its shape is neither ``state_shape`` nor ``(1, *state_shape)``.
        """
        if not isinstance(state, torch.Tensor):
            raise TypeError(f"state must be a torch.Tensor, got {type(state).__name__}")
        if state.dtype != torch.float32:
            raise TypeError(f"state must have dtype torch.float32, got {state.dtype}")
        shape = tuple(state.shape)
        if shape == (1, *self.state_shape):
            state = state[0]
        elif shape != self.state_shape:
            raise ValueError(
                f"state must have shape {self.state_shape} or {(1, *self.state_shape)}, got {shape}"
            )
        self.history.append(state.detach().clone())
        self.history.pop(0)
        return self

    def get(self) -> torch.Tensor:
        """All kept observations as one tensor of shape ``(1, history_depth, *state_shape)``."""
        return torch.stack(self.history).unsqueeze(0)


class MaskVelocity(gym.ObservationWrapper):
    """CartPole without its velocities: observations are ``[cart position, pole angle]``."""

    KEEP = (0, 2)

    def __init__(self, env: gym.Env):
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = gym.spaces.Box(
            low[list(self.KEEP)], high[list(self.KEEP)], dtype=np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Keep the position entries only."""
        return np.asarray(observation, dtype=np.float32)[list(self.KEEP)]


class RamToFloat(gym.ObservationWrapper):
    """Atari RAM bytes scaled to float32 values in ``[0, 1]``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = gym.spaces.Box(
            0.0, 1.0, env.observation_space.shape, dtype=np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Divide every byte by 255."""
        return np.asarray(observation, dtype=np.float32) / 255.0


def make_env(name: str = MASKED_CARTPOLE) -> gym.Env:
    """The masked CartPole for ``"CartPole-v0"``, otherwise an Atari game played from RAM.

    Args:
        name: ``"CartPole-v0"`` or a gymnasium Atari id such as ``"ALE/Pong-v5"``
            (needs the ``ale-py`` package), played from its 128 bytes of RAM. The
            ``-ram`` ids of older ale-py releases (``"ALE/Pong-ram-v5"``) are accepted too.

    Returns:
        An environment with flat float32 observations and a discrete action space.

    Raises:
        RuntimeError: When an Atari game is asked for and ``ale-py`` is not installed.
        ValueError: When ``name`` is neither CartPole-v0 nor an Atari id.
    """
    if name == MASKED_CARTPOLE:
        return MaskVelocity(gym.make(MASKED_CARTPOLE))
    if not name.startswith("ALE/"):
        raise ValueError(
            f"env must be {MASKED_CARTPOLE!r} or an Atari id such as 'ALE/Pong-v5', got {name!r}"
        )
    try:
        import ale_py
    except ImportError as error:
        raise RuntimeError(
            f"the Atari environment {name!r} needs the optional package ale-py, which is not "
            f"installed: run `pip install ale-py`, or use the default {MASKED_CARTPOLE!r}"
        ) from error
    gym.register_envs(ale_py)
    # ale-py 0.10 and later select RAM observations with obs_type; older ones had "-ram" ids.
    name = name.replace("-ram", "")
    return RamToFloat(gym.make(name, obs_type="ram"))


def to_state(observation: np.ndarray) -> torch.Tensor:
    """An observation as a ``[1, obs_dim]`` float32 tensor (a batch of one)."""
    return torch.as_tensor(observation, dtype=torch.float32).view(1, -1)


def demo(episodes: int, depth: int, seed: int) -> None:
    """Play random episodes on the masked task and print what the History holds."""
    env = make_env()
    env.action_space.seed(seed)
    for episode in range(1, episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        history = History(depth, env.observation_space.shape).append(to_state(obs))
        done, steps = False, 0
        while not done:
            if steps < depth:
                print(
                    f"episode {episode} step {steps}: history {tuple(history.get().shape)}\n"
                    f"{history.get()[0].numpy().round(3)}"
                )
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            history.append(to_state(obs))
            done, steps = terminated or truncated, steps + 1
        print(f"episode {episode}: {steps} random steps")
    env.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2, help="random episodes to play")
    parser.add_argument("--depth", type=int, default=3, help="history depth")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    demo(args.episodes, args.depth, args.seed)
