"""Transports of :mod:`machin.parallel.distributed`: how the members of a world reach each other.

Two transports exist behind one interface (:class:`~.base.Transport`):

* ``"rpc"`` (the default): :mod:`torch.distributed.rpc` with TensorPipe, plus the
  gloo (and nccl) process group, started by ``python`` or ``torchrun``
  (:mod:`.rpc`).
* ``"ray"``: one Ray actor per rank, calls as actor method calls, results in Ray's
  object store, collectives through ``torch.distributed`` (gloo) between the actors
  (:mod:`.ray`). It needs the optional ``ray`` package (``pip install machin[ray]``)
  and ranks started by :func:`~machin.parallel.distributed.ray_launcher.launch_ray`.

**Naming.** ``World`` chooses the transport with its keyword ``transport``. Its
keyword ``backend`` keeps the meaning it has always had, the backend of the
``torch.distributed`` process groups (``"gloo"``, ``"nccl"``); as ``"rpc"`` and
``"ray"`` can never be process-group backends, ``backend="ray"`` (or ``"rpc"``) is
accepted as another spelling of ``transport="ray"``. Without either, a world
started inside a Ray rank uses ``"ray"`` (the launcher sets ``MACHIN_TRANSPORT``),
so a script's ``World(...)`` call runs unchanged under both launchers; elsewhere it
uses ``"rpc"``.
"""

import os
from typing import Optional, Tuple

from .base import LocalReference, Reference, Transport

__all__ = [
    "Transport",
    "Reference",
    "LocalReference",
    "TRANSPORTS",
    "ENV_VARIABLE",
    "resolve",
    "make_transport",
]

#: The transports ``World(transport=...)`` accepts.
TRANSPORTS = ("rpc", "ray")
#: Environment variable naming the default transport of the process.
ENV_VARIABLE = "MACHIN_TRANSPORT"


def resolve(transport: Optional[str], backend: Optional[str]) -> Tuple[str, Optional[str]]:
    """Sort ``World``'s ``transport`` and ``backend`` arguments into (transport, process-group backend).

    Raises:
        ValueError: For an unknown transport, or ``backend`` naming a transport
            other than ``transport``.
    """
    if backend in TRANSPORTS:
        if transport is not None and transport != backend:
            raise ValueError(
                f"backend={backend!r} names a transport, but transport={transport!r} names "
                f"another; give one of them (transport selects 'rpc' or 'ray', backend the "
                f"process-group backend such as 'gloo')"
            )
        transport, backend = backend, None
    if transport is None:
        transport = os.environ.get(ENV_VARIABLE) or "rpc"
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {list(TRANSPORTS)}, got {transport!r}")
    return transport, backend


def make_transport(
    transport: str,
    *,
    name: str,
    rank: int,
    world_size: int,
    timeout: float,
    init_method: str,
    rpc_threads: int,
    backend: Optional[str],
    collective_timeout: Optional[float],
) -> Transport:
    """The transport ``transport`` (a name in :data:`TRANSPORTS`) for one member.

    Args:
        transport: ``"rpc"`` or ``"ray"``.
        name: The member's name; ``rank`` and ``world_size`` as :class:`World` takes them.
        rank: The member's rank.
        world_size: Number of members.
        timeout: Default timeout of calls, in seconds.
        init_method: Rendezvous URL (the ``rpc`` transport; Ray's ranks find each other by name).
        rpc_threads: Threads serving calls (the ``rpc`` transport).
        backend: Backend of the default process group.
        collective_timeout: Timeout of collective operations, in seconds.
    """
    if transport == "ray":
        from .ray import RayTransport

        return RayTransport(
            name, rank, world_size, timeout, backend=backend, collective_timeout=collective_timeout
        )
    from .rpc import RpcTransport

    return RpcTransport(
        name,
        rank,
        world_size,
        timeout,
        init_method=init_method,
        rpc_threads=rpc_threads,
        backend=backend,
        collective_timeout=collective_timeout,
    )
