"""VecSampler throughput: one batched act call per step against a per-environment loop.

Eight CartPole-v1 environments and a small DQN (MLP 4-16-16-2) acting with
``act_discrete_with_noise`` (epsilon fixed at 0.1), every step stored with
``store_transition``, no updates. The *floor* here is the plain loop a user writes
without a sampler: for each of the 8 environments, one single-row act call, one
``env.step``, one ``store_transition``, and a reset when the episode ends. The
sampler does the same environment and storing work but chooses the 8 actions in one
act call per step. Variants: the sampler over ``ParallelWrapperDummy``, over gymnasium's
``SyncVectorEnv`` (default ``NEXT_STEP`` autoreset), over ``ParallelWrapperSubProc``
(one worker process per environment), and with ``store="episode"``.

Every variant has its own DQN (same initial weights) and runs the same number of
environment steps per repeat; the variants are timed in alternation and the medians
over the repeats are printed as environment steps per second, from the main thread's
CPU time (the in-process variants do all their work on it) and from wall time (the
only meaningful figure for the sub-process variant, whose environments run in other
processes). The speed-up is steps/s of the variant divided by steps/s of the loop.

Run from the repository root:  python -m benchmarks.sampler [--steps N] [--repeats R] [--no-subproc]
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import torch
from gymnasium.vector import SyncVectorEnv
from torch import nn

from machin.env.wrappers import ParallelWrapperDummy, ParallelWrapperSubProc
from machin.frame.algorithms import DQN
from machin.frame.sampler import VecSampler
from machin.model.nets import static_module_wrapper

try:
    from .common import setup_torch
except ImportError:  # run as a script
    from common import setup_torch

ENV_ID, NUM_ENVS, EPSILON, SEED = "CartPole-v1", 8, 0.1, 0


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2)
        )

    def forward(self, state):
        return self.net(state)


def make_dqn(qnet: nn.Module) -> DQN:
    online, target = (static_module_wrapper(copy.deepcopy(qnet), "cpu", "cpu") for _ in range(2))
    dqn = DQN(
        online, target, torch.optim.Adam, nn.MSELoss(), epsilon_decay=1.0, replay_size=100_000
    )
    dqn.epsilon = EPSILON
    return dqn


def make_env(_index: int = 0) -> gym.Env:
    return gym.make(ENV_ID)


class PerEnvLoop:
    """The loop without a sampler: one single-row act call per environment and step."""

    def __init__(self, dqn: DQN):
        self.dqn = dqn
        self.envs = [make_env() for _ in range(NUM_ENVS)]
        self.states = [
            torch.as_tensor(env.reset(seed=SEED + i)[0]).view(1, -1)
            for i, env in enumerate(self.envs)
        ]

    def run(self, steps: int) -> None:
        taken = 0
        while taken < steps:
            for i, env in enumerate(self.envs):
                state = self.states[i]
                action = self.dqn.act_discrete_with_noise({"state": state})
                obs, reward, terminated, truncated, _ = env.step(action.item())
                next_state = torch.as_tensor(obs).view(1, -1)
                self.dqn.store_transition(
                    {
                        "state": {"state": state},
                        "action": {"action": action},
                        "next_state": {"state": next_state},
                        "reward": float(reward),
                        "terminal": terminated,
                        "truncated": truncated and not terminated,
                    }
                )
                if terminated or truncated:
                    next_state = torch.as_tensor(env.reset()[0]).view(1, -1)
                self.states[i] = next_state
            taken += NUM_ENVS

    def close(self) -> None:
        for env in self.envs:
            env.close()


def sampler_variant(
    envs, dqn: DQN, store: str
) -> Tuple[Callable[[int], object], Callable[[], None]]:
    sampler = VecSampler(dqn, envs, act_method="act_discrete_with_noise", store=store, seed=SEED)
    return (lambda steps: sampler.collect(steps=steps)), envs.close


def timed(run: Callable[[int], object], steps: int) -> Tuple[float, float]:
    """(thread CPU seconds, wall seconds) of one run of ``steps`` environment steps."""
    cpu, wall = time.thread_time(), time.perf_counter()
    run(steps)
    return time.thread_time() - cpu, time.perf_counter() - wall


def main(argv: Optional[List[str]] = None) -> Dict[str, Tuple[float, float]]:
    """Run the comparison; returns ``{variant: (steps/s by CPU time, steps/s by wall time)}``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="environment steps per repeat")
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats (median)")
    parser.add_argument(
        "--no-subproc", action="store_true", help="leave out ParallelWrapperSubProc"
    )
    args = parser.parse_args([] if argv is None else argv)
    setup_torch()
    qnet = QNet()

    loop = PerEnvLoop(make_dqn(qnet))
    variants: Dict[str, Tuple[Callable[[int], object], Callable[[], None]]] = {
        "per-env loop (8 single-row act calls per step)": (loop.run, loop.close),
        "VecSampler + ParallelWrapperDummy": sampler_variant(
            ParallelWrapperDummy([make_env] * NUM_ENVS), make_dqn(qnet), "transition"
        ),
        "VecSampler + SyncVectorEnv (NEXT_STEP)": sampler_variant(
            SyncVectorEnv([make_env] * NUM_ENVS), make_dqn(qnet), "transition"
        ),
        "VecSampler + ParallelWrapperDummy, store_episode": sampler_variant(
            ParallelWrapperDummy([make_env] * NUM_ENVS), make_dqn(qnet), "episode"
        ),
    }
    if not args.no_subproc:
        variants["VecSampler + ParallelWrapperSubProc"] = sampler_variant(
            ParallelWrapperSubProc([make_env] * NUM_ENVS), make_dqn(qnet), "transition"
        )

    times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in variants}
    try:
        for run, _ in variants.values():  # warm-up
            run(args.steps // 4)
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(args.repeats):
                for name, (run, _) in variants.items():
                    times[name].append(timed(run, args.steps))
        finally:
            if gc_was_enabled:
                gc.enable()
    finally:
        for _, close in variants.values():
            close()

    rates = {}
    for name, samples in times.items():
        cpu = statistics.median(t[0] for t in samples)
        wall = statistics.median(t[1] for t in samples)
        rates[name] = (args.steps / cpu, args.steps / wall)
    base_cpu, base_wall = next(iter(rates.values()))
    print(
        f"{NUM_ENVS} x {ENV_ID}, DQN act_discrete_with_noise, storing, no updates; "
        f"{args.steps} steps per repeat, median of {args.repeats} repeats"
    )
    for name, (cpu, wall) in rates.items():
        cpu_text = "    (n/a)" if "SubProc" in name else f"{cpu:9.0f}"
        speedup = (
            ""
            if name.startswith("per-env")
            else (
                f"  speed-up {wall / base_wall:.2f}x wall"
                if "SubProc" in name
                else f"  speed-up {cpu / base_cpu:.2f}x CPU, {wall / base_wall:.2f}x wall"
            )
        )
        print(f"{name:50s} {cpu_text} steps/s CPU {wall:9.0f} steps/s wall{speedup}")
    return rates


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
