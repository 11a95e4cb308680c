"""RPC-group and model-server overhead against bare ``torch.distributed.rpc``.

Two local processes form a world; rank 1 serves, rank 0 calls and times.

* ``registered_sync``: ``group.registered_sync("echo", args=(x,))`` (name lookup,
  callable dispatch and error wrapping included), against
  ``rpc.rpc_sync("1", echo, args=(x,))`` for a 16-float tensor ``x``.
* ``model push/pull``: ``PushPullModelServer.push(model)`` then ``pull(other)`` of a
  1M-parameter model (``Linear(1000, 1000)``), against the same versioned store
  written by hand on rank 1 (a dict and a lock) and reached with ``rpc.rpc_sync``:
  send the state dict with its version, fetch it back, ``load_state_dict``.

Run with ``python -m benchmarks.rpc``.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed.rpc as rpc
from torch import nn

from machin.parallel.distributed import World, launch
from machin.parallel.server import PushPullModelServerImpl

from .common import compare, setup_torch

_store: Dict[str, Tuple[Dict[str, torch.Tensor], int]] = {}
_lock = threading.Lock()


def echo(x: Any) -> Any:
    """The service both sides call."""
    return x


def raw_push(key: str, state: Dict[str, torch.Tensor], version: int, prev_version: int) -> bool:
    """Floor of ``OrderedServerSimple.push``: keep ``state`` if ``prev_version`` is the newest."""
    with _lock:
        current = _store.get(key)
        if current is not None and current[1] != prev_version:
            return False
        _store[key] = (state, version)
        return True


def raw_pull(key: str) -> Optional[Tuple[Dict[str, torch.Tensor], int]]:
    """Floor of ``OrderedServerSimple.pull``."""
    with _lock:
        return _store.get(key)


def _bench(rank: int) -> Optional[Dict[str, float]]:
    setup_torch()
    world = World(rpc_timeout=120)
    group = world.create_rpc_group("bench", ["1", "0"])  # rank 1 keeps the table and serves
    if rank == 1:
        group.register("echo", echo)
        PushPullModelServerImpl("model_server", group)
    group.barrier()
    ratios = None
    if rank == 0:
        x = torch.zeros(16)
        ratios = {
            "registered_sync": compare(
                "rpc registered_sync round trip",
                lambda: group.registered_sync("echo", args=(x,)),
                lambda: rpc.rpc_sync("1", echo, args=(x,)),
                number=50,
                repeats=9,
            )
        }
        server = group.get_paired("model_server").to_here()
        model, other = nn.Linear(1000, 1000), nn.Linear(1000, 1000)
        floor_version = [0]

        def library() -> None:
            server.push(model)
            server.pull(other)

        def floor() -> None:
            version = floor_version[0]
            state = {k: v.detach() for k, v in model.state_dict().items()}
            rpc.rpc_sync("1", raw_push, args=("model", state, version + 1, version))
            floor_version[0] = version + 1
            other.load_state_dict(rpc.rpc_sync("1", raw_pull, args=("model",))[0])

        ratios["model_push_pull"] = compare(
            "model server push+pull, 1M parameters", library, floor, number=5, repeats=9
        )
    group.barrier()
    world.stop()
    return ratios


def main() -> Dict[str, float]:
    """Run both comparisons (two local processes); print and return the ratios."""
    return launch(_bench, 2, timeout=600)[0]


if __name__ == "__main__":
    main()
