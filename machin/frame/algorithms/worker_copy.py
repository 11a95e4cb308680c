"""A framework in the workers of a process pool: what a worker receives and how it is called.

An algorithm that trains parts of itself in process-pool workers (MADDPG with
``pool_type="process"``) hands each worker a :class:`WorkerCopy` of itself as the
worker's context, and runs its tasks with :func:`call_in_worker`. Its networks must be
in shared memory first (``share_memory()``): the copy shares their tensors, so what a
worker's optimizer steps is what the owner reads.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch

from ..optimizers import PortableOptimizer

__all__ = ["WorkerCopy", "call_in_worker"]


class WorkerCopy:
    """The context of a process worker: the framework it works with.

    A forked worker inherits this object as it is. A spawned worker unpickles it as a
    copy of the framework without its pool and its LR schedulers; its optimizers (also
    inside lists) travel as :class:`~machin.frame.optimizers.PortableOptimizer`.

    Args:
        framework: The algorithm instance; its ``__getstate__`` leaves out what cannot
            be copied (its pool).
    """

    def __init__(self, framework: Any):
        self.framework = framework

    def __reduce__(self) -> Tuple[Any, ...]:
        state = self.framework.__getstate__()
        state["_lr_schedulers"] = []
        state = {key: _portable(value) for key, value in state.items()}
        return _rebuild_framework, (type(self.framework), state)


def _portable(value: Any) -> Any:
    """``value`` with every optimizer in it (alone, or in nested lists) made portable."""
    if isinstance(value, torch.optim.Optimizer):
        return PortableOptimizer(value)
    if isinstance(value, list) and any(
        isinstance(item, (list, torch.optim.Optimizer)) for item in value
    ):
        return [_portable(item) for item in value]
    return value


def _rebuild_framework(cls: type, state: Dict[str, Any]) -> Any:
    framework = cls.__new__(cls)
    framework.__dict__.update(state)
    return framework


def call_in_worker(context: Any, method: str, *args: Any) -> Any:
    """Pool task: ``framework.<method>(*args)`` on the worker's framework.

    Args:
        context: The worker's context: a :class:`WorkerCopy` (inherited by a forked
            worker) or the framework it rebuilt (in a spawned worker).
        method: The name of the framework's method to call.
        args: Its arguments.
    """
    framework = context.framework if isinstance(context, WorkerCopy) else context
    return getattr(framework, method)(*args)
