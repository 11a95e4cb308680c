"""Events that combine several :class:`threading.Event` objects.

``OrEvent(a, b).wait()`` returns as soon as ``a`` or ``b`` is set;
``AndEvent(a, b).wait()`` only once both are. Combined events are events
themselves, so they nest: ``OrEvent(AndEvent(a, b), c)``.

A combined event follows its members by hooking their ``set`` and ``clear``
methods: after either call on a member, every combined event built on it
re-evaluates its own state. Do not call ``set`` or ``clear`` on a combined event
yourself; its state is always derived from its members.
"""

import threading
from typing import Callable, List, Optional

__all__ = ["MultiEvent", "OrEvent", "AndEvent"]


def _observe(event: threading.Event, callback: Callable[[], None]) -> None:
    """Make ``callback`` run after every ``set``/``clear`` of ``event``."""
    observers: List[Callable[[], None]] = event.__dict__.get("_machin_observers")
    if observers is None:
        observers = event.__dict__["_machin_observers"] = []
        original_set, original_clear = event.set, event.clear

        def hooked(original: Callable[[], None]) -> Callable[[], None]:
            def call() -> None:
                original()
                for observer in list(observers):
                    observer()

            return call

        event.set = hooked(original_set)
        event.clear = hooked(original_clear)
    observers.append(callback)


class MultiEvent(threading.Event):
    """Base of events whose state is a function of other events.

    Subclasses implement :meth:`_combine`, which turns the members' states into
    this event's state.

    Args:
        *events: The member events (:class:`threading.Event` instances, combined
            events included). At least one is needed.

    Raises:
        ValueError: If no event is given, or an argument is not a
            :class:`threading.Event`.
    """

    def __init__(self, *events: threading.Event):
        super().__init__()
        if not events:
            raise ValueError(f"{type(self).__name__} needs at least one event, got none")
        for index, event in enumerate(events):
            if not isinstance(event, threading.Event):
                raise ValueError(
                    f"every argument of {type(self).__name__} must be a threading.Event, "
                    f"argument {index} is {event!r} of type {type(event).__name__}"
                )
        self.events = events
        self._update_lock = threading.RLock()
        for event in events:
            _observe(event, self._update)
        self._update()

    @staticmethod
    def _combine(states: List[bool]) -> bool:
        raise NotImplementedError

    def _update(self) -> None:
        # Read the members and write our flag under one lock, so concurrent updates
        # cannot leave a stale state behind.
        with self._update_lock:
            if self._combine([event.is_set() for event in self.events]):
                self.set()
            else:
                self.clear()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until this event is set, or until ``timeout`` seconds have passed.

        Args:
            timeout: Seconds to wait at most; ``None`` waits forever.

        Returns:
            Whether the event is set (``False`` after a timeout).
        """
        super().wait(timeout)
        return self.is_set()


class OrEvent(MultiEvent):
    """Set while at least one of its member events is set.

    Args:
        *events: The member events.
    """

    @staticmethod
    def _combine(states: List[bool]) -> bool:
        return any(states)


class AndEvent(MultiEvent):
    """Set while all of its member events are set.

    Args:
        *events: The member events.
    """

    @staticmethod
    def _combine(states: List[bool]) -> bool:
        return all(states)
