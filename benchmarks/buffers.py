"""Replay-buffer throughput against bare-PyTorch floors (CartPole-sized transitions).

Transitions: ``state``/``next_state`` ``[1, 4]`` float32, ``action`` ``[1, 1]`` int64,
``reward`` float, ``terminal`` bool.

* ``append``: ``Buffer.append(transition)`` into a full ring, against writing the same
  five rows into preallocated tensors by hand. The transition objects are built
  beforehand (building one is the caller's step); ``append(dict)``, which builds the
  transition inside, is printed for information, and so is the append of a buffer
  built with ``check_finite=False``: the difference is what the non-finite checks cost.
* ``sample``: ``Buffer.sample_batch(256)`` (distinct positions) from 100k stored
  transitions, against ``torch.randint`` plus one ``index_select`` per column. The
  floor draws with replacement; the library's default also rejects repeated draws,
  so ``sample_method="random"`` is printed beside it for information.
* ``prioritized``: ``PrioritizedBuffer.sample_batch(256)`` plus ``update_priority``
  from 100k, against a minimal vectorised numpy sum tree (below) plus the same
  gathers and importance-sampling weights.
* ``prioritized append``: ``PrioritizedBuffer.append(transition)`` with the default
  priority (the largest stored one) into a full ring of 500k, the algorithms' default
  ``replay_size``, against writing the rows by hand and setting one leaf of the floor
  sum tree to a running maximum kept in a Python float (which, unlike the library,
  never goes down when the largest priority is lowered).

Run with ``python -m benchmarks.buffers``.
"""

from __future__ import annotations

from typing import List

import numpy as np
import torch

from machin.frame.buffers import Buffer, PrioritizedBuffer
from machin.frame.transition import Transition

from .common import compare, setup_torch

STORED = 100_000
BATCH = 256


def cartpole_transitions(n: int, seed: int = 0) -> List[Transition]:
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(n + 1, 1, 4, generator=g)
    actions = torch.randint(2, (n, 1, 1), generator=g)
    return [
        Transition(
            state={"state": states[i]},
            action={"action": actions[i]},
            next_state={"state": states[i + 1]},
            reward=1.0,
            terminal=i % 200 == 199,
        )
        for i in range(n)
    ]


def fill(buffer: Buffer, transitions: List[Transition], total: int) -> None:
    for start in range(0, total, len(transitions)):
        buffer.extend(transitions[: min(len(transitions), total - start)])


class FloorColumns:
    """What a hand-written replay memory holds: five preallocated tensors."""

    def __init__(self, size: int):
        self.size = size
        self.state = torch.zeros(size, 4)
        self.action = torch.zeros(size, 1, dtype=torch.long)
        self.next_state = torch.zeros(size, 4)
        self.reward = torch.zeros(size, 1)
        self.terminal = torch.zeros(size, 1, dtype=torch.bool)
        self.pos = 0

    def append(self, state, action, next_state, reward, terminal) -> None:
        i = self.pos
        self.state[i] = state[0]
        self.action[i] = action[0]
        self.next_state[i] = next_state[0]
        self.reward[i] = reward
        self.terminal[i] = terminal
        self.pos = (i + 1) % self.size

    def gather(self, index: torch.Tensor):
        return (
            self.state.index_select(0, index),
            self.action.index_select(0, index),
            self.next_state.index_select(0, index),
            self.reward.index_select(0, index),
            self.terminal.index_select(0, index),
        )


class FloorSumTree:
    """A minimal vectorised numpy sum tree: the floor for prioritized sampling.

    Levels are separate arrays (leaves padded to a power of two), searched top-down
    for a whole batch at once and updated bottom-up for a whole batch at once.
    """

    def __init__(self, size: int):
        depth = max(1, int(np.ceil(np.log2(size))))
        self.levels = [np.zeros(2**d) for d in range(depth + 1)]  # root level first
        self.leaves = self.levels[-1]

    def total(self) -> float:
        return float(self.levels[0][0])

    def set_all(self, weights: np.ndarray) -> None:
        self.leaves[: weights.size] = weights
        for d in range(len(self.levels) - 2, -1, -1):
            below = self.levels[d + 1]
            self.levels[d][:] = below[0::2] + below[1::2]

    def find(self, targets: np.ndarray) -> np.ndarray:
        index = np.zeros(targets.shape, dtype=np.int64)
        for below in self.levels[1:]:
            left = 2 * index
            left_w = below[left]
            right = targets > left_w
            targets = np.where(right, targets - left_w, targets)
            index = left + right
        return index

    def update_one(self, index: int, weight: float) -> None:
        """One leaf (an append): walk up with Python integers."""
        self.leaves[index] = weight
        for d in range(len(self.levels) - 2, -1, -1):
            index //= 2
            below = self.levels[d + 1]
            self.levels[d][index] = below[2 * index] + below[2 * index + 1]

    def update(self, index: np.ndarray, weights: np.ndarray) -> None:
        self.leaves[index] = weights
        index = np.unique(index)
        for d in range(len(self.levels) - 2, -1, -1):
            index = index // 2  # still sorted: repeated parents are neighbours
            index = index[np.concatenate(([True], index[1:] != index[:-1]))]
            below = self.levels[d + 1]
            self.levels[d][index] = below[2 * index] + below[2 * index + 1]


