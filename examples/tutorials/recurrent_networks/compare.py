"""Train the memoryless baselines and the agents with memory one after another, then compare.

``python compare.py [--episodes N] [--seed S] [--plot PATH] [--env ID]``.
Runs DQN with depth 1 and 4, DRQN, PPO with depth 1 and 4, and RPPO with the same
episode cap and seed, and prints one table row per agent. Each agent's learning
curve goes to PATH with the agent's tag before the extension
(``compare.png`` -> ``compare_dqn_depth1.png``, ...).
"""

from __future__ import annotations

import argparse
import os

import dqn
import drqn
import ppo
import rppo
from _common import parse_args

# (tag, module, history depth): depth 1 = the current observation only
AGENTS = [
    ("dqn_depth1", dqn, 1),
    ("dqn", dqn, dqn.DEPTH),
    ("drqn", drqn, drqn.DEPTH),
    ("ppo_depth1", ppo, 1),
    ("ppo", ppo, ppo.DEPTH),
    ("rppo", rppo, None),
]


def run_all(args: argparse.Namespace) -> list:
    """Run every agent of ``AGENTS`` with the options of ``args``; returns their summaries."""
    stem, extension = os.path.splitext(args.plot)
    summaries = []
    for tag, module, depth in AGENTS:
        options = argparse.Namespace(**vars(args))
        options.depth = depth
        options.plot = f"{stem}_{tag}{extension or '.png'}" if args.plot else ""
        summaries.append(module.main(options))
    return summaries


def print_table(summaries: list) -> None:
    """One row per agent: best smoothed return, where it was reached, solved or not, times."""
    print(
        f"\n{'agent':<12} {'best smoothed':>13} {'at episode':>10} {'solved at':>9} "
        f"{'episodes':>8} {'wall s':>7} {'CPU s':>7}"
    )
    for s in summaries:
        solved = "-" if s["solved_at"] is None else str(s["solved_at"])
        print(
            f"{s['agent']:<12} {s['best_smoothed']:>13.1f} {s['best_episode']:>10d} {solved:>9} "
            f"{s['episodes']:>8d} {s['wall_s']:>7.1f} {s['cpu_s']:>7.1f}"
        )


if __name__ == "__main__":
    print_table(run_all(parse_args(__doc__.splitlines()[0], "compare")))
