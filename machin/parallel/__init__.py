"""Threads, processes, pools, queues, pickling and the distributed world.

The local tools are importable from here as modules (``machin.parallel.pool``,
``machin.parallel.queue``, ...). The distributed parts live in
``machin.parallel.distributed`` and ``machin.parallel.server`` and are imported
on their own.
"""

from . import assigner, event, exception, pickle, pool, process, queue, thread

__all__ = ["assigner", "event", "exception", "pickle", "pool", "process", "queue", "thread"]
