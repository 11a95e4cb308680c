"""The contents of a buffer as a mapping of tensors, and back (for an exact resume of a run).

:meth:`Buffer.state_dict <machin.frame.buffers.buffer.Buffer.state_dict>` uses
:func:`buffer_state`, :meth:`Buffer.load_state_dict
<machin.frame.buffers.buffer.Buffer.load_state_dict>` uses :func:`check_buffer_state` then
:func:`apply_buffer_state`. A state holds the filled rows of every column in storage order,
the ring position, size and capacity, and the layout (the attribute names, in order, and
each column's kind), all as tensors, numbers and strings that
``torch.load(..., weights_only=True)`` reads back.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import torch

from ..transition import Transition, TransitionBase

__all__ = ["BufferStateError", "buffer_state", "check_buffer_state", "apply_buffer_state"]

_KIND_NAMES = {bool: "bool", int: "int", float: "float"}
_KIND_OF_NAME = {name: kind for kind, name in _KIND_NAMES.items()}


class BufferStateError(ValueError):
    """A buffer state that does not fit the buffer (other columns, shapes or class) or is damaged."""


def _exact(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the CPU, in a storage of just its own elements, sharing its memory where it can.

    ``torch.save`` writes the whole storage of a tensor, so a slice of a column would be written
    with every row of the column. A numpy view of a contiguous slice, wrapped back into a
    tensor, has a storage of exactly the slice and shares the column's memory: saving a large
    buffer then needs no second copy of it. Dtypes numpy lacks (``bfloat16``) and other
    layouts are copied.
    """
    tensor = tensor.detach().cpu()  # a column on a GPU is copied here, its filled rows only
    if tensor.layout != torch.strided:  # (sparse rows of a list column have no single storage)
        return tensor.clone()
    if tensor.storage_offset() == 0 and tensor.untyped_storage().nbytes() == tensor.nbytes:
        return tensor
    if tensor.is_contiguous():
        try:
            return torch.from_numpy(tensor.numpy())
        except (TypeError, RuntimeError):  # a dtype numpy lacks, or a conjugate / negative view
            pass
    return tensor.clone()


def _column_state(label: str, col: Any, size: int) -> Dict[str, Any]:
    """The filled rows of one column, with its kind; the rows share the column's memory (see :func:`_exact`)."""
    if col.values is not None:
        rows = col.values[:size]
        if not all(isinstance(row, torch.Tensor) for row in rows):
            bad = next(type(row).__name__ for row in rows if not isinstance(row, torch.Tensor))
            raise BufferStateError(
                f"column {label} holds Python objects ({bad}), which a buffer state "
                f"cannot store as tensors"
            )
        return {"kind": "list", "rows": [_exact(row) for row in rows]}
    kind = "tensor" if col.kind is None else _KIND_NAMES[col.kind]
    return {"kind": kind, "rows": _exact(col.tensor[:size])}


def _layout_columns(buffer: Any) -> Dict[str, Dict[str, Any]]:
    """``{"major": {group: {key: column}}, "sub": {...}, "custom": {...}}`` of a buffer."""
    return {"major": buffer._major, "sub": buffer._sub, "custom": buffer._custom}


def buffer_state(buffer: Any) -> Dict[str, Any]:
    """The state of ``buffer`` (see the module docstring).

    Like a module's ``state_dict``, the state shares the buffer's memory (its rows are not
    copied, so saving a large buffer does not double the memory it takes): save it, or copy
    it, before the buffer changes again.

    Args:
        buffer: The buffer.
    """
    size = buffer._size
    state: Dict[str, Any] = {
        "class": type(buffer).__name__,
        "buffer_size": buffer.buffer_size,
        "pos": buffer._pos,
        "size": size,
        "capacity": buffer._capacity,
        "layout": None,
        "generator": buffer.generator.get_state()
        if isinstance(buffer.generator, torch.Generator)
        else None,
    }
    if buffer._layout is not None:
        state["layout"] = {
            "major": {
                group: {
                    key: _column_state(f"{group}[{key!r}]", col, size) for key, col in cols.items()
                }
                for group, cols in buffer._major.items()
            },
            "sub": {
                name: _column_state(repr(name), col, size) for name, col in buffer._sub.items()
            },
            "custom": {
                name: _column_state(repr(name), col, size) for name, col in buffer._custom.items()
            },
        }
    return state


def _signature(layout: Mapping[str, Any]) -> Dict[str, Any]:
    """Column names (in order) and kinds of a saved layout, for comparison and messages."""
    major = {
        group: [(key, col["kind"]) for key, col in cols.items()]
        for group, cols in layout["major"].items()
    }
    return {
        "major": major,
        "sub": [(k, c["kind"]) for k, c in layout["sub"].items()],
        "custom": [(k, c["kind"]) for k, c in layout["custom"].items()],
    }


