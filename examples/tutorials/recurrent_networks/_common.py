"""Plumbing shared by the recurrent-networks scripts: options, progress lines, learning curves."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from history import MASKED_CARTPOLE

from machin.utils.media import create_learning_curve

SOLVED_REWARD, SOLVED_REPEAT = 190.0, 5


def parse_args(description: str, name: str, depth: Optional[int] = None) -> argparse.Namespace:
    """Options every script takes; ``--depth`` only when ``depth`` (its default) is given."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--episodes", type=int, default=500, help="stop after this many episodes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--env",
        default=MASKED_CARTPOLE,
        help="CartPole-v0 (velocities hidden) or an Atari id such as ALE/Pong-v5, played from RAM",
    )
    parser.add_argument(
        "--plot", default=f"{name}.png", help="learning-curve PNG to write at the end ('' for none)"
    )
    if depth is not None:
        parser.add_argument("--depth", type=int, default=depth, help="observations the agent sees")
    return parser.parse_args()


@dataclass
class Progress:
    """Keeps the returns of a run, prints one line per episode and tells when it is solved.

    The smoothed return is ``0.9 * smoothed + 0.1 * return`` starting from 0; CartPole
    counts as solved once it stays above 190 for 5 episodes in a row (an Atari game is
    never "solved": the run goes on to ``--episodes``).
    """

    name: str
    env: str = MASKED_CARTPOLE
    returns: List[float] = field(default_factory=list)
    smoothed: float = 0.0
    best: float = float("-inf")
    best_episode: int = 0
    streak: int = 0
    solved_at: Optional[int] = None
    start: float = field(default_factory=time.time)
    start_cpu: float = field(default_factory=time.process_time)

    def __post_init__(self) -> None:
        torch.set_num_threads(1)  # tiny networks: more threads only add synchronisation

    def record(self, total: float) -> bool:
        """Log one finished episode; returns True when the run should stop (solved)."""
        self.returns.append(total)
        self.smoothed = 0.9 * self.smoothed + 0.1 * total
        episode = len(self.returns)
        if self.smoothed > self.best:
            self.best, self.best_episode = self.smoothed, episode
        print(
            f"{self.name} episode {episode:4d}  return {total:6.1f}  smoothed {self.smoothed:6.1f}  "
            f"{time.time() - self.start:7.1f} s",
            flush=True,
        )
        if self.env != MASKED_CARTPOLE:
            return False
        self.streak = self.streak + 1 if self.smoothed > SOLVED_REWARD else 0
        if self.streak >= SOLVED_REPEAT:
            self.solved_at = episode
            print(f"{self.name}: solved at episode {episode}", flush=True)
            return True
        return False

    def finish(self, plot: str) -> dict:
        """Write the learning curve to ``plot`` (unless empty) and return a summary."""
        summary = {
            "agent": self.name,
            "episodes": len(self.returns),
            "best_smoothed": self.best,
            "best_episode": self.best_episode,
            "solved_at": self.solved_at,
            "wall_s": time.time() - self.start,
            "cpu_s": time.process_time() - self.start_cpu,
        }
        print(
            f"{self.name}: best smoothed return {self.best:.1f} at episode {self.best_episode}, "
            f"{summary['episodes']} episodes, {summary['wall_s']:.1f} s wall, "
            f"{summary['cpu_s']:.1f} s CPU",
            flush=True,
        )
        if plot and self.returns:
            directory, filename = os.path.split(os.path.abspath(plot))
            stem, extension = os.path.splitext(filename)
            written = create_learning_curve(
                self.returns, directory, stem, title=self.name, extension=extension or ".png"
            )
            print(f"learning curve written to {written}")
        return summary
