"""Small stateful helpers: a counter, an attribute-style dictionary, switches and a timer."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Optional

__all__ = [
    "Counter",
    "Object",
    "ObjectAttributeError",
    "ObjectDataError",
    "Switch",
    "Timer",
    "Trigger",
]


class Counter:
    """A number that moves forward by a fixed step.

    A counter compares with numbers (and with other counters) by its value, as in
    ``if counter >= 100``, and prints as that value. Because it is mutable and equal
    to plain numbers, it is not hashable.

    Args:
        start: Initial value, also the value :meth:`reset` returns to.
        step: Amount added by each :meth:`count`.
    """

    __hash__ = None  # type: ignore[assignment]  # equal to numbers, and mutable

    def __init__(self, start: int = 0, step: int = 1):
        self._start = start
        self._step = step
        self._value = start

    def count(self) -> None:
        """Add ``step`` to the counter."""
        self._value += self._step

    def get(self) -> int:
        """Return the current value."""
        return self._value

    def reset(self) -> None:
        """Go back to ``start``."""
        self._value = self._start

    @staticmethod
    def _plain(other: Any) -> Any:
        return other._value if isinstance(other, Counter) else other

    def __lt__(self, other: Any) -> bool:
        return self._value < self._plain(other)

    def __le__(self, other: Any) -> bool:
        return self._value <= self._plain(other)

    def __gt__(self, other: Any) -> bool:
        return self._value > self._plain(other)

    def __ge__(self, other: Any) -> bool:
        return self._value >= self._plain(other)

    def __eq__(self, other: Any) -> bool:
        return self._value == self._plain(other)

    def __ne__(self, other: Any) -> bool:
        return self._value != self._plain(other)

    def __repr__(self) -> str:
        return str(self._value)


class ObjectDataError(TypeError, ValueError):
    """``Object.data`` was given something other than a dictionary.

    Both a :class:`TypeError` and (as in Machin 0.3.4) a :class:`ValueError`.
    """


class ObjectAttributeError(RuntimeError, AttributeError):
    """An entry or attribute of an :class:`Object` cannot be written.

    Raised for entries listed in ``const_attrs`` and for the names the class itself
    uses (methods, ``attr``, ``const_attrs``). Both a :class:`RuntimeError` (as in
    Machin 0.3.4) and an :class:`AttributeError`.
    """


class Object:
    """Attribute-style access to a dictionary.

    ``obj.key`` and ``obj["key"]`` read ``obj.data["key"]``; ``obj.key = value`` and
    ``obj["key"] = value`` store into ``obj.data``. Reading a key that is not in
    ``data`` gives ``None`` (names starting and ending with ``__`` are not looked up
    in ``data``, so copying and pickling work normally). Calling the object calls
    :meth:`call`, which subclasses (or an instance, through ``obj.call = function``)
    may replace.

    Names the class already uses, such as ``attr``, ``const_attrs`` or a method of a
    subclass, cannot be written as entries through attributes or items; use
    :meth:`attr` with ``change=True`` for those keys.

    Args:
        data: The backing dictionary (used as is, not copied). A new empty dictionary
            when ``None``.
        const_attrs: Keys of ``data`` that are read-only: writing them through
            attributes or items raises :class:`ObjectAttributeError`.

    Raises:
        ObjectDataError: When ``data`` is not a dictionary.
    """

    def __init__(
        self, data: Optional[Dict[str, Any]] = None, const_attrs: Optional[Iterable[str]] = None
    ):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ObjectDataError(
                f"data must be a dict or None (the data attribute must be a dictionary), "
                f"got {data!r} of type {type(data).__name__}"
            )
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "const_attrs", frozenset(const_attrs or ()))

    def __getattr__(self, item: str) -> Any:
        # Only called when normal lookup fails. Dunder names, and anything before
        # ``data`` exists (during unpickling), must fail normally.
        if (item.startswith("__") and item.endswith("__")) or "data" not in self.__dict__:
            raise AttributeError(f"Failed to find attribute: {item}")
        return self.__dict__["data"].get(item)

    def __getitem__(self, item: Any) -> Any:
        return self.data.get(item)

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "data":
            if not isinstance(value, dict):
                raise ObjectDataError(
                    f"the data attribute must be a dictionary, got {value!r} "
                    f"of type {type(value).__name__}"
                )
            object.__setattr__(self, "data", value)
        elif key == "call":
            object.__setattr__(self, "call", value)
        else:
            self._check_writable(key)
            self.data[key] = value

    def __setitem__(self, key: Any, value: Any) -> None:
        self.__setattr__(key, value)

    def __delattr__(self, item: str) -> None:
        self._check_writable(item)
        try:
            del self.data[item]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no attribute {item!r}") from None

    def _check_writable(self, key: Any) -> None:
        if key in self.const_attrs:
            raise ObjectAttributeError(
                f"{key} is const: entry {key!r} of {type(self).__name__} is read-only"
            )
        if isinstance(key, str) and (
            key in self.__dict__ or any(key in klass.__dict__ for klass in type(self).__mro__)
        ):
            raise ObjectAttributeError(
                f"You should not set the {key} property of an Object: {key!r} is an "
                f"attribute of {type(self).__name__} itself; write such keys with "
                f"attr({key!r}, value, change=True)"
            )

    def attr(self, item: Any, value: Any = None, change: bool = False) -> Any:
        """Read an entry of ``data``, optionally writing it first.

        This reaches every key, including keys that are not identifiers or that
        share a name with a method, and it ignores ``const_attrs``.

        Args:
            item: Key in ``data``.
            value: New value, used when ``change`` is true.
            change: Store ``value`` under ``item`` before reading it.

        Returns:
            The value stored under ``item``, ``None`` when there is none.
        """
        if change:
            self.data[item] = value
        return self.data.get(item)

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """What calling the object does; returns ``None`` unless overridden."""
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def __dir__(self) -> Iterable[str]:
        return list(super().__dir__()) + [key for key in self.data if isinstance(key, str)]

    def __repr__(self) -> str:
        items = ", ".join(f"{key}={value!r}" for key, value in self.data.items())
        return f"{type(self).__name__}({items})"


class Switch:
    """An on/off state.

    Args:
        state: Initial state, ``True`` for on.
    """

    def __init__(self, state: bool = False):
        self._state = bool(state)

    def flip(self) -> None:
        """Invert the state."""
        self._state = not self._state

    def get(self) -> bool:
        """Return the state."""
        return self._state

    def on(self) -> None:
        """Turn on."""
        self._state = True

    def off(self) -> None:
        """Turn off."""
        self._state = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(state={self._state})"


class Trigger(Switch):
    """A one-shot switch: :meth:`get` returns the state and then turns it off.

    Args:
        state: Initial state, ``True`` for on.
    """

    def get(self) -> bool:
        """Return the state and turn the trigger off."""
        state = self._state
        self._state = False
        return state


class Timer:
    """Measures wall-clock time with :func:`time.perf_counter`.

    Timing starts when the timer is created, so :meth:`end` works without
    :meth:`begin`.
    """

    def __init__(self):
        self._last = time.perf_counter()

    def begin(self) -> None:
        """Start (or restart) timing."""
        self._last = time.perf_counter()

    def end(self) -> float:
        """Return the seconds elapsed since the last :meth:`begin` (or creation)."""
        return time.perf_counter() - self._last
