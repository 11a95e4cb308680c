"""Transitions: the records that algorithms store in replay buffers.

A transition has three kinds of attributes:

* **major** attributes are dictionaries of tensors (``state``, ``action``,
  ``next_state``); each key is concatenated separately when a batch is sampled and
  the dictionaries are passed to networks as keyword arguments;
* **sub** attributes are scalars or tensors (``reward``, ``terminal``), concatenated
  directly; a scalar becomes a ``[B, 1]`` tensor in a batch;
* **custom** attributes are any other value (numbers, strings, lists...), returned
  as lists unless numeric ones are asked to be concatenated. A tensor may be a custom
  attribute too, but it is never moved between devices.

The first dimension of every tensor is the batch dimension. :class:`Transition`
describes one environment step, so that dimension must be 1.
"""

from __future__ import annotations

import copy
import numbers
from typing import Any, Dict, Iterable, List, Tuple, Union

import numpy as np
import torch

__all__ = [
    "Scalar",
    "UnknownAttributeError",
    "NewAttributeError",
    "TransitionBase",
    "Transition",
    "TransitionStorageBasic",
    "TransitionStorageSmart",
    "TransitionTypeError",
    "TransitionBuildError",
    "as_transition",
]

Scalar = Union[int, float, bool]


class UnknownAttributeError(KeyError, AttributeError):
    """Reading ``transition[name]`` for a name the transition does not have.

    A :class:`KeyError` for mapping-style code and an :class:`AttributeError`, which
    is what Machin 0.3.4 raised.
    """


class NewAttributeError(KeyError, RuntimeError):
    """Assigning to an attribute name the transition was not built with.

    The attribute set of a transition is fixed at construction. A :class:`KeyError`
    for mapping-style code and a :class:`RuntimeError`, which is what Machin 0.3.4 raised.
    """


def _is_scalar(value: Any) -> bool:
    # numpy's bool is not a numbers.Number, yet environments often report terminals as np.bool_.
    return isinstance(value, (numbers.Real, np.bool_))