def _current_signature(buffer: Any) -> Optional[Dict[str, Any]]:
    """The signature of the columns ``buffer`` holds (``None``: it has no layout)."""
    if buffer._layout is None:
        return None

    def kind(col: Any) -> str:
        return (
            "list"
            if col.values is not None
            else ("tensor" if col.kind is None else _KIND_NAMES[col.kind])
        )

    return {
        "major": {g: [(k, kind(c)) for k, c in cols.items()] for g, cols in buffer._major.items()},
        "sub": [(k, kind(c)) for k, c in buffer._sub.items()],
        "custom": [(k, kind(c)) for k, c in buffer._custom.items()],
    }


def _check_rows(label: str, col: Mapping[str, Any], size: int) -> None:
    """Raise unless the saved column has a known kind and ``size`` rows."""
    kind, rows = col.get("kind"), col.get("rows")
    if kind not in ("tensor", "list", *_KIND_OF_NAME):
        raise BufferStateError(f"column {label} has an unknown kind {kind!r}")
    count = len(rows) if isinstance(rows, (list, torch.Tensor)) else None
    if count != size:
        raise BufferStateError(f"column {label} holds {count} rows, but the state's size is {size}")
    if kind in _KIND_OF_NAME and (
        not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[1] != 1
    ):
        raise BufferStateError(f"scalar column {label} must be a tensor of shape [{size}, 1]")


def check_buffer_state(buffer: Any, state: Any) -> None:
    """Raise :class:`BufferStateError` unless ``state`` can be loaded into ``buffer``; change nothing.

    Args:
        buffer: The buffer.
        state: What :func:`buffer_state` returned.
    """
    if not isinstance(state, Mapping):
        raise BufferStateError(f"a buffer state must be a mapping, got {type(state).__name__}")
    if state.get("class") != type(buffer).__name__:
        raise BufferStateError(
            f"the state is of a {state.get('class')}, the buffer is a {type(buffer).__name__}"
        )
    if state.get("buffer_size") != buffer.buffer_size:
        raise BufferStateError(
            f"the state has buffer_size={state.get('buffer_size')!r}, "
            f"the buffer has buffer_size={buffer.buffer_size}"
        )
    size, pos, capacity = state.get("size"), state.get("pos"), state.get("capacity")
    if (
        not all(isinstance(v, int) for v in (size, pos, capacity))
        or not 0 <= size <= capacity <= buffer.buffer_size
        or not 0 <= pos <= max(capacity - 1, 0)
    ):
        raise BufferStateError(
            f"the state's ring counters are invalid: size={size!r}, pos={pos!r}, "
            f"capacity={capacity!r} (buffer_size {buffer.buffer_size})"
        )
    layout = state.get("layout")
    if layout is None:
        return
    for group, cols in layout["major"].items():
        for key, col in cols.items():
            _check_rows(f"{group}[{key!r}]", col, size)
    for part in ("sub", "custom"):
        for name, col in layout[part].items():
            _check_rows(repr(name), col, size)
    current = _current_signature(buffer)
    if current is not None and current != _signature(layout):
        raise BufferStateError(
            f"the state's buffer has other columns than this buffer: saved {_signature(layout)}, "
            f"this buffer holds {current}"
        )


def _first_row(col: Mapping[str, Any]) -> Any:
    """The first saved value of a column, in the form it was stored (a row tensor or a Python scalar)."""
    rows = col["rows"]
    if col["kind"] == "tensor":
        return rows[0:1]
    if col["kind"] == "list":
        return rows[0]
    return _KIND_OF_NAME[col["kind"]](rows[0, 0].item())


def _first_transition(layout: Mapping[str, Any]) -> TransitionBase:
    """A transition with the first saved row of every column (it gives the buffer its layout)."""
    major = {
        group: {key: _first_row(col) for key, col in cols.items()}
        for group, cols in layout["major"].items()
    }
    sub = {name: _first_row(col) for name, col in layout["sub"].items()}
    custom = {name: _first_row(col) for name, col in layout["custom"].items()}
    if (
        list(major) == ["state", "action", "next_state"]
        and list(sub) == ["reward", "terminal"]
        and list(custom) == sorted(custom)
    ):
        return Transition(**major, **sub, **custom)
    return TransitionBase(
        list(major),
        list(sub),
        list(custom),
        list(major.values()),
        list(sub.values()),
        list(custom.values()),
    )


def _fill(label: str, col: Any, saved: Mapping[str, Any], size: int) -> None:
    """Copy the saved rows into a column allocated for them."""
    if col.values is not None:
        col.values[:size] = list(saved["rows"])
        return
    rows = saved["rows"]
    if rows.dtype != col.tensor.dtype or tuple(rows.shape[1:]) != tuple(col.tensor.shape[1:]):
        raise BufferStateError(
            f"column {label} was saved as {rows.dtype} rows of shape {list(rows.shape[1:])}, "
            f"the buffer stores {col.tensor.dtype} rows of shape {list(col.tensor.shape[1:])}"
        )
    col.tensor[:size].copy_(rows)
    col.view = None


