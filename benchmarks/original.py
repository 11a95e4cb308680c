"""machin against the original Machin 0.3.4 on the paths both have, each timed against the same floor.

The original's source is not part of this repository, nor installable on a current stack: its
package imports ``gym``, ``colorlog``, ``torchviz``, ``moviepy`` and ``GPUtil``, and uses
``torch.distributed`` functions and numpy aliases removed since. Where a copy of its source tree
is found (the directory holding its ``machin`` package: ``$MACHIN_ORIGINAL``, by default
``../shared/reference/machin-0.3.4`` beside the repository), this benchmark imports it with those
modules replaced by inert stand-ins that nothing on the timed paths calls, and the numpy aliases
put back; otherwise it says so and stops. Run it with ``python -m benchmarks.original``.

Both packages are called ``machin``, so each side runs in a process of its own: the same rows of
``buffers.py``, ``loops.py`` and ``ac_updates.py`` code, each library against the same hand-written
floor, measured in the same process as the library. The table then sets the two ratios side by side; their
quotient is how many times less time machin takes than the original for the same work (the
floors cancel out machine drift between the two processes). Rows:

* ``append``: one CartPole transition dict into a full ring of 10k (``Buffer.append``);
* ``sample``: ``sample_batch(256, sample_method="random")`` from 100k stored transitions;
* ``prioritized append`` and ``update_priority(256)``: ``PrioritizedBuffer`` of 100k;
* the eager DQN and DDPG loops of ``loops.py`` (act, environment step, ``store_transition``,
  ``update()``), 11 paired repeats of 200 steps. The original's ``act_discrete_with_noise``
  samples from the softmax of the Q values instead of acting epsilon-greedily (one network
  call either way), and its ``act_with_noise`` returns actions attached to the actor's graph,
  which its loop detaches before handing them to the environment;
* the ``update()`` of DDPG, TD3 and SAC on a filled buffer, and PPO storing a 2048-step rollout
  and updating on it, as in ``ac_updates.py`` (the original stores the rollout one transition at
  a time: its buffer has no ``extend``).

Each library builds its optimizers as its users get them: machin torch's fused Adam from
``torch.optim.Adam``, the original the default (per-tensor) Adam.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
#: Where the original's source tree is looked for when ``$MACHIN_ORIGINAL`` is not set.
DEFAULT_ORIGINAL = ROOT.parent / "shared" / "reference" / "machin-0.3.4"
#: The modules the original imports that a current stack lacks (replaced by stand-ins).
_MISSING_MODULES = (
    "gym",
    "gym.spaces",
    "gym.wrappers",
    "colorlog",
    "torchviz",
    "moviepy",
    "moviepy.editor",
    "GPUtil",
)
#: ``torch.distributed`` functions the original decorates its wrappers with (removed from torch 2.x).
_REMOVED_DIST = (
    "broadcast_multigpu",
    "all_reduce_multigpu",
    "reduce_multigpu",
    "all_gather_multigpu",
)
#: numpy's aliases of builtin types that the original uses (removed in numpy 1.24).
_REMOVED_NUMPY = {"float": float, "int": int, "bool": bool, "object": object}
_RESULT = "RESULT "
SKIP_MESSAGE = (
    "original: no source tree of Machin 0.3.4 found (set MACHIN_ORIGINAL to the directory "
    "holding its machin package); nothing to compare against"
)


def original_path() -> Optional[Path]:
    """The directory holding the original's ``machin`` package, or ``None`` where there is none."""
    path = Path(os.environ.get("MACHIN_ORIGINAL", DEFAULT_ORIGINAL))
    return path if (path / "machin" / "__init__.py").is_file() else None


class _Inert:
    """Accepts any construction, call and attribute: stands in for what a missing module defines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __getattr__(self, name: str) -> _Inert:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (_Inert,), {})  # a class, so that the original may subclass it


def import_original(path: Path) -> types.ModuleType:
    """Import the original's ``machin`` from ``path`` (in a process that has not imported machin)."""
    import numpy as np
    import torch.distributed as dist

    if "machin" in sys.modules:
        raise RuntimeError("machin is imported already: the original needs a process of its own")
    for name in _MISSING_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            module = sys.modules[name] = _InertModule(name)
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
    for name in _REMOVED_DIST:
        if not hasattr(dist, name):
            setattr(dist, name, _Inert())
    for name, alias in _REMOVED_NUMPY.items():
        if name not in np.__dict__:
            setattr(np, name, alias)
    sys.path.insert(0, str(path))
    return importlib.import_module("machin")


def _fill(buffer: Any, dicts: List[Dict[str, Any]], total: int) -> None:
    for i in range(total):
        buffer.append(dicts[i % len(dicts)])


