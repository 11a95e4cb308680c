"""Events that combine several :class:`threading.Event` objects.

``OrEvent(a, b).wait()`` returns as soon as ``a`` or ``b`` is set;
``AndEvent(a, b).wait()`` only once both are. Combined events are events
themselves, so they nest: ``OrEvent(AndEvent(a, b), c)``.

A combined event follows its members: after every ``set`` or ``clear`` of a plain
member (whose two methods are hooked for that) every combined event built on it
re-evaluates its own state, and a combined member passes its changes on to the
events built on it. The state of a combined event is always derived from its
members: its own ``set`` and ``clear`` do nothing, as in Machin 0.3.4.
"""

import threading
from threading import Event, Lock
from typing import Callable, Iterator, List, Optional

# Event and Lock are threading's: Machin 0.3.4's module had no __all__, so
# ``from machin.parallel.event import *`` brought them along, and its tutorial relies on it.
__all__ = ["MultiEvent", "OrEvent", "AndEvent", "init_or_register", "Event", "Lock"]


def _hook(event: threading.Event, callback: Callable[[], None]) -> None:
    """Make ``callback`` run after every ``set``/``clear`` of the plain event ``event``."""
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


def _observe(event: threading.Event, callback: Callable[[], None]) -> None:
    """Make ``callback`` run after every change of ``event`` (plain or combined)."""
    if isinstance(event, MultiEvent):
        event._observers.append(callback)
    else:
        _hook(event, callback)


def _wake_waiters(event: threading.Event) -> None:
    with event._cond:
        event._cond.notify_all()


def init_or_register(event: threading.Event, parent_event: threading.Event) -> None:
    """Make ``parent_event`` follow the changes of ``event``.

    This is how a :class:`MultiEvent` attaches itself to its members; it is public
    because Machin 0.3.4 exposed it. A combined ``parent_event`` re-evaluates its
    state after every ``set``/``clear`` of ``event``; the waiters of a plain
    ``threading.Event`` parent are woken up (its ``wait`` then returns early), as in
    Machin 0.3.4.

    Args:
        event: The event to follow (a ``threading.Event``, combined or not).
        parent_event: The event that follows it.

    Raises:
        ValueError: If either argument is not a ``threading.Event``.
    """
    for name, value in (("event", event), ("parent_event", parent_event)):
        if not isinstance(value, threading.Event):
            raise ValueError(
                f"{name} must be a threading.Event, got {value!r}: type "
                f"{type(value).__name__} is not a valid event type"
            )
    if isinstance(parent_event, MultiEvent):
        _observe(event, parent_event._update)
    else:
        _observe(event, lambda: _wake_waiters(parent_event))


class MultiEvent(threading.Event):
    """Base of events whose state is a function of other events.

    Subclasses implement :meth:`_combine`, which turns the members' states into
    this event's state.

    Args:
        *events: The member events (:class:`threading.Event` instances, combined
            events included). With none, the state is that of an empty combination
            (never set for :class:`OrEvent`, always set for :class:`AndEvent`).

    Raises:
        ValueError: If an argument is not a :class:`threading.Event`.
    """

    def __init__(self, *events: threading.Event):
        super().__init__()
        for index, event in enumerate(events):
            if not isinstance(event, threading.Event):
                raise ValueError(
                    f"every argument of {type(self).__name__} must be a threading.Event, "
                    f"argument {index} is {event!r} of type {type(event).__name__} "
                    f"(type {type(event).__name__} is not a valid event type)"
                )
        self._events = events
        self._observers: List[Callable[[], None]] = []
        self._update_lock = threading.RLock()
        for event in events:
            _observe(event, self._update)
        self._update()

    @property
    def events(self) -> tuple:
        """The member events, as given."""
        return self._events

    def get_leaf_events(self) -> Iterator[threading.Event]:
        """Iterate over the plain (not combined) events this event is built on.

        Members that are combined events are replaced by their own leaves, recursively.

        Returns:
            An iterator over the leaf events, in the order of the members.
        """
        for event in self._events:
            if isinstance(event, MultiEvent):
                yield from event.get_leaf_events()
            else:
                yield event

    def set(self) -> None:
        """Do nothing: the state of a combined event is derived from its members."""

    def clear(self) -> None:
        """Do nothing: the state of a combined event is derived from its members."""

    @staticmethod
    def _combine(states: List[bool]) -> bool:
        return False

    def _update(self) -> None:
        # Read the members and write the flag under one lock, so concurrent updates
        # cannot leave a stale state behind; then tell the events built on this one.
        with self._update_lock:
            if self._combine([event.is_set() for event in self._events]):
                threading.Event.set(self)
            else:
                threading.Event.clear(self)
        for observer in list(self._observers):
            observer()

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
