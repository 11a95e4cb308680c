"""Replay buffer on column storage.

Every attribute key of the stored transitions is one preallocated tensor (a
column) on the buffer's device, created on the first append from that
transition's shapes and dtypes and grown geometrically up to ``buffer_size``;
after that the buffer is a ring that overwrites its oldest rows. Sampling draws
one index tensor and gathers each column once, so its cost does not depend on
Python loops over the sampled transitions. Custom attributes that are numbers
are kept in columns too; any other custom value lives in a Python list.

Storing has one path, for dicts and :class:`~machin.frame.transition.Transition`
objects alike: each transition's values are read straight from it (no
``Transition`` is built for a dict of the stored layout) and checked against the
columns; a transition that does not fit is checked as the ``Transition`` it stands
for, which names the problem. Then each column checks its values (finite numbers,
terminal flags) and writes them.
"""

from __future__ import annotations

import collections.abc
import copy
import math
import numbers
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...utils.compat import drop_extra_args, ignores_extra_args
from ..transition import (
    Scalar,
    Transition,
    TransitionBase,
    TransitionBuildError,
    TransitionTypeError,
    as_transition,
)

__all__ = [
    "Buffer",
    "DEFAULT_REQUIRED_ATTRS",
    "SampleMethodError",
    "TransitionTypeError",
    "TransitionBuildError",
]

DEFAULT_REQUIRED_ATTRS = ("state", "action", "next_state", "reward", "terminal")
_INITIAL_CAPACITY = 1024
_SCALAR_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}
_KIND_RANK = {bool: 0, int: 1, float: 2}  # a scalar column widens bool -> int -> float
_BINARY = frozenset((0, 1))
_CHECK_HINT = (
    "(values are checked when stored; check_finite=False on the buffer turns the check off)"
)
# The attribute names of a Transition: only a buffer with these (and sorted custom ones) can store dicts as they are.
_TRANSITION_MAJOR = ["state", "action", "next_state"]
_TRANSITION_SUB = ["reward", "terminal"]
# Column roles: what is checked of the values written into a column (see Buffer._fit).
_UNCHECKED, _FINITE, _TERMINAL = 0, 1, 2
# Rows of at most this many elements in one dimension are read as lists of Python numbers (see _read_mode).
_SHORT_ROW = 64
# How a tensor column's values are read (see _read_mode).
_AS_TENSOR, _AS_ARRAY, _AS_LIST = 0, 1, 2
_KINDS: Dict[type, Optional[type]] = {}  # _kind_of_type's answers
_INT64 = (-(2**63), 2**63 - 1)


def _kind_of_type(value_type: type) -> Optional[type]:
    """``bool``, ``int`` or ``float`` for the type of a real Python/numpy scalar, else ``None`` (remembered per type)."""
    kind = _KINDS.get(value_type, _KINDS)
    if kind is _KINDS:
        if issubclass(value_type, (bool, np.bool_)):
            kind = bool
        elif issubclass(value_type, numbers.Integral):
            kind = int
        elif issubclass(value_type, numbers.Real):
            kind = float
        else:
            kind = None
        _KINDS[value_type] = kind
    return kind


def _scalar_kind(value: Any) -> Optional[type]:
    """``bool``, ``int`` or ``float`` for a real Python/numpy scalar, else ``None``."""
    return _kind_of_type(type(value))


def _widest_kind(values: Sequence[Any]) -> Optional[type]:
    """The widest scalar kind among ``values`` (``None`` when one of them is not a real scalar)."""
    widest = bool
    for kind in map(_kind_of_type, set(map(type, values))):
        if kind is None:
            return None
        if _KIND_RANK[kind] > _KIND_RANK[widest]:
            widest = kind
    return widest


def _usable_device(value: Union[str, torch.device]) -> torch.device:
    """``buffer_device`` as a torch device this process can store tensors on (else a ValueError naming it)."""
    try:
        device = torch.device(value)
        torch.empty(
            0, device=device
        )  # e.g. "cuda" on a torch without CUDA fails here, not at the first append
    except (RuntimeError, TypeError, AssertionError) as error:
        raise ValueError(
            f"buffer_device={value!r} cannot hold tensors in this process: {error}"
        ) from error
    return device


def _own_copy(value: Any) -> Any:
    """What a :class:`Transition` keeps of a custom value: a detached clone of a tensor, a deep copy of anything else."""
    if type(value) in (float, int, bool, str):
        return value  # immutable: a deep copy would be the same object
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return copy.deepcopy(value)


def _tested(written: Any, test: int, check: bool) -> float:
    """The value test ``test`` (see :class:`_Layout`, 2 to 4) of one row: the sum to check for
    being finite, 0 for terminal flags (raising for anything but 0/1)."""
    if test == 4:
        problem = _terminal_problem(written)
        if problem:
            raise ValueError(problem)
        return 0.0
    if not check:
        return 0.0
    if test == 2:
        return written.item()
    if isinstance(written, torch.Tensor):
        return written.double().sum().item()
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow only means the exact test runs
        return written.sum(dtype=np.float64).item()


def _non_finite(label: str, value: Any, index: int) -> Optional[str]:
    """Why ``value`` (a row of transition ``index``, as written) is not finite, or ``None`` (also for non-numbers)."""
    if type(value) is list:  # a short row (see _read_mode)
        value = np.array(value)
    if isinstance(value, (torch.Tensor, np.ndarray)):
        block = torch.as_tensor(value).detach().cpu()
        bad = ~torch.isfinite(block) if block.is_floating_point() else None
        if bad is None or not bool(bad.any()):
            return None
        return f"{label} must hold finite values, got {block[bad][0].item()} in transition {index} {_CHECK_HINT}"
    try:
        if math.isfinite(value):
            return None
    except (TypeError, OverflowError):  # not a float (a huge int is finite)
        return None
    return f"{label} must be a finite number, got {value} in transition {index} {_CHECK_HINT}"