def _columns_with_states(buffer: Any, layout: Mapping[str, Any]) -> List[tuple]:
    """``(label, column, saved column)`` for every column."""
    pairs = [
        (f"{g}[{k!r}]", buffer._major[g][k], c)
        for g, cols in layout["major"].items()
        for k, c in cols.items()
    ]
    for part in ("sub", "custom"):
        pairs += [
            (repr(name), getattr(buffer, f"_{part}")[name], c) for name, c in layout[part].items()
        ]
    return pairs


def apply_buffer_state(buffer: Any, state: Mapping[str, Any]) -> None:
    """Replace the contents of ``buffer`` by ``state`` (checked with :func:`check_buffer_state` first).

    A failure leaves the buffer as it was.

    Args:
        buffer: The buffer.
        state: What :func:`buffer_state` returned.
    """
    before = dict(buffer.__dict__)
    try:
        _apply(buffer, state)
    except BaseException:
        buffer.__dict__.clear()
        buffer.__dict__.update(before)
        raise
    if isinstance(buffer.generator, torch.Generator) and state["generator"] is not None:
        buffer.generator.set_state(state["generator"])


def _apply(buffer: Any, state: Mapping[str, Any]) -> None:
    buffer._forget_layout()
    layout = state["layout"]
    if layout is None or state["size"] == 0:
        return
    size, capacity = state["size"], state["capacity"]
    buffer._create_layout(_first_transition(layout))
    for _, col, _ in _columns_with_states(buffer, layout):
        if col.values is not None or col.tensor.shape[0] != capacity:
            col.grow(capacity, 0)
    for label, col, saved in _columns_with_states(buffer, layout):
        _fill(label, col, saved, size)
    buffer._capacity, buffer._pos, buffer._size = capacity, state["pos"], size
    buffer._layout = buffer._layout_of(buffer._major, buffer._sub, buffer._custom)


# -- prioritized buffers: the weight tree, curr_beta and the numpy generator ----------------
_TREE_ARRAYS = ("_tree", "_block_max", "_dirty")


def priority_state(buffer: Any) -> Dict[str, Any]:
    """The weight tree (every node, so sums come back with the same rounding, sharing the
    tree's memory like :func:`buffer_state`), ``curr_beta`` and the state of the buffer's
    numpy generator.

    Args:
        buffer: A prioritized buffer.
    """
    tree = buffer.wt_tree
    rng = buffer.rng.bit_generator.state if buffer.rng is not None else None
    return {
        "tree": {
            **{name: _exact(torch.from_numpy(getattr(tree, name))) for name in _TREE_ARRAYS},
            "any_dirty": tree._any_dirty,
            "max": tree._max,
            "updates": tree._updates,
        },
        "curr_beta": buffer.curr_beta,
        "rng": _plain(rng),
    }


def _plain(value: Any) -> Any:
    """A numpy generator state with its (possibly 128-bit) integers as strings."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _unplain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _unplain(item) for key, item in value.items()}
    return int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else value


def check_priority_state(buffer: Any, state: Mapping[str, Any]) -> None:
    """Raise :class:`BufferStateError` unless the weight tree of ``state`` fits ``buffer``.

    Args:
        buffer: A prioritized buffer.
        state: What :func:`priority_state` returned.
    """
    tree = state.get("tree")
    if not isinstance(tree, Mapping):
        raise BufferStateError("the state of a prioritized buffer has no weight tree")
    for name in _TREE_ARRAYS:
        mine, saved = getattr(buffer.wt_tree, name), tree.get(name)
        if not isinstance(saved, torch.Tensor) or tuple(saved.shape) != mine.shape:
            shape = list(saved.shape) if isinstance(saved, torch.Tensor) else type(saved).__name__
            raise BufferStateError(
                f"weight tree array {name} has shape {shape} in the state, "
                f"{list(mine.shape)} in the buffer"
            )
    if (state.get("rng") is None) != (buffer.rng is None):
        raise BufferStateError("the state and the buffer differ in having a numpy generator")


def apply_priority_state(buffer: Any, state: Mapping[str, Any]) -> None:
    """Load a checked priority state into a prioritized buffer.

    Args:
        buffer: The buffer.
        state: What :func:`priority_state` returned, accepted by :func:`check_priority_state`.
    """
    tree, saved = buffer.wt_tree, state["tree"]
    for name in _TREE_ARRAYS:
        getattr(tree, name)[...] = saved[name].numpy()
    tree._any_dirty, tree._max, tree._updates = saved["any_dirty"], saved["max"], saved["updates"]
    buffer.curr_beta = state["curr_beta"]
    if buffer.rng is not None:
        buffer.rng.bit_generator.state = _unplain(state["rng"])