def bench_append() -> None:
    size = 10_000
    transitions = cartpole_transitions(2000)
    buffer = Buffer(size)
    fill(buffer, transitions, size)  # a full ring: no growth during timing
    floor = FloorColumns(size)
    raw = [
        (t.state["state"], t.action["action"], t.next_state["state"], t.reward, t.terminal)
        for t in transitions
    ]
    dicts = [
        {
            "state": t.state,
            "action": t.action,
            "next_state": t.next_state,
            "reward": t.reward,
            "terminal": t.terminal,
        }
        for t in transitions
    ]
    counter = {"lib": 0, "floor": 0, "dict": 0}

    def library():
        i = counter["lib"] = (counter["lib"] + 1) % len(transitions)
        buffer.append(transitions[i])

    def floor_append():
        i = counter["floor"] = (counter["floor"] + 1) % len(raw)
        floor.append(*raw[i])

    def library_dict():
        i = counter["dict"] = (counter["dict"] + 1) % len(dicts)
        buffer.append(dicts[i])

    unchecked = Buffer(size, check_finite=False)
    fill(unchecked, transitions, size)

    def library_unchecked():
        i = counter["lib"] = (counter["lib"] + 1) % len(transitions)
        unchecked.append(transitions[i])

    compare("buffer append (Transition)", library, floor_append, number=1000)
    compare(
        "buffer append (dict, builds the Transition; info)", library_dict, floor_append, number=1000
    )
    # what the non-finite checks cost: the same append without them
    compare("buffer append (Transition, check_finite=False; info)", library_unchecked, floor_append,
            number=1000)


def bench_sample() -> None:
    transitions = cartpole_transitions(5000)
    buffer = Buffer(STORED)
    fill(buffer, transitions, STORED)
    floor = FloorColumns(STORED)
    floor.state.normal_()
    floor.next_state.normal_()

    def library():
        buffer.sample_batch(BATCH)

    def floor_sample():
        floor.gather(torch.randint(STORED, (BATCH,)))

    def library_random():
        buffer.sample_batch(BATCH, sample_method="random")

    compare("buffer sample_batch(256) from 100k", library, floor_sample, number=200)
    compare(
        "buffer sample_batch(256, 'random') from 100k (info: with replacement, as the floor)",
        library_random,
        floor_sample,
        number=200,
    )


def bench_prioritized_append() -> None:
    size = 500_000
    transitions = cartpole_transitions(2000)
    buffer = PrioritizedBuffer(size)
    fill(buffer, transitions, size)
    floor, tree = FloorColumns(size), FloorSumTree(size)
    raw = [(t.state["state"], t.action["action"], t.next_state["state"], t.reward, t.terminal)
           for t in transitions]
    counter = {"lib": 0, "floor": 0}
    running_max = [1.0]

    def library():
        i = counter["lib"] = (counter["lib"] + 1) % len(transitions)
        buffer.append(transitions[i])

    def floor_append():
        i = counter["floor"] = (counter["floor"] + 1) % len(raw)
        position = floor.pos
        floor.append(*raw[i])
        tree.update_one(position, running_max[0])

    compare("prioritized append (default priority) into 500k", library, floor_append, number=1000)


def bench_prioritized() -> None:
    transitions = cartpole_transitions(5000)
    rng = np.random.default_rng(0)
    buffer = PrioritizedBuffer(STORED, generator=np.random.default_rng(1))
    fill(buffer, transitions, STORED)
    priorities = rng.random(STORED) + 0.1
    buffer.update_priority(priorities, np.arange(STORED))
    floor = FloorColumns(STORED)
    tree = FloorSumTree(STORED)
    tree.set_all((np.abs(priorities) + 0.01) ** 0.6)
    new_priorities = rng.random(BATCH)
    beta = [0.4]

    def library():
        _, _, index, _ = buffer.sample_batch(BATCH)
        buffer.update_priority(new_priorities, index)

    def floor_step():
        total = tree.total()
        segment = total / BATCH
        targets = (np.arange(BATCH) + rng.random(BATCH)) * segment
        index = tree.find(targets)
        beta[0] = min(1.0, beta[0] + 1e-3)
        probability = tree.leaves[index] / total
        is_weights = np.power(probability * STORED, -beta[0])
        is_weights /= is_weights.max()
        floor.gather(torch.from_numpy(index))
        tree.update(index, (np.abs(new_priorities) + 0.01) ** 0.6)

    compare(
        "prioritized sample_batch(256) + update_priority from 100k", library, floor_step, number=100
    )


def main() -> None:
    """Print the buffer benchmarks."""
    setup_torch()
    bench_append()
    bench_sample()
    bench_prioritized()
    bench_prioritized_append()


if __name__ == "__main__":
    main()
