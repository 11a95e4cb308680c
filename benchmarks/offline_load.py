"""Time and peak memory of loading one million transitions from a Minari dataset into a Buffer.

The dataset has the shapes of a D4RL / Minari MuJoCo HalfCheetah dataset: 1,000 episodes of
1,000 steps, 17 float32 observation features and 6 float32 action features, float64
rewards (random numbers: the values do not matter here). It is written once into a
temporary ``MINARI_DATASETS_PATH``; then a fresh child process opens it and runs
``machin.frame.offline.load_minari`` into a new buffer. Memory is the resident set size
(RSS, ``/proc/self/statm``) just before the load and the process's peak RSS
(``ru_maxrss``) after it: their difference is what the load added at its peak, compared
with the size of the loaded buffer's columns. The ceiling is 1.5 times the columns.

Run with ``python -m benchmarks.offline_load`` (``--episodes N --steps T`` for another size).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Dict

import numpy as np

OBS_DIM, ACTION_DIM = 17, 6
DATASET_ID = "bench/halfcheetah-random-v0"
CEILING = 1.5  # peak memory added by the load, in columns' sizes
_MIB = 1 << 20


def make_dataset(episodes: int, steps: int) -> None:
    """Write the random dataset under ``MINARI_DATASETS_PATH`` (episode by episode)."""
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(0)
    observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
    buffers = []
    for episode in range(episodes):
        buffers.append(
            EpisodeBuffer(
                id=episode,
                observations=rng.standard_normal((steps + 1, OBS_DIM), dtype=np.float32),
                actions=rng.uniform(-1, 1, (steps, ACTION_DIM)).astype(np.float32),
                rewards=rng.standard_normal(steps),
                terminations=np.zeros(steps, dtype=bool),
                truncations=np.eye(1, steps, steps - 1, dtype=bool)[0],
            )
        )
    with warnings.catch_warnings():  # Minari's advice to name an author, a description, ...
        warnings.simplefilter("ignore", UserWarning)
        minari.create_dataset_from_buffers(
            DATASET_ID,
            buffers,
            observation_space=observation_space,
            action_space=action_space,
            algorithm_name="random",
        )


def _rss_mib() -> float:
    """The resident set size now (Linux), in MiB."""
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / _MIB


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _columns_mib(buffer: Any) -> float:
    """The bytes of the filled rows of every column of ``buffer``, in MiB."""
    groups = [*buffer._major.values(), buffer._sub, buffer._custom]
    return (
        sum(col.tensor[0].nbytes * buffer.size() for cols in groups for col in cols.values()) / _MIB
    )


def child() -> Dict[str, Any]:
    """Open the dataset and load it, in this (fresh) process."""
    import minari
    import torch

    from machin.frame.offline import load_minari

    torch.set_num_threads(1)
    dataset = minari.load_dataset(DATASET_ID)
    before = _rss_mib()
    start, cpu = time.perf_counter(), time.process_time()
    buffer = load_minari(dataset)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "added_mib": _peak_mib() - before,
        "columns_mib": _columns_mib(buffer),
        "transitions": buffer.size(),
    }


def measure(episodes: int, steps: int) -> Dict[str, Any]:
    """Write the dataset, load it in a child process; the numbers of the report."""
    with tempfile.TemporaryDirectory() as directory:
        env = {**os.environ, "MINARI_DATASETS_PATH": directory}
        os.environ["MINARI_DATASETS_PATH"] = directory
        start = time.perf_counter()
        make_dataset(episodes, steps)
        written = time.perf_counter() - start
        command = [sys.executable, "-m", "benchmarks.offline_load", "--child"]
        output = subprocess.run(
            command, check=True, capture_output=True, text=True, timeout=1800, env=env
        ).stdout
    result = json.loads(output.strip().splitlines()[-1])
    result["write_s"] = written
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child()))
        return 0
    result = measure(args.episodes, args.steps)
    ratio = result["added_mib"] / result["columns_mib"]
    print(f"transitions loaded   {result['transitions']:,}")
    print(f"columns              {result['columns_mib']:.1f} MiB")
    print(
        f"load time            {result['seconds']:.2f} s wall, {result['cpu_s']:.2f} s CPU "
        f"(dataset written in {result['write_s']:.1f} s)"
    )
    print(f"peak memory added    {result['added_mib']:.1f} MiB = {ratio:.2f} x the columns")
    if ratio > CEILING:
        print(f"FAIL: the load's peak exceeds {CEILING} x the columns")
        return 1
    print(f"ok: within the ceiling of {CEILING} x the columns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
