"""machin against Stable-Baselines3 on the paths both libraries have, each timed against the same floor.

Stable-Baselines3 is not a dependency of machin; this benchmark runs when it is importable
(``pip install stable-baselines3``) and otherwise says so and stops. Run it with
``python -m benchmarks.versus`` (or ``python -m benchmarks versus``).

Every row times three sides in one process, one torch thread: the hand-written floor of
``buffers.py`` / ``loops.py``, machin, and Stable-Baselines3, each called the way its users
call it, back to back in a new random order every repeat. Printed: milliseconds per call
(CPU time of this thread; the loops also wall time) and each library's ratio to the floor,
the median of the ratios within the repeats.

* ``append``: one CartPole transition into a full ring of 10k. machin:
  ``Buffer.append`` of the documented dict of tensors; SB3: ``ReplayBuffer.add`` of the
  numpy arrays an environment returns (``[1, 4]`` observations, ``[1, 1]`` action, ``[1]``
  reward and done, one info dict). The floor writes the dict's tensors through numpy views.
* ``sample``: 256 transitions drawn with replacement from 100k, as tensors. machin:
  ``sample_batch(256, sample_method="random")``; SB3: ``ReplayBuffer.sample(256)``.
* DQN loop, CartPole-v1 (act, environment step, store, one update of batch 100 per
  step, MLP 64-64, Adam lr 1e-3, soft target updates with tau 0.005, buffer 100k):
  machin and the floor as in ``loops.py`` (double DQN, MSE loss); SB3's ``DQN.learn``
  with ``train_freq=1``, ``gradient_steps=1``, ``target_update_interval=1``, ``tau=0.005``
  and epsilon 0 (so that every step runs the network, as the other two sides do; they
  draw their random actions after the forward pass). SB3 does less per update (no double
  DQN: one forward pass fewer) and also clips the gradient norm (its default
  ``max_grad_norm=10``), uses its Huber loss and steps the environment through a
  ``DummyVecEnv`` with a ``Monitor``, as its users get it.
* DDPG loop, Pendulum-v1 (actor and critic MLP 64-64, batch 100, Gaussian noise 0.2,
  tau 0.005): machin and the floor as in ``loops.py``; SB3's ``DDPG.learn`` with the same
  settings (its single learning rate 1e-3 for both networks).

The optimizers are each library's: the floors and machin use torch's fused Adam (what
machin builds from ``torch.optim.Adam``), SB3 its default (per-tensor) Adam.
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

try:
    from . import buffers, loops
    from .common import setup_torch
except ImportError:  # run as a script
    import buffers
    import loops
    from common import setup_torch

#: Printed instead of the rows when Stable-Baselines3 cannot be imported.
SKIP_MESSAGE = (
    "versus: Stable-Baselines3 is not importable here (it is not a machin dependency); "
    "pip install stable-baselines3 to compare against it"
)


def _time_sides(
    name: str,
    sides: Dict[str, Callable[[], object]],
    *,
    number: int,
    repeats: int = 11,
    warmup: int = 2,
    wall: bool = False,
    per: int = 1,
) -> Dict[str, float]:
    """Time each side ``number`` calls per repeat; print one line per clock; return the ratios to the floor.

    ``sides`` maps ``"floor"``, ``"machin"`` and ``"sb3"`` to one call each. Every repeat runs
    the three back to back in an order drawn anew (seeded); a library's ratio is the median
    over the repeats of its time divided by the floor's in the same repeat, as in
    ``loops.compare_loops``. Printed with the ratios: the median times (thread CPU time, and
    with ``wall`` also wall time) in milliseconds per call divided by ``per`` (the steps one
    call runs).
    """
    for _ in range(warmup):
        for call in sides.values():
            for _ in range(number):
                call()
    cpu: Dict[str, List[float]] = {key: [] for key in sides}
    walls: Dict[str, List[float]] = {key: [] for key in sides}
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        order, shuffle = list(sides), random.Random(0).shuffle
        for _ in range(repeats):
            shuffle(order)
            for key in order:
                call = sides[key]
                start_cpu, start_wall = time.thread_time(), time.perf_counter()
                for _ in range(number):
                    call()
                cpu[key].append((time.thread_time() - start_cpu) / number / per)
                walls[key].append((time.perf_counter() - start_wall) / number / per)
    finally:
        if was_enabled:
            gc.enable()
    ratios = {}
    for clock, times in (("CPU", cpu), ("wall", walls)) if wall else (("CPU", cpu),):
        median = {key: statistics.median(values) for key, values in times.items()}
        floor = median["floor"]
        parts = [f"floor {floor * 1e3:.4f} ms"]
        for key in ("machin", "sb3"):
            ratio = ratios[f"{key} {clock}"] = statistics.median(
                x / y for x, y in zip(times[key], times["floor"])
            )
            parts.append(
                f"{'SB3' if key == 'sb3' else key} {median[key] * 1e3:.4f} ms ({ratio:.2f})"
            )
        print(
            f"{name} ({clock} time per {'step' if per > 1 else 'call'}): "
            + ", ".join(parts)
            + f" ({repeats} repeats)",
            flush=True,
        )
    return ratios


def _filled_buffers(stored: int, dicts: List[Dict[str, Any]], arrays: List[tuple]):
    """A full floor, machin ``Buffer`` and SB3 ``ReplayBuffer`` of ``stored`` CartPole transitions."""
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from machin.frame.buffers import Buffer

    machin = Buffer(stored)
    floor = buffers.FloorColumns(stored)
    sb3 = ReplayBuffer(
        stored,
        spaces.Box(-np.inf, np.inf, (4,), np.float32),
        spaces.Discrete(2),
        device="cpu",
        handle_timeout_termination=False,
    )
    for i in range(stored):
        machin.append(dicts[i % len(dicts)])
        floor.append(dicts[i % len(dicts)])
        sb3.add(*arrays[i % len(arrays)], [{}])
    floor.filled = stored
    return floor, machin, sb3


def bench_buffers() -> Dict[str, float]:
    """``append`` into a full ring of 10k and ``sample(256)`` from 100k, in all three."""
    transitions = buffers.cartpole_transitions(2000)
    dicts = [buffers.as_dict(t) for t in transitions]
    arrays = [
        (
            t.state["state"].numpy(),
            t.next_state["state"].numpy(),
            t.action["action"].numpy(),
            np.array([t.reward], np.float32),
            np.array([float(t.terminal)], np.float32),
        )
        for t in transitions
    ]
    floor, machin, sb3 = _filled_buffers(10_000, dicts, arrays)
    counter = {"floor": 0, "machin": 0, "sb3": 0}

    def next_index(side: str) -> int:
        i = counter[side] = (counter[side] + 1) % len(dicts)
        return i

    ratios = {
        f"append {k}": v
        for k, v in _time_sides(
            "append of a CartPole transition into 10k",
            {
                "floor": lambda: floor.append(dicts[next_index("floor")]),
                "machin": lambda: machin.append(dicts[next_index("machin")]),
                "sb3": lambda: sb3.add(*arrays[next_index("sb3")], [{}]),
            },
            number=2000,
        ).items()
    }
    floor, machin, sb3 = _filled_buffers(buffers.STORED, dicts, arrays)
    ratios.update(
        {
            f"sample {k}": v
            for k, v in _time_sides(
                "sample(256) with replacement from 100k",
                {
                    "floor": lambda: floor.sample(buffers.BATCH),
                    "machin": lambda: machin.sample_batch(buffers.BATCH, sample_method="random"),
                    "sb3": lambda: sb3.sample(buffers.BATCH),
                },
                number=500,
            ).items()
        }
    )
    return ratios


class _SB3Side:
    """Stable-Baselines3's own loop: ``learn(steps)`` continued where the last call stopped."""

    def __init__(self, model):
        self.model = model
        model.learn(
            model.learning_starts + loops.BATCH
        )  # past the warm-up: every later step updates

    def run(self, steps: int) -> None:
        self.model.learn(steps, reset_num_timesteps=False)


