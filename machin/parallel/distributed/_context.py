"""The one :class:`~machin.parallel.distributed.world.World` a process may run."""

from typing import Any, Optional

_world: Optional[Any] = None


def current_world() -> Optional[Any]:
    """The running world of this process, or ``None``."""
    return _world


def require_world() -> Any:
    """The running world of this process.

    Raises:
        RuntimeError: If no world has been started in this process.
    """
    if _world is None:
        raise RuntimeError(
            "Distributed environment not initialized: no distributed World is running in this "
            "process; create one with machin.parallel.distributed.World(...) first"
        )
    return _world


def set_world(world: Optional[Any]) -> None:
    """Install (or, with ``None``, remove) the running world."""
    global _world
    _world = world
