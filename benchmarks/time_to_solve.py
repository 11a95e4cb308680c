"""Wall-clock time to a threshold, machin next to other RL libraries (issue #47).

Each task is trained with the same hyperparameters (rl-baselines3-zoo's, SB3's defaults where
the zoo sets nothing), the same seeds and the same evaluation in every library:

==========================  =========================  =========  ==========  ==============
task                        environment                threshold  budget      evaluation
==========================  =========================  =========  ==========  ==============
``dqn-cartpole``            CartPole-v1                475        50k         every 1k steps
``ppo-cartpole``            CartPole-v1                475        100k        every 1k steps
``ppo-lunarlander``         LunarLander-v3             200        1M          every 10k steps
``sac-pendulum``            Pendulum-v1                -200       20k         every 1k steps
``td3-pendulum``            Pendulum-v1                -200       20k         every 1k steps
``sac-lunarlandercont``     LunarLanderContinuous-v3   200        500k        every 10k steps
==========================  =========================  =========  ==========  ==============

An evaluation plays ``--eval-episodes`` (default 5) greedy episodes on an environment of its
own, episode ``j`` reset with ``seed + 10**6 + j`` every time. A run stops at its first
evaluation whose mean return reaches the threshold, or at the budget. It reports the steps,
the wall-clock seconds and the process CPU seconds at that point (evaluations included, and
apart), and the last evaluation's return. Every run is a subprocess of its own with one torch
thread, pinned to one core (``os.sched_setaffinity``); ``--jobs`` runs go at once (default:
one per core), and each has a hard timeout. Results are JSON lines (``--json``), then a
Markdown table of medians and ranges over the seeds (``--readme`` appends it to
benchmarks/README.md).

Libraries (``--libraries``):

* ``machin-loop``: the documented hand-written loop. DQN, SAC, TD3: one environment,
  ``act*`` / ``store_transition`` / ``update`` written out; PPO: ``VecSampler.collect_rollout``
  then ``ppo.update()`` (docs/sampler.rst).
* ``machin-fast``: the fastest documented configuration with the same settings: the
  :class:`~machin.frame.trainer.Trainer` (bursts of ``gradient_steps`` updates every
  ``train_freq`` steps, PPO's rollouts over a ``ParallelWrapperDummy`` group) and
  ``framework.compile()``.
* ``sb3``: Stable-Baselines3 (``sb3-contrib`` installs with it): ``model.learn`` with a
  callback (benchmarks/time_to_solve_sb3.py).
* ``tianshou``: Tianshou 2's ``DQN``, ``PPO``, ``SAC``, ``TD3`` driven by its own trainer, the
  evaluation in the trainer's ``training_fn`` hook (benchmarks/time_to_solve_tianshou.py).
* ``cleanrl``: CleanRL is no package for this Python (its newest release on PyPI, 1.2.0,
  requires Python < 3.11; pip falls back to 0.4.8 of 2021, built on ``gym``), so its
  ``dqn.py``, ``ppo.py``, ``sac_continuous_action.py`` and ``td3_continuous_action.py`` of 1.2.0
  run as adapters over plain torch and gymnasium (benchmarks/time_to_solve_cleanrl.py).
* ``torchrl``: TorchRL 0.14.1 (tensordict 0.14.3), the newest release that runs with torch
  2.13: its compiled extension ``torchrl._torchrl`` loads with no release (0.10.1 to 0.14.1,
  built against an older torch), which leaves out prioritized replay only; DQN, PPO, SAC and
  TD3 run on its pure-Python collector, uniform replay buffers and losses
  (benchmarks/time_to_solve_torchrl.py). The table says so in a note under it (``NOTES``).

A library that lacks an algorithm gets a dash in that row.

Peers are never dependencies of machin. ``--install`` makes one virtual environment per peer
under ``~/.cache/machin-bench/<peer>`` (``--cache``) that sees the project's packages through
a ``.pth`` file and installs the peer's current release with ``torch`` pinned to the
project's version, so that pip picks the newest release that runs with it (or fails, which
the table reports); TorchRL is pinned to 0.14.1 and its tensordict (``PEER_PACKAGES``). A peer
run uses that environment's Python. Commands::

    python -m benchmarks.time_to_solve --install --libraries sb3
    python -m benchmarks.time_to_solve --tasks dqn-cartpole ppo-cartpole --seeds 5 \\
        --libraries machin-loop machin-fast sb3 --json runs.jsonl
    python -m benchmarks.time_to_solve --table runs.jsonl --readme   # the table again
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

import gymnasium as gym
import numpy as np
import torch

__all__ = [
    "CANNOT_RUN",
    "NOTES",
    "SKIP_MESSAGE",
    "TASKS",
    "LIBRARIES",
    "Evaluation",
    "missing_reason",
    "run_one",
    "run_all",
    "table",
    "main",
]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path.home() / ".cache" / "machin-bench"
RESULT_PREFIX = "TIME_TO_SOLVE_RESULT "
SKIP_MESSAGE = "time_to_solve: skipped (run by name: python -m benchmarks time_to_solve)"


@dataclass(frozen=True)
class Task:
    """One benchmark task: the algorithm, where it trains, when it is solved, its settings."""

    algorithm: str  # dqn, ppo, sac, td3
    env_id: str
    threshold: float
    budget: int
    eval_every: int
    settings: Dict[str, Any] = field(default_factory=dict)  # the zoo's names and values


_SAC_DEFAULTS = dict(
    batch_size=256,
    buffer_size=1_000_000,
    learning_starts=100,
    gamma=0.99,
    tau=0.005,
    train_freq=1,
    gradient_steps=1,
    net_arch=(256, 256),
)

TASKS: Dict[str, Task] = {
    "dqn-cartpole": Task(
        "dqn",
        "CartPole-v1",
        475.0,
        50_000,
        1000,
        dict(
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16,
            exploration_final_eps=0.04,
            net_arch=(256, 256),
            max_grad_norm=10.0,
        ),
    ),
    "ppo-cartpole": Task(
        "ppo",
        "CartPole-v1",
        475.0,
        100_000,
        1000,
        dict(
            n_envs=8,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=("lin", 1e-3),
            clip_range=("lin", 0.2),
        ),
    ),
    "ppo-lunarlander": Task(
        "ppo",
        "LunarLander-v3",
        200.0,
        1_000_000,
        10_000,
        dict(
            n_envs=16,
            n_steps=1024,
            batch_size=64,
            gae_lambda=0.98,
            gamma=0.999,
            n_epochs=4,
            ent_coef=0.01,
            learning_rate=3e-4,
            clip_range=0.2,
        ),
    ),
    "sac-pendulum": Task(
        "sac", "Pendulum-v1", -200.0, 20_000, 1000, dict(_SAC_DEFAULTS, learning_rate=1e-3)
    ),
    "td3-pendulum": Task(
        "td3",
        "Pendulum-v1",
        -200.0,
        20_000,
        1000,
        dict(
            learning_rate=1e-3,
            batch_size=256,
            buffer_size=200_000,
            learning_starts=10_000,
            gamma=0.98,
            tau=0.005,
            train_freq=1,
            gradient_steps=1,
            noise_std=0.1,
            net_arch=(400, 300),
        ),
    ),
    "sac-lunarlandercont": Task(
        "sac",
        "LunarLanderContinuous-v3",
        200.0,
        500_000,
        10_000,
        dict(
            _SAC_DEFAULTS,
            learning_rate=("lin", 7.3e-4),
            learning_starts=10_000,
            tau=0.01,
            net_arch=(400, 300),
        ),
    ),
}

#: library name -> the installable peer it needs (None: machin itself)
LIBRARIES: Dict[str, Optional[str]] = {
    "machin-loop": None,
    "machin-fast": None,
    "sb3": "sb3",
    "tianshou": "tianshou",
    "torchrl": "torchrl",
    "cleanrl": None,  # adapters over plain torch; PyPI's cleanrl 1.2.0 needs Python < 3.11
}
#: pip requirements of each peer's environment
PEER_PACKAGES = {
    "sb3": ["stable-baselines3", "sb3-contrib"],
    "tianshou": ["tianshou"],
    # the newest release that runs with torch 2.13 (see NOTES), and its tensordict
    "torchrl": ["torchrl==0.14.1", "tensordict==0.14.3"],
}
#: the peers that cannot run here, and why (a dash in the table and a note under it)
CANNOT_RUN: Dict[str, str] = {}
#: what the table says under it about a library that runs with limits
NOTES = {
    "torchrl": (
        "TorchRL runs at 0.14.1, the newest release: no release's compiled extension "
        "torchrl._torchrl loads with torch 2.13.0 (0.10.1 to 0.14.1 fail with undefined "
        "symbols, built against an older torch), which leaves out prioritized replay (its "
        "segment trees); the tasks use uniform replay, which with the collector, the losses "
        "and GymEnv is pure Python"
    ),
}
#: the package a peer's runner imports (its import time is not counted in a run)
_PEER_PACKAGES = {"sb3": "stable_baselines3", "tianshou": "tianshou", "torchrl": "torchrl"}
#: the module of each library's runners (``RUNNERS``: (library, algorithm) -> train function)
_RUNNER_MODULES = {
    "machin-loop": "time_to_solve_machin",
    "machin-fast": "time_to_solve_machin",
    "sb3": "time_to_solve_sb3",
    "tianshou": "time_to_solve_tianshou",
    "cleanrl": "time_to_solve_cleanrl",
    "torchrl": "time_to_solve_torchrl",
}


# -- evaluation and the stop rule ---------------------------------------------------------
class Evaluation:
    """Greedy evaluations every ``every`` steps and the rule that stops a run.

    ``policy(obs)`` maps one observation (a numpy array) to the action the environment takes.
    """

    def __init__(
        self, env_id: str, seed: int, episodes: int, every: int, threshold: float, budget: int
    ) -> None:
        self.env = gym.make(env_id)
        self.seed, self.episodes, self.every = seed, episodes, every
        self.threshold, self.budget = threshold, budget
        self.steps: List[int] = []
        self.returns: List[float] = []
        self.last_step = 0
        self.reached_at: Optional[Dict[str, float]] = None
        self.eval_wall = self.eval_cpu = 0.0
        self.started_wall, self.started_cpu = time.perf_counter(), time.process_time()

    def episode_return(self, policy: Callable[[np.ndarray], Any], index: int) -> float:
        """Return of greedy episode ``index``, reset with ``seed + 10**6 + index``."""
        obs, _ = self.env.reset(seed=self.seed + 10**6 + index)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = self.env.step(policy(obs))
            total, done = total + float(reward), terminated or truncated
        return total

    def due(self, step: int) -> bool:
        """Whether training step count ``step`` crossed an evaluation point since the last call."""
        crossed = step // self.every > self.last_step // self.every or step >= self.budget
        self.last_step = step
        return crossed

    def record(self, step: int, mean: float) -> bool:
        """Note evaluation ``mean`` at ``step``; return whether the run must stop now."""
        self.steps.append(step)
        self.returns.append(float(mean))
        self.last_step = max(self.last_step, step)
        if mean >= self.threshold and self.reached_at is None:
            self.reached_at = {
                "steps": step,
                "wall": time.perf_counter() - self.started_wall,
                "cpu": time.process_time() - self.started_cpu,
            }
        return self.reached_at is not None or step >= self.budget

    def evaluate(self, step: int, policy: Callable[[np.ndarray], Any]) -> bool:
        """Play the greedy episodes at ``step``, record their mean; return whether to stop."""
        wall, cpu = time.perf_counter(), time.process_time()
        mean = statistics.mean(self.episode_return(policy, j) for j in range(self.episodes))
        self.eval_wall += time.perf_counter() - wall
        self.eval_cpu += time.process_time() - cpu
        return self.record(step, mean)

    def step(self, step: int, policy: Callable[[np.ndarray], Any]) -> bool:
        """At every training step: evaluate when due; return whether the run must stop."""
        return self.due(step) and self.evaluate(step, policy)

    def summary(self) -> Dict[str, Any]:
        """The JSON-able result of the run so far."""
        reached = self.reached_at or {}
        return {
            "steps_to_threshold": reached.get("steps"),
            "wall_to_threshold": reached.get("wall"),
            "cpu_to_threshold": reached.get("cpu"),
            "final_return": self.returns[-1] if self.returns else None,
            "steps_taken": self.last_step,
            "wall_seconds": time.perf_counter() - self.started_wall,
            "cpu_seconds": time.process_time() - self.started_cpu,
            "eval_wall_seconds": self.eval_wall,
            "eval_cpu_seconds": self.eval_cpu,
            "eval_steps": self.steps,
            "eval_returns": self.returns,
        }


def _schedule_value(value: Any, progress_left: float = 1.0) -> float:
    """A setting that may be the zoo's ``lin_X`` (``("lin", X)``) at ``progress_left`` (1 at the start)."""
    if isinstance(value, tuple) and value and value[0] == "lin":
        return value[1] * progress_left
    return value


