"""Plumbing shared by the framework examples: options, progress lines, learning curve, GIF.

Every example takes the same options (see :func:`parse_args`), prints one line per
episode through :class:`Progress`, writes its per-episode returns as a learning-curve
PNG at the end and, with ``--gif``, records one episode of the trained agent. The
distributed examples also take ``--nproc``, ``--backend`` and ``--address`` (the launch
options of ``tutorials/parallel_distributed/_launch_options.py``, re-exported here with
:func:`launch_kwargs` and :func:`output_path`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, List, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

from machin.utils.media import create_learning_curve, create_video

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"
sys.path.append(str(TUTORIALS / "parallel_distributed"))
# E402: found through the line above; F401: launch_kwargs and output_path are for the distributed examples
from _launch_options import (  # noqa: E402, F401
    add_launch_options,
    check_launch_options,
    launch_kwargs,
    output_path,
)

# The examples render only to arrays (render_mode="rgb_array"): SDL needs no display for that.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def script_name() -> str:
    """The running script's file name without ``.py`` (``dqn`` for ``dqn.py``)."""
    return Path(sys.argv[0]).stem or "example"


def parse_args(
    description: str,
    *,
    name: Optional[str] = None,
    episodes: int = 500,
    gif: bool = True,
    nproc: Optional[int] = None,
) -> argparse.Namespace:
    """Parse the options every example takes.

    Args:
        description: Shown by ``--help`` (the script's docstring).
        name: Stem of the default output files; the script's file name by default.
        episodes: Default of ``--episodes``.
        gif: Whether the script offers ``--gif`` (single-process examples do).
        nproc: For a distributed script, the default of ``--nproc`` (processes started on
            this machine when not run by torchrun, or Ray actors with ``--backend ray``), and
            the launch options ``--backend`` and ``--address``; ``None`` offers none of them.

    Returns:
        The namespace with ``episodes``, ``seed``, ``plot`` and (with ``gif``) ``gif``
        (with ``nproc``) ``nproc`` and ``backend`` (``"rpc"`` or ``"ray"``) and ``address``.
    """
    name = name or script_name()
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--episodes", type=int, default=episodes, help="stop after this many episodes"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plot",
        default=f"{name}_curve.png",
        metavar="PATH",
        help="learning-curve PNG written at the end ('' writes none; default: %(default)s)",
    )
    if gif:
        parser.add_argument(
            "--gif",
            nargs="?",
            const=f"{name}_episode.gif",
            default="",
            metavar="PATH",
            help="record one greedy episode of the trained agent as a GIF "
            f"(default path: {name}_episode.gif)",
        )
    if nproc is not None:
        parser.add_argument(
            "--nproc",
            type=int,
            default=nproc,
            help="processes (Ray actors with --backend ray) started by 'python script.py' "
            "(torchrun sets its own)",
        )
        add_launch_options(parser)
    args = parser.parse_args()
    if nproc is not None:
        check_launch_options(parser, args)
    return args


def _split(path: str):
    """``dir/name.ext`` -> ``("dir", "name", ".ext")``, for the media functions."""
    directory, filename = os.path.split(path)
    stem, extension = os.path.splitext(filename)
    return directory or ".", stem, extension


def write_curve(returns: Sequence[float], path: str, title: str) -> Optional[str]:
    """Plot the per-episode returns (and their moving average) to ``path``; ``""`` writes nothing."""
    if not path or not returns:
        return None
    directory, stem, extension = _split(path)
    written = create_learning_curve(
        returns, directory, stem, title=title, extension=extension or ".png"
    )
    print(f"learning curve written to {written}", flush=True)
    return written


def write_gif(frames: List[np.ndarray], path: str, fps: float = 30) -> str:
    """Write rendered frames as an animation (GIF unless ``path`` names another format)."""
    directory, stem, extension = _split(path)
    written = create_video(frames, directory, stem, extension=extension or ".gif", fps=fps)
    print(f"episode of the trained agent ({len(frames)} frames) written to {written}", flush=True)
    return written


