"""How Ape-X DQN and IMPALA throughput grows with the number of samplers.

For each number of samplers n (1, 2, 4 and 8 by default) a world of one learner and n
samplers runs on this machine (:func:`~machin.parallel.distributed.launch`, roles from
:meth:`Roles.from_world <machin.parallel.distributed.roles.Roles.from_world>`), on
CartPole with 200-step episodes. Samplers play with the newest network (pulled once per
episode) as fast as they can, without waiting for the learner; the learner updates
without pause (Ape-X: batches of 64 transitions; IMPALA: batches of 4 episodes). After a
warm-up, the learner measures for ``--seconds``:

* environment steps per second collected by all samplers together (as the samplers
  report them to the run control),
* learner updates per second, and the CPU time the learner's process spent per update
  (all its threads: the update, the RPC replies it unpacks, the requests it serves),
* the scaling efficiency of the steps: ``steps/s at n / (n x steps/s at 1)``.

Right before each row, the **local reference** runs the same update in this one process
(Ape-X: ``DQNPer`` on a local prioritized buffer of CartPole transitions; IMPALA: its
update on local episodes, with no model push) for the same time; ``ratio`` is the
learner's updates/s over the local ones, and ``ratio/transition`` the same for the
transitions trained on per second (IMPALA's local episodes come from an untrained policy
and are shorter than the learner's, so its updates are cheaper: compare IMPALA by this
column; for Ape-X, whose batches are always 64 transitions, the two are equal). Measuring the two side by side keeps the ratio
meaningful on a machine whose load changes.

Ray starts its worker processes at a lower priority (``nice`` 15) so that its own control
processes stay responsive; on a machine that also runs other work, the ranks then get a
smaller share of the cores than the RPC processes (``nice`` 0) would. For a comparison of
the transports, the local Ray instance this benchmark starts runs its workers at ``nice`` 0
(``RAY_worker_niceness=0``, unless that variable is set already).

Every process runs torch with one thread. On a machine with fewer cores than processes
the samplers and the learner share them, so the table shows the shape of the curve; the
figure needs at least n + 1 free cores. ``--learner-core C`` gives the learner core ``C``
to itself (every thread of its process, and of the local reference's) and the samplers
the other cores: on a small machine this tells whether the learner keeps its local speed
when it is not also waiting for a core.

This benchmark takes minutes, so ``python -m benchmarks`` skips it; run it by name::

    python -m benchmarks scaling
    python -m benchmarks.scaling --samplers 1 2 4 8 --seconds 20 --algorithms apex --backend rpc
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import random
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import gymnasium as gym
import torch
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import IMPALA, DQNApex, DQNPer
from machin.parallel.distributed import World, launch
from machin.parallel.distributed.roles import Roles, RunControl

__all__ = ["main", "measure", "local_updates", "run", "BACKENDS"]

WARMUP_SECONDS = 5.0
BACKENDS = ("rpc", "ray")
APEX_BATCH, IMPALA_BATCH = 64, 4


class QNet(nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(4, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 2),
        )

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


def _networks(algorithm: str) -> tuple:
    if algorithm == "apex":
        return QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="none")
    return Actor(), Critic(), torch.optim.Adam, nn.MSELoss()


def _options(algorithm: str) -> Dict[str, int]:
    if algorithm == "apex":
        return {"batch_size": APEX_BATCH, "replay_size": 20000}
    return {"batch_size": IMPALA_BATCH, "replay_size": 200}


def _build(algorithm: str, roles: Roles):
    cls = DQNApex if algorithm == "apex" else IMPALA
    return cls.from_roles(roles, *_networks(algorithm), **_options(algorithm))


def _play(
    agent, algorithm: str, env, seed: int, store: Optional[Callable[[Any], None]] = None
) -> int:
    """One episode; returns its steps. ``store`` receives what the agent would store (default: the agent)."""
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
        step = {
            "state": {"state": state},
            "action": {"action": action},
            "next_state": {"state": next_state},
            "reward": float(reward),
            "terminal": terminated,
        }
        if algorithm == "apex":
            (store or agent.store_transition)(step)
        else:
            stored.append({**step, "action_log_prob": log_prob.item()})
        state, done, steps = next_state, terminated or truncated, steps + 1
    if stored:
        (store or agent.store_episode)(stored)
    return steps


class _TrainedSteps:
    """Counts the transitions an agent trains on (IMPALA's batches are episodes of any length).

    An Ape-X update always trains on ``APEX_BATCH`` transitions; an IMPALA update on the
    steps of its episodes, which grow as the policy learns. The local reference's episodes
    come from an untrained policy, so their updates are cheaper: the per-transition ratio
    compares the two fairly.
    """

    def __init__(self, agent, algorithm: str):
        self.count = 0
        if algorithm == "impala":
            join = agent._join
            agent._join = lambda batches: self._counted(join(batches))
        else:
            update = agent.update
            agent.update = lambda *a, **k: self._counted_update(update(*a, **k))

    def _counted(self, batch):
        self.count += batch.size
        return batch

    def _counted_update(self, result):
        self.count += APEX_BATCH if result is not None else 0
        return result


def _learn(
    agent, algorithm: str, control: RunControl, seconds: float, warmup: float
) -> Dict[str, float]:
    """Update without pause; the rates over ``seconds`` after ``warmup`` seconds."""
    warm = 200 if algorithm == "apex" else 8
    while agent.replay_buffer.all_size() < warm:
        time.sleep(0.05)
    trained = _TrainedSteps(agent, algorithm)
    updates, begin, first = 0, time.monotonic(), None
    while True:
        agent.update()
        updates += 1
        now = time.monotonic()
        if first is None and now - begin >= warmup:
            first = (now, updates, sum(control.steps.values()), time.process_time(), trained.count)
        elif first is not None and now - first[0] >= seconds:
            last = (now, updates, sum(control.steps.values()), time.process_time(), trained.count)
            break
    elapsed, done = last[0] - first[0], last[1] - first[1]
    return {
        "steps_per_s": (last[2] - first[2]) / elapsed,
        "updates_per_s": done / elapsed,
        "cpu_ms_per_update": 1000 * (last[3] - first[3]) / done,
        "trained_per_s": (last[4] - first[4]) / elapsed,
    }


def _pin(cores: Sequence[int]) -> None:
    """Let every thread of this process run only on ``cores`` (threads started later inherit it)."""
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # the thread may have ended meanwhile
            os.sched_setaffinity(int(thread), set(cores))


def _pin_role(is_learner: bool, learner_core: Optional[int]) -> None:
    """The learner on ``learner_core`` alone, every other rank on the remaining cores."""
    if learner_core is None:
        return
    others = sorted(os.sched_getaffinity(0) - {learner_core}) or [learner_core]
    _pin([learner_core] if is_learner else others)


def _rank(
    rank: int, algorithm: str, seconds: float, warmup: float, learner_core: Optional[int] = None
) -> Optional[Dict[str, float]]:
    torch.set_num_threads(1)
    world = World(rpc_timeout=60)
    roles = Roles.from_world()
    _pin_role(roles.is_learner, learner_core)
    torch.manual_seed(0)
    agent = _build(algorithm, roles)
    agent.set_sync(False)
    control = RunControl(agent.apex_group if algorithm == "apex" else agent.impala_group, roles)
    result = None
    if roles.is_learner:
        result = _learn(agent, algorithm, control, seconds, warmup)
        control.request_stop("measured")
    else:
        env = gym.make("CartPole-v1", max_episode_steps=200)
        episode = 0
        while True:
            agent.manual_sync()
            episode += 1
            if control.report(
                steps=_play(agent, algorithm, env, rank * 100000 + episode), episodes=1
            ).stop:
                break
        env.close()
    control.finish(world)
    return result


def _launcher(backend: str) -> Callable[..., List[Any]]:
    """``launch`` for ``backend``; a clear error when this checkout cannot run it."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "rpc":
        return launch
    missing = []
    if "transport" not in inspect.signature(launch).parameters:
        missing.append("machin.parallel.distributed.launch(..., transport='ray')")
    try:
        import ray  # noqa: F401
    except ImportError:
        missing.append("the ray package (pip install machin[ray])")
    if missing:
        raise RuntimeError(f"backend 'ray' cannot run here: missing {' and '.join(missing)}")
    os.environ.setdefault(
        "RAY_worker_niceness", "0"
    )  # the RPC ranks' priority (see the module's text)
    return lambda *args, **kwargs: launch(*args, transport="ray", **kwargs)


def measure(
    algorithm: str,
    samplers: int,
    seconds: float,
    backend: str = "rpc",
    warmup: float = WARMUP_SECONDS,
    learner_core: Optional[int] = None,
) -> Dict[str, float]:
    """Run one learner and ``samplers`` samplers; returns the learner's rates over ``seconds`` after ``warmup``.

    ``learner_core``: the core the learner has to itself (``None``: no pinning).

    Raises:
        ValueError: For an unknown ``backend``.
        RuntimeError: When ``backend`` cannot run in this checkout (the message names what is missing).
    """
    run_world = _launcher(backend)
    return run_world(
        _rank,
        samplers + 1,
        args=(algorithm, seconds, warmup, learner_core),
        timeout=seconds + warmup + 180,
    )[0]


class _Ready:
    """A sample that is already there (what ``sample_batch_async`` returns, for a local buffer)."""

    def __init__(self, result: Any):
        self.result = result

    def wait(self) -> Any:
        return self.result


class _LocalEpisodes:
    """A stand-in for IMPALA's distributed buffer: episodes in a list, sampled in this process."""

    def __init__(self, seed: int = 0):
        self.episodes: List[Any] = []
        self._random = random.Random(seed)

    def sample_batch(self, count: int, *_: Any) -> tuple:
        chosen = self._random.sample(self.episodes, min(count, len(self.episodes)))
        return len(chosen), (chosen,)

    def sample_batch_async(self, count: int, *args: Any, **_: Any) -> _Ready:
        return _Ready(self.sample_batch(count, *args))


class _NoServer:
    """A model server that takes every push and serves nothing (the local reference pushes nowhere)."""

    serves_here = True

    def push(self, model: nn.Module, pull_on_fail: bool = True) -> bool:
        return True

    def pull(self, model: nn.Module) -> bool:
        return False

    def push_state(self, state: Dict[str, torch.Tensor], version: int) -> bool:
        return True


class _LocalIMPALA(IMPALA):
    """IMPALA's update on episodes kept in this process, pushing nowhere: the local reference."""

    def _default_buffer(self) -> _LocalEpisodes:
        return _LocalEpisodes()


def _local_agent(algorithm: str):
    """The learner's update in one process, with its buffer filled from CartPole play."""
    from machin.frame.buffers.episode_buffer_d import EpisodeTransition

    env = gym.make("CartPole-v1", max_episode_steps=200)
    if algorithm == "apex":
        agent = DQNPer(*_networks(algorithm), **_options(algorithm))
        while agent.replay_buffer.size() < 2000:
            _play(agent, algorithm, env, agent.replay_buffer.size())
    else:
        agent = _LocalIMPALA(*_networks(algorithm), None, (_NoServer(),), **_options(algorithm))
        episodes = agent.replay_buffer.episodes
        for seed in range(40):
            _play(
                agent,
                algorithm,
                env,
                seed,
                store=lambda steps: episodes.append(EpisodeTransition.from_episode(steps)),
            )
    env.close()
    return agent


def local_updates(
    algorithm: str, seconds: float, learner_core: Optional[int] = None
) -> Dict[str, float]:
    """Updates per second (and CPU ms per update) of the same update in this one process
    (on ``learner_core`` alone, when given)."""
    threads = torch.get_num_threads()
    cores = os.sched_getaffinity(0)
    torch.set_num_threads(1)
    if learner_core is not None:
        _pin([learner_core])
    try:
        torch.manual_seed(0)
        agent = _local_agent(algorithm)
        for _ in range(20):
            agent.update()
        trained = _TrainedSteps(agent, algorithm)
        updates, begin, cpu = 0, time.monotonic(), time.process_time()
        while time.monotonic() - begin < seconds:
            agent.update()
            updates += 1
        elapsed = time.monotonic() - begin
        return {
            "updates_per_s": updates / elapsed,
            "cpu_ms_per_update": 1000 * (time.process_time() - cpu) / updates,
            "trained_per_s": trained.count / elapsed,
        }
    finally:
        torch.set_num_threads(threads)
        if learner_core is not None:
            _pin(cores)


def _row(
    algorithm: str, n: int, rates: Dict[str, float], local: Dict[str, float], base: float
) -> Dict[str, Any]:
    return {
        "algorithm": algorithm,
        "samplers": n,
        **rates,
        "efficiency": rates["steps_per_s"] / (n * base),
        "local_updates_per_s": local["updates_per_s"],
        "local_cpu_ms_per_update": local["cpu_ms_per_update"],
        "ratio": rates["updates_per_s"] / local["updates_per_s"],
        "ratio_per_transition": rates["trained_per_s"] / local["trained_per_s"],
    }


HEADER = (
    f"{'algorithm':<10}{'samplers':>9}{'env steps/s':>13}{'updates/s':>11}{'efficiency':>12}"
    f"{'local upd/s':>13}{'ratio':>7}{'CPU ms/upd':>12}{'local CPU ms':>14}{'ratio/transition':>18}"
)


def _print_row(row: Dict[str, Any]) -> None:
    print(
        f"{row['algorithm']:<10}{row['samplers']:>9}{row['steps_per_s']:>13.0f}{row['updates_per_s']:>11.1f}"
        f"{row['efficiency']:>12.2f}{row['local_updates_per_s']:>13.1f}{row['ratio']:>7.2f}"
        f"{row['cpu_ms_per_update']:>12.2f}{row['local_cpu_ms_per_update']:>14.2f}"
        f"{row['ratio_per_transition']:>18.2f}",
        flush=True,
    )


def run(
    samplers: Sequence[int] = (1, 2, 4, 8),
    seconds: float = 15.0,
    algorithms: Sequence[str] = ("apex", "impala"),
    backend: str = "rpc",
    local_seconds: Optional[float] = None,
    learner_core: Optional[int] = None,
) -> List[Dict[str, Any]]:
    """Measure every combination and print the table; returns its rows.

    Args:
        samplers: The numbers of samplers to measure.
        seconds: Measured seconds per world (after the warm-up).
        algorithms: ``"apex"`` and/or ``"impala"``.
        backend: ``"rpc"`` or ``"ray"`` (see :func:`measure`).
        local_seconds: Seconds of each local reference (default ``seconds``).
        learner_core: The core the learner and the local reference have to themselves
            (``None``: no pinning).

    Raises:
        ValueError: For an unknown ``backend``, or a ``learner_core`` this process may not use.
    """
    _launcher(backend)  # fail before anything runs
    if learner_core is not None and learner_core not in os.sched_getaffinity(0):
        raise ValueError(
            f"learner_core must be one of the cores this process may use "
            f"{sorted(os.sched_getaffinity(0))}, got {learner_core}"
        )
    print(
        f"scaling on {os.cpu_count()} CPU core(s), backend {backend}, one learner, {seconds:g} s measured "
        f"after {WARMUP_SECONDS:g} s of warm-up; local reference measured before each row"
        + ("" if learner_core is None else f"; learner alone on core {learner_core}"),
        flush=True,
    )
    print(HEADER, flush=True)
    rows = []
    for algorithm in algorithms:
        base = None
        for n in samplers:
            local_time = seconds if local_seconds is None else local_seconds
            local = local_updates(algorithm, local_time, learner_core)
            rates = measure(algorithm, n, seconds, backend, learner_core=learner_core)
            if base is None:
                base = rates["steps_per_s"] / n
            rows.append(_row(algorithm, n, rates, local, base))
            _print_row(rows[-1])
    return rows


def main(argv: Optional[List[str]] = None) -> Optional[List[Dict[str, Any]]]:
    """Run the benchmark, but only when asked for by name (``python -m benchmarks scaling``)."""
    if argv is None:
        if "scaling" not in sys.argv[1:]:
            print(
                "scaling: skipped (it takes minutes); run it with 'python -m benchmarks scaling'",
                flush=True,
            )
            return None
        argv = []
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samplers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run")
    parser.add_argument(
        "--algorithms", nargs="+", choices=["apex", "impala"], default=["apex", "impala"]
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="rpc",
        help="transport of the world: torch RPC (default) or Ray actors",
    )
    parser.add_argument(
        "--learner-core",
        type=int,
        default=None,
        help="give the learner (and the local reference) this core alone, the samplers the others",
    )
    args = parser.parse_args(argv)
    return run(
        args.samplers, args.seconds, args.algorithms, args.backend, learner_core=args.learner_core
    )


if __name__ == "__main__":
    main(sys.argv[1:])