def _spaces(env_id: str):
    probe = gym.make(env_id)
    spaces = probe.observation_space, probe.action_space
    probe.close()
    return spaces


def _scaled_env_actions(action_space: gym.spaces.Box) -> Callable[[Any], np.ndarray]:
    """Map actions in [-1, 1] (tensor or array) to ``action_space``'s bounds (SB3's ``unscale_action``)."""
    low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)

    def to_env(action: Any) -> np.ndarray:
        if isinstance(action, torch.Tensor):
            action = action.detach().numpy()
        scaled = np.clip(np.asarray(action, dtype=np.float64).reshape(action_space.shape), -1, 1)
        return (low + (scaled + 1.0) * 0.5 * (high - low)).astype(action_space.dtype)

    return to_env


# -- one run in this process ------------------------------------------------------------
def _runner(
    library: str, algorithm: str
) -> Callable[[Task, int, Evaluation, Dict[str, Any]], None]:
    """The function that trains ``algorithm`` with ``library`` (a peer is imported only when
    the function runs).

    Raises:
        NotImplementedError: When ``library`` cannot run here or lacks ``algorithm``.
    """
    reason = missing_reason(library, algorithm)
    if reason is not None:
        raise NotImplementedError(f"library {library!r}: {reason}")
    module = importlib.import_module(f".{_RUNNER_MODULES[library]}", __package__)
    return module.RUNNERS[(library, algorithm)]