class TransitionBase:
    """A record with major, sub and custom attributes.

    Args:
        major_attr: Names of the major attributes.
        sub_attr: Names of the sub attributes.
        custom_attr: Names of the custom attributes.
        major_data: One ``Dict[str, Tensor]`` per major attribute.
        sub_data: One scalar or tensor per sub attribute.
        custom_data: One value per custom attribute (deep-copied).

    Tensors are cloned and detached, so later changes to the caller's tensors do not
    reach the transition. A tensor given as a custom attribute is kept as it is
    (cloned, never moved between devices, returned in lists by the buffers); prefer a
    major or sub attribute for tensors.

    The attribute set is fixed once constructed: assigning to a name the transition
    was not built with raises :class:`NewAttributeError`.

    Raises:
        ValueError: When a major value is not a dictionary of tensors, a sub value is
            neither a scalar nor a tensor, or the tensors disagree on the batch size.
    """

    # Number of rows every tensor must have; ``None`` accepts any common batch size.
    _required_batch_size = None

    def __init__(
        self,
        major_attr: Iterable[str],
        sub_attr: Iterable[str],
        custom_attr: Iterable[str],
        major_data: Iterable[Dict[str, torch.Tensor]],
        sub_data: Iterable[Union[Scalar, torch.Tensor]],
        custom_data: Iterable[Any],
    ):
        object.__setattr__(self, "_major_attr", list(major_attr))
        object.__setattr__(self, "_sub_attr", list(sub_attr))
        object.__setattr__(self, "_custom_attr", list(custom_attr))
        object.__setattr__(self, "_batch_size", None)
        major_data, sub_data, custom_data = list(major_data), list(sub_data), list(custom_data)
        for names, data, kind in (
            (self._major_attr, major_data, "major"),
            (self._sub_attr, sub_data, "sub"),
            (self._custom_attr, custom_data, "custom"),
        ):
            if len(names) != len(data):
                raise ValueError(
                    f"{len(names)} {kind} attribute names {names} were given with {len(data)} values"
                )
        for name, value in zip(self._major_attr, major_data):
            self._set_major(name, value)
        for name, value in zip(self._sub_attr, sub_data):
            self._set_sub(name, value)
        for name, value in zip(self._custom_attr, custom_data):
            self._set_custom(name, value)
        for name in self._sub_attr:
            if not isinstance(getattr(self, name), torch.Tensor):
                self._check_scalar_rows(name)
        # From now on the attribute set is closed (see __setattr__).
        object.__setattr__(self, "_sealed", True)

    # -- validation ---------------------------------------------------------------
    def _check_batch(self, name: str, what: str, tensor: torch.Tensor) -> None:
        # ``what`` names the value as Machin 0.3.4's messages did, whose phrases are kept.
        if tensor.dim() == 0:
            raise ValueError(
                f"attribute {name!r} must have a batch dimension, got a 0-dimensional tensor; "
                f"use shape [1, ...] or a Python scalar ({what} is a invalid tensor)"
            )
        rows = tensor.shape[0]
        required = self._required_batch_size
        if required is not None and rows != required:
            raise ValueError(
                f"{type(self).__name__} holds batch size {required}: the first dimension of "
                f"attribute {name!r} must be {required}, got shape {tuple(tensor.shape)} "
                f"({what} has invalid batch size {rows})"
            )
        if self._batch_size is None:
            object.__setattr__(self, "_batch_size", rows)
        elif rows != self._batch_size:
            raise ValueError(
                f"attribute {name!r} has batch size {rows}, but earlier attributes have "
                f"batch size {self._batch_size} ({what} has invalid batch size {rows})"
            )

    def _set_major(self, name: str, value: Any) -> None:
        if not isinstance(value, dict):
            raise ValueError(
                f"major attribute {name!r} must be a Dict[str, Tensor], got {type(value).__name__}"
            )
        stored = {}
        for key, tensor in value.items():
            what = f"Key {key!r} of transition major attribute {name!r}"
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(
                    f"major attribute {name!r} must hold tensors, but key {key!r} holds "
                    f"{type(tensor).__name__} ({what} is a invalid tensor)"
                )
            self._check_batch(f"{name}.{key}", what, tensor)
            stored[key] = tensor.detach().clone()
        object.__setattr__(self, name, stored)

    def _set_sub(self, name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            self._check_batch(name, f"Transition sub attribute {name!r}", value)
            value = value.detach().clone()
        elif not _is_scalar(value):
            raise ValueError(
                f"sub attribute {name!r} must be a scalar or a tensor, got {type(value).__name__} "
                f"(Transition sub attribute {name!r} has invalid value {value!r}, requires "
                f"scalar or tensor)"
            )
        elif self.__dict__.get("_sealed", False):
            self._check_scalar_rows(name)
        object.__setattr__(self, name, value)

    def _check_scalar_rows(self, name: str) -> None:
        """A scalar sub attribute stands for one row: refuse it in a batch of several."""
        rows = self._batch_size
        if rows is not None and rows != 1:
            raise ValueError(
                f"Transition sub attribute {name!r} is a scalar, but batch size is {rows}: "
                f"give one value per row, as a tensor of shape [{rows}, ...]"
            )

    def _set_custom(self, name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()  # (deepcopy refuses non-leaf tensors)
        else:
            value = copy.deepcopy(value)
        object.__setattr__(self, name, value)

    # -- mapping-like access ------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_sealed", False):
            # A subclass setting up its own fields before TransitionBase.__init__ ran.
            object.__setattr__(self, name, value)
        elif name in self._major_attr:
            self._set_major(name, value)
        elif name in self._sub_attr:
            self._set_sub(name, value)
        elif name in self._custom_attr:
            self._set_custom(name, value)
        else:
            raise NewAttributeError(
                f"You cannot dynamically set new attributes in a {type(self).__name__}: it has "
                f"no attribute {name!r}; its attributes are {self.keys()}"
            )

    def __getitem__(self, item: str) -> Any:
        if item not in self.keys():
            raise UnknownAttributeError(
                f"{type(self).__name__} has no attribute {item!r}; it has {self.keys()}"
            )
        return getattr(self, item)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self.keys():
            raise NewAttributeError(
                f"You cannot dynamically set new attributes in a {type(self).__name__}: it has "
                f"no attribute {key!r}; its attributes are {self.keys()}"
            )
        setattr(self, key, value)

    def __contains__(self, key: str) -> bool:
        return key in self.keys()

    def __len__(self) -> int:
        """Number of attributes (as in Machin 0.3.4), not the batch size."""
        return len(self._major_attr) + len(self._sub_attr) + len(self._custom_attr)

    @property
    def major_attr(self) -> List[str]:
        """Names of the major attributes."""
        return list(self._major_attr)

    @property
    def sub_attr(self) -> List[str]:
        """Names of the sub attributes."""
        return list(self._sub_attr)

    @property
    def custom_attr(self) -> List[str]:
        """Names of the custom attributes."""
        return list(self._custom_attr)

    @property
    def batch_size(self) -> int:
        """Rows of the tensors (1 when every attribute is a scalar)."""
        return self._batch_size if self._batch_size is not None else 1

    def keys(self) -> List[str]:
        """Attribute names: major first, then sub, then custom."""
        return self._major_attr + self._sub_attr + self._custom_attr

    def items(self) -> List[Tuple[str, Any]]:
        """``(name, value)`` pairs in the order of :meth:`keys`, so ``dict(t.items())`` works."""
        return [(k, getattr(self, k)) for k in self.keys()]

    def has_keys(self, keys: Iterable[str]) -> bool:
        """Whether every name in ``keys`` is an attribute of this transition."""
        own = set(self.keys())
        return all(k in own for k in keys)

    def to(self, device: Union[str, torch.device]) -> TransitionBase:
        """Move every major and sub tensor to ``device`` (in place) and return ``self``.

        Custom attributes are left where they are.
        """
        device = torch.device(device)
        for name in self._major_attr:
            value = getattr(self, name)
            object.__setattr__(self, name, {k: t.to(device) for k, t in value.items()})
        for name in self._sub_attr:
            value = getattr(self, name)
            if isinstance(value, torch.Tensor):
                object.__setattr__(self, name, value.to(device))
        return self

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, TransitionBase) or self.keys() != other.keys():
            return False
        for name in self._major_attr:
            a, b = getattr(self, name), getattr(other, name)
            if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
                return False
        for name in self._sub_attr + self._custom_attr:
            if not _same_value(getattr(self, name), getattr(other, name)):
                return False
        return True

    # Hashed by identity, as in Machin 0.3.4 (transitions can be set members and dict keys);
    # ``==`` compares values, so two equal transitions may still hash differently.
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        parts = []
        for name in self.keys():
            value = getattr(self, name)
            if isinstance(value, dict):
                value = {k: _short(v) for k, v in value.items()}
            parts.append(f"{name}={_short(value)!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # e.g. numpy arrays: no single truth value
        return a is b


def _short(value: Any) -> Any:
    """A tensor as ``Tensor(shape)`` (for reprs); anything else unchanged."""
    return f"Tensor{tuple(value.shape)}" if isinstance(value, torch.Tensor) else value


class Transition(TransitionBase):
    """One environment step: ``state``, ``action``, ``next_state``, ``reward``, ``terminal``.

    Args:
        state: Observation before the step, ``Dict[str, Tensor[1, ...]]``.
        action: Action taken, ``Dict[str, Tensor[1, ...]]``.
        next_state: Observation after the step, ``Dict[str, Tensor[1, ...]]``.
        reward: Scalar or ``Tensor[1, ...]``.
        terminal: Whether the episode ended at this step (scalar or ``Tensor[1, ...]``).
        **kwargs: Custom attributes (sorted by name in :meth:`keys`); tensors here are
            kept as they are and never moved between devices.
    """

    _required_batch_size = 1
    state: Dict[str, torch.Tensor] = None
    action: Dict[str, torch.Tensor] = None
    next_state: Dict[str, torch.Tensor] = None
    reward: Union[float, torch.Tensor] = None
    terminal: Union[bool, torch.Tensor] = None

    def __init__(
        self,
        state: Dict[str, torch.Tensor],
        action: Dict[str, torch.Tensor],
        next_state: Dict[str, torch.Tensor],
        reward: Union[float, torch.Tensor],
        terminal: Union[bool, torch.Tensor],
        **kwargs: Any,
    ):
        custom = sorted(kwargs)
        super().__init__(
            major_attr=["state", "action", "next_state"],
            sub_attr=["reward", "terminal"],
            custom_attr=custom,
            major_data=[state, action, next_state],
            sub_data=[reward, terminal],
            custom_data=[kwargs[k] for k in custom],
        )


class TransitionTypeError(TypeError, RuntimeError):
    """Something other than a transition or a dict was appended.

    A :class:`TypeError`, and a :class:`RuntimeError` as Machin 0.3.4 raised.
    """


class TransitionBuildError(ValueError, TypeError):
    """A dict appended to a buffer lacks arguments of :class:`~machin.frame.transition.Transition`.

    A :class:`ValueError`, and the :class:`TypeError` that building the transition raised
    in Machin 0.3.4.
    """


def as_transition(transition: Union[TransitionBase, Dict[str, Any]]) -> TransitionBase:
    """Return ``transition`` itself, or a :class:`Transition` built from a dict of its attributes.

    Raises:
        TransitionBuildError: When the dict lacks arguments of :class:`Transition`.
        TransitionTypeError: For anything but a transition or a dict.
    """
    if isinstance(transition, TransitionBase):
        return transition
    if isinstance(transition, dict):
        try:
            return Transition(**transition)
        except TypeError as error:
            raise TransitionBuildError(
                f"cannot build a Transition from the dictionary: {error}"
            ) from None
    raise TransitionTypeError(
        f"transition must be a Transition or a dict, got {type(transition).__name__} (a Transition "
        f"object must be a dict or an instance of the Transition class)"
    )


class TransitionStorageBasic(list):
    """A list of at most ``max_size`` transitions that overwrites the oldest when full.

    Each stored transition is a copy, isolated from the object passed to :meth:`store`.
    The buffers of :mod:`machin.frame.buffers` use column storage instead; this
    class is kept for code written against the original API.
    """

    def __init__(self, max_size: int):
        if max_size < 1:
            raise ValueError(f"max_size must be a positive integer, got {max_size!r}")
        super().__init__()
        self.max_size = max_size
        self.index = 0

    def store(self, transition: TransitionBase) -> int:
        """Store a copy of ``transition`` and return the position it was stored at."""
        return self._put(copy.deepcopy(transition))

    def _put(self, transition: TransitionBase) -> int:
        position = self.index
        if len(self) < self.max_size:
            self.append(transition)
        else:
            self[position] = transition
        self.index = (position + 1) % self.max_size
        return position

    def clear(self) -> None:
        """Remove every transition."""
        super().clear()
        self.index = 0


class TransitionStorageSmart(TransitionStorageBasic):
    """Like :class:`TransitionStorageBasic`, but shares equal major tensors between neighbours.

    When a major tensor of the new transition equals the one stored under the same
    key in the previously stored transition (typically ``state`` equal to the last
    ``next_state``), the stored copy refers to the same tensor, which roughly halves
    the memory of state chains.
    """

    def store(self, transition: TransitionBase) -> int:
        """Store a copy of ``transition`` (sharing equal tensors) and return its position."""
        new = copy.deepcopy(transition)
        if len(self):
            previous = self[(self.index - 1) % self.max_size]
            candidates = [
                t for name in previous.major_attr for t in getattr(previous, name).values()
            ]
            for name in new.major_attr:
                shared = {}
                for key, tensor in getattr(new, name).items():
                    match = next(
                        (
                            c
                            for c in candidates
                            if c.shape == tensor.shape
                            and c.dtype == tensor.dtype
                            and c.device == tensor.device
                            and torch.equal(c, tensor)
                        ),
                        None,
                    )
                    shared[key] = tensor if match is None else match
                object.__setattr__(new, name, shared)
        return self._put(new)
