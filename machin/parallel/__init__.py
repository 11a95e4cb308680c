"""Threads, processes, pools, queues, pickling and the distributed world.

The local tools are modules of this package (``machin.parallel.pool``,
``machin.parallel.queue``, ...); the distributed world and the servers built on it
are the subpackages ``machin.parallel.distributed`` and ``machin.parallel.server``.
As in Machin 0.3.4, all of them are imported with the package, and
:func:`multiprocessing.get_context` and :func:`multiprocessing.get_start_method` are
re-exported here.
"""

from multiprocessing import get_context, get_start_method

from . import (
    assigner,
    distributed,
    event,
    exception,
    pickle,
    pool,
    process,
    queue,
    server,
    thread,
)

__all__ = [
    "get_context",
    "get_start_method",
    "assigner",
    "distributed",
    "event",
    "exception",
    "pickle",
    "pool",
    "process",
    "queue",
    "server",
    "thread",
]