def missing_reason(library: str, algorithm: str) -> Optional[str]:
    """Why ``library`` has no run of ``algorithm`` (``None`` when it has one)."""
    if library in CANNOT_RUN:
        return CANNOT_RUN[library]
    module = importlib.import_module(f".{_RUNNER_MODULES[library]}", __package__)
    if (library, algorithm) not in module.RUNNERS:
        return f"no {algorithm.upper()} in {library}"
    return None


def library_version(library: str) -> str:
    """The version of the package ``library`` runs (imported here: call it in a run's process)."""
    if library.startswith("machin"):
        import machin

        return getattr(machin, "__version__", "?")
    if library == "cleanrl":
        from .time_to_solve_cleanrl import SCRIPTS_VERSION

        return f"{SCRIPTS_VERSION} (scripts adapted)"
    from importlib.metadata import version

    package = {"sb3": "stable-baselines3"}.get(library, library)
    return version(package)


def run_one(
    task_name: str,
    library: str,
    seed: int,
    eval_episodes: int = 5,
    budget: Optional[int] = None,
    compile: bool = True,
) -> Dict[str, Any]:
    """Train ``task_name`` with ``library`` and ``seed`` in this process; return its JSON-able record.

    ``budget`` replaces the task's step budget (tiny runs for tests); ``compile=False`` leaves
    out ``machin-fast``'s ``compile()`` (whose first updates take tens of seconds to compile).
    The library is imported before the clocks start; building the agent is counted (Tianshou
    compiles its numba return functions there, as ``machin-fast`` counts its ``compile()``).

    Raises:
        ValueError: When ``task_name`` or ``library`` is not known.
        NotImplementedError: When ``library`` cannot run here or lacks the task's algorithm.
    """
    if task_name not in TASKS:
        raise ValueError(f"task_name must be one of {sorted(TASKS)}, got {task_name!r}")
    if library not in LIBRARIES:
        raise ValueError(f"library must be one of {sorted(LIBRARIES)}, got {library!r}")
    task = TASKS[task_name]
    if budget is not None:
        task = Task(
            task.algorithm,
            task.env_id,
            task.threshold,
            budget,
            min(task.eval_every, budget),
            task.settings,
        )
    train = _runner(library, task.algorithm)
    if library in _PEER_PACKAGES:  # imported before the clocks start, as machin is
        importlib.import_module(_PEER_PACKAGES[library])
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    evaluation = Evaluation(
        task.env_id, seed, eval_episodes, task.eval_every, task.threshold, task.budget
    )
    train(task, seed, evaluation, {"compile": compile})
    record = {
        "task": task_name,
        "library": library,
        "version": library_version(library),
        "seed": seed,
        "compile": compile,
        "budget": task.budget,
        "threshold": task.threshold,
        "error": None,
    }
    record.update(evaluation.summary())
    return record