def record_episode(
    env_id: str, policy: Callable[[torch.Tensor], torch.Tensor], path: str, seed: int = 0
) -> float:
    """Play one episode of ``env_id`` with ``policy`` and write its frames to ``path``.

    Args:
        env_id: A gymnasium id; the environment is made with ``render_mode="rgb_array"``.
        policy: Maps a ``[1, obs_dim]`` float tensor to the action tensor (called
            without gradients). Discrete actions are passed on as ``int``, continuous
            ones as a numpy array of the action space's shape.
        path: File to write (``.gif`` by default).
        seed: Seed of the episode's ``reset``.

    Returns:
        The return of the recorded episode.
    """
    env = gym.make(env_id, render_mode="rgb_array")
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    obs, _ = env.reset(seed=seed)
    frames, total, done = [env.render()], 0.0, False
    with torch.no_grad():
        while not done:
            action = policy(torch.as_tensor(obs, dtype=torch.float32).view(1, -1))
            action = (
                int(action.item()) if discrete else action.numpy().reshape(env.action_space.shape)
            )
            obs, reward, terminated, truncated, _ = env.step(action)
            frames.append(env.render())
            total, done = total + float(reward), terminated or truncated
    env.close()
    print(f"recorded episode: return {total:.1f}", flush=True)
    write_gif(frames, path)
    return total


class Progress:
    """Collects the return of every episode, prints a line per episode and decides "solved".

    The smoothed return is ``0.9 * smoothed + 0.1 * return``, started at ``start``
    (``None`` starts it at the first episode's return). The run is solved once the
    smoothed return exceeds ``solved_reward`` for ``solved_repeat`` episodes in a row.

    Args:
        name: Shown at the start of every line and in the plot title.
        env_id: Environment name, for the plot title.
        solved_reward: Threshold of the smoothed return.
        solved_repeat: Consecutive episodes above the threshold needed.
        start: Initial smoothed value, or ``None``.
    """

    def __init__(
        self,
        name: str,
        env_id: str,
        solved_reward: float,
        solved_repeat: int = 1,
        start: Optional[float] = 0.0,
    ):
        self.name, self.env_id = name, env_id
        self.solved_reward, self.solved_repeat = solved_reward, solved_repeat
        self.smoothed = start
        self.returns: List[float] = []
        self.streak = 0
        self.solved_at: Optional[int] = None
        self.start_time = time.time()

    @property
    def solved(self) -> bool:
        """Whether the run has met the solved criterion."""
        return self.solved_at is not None

    def end_episode(
        self, total: float, steps: int, extra: str = "", can_solve: bool = True
    ) -> bool:
        """Record one episode's return, print its line; returns whether the run is now solved.

        Args:
            total: The episode's return.
            steps: Environment steps taken so far (all episodes).
            extra: Text appended to the line (e.g. an algorithm's temperature).
            can_solve: ``False`` during a warm-up that must not count as solved.
        """
        self.returns.append(float(total))
        self.smoothed = total if self.smoothed is None else 0.9 * self.smoothed + 0.1 * total
        episode = len(self.returns)
        print(
            f"{self.name} episode {episode:4d}  return {total:8.2f}  smoothed {self.smoothed:8.2f}  "
            f"{extra}steps {steps:6d}  {time.time() - self.start_time:6.1f} s",
            flush=True,
        )
        self.streak = self.streak + 1 if can_solve and self.smoothed > self.solved_reward else 0
        if self.streak >= self.solved_repeat:
            self.solved_at = episode
            print(f"Environment solved at episode {episode}!", flush=True)
        return self.solved

    def write_curve(self, path: str) -> Optional[str]:
        """Write the learning curve of the returns so far (nothing when ``path`` is ``""``)."""
        return write_curve(self.returns, path, f"{self.name} on {self.env_id}")


def load_tutorial(name: str) -> ModuleType:
    """Import ``examples/tutorials/unleash_distributed_power/<name>.py`` as a module.

    Its directory is put on ``sys.path`` first, so the tutorial finds its own helpers.
    """
    path = TUTORIALS / "unleash_distributed_power" / f"{name}.py"
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"{name}_tutorial", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
