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
import copy
import math
import numbers
import operator
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
# extend() writes longer lists of Transition objects column by column (dicts always row by row)
_ROWWISE_MAX = 32
_dtype_of = operator.attrgetter("dtype")
_INITIAL_CAPACITY = 1024
_SCALAR_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}
_BINARY = frozenset((0, 1))
_CHECK_HINT = "(values are checked when stored; check_finite=False on the buffer turns the check off)"


def _all_of_type(values: Sequence[Any], kind: type) -> bool:
    """Whether every value is exactly of type ``kind`` (a loop in C: many rows are checked at once)."""
    return not set(map(type, values)) - {kind}


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


# -- the fast storing path ---------------------------------------------------------------
# Python and numpy scalar types a scalar column of each kind takes on the fast path: exactly
# those that the full path stores unchanged (anything else, e.g. an int into a float column,
# goes the full way, which converts or promotes).
_FAST_SCALARS = {
    bool: frozenset((bool, np.bool_)),
    int: frozenset((int, np.int64)),
    float: frozenset((float, np.float64, np.float32)),
}
_INT64 = (-(2**63), 2**63 - 1)
# How the fast path checks that a floating value is finite (see _FastLayout).
_NO_CHECK, _CHECK_ROW, _CHECK_FLAT, _CHECK_BLOCK = 0, 1, 2, 3
_STANDARD_MAJOR = ["state", "action", "next_state"]
_STANDARD_SUB = ["reward", "terminal"]


def _finite_mode(column: _Column) -> int:
    """How the fast path checks the values of a tensor ``column`` (rows of one transition)."""
    if not column.tensor.is_floating_point():
        return _NO_CHECK
    if len(column.row_shape) == 1 and column.row_shape[0] <= 64:
        return _CHECK_ROW  # summing a short row of Python floats beats any numpy reduction
    return _CHECK_FLAT if not column.row_shape else _CHECK_BLOCK


