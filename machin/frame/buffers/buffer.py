"""Replay buffer on column storage.

Every attribute key of the stored transitions is one preallocated tensor (a
column) on the buffer's device, created on the first append from that
transition's shapes and dtypes and grown geometrically up to ``buffer_size``;
after that the buffer is a ring that overwrites its oldest rows. Sampling draws
one index tensor and gathers each column once, so its cost does not depend on
Python loops over the sampled transitions. Custom attributes that are numbers
are kept in columns too; any other custom value lives in a Python list.
"""

from __future__ import annotations

import collections.abc
import math
import numbers
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...utils.compat import ignores_extra_args
from ..transition import (
    Scalar,
    Transition,
    TransitionBase,
    TransitionBuildError,
    TransitionTypeError,
    as_transition,
)

__all__ = ["Buffer", "DEFAULT_REQUIRED_ATTRS", "SampleMethodError", "TransitionTypeError", "TransitionBuildError"]

DEFAULT_REQUIRED_ATTRS = ("state", "action", "next_state", "reward", "terminal")
_INITIAL_CAPACITY = 1024
_SCALAR_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}
_BINARY = frozenset((0, 1))
_CHECK_HINT = "(values are checked when stored; check_finite=False on the buffer turns the check off)"


def _tensor_problem(name: Union[str, Tuple[str, str]], block: torch.Tensor) -> Optional[str]:
    """Why the floating tensor ``block`` (one row per transition) cannot be stored, or ``None``.

    The fast path is one sum: a finite sum means every element is finite. Only when the
    sum is not finite (a NaN/inf element, or an overflow) is the exact check run. ``name``
    is the attribute, or ``(attribute, key)`` of a major one (formatted only on a problem).
    """
    if not block.is_floating_point():
        return None
    if block.dim() == 2 and block.numel() <= 64:
        # Small rows (e.g. CartPole states): summing Python floats costs a fraction of a torch op.
        if math.isfinite(sum(map(sum, block.tolist()))):
            return None
    elif math.isfinite(block.sum().item()):
        return None
    bad = ~torch.isfinite(block)
    if not bool(bad.any()):
        return None  # the sum overflowed, every element is finite
    row = int(bad.reshape(block.shape[0], -1).any(1).nonzero()[0])
    name = f"attribute {name[0]}[{name[1]!r}]" if isinstance(name, tuple) else f"attribute {name!r}"
    value = block[bad][0].item()
    return f"{name} must hold finite values, got {value} in transition {row} {_CHECK_HINT}"


def _scalar_problem(name: str, values: Sequence[Any]) -> Optional[str]:
    """Why the scalars ``values`` cannot be stored in a checked sub attribute, or ``None``."""
    try:
        if math.isfinite(sum(values)):  # one C loop; ints and bools are always finite
            return None
    except (TypeError, OverflowError):
        pass
    for row, value in enumerate(values):
        try:
            finite = math.isfinite(value)
        except (TypeError, OverflowError):
            finite = True  # not a number: the layout check reports it
        if not finite:
            return f"{name} must be a finite number, got {value} in transition {row} {_CHECK_HINT}"
    return None