def measure(original: bool = False) -> Dict[str, float]:
    """Time every row of this process's machin against its floor; the ratios by row.

    Args:
        original: This process imported the original (see :func:`import_original`).
    """
    import numpy as np
    import torch

    from machin.frame.buffers import Buffer, PrioritizedBuffer

    from . import ac_updates, buffers, loops
    from .common import compare, setup_torch

    setup_torch()
    ratios: Dict[str, float] = {}
    dicts = [buffers.as_dict(t) for t in buffers.cartpole_transitions(2000)]
    counter = {"lib": 0, "floor": 0}

    def cycling(key: str, fn):
        def call():
            i = counter[key] = (counter[key] + 1) % len(dicts)
            return fn(dicts[i])

        return call

    size = 10_000
    buffer, floor = Buffer(size), buffers.FloorColumns(size)
    _fill(buffer, dicts, size)
    ratios["append"] = compare(
        "append", cycling("lib", buffer.append), cycling("floor", floor.append), number=2000
    )

    stored = 100_000
    buffer, floor = Buffer(stored), buffers.FloorColumns(stored)
    _fill(buffer, dicts, stored)
    for d in dicts:
        floor.append(d)
    floor.filled = stored
    ratios["sample"] = compare(
        "sample_batch(256, 'random') from 100k",
        lambda: buffer.sample_batch(256, sample_method="random"),
        lambda: floor.sample(256),
        number=500,
    )

    per, floor, tree = (
        PrioritizedBuffer(stored),
        buffers.FloorColumns(stored),
        buffers.FloorSumTree(stored),
    )
    _fill(per, dicts, stored)
    tree.set_all(np.ones(stored))
    ratios["prioritized append"] = compare(
        "prioritized append into 100k",
        cycling("lib", per.append),
        cycling("floor", lambda d: tree.update_one(floor.append(d), tree.max_weight)),
        number=2000,
    )

    rng = np.random.default_rng(0)
    updates = [(rng.random(256) + 0.1, rng.choice(stored, 256, replace=False)) for _ in range(16)]
    ratios["update_priority"] = compare(
        "update_priority(256) in 100k",
        *buffers.update_priority_sides(per, tree, updates),
        number=500,
    )

    qnet = loops.QNet()
    ratios["DQN loop"] = loops.compare_loops(
        "DQN, CartPole-v1,",
        loops.LibraryDQN(qnet),
        loops.FloorDQN(qnet),
        repeats=11,
        show_store=False,
    )["cpu"]
    actor, critic = loops.Actor(), loops.Critic()
    ddpg = loops.LibraryDDPG(actor, critic)
    if original:  # its actions carry the actor's graph: its users detach them before numpy()
        act = type(ddpg.agent).act_with_noise
        ddpg.agent.act_with_noise = lambda *args, **kwargs: act(
            ddpg.agent, *args, **kwargs
        ).detach()
    ratios["DDPG loop"] = loops.compare_loops(
        "DDPG, Pendulum-v1,", ddpg, loops.FloorDDPG(actor, critic), repeats=11, show_store=False
    )["cpu"]

    data, mse = ac_updates.replay_data(), torch.nn.MSELoss(reduction="sum")
    ratios["DDPG update"] = ac_updates.ddpg_bench(data, mse)
    ratios["TD3 update"] = ac_updates.td3_bench(data, mse)
    ratios["SAC update"] = ac_updates.sac_bench(data, mse)
    ratios["PPO store + update"] = ac_updates.ppo_bench()
    return ratios


def run_child(command: List[str], prefix: str, timeout: float) -> Optional[Dict[str, float]]:
    """Run ``command`` (from the repository root), printing its output live behind ``prefix``; its RESULT.

    The child is killed after ``timeout`` seconds. Raises ``RuntimeError`` when it fails, is
    killed or prints no RESULT line (its output, tracebacks included, was printed already).
    """
    child = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        child.kill()

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    result = None
    try:
        for line in child.stdout:
            if line.startswith(_RESULT):
                result = json.loads(line[len(_RESULT) :])
            else:
                print(f"{prefix}{line.rstrip()}", flush=True)
        code = child.wait()
    finally:
        watchdog.cancel()
        child.stdout.close()
    if code != 0 or result is None:
        why = f"killed after {timeout:g} s" if killed.is_set() else f"exit {code}"
        raise RuntimeError(f"{' '.join(command)} failed ({why}; its output is above)")
    return result


def _side(which: str, path: Path, timeout: float) -> Dict[str, float]:
    """Run :func:`measure` in a child process for ``which`` side."""
    return run_child(
        [sys.executable, "-m", "benchmarks.original", which, str(path)], f"  [{which}] ", timeout
    )


def table(machin: Dict[str, float], original: Dict[str, float]) -> List[str]:
    """Markdown rows: each ratio to the floor, and how many times less time machin takes."""
    lines = [
        "| path | machin / floor | Machin 0.3.4 / floor | machin faster by |",
        "| --- | --- | --- | --- |",
    ]
    for row, ratio in machin.items():
        if row in original:
            lines.append(
                f"| {row} | {ratio:.2f} | {original[row]:.2f} | {original[row] / ratio:.1f}x |"
            )
    return lines


def main(timeout: float = 1200.0) -> Optional[Dict[str, Dict[str, float]]]:
    """Print both sides' rows and the table (``None`` where the original's source is not found)."""
    path = original_path()
    if path is None:
        print(SKIP_MESSAGE, flush=True)
        return None
    sides = {which: _side(which, path, timeout) for which in ("machin", "original")}
    print("\n".join(table(sides["machin"], sides["original"])), flush=True)
    return sides


if __name__ == "__main__":
    if len(sys.argv) == 3:  # a side: python -m benchmarks.original {machin,original} PATH
        if sys.argv[1] == "original":
            import_original(Path(sys.argv[2]))
        print(_RESULT + json.dumps(measure(sys.argv[1] == "original")), flush=True)
    else:
        sys.exit(0 if main() is not None else 1)
