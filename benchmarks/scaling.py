"""How Ape-X DQN and IMPALA throughput grows with the number of samplers.

For each number of samplers n (1, 2 and 4 by default) a world of one learner and n
samplers runs on this machine (:func:`~machin.parallel.distributed.launch`, roles from
:meth:`Roles.from_world <machin.parallel.distributed.roles.Roles.from_world>`), on
CartPole with 200-step episodes. Samplers play with the newest network (pulled once per
episode) as fast as they can, without waiting for the learner; the learner updates
without pause (Ape-X: batches of 64 transitions; IMPALA: batches of 4 episodes). After a
warm-up, the learner measures for ``--seconds``:

* environment steps per second collected by all samplers together (as the samplers
  report them to the run control),
* learner updates per second,
* the scaling efficiency of the steps: ``steps/s at n / (n x steps/s at 1)``.

Every process runs torch with one thread. On a machine with fewer cores than processes
the samplers and the learner share them, so the table shows the shape of the curve; the
figure needs at least n + 1 free cores.

This benchmark takes minutes, so ``python -m benchmarks`` skips it; run it by name::

    python -m benchmarks scaling
    python -m benchmarks.scaling --samplers 1 2 4 8 --seconds 20 --algorithms apex
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List, Optional, Sequence

import gymnasium as gym
import torch
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import IMPALA, DQNApex
from machin.parallel.distributed import World, launch
from machin.parallel.distributed.roles import Roles, RunControl

__all__ = ["main", "measure"]

WARMUP_SECONDS = 5.0


class QNet(nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))

    def forward(self, state):
        return self.net(state)


class Actor(nn.Module):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample().view(-1, 1) if action is None else action
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class Critic(nn.Module):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, state):
        return self.net(state)


def _build(algorithm: str, roles: Roles):
    if algorithm == "apex":
        return DQNApex.from_roles(roles, QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="none"),
                                  batch_size=64, replay_size=20000)
    return IMPALA.from_roles(roles, Actor(), Critic(), torch.optim.Adam, nn.MSELoss(), batch_size=4, replay_size=200)


def _play(agent, algorithm: str, env, seed: int) -> int:
    """One episode; returns its steps."""
    obs, _ = env.reset(seed=seed)
    state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
    done, steps, stored = False, 0, []
    while not done:
        if algorithm == "apex":
            action = agent.act_discrete_with_noise({"state": state})
        else:
            action, log_prob, _ = agent.act({"state": state})
        obs, reward, terminated, truncated, _ = env.step(action.item())
        next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        step = {"state": {"state": state}, "action": {"action": action}, "next_state": {"state": next_state},
                "reward": float(reward), "terminal": terminated}
        if algorithm == "apex":
            agent.store_transition(step)
        else:
            stored.append({**step, "action_log_prob": log_prob.item()})
        state, done, steps = next_state, terminated or truncated, steps + 1
    if stored:
        agent.store_episode(stored)
    return steps


def _rank(rank: int, algorithm: str, seconds: float) -> Optional[Dict[str, float]]:
    torch.set_num_threads(1)
    world = World(rpc_timeout=60)
    roles = Roles.from_world()
    torch.manual_seed(0)
    agent = _build(algorithm, roles)
    agent.set_sync(False)
    control = RunControl(agent.apex_group if algorithm == "apex" else agent.impala_group, roles)
    result = None
    if roles.is_learner:
        warm = 200 if algorithm == "apex" else 8
        while agent.replay_buffer.all_size() < warm:
            time.sleep(0.05)
        updates, begin, first = 0, time.monotonic(), None
        while True:
            agent.update()
            updates += 1
            now = time.monotonic()
            if first is None and now - begin >= WARMUP_SECONDS:
                first = (now, updates, sum(control.steps.values()))
            elif first is not None and now - first[0] >= seconds:
                last = (now, updates, sum(control.steps.values()))
                break
        control.request_stop("measured")
        elapsed = last[0] - first[0]
        result = {"steps_per_s": (last[2] - first[2]) / elapsed, "updates_per_s": (last[1] - first[1]) / elapsed}
    else:
        env = gym.make("CartPole-v1", max_episode_steps=200)
        episode = 0
        while True:
            agent.manual_sync()
            episode += 1
            if control.report(steps=_play(agent, algorithm, env, rank * 100000 + episode), episodes=1).stop:
                break
        env.close()
    control.finish(world)
    return result


def measure(algorithm: str, samplers: int, seconds: float) -> Dict[str, float]:
    """Run one learner and ``samplers`` samplers; returns the learner's rates."""
    return launch(_rank, samplers + 1, args=(algorithm, seconds), timeout=seconds + 180)[0]


def run(samplers: Sequence[int] = (1, 2, 4), seconds: float = 15.0,
        algorithms: Sequence[str] = ("apex", "impala")) -> List[Dict[str, float]]:
    """Measure every combination and print the table; returns its rows."""
    print(f"scaling on {os.cpu_count()} CPU core(s), one learner, {seconds:g} s measured after "
          f"{WARMUP_SECONDS:g} s of warm-up", flush=True)
    print(f"{'algorithm':<10}{'samplers':>9}{'env steps/s':>13}{'updates/s':>11}{'efficiency':>12}", flush=True)
    rows = []
    for algorithm in algorithms:
        base = None
        for n in samplers:
            rates = measure(algorithm, n, seconds)
            if base is None:
                base = rates["steps_per_s"] / n
            efficiency = rates["steps_per_s"] / (n * base)
            rows.append({"algorithm": algorithm, "samplers": n, **rates, "efficiency": efficiency})
            print(f"{algorithm:<10}{n:>9}{rates['steps_per_s']:>13.0f}{rates['updates_per_s']:>11.1f}"
                  f"{efficiency:>12.2f}", flush=True)
    return rows


def main(argv: Optional[List[str]] = None) -> Optional[List[Dict[str, float]]]:
    """Run the benchmark, but only when asked for by name (``python -m benchmarks scaling``)."""
    if argv is None:
        if "scaling" not in sys.argv[1:]:
            print("scaling: skipped (it takes minutes); run it with 'python -m benchmarks scaling'", flush=True)
            return None
        argv = []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samplers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run")
    parser.add_argument("--algorithms", nargs="+", choices=["apex", "impala"], default=["apex", "impala"])
    args = parser.parse_args(argv)
    return run(args.samplers, args.seconds, args.algorithms)


if __name__ == "__main__":
    main(sys.argv[1:])