def _terminal_problem(values: Sequence[Any]) -> Optional[str]:
    """Why ``values`` are not valid terminal flags (bools or 0/1), or ``None``."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        block = first if len(values) == 1 else torch.cat(values)
        if block.dtype == torch.bool or bool(((block == 0) | (block == 1)).all()):
            return None
        bad = block[(block != 0) & (block != 1)][0].item()
        return f"attribute 'terminal' must be a bool or 0/1, got {bad}"
    try:
        if set(values) <= _BINARY:
            return None
    except TypeError:  # unhashable: the layout check reports it
        return None
    bad = next(v for v in values if v not in _BINARY)
    return f"attribute 'terminal' must be a bool or 0/1, got {bad!r}"


class SampleMethodError(ValueError, RuntimeError):
    """``sample_method`` names no sample method of the buffer.

    A :class:`ValueError`, and a :class:`RuntimeError` as Machin 0.3.4 raised.
    """


def _scalar_kind(value: Any) -> Optional[type]:
    """``bool``, ``int`` or ``float`` for a real Python/numpy scalar, else ``None``."""
    if isinstance(value, (bool, np.bool_)):
        return bool
    if isinstance(value, numbers.Integral):
        return int
    if isinstance(value, numbers.Real):
        return float
    return None


class _Column:
    """Storage of one sub or custom attribute: a tensor column, or a list for other values.

    Tensors given as custom attributes are kept in a list, where they are (as Machin
    0.3.4 kept them): they are never moved, and their shapes may differ.

    ``scalar`` columns remember the Python kind of their values (bool < int < float,
    promoted when a wider kind arrives), so that unconcatenated samples give back
    Python scalars of the kind that was stored.
    """

    __slots__ = ("tensor", "kind", "values", "row_shape", "one_row", "dtypes")

    def __init__(self, first: Any, capacity: int, device: torch.device, allow_list: bool, exact_floats: bool):
        self.tensor, self.kind, self.values, self.row_shape = None, None, None, None
        # Sub attributes (rewards) keep floats in the default dtype, which is what a batch
        # needs; custom attributes keep them in float64 so that Python floats come back exactly.
        self.dtypes = _SCALAR_DTYPES if exact_floats else {**_SCALAR_DTYPES, float: torch.get_default_dtype()}
        if isinstance(first, torch.Tensor) and not allow_list:
            self.row_shape = tuple(first.shape[1:])
            self.one_row = (1, *self.row_shape)  # the shape every appended value must have
            self.tensor = torch.empty((capacity, *self.row_shape), dtype=first.dtype, device=device)
        elif _scalar_kind(first) is not None:
            self.kind = _scalar_kind(first)
            self.tensor = torch.empty((capacity, 1), dtype=self.dtypes[self.kind], device=device)
        elif allow_list:
            self.values = [None] * capacity
        else:
            raise ValueError(f"cannot store a value of type {type(first).__name__}")

    def grow(self, capacity: int, filled: int) -> None:
        if self.values is not None:
            self.values.extend([None] * (capacity - len(self.values)))
        else:
            new = self.tensor.new_empty((capacity, *self.tensor.shape[1:]))
            new[:filled] = self.tensor[:filled]
            self.tensor = new

    def accepts(self, value: Any) -> Optional[str]:
        """``None`` if ``value`` fits this column, else the reason it does not."""
        if self.values is not None:
            return None
        if self.kind is None:
            if not isinstance(value, torch.Tensor):
                return f"a tensor of shape [1, *{self.row_shape}], got {type(value).__name__}"
            # One transition is one row: a first dimension other than 1 is rejected here,
            # before anything is written.
            if value.shape != self.one_row or value.dtype != self.tensor.dtype:
                return (
                    f"shape {[1, *self.row_shape]} and dtype {self.tensor.dtype}, "
                    f"got shape {list(value.shape)} and dtype {value.dtype}"
                )
            return None
        if type(value) is self.kind:  # the common case, without the slower ABC checks
            return None
        kind = _scalar_kind(value)
        if kind is None:
            return f"a {self.kind.__name__} scalar, got {type(value).__name__}"
        return None

    def needs_promotion(self, values: Sequence[Any]) -> bool:
        """Whether :meth:`promote` would change this column for ``values``."""
        kind = self.kind
        return self.values is None and kind is not None and not all(type(v) is kind for v in values)

    def promote(self, values: Sequence[Any]) -> None:
        """Widen a scalar column (bool -> int -> float) or turn it into a list column."""
        kind = self.kind
        if self.values is not None or kind is None:
            return
        if all(type(v) is kind for v in values):  # the common case: nothing to do
            return
        kinds = {_scalar_kind(v) for v in values}
        if None in kinds:
            filled = self.tensor.tolist()
            self.values = [row[0] if self.kind is float else self.kind(row[0]) for row in filled]
            self.tensor, self.kind = None, None
            return
        order = (bool, int, float)
        widest = max(kinds | {self.kind}, key=order.index)
        if widest is not self.kind:
            self.kind = widest
            self.tensor = self.tensor.to(self.dtypes[widest])

    def write(self, rows: Union[slice, torch.Tensor], values: Sequence[Any], positions: List[int],
              block: Optional[torch.Tensor] = None) -> None:
        if block is not None:  # the rows, already concatenated (and checked)
            if len(values) == 1 and isinstance(rows, slice):
                self.tensor[rows] = block
            else:
                self.tensor[rows] = block.to(self.tensor.device)
        elif self.values is not None:
            for p, v in zip(positions, values):
                self.values[p] = v
        elif len(values) == 1 and isinstance(rows, slice):
            # One row (every append): assign in place, without a temporary tensor.
            self.tensor[rows] = values[0] if self.kind is None else self.kind(values[0])
        elif self.kind is None:
            block = values[0] if len(values) == 1 else torch.cat(values)
            self.tensor[rows] = block.to(self.tensor.device)
        else:
            self.tensor[rows] = torch.tensor(values, dtype=self.tensor.dtype).view(-1, 1).to(self.tensor.device)

    def gather(self, index: torch.Tensor, concatenate: bool, as_tensor: bool, device: Optional[torch.device],
               name: str = ""):
        if self.values is not None:
            values = [self.values[i] for i in index.tolist()]
            if concatenate and as_tensor:
                try:
                    if values and isinstance(values[0], torch.Tensor):
                        return torch.cat([v.to(device) for v in values])
                    return torch.tensor(values, device=device).view(len(values), -1)
                except (TypeError, ValueError, RuntimeError) as error:
                    raise ValueError(
                        f"Batch not concatenable: cannot concatenate the custom attribute {name!r} into a "
                        f"tensor: it holds {type(values[0]).__name__} values, and only numbers (or "
                        f"equal-length lists of numbers, or tensors of one trailing shape) can be; leave "
                        f"it out of additional_concat_attrs ({error})"
                    ) from error
            return values
        block = self.tensor.index_select(0, index)
        if self.kind is None:
            if device is not None and block.device != device:
                block = block.to(device)
            return block if concatenate else list(block.split(1))
        if concatenate and as_tensor:
            if self.kind is float and block.dtype != torch.get_default_dtype():
                block = block.to(torch.get_default_dtype())
            return block.to(device) if device is not None else block
        values = block.view(-1).tolist()
        return values if self.kind is not bool else [bool(v) for v in values]


class Buffer:
    """A ring buffer of transitions stored column by column.

    Args:
        buffer_size: Maximum number of transitions; the oldest is overwritten when full.
        buffer_device: Device the stored tensors live on.
        generator: Optional ``torch.Generator`` (on the CPU) used for sampling, for
            repeatable runs; the global torch generator is used otherwise.
        check_finite: Check values when they are stored (default ``True``): every
            floating tensor of the major attributes (states, ...) and every floating sub
            attribute (rewards) must be finite, else a :class:`ValueError` names the
            attribute and the bad value. One reduction per column and write (a few
            microseconds per append); ``False`` skips it. The attribute of the same name
            can be changed later. ``terminal`` must be a bool or 0/1 either way.

    Storing is transactional: a transition that is rejected, or an append whose storage
    cannot be allocated, leaves the buffer as it was (the first append included: the
    attribute layout is only kept once a transition was stored).

    Extra positional and keyword arguments are ignored with an
    :class:`~machin.utils.compat.ExtraArgumentsWarning`, as Machin 0.3.4 ignored them.

    The buffer is also a read-only sequence of its transitions, oldest first:
    ``buffer[i]`` rebuilds the ``i``-th one from the columns (slowly: use
    :meth:`sample_batch` for batches). This is what lets a sample method written for
    Machin 0.3.4, which picked transitions from a list, run unchanged.

    Not thread-safe.
    """

    @ignores_extra_args
    def __init__(self, buffer_size: int = 1_000_000, buffer_device: Union[str, torch.device] = "cpu", *,
                 generator: Optional[torch.Generator] = None, check_finite: bool = True):
        if not isinstance(buffer_size, int) or isinstance(buffer_size, bool) or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive integer, got {buffer_size!r}")
        self.buffer_size = buffer_size
        self.buffer_device = torch.device(buffer_device)
        self.generator = generator
        self.check_finite = bool(check_finite)
        self.clear()

    # -- bookkeeping ----------------------------------------------------------------
    def clear(self) -> None:
        """Remove every transition and forget the stored attribute layout."""
        self._keys: Optional[List[str]] = None
        self._major: Dict[str, Dict[str, _Column]] = {}
        self._sub: Dict[str, _Column] = {}
        self._custom: Dict[str, _Column] = {}
        self._capacity = 0
        self._pos = 0
        self._size = 0

    def size(self) -> int:
        """Number of stored transitions."""
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def attribute_names(self) -> Optional[List[str]]:
        """Attribute names of the stored transitions (``None`` before the first append)."""
        return None if self._keys is None else list(self._keys)

    def __getitem__(self, position: Union[int, slice]) -> Union[TransitionBase, List[TransitionBase]]:
        """The transition at ``position`` (0 is the oldest, -1 the newest), rebuilt from the columns.

        A slice gives a list. Every call gathers from every column, so this is meant for
        inspection and for sample methods written for Machin 0.3.4, not for batches.
        """
        if isinstance(position, slice):
            return self._rebuild(range(self._size)[position])
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
            raise TypeError(f"buffer positions must be integers or slices, got {type(position).__name__}")
        p = int(position) + (self._size if position < 0 else 0)
        if not 0 <= p < self._size:
            raise IndexError(f"position {int(position)} is out of range for a buffer of {self._size} transitions")
        return self._rebuild([p])[0]

    def _rebuild(self, positions: Sequence[int]) -> List[TransitionBase]:
        """Transitions at ``positions`` (counted from the oldest), rebuilt from the columns."""
        if len(positions) == 0:
            return []
        index = self._storage_index(torch.tensor(list(positions), dtype=torch.long)).to(self.buffer_device)
        major = {name: {k: c.gather(index, False, True, None) for k, c in cols.items()}
                 for name, cols in self._major.items()}
        sub = {name: c.gather(index, False, True, None) for name, c in self._sub.items()}
        custom = {name: c.gather(index, False, False, None, name) for name, c in self._custom.items()}
        standard = (list(major) == ["state", "action", "next_state"] and list(sub) == ["reward", "terminal"]
                    and list(custom) == sorted(custom))
        rebuilt = []
        for i in range(len(positions)):
            major_i = {name: {k: rows[i] for k, rows in cols.items()} for name, cols in major.items()}
            sub_i = {name: rows[i] for name, rows in sub.items()}
            custom_i = {name: rows[i] for name, rows in custom.items()}
            if standard:
                rebuilt.append(Transition(**major_i, **sub_i, **custom_i))
            else:
                rebuilt.append(TransitionBase(list(major_i), list(sub_i), list(custom_i), list(major_i.values()),
                                              list(sub_i.values()), list(custom_i.values())))
        return rebuilt

    def _columns(self):
        for cols in self._major.values():
            yield from cols.values()
        yield from self._sub.values()
        yield from self._custom.values()

    # -- appending ------------------------------------------------------------------
    @staticmethod
    def _as_transition(transition: Union[TransitionBase, Dict[str, Any]]) -> TransitionBase:
        return as_transition(transition)

    def _create_layout(self, t: TransitionBase) -> None:
        """Allocate the columns for transitions like ``t``; nothing is assigned if that fails."""
        cap = min(self.buffer_size, _INITIAL_CAPACITY)
        dev = self.buffer_device
        major = {
            name: {k: _Column(v, cap, dev, False, False) for k, v in getattr(t, name).items()}
            for name in t.major_attr
        }
        sub = {name: _Column(getattr(t, name), cap, dev, False, False) for name in t.sub_attr}
        custom = {name: _Column(getattr(t, name), cap, dev, True, True) for name in t.custom_attr}
        self._keys, self._capacity, self._major, self._sub, self._custom = t.keys(), cap, major, sub, custom

    def _check(self, t: TransitionBase, required_attrs: Iterable[str]) -> None:
        keys = t.keys()
        missing = [a for a in required_attrs if a not in keys]
        if missing:
            raise ValueError(
                f"Transition object missing attributes: the transition is missing required "
                f"attribute(s) {missing}; it has {keys}"
            )
        if self._keys is None:
            return
        if keys != self._keys or t.major_attr != list(self._major) or t.sub_attr != list(self._sub):
            raise ValueError(
                f"Transition object has different attributes: {t.keys()} differ from those already "
                f"stored {self._keys}; every transition in a buffer must have the same attributes"
            )
        for name, cols in self._major.items():
            value = getattr(t, name)
            if value.keys() != cols.keys():
                raise ValueError(
                    f"major attribute {name!r} has keys {sorted(value)}, but the stored transitions "
                    f"have keys {sorted(cols)}"
                )
            for key, col in cols.items():
                problem = col.accepts(value[key])
                if problem:
                    raise ValueError(f"attribute {name}[{key!r}] must have {problem}")
        for name, col in self._sub.items():
            problem = col.accepts(getattr(t, name))
            if problem:
                raise ValueError(f"attribute {name!r} must be {problem}")

    def _reserve(self, n: int) -> Tuple[List[int], Union[slice, torch.Tensor]]:
        """Make room for ``n`` new rows; return their storage positions and an indexer."""
        if self._size + n > self._capacity and self._capacity < self.buffer_size:
            new_cap = min(self.buffer_size, max(2 * self._capacity, self._size + n))
            for col in self._columns():
                col.grow(new_cap, self._size)
            self._capacity = new_cap
            # Before the first wrap-around, rows are filled in order from 0.
            self._pos = self._size
        cap = self._capacity
        start = self._pos
        positions = list(range(start, start + n)) if start + n <= cap else [(start + i) % cap for i in range(n)]
        rows = slice(start, start + n) if start + n <= cap else torch.tensor(positions, device=self.buffer_device)
        self._pos = (start + n) % cap
        self._size = min(self._size + n, cap)
        return positions, rows

    def _write(self, transitions: List[TransitionBase]) -> List[int]:
        """Check the values of layout-checked transitions, then write them; returns the storage positions used.

        Nothing is changed when a value is rejected; when growing, promoting or writing a
        column fails, the columns and counters are put back as they were.
        """
        if len(transitions) > self.buffer_size:
            transitions = transitions[-self.buffer_size:]
        n = len(transitions)
        check = self.check_finite
        major = []
        for name, cols in self._major.items():
            for key, col in cols.items():
                values = [getattr(t, name)[key] for t in transitions]
                block = values[0] if n == 1 else torch.cat(values)
                if check:
                    problem = _tensor_problem((name, key), block)
                    if problem:
                        raise ValueError(problem)
                major.append((col, values, block))
        sub = [(name, col, [getattr(t, name) for t in transitions]) for name, col in self._sub.items()]
        for name, _col, values in sub:
            problem = None
            if name == "terminal":
                problem = _terminal_problem(values)
            elif check:
                if isinstance(values[0], torch.Tensor):
                    problem = _tensor_problem(name, values[0] if n == 1 else torch.cat(values))
                else:
                    problem = _scalar_problem(f"attribute {name!r}", values)
            if problem:
                raise ValueError(problem)
        scalar_like = [(col, values) for _, col, values in sub]
        scalar_like += [(col, [getattr(t, name) for t in transitions]) for name, col in self._custom.items()]
        # Everything below changes the buffer: remember what a failure has to put back. Columns
        # are only replaced (not changed in place) when they grow or are promoted.
        counters = (self._pos, self._size, self._capacity)
        saved = None
        grows = self._size + n > self._capacity and self._capacity < self.buffer_size
        if grows or any(col.needs_promotion(v) for col, v in scalar_like):
            saved = [(col, col.tensor, col.kind, col.values, None if col.values is None else len(col.values))
                     for col in self._columns()]
        try:
            for col, values in scalar_like:
                col.promote(values)
            positions, rows = self._reserve(n)
            for col, values, block in major:
                col.write(rows, values, positions, block)
            for col, values in scalar_like:
                col.write(rows, values, positions)
        except BaseException:
            self._pos, self._size, self._capacity = counters
            for col, tensor, kind, values, length in saved or ():
                col.tensor, col.kind, col.values = tensor, kind, values
                if values is not None:
                    del values[length:]
            raise
        return positions

    def append(self, transition: Union[TransitionBase, Dict[str, Any]],
               required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS) -> int:
        """Store one transition (a :class:`Transition` or a dict of its attributes).

        Args:
            transition: The transition; a dict is turned into a :class:`Transition`.
            required_attrs: Attributes that must be present; ``()`` disables the check.

        Returns:
            The storage position of the new row.

        Raises:
            ValueError: When a required attribute is missing, the attributes (names,
                keys, shapes or dtypes) differ from those already stored, a value is not
                finite (see ``check_finite``) or ``terminal`` is not a bool or 0/1. The
                buffer is left as it was.
        """
        return self.extend([transition], required_attrs)[0]

    def extend(self, transitions: Iterable[Union[TransitionBase, Dict[str, Any]]],
               required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS) -> List[int]:
        """Store several transitions (e.g. a whole episode) in one write per column.

        Every transition is checked before any is written, so a bad one leaves the
        buffer unchanged. Returns the storage positions used.

        Args:
            transitions: The transitions (or dicts) to store, oldest first.
            required_attrs: Attributes every transition must have.
        """
        ts = [self._as_transition(t) for t in transitions]
        if not ts:
            return []
        required_attrs = tuple(required_attrs)
        if self._keys is None:
            self._check(ts[0], required_attrs)
            self._create_layout(ts[0])
            try:
                self._check_all(ts, required_attrs)
                return self._write(ts)
            except BaseException:
                Buffer.clear(self)  # nothing was stored: do not keep the rejected layout either
                raise
        self._check_all(ts, required_attrs)
        return self._write(ts)

    def _check_all(self, ts: List[TransitionBase], required_attrs: Tuple[str, ...]) -> None:
        """Check every transition; a fast pass over whole columns, the full check when it finds a problem."""
        self._check(ts[0], required_attrs)
        if len(ts) > 1 and not self._same_layout(ts):
            for t in ts[1:]:
                self._check(t, required_attrs)  # raises with a message naming the problem

    def _same_layout(self, ts: List[TransitionBase]) -> bool:
        """Whether every transition has exactly the stored names, keys, shapes, dtypes and scalar kinds."""
        names = (ts[0]._major_attr, ts[0]._sub_attr, ts[0]._custom_attr)
        if any((t._major_attr, t._sub_attr, t._custom_attr) != names for t in ts):
            return False
        for name, cols in self._major.items():
            dicts = [getattr(t, name) for t in ts]
            if any(len(d) != len(cols) for d in dicts):
                return False
            for key, col in cols.items():
                want = (col.one_row, col.tensor.dtype)
                if any(key not in d or (d[key].shape, d[key].dtype) != want for d in dicts):
                    return False
        for name, col in self._sub.items():
            values = [getattr(t, name) for t in ts]
            if col.kind is not None:
                if any(type(v) is not col.kind for v in values):
                    return False
            elif any(not isinstance(v, torch.Tensor) or (v.shape, v.dtype) != (col.one_row, col.tensor.dtype)
                     for v in values):
                return False
        return True

    # -- sampling -------------------------------------------------------------------
    def _randint(self, high: int, n: int) -> torch.Tensor:
        return torch.randint(high, (n,), generator=self.generator)

    @staticmethod
    def sample_method_random_unique(buffer: Buffer, batch_size: int) -> Tuple[int, torch.Tensor]:
        """Up to ``batch_size`` distinct positions, in random order.

        Args:
            buffer: The buffer to sample from.
            batch_size: Number of positions wanted.
        """
        size = buffer.size()
        n = min(batch_size, size)
        if n <= 0:
            return 0, torch.empty(0, dtype=torch.long)
        if 4 * n <= size:
            # Draw with replacement and redraw until no position repeats. Only equality decides
            # what is redrawn, so every ordered tuple of distinct positions stays equally likely.
            # When repeats are unlikely (n * n <= 2 * size: a clean draw has probability above
            # 1/e) redrawing everything is cheapest; otherwise only the later copies are redrawn.
            redraw_all = n * n <= 2 * size
            index = buffer._randint(size, n)
            values = index.numpy()  # a view: writing to it rewrites ``index``
            for _ in range(64):
                ordered = values.copy()  # numpy: far less call overhead than torch.unique
                ordered.sort()
                same = ordered[1:] == ordered[:-1]
                if not np.count_nonzero(same):
                    return n, index
                if redraw_all:
                    index = buffer._randint(size, n)
                    values = index.numpy()
                    continue
                repeated = ordered[1:][same]
                later = np.concatenate([np.flatnonzero(values == r)[1:] for r in set(repeated.tolist())])
                values[later] = buffer._randint(size, later.size).numpy()
            # Fall through to an exact permutation if rejection did not settle.
        return n, torch.randperm(size, generator=buffer.generator)[:n]

    @staticmethod
    def sample_method_random(buffer: Buffer, batch_size: int) -> Tuple[int, torch.Tensor]:
        """``batch_size`` positions drawn with replacement.

        Args:
            buffer: The buffer to sample from.
            batch_size: Number of positions.
        """
        if buffer.size() == 0 or batch_size <= 0:
            return 0, torch.empty(0, dtype=torch.long)
        return batch_size, buffer._randint(buffer.size(), batch_size)

    @staticmethod
    def sample_method_all(buffer: Buffer, _batch_size: int) -> Tuple[int, torch.Tensor]:
        """Every position, oldest first.

        Args:
            buffer: The buffer to sample from.
            batch_size: Ignored.
        """
        return buffer.size(), torch.arange(buffer.size())

    def _storage_index(self, logical: torch.Tensor) -> torch.Tensor:
        """Map positions counted from the oldest row (0) to storage rows."""
        if self._size < self._capacity or self._pos == 0:
            return logical
        return (logical + self._pos) % self._capacity

    def _sample_method(self, sample_method: Union[str, Callable]) -> Callable:
        """The callable that ``sample_method`` stands for: a ``sample_method_<name>`` of the buffer, or itself."""
        if isinstance(sample_method, str):
            method = getattr(self, "sample_method_" + sample_method, None)
            if not callable(method):
                raise SampleMethodError(
                    f"Cannot find specified sample method: sample_method must be 'random_unique', 'random', "
                    f"'all' or a callable, got {sample_method!r} ({type(self).__name__} has no "
                    f"sample_method_{sample_method})"
                )
            return method
        if callable(sample_method):
            return sample_method
        raise TypeError(f"sample_method must be a string or a callable, got {type(sample_method).__name__}")

    @ignores_extra_args
    def sample_batch(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_method: Union[str, Callable[[Buffer, int], Tuple[int, Any]]] = "random_unique",
        sample_attrs: Optional[List[str]] = None,
        additional_concat_attrs: Optional[List[str]] = None,
    ) -> Tuple[int, Optional[Tuple[Any, ...]]]:
        """Sample a batch of transitions.

        Args:
            batch_size: How many to sample (a hint: the method decides).
            concatenate: Return tensors of shape ``[B, ...]`` (``True``) or per-sample lists.
            device: Device of the returned tensors (default: the buffer's device).
            sample_method: ``"random_unique"`` (without replacement), ``"random"`` (with
                replacement), ``"all"`` (everything, oldest first), the ``<name>`` of another
                ``sample_method_<name>`` of the buffer, or a callable
                ``f(buffer, batch_size) -> (size, positions)`` where ``positions`` is a
                sequence or tensor of positions counted from the oldest stored row (0). A
                callable may also return ``(size, transitions)``, a list of transitions
                picked from ``buffer`` (a sequence of them), as Machin 0.3.4's did.
            sample_attrs: Attributes to return, in order; ``"*"`` stands for a dict of the
                custom attributes not named otherwise; unknown names are skipped.
                Default: every attribute.
            additional_concat_attrs: Custom attributes to return as ``[B, 1]`` tensors.

        Extra positional and keyword arguments are ignored with an
        :class:`~machin.utils.compat.ExtraArgumentsWarning`.

        Returns:
            ``(size, values)``, with ``values`` a tuple in ``sample_attrs`` order, or
            ``(0, None)`` when nothing was sampled.

        Raises:
            SampleMethodError: (a ``ValueError`` and a ``RuntimeError``) for an unknown
                method name.
            ValueError: When a callable returns positions out of range.
        """
        method = self._sample_method(sample_method)
        if self._size == 0:
            return 0, None
        size, positions = method(self, batch_size)
        if size == 0:
            return 0, None
        if method not in _BUILT_IN_METHODS:
            # The built-in methods return in-range long tensors; anything else is checked.
            if isinstance(positions, (list, tuple)) and positions and isinstance(positions[0], TransitionBase):
                device = self.buffer_device if device is None else device
                return size, self.post_process_batch(list(positions), device, concatenate, sample_attrs,
                                                     additional_concat_attrs)
            positions = torch.as_tensor(positions, dtype=torch.long).view(-1)
            if positions.numel() and (positions.min() < 0 or positions.max() >= self._size):
                raise ValueError(
                    f"sample method returned positions outside [0, {self._size - 1}]: "
                    f"{positions.min().item()}..{positions.max().item()}"
                )
        index = self._storage_index(positions)
        return size, self._gather(index, concatenate, device, sample_attrs, additional_concat_attrs)

    def _gather(self, index: torch.Tensor, concatenate: bool, device, sample_attrs, additional_concat_attrs):
        """Read the rows at storage positions ``index`` for the requested attributes."""
        device = torch.device(device) if device is not None else None
        if sample_attrs is None:
            sample_attrs = self._keys
        concat_custom = set(additional_concat_attrs or ())
        storage_index = index if index.device == self.buffer_device else index.to(self.buffer_device)
        result = []
        for name in sample_attrs:
            if name == "*":
                named = set(sample_attrs)
                result.append({
                    k: c.gather(storage_index, concatenate, k in concat_custom, device, k)
                    for k, c in self._custom.items() if k not in named
                })
            elif name in self._major:
                result.append({
                    k: c.gather(storage_index, concatenate, True, device)
                    for k, c in self._major[name].items()
                })
            elif name in self._sub:
                result.append(self._sub[name].gather(storage_index, concatenate, True, device))
            elif name in self._custom:
                result.append(self._custom[name].gather(
                    storage_index, concatenate, name in concat_custom, device, name))
        return tuple(result)

    # -- documented helpers for lists of transitions --------------------------------
    @staticmethod
    def make_tensor_from_batch(batch: List[Union[Scalar, torch.Tensor]], device, concatenate: bool):
        """Concatenate a list of tensors (dim 0) or scalars (into ``[B, 1]``).

        An empty ``batch``, or ``concatenate=False``, returns ``batch`` unchanged.

        Args:
            batch: The tensors or scalars.
            device: Device of the result (``None``: keep).
            concatenate: Whether to concatenate at all.

        Raises:
            ValueError: When scalars cannot form a tensor (e.g. strings).
        """
        if not batch or not concatenate:
            return batch
        if isinstance(batch[0], torch.Tensor):
            return torch.cat([t.to(device) for t in batch], dim=0)
        try:
            return torch.tensor(batch, device=device).view(len(batch), -1)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(
                f"Batch not concatenable: only tensors, numbers or equal-length lists of numbers can be "
                f"joined into a tensor, got {type(batch[0]).__name__} values ({error})"
            ) from error

    @classmethod
    def post_process_batch(cls, batch: List[TransitionBase], device, concatenate: bool,
                           sample_attrs: Optional[List[str]], additional_concat_attrs: Optional[List[str]]):
        """Turn a list of transitions into the tuple :meth:`sample_batch` returns.

        Args:
            batch: The sampled transitions.
            device: Device of the concatenated tensors.
            concatenate: Concatenate attributes into batch tensors (else return lists).
            sample_attrs: Attributes to return, in order (``None``: all; ``"*"``: the remaining custom ones as a dict).
            additional_concat_attrs: Custom attributes to concatenate into ``[B, 1]`` tensors.
        """
        if not batch:
            return None
        first = batch[0]
        sample_attrs = first.keys() if sample_attrs is None else sample_attrs
        concat_custom = set(additional_concat_attrs or ())

        def custom(name):
            values = [getattr(t, name) for t in batch]
            return cls.make_tensor_from_batch(values, device, concatenate and name in concat_custom)

        result = []
        for name in sample_attrs:
            if name == "*":
                named = set(sample_attrs)
                result.append({k: custom(k) for k in first.custom_attr if k not in named})
            elif name in first.major_attr:
                result.append({
                    k: cls.make_tensor_from_batch([getattr(t, name)[k] for t in batch], device, concatenate)
                    for k in getattr(first, name)
                })
            elif name in first.sub_attr:
                result.append(cls.make_tensor_from_batch([getattr(t, name) for t in batch], device, concatenate))
            elif name in first.custom_attr:
                result.append(custom(name))
        return tuple(result)


# Functions whose positions sample_batch trusts (static methods read through an instance are these functions).
_BUILT_IN_METHODS = frozenset(
    (Buffer.sample_method_random_unique, Buffer.sample_method_random, Buffer.sample_method_all)
)
# A sequence of transitions (``buffer[i]``, ``len(buffer)``), so that ``random.sample(buffer, n)`` works.
collections.abc.Sequence.register(Buffer)