# -- runs in subprocesses -----------------------------------------------------------------
def peer_python(library: str, cache: Path) -> str:
    """The Python that runs ``library``: its peer environment's, or this one for machin."""
    peer = LIBRARIES[library]
    if peer is None:
        return sys.executable
    candidate = cache / peer / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def _failed(spec: Dict[str, Any], reason: str) -> Dict[str, Any]:
    return {
        "task": spec["task"],
        "library": spec["library"],
        "seed": spec["seed"],
        "version": None,
        "error": reason,
        "steps_to_threshold": None,
        "wall_to_threshold": None,
        "cpu_to_threshold": None,
        "final_return": None,
    }


def run_subprocess(
    spec: Dict[str, Any], core: Optional[int], timeout: float, cache: Path
) -> Dict[str, Any]:
    """Run one ``spec`` (task, library, seed, eval_episodes, budget) in a fresh process pinned to ``core``."""
    command = [
        peer_python(spec["library"], cache),
        "-m",
        "benchmarks.time_to_solve",
        "--one",
        json.dumps(spec),
    ]
    if core is not None:
        command += ["--core", str(core)]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    try:
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return _failed(spec, f"timeout after {timeout:.0f} s")
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return _failed(spec, f"exit {done.returncode}: {last}")


def run_all(
    specs: List[Dict[str, Any]],
    jobs: int,
    timeout: float,
    cache: Path,
    on_result: Callable[[Dict[str, Any]], None] = lambda r: None,
) -> List[Dict[str, Any]]:
    """Run ``specs`` at most ``jobs`` at a time, each on a core of its own; results in ``specs``' order."""
    cores: queue.Queue[Optional[int]] = queue.Queue()
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    for index in range(jobs):
        cores.put(available[index % len(available)] if available else None)
    results: List[Optional[Dict[str, Any]]] = [None] * len(specs)
    lock = threading.Lock()

    def work(index: int) -> None:
        core = cores.get()
        try:
            result = run_subprocess(specs[index], core, timeout, cache)
        finally:
            cores.put(core)
        with lock:
            results[index] = result
            on_result(result)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(work, range(len(specs))))
    return [r for r in results if r is not None]