def _block_is_finite(array: np.ndarray) -> bool:
    """Whether the sum of ``array`` is finite (then every element is; an overflow is left to the full path)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return math.isfinite(array.sum(dtype=np.float64))


class _FastLayout:
    """The stored layout, cached for storing transition dicts (and :class:`Transition` objects) quickly.

    Only built for a buffer on the CPU whose layout is the one a dict builds (the major
    attributes state, action, next_state; the sub attributes reward, terminal; sorted custom
    ones) and whose columns numpy can view. ``targets`` are numpy views of the columns (and
    the lists of list columns), so one row is written with one ``target[i] = value`` each.
    The buffer drops it whenever a column is replaced (growth, promotion, clear, pickling).

    The values of a transition are read in three groups, in the order of ``targets``:

    * ``tensors``: ``(attribute, number of keys, key, [1, ...] shape, numpy dtype, finite
      mode)`` for every key of every major attribute;
    * ``scalars``: ``(attribute, accepted types, is an int column, checked for being finite,
      must be 0/1)`` for every scalar sub or custom column;
    * ``others``: ``(attribute, code, spec)`` for the rest: code 0 a tensor sub attribute
      (``spec``: shape, numpy dtype, finite mode, must hold 0/1), 2 a list column.
    """

    __slots__ = ("nkeys", "keys", "custom_names", "tensors", "scalars", "others", "targets", "required",
                 "append_dict", "append_default", "row_dict", "gathers")

    def __init__(self, buffer: Buffer):
        self.keys = frozenset(buffer._keys)
        self.nkeys = len(buffer._keys)
        self.custom_names = list(buffer._custom)
        self.required = DEFAULT_REQUIRED_ATTRS if set(DEFAULT_REQUIRED_ATTRS) <= self.keys else None
        tensors, scalars, others = [], [], []
        tensor_targets, scalar_targets, other_targets = [], [], []
        for name, cols in buffer._major.items():
            for key, col in cols.items():
                view = col.tensor.numpy()  # a TypeError for dtypes numpy lacks (bfloat16)
                tensors.append((name, len(cols), key, col.one_row, view.dtype, _finite_mode(col)))
                tensor_targets.append(view if col.row_shape else view[:, None])
        for name, col, is_sub in [(n, c, True) for n, c in buffer._sub.items()] + [
                (n, c, False) for n, c in buffer._custom.items()]:
            binary = name == "terminal" and is_sub
            if col.values is not None:  # a list column (custom attributes only)
                others.append((name, 2, None))
                other_targets.append(col.values)
                continue
            view = col.tensor.numpy()
            if col.kind is None:  # a tensor sub attribute (one row per transition)
                mode = _finite_mode(col) if is_sub and not binary else _NO_CHECK
                others.append((name, 0, (col.one_row, view.dtype, mode, binary and view.dtype != np.bool_)))
                other_targets.append(view if col.row_shape else view[:, None])
            else:
                scalars.append((name, _FAST_SCALARS[col.kind], col.kind is int,
                                is_sub and not binary and col.kind is float, binary and col.kind is not bool))
                scalar_targets.append(view[:, 0])
        self.tensors, self.scalars, self.others = tuple(tensors), tuple(scalars), tuple(others)
        self.targets = tuple(tensor_targets + scalar_targets + other_targets)
        self.append_dict, self.row_dict = _dict_functions(self, buffer)
        # What a buffer offers as ``_append_dict``: dicts of this layout meet the default required attributes.
        self.append_default = self.append_dict if set(DEFAULT_REQUIRED_ATTRS) <= self.keys else None
        # Concatenated samples of a list of attributes, by (attributes, default dtype): see _gather_function.
        self.gathers: Dict[Tuple[Any, ...], Callable[[torch.Tensor, np.ndarray], Tuple[Any, ...]]] = {}


def _host_array(tensor: torch.Tensor) -> np.ndarray:
    """The values of ``tensor`` as a numpy array: a view on the CPU, a host copy of a tensor on a GPU.

    Raises for tensors numpy cannot hold (bfloat16, tensors that require grad): the full
    path stores those.
    """
    try:
        return tensor.numpy()
    except TypeError:  # on another device (a dtype numpy lacks raises again)
        return tensor.cpu().numpy()


def _host_array_lines(name: str) -> List[str]:
    """:func:`_host_array` for the variable ``name``, written out for generated code (no call on the CPU)."""
    return [f"try: {name} = {name}.numpy()", f"except TypeError: {name} = {name}.cpu().numpy()"]


def _dict_functions(plan: _FastLayout, buffer: Buffer) -> Tuple[Callable[[Buffer, Dict[str, Any]], Optional[int]],
                                                                  Callable[[Dict[str, Any], bool], Optional[tuple]]]:
    """``append(buffer, values)`` and ``row(values, check)``: a transition dict checked against ``plan``.

    The checks :meth:`Buffer._fast_row` makes of a :class:`Transition`, for a dict and unrolled
    for this one layout (the way ``dataclasses`` writes its methods): no loop over the layout,
    no intermediate list.
    ``append`` (for :meth:`Buffer.append`) does the whole append of one dict into ``buffer``, whose
    columns ``plan`` was made from: it writes the next row, moves the ring's position and size,
    and returns the row; it copies tensors on a GPU to the host. It returns ``None``, having
    written nothing, for anything the full path must see, when the columns must grow first,
    and once ``plan`` is no longer the buffer's layout (so a caller may keep it).
    ``row`` (for ``extend``) returns the values in the order of ``plan.targets``, or ``False``;
    it refuses tensors on a GPU (an episode of them is faster the full way, one host copy per
    column).
    """
    scope: Dict[str, Any] = {"Tensor": torch.Tensor, "dict": dict, "isinstance": isinstance, "copy": copy,
                             "_block_is_finite": _block_is_finite, "isfinite": math.isfinite}

    def checks(to_host: bool, fail: str) -> Tuple[str, List[str]]:
        """The indented body that checks ``values`` into ``v0, v1, ...`` (returning ``fail`` if one fails), and those names."""
        lines = [f"if len(values) != {plan.nkeys}: return False"]
        finite: List[str] = []  # expressions summed for the finite check
        blocks: List[str] = []  # arrays checked with _block_is_finite
        written: List[str] = []

        def to_array(name: str) -> List[str]:
            return _host_array_lines(name) if to_host else [f"{name} = {name}.numpy()"]

        for j, (name, nkeys, key, shape, dtype, mode) in enumerate(plan.tensors):
            scope[f"S{j}"], scope[f"D{j}"] = shape, dtype
            lines += [f"g = values[{name!r}]",
                      f"if type(g) is not dict or len(g) != {nkeys}: return False",
                      f"v{j} = g[{key!r}]",
                      f"if type(v{j}) is not Tensor: return False",
                      *to_array(f"v{j}"),
                      f"if v{j}.shape != S{j} or v{j}.dtype is not D{j}: return False"]
            if mode == _CHECK_ROW:
                finite.append(f"sum(v{j}.tolist()[0])")
            elif mode == _CHECK_FLAT:
                finite.append(f"sum(v{j}.tolist())")
            elif mode == _CHECK_BLOCK:
                blocks.append(f"v{j}")
            written.append(f"v{j}")
        for name, types, bounded, check_finite, binary in plan.scalars:
            j = len(written)
            scope[f"T{j}"] = types
            lines += [f"v{j} = values[{name!r}]", f"if type(v{j}) not in T{j}: return False"]
            if bounded:
                lines.append(f"if not {_INT64[0]} <= v{j} <= {_INT64[1]}: return False")
            if binary:
                lines.append(f"if v{j} != 0 and v{j} != 1: return False")
            if check_finite:
                finite.append(f"v{j}")
            written.append(f"v{j}")
        for name, code, spec in plan.others:
            j = len(written)
            lines.append(f"v{j} = values[{name!r}]")
            if code == 0:  # a tensor sub attribute
                shape, dtype, mode, binary = spec
                scope[f"S{j}"], scope[f"D{j}"] = shape, dtype
                lines += [f"if type(v{j}) is not Tensor: return False",
                          *to_array(f"v{j}"),
                          f"if v{j}.shape != S{j} or v{j}.dtype is not D{j}: return False"]
                if mode:
                    blocks.append(f"v{j}")
                if binary:
                    lines.append(f"if not ((v{j} == 0) | (v{j} == 1)).all(): return False")
            else:  # a list column keeps its own copy, as a Transition would
                lines.append(f"v{j} = v{j}.detach().clone() if isinstance(v{j}, Tensor) else copy.deepcopy(v{j})")
            written.append(f"v{j}")
        tests = [f"if not _block_is_finite({b}): return False" for b in blocks]
        if finite:
            tests.append(f"if not isfinite({' + '.join(finite)}): return False")
        if tests:
            lines.append("if check:")
            lines += ["    " + t for t in tests]
        return "\n".join("        " + line.replace("return False", f"return {fail}") for line in lines), written

    for j, target in enumerate(plan.targets):
        scope[f"W{j}"] = target
    scope["PLAN"] = plan
    capacity = buffer._capacity
    append_body, written = checks(to_host=True, fail="None")
    row_body, _ = checks(to_host=False, fail="False")
    writes = "\n".join(f"    W{j}[i] = {v}" for j, v in enumerate(written))
    catch = "    except Exception:  # whatever went wrong, the full path reports it properly\n        return {}\n"
    grow = "    if size == {capacity}: return None  # the columns must grow: the full path does that\n"
    source = (f"def append(buf, values):\n"
              f"    if buf._fast is not PLAN: return None  # the layout changed since\n"
              f"    i, size, check = buf._pos, buf._size, buf.check_finite\n"
              f"{grow.format(capacity=capacity) if capacity < buffer.buffer_size else ''}"
              f"    try:\n{append_body}\n{catch.format('None')}{writes}\n"
              f"    buf._pos = i + 1 if i < {capacity - 1} else 0\n"
              f"    if size < {capacity}: buf._size = size + 1\n"
              f"    return i\n\n"
              f"def row(values, check):\n    try:\n{row_body}\n{catch.format('False')}"
              f"    return ({', '.join(written)},)\n")
    exec(compile(source, f"<machin buffer layout {sorted(plan.keys)}>", "exec"), scope)
    append, row = scope["append"], scope["row"]
    append.source = row.source = source
    return append, row


def _gather_function(buffer: Buffer, sample_attrs: Sequence[str]) -> Callable[[torch.Tensor, np.ndarray], Tuple[Any, ...]]:
    """``gather(index, rows)``: what ``buffer._gather`` returns for ``sample_attrs``, concatenated.

    Written out for the buffer's present columns (see :func:`_dict_functions`): every
    column that numpy views is one ``take`` of the rows ``rows`` (the numpy form of the
    storage positions ``index``); other columns (custom ones) go through
    :meth:`_Column.gather`. The result equals that of the general path, for the default
    dtype the function was written under. The buffer drops it with its columns.
    """
    scope: Dict[str, Any] = {"from_numpy": torch.from_numpy}
    parts: List[str] = []

    def column(col: _Column, as_tensor: bool, name: str) -> str:
        j = len(scope)
        view = False if col.values is not None or not as_tensor else (
            col.view if col.view is not None else col._make_view())
        if view is False:
            scope[f"C{j}"] = col
            return f"C{j}.gather(index, True, {as_tensor}, None, {name!r}, rows)"
        scope[f"V{j}"] = view
        code = f"from_numpy(V{j}.take(rows, axis=0))"
        if col.kind is float and col.tensor.dtype != torch.get_default_dtype():
            scope[f"D{j}"] = torch.get_default_dtype()
            code += f".to(D{j})"
        return code

    named = set(sample_attrs)
    for name in sample_attrs:
        if name == "*":
            parts.append("{" + ", ".join(f"{k!r}: {column(c, False, k)}" for k, c in buffer._custom.items()
                                         if k not in named) + "}")
        elif name in buffer._major:
            parts.append("{" + ", ".join(f"{k!r}: {column(c, True, '')}" for k, c in buffer._major[name].items())
                         + "}")
        elif name in buffer._sub:
            parts.append(column(buffer._sub[name], True, ""))
        elif name in buffer._custom:
            parts.append(column(buffer._custom[name], False, name))
    source = f"def gather(index, rows):\n    return ({''.join(p + ', ' for p in parts)})\n"
    exec(compile(source, f"<machin buffer gather {list(sample_attrs)}>", "exec"), scope)
    return scope["gather"]


def _fast_path_allowed(cls: type) -> Tuple[bool, bool, bool]:
    """Whether ``cls`` may store through the fast path in ``extend``, in ``append``, and around ``append``.

    The fast path stands in for the checking and writing methods of :class:`Buffer`; a
    subclass that overrides one of them stores the full way. ``append`` also skips
    ``extend``, which it may only do where ``extend`` is the one the appending class wrote
    its fast path against (a subclass wrapping ``extend``, e.g. with a lock, keeps it).
    The third: whether the buffer may offer ``_append_dict`` (see :class:`Buffer`), which
    stands in for a call of ``append`` itself, so only where that is :meth:`Buffer.append`.
    """
    hooks = ("_as_transition", "_check", "_check_all", "_write", "_reserve", "_create_layout")
    store = all(getattr(cls, h) is getattr(Buffer, h) for h in hooks)
    owner = next(c for c in cls.__mro__ if "append" in vars(c))  # whose append runs
    append = store and vars(owner).get("_has_fast_append", False) and cls.extend is owner.extend
    return store, append, append and owner is Buffer


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

    __slots__ = ("tensor", "kind", "values", "row_shape", "one_row", "dtypes", "view")

    def __init__(self, first: Any, capacity: int, device: torch.device, allow_list: bool, exact_floats: bool):
        self.tensor, self.kind, self.values, self.row_shape, self.one_row = None, None, None, None, None
        # A numpy view of ``tensor`` for gathering on the CPU (None: not made yet, False: none);
        # reset whenever ``tensor`` is replaced.
        self.view = None
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
        return self.values is None and kind is not None and not _all_of_type(values, kind)

    def promote(self, values: Sequence[Any]) -> None:
        """Widen a scalar column (bool -> int -> float) or turn it into a list column."""
        kind = self.kind
        if self.values is not None or kind is None:
            return
        if _all_of_type(values, kind):  # the common case: nothing to do
            return
        kinds = {_scalar_kind(v) for v in values}
        if None in kinds:
            filled = self.tensor.tolist()
            self.values = [row[0] if self.kind is float else self.kind(row[0]) for row in filled]
            self.tensor, self.kind, self.view = None, None, None
            return
        order = (bool, int, float)
        widest = max(kinds | {self.kind}, key=order.index)
        if widest is not self.kind:
            self.kind = widest
            self.tensor, self.view = self.tensor.to(self.dtypes[widest]), None

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
               name: str = "", np_index: Optional[np.ndarray] = None):
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
            block = torch.from_numpy(view.take(index.numpy() if np_index is None else np_index, axis=0))
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

    For callers that append dicts one at a time (an algorithm's ``store_transition``): once
    ``append`` has stored a dict with the default required attributes, ``_append_dict`` is
    a function ``f(buffer, transition_dict)`` that does what ``append(transition_dict)``
    does for a dict of the same layout, in one call, and returns the row; for anything
    else it stores nothing and returns ``None``, and the caller calls ``append``. It is
    ``None`` where the class's ``append`` is not this one.

    Not thread-safe.
    """

    # This class's ``append`` has the fast path (see ``_fast_path_allowed``).
    _has_fast_append = True

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        cls._fast_store_ok, cls._fast_append_ok, cls._direct_append_ok = _fast_path_allowed(cls)

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
        """Remove every transition and forget the stored attribute layout.

        The next transitions may have any layout. Where they have the one stored before
        (an on-policy algorithm clearing its buffer after every update), its columns are
        used again instead of being allocated and grown anew.
        """
        keep = self._fast_store_ok and getattr(self, "_keys", None) is not None and self._fast_layout()
        spare = (self._keys, self._fast, self._major, self._sub, self._custom, self._capacity) if keep else None
        self._forget_layout()
        self._spare = spare

    def _forget_layout(self) -> None:
        """Empty the buffer and drop its layout and columns, keeping none for reuse."""
        self._spare: Optional[tuple] = None  # see clear()
        self._keys: Optional[List[str]] = None
        # The cached layout of the fast path: None until built, False where it cannot be used.
        self._fast: Union[_FastLayout, bool, None] = None
        # ``append_dict`` of a layout, offered to callers that append dicts (see the class docstring).
        self._append_dict: Optional[Callable[[Buffer, Dict[str, Any]], Optional[int]]] = None
        self._major: Dict[str, Dict[str, _Column]] = {}
        self._sub: Dict[str, _Column] = {}
        self._custom: Dict[str, _Column] = {}
        self._capacity = 0
        self._pos = 0
        self._size = 0

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled or deep-copied numpy views would be copies, no longer views of the columns:
        # the copy builds its own cache. Pickling may also move the columns to shared memory
        # (torch.multiprocessing), which leaves this buffer's views behind: drop them too.
        self._forget_views()
        state = self.__dict__.copy()
        state.pop("_unique_scratch", None)  # sampling's scratch space (see sample_method_random_unique)
        return state

    def _forget_views(self) -> None:
        """Drop the cached numpy views of the columns; call it after moving a column's storage
        (e.g. ``share_memory_()``), which numpy views do not follow."""
        self._fast = self._spare = self._append_dict = None
        for col in self._columns():
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
        self._fast = None

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
            dicts = list(map(operator.attrgetter(name), transitions))
            for key, col in cols.items():
                values = list(map(operator.itemgetter(key), dicts))
                block = values[0] if n == 1 else torch.cat(values)
                if check:
                    problem = _tensor_problem((name, key), block)
                    if problem:
                        raise ValueError(problem)
                major.append((col, values, block))
        sub = [(name, col, list(map(operator.attrgetter(name), transitions))) for name, col in self._sub.items()]
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
        scalar_like += [(col, list(map(operator.attrgetter(name), transitions))) for name, col in self._custom.items()]
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
                col.tensor, col.kind, col.values, col.view = tensor, kind, values, None
                if values is not None:
                    del values[length:]
            self._fast = None
            raise
        if saved is not None:
            self._fast = None  # columns were replaced: the cached views are stale
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
        if self._fast_append_ok:
            position = self._append_fast(transition, required_attrs)
            if position is not None:
                return position
        position = self.extend([transition], required_attrs)[0]
        if self._direct_append_ok and type(transition) is dict:  # the layout is known now: offer its function
            plan = self._fast_layout()
            self._append_dict = plan.append_default if plan else None
        return position

    def extend(self, transitions: Iterable[Union[TransitionBase, Dict[str, Any]]],
               required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS) -> List[int]:
        """Store several transitions (e.g. a whole episode) in one write per column.

        Every transition is checked before any is written, so a bad one leaves the
        buffer unchanged. Returns the storage positions used.

        Args:
            transitions: The transitions (or dicts) to store, oldest first.
            required_attrs: Attributes every transition must have.
        """
        transitions, required_attrs = list(transitions), tuple(required_attrs)
        revived = False
        if self._fast_store_ok and transitions:
            if self._keys is None and self._spare is not None:
                # empty after clear(): first try the columns of the layout stored before
                self._keys, self._fast, self._major, self._sub, self._custom, self._capacity = self._spare
                self._spare, revived = None, True
            # Row by row for dicts and short episodes; long episodes of Transition objects
            # are checked and written faster column by column.
            if self._keys is not None and (len(transitions) <= _ROWWISE_MAX or type(transitions[0]) is not Transition):
                positions = self._extend_fast(transitions, required_attrs)
                if positions is not None:
                    return positions
        ts = [self._as_transition(t) for t in transitions]
        if revived:
            try:
                self._check_all(ts, required_attrs)
                return self._write(ts)
            except ValueError:  # not that layout (or a bad value): the fresh layout's path decides
                self._forget_layout()
            except BaseException:
                self._forget_layout()
                raise
        if not ts:
            return []
        if self._keys is None:
            self._check(ts[0], required_attrs)
            self._create_layout(ts[0])
            try:
                self._check_all(ts, required_attrs)
                return self._write(ts)
            except BaseException:
                self._forget_layout()  # nothing was stored: do not keep the rejected layout either
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
        # Whole columns at a time: map() and set() loop in C, far faster than a generator per row.
        for name, cols in self._major.items():
            dicts = list(map(operator.attrgetter(name), ts))
            try:
                if set(map(len, dicts)) != {len(cols)}:
                    return False
                for key, col in cols.items():
                    values = list(map(operator.itemgetter(key), dicts))
                    if (set(map(type, values)) != {torch.Tensor} or set(map(torch.Tensor.size, values)) != {col.one_row}
                            or set(map(_dtype_of, values)) != {col.tensor.dtype}):
                        return False
            except (KeyError, TypeError):  # a row without the key, or not a dict
                return False
        for name, col in self._sub.items():
            values = [getattr(t, name) for t in ts]
            if col.kind is not None:
                if set(map(type, values)) != {col.kind}:
                    return False
            elif any(not isinstance(v, torch.Tensor) or (v.shape, v.dtype) != (col.one_row, col.tensor.dtype)
                     for v in values):
                return False
        return True

    # -- the fast path ----------------------------------------------------------------
    # Transitions of the stored layout (dicts, or Transition objects) are checked and written
    # here with as few Python operations as possible: no Transition is built, and each value
    # is written through a numpy view of its column. Whatever does not fit the cached layout
    # exactly, and every value the full path would reject or convert, declines the fast path
    # before anything is written; the full path then stores it or raises its documented error.
    def _fast_layout(self) -> Union[_FastLayout, bool]:
        """The cached layout, built on first use after the columns changed (``False``: none)."""
        plan = self._fast
        if plan is None:
            if self._keys is None:
                return False  # nothing stored yet: the first transition goes the full way
            plan = False
            if (self.buffer_device.type == "cpu"
                    and list(self._major) == _STANDARD_MAJOR and list(self._sub) == _STANDARD_SUB
                    and list(self._custom) == sorted(self._custom)):
                try:
                    plan = _FastLayout(self)
                except TypeError:  # a dtype numpy cannot view
                    plan = False
            self._fast = plan
        return plan

    @staticmethod
    def _fast_required(plan: _FastLayout, required_attrs: Iterable[str]) -> bool:
        """Whether the stored layout has every required attribute (a tuple that has is remembered).

        Anything but a tuple or a list (an iterator could be read only once) declines.
        """
        keys = plan.keys
        if type(required_attrs) is not tuple and type(required_attrs) is not list:
            return False
        if not all(a in keys for a in required_attrs):
            return False
        if type(required_attrs) is tuple:
            plan.required = required_attrs
        return True

    def _fast_row(self, plan: _FastLayout, transition: Any, check: bool, to_host: bool = False) -> Optional[list]:
        """The values of a :class:`Transition` in the order of ``plan.targets``, or ``None`` for the full path.

        (Dicts are checked by the layout's generated ``append_dict`` and ``row_dict``.) ``to_host``
        takes tensors on a GPU too, each copied to the host on its own: right for one
        transition; an episode of them is faster the full way (one copy per column).
        """
        numpy = _host_array if to_host else torch.Tensor.numpy
        if type(transition) is not Transition or transition._custom_attr != plan.custom_names:
            return None
        values = transition.__dict__  # a Transition holds its own copies of custom values
        row = []
        total = 0.0  # the sum of every checked floating value: finite iff each one is
        try:
            for name, nkeys, key, shape, dtype, mode in plan.tensors:
                group = values[name]
                if type(group) is not dict or len(group) != nkeys:
                    return None
                array = group[key]
                if type(array) is not torch.Tensor:
                    return None
                array = numpy(array)  # raises for tensors that require grad (on a GPU: without to_host)
                if array.shape != shape or array.dtype is not dtype:
                    return None
                if mode and check:
                    if mode == _CHECK_ROW:
                        total += sum(array.tolist()[0])
                    elif mode == _CHECK_FLAT:
                        total += sum(array.tolist())
                    elif not _block_is_finite(array):
                        return None
                row.append(array)
            for name, types, bounded, finite, binary in plan.scalars:
                value = values[name]
                if type(value) not in types:
                    return None
                if bounded and not _INT64[0] <= value <= _INT64[1]:
                    return None
                if finite and check:
                    total += value
                if binary and value != 0 and value != 1:
                    return None
                row.append(value)
            for name, code, spec in plan.others:
                value = values[name]
                if code == 0:  # a tensor sub attribute
                    shape, dtype, mode, binary = spec
                    if type(value) is not torch.Tensor:
                        return None
                    value = numpy(value)
                    if value.shape != shape or value.dtype is not dtype:
                        return None
                    if mode and check and not _block_is_finite(value):
                        return None
                    if binary and not ((value == 0) | (value == 1)).all():
                        return None
                row.append(value)
        except Exception:  # whatever went wrong, the full path reports it properly
            return None
        if check and not math.isfinite(total):
            return None  # the full path finds the value and names it
        return row

    def _append_fast(self, transition: Any, required_attrs: Iterable[str]) -> Optional[int]:
        """Store one transition through the cached layout; ``None`` (nothing changed) if it does not fit."""
        plan = self._fast
        if not plan:
            if plan is False:
                return None
            plan = self._fast_layout()
            if not plan:
                return None
        if required_attrs is not plan.required and not self._fast_required(plan, required_attrs):
            return None
        if type(transition) is dict:
            position = plan.append_dict(self, transition)
            if position is not None and self._direct_append_ok:
                self._append_dict = plan.append_default  # (again) after a new layout or clear()
            return position
        size, cap = self._size, self._capacity
        if size == cap and cap < self.buffer_size:
            return None  # the columns must grow: the full path does that
        i = self._pos
        row = self._fast_row(plan, transition, self.check_finite, True)
        if row is None:
            return None
        for target, value in zip(plan.targets, row):
            target[i] = value
        self._pos = i + 1 if i + 1 < cap else 0
        if size < cap:
            self._size = size + 1
        return i

    def _extend_fast(self, transitions: List[Any], required_attrs: Tuple[str, ...]) -> Optional[List[int]]:
        """Store several transitions through the cached layout; ``None`` (nothing changed) if one does not fit."""
        plan = self._fast_layout()
        if not plan or (required_attrs is not plan.required and not self._fast_required(plan, required_attrs)):
            return None
        if self._size + min(len(transitions), self.buffer_size) > self._capacity and self._capacity < self.buffer_size:
            return None  # the columns must grow first: the full path does that
        check, row_dict = self.check_finite, plan.row_dict
        rows = []
        for transition in transitions:
            row = row_dict(transition, check) if type(transition) is dict else self._fast_row(plan, transition, check)
            if not row:
                return None
            rows.append(row)
        rows = rows[-self.buffer_size:]
        n, size, cap = len(rows), self._size, self._capacity
        if n == 0 or (size + n > cap and cap < self.buffer_size):
            return None
        blocks = []  # every block is built before the first write, so a failure changes nothing
        for j, target in enumerate(plan.targets):
            values = [row[j] for row in rows]
            if isinstance(values[0], np.ndarray):
                blocks.append(np.concatenate(values).reshape((n, *target.shape[1:])))
            else:
                blocks.append(values)
        start, end = self._pos, self._pos + n
        for target, block in zip(plan.targets, blocks):
            if end <= cap:
                target[start:end] = block
            else:
                target[start:] = block[:cap - start]
                target[:end - cap] = block[cap - start:]
        self._pos = end % cap
        self._size = min(size + n, cap)
        return list(range(start, end)) if end <= cap else [(start + i) % cap for i in range(n)]

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
        if concatenate and not additional_concat_attrs and (
                device is None or torch.device(device) == self.buffer_device):
            plan = self._fast if self._fast is not None else self._fast_layout()
            if plan and index.is_cpu:  # the common call: one generated function gathers every column
                attrs = self._keys if sample_attrs is None else sample_attrs
                key = (*attrs, torch.get_default_dtype())
                gather = plan.gathers.get(key)
                if gather is None:
                    gather = plan.gathers[key] = _gather_function(self, attrs)
                return gather(index, index.numpy())
        device = torch.device(device) if device is not None else None
        if sample_attrs is None:
            sample_attrs = self._keys
        concat_custom = set(additional_concat_attrs or ())
        storage_index = index if index.device == self.buffer_device else index.to(self.buffer_device)
        rows = storage_index.numpy() if storage_index.is_cpu else None  # once for every column
        result = []
        for name in sample_attrs:
            if name == "*":
                named = set(sample_attrs)
                result.append({
                    k: c.gather(storage_index, concatenate, k in concat_custom, device, k, rows)
                    for k, c in self._custom.items() if k not in named
                })
            elif name in self._major:
                result.append({
                    k: c.gather(storage_index, concatenate, True, device, "", rows)
                    for k, c in self._major[name].items()
                })
            elif name in self._sub:
                result.append(self._sub[name].gather(storage_index, concatenate, True, device, "", rows))
            elif name in self._custom:
                result.append(self._custom[name].gather(
                    storage_index, concatenate, name in concat_custom, device, name, rows))
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


Buffer._fast_store_ok, Buffer._fast_append_ok, Buffer._direct_append_ok = _fast_path_allowed(Buffer)
# Functions whose positions sample_batch trusts (static methods read through an instance are these functions).
_BUILT_IN_METHODS = frozenset(
    (Buffer.sample_method_random_unique, Buffer.sample_method_random, Buffer.sample_method_all)
)
# A sequence of transitions (``buffer[i]``, ``len(buffer)``), so that ``random.sample(buffer, n)`` works.
collections.abc.Sequence.register(Buffer)