def _terminal_problem(value: Any) -> Optional[str]:
    """Why ``value`` (a scalar, tensor or array) is not a valid terminal flag (a bool or 0/1), or ``None``."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        binary = (value == 0) | (value == 1)
        if bool(binary.all()):
            return None
        return f"attribute 'terminal' must be a bool or 0/1, got {value[~binary][0].item()}"
    if value in _BINARY:
        return None
    return f"attribute 'terminal' must be a bool or 0/1, got {value!r}"


class SampleMethodError(ValueError, RuntimeError):
    """``sample_method`` names no sample method of the buffer.

    A :class:`ValueError`, and a :class:`RuntimeError` as Machin 0.3.4 raised.
    """


class _Column:
    """Storage of one attribute key: a tensor column, or a list for other values.

    Tensors given as custom attributes are kept in a list, where they are (as Machin
    0.3.4 kept them): they are never moved, and their shapes may differ.

    ``scalar`` columns remember the Python kind of their values (bool < int < float,
    promoted when a wider kind arrives), so that unconcatenated samples give back
    Python scalars of the kind that was stored.

    ``label`` (and ``verb``) name the attribute in messages; ``role`` says what is checked
    of the values written into it (nothing, finite numbers, or terminal flags).
    """

    __slots__ = (
        "tensor",
        "kind",
        "values",
        "row_shape",
        "one_row",
        "dtypes",
        "view",
        "label",
        "verb",
        "role",
    )

    def __init__(
        self,
        first: Any,
        capacity: int,
        device: torch.device,
        allow_list: bool,
        exact_floats: bool,
        label: str = "",
        role: int = _UNCHECKED,
        verb: str = "must be",
    ):
        self.tensor, self.kind, self.values, self.row_shape, self.one_row = (
            None,
            None,
            None,
            None,
            None,
        )
        self.label, self.verb, self.role = label, verb, role
        # A numpy view of ``tensor`` on the CPU (None: not made yet, False: none); reset
        # whenever ``tensor`` is replaced.
        self.view = None
        # Sub attributes (rewards) keep floats in the default dtype, which is what a batch
        # needs; custom attributes keep them in float64 so that Python floats come back exactly.
        self.dtypes = (
            _SCALAR_DTYPES if exact_floats else {**_SCALAR_DTYPES, float: torch.get_default_dtype()}
        )
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
        if (
            self.kind is None
            and self.values is None
            and not self.tensor.is_floating_point()
            and role == _FINITE
        ):
            self.role = _UNCHECKED  # (integer and bool tensors are always finite)

    def grow(self, capacity: int, filled: int) -> None:
        if self.values is not None:
            self.values.extend([None] * (capacity - len(self.values)))
        else:
            new = self.tensor.new_empty((capacity, *self.tensor.shape[1:]))
            new[:filled] = self.tensor[:filled]
            self.tensor, self.view = new, None

    def __getstate__(self) -> Dict[str, Any]:
        # A pickled view would be a copy; pickling may also move the tensor to shared memory
        # (torch.multiprocessing), which leaves the view behind: drop it here as well.
        self.view = None
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        for name in self.__slots__:
            setattr(self, name, state.get(name))

    def _make_view(self) -> Union[np.ndarray, bool]:
        """A numpy view of ``tensor`` on the CPU (``False`` elsewhere, or for dtypes numpy lacks), kept."""
        try:
            view = self.tensor.numpy() if self.tensor.device.type == "cpu" else False
        except TypeError:  # bfloat16
            view = False
        self.view = view
        return view

    def misfit(self, value: Any) -> str:
        """The message for a ``value`` that does not fit this major or sub attribute column (see :meth:`Buffer._fit`)."""
        verb = self.verb
        if self.kind is not None:
            return f"{self.label} {verb} a {self.kind.__name__} scalar, got {type(value).__name__}"
        if not isinstance(value, torch.Tensor):
            return f"{self.label} {verb} a tensor of shape [1, *{self.row_shape}], got {type(value).__name__}"
        # One transition is one row: a first dimension other than 1 is rejected before anything is written.
        return (
            f"{self.label} {verb} shape {[1, *self.row_shape]} and dtype {self.tensor.dtype}, "
            f"got shape {list(value.shape)} and dtype {value.dtype}"
        )

    def promote(self, values: Sequence[Any]) -> None:
        """Widen a scalar column (bool -> int -> float) or turn it into a list column, as ``values`` need."""
        if self.kind is None:
            return
        widest = _widest_kind(values)
        if widest is None:  # a value that is not a number: keep every value in a list
            filled = self.tensor.tolist()
            self.values = [row[0] if self.kind is float else self.kind(row[0]) for row in filled]
            self.tensor, self.kind, self.view = None, None, None
        elif _KIND_RANK[widest] > _KIND_RANK[self.kind]:
            self.kind = widest
            self.tensor, self.view = self.tensor.to(self.dtypes[widest]), None

    def target(self) -> Any:
        """What a row is written into with ``target[i] = value`` (a value as :meth:`Buffer._fit` reads it).

        The list of a list column; on the CPU a numpy view of the tensor (several times
        faster to write than torch indexing), with one leading axis per row; elsewhere the
        tensor itself.
        """
        if self.values is not None:
            return self.values
        view = self.view if self.view is not None else self._make_view()
        if self.kind is not None:
            return self.tensor if view is False else view[:, 0]
        if view is False:
            return self.tensor.unsqueeze(1)  # rows of shape [1, ...], as the values have
        return view if self.row_shape else view[:, None]

    def block(self, values: Sequence[Any], target: Any) -> Any:
        """``values`` (one per transition, as read) joined into what ``target[a:b] = block`` writes."""
        if self.values is not None:
            return list(values)
        if self.kind is not None:
            block = torch.tensor(
                values, dtype=self.tensor.dtype
            )  # (a ValueError for an int beyond int64)
        elif type(values[0]) is list:  # short rows read as lists (see _read_mode)
            block = np.array(values, dtype=target.dtype)
        elif isinstance(values[0], np.ndarray):
            block = np.concatenate(values)
        else:
            block = torch.cat(values)
        if isinstance(target, np.ndarray) and isinstance(block, torch.Tensor):
            block = block.numpy()
        return block.reshape((len(values), *target.shape[1:]))

    def gather(
        self,
        index: torch.Tensor,
        concatenate: bool,
        as_tensor: bool,
        device: Optional[torch.device],
        name: str = "",
        np_index: Optional[np.ndarray] = None,
    ):
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
        # On the CPU numpy's take gathers small rows several times faster than index_select.
        view = self.view
        if view is None:
            view = self._make_view()
        if view is False:
            block = self.tensor.index_select(0, index)
        else:
            block = torch.from_numpy(
                view.take(index.numpy() if np_index is None else np_index, axis=0)
            )
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


def _scalar_value(col: _Column, value: Any, test: int, widen: List[_Column]) -> Any:
    """``value`` to write into the scalar column ``col`` whose kind it is not of (see :meth:`Buffer._fit`).

    A narrower scalar is converted to the column's kind; a wider one, or (for a custom
    attribute) anything else, adds ``col`` to ``widen`` and is kept (a copy of it).
    """
    kind = _kind_of_type(type(value))
    if kind is None and test:  # a sub attribute
        raise ValueError(col.misfit(value))
    if kind is None or _KIND_RANK[kind] > _KIND_RANK[col.kind]:
        widen.append(col)  # written once the column is widened (see Buffer._store_blocks)
        return _own_copy(value)
    return col.kind(value)


class _Layout:
    """How :meth:`Buffer._fit` reads a transition of the stored layout, derived from the columns.

    ``names``: the major, sub and custom attribute names (a :class:`TransitionBase` must
    have exactly these); ``takes_dicts``: whether a dict can have this layout (that of a
    :class:`Transition`); ``empty_groups``: the major attributes without keys;
    ``tensors``: ``(attribute, key or None, number of keys of the attribute, column,
    shape, dtype, read, test)`` of every tensor column: the ``shape`` (``[1, ...]``) and
    torch ``dtype`` a value must have, how it is read (see :func:`_read_mode`) and the
    test of its values: 0 (none), a finite test (1: a short row read as a list, summed,
    2: one value per row, 3: any other row) or 4 (terminal flags); ``scalars``:
    ``(attribute, column, kind, test)`` of every scalar column, the test being 0 (none: a
    custom attribute), 1 (finite) or 2 (terminal flags); ``lists``: the
    attributes kept in lists. ``columns`` are in the order of a read row (tensors,
    scalars, lists) and ``targets`` are what each is written into (see
    :meth:`_Column.target`), made when first needed; ``gathers`` the plans of
    :meth:`Buffer._gather_plan`. Rebuilt whenever a column changes kind.
    """

    __slots__ = (
        "names",
        "keys",
        "width",
        "takes_dicts",
        "empty_groups",
        "tensors",
        "scalars",
        "lists",
        "columns",
        "targets",
        "gathers",
        "required",
    )

    def __init__(
        self,
        major: Dict[str, Dict[str, _Column]],
        sub: Dict[str, _Column],
        custom: Dict[str, _Column],
        on_cpu: bool,
    ):
        self.names = (list(major), list(sub), list(custom))
        self.keys = frozenset(major) | frozenset(sub) | frozenset(custom)
        self.width = len(self.keys)
        self.takes_dicts = (
            self.names[0] == _TRANSITION_MAJOR
            and self.names[1] == _TRANSITION_SUB
            and self.names[2] == sorted(custom)
        )
        self.empty_groups = [
            name for name, cols in major.items() if not cols
        ]  # (the others: key by key)
        attributes = [(name, key, col) for name, cols in major.items() for key, col in cols.items()]
        attributes += [(name, None, col) for name, col in {**sub, **custom}.items()]
        self.tensors = []
        for name, key, col in attributes:
            if col.tensor is not None and col.kind is None:
                read = _read_mode(col, on_cpu)
                width = None if key is None else len(major[name])
                self.tensors.append(
                    (
                        name,
                        key,
                        width,
                        col,
                        col.one_row,
                        col.tensor.dtype,
                        read,
                        _value_test(col, read),
                    )
                )
        self.scalars = [
            (name, col, col.kind, (2 if col.role == _TERMINAL else 1) if name in sub else 0)
            for name, _, col in attributes
            if col.kind is not None
        ]
        self.lists = [(name, col) for name, _, col in attributes if col.values is not None]
        self.columns = [entry[3] for entry in self.tensors] + [
            entry[1] for entry in self.scalars + self.lists
        ]
        self.targets: Optional[List[Any]] = None
        self.gathers: Dict[Tuple[Any, ...], Any] = {}  # see Buffer._gather_plan
        self.required: Optional[Tuple[str, ...]] = (
            None  # the last required attributes found among ``keys``
        )

    def drop_views(self) -> None:
        """Forget what holds numpy views of the columns (after a column was replaced or moved)."""
        self.targets, self.gathers = None, {}


def _read_mode(col: _Column, on_cpu: bool) -> int:
    """How :meth:`Buffer._fit` reads the values of the tensor column ``col``, as they are then written.

    On the CPU, where numpy can view the column: a short row (at most ``_SHORT_ROW``
    values in one dimension, not terminal flags) as a list of Python numbers
    (``_AS_LIST``: ``tensor.tolist()`` is cheaper than ``tensor.numpy()``, and the finite
    check needs those numbers anyway), any other row as a numpy array (``_AS_ARRAY``).
    Elsewhere as the tensor itself (``_AS_TENSOR``).
    """
    view = col._make_view() if on_cpu else False
    if view is False:
        return _AS_TENSOR
    if col.role != _TERMINAL and len(col.row_shape) == 1 and col.row_shape[0] <= _SHORT_ROW:
        return _AS_LIST
    return _AS_ARRAY


def _value_test(col: _Column, read: int) -> int:
    """How :meth:`Buffer._fit` tests the values of a tensor column read as ``read`` (see :class:`_Layout`)."""
    if col.role != _FINITE:
        return 4 if col.role == _TERMINAL else 0
    if read == _AS_LIST:
        return 1
    return 2 if not col.row_shape else 3


def _block_length(columns: Any) -> int:
    """The number of rows of the block given to :meth:`Buffer.extend_columns` (the same in every column)."""
    if not isinstance(columns, Mapping):
        raise TypeError(
            f"columns must be a mapping of attribute names to column values, got "
            f"{type(columns).__name__}"
        )
    lengths = {}
    for name, value in columns.items():
        if isinstance(value, Mapping):
            for key, rows in value.items():
                if not isinstance(rows, torch.Tensor) or rows.dim() == 0:
                    raise ValueError(
                        f"attribute {name}[{key!r}] must be a tensor of rows [n, ...], got "
                        f"{type(rows).__name__}"
                    )
                lengths[f"{name}[{key!r}]"] = rows.shape[0]
        else:
            lengths[name] = len(value)
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"every column of a block must have the same number of rows, got {lengths}"
        )
    return next(iter(lengths.values()), 0)


def _block_row(columns: Mapping[str, Any], i: int) -> Dict[str, Any]:
    """Row ``i`` of a block as a transition dict (``[1, ...]`` tensors and Python scalars)."""
    row = {}
    for name, value in columns.items():
        if isinstance(value, Mapping):
            row[name] = {key: rows[i : i + 1] for key, rows in value.items()}
        elif isinstance(value, (torch.Tensor, np.ndarray)):
            item = value[i]
            count = item.numel() if isinstance(item, torch.Tensor) else np.size(item)
            row[name] = item.reshape(-1)[0].item() if count == 1 else item
        else:
            row[name] = value[i]
    return row


def _check_finite_rows(label: str, block: torch.Tensor, n: int) -> None:
    """Raise naming the first row of ``block`` (``n`` rows) that holds a NaN or an infinity."""
    if not block.is_floating_point() or bool(torch.isfinite(block).all()):
        return
    bad = ~torch.isfinite(block.reshape(n, -1))
    row = int(bad.any(dim=1).nonzero()[0, 0])
    value = block.reshape(n, -1)[row][bad[row]][0].item()
    raise ValueError(
        f"{label} must hold finite values, got {value} in transition {row} {_CHECK_HINT}"
    )


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

    :meth:`append` stores through :meth:`extend`, so a subclass that wraps ``extend``
    (with a lock, say) wraps every store.

    Extra positional and keyword arguments are ignored with an
    :class:`~machin.utils.compat.ExtraArgumentsWarning`, as Machin 0.3.4 ignored them.

    The buffer is also a read-only sequence of its transitions, oldest first:
    ``buffer[i]`` rebuilds the ``i``-th one from the columns (slowly: use
    :meth:`sample_batch` for batches). This is what lets a sample method written for
    Machin 0.3.4, which picked transitions from a list, run unchanged.

    Not thread-safe.

    Raises:
        ValueError: If ``buffer_size`` is not a positive int, or ``buffer_device`` names
            a device this process cannot store tensors on (``"cuda"`` on a torch without
            CUDA, say).
    """

    @ignores_extra_args
    def __init__(
        self,
        buffer_size: int = 1_000_000,
        buffer_device: Union[str, torch.device] = "cpu",
        *,
        generator: Optional[torch.Generator] = None,
        check_finite: bool = True,
    ):
        if not isinstance(buffer_size, int) or isinstance(buffer_size, bool) or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive integer, got {buffer_size!r}")
        self.buffer_size = buffer_size
        self.buffer_device = _usable_device(buffer_device)
        self.generator = generator
        self.check_finite = bool(check_finite)
        self.clear()

    # -- bookkeeping ----------------------------------------------------------------
    def clear(self) -> None:
        """Remove every transition and forget the stored attribute layout.

        The next transitions may have any layout. Where they have the one stored before
        (an on-policy algorithm clearing its buffer after every update), its columns are
        used again instead of being allocated and grown anew.
        """
        layout = getattr(self, "_layout", None)
        spare = (
            (self._keys, layout, self._major, self._sub, self._custom, self._capacity)
            if layout
            else None
        )
        self._forget_layout()
        self._spare = spare

    def _forget_layout(self) -> None:
        """Empty the buffer and drop its layout and columns, keeping none for reuse."""
        self._spare: Optional[tuple] = None  # see clear()
        self._keys: Optional[List[str]] = None
        self._layout: Optional[_Layout] = None
        self._major: Dict[str, Dict[str, _Column]] = {}
        self._sub: Dict[str, _Column] = {}
        self._custom: Dict[str, _Column] = {}
        self._capacity = 0
        self._pos = 0
        self._size = 0

    def _use_layout(
        self,
        keys: List[str],
        layout: _Layout,
        major: Dict[str, Dict[str, _Column]],
        sub: Dict[str, _Column],
        custom: Dict[str, _Column],
        capacity: int,
    ) -> None:
        """Store into these columns from now on (the buffer is empty)."""
        self._keys, self._layout, self._major, self._sub, self._custom = (
            keys,
            layout,
            major,
            sub,
            custom,
        )
        self._capacity, self._pos, self._size, self._spare = capacity, 0, 0, None

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled or deep-copied numpy views would be copies, no longer views of the columns:
        # the copy makes its own. Pickling may also move the columns to shared memory
        # (torch.multiprocessing), which leaves this buffer's views behind: drop them too.
        self._forget_views()
        state = self.__dict__.copy()
        state.pop(
            "_unique_scratch", None
        )  # sampling's scratch space (see sample_method_random_unique)
        return state

    def state_dict(self) -> Dict[str, Any]:
        """The buffer's contents and counters as tensors and numbers, for an exact resume.

        Holds the filled rows of every column (in storage order), the ring position, size
        and capacity, the attribute layout and the state of ``generator``; it is read back
        with ``torch.load(..., weights_only=True)`` (no pickled objects). Custom attributes
        holding Python objects other than tensors cannot be saved (``BufferStateError``).
        """
        from .buffer_state import buffer_state

        return buffer_state(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the contents by a :meth:`state_dict`; nothing changes when it does not fit.

        Args:
            state: What :meth:`state_dict` of a buffer of this class and size returned.

        Raises:
            BufferStateError: (a ``ValueError``) When ``state`` is of another buffer class or
                size, is inconsistent, or (for a buffer that holds a layout) has other columns.
        """
        self.check_state_dict(state)
        self._load_checked_state(state)

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``BufferStateError`` unless :meth:`load_state_dict` would accept ``state``; changes nothing.

        Args:
            state: A buffer state, as :meth:`state_dict` returns it.
        """
        from .buffer_state import check_buffer_state

        check_buffer_state(self, state)

    def _load_checked_state(self, state: Mapping[str, Any]) -> None:
        """Load a state that :meth:`check_state_dict` accepted."""
        from .buffer_state import apply_buffer_state

        apply_buffer_state(self, state)

    def _forget_views(self) -> None:
        """Drop the numpy views of the columns; call it after moving a column's storage
        (e.g. ``share_memory_()``), which numpy views do not follow."""
        for layout in (self._layout, self._spare[1] if self._spare else None):
            if layout is not None:
                layout.drop_views()
                for col in layout.columns:
                    col.view = None

    def size(self) -> int:
        """Number of stored transitions."""
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def attribute_names(self) -> Optional[List[str]]:
        """Attribute names of the stored transitions (``None`` before the first append)."""
        return None if self._keys is None else list(self._keys)

    def __getitem__(
        self, position: Union[int, slice]
    ) -> Union[TransitionBase, List[TransitionBase]]:
        """The transition at ``position`` (0 is the oldest, -1 the newest), rebuilt from the columns.

        A slice gives a list. Every call gathers from every column, so this is meant for
        inspection and for sample methods written for Machin 0.3.4, not for batches.
        """
        if isinstance(position, slice):
            return self._rebuild(range(self._size)[position])
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
            raise TypeError(
                f"buffer positions must be integers or slices, got {type(position).__name__}"
            )
        p = int(position) + (self._size if position < 0 else 0)
        if not 0 <= p < self._size:
            raise IndexError(
                f"position {int(position)} is out of range for a buffer of {self._size} transitions"
            )
        return self._rebuild([p])[0]

    def _rebuild(self, positions: Sequence[int]) -> List[TransitionBase]:
        """Transitions at ``positions`` (counted from the oldest), rebuilt from the columns."""
        if len(positions) == 0:
            return []
        index = self._storage_index(torch.tensor(list(positions), dtype=torch.long)).to(
            self.buffer_device
        )
        major = {
            name: {k: c.gather(index, False, True, None) for k, c in cols.items()}
            for name, cols in self._major.items()
        }
        sub = {name: c.gather(index, False, True, None) for name, c in self._sub.items()}
        custom = {
            name: c.gather(index, False, False, None, name) for name, c in self._custom.items()
        }
        standard = (
            list(major) == ["state", "action", "next_state"]
            and list(sub) == ["reward", "terminal"]
            and list(custom) == sorted(custom)
        )
        rebuilt = []
        for i in range(len(positions)):
            major_i = {
                name: {k: rows[i] for k, rows in cols.items()} for name, cols in major.items()
            }
            sub_i = {name: rows[i] for name, rows in sub.items()}
            custom_i = {name: rows[i] for name, rows in custom.items()}
            if standard:
                rebuilt.append(Transition(**major_i, **sub_i, **custom_i))
            else:
                rebuilt.append(
                    TransitionBase(
                        list(major_i),
                        list(sub_i),
                        list(custom_i),
                        list(major_i.values()),
                        list(sub_i.values()),
                        list(custom_i.values()),
                    )
                )
        return rebuilt

    def _columns(self):
        for cols in self._major.values():
            yield from cols.values()
        yield from self._sub.values()
        yield from self._custom.values()

    # -- storing --------------------------------------------------------------------
    # One path for every transition: _fit reads its values, checking each against its column,
    # and _store writes the rows. A transition that does not fit is checked again as the
    # Transition it stands for (_fit_transition), whose own errors (a dict's) come first.
    @staticmethod
    def _as_transition(transition: Union[TransitionBase, Dict[str, Any]]) -> TransitionBase:
        return as_transition(transition)

    def _create_layout(self, t: TransitionBase) -> None:
        """Allocate the columns for transitions like ``t``; nothing is assigned if that fails."""
        cap = min(self.buffer_size, _INITIAL_CAPACITY)
        dev = self.buffer_device
        major = {
            name: {
                k: _Column(
                    v, cap, dev, False, False, f"attribute {name}[{k!r}]", _FINITE, "must have"
                )
                for k, v in getattr(t, name).items()
            }
            for name in t.major_attr
        }
        sub = {
            name: _Column(
                getattr(t, name),
                cap,
                dev,
                False,
                False,
                f"attribute {name!r}",
                _TERMINAL if name == "terminal" else _FINITE,
            )
            for name in t.sub_attr
        }
        custom = {
            name: _Column(getattr(t, name), cap, dev, True, True, f"attribute {name!r}")
            for name in t.custom_attr
        }
        self._use_layout(t.keys(), self._layout_of(major, sub, custom), major, sub, custom, cap)

    def _layout_of(
        self,
        major: Dict[str, Dict[str, _Column]],
        sub: Dict[str, _Column],
        custom: Dict[str, _Column],
    ) -> _Layout:
        return _Layout(major, sub, custom, self.buffer_device.type == "cpu")

    def _check(self, t: TransitionBase, required_attrs: Iterable[str]) -> None:
        """Raise the :class:`ValueError` that names why ``t`` cannot be stored, if it cannot."""
        keys = t.keys()
        missing = [a for a in required_attrs if a not in keys]
        if missing:
            raise ValueError(
                f"Transition object missing attributes: the transition is missing required "
                f"attribute(s) {missing}; it has {keys}"
            )
        if self._layout is not None:
            self._fit_transition(t, 0, [])

    def _fit_transition(self, t: TransitionBase, index: int, widen: List[_Column]) -> List[Any]:
        """:meth:`_fit` of the :class:`TransitionBase` ``t``, raising the error that names what does not fit."""
        if (t._major_attr, t._sub_attr, t._custom_attr) != self._layout.names:
            raise ValueError(
                f"Transition object has different attributes: {t.keys()} differ from those already "
                f"stored {self._keys}; every transition in a buffer must have the same attributes"
            )
        try:
            return self._fit(t, index, widen)
        except KeyError:  # a major attribute with other keys
            for name, cols in self._major.items():
                if getattr(t, name).keys() != cols.keys():
                    raise ValueError(
                        f"major attribute {name!r} has keys {sorted(getattr(t, name))}, but the stored "
                        f"transitions have keys {sorted(cols)}"
                    ) from None
            raise

    def _fit(self, transition: Any, index: int, widen: List[_Column]) -> List[Any]:
        """The values of ``transition`` (the ``index``-th to store), checked, as they are written.

        ``transition`` must be a dict or a :class:`TransitionBase` of exactly the stored
        attributes (a dict's are those of the :class:`Transition` it stands for), and every
        value must fit its column: a tensor of the column's shape ``[1, ...]`` and dtype, a
        real scalar (one of a wider kind adds its column to ``widen``), anything for a list
        column. Terminal flags must be bools or 0/1 and, with ``check_finite``, floating
        values of major and sub attributes must be finite. Tensors for a column on the CPU
        are read as lists of Python numbers (short rows) or numpy arrays (see
        :func:`_read_mode`). A dict's custom values are copied.

        Raises:
            ValueError: naming the attribute and the value that does not fit.
            KeyError: for other attributes or other keys of a major attribute (see
                :meth:`_fit_transition` for the message).
        """
        layout = self._layout
        if type(transition) is dict:
            if not layout.takes_dicts or len(transition) != layout.width:
                raise KeyError("attributes")
            values, own = transition, False
        elif (
            isinstance(transition, TransitionBase)
            and (transition._major_attr, transition._sub_attr, transition._custom_attr)
            == layout.names
        ):
            values, own = transition.__dict__, True
        else:
            raise KeyError("attributes")
        check = self.check_finite
        row: List[Any] = []
        total = self._fit_tensors(values, row, check)
        for name, col, kind, test in layout.scalars:
            value = values[name]
            if type(value) is not kind:
                value = _scalar_value(col, value, test, widen)
            if type(value) is int and not _INT64[0] <= value <= _INT64[1]:
                raise ValueError(f"{col.label} must fit in a 64-bit integer, got {value!r}")
            if test == 1:
                if check:
                    total += value
            elif test == 2 and value not in _BINARY:
                raise ValueError(_terminal_problem(value))
            row.append(value)
        for name, _ in layout.lists:
            row.append(values[name] if own else _own_copy(values[name]))
        if check and not math.isfinite(
            total
        ):  # a NaN or infinity somewhere, or an overflow of the sum
            self._name_non_finite(row, index)
        return row

    def _name_non_finite(self, row: List[Any], index: int) -> None:
        """Raise the error naming the first value of ``row`` (of the ``index``-th transition) that is not finite.

        (Nothing when every value is finite: their sum overflowed.)
        """
        for col, value in zip(self._layout.columns, row):
            problem = _non_finite(col.label, value, index) if col.role == _FINITE else None
            if problem:
                raise ValueError(problem)

    def _fit_tensors(self, values: Mapping[str, Any], row: List[Any], check: bool) -> float:
        """Read the major attributes' and tensor columns' values of :meth:`_fit` into ``row``; returns the sum of
        those to check."""
        layout = self._layout
        for name in layout.empty_groups:
            if type(values[name]) is not dict or values[name]:
                raise KeyError(name)
        total = 0.0
        for name, key, width, col, shape, dtype, read, test in layout.tensors:
            if key is None:
                value = values[name]
            else:
                group = values[name]
                if type(group) is not dict or len(group) != width:
                    raise KeyError(name)
                value = group[key]
            if (
                not isinstance(value, torch.Tensor)
                or value.shape != shape
                or value.dtype is not dtype
            ):
                raise ValueError(col.misfit(value))
            if read == _AS_LIST:
                written = value.tolist()[0]
                if test and check:
                    total += sum(written)
            else:
                if read == _AS_ARRAY:
                    try:
                        written = value.numpy()
                    except (TypeError, RuntimeError):  # on another device, or requires grad
                        written = value.detach().cpu().numpy()
                else:
                    written = value.detach() if value.requires_grad else value
                if test:
                    total += _tested(written, test, check)
            row.append(written)
        return total

    def _store(self, rows: List[List[Any]], widen: List[_Column]) -> List[int]:
        """Write the read ``rows``; returns their storage positions.

        One row that needs no wider column and no growth is written straight into the
        targets; anything else in whole blocks (see :meth:`_store_blocks`).
        """
        size, cap, i = self._size, self._capacity, self._pos
        if len(rows) > 1 or widen or (size == cap and cap < self.buffer_size):
            return self._store_blocks(rows, widen)
        layout = self._layout
        targets = layout.targets if layout.targets is not None else self._targets()
        for target, value in zip(targets, rows[0]):
            target[i] = value
        self._pos = i + 1 if i + 1 < cap else 0
        if size < cap:
            self._size = size + 1
        return [i]

    def _targets(self) -> List[Any]:
        layout = self._layout
        layout.targets = [col.target() for col in layout.columns]
        return layout.targets

    def _store_blocks(self, rows: List[List[Any]], widen: List[_Column]) -> List[int]:
        """Write ``rows`` column by column, widening columns and growing the storage first as needed.

        When widening, growing or writing fails, the columns and counters are put back as
        they were.
        """
        rows = rows[-self.buffer_size :]
        n, layout = len(rows), self._layout
        by_column = dict(zip(layout.columns, zip(*rows))) if rows[0] else {}
        saved = self._save_columns()
        try:
            for col in dict.fromkeys(widen):
                col.promote(by_column[col])
            if widen:
                self._layout = self._layout_of(self._major, self._sub, self._custom)
            positions, start = self._reserve(n)
            self._write_blocks(by_column, start, n)
        except BaseException:
            self._restore_columns(saved)
            raise
        return positions

    def _save_columns(self) -> Tuple[Tuple[int, int, int], List[tuple]]:
        """What :meth:`_restore_columns` needs to undo a store: the counters and every column's storage.

        Columns are only replaced (never changed in place) when they grow or are widened,
        and list columns only grow at their end, so keeping the references is enough.
        """
        saved = [
            (col, col.tensor, col.kind, col.values, None if col.values is None else len(col.values))
            for col in self._layout.columns
        ]
        return (self._pos, self._size, self._capacity), saved

    def _restore_columns(self, saved: Tuple[Tuple[int, int, int], List[tuple]]) -> None:
        """Put the counters and columns back as :meth:`_save_columns` found them."""
        counters, columns = saved
        self._pos, self._size, self._capacity = counters
        for col, tensor, kind, values, length in columns:
            col.tensor, col.kind, col.values, col.view = tensor, kind, values, None
            if values is not None:
                del values[length:]
        self._layout = self._layout_of(self._major, self._sub, self._custom)

    def _write_blocks(self, by_column: Dict[_Column, Sequence[Any]], start: int, n: int) -> None:
        """Write ``n`` rows of every column from storage row ``start`` on (wrapping around the ring)."""
        cap = self._capacity
        end = start + n
        for col, target in zip(self._layout.columns, self._targets()):
            block = col.block(by_column[col], target)
            if end <= cap:
                target[start:end] = block
            else:
                target[start:] = block[: cap - start]
                target[: end - cap] = block[cap - start :]

    def _reserve(self, n: int) -> Tuple[List[int], int]:
        """Make room for ``n`` new rows; return their storage positions and the first one."""
        start = self._make_room(n)
        cap = self._capacity
        positions = (
            list(range(start, start + n))
            if start + n <= cap
            else [(start + i) % cap for i in range(n)]
        )
        return positions, start

    def _make_room(self, n: int) -> int:
        """Count ``n`` new rows as stored (growing the columns first if needed); the storage row of the first."""
        if self._size + n > self._capacity and self._capacity < self.buffer_size:
            self._grow(min(self.buffer_size, max(2 * self._capacity, self._size + n)))
        cap, start = self._capacity, self._pos
        self._pos = (start + n) % cap
        self._size = min(self._size + n, cap)
        return start

    def _grow(self, capacity: int) -> None:
        """Reallocate every column with ``capacity`` rows (more than now, at most ``buffer_size``)."""
        for col in self._columns():
            col.grow(capacity, self._size)
        self._capacity = capacity
        self._layout.drop_views()  # the columns were replaced
        # Before the first wrap-around, rows are filled in order from 0.
        self._pos = self._size

    def reserve(self, count: int) -> None:
        """Allocate the columns for ``count`` more transitions now (``buffer_size`` at most in all).

        Storing grows the columns geometrically, copying them at each step; a caller that
        knows how much is coming (a dataset loader) allocates once instead. Changes
        nothing when the room is there already.

        Args:
            count: How many transitions will be stored after those held now.

        Raises:
            ValueError: When ``count`` is not a non-negative integer, or the buffer holds no
                layout yet (store the first transition, or block, first).
        """
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"count must be a non-negative integer, got {count!r}")
        if self._layout is None:
            raise ValueError(
                "reserve needs the columns: store a first transition (or block of them) before "
                "reserving room for more"
            )
        wanted = min(self.buffer_size, self._size + int(count))
        if wanted > self._capacity:
            self._grow(wanted)

    def append(
        self,
        transition: Union[TransitionBase, Dict[str, Any]],
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> int:
        """Store one transition (a :class:`Transition` or a dict of its attributes).

        Args:
            transition: The transition; a dict is stored as the :class:`Transition` it describes.
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

    def extend(
        self,
        transitions: Iterable[Union[TransitionBase, Dict[str, Any]]],
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> List[int]:
        """Store several transitions (e.g. a whole episode) in one write per column.

        Every transition is checked before any is written, so a bad one leaves the
        buffer unchanged. Returns the storage positions used.

        Args:
            transitions: The transitions (or dicts) to store, oldest first.
            required_attrs: Attributes every transition must have.
        """
        if type(transitions) is not list:
            transitions = list(transitions)
        if type(required_attrs) is not tuple:
            required_attrs = tuple(required_attrs)
        if not transitions:
            return []
        started = self._layout is None
        try:
            if started:
                self._start_layout(transitions[0], required_attrs)
            layout = self._layout
            if required_attrs is not layout.required:
                if not layout.keys.issuperset(
                    required_attrs
                ):  # raises, naming what is missing or different
                    self._check(self._as_transition(transitions[0]), required_attrs)
                layout.required = required_attrs
            rows, widen = [], []
            for i, transition in enumerate(transitions):
                try:
                    row = self._fit(transition, i, widen)
                except Exception:  # noqa: BLE001 (checked as the Transition it stands for, which names the problem)
                    row = self._fit_transition(self._as_transition(transition), i, widen)
                rows.append(row)
            return self._store(rows, widen)
        except BaseException:
            if started:
                self._forget_layout()  # nothing was stored: do not keep the rejected layout either
            raise

    def extend_columns(
        self,
        columns: Mapping[str, Any],
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> int:
        """Store a block of transitions given column by column: one checked write per column.

        ``columns`` maps every attribute of the stored transitions (for an empty buffer,
        those of a :class:`Transition`) to the values of all ``n`` transitions:

        * a major attribute (``state``, ``action``, ``next_state``): a dict
          ``{key: tensor[n, ...]}`` whose rows are what each transition's ``[1, ...]``
          tensor would be (the same dtype);
        * a sub attribute (``reward``, ``terminal``) or a numeric custom attribute: ``n``
          numbers, as a tensor or numpy array of shape ``[n]`` or ``[n, 1]``, or a list;
        * any other custom attribute: a list of ``n`` values.

        The checks are those of :meth:`extend`: the same attributes, keys, row shapes and
        dtypes as stored, finite floating values of the major and sub attributes (with
        ``check_finite``), terminal flags 0/1. Every column is checked before any is
        written, so a rejected block leaves the buffer as it was. As with :meth:`extend`,
        a block longer than ``buffer_size`` keeps its newest rows. Buffer classes that
        store through their own :meth:`extend` (priorities, locks) do not take blocks.

        Args:
            columns: The values of every attribute, as described above.
            required_attrs: Attributes the block must have.

        Returns:
            The number of transitions given.

        Raises:
            ValueError: Naming the attribute (and the transition) that does not fit.
            TypeError: When ``columns`` is not a mapping, or the buffer class overrides
                :meth:`extend`.
        """
        if type(self).extend is not Buffer.extend:
            raise TypeError(
                f"{type(self).__name__} stores through its own extend(), which extend_columns "
                f"would bypass; store transitions with extend() instead"
            )
        n = _block_length(columns)
        if n == 0:
            return 0
        required_attrs = tuple(required_attrs)
        started, saved = self._layout is None, None
        try:
            if started:
                self._start_layout(_block_row(columns, 0), required_attrs)
            self._check_block_names(columns, required_attrs)
            saved = self._save_columns()
            self._write_columns(self._column_blocks(columns, n), n)
        except BaseException:
            if started:
                self._forget_layout()
            elif saved is not None:
                self._restore_columns(saved)
            raise
        return n

    def _check_block_names(
        self, columns: Mapping[str, Any], required_attrs: Tuple[str, ...]
    ) -> None:
        """Raise unless the block of :meth:`extend_columns` has the stored attributes and keys."""
        missing = [name for name in required_attrs if name not in columns]
        if missing:
            raise ValueError(
                f"Transition object missing attributes: the block is missing required "
                f"attribute(s) {missing}; it has {list(columns)}"
            )
        if set(columns) != self._layout.keys:
            raise ValueError(
                f"Transition object has different attributes: the block has {sorted(columns)}, "
                f"the stored transitions have {sorted(self._keys)}"
            )
        for name, cols in self._major.items():
            group = columns[name]
            if not isinstance(group, Mapping):
                raise ValueError(
                    f"major attribute {name!r} must be a dict {{key: tensor[n, ...]}}, got "
                    f"{type(group).__name__}"
                )
            if set(group) != set(cols):
                raise ValueError(
                    f"major attribute {name!r} has keys {sorted(group)}, but the stored "
                    f"transitions have keys {sorted(cols)}"
                )

    def _keep_oldest(self, size: int) -> None:
        """Forget every row after the oldest ``size`` of a buffer whose ring never wrapped around.

        Undoes stores that came after those rows (a dataset loader that failed half way,
        see :mod:`machin.frame.offline.datasets`); ``0`` also forgets the layout.
        """
        if size == 0:
            self._forget_layout()
            return
        self._size = size
        self._pos = size % self._capacity

    def _column_blocks(self, columns: Mapping[str, Any], n: int) -> List[Tuple[_Column, Any]]:
        """``(column, rows to write)`` for every column, each checked (scalar columns widened as needed)."""
        pairs = [
            (col, columns[name][key])
            for name, cols in self._major.items()
            for key, col in cols.items()
        ]
        pairs += [(col, columns[name]) for name, col in {**self._sub, **self._custom}.items()]
        blocks, kinds = [], [(col.kind, col.values is None) for col, _ in pairs]
        for col, value in pairs:
            if col.kind is None and col.values is None:
                blocks.append((col, self._tensor_block(col, value, n)))
            else:
                blocks.append((col, self._scalar_block(col, value, n)))
        if kinds != [(col.kind, col.values is None) for col, _ in pairs]:
            self._layout = self._layout_of(self._major, self._sub, self._custom)  # a column widened
        return blocks

    def _tensor_block(self, col: _Column, value: Any, n: int) -> torch.Tensor:
        """The checked ``[n, ...]`` rows of a tensor column."""
        if (
            not isinstance(value, torch.Tensor)
            or value.dim() == 0
            or value.shape[0] != n
            or tuple(value.shape[1:]) != col.row_shape
            or value.dtype != col.tensor.dtype
        ):
            got = (
                f"shape {list(value.shape)} and dtype {value.dtype}"
                if isinstance(value, torch.Tensor)
                else type(value).__name__
            )
            raise ValueError(
                f"{col.label} must be a tensor of {n} rows of shape {list(col.row_shape)} "
                f"and dtype {col.tensor.dtype}, got {got}"
            )
        if col.role == _FINITE and self.check_finite:
            _check_finite_rows(col.label, value, n)
        return value.detach()

    def _scalar_block(self, col: _Column, value: Any, n: int) -> Any:
        """The checked rows of a scalar (or list) column: a ``[n, 1]`` tensor, or a list."""
        if isinstance(value, (list, tuple)):  # Python values: read as extend() reads them
            if col.role != _UNCHECKED and _widest_kind(value) is None:
                bad = next(v for v in value if _scalar_kind(v) is None)
                raise ValueError(col.misfit(bad))
            col.promote(value)
            if col.values is not None:
                return [_own_copy(v) for v in value]
            value = torch.tensor(value, dtype=col.tensor.dtype)
        elif col.values is not None:
            raise ValueError(f"{col.label} holds Python objects: give a list of {n} values")
        block = torch.as_tensor(value)
        if tuple(block.shape) not in ((n,), (n, 1)) or block.is_complex():
            raise ValueError(
                f"{col.label} must be {n} real numbers (shape [{n}] or [{n}, 1]), got "
                f"shape {list(block.shape)} and dtype {block.dtype}"
            )
        block = block.reshape(n, 1)
        if col.role == _TERMINAL:
            binary = (block == 0) | (block == 1)
            if not bool(binary.all()):
                row = int((~binary).nonzero()[0, 0])
                raise ValueError(f"{_terminal_problem(block[row, 0].item())} in transition {row}")
        elif col.role == _FINITE and self.check_finite:
            _check_finite_rows(col.label, block, n)
        kind = bool if block.dtype == torch.bool else float if block.is_floating_point() else int
        if _KIND_RANK[kind] > _KIND_RANK[col.kind]:
            col.promote([kind(0)])
        return block.to(col.tensor.dtype)

    def _write_columns(self, blocks: List[Tuple[_Column, Any]], n: int) -> None:
        """Write checked blocks of ``n`` rows (the newest ``buffer_size`` of them) after the stored rows."""
        if n > self.buffer_size:
            blocks = [(col, block[n - self.buffer_size :]) for col, block in blocks]
            n = self.buffer_size
        start = self._make_room(n)
        cap, end = self._capacity, start + n
        for col, block in blocks:
            target = col.values if col.values is not None else col.tensor
            if end <= cap:
                target[start:end] = block
            else:
                target[start:] = block[: cap - start]
                target[: end - cap] = block[cap - start :]

    def _start_layout(self, first: Any, required_attrs: Tuple[str, ...]) -> None:
        """Give an empty buffer the layout of its ``first`` transition.

        After :meth:`clear`, the columns of the layout stored before are used again when
        ``first`` fits them.
        """
        if self._spare is not None:
            self._use_layout(*self._spare)
            try:
                self._fit(first, 0, [])
                return
            except Exception:  # noqa: BLE001 (another layout, or a bad value: decided afresh below)
                self._forget_layout()
        first = self._as_transition(first)
        self._check(first, required_attrs)
        self._create_layout(first)

    # -- sampling -------------------------------------------------------------------
    def _randint(self, high: int, n: int) -> torch.Tensor:
        if self.generator is None:  # (torch parses a generator keyword, even None, at a cost)
            return torch.randint(high, (n,))
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
        if 16 * n <= size:  # below, a permutation of every position is the cheaper way
            # Draw with replacement and redraw the repeats until no position repeats. Writing each
            # entry's number at its position in a scratch array and reading it back marks every
            # copy of a position but one; which one depends only on where the copies are, not on
            # the positions drawn, so every ordered tuple of distinct positions stays equally likely.
            index = buffer._randint(size, n)
            values = index.numpy()  # a view: writing to it rewrites ``index``
            # The scratch (4 bytes a row) belongs to one call at a time: taking it from the buffer
            # is atomic, and a call that finds none (another thread holds it) makes its own.
            kept = getattr(buffer, "__dict__", {})
            scratch, order = kept.pop("_unique_scratch", None) or (None, None)
            if scratch is None or scratch.shape[0] < size:
                scratch = np.empty(max(size, getattr(buffer, "_capacity", size)), dtype=np.int32)
            if order is None or order.shape[0] != n:
                order = np.arange(n, dtype=np.int32)
            try:
                for _ in range(64):
                    scratch[values] = order
                    repeats = (scratch[values] != order).nonzero()[0]
                    if not repeats.size:
                        return n, index
                    values[repeats] = buffer._randint(size, repeats.size).numpy()
            finally:
                kept["_unique_scratch"] = (scratch, order)
            # Fall through to an exact permutation if rejection did not settle.
        return n, torch.randperm(size, generator=buffer.generator)[:n]

    @staticmethod
    def sample_method_random(buffer: Buffer, batch_size: int) -> Tuple[int, torch.Tensor]:
        """``batch_size`` positions drawn with replacement.

        Args:
            buffer: The buffer to sample from.
            batch_size: Number of positions.
        """
        size = buffer.size()
        if size == 0 or batch_size <= 0:
            return 0, torch.empty(0, dtype=torch.long)
        return batch_size, buffer._randint(size, batch_size)

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
        raise TypeError(
            f"sample_method must be a string or a callable, got {type(sample_method).__name__}"
        )

    def sample_batch(
        self,
        batch_size: int,
        concatenate: bool = True,
        device: Union[str, torch.device, None] = None,
        sample_method: Union[str, Callable[[Buffer, int], Tuple[int, Any]]] = "random_unique",
        sample_attrs: Optional[List[str]] = None,
        additional_concat_attrs: Optional[List[str]] = None,
        *_: Any,
        **__: Any,
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
        # The extras are taken in the signature (as ``ignores_extra_args`` would, without its
        # wrapper's call on every sample) and dropped with the same warning.
        if _ or __:
            drop_extra_args(f"{type(self).__name__}.sample_batch", _, __, 0, _SAMPLE_BATCH_KEYWORDS)
        method = self._sample_method(sample_method)
        if self._size == 0:
            return 0, None
        size, positions = method(self, batch_size)
        if size == 0:
            return 0, None
        if method not in _BUILT_IN_METHODS:
            # The built-in methods return in-range long tensors; anything else is checked.
            if (
                isinstance(positions, (list, tuple))
                and positions
                and isinstance(positions[0], TransitionBase)
            ):
                device = self.buffer_device if device is None else device
                return size, self.post_process_batch(
                    list(positions), device, concatenate, sample_attrs, additional_concat_attrs
                )
            positions = torch.as_tensor(positions, dtype=torch.long).view(-1)
            if positions.numel() and (positions.min() < 0 or positions.max() >= self._size):
                raise ValueError(
                    f"sample method returned positions outside [0, {self._size - 1}]: "
                    f"{positions.min().item()}..{positions.max().item()}"
                )
        index = self._storage_index(positions)
        return size, self._gather(index, concatenate, device, sample_attrs, additional_concat_attrs)

    def _gather(
        self, index: torch.Tensor, concatenate: bool, device, sample_attrs, additional_concat_attrs
    ):
        """Read the rows at storage positions ``index`` for the requested attributes."""
        if concatenate and device is None and not additional_concat_attrs and index.is_cpu:
            plan = self._gather_plan(self._keys if sample_attrs is None else sample_attrs)
            if plan is not None:  # the common call: one numpy ``take`` per column
                return self._gather_planned(plan, index)
        device = torch.device(device) if device is not None else None
        if sample_attrs is None:
            sample_attrs = self._keys
        concat_custom = set(additional_concat_attrs or ())
        storage_index = (
            index if index.device == self.buffer_device else index.to(self.buffer_device)
        )
        rows = storage_index.numpy() if storage_index.is_cpu else None  # once for every column
        result = []
        for name in sample_attrs:
            if name == "*":
                named = set(sample_attrs)
                result.append(
                    {
                        k: c.gather(storage_index, concatenate, k in concat_custom, device, k, rows)
                        for k, c in self._custom.items()
                        if k not in named
                    }
                )
            elif name in self._major:
                result.append(
                    {
                        k: c.gather(storage_index, concatenate, True, device, "", rows)
                        for k, c in self._major[name].items()
                    }
                )
            elif name in self._sub:
                result.append(
                    self._sub[name].gather(storage_index, concatenate, True, device, "", rows)
                )
            elif name in self._custom:
                result.append(
                    self._custom[name].gather(
                        storage_index, concatenate, name in concat_custom, device, name, rows
                    )
                )
        return tuple(result)

    def _gather_plan(self, attrs: Sequence[str]) -> Optional[List[Tuple[int, Any, Any]]]:
        """How :meth:`_gather_planned` gathers ``attrs`` concatenated, or ``None`` where a column has no numpy view.

        One ``(what, columns, extra)`` per attribute found: 0 for a major attribute
        (``columns``: its ``(key, column)`` pairs), 1 for a sub attribute (``extra``: the
        dtype to convert to, or ``None``), 2 for a custom attribute (``extra``: its name),
        3 for ``"*"`` (the ``(name, column)`` pairs of the custom attributes not named).
        Kept with the layout (for the default dtype when made) until its views are dropped.
        """
        layout = self._layout
        if layout is None or self.buffer_device.type != "cpu":
            return None
        key = (*attrs, torch.get_default_dtype())
        plan = layout.gathers.get(key)
        if plan is None:
            plan = []
            for name in attrs:
                if name in self._major:
                    plan.append((0, list(self._major[name].items()), None))
                elif name in self._sub:
                    col = self._sub[name]
                    to_default = col.kind is float and col.tensor.dtype != torch.get_default_dtype()
                    plan.append((1, col, torch.get_default_dtype() if to_default else None))
                elif name in self._custom:
                    plan.append((2, self._custom[name], name))
                elif name == "*":
                    plan.append(
                        (3, [(k, c) for k, c in self._custom.items() if k not in attrs], None)
                    )
            viewed = [
                c
                for what, cols, _ in plan
                if what < 2
                for c in ([cols] if what else [c for _, c in cols])
            ]
            if any(c.view is False or (c.view is None and c._make_view() is False) for c in viewed):
                plan = False
            layout.gathers[key] = plan
        return plan or None

    @staticmethod
    def _gather_planned(plan: List[Tuple[int, Any, Any]], index: torch.Tensor) -> Tuple[Any, ...]:
        """The concatenated sample at storage positions ``index`` gathered by ``plan`` (see :meth:`_gather_plan`)."""
        rows = index.numpy()
        from_numpy = torch.from_numpy
        result = []
        for what, cols, extra in plan:
            if what == 0:
                part = {}
                for k, c in cols:
                    part[k] = from_numpy(c.view.take(rows, axis=0))
                result.append(part)
            elif what == 1:
                block = from_numpy(cols.view.take(rows, axis=0))
                result.append(block if extra is None else block.to(extra))
            elif what == 2:
                result.append(cols.gather(index, True, False, None, extra, rows))
            else:
                result.append({k: c.gather(index, True, False, None, k, rows) for k, c in cols})
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
    def post_process_batch(
        cls,
        batch: List[TransitionBase],
        device,
        concatenate: bool,
        sample_attrs: Optional[List[str]],
        additional_concat_attrs: Optional[List[str]],
    ):
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
                result.append(
                    {
                        k: cls.make_tensor_from_batch(
                            [getattr(t, name)[k] for t in batch], device, concatenate
                        )
                        for k in getattr(first, name)
                    }
                )
            elif name in first.sub_attr:
                result.append(
                    cls.make_tensor_from_batch(
                        [getattr(t, name) for t in batch], device, concatenate
                    )
                )
            elif name in first.custom_attr:
                result.append(custom(name))
        return tuple(result)


# The keywords of Buffer.sample_batch (for the hint of its warning about ignored ones).
_SAMPLE_BATCH_KEYWORDS = frozenset(
    (
        "batch_size",
        "concatenate",
        "device",
        "sample_method",
        "sample_attrs",
        "additional_concat_attrs",
    )
)
# Functions whose positions sample_batch trusts (static methods read through an instance are these functions).
_BUILT_IN_METHODS = frozenset(
    (Buffer.sample_method_random_unique, Buffer.sample_method_random, Buffer.sample_method_all)
)
# A sequence of transitions (``buffer[i]``, ``len(buffer)``), so that ``random.sample(buffer, n)`` works.
collections.abc.Sequence.register(Buffer)
