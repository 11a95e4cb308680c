"""Small stateful helpers: a counter, an attribute-style dictionary, switches and a timer."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Optional

__all__ = ["Counter", "Object", "Switch", "Timer", "Trigger"]


class Counter:
    """A number that moves forward by a fixed step.

    Args:
        start: Initial value, also the value :meth:`reset` returns to.
        step: Amount added by each :meth:`count`.
    """

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

    def __repr__(self) -> str:
        return f"Counter(value={self._value}, start={self._start}, step={self._step})"


class Object:
    """Attribute-style access to a dictionary.

    Reading ``obj.key`` returns ``obj.data["key"]`` and writing ``obj.key = value``
    stores into ``obj.data``. Reading a key that is not in ``data`` raises
    ``AttributeError``. Calling the object calls :meth:`call`, which subclasses (or
    an instance, through ``obj.call = function``) may replace.

    Args:
        data: The backing dictionary (used as is, not copied). A new empty dictionary
            when ``None``.
        const_attrs: Keys of ``data`` that are read-only: assigning to them through
            attributes or :meth:`attr` raises ``AttributeError``.

    Raises:
        TypeError: When ``data`` is not a dictionary.
    """

    def __init__(
        self, data: Optional[Dict[str, Any]] = None, const_attrs: Optional[Iterable[str]] = None
    ):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise TypeError(
                f"data must be a dict or None, got {data!r} of type {type(data).__name__}"
            )
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "const_attrs", frozenset(const_attrs or ()))

    def __getattr__(self, item: str) -> Any:
        # Only called when normal lookup fails. Dunder names and the time before
        # ``data`` exists (unpickling) must fail normally.
        if item.startswith("__") or "data" not in self.__dict__:
            raise AttributeError(item)
        try:
            return self.__dict__["data"][item]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute {item!r}; its keys are {sorted(self.data)}"
            ) from None

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "data":
            if not isinstance(value, dict):
                raise TypeError(
                    f"data must be a dict, got {value!r} of type {type(value).__name__}"
                )
            object.__setattr__(self, "data", value)
        elif key == "call":
            object.__setattr__(self, "call", value)
        else:
            self._check_writable(key)
            self.data[key] = value

    def __delattr__(self, item: str) -> None:
        self._check_writable(item)
        try:
            del self.data[item]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no attribute {item!r}") from None

    def _check_writable(self, key: str) -> None:
        if key in self.const_attrs:
            raise AttributeError(f"attribute {key!r} of {type(self).__name__} is read-only")

    def attr(self, item: str, value: Any = None, change: bool = False) -> Any:
        """Read an entry of ``data``, optionally writing it first.

        This also reaches keys that cannot be written as attributes, such as keys
        that are not identifiers or that share a name with a method.

        Args:
            item: Key in ``data``.
            value: New value, used when ``change`` is true.
            change: Store ``value`` under ``item`` before reading it.

        Returns:
            The value stored under ``item``.

        Raises:
            AttributeError: When ``item`` is missing, or read-only and ``change`` is true.
        """
        if change:
            self._check_writable(item)
            self.data[item] = value
        try:
            return self.data[item]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no attribute {item!r}") from None

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