# -- JSON lines and the table -------------------------------------------------------------
def write_jsonl(path: Path, records: Iterable[Dict[str, Any]]) -> None:
    """Append ``records`` to ``path``, one JSON object a line."""
    with open(path, "a", encoding="utf-8") as stream:
        for record in records:
            stream.write(json.dumps(record, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    """The records of a JSON-lines file (blank lines skipped)."""
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def _number(value: float, digits: int) -> str:
    if math.isinf(value):
        return "-"
    return f"{value:,.{digits}f}"


def median_range(values: List[Optional[float]], digits: int = 0) -> str:
    """``median (min to max)``; ``None`` counts as never (infinite), shown as ``-``."""
    numbers = [math.inf if v is None else float(v) for v in values]
    if not numbers or all(math.isinf(v) for v in numbers):
        return "-"
    middle = statistics.median(numbers)
    low, high = min(numbers), max(numbers)
    return f"{_number(middle, digits)} ({_number(low, digits)} to {_number(high, digits)})"


def _row(task: str, library: str, runs: List[Dict[str, Any]], reason: Optional[str]) -> str:
    """One Markdown row: a dash in every cell where the library could not run."""
    if not runs:
        return f"| {task} | {library} | - | - | - | - | - | - | {reason or 'not run'} |"
    ok = [r for r in runs if not r.get("error")]
    errors = sorted({r["error"] for r in runs if r.get("error")})
    versions = sorted({str(r["version"]) for r in ok if r.get("version")})
    solved = sum(r["steps_to_threshold"] is not None for r in ok)
    finals = [r["final_return"] for r in ok if r.get("final_return") is not None]
    final = f"{statistics.median(finals):.1f}" if finals else "-"
    cpu = median_range([r.get("cpu_to_threshold") for r in runs], 0)
    note = "; ".join(errors)
    return (
        f"| {task} | {library} {', '.join(versions)} | {solved}/{len(runs)} | "
        f"{median_range([r.get('wall_to_threshold') for r in runs], 1)} | "
        f"{median_range([r.get('steps_to_threshold') for r in runs], 0)} | {cpu} | "
        f"{final} | {len(ok)} | {note} |"
    )


def table(
    records: List[Dict[str, Any]],
    libraries: Iterable[str],
    tasks: Iterable[str],
    reasons: Optional[Dict[str, str]] = None,
) -> str:
    """The Markdown table of ``records``: one row per (task, library), median (range) over seeds.

    A library without records gets a row of dashes with its reason: ``reasons[library]``, or
    for a library that cannot run here (``CANNOT_RUN``) a pointer to a note under the table
    that gives the reason, or the algorithm it lacks. A library with a note (``NOTES``) gets
    it under the table.
    """
    reasons = dict(reasons or {})
    libraries, notes = list(libraries), []
    lines = [
        "| task | library | solved | wall s to threshold | steps to threshold | CPU s to threshold | final return (median) | runs | notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task in tasks:
        for library in libraries:
            runs = sorted(
                (r for r in records if r["task"] == task and r["library"] == library),
                key=lambda r: r["seed"],
            )
            reason = reasons.get(library)
            if reason is None and library in CANNOT_RUN:
                reason = "cannot run here (note below)"
            elif reason is None and task in TASKS:
                reason = missing_reason(library, TASKS[task].algorithm)
            lines.append(_row(task, library, runs, reason))
    for library in libraries:
        if library in CANNOT_RUN and library not in reasons:
            notes.append(f"- {library} did not run: {CANNOT_RUN[library]}")
        elif library in NOTES:
            notes.append(f"- {library}: {NOTES[library]}")
    return "\n".join(lines + ([""] + notes if notes else []))


# -- installing the peers -----------------------------------------------------------------
def install_peer(peer: str, cache: Path) -> str:
    """Make ``cache/peer``: a venv that sees this environment's packages, the peer installed with
    torch pinned to this one's version. Returns pip's last line that is not a warning
    (``Successfully ...`` or the error)."""
    import site
    import venv

    target = cache / peer
    venv.EnvBuilder(with_pip=False, clear=True).create(target)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (target / "lib" / version / "site-packages" / "_machin_bench_base.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n"
    )
    constraints = target / "constraints.txt"
    constraints.write_text(f"torch=={torch.__version__.split('+')[0]}\n")
    command = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(target / "bin" / "python"),
        "install",
        "-c",
        str(constraints),
        *PEER_PACKAGES[peer],
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    (target / "pip.log").write_text(done.stdout + done.stderr)
    lines = (done.stdout + done.stderr).strip().splitlines()
    said = [line for line in lines if not line.startswith("WARNING:")]  # e.g. an index unreachable
    return (said or lines or [f"exit {done.returncode}"])[-1]


# -- the command line ---------------------------------------------------------------------
def _child(spec_text: str, core: Optional[int]) -> None:
    """``--one``: run one spec in this process and print its record."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    spec = json.loads(spec_text)
    record = run_one(
        spec["task"],
        spec["library"],
        spec["seed"],
        spec.get("eval_episodes", 5),
        spec.get("budget"),
        spec.get("compile", True),
    )
    print(RESULT_PREFIX + json.dumps(record), flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=list(LIBRARIES))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--budget", type=int, default=None, help="replace every task's step budget")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--install", action="store_true", help="install the peers named, then stop")
    parser.add_argument("--json", type=Path, default=None, help="append the records (JSON lines)")
    parser.add_argument(
        "--table", type=Path, default=None, help="only print the table of this file"
    )
    parser.add_argument(
        "--readme", action="store_true", help="append the table to benchmarks/README.md"
    )
    parser.add_argument("--no-compile", action="store_true", help="machin-fast without compile()")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Optional[List[str]] = None) -> Optional[List[Dict[str, Any]]]:
    """The command line (see the module's docstring); under ``python -m benchmarks`` only by name."""
    if argv is None:
        if "time_to_solve" not in sys.argv[1:]:
            print(SKIP_MESSAGE, flush=True)
            return None
        argv = []
    parser = _parser()
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    if not 1 <= args.jobs <= cores:
        parser.error(f"--jobs must be between 1 and the {cores} cores available, got {args.jobs}")
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    if args.one is not None:
        _child(args.one, args.core)
        return None
    if args.install:
        for peer in sorted({LIBRARIES[name] for name in args.libraries} - {None}):
            print(f"{peer}: {install_peer(peer, args.cache)}", flush=True)
        return None
    if args.table is not None:
        records = read_jsonl(args.table)
    else:
        specs = [
            {
                "task": t,
                "library": lib,
                "seed": s,
                "eval_episodes": args.eval_episodes,
                "budget": args.budget,
                "compile": not args.no_compile,
            }
            for t in args.tasks
            for lib in args.libraries
            if missing_reason(lib, TASKS[t].algorithm) is None
            for s in range(args.seeds)
        ]
        report = functools.partial(_print_record, path=args.json)
        records = run_all(specs, args.jobs, args.timeout, args.cache, report)
    text = table(records, args.libraries, args.tasks)
    print(text)
    if args.readme:
        with open(Path(__file__).with_name("README.md"), "a", encoding="utf-8") as stream:
            stream.write("\n" + text + "\n")
    return records


def _print_record(record: Dict[str, Any], path: Optional[Path]) -> None:
    steps = record.get("steps_to_threshold")
    print(
        f"{record['task']} {record['library']} seed {record['seed']}: steps {steps}, "
        f"wall {record.get('wall_to_threshold')}, final {record.get('final_return')}, "
        f"error {record.get('error')}",
        flush=True,
    )
    if path is not None:
        write_jsonl(path, [record])


if __name__ == "__main__":
    main(sys.argv[1:])