def bench_loops(steps: int = 200) -> Dict[str, float]:
    """The DQN and DDPG loops of ``loops.py`` against Stable-Baselines3's ``learn``."""
    from stable_baselines3 import DDPG, DQN
    from stable_baselines3.common.noise import NormalActionNoise

    common = dict(
        learning_rate=1e-3,
        buffer_size=loops.CAPACITY,
        learning_starts=loops.BATCH,
        batch_size=loops.BATCH,
        tau=loops.TAU,
        gamma=loops.GAMMA,
        train_freq=1,
        gradient_steps=1,
        policy_kwargs={"net_arch": [64, 64]},
        device="cpu",
        seed=0,
        verbose=0,
    )
    qnet = loops.QNet()
    sides = {
        "floor": loops.FloorDQN(qnet),
        "machin": loops.LibraryDQN(qnet),
        "sb3": _SB3Side(
            DQN(
                "MlpPolicy",
                "CartPole-v1",
                target_update_interval=1,
                exploration_initial_eps=0.0,
                exploration_final_eps=0.0,
                **common,
            )
        ),
    }
    for side in (sides["floor"], sides["machin"]):
        side.run(loops.BATCH)
    ratios = {
        f"DQN loop {k}": v
        for k, v in _time_sides(
            "DQN loop, CartPole-v1",
            {k: (lambda s=s: s.run(steps)) for k, s in sides.items()},
            number=1,
            wall=True,
            per=steps,
        ).items()
    }
    actor, critic = loops.Actor(), loops.Critic()
    sides = {
        "floor": loops.FloorDDPG(actor, critic),
        "machin": loops.LibraryDDPG(actor, critic),
        "sb3": _SB3Side(
            DDPG(
                "MlpPolicy",
                "Pendulum-v1",
                action_noise=NormalActionNoise(np.zeros(1), np.full(1, 0.2)),
                **common,
            )
        ),
    }
    for side in (sides["floor"], sides["machin"]):
        side.run(loops.BATCH)
    ratios.update(
        {
            f"DDPG loop {k}": v
            for k, v in _time_sides(
                "DDPG loop, Pendulum-v1",
                {k: (lambda s=s: s.run(steps)) for k, s in sides.items()},
                number=1,
                wall=True,
                per=steps,
            ).items()
        }
    )
    return ratios


def main() -> Optional[Dict[str, float]]:
    """Print every row (``None`` without Stable-Baselines3)."""
    try:
        import stable_baselines3
    except ImportError:
        print(SKIP_MESSAGE, flush=True)
        return None
    setup_torch()
    print(
        f"  Stable-Baselines3 {stable_baselines3.__version__}; times per call, (ratio to the floor)",
        flush=True,
    )
    ratios = bench_buffers()
    ratios.update(bench_loops())
    return ratios


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
