"""Replay-buffer throughput against hand-written numpy/PyTorch floors (CartPole-sized transitions).

Transitions: ``state``/``next_state`` ``[1, 4]`` float32, ``action`` ``[1, 1]`` int64,
``reward`` float, ``terminal`` bool, handed over as the documented dict
``{"state": {"state": s}, "action": {"action": a}, "next_state": {...}, "reward": r,
"terminal": d}``. The floors are written as a careful engineer writes them:

* appends write the five fields of that same dict into preallocated tensors through
  numpy views of their memory (``s_view[i] = state.numpy()``, ``r_view[i] = reward``),
  which is several times faster than torch indexing (``tensor[i] = value``);
* sampling draws the positions with ``torch.randint`` and gathers each column with
  ``ndarray.take`` on the views, wrapped back into tensors with ``torch.from_numpy``
  (faster than ``index_select``, and than drawing with numpy's ``Generator.integers``);
* prioritized replay uses the fastest sum tree written by hand that we know: one heap
  ordered array (children of ``j`` at ``2j``, ``2j + 1``) where a leaf change is added to
  all ancestors of the leaf in one vectorised operation (``tree[node >> shifts] += delta``
  for one leaf, ``np.add.at`` over all the ancestors of a batch), the batch deduplicated
  so that the last priority of a repeated index wins; the default priority of an append
  is a running maximum kept in a Python float (which, unlike the library, never goes down
  when the largest priority is lowered).

Rows (library time / floor time, measured in one run, CPU time of this thread):

* ``append``: ``Buffer.append(dict)`` into a full ring; also ``append(Transition)`` (the
  transitions built beforehand) and the append of a buffer built with
  ``check_finite=False`` (the difference is what the non-finite checks cost), for
  information. ``extend``: a 200-step episode of dicts in one call.
* ``sample``: ``Buffer.sample_batch(256, sample_method="random")`` from 100k stored
  transitions, and the default ``"random_unique"`` (which also redraws repeated
  positions), for information.
* ``prioritized append``: ``PrioritizedBuffer.append(dict)`` with the default priority into
  a full ring of 500k (the algorithms' default ``replay_size``).
* ``update_priority``: ``PrioritizedBuffer.update_priority`` of 256 sampled indexes in a
  buffer of 100k; ``prioritized sample_batch(256)`` with the importance-sampling weights.

``store_transition`` inside the DQN loop, and the DQN and DDPG loops themselves, are in
``benchmarks/loops.py``. Run with ``python -m benchmarks.buffers``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import torch

from machin.frame.buffers import Buffer, PrioritizedBuffer
from machin.frame.transition import Transition

from .common import compare, setup_torch

STORED = 100_000
BATCH = 256
EPISODE = 200


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


def as_dict(t: Transition) -> Dict[str, Any]:
    """The documented dict form of a transition (what ``store_transition`` is usually given)."""
    return {
        "state": t.state,
        "action": t.action,
        "next_state": t.next_state,
        "reward": t.reward,
        "terminal": t.terminal,
    }


def fill(buffer: Buffer, transitions: List[Transition], total: int) -> None:
    for start in range(0, total, len(transitions)):
        buffer.extend(transitions[: min(len(transitions), total - start)])


class FloorColumns:
    """A hand-written replay memory: five preallocated tensors, written through numpy views."""

    def __init__(self, size: int):
        self.size = size
        self.state = torch.zeros(size, 4)
        self.action = torch.zeros(size, 1, dtype=torch.long)
        self.next_state = torch.zeros(size, 4)
        self.reward = torch.zeros(size, 1)
        self.terminal = torch.zeros(size, 1, dtype=torch.bool)
        # numpy views of the same memory: rows are written through these
        self.s, self.a, self.s2 = self.state.numpy(), self.action.numpy(), self.next_state.numpy()
        self.r, self.d = self.reward.numpy()[:, 0], self.terminal.numpy()[:, 0]
        self.views = (self.s, self.a, self.s2, self.reward.numpy(), self.terminal.numpy())
        self.pos = self.filled = 0

    def append(self, t: Dict[str, Any]) -> int:
        """Write one transition dict (the same dict the library gets)."""
        i = self.pos
        self.s[i] = t["state"]["state"].numpy()
        self.a[i] = t["action"]["action"].numpy()
        self.s2[i] = t["next_state"]["state"].numpy()
        self.r[i] = t["reward"]
        self.d[i] = t["terminal"]
        self.pos = i + 1 if i + 1 < self.size else 0
        if self.filled < self.size:
            self.filled += 1
        return i

    def extend(self, ts: List[Dict[str, Any]]) -> None:
        """Write an episode of dicts with one slice assignment per column (no wrap-around handling needed here)."""
        n, i = len(ts), self.pos
        if i + n > self.size:
            i = 0
        self.s[i : i + n] = np.concatenate([t["state"]["state"].numpy() for t in ts])
        self.a[i : i + n] = np.concatenate([t["action"]["action"].numpy() for t in ts])
        self.s2[i : i + n] = np.concatenate([t["next_state"]["state"].numpy() for t in ts])
        self.r[i : i + n] = [t["reward"] for t in ts]
        self.d[i : i + n] = [t["terminal"] for t in ts]
        self.pos = (i + n) % self.size
        self.filled = min(self.size, self.filled + n)

    def gather(self, index: np.ndarray):
        return tuple(torch.from_numpy(v.take(index, axis=0)) for v in self.views)

    def sample(self, batch: int):
        # torch.randint has far less call overhead than numpy's Generator.integers
        return self.gather(torch.randint(self.filled, (batch,)).numpy())


class FloorSumTree:
    """The fastest hand-written sum tree we know (see the module docstring).

    One heap-ordered array: the root is node 1, node ``j`` has the children ``2j`` and
    ``2j + 1``, the leaves are the nodes from ``first`` on (a power of two). A change of a
    leaf is added to all of its ancestors (``node >> 1, node >> 2, ...``) at once.
    """

    def __init__(self, size: int):
        self.first = 1 << (size - 1).bit_length()
        self.tree = np.zeros(2 * self.first)
        self.shifts = np.arange(1, self.first.bit_length())
        self.owner = np.zeros(size, dtype=np.int64)
        self.order = np.arange(4096)
        self.max_weight = 1.0  # the running maximum a default priority takes (never lowered)

    def total(self) -> float:
        return float(self.tree[1])

    def leaves(self, index: np.ndarray) -> np.ndarray:
        return self.tree[index + self.first]

    def set_all(self, weights: np.ndarray) -> None:
        first = self.first
        self.tree[first : first + weights.size] = weights
        while first > 1:
            self.tree[first // 2 : first] = (
                self.tree[first : 2 * first : 2] + self.tree[first + 1 : 2 * first : 2]
            )
            first //= 2

    def find(self, targets: np.ndarray) -> np.ndarray:
        node = np.ones(targets.shape, dtype=np.int64)
        for _ in range(self.shifts.size):
            left = node * 2
            left_w = self.tree[left]
            right = targets > left_w
            targets = targets - left_w * right
            node = left + right
        return node - self.first

    def update_one(self, index: int, weight: float) -> None:
        node = self.first + index
        self.tree[node >> self.shifts] += weight - self.tree[node]
        self.tree[node] = weight

    def update(self, index: np.ndarray, weights: np.ndarray) -> None:
        order = self.order[: index.size]
        self.owner[index] = order  # the last occurrence of a repeated index wins
        last = self.owner[index] == order
        nodes, weights = index[last] + self.first, weights[last]
        np.add.at(self.tree, nodes[:, None] >> self.shifts, (weights - self.tree[nodes])[:, None])
        self.tree[nodes] = weights

    def update_priorities(self, index: np.ndarray, priorities: np.ndarray) -> None:
        """What ``update_priority`` does: weights ``(|p| + 0.01) ** 0.6``, and the running maximum."""
        weights = (np.abs(priorities) + 0.01) ** 0.6
        self.update(index, weights)
        self.max_weight = max(self.max_weight, weights.max())


def update_priority_sides(buffer: Any, tree: FloorSumTree, updates: List[Tuple[np.ndarray, Any]]):
    """``(library, floor)``: ``buffer.update_priority`` and the floor's, each cycling through ``updates``.

    ``updates`` holds ``(new priorities, indexes)`` pairs; each side keeps its own turn.
    """
    turn = {"lib": 0, "floor": 0}

    def library_update():
        i = turn["lib"] = (turn["lib"] + 1) % len(updates)
        buffer.update_priority(*updates[i])

    def floor_update():
        i = turn["floor"] = (turn["floor"] + 1) % len(updates)
        new, index = updates[i]
        tree.update_priorities(index, new)

    return library_update, floor_update


def bench_append() -> None:
    size = 10_000
    transitions = cartpole_transitions(2000)
    dicts = [as_dict(t) for t in transitions]
    buffer = Buffer(size)
    fill(buffer, transitions, size)  # a full ring: no growth during timing
    unchecked = Buffer(size, check_finite=False)
    fill(unchecked, transitions, size)
    floor = FloorColumns(size)
    counter = {"lib": 0, "floor": 0, "t": 0, "u": 0}

    def library():
        i = counter["lib"] = (counter["lib"] + 1) % len(dicts)
        buffer.append(dicts[i])

    def floor_append():
        i = counter["floor"] = (counter["floor"] + 1) % len(dicts)
        floor.append(dicts[i])

    def library_transition():
        i = counter["t"] = (counter["t"] + 1) % len(transitions)
        buffer.append(transitions[i])

    def library_unchecked():
        i = counter["u"] = (counter["u"] + 1) % len(dicts)
        unchecked.append(dicts[i])

    compare("buffer append (dict)", library, floor_append, number=2000)
    compare(
        "buffer append (Transition built beforehand; info)",
        library_transition,
        floor_append,
        number=2000,
    )
    # what the non-finite checks cost: the same append without them
    compare(
        "buffer append (dict, check_finite=False; info)",
        library_unchecked,
        floor_append,
        number=2000,
    )

    episodes = [dicts[i : i + EPISODE] for i in range(0, len(dicts), EPISODE)]

    def library_extend():
        i = counter["lib"] = (counter["lib"] + 1) % len(episodes)
        buffer.extend(episodes[i])

    def floor_extend():
        i = counter["floor"] = (counter["floor"] + 1) % len(episodes)
        floor.extend(episodes[i])

    compare(
        f"buffer extend ({EPISODE}-step episode of dicts)", library_extend, floor_extend, number=20
    )


def bench_sample() -> None:
    transitions = cartpole_transitions(5000)
    buffer = Buffer(STORED)
    fill(buffer, transitions, STORED)
    floor = FloorColumns(STORED)
    for d in (as_dict(t) for t in transitions):
        floor.append(d)
    floor.filled = STORED

    def library_random():
        buffer.sample_batch(BATCH, sample_method="random")

    def library_unique():
        buffer.sample_batch(BATCH)

    def floor_sample():
        floor.sample(BATCH)

    compare(
        "buffer sample_batch(256, 'random') from 100k", library_random, floor_sample, number=500
    )
    compare(
        "buffer sample_batch(256) from 100k (info: distinct positions; the floor draws with replacement)",
        library_unique,
        floor_sample,
        number=500,
    )


def bench_prioritized_append() -> None:
    size = 500_000
    transitions = cartpole_transitions(2000)
    dicts = [as_dict(t) for t in transitions]
    buffer = PrioritizedBuffer(size)
    fill(buffer, transitions, size)
    floor, tree = FloorColumns(size), FloorSumTree(size)
    tree.set_all(np.ones(size))
    counter = {"lib": 0, "floor": 0}

    def library():
        i = counter["lib"] = (counter["lib"] + 1) % len(dicts)
        buffer.append(dicts[i])

    def floor_append():
        i = counter["floor"] = (counter["floor"] + 1) % len(dicts)
        tree.update_one(floor.append(dicts[i]), tree.max_weight)

    compare(
        "prioritized append (dict, default priority) into 500k", library, floor_append, number=2000
    )


def bench_prioritized() -> None:
    transitions = cartpole_transitions(5000)
    rng = np.random.default_rng(0)
    buffer = PrioritizedBuffer(STORED, generator=np.random.default_rng(1))
    fill(buffer, transitions, STORED)
    priorities = rng.random(STORED) + 0.1
    buffer.update_priority(priorities, np.arange(STORED))
    floor = FloorColumns(STORED)
    floor.filled = STORED
    tree = FloorSumTree(STORED)
    tree.set_all((np.abs(priorities) + 0.01) ** 0.6)
    # the indexes a stratified draw returns, and new priorities for them
    updates = []
    for _ in range(16):
        _, _, index, _ = buffer.sample_batch(BATCH)
        updates.append((rng.random(BATCH), index))
    compare(
        "update_priority(256) in 100k", *update_priority_sides(buffer, tree, updates), number=500
    )

    beta = [0.4]

    def library_sample():
        buffer.sample_batch(BATCH)

    def floor_sample():
        total = tree.total()
        targets = (np.arange(BATCH) + rng.random(BATCH)) * (total / BATCH)
        index = np.minimum(tree.find(targets), STORED - 1)
        probability = tree.leaves(index) / total
        is_weights = np.power(probability * STORED, -beta[0])
        is_weights /= is_weights.max()
        beta[0] = min(1.0, beta[0] + 1e-3)
        floor.gather(index)

    compare("prioritized sample_batch(256) from 100k", library_sample, floor_sample, number=200)


def main() -> None:
    """Print the buffer benchmarks."""
    setup_torch()
    bench_append()
    bench_sample()
    bench_prioritized()
    bench_prioritized_append()


if __name__ == "__main__":
    main()
