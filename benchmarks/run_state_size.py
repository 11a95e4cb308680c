"""Save and load time, size on disk and peak memory of ``save_state`` / ``resume`` with a full buffer.

Cases (the replay buffer holds exactly ``replay_size`` transitions, written with
``Buffer.extend`` from random data; the networks are the examples' small MLPs):

* ``CartPole 100k`` and ``CartPole 1M``: DQN, ``state`` / ``next_state`` ``[1, 4]`` float32,
  ``action`` ``[1, 1]`` int64, ``reward`` float, ``terminal`` bool;
* ``Pendulum 100k``: DDPG, ``state`` / ``next_state`` ``[1, 3]`` float32, ``action`` ``[1, 1]``
  float32, ``reward`` float, ``terminal`` bool.

Each case runs twice in a fresh child process: once to fill the buffer and time
``algorithm.save_state(path)``, once to build the algorithm again and time
``algorithm.resume(path)``. Memory is the resident set size (RSS, ``/proc/self/statm``) just
before the call and the process's peak RSS (``ru_maxrss``) after it: their difference is
what the call added at its peak. ``buffer`` is the memory the buffer's filled rows take.

Run with ``python -m benchmarks.run_state_size`` (``--cases "CartPole 100k"`` for one case,
``--partly-filled`` to give each buffer twice the room it fills, as a run that is not over yet
has).
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
from typing import Any, Dict, List, Optional

import torch
from torch import nn

CASES = {
    "CartPole 100k": ("dqn", 100_000),
    "CartPole 1M": ("dqn", 1_000_000),
    "Pendulum 100k": ("ddpg", 100_000),
}
_DIMS = {"dqn": 4, "ddpg": 3}
_CHUNK = 10_000
_MIB = 1 << 20


def _mlp(inputs: int, outputs: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inputs, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, outputs)
    )


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 2)

    def forward(self, state):
        return self.net(state)


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _mlp(3, 1)

    def forward(self, state):
        return torch.tanh(self.net(state)) * 2


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = _mlp(4, 1)

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


def build(kind: str, replay_size: int) -> Any:
    """A DQN (CartPole) or DDPG (Pendulum) algorithm with a buffer of ``replay_size``."""
    from machin.frame.algorithms import DDPG, DQN

    torch.manual_seed(0)
    if kind == "dqn":
        return DQN(
            QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="sum"), replay_size=replay_size
        )
    return DDPG(
        Actor(),
        Actor(),
        Critic(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        replay_size=replay_size,
    )


def fill(algorithm: Any, kind: str, count: int) -> None:
    """Store ``count`` random transitions of the case's shapes, ``_CHUNK`` at a time."""
    generator = torch.Generator().manual_seed(1)
    dim = _DIMS[kind]
    for start in range(0, count, _CHUNK):
        n = min(_CHUNK, count - start)
        states = torch.randn(n + 1, 1, dim, generator=generator)
        if kind == "dqn":
            actions = torch.randint(2, (n, 1, 1), generator=generator)
        else:
            actions = torch.rand(n, 1, 1, generator=generator) * 4 - 2
        rewards = torch.randn(n, generator=generator).tolist()
        algorithm.replay_buffer.extend(
            [
                {
                    "state": {"state": states[i]},
                    "action": {"action": actions[i]},
                    "next_state": {"state": states[i + 1]},
                    "reward": rewards[i],
                    "terminal": i % 200 == 199,
                }
                for i in range(n)
            ]
        )


def _rss_mib() -> float:
    """The resident set size now (Linux), in MiB."""
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / _MIB


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _buffer_mib(algorithm: Any) -> float:
    """The bytes of the filled rows of every column of the algorithm's buffer, in MiB."""
    buffer = algorithm.replay_buffer
    groups = [*buffer._major.values(), buffer._sub, buffer._custom]
    return (
        sum(col.tensor[0].nbytes * buffer.size() for cols in groups for col in cols.values()) / _MIB
    )


def child(case: str, phase: str, path: str, room: int) -> Dict[str, Any]:
    """One phase (``save`` or ``resume``) of one case, in this (fresh) process."""
    kind, count = CASES[case]
    algorithm = build(kind, count * room)
    if phase == "save":
        fill(algorithm, kind, count)
    before = _rss_mib()
    start = time.perf_counter()
    if phase == "save":
        algorithm.save_state(path)
    else:
        algorithm.resume(path)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "before": before,
        "peak": _peak_mib(),
        "buffer": _buffer_mib(algorithm),
        "size": algorithm.replay_buffer.size(),
    }


def _run_child(case: str, phase: str, path: str, room: int) -> Dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "benchmarks.run_state_size",
        "--child",
        case,
        phase,
        path,
        str(room),
    ]
    output = subprocess.run(
        command, check=True, capture_output=True, text=True, timeout=1800
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure(case: str, room: int = 1) -> Dict[str, Any]:
    """Save then resume ``case`` in two fresh processes; the numbers of the table's row."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "state.pt")
        save = _run_child(case, "save", path, room)
        size = os.path.getsize(path) + os.path.getsize(path + ".manifest.json")
        load = _run_child(case, "resume", path, room)
    if load["size"] != save["size"]:
        raise RuntimeError(f"{case}: resumed {load['size']} transitions, saved {save['size']}")
    return {
        "case": case,
        "save_s": save["seconds"],
        "load_s": load["seconds"],
        "file_mib": size / _MIB,
        "buffer_mib": save["buffer"],
        "save_before": save["before"],
        "save_peak": save["peak"],
        "load_before": load["before"],
        "load_peak": load["peak"],
    }


def table(rows: List[Dict[str, Any]]) -> str:
    """The rows as a reStructuredText grid-less ("simple") table."""
    head = (
        "case",
        "save s",
        "resume s",
        "file MiB",
        "buffer MiB",
        "save: RSS before / peak MiB",
        "resume: RSS before / peak MiB",
    )
    body = [
        (
            r["case"],
            f"{r['save_s']:.2f}",
            f"{r['load_s']:.2f}",
            f"{r['file_mib']:.1f}",
            f"{r['buffer_mib']:.1f}",
            f"{r['save_before']:.0f} / {r['save_peak']:.0f}",
            f"{r['load_before']:.0f} / {r['load_peak']:.0f}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(), rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in body]
    return "\n".join([*lines, rule])


def main(argv: Optional[List[str]] = None) -> None:
    """Measure the chosen cases (default: all) and print the table."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run_state_size", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument(
        "--partly-filled", action="store_true", help="buffers with twice the room they fill"
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args([] if argv is None else argv)
    if args.child:
        case, phase, path, room = args.child
        print(json.dumps(child(case, phase, path, int(room))))
        return
    rows = []
    for case in args.cases:
        rows.append(measure(case, 2 if args.partly_filled else 1))
        print(f"{case}: done", file=sys.stderr, flush=True)
    fullness = "half full" if args.partly_filled else "full"
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, buffers {fullness}")
    print(table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
