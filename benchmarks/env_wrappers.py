"""Stepping throughput: ParallelWrapperSubProc against gymnasium's AsyncVectorEnv.

Both run the same 4 CartPole-v1 environments in worker processes (one per environment,
same start method), with the same seeds and the same pre-drawn random actions. Finished
episodes restart: AsyncVectorEnv resets them inside the same step (``SAME_STEP``
autoreset), the machin loop calls ``reset(idx=...)`` on the terminal environments, so both
do exactly the same environment steps and resets. The two are timed in alternation, each
repeat with freshly started workers, so a change of load on the machine hits both alike.

Prints, for each, the median and the best wall time over the repeats and the median CPU
time used by the main process and its workers together (less sensitive to other load on
the machine), then the ratios machin / gymnasium. Target: median wall ratio at most 1.2.

Run from the repository root:  python -m benchmarks.env_wrappers [--steps N] [--repeats R]
(``python -m benchmarks`` runs it with the defaults, beside the other benchmarks).
"""

import argparse
import multiprocessing
import statistics
import sys
import time
from typing import List, Optional, Tuple

import gymnasium as gym
import numpy as np
import psutil
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from machin.env.wrappers.openai_gym import ParallelWrapperSubProc

ENV_NAME = "CartPole-v1"
NUM_ENVS = 4
SEEDS = list(range(NUM_ENVS))


def make_env(_index: int = 0) -> gym.Env:
    return gym.make(ENV_NAME)


def cpu_seconds() -> float:
    """CPU time used so far by this process and its live children (the workers)."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children()]:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def time_machin(wrapper: ParallelWrapperSubProc, actions: np.ndarray) -> Tuple[float, float]:
    wrapper.seed(SEEDS)
    wrapper.reset()
    start, start_cpu = time.perf_counter(), cpu_seconds()
    for action in actions:
        terminals = wrapper.step(action)[2]
        done = [index for index, terminal in enumerate(terminals) if terminal]
        if done:
            wrapper.reset(idx=done)
    return time.perf_counter() - start, cpu_seconds() - start_cpu


def time_gymnasium(vector_env: AsyncVectorEnv, actions: np.ndarray) -> Tuple[float, float]:
    vector_env.reset(seed=SEEDS)
    start, start_cpu = time.perf_counter(), cpu_seconds()
    for action in actions:
        vector_env.step(action)
    return time.perf_counter() - start, cpu_seconds() - start_cpu


def main(argv: Optional[List[str]] = None) -> None:
    """Run the comparison; ``argv`` holds the command-line options (none: defaults)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per repeat")
    parser.add_argument("--repeats", type=int, default=21, help="timed repeats (median)")
    args = parser.parse_args([] if argv is None else argv)
    torch.set_num_threads(1)

    context = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    actions = np.random.default_rng(0).integers(0, 2, size=(args.steps, NUM_ENVS))
    runs = {"ParallelWrapperSubProc": [], "AsyncVectorEnv": []}
    # Fresh workers for every repeat: where the scheduler places a set of processes tends
    # to stick, so reusing one set would measure one placement only.
    for _ in range(args.repeats):
        wrapper = ParallelWrapperSubProc([make_env] * NUM_ENVS, context=context)
        try:
            time_machin(wrapper, actions[:50])  # warm-up
            runs["ParallelWrapperSubProc"].append(time_machin(wrapper, actions))
        finally:
            wrapper.close()
        vector_env = AsyncVectorEnv(
            [make_env] * NUM_ENVS, context=context, autoreset_mode=AutoresetMode.SAME_STEP
        )
        try:
            time_gymnasium(vector_env, actions[:50])
            runs["AsyncVectorEnv"].append(time_gymnasium(vector_env, actions))
        finally:
            vector_env.close()

    print(f"{NUM_ENVS} x {ENV_NAME}, {args.steps} steps, median of {args.repeats} repeats")
    medians = {}
    for name, measured in runs.items():
        wall = statistics.median(run[0] for run in measured)
        best = min(run[0] for run in measured)
        cpu = statistics.median(run[1] for run in measured)
        medians[name] = (wall, best, cpu)
        print(
            f"{name:<24} wall {wall:.3f} s ({args.steps / wall:,.0f} steps/s), "
            f"best {best:.3f} s, cpu {cpu:.3f} s"
        )
    machin, gym_ = medians.values()
    print(
        f"ratio machin / gymnasium: wall {machin[0] / gym_[0]:.2f} (target <= 1.2), "
        f"best {machin[1] / gym_[1]:.2f}, cpu {machin[2] / gym_[2]:.2f}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
