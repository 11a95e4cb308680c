"""Offline data into machin buffers: Minari datasets, episode dicts, and the experience of machin runs.

Every loader checks each episode completely (keys, lengths, spaces, finite numbers)
before it writes it, writes it in one block per column
(:meth:`~machin.frame.buffers.buffer.Buffer.extend_columns`), and on any error puts the
buffer back as it was: a dataset is loaded whole or not at all. Errors are
:class:`DatasetError` (a ``ValueError``) naming the dataset, the episode and the key.

The transitions have the layout the machin algorithms read: ``state`` and
``next_state`` as ``{state_key: tensor[1, ...]}``, ``action`` as ``{action_key:
tensor[1, ...]}`` (a ``Discrete`` action as an int64 index ``[1, 1]`` counted from the
space's ``start``), ``reward`` and ``terminal`` (the episode *terminated* at that step; a
truncated episode's last transition is not terminal, so its value is bootstrapped).
Observations and ``Box`` actions are stored in torch's default dtype.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Tuple, Union

import gymnasium as gym
import numpy as np
import torch

from ..algorithms.run_state import FORMAT, read_run_state, write_run_state
from ..buffers import Buffer

__all__ = [
    "DatasetError",
    "EPISODE_KEYS",
    "load_minari",
    "load_episodes",
    "save_experience",
    "load_experience",
]

#: The keys every episode must have (those of a Minari episode).
EPISODE_KEYS = ("observations", "actions", "rewards", "terminations", "truncations")
_EXPERIENCE_CLASS = "experience"  # the "class" of a file written by save_experience


class DatasetError(ValueError):
    """Data that cannot be loaded; the message names the dataset, the episode and the key."""


# -- spaces -------------------------------------------------------------------------------
class _SpaceRows:
    """Checks and converts the rows of one space (observations or actions) of a dataset."""

    def __init__(self, dataset: str, what: str, space: gym.Space):
        if not isinstance(
            space,
            (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary),
        ):
            raise DatasetError(
                f"dataset {dataset!r}: its {what} space {space} is not supported (machin loads "
                f"Box, Discrete, MultiDiscrete and MultiBinary spaces)"
            )
        self.space = space
        self.what = what
        discrete = isinstance(space, gym.spaces.Discrete)
        self.row_shape = (1,) if discrete else tuple(space.shape)

    def _shape_ok(self, array: np.ndarray, length: int) -> bool:
        if isinstance(self.space, gym.spaces.Discrete):
            return array.shape in ((length,), (length, 1))
        return array.shape == (length, *self.row_shape)

    def convert(self, value: Any, length: int, where: str) -> torch.Tensor:
        """The rows as a tensor ``[length, ...]``, after checking them against the space."""
        array = np.asarray(value)
        if array.dtype.kind not in "biuf" or not self._shape_ok(array, length):
            raise DatasetError(
                f"{where}: expected {length} rows of shape {list(self.row_shape)} for the "
                f"{self.what} space {self.space}, got an array of shape {list(array.shape)} and "
                f"dtype {array.dtype}"
            )
        if array.dtype.kind == "f":
            _check_finite(array, where)
        space = self.space
        if isinstance(space, gym.spaces.Box):
            return torch.as_tensor(array).to(torch.get_default_dtype())
        if isinstance(space, gym.spaces.MultiBinary):
            self._check_range(array, 0, 2, where)
            return torch.as_tensor(array).to(torch.get_default_dtype())
        if isinstance(space, gym.spaces.Discrete):
            low, high = int(space.start), int(space.start) + int(space.n)
        else:
            low, high = space.start, space.start + space.nvec
        self._check_range(array, low, high, where)
        rows = torch.as_tensor(array.astype(np.int64) - np.asarray(low, dtype=np.int64))
        return rows.reshape(length, *self.row_shape)

    def _check_range(self, array: np.ndarray, low: Any, high: Any, where: str) -> None:
        """Raise unless every value is an integer in ``[low, high)``."""
        inside = (array >= low) & (array < high) & (np.floor(array) == array)
        if not inside.all():
            step = int(np.argwhere(~inside)[0][0])
            raise DatasetError(
                f"{where}: step {step} holds {array[step].tolist()}, which is not in the "
                f"{self.what} space {self.space}"
            )


def _check_finite(array: np.ndarray, where: str) -> None:
    """Raise naming the first step of ``array`` that holds a NaN or an infinity."""
    finite = np.isfinite(array)
    if not finite.all():
        step = int(np.argwhere(~finite)[0][0])
        raise DatasetError(f"{where}: step {step} holds a NaN or infinite value")


def _check_spaces(dataset: str, given: Optional[gym.Space], recorded: gym.Space, what: str) -> None:
    if given is not None and given != recorded:
        raise DatasetError(
            f"dataset {dataset!r} was recorded with the {what} space {recorded}, but "
            f"{what}_space={given} was given"
        )


# -- one episode --------------------------------------------------------------------------
def _field(episode: Any, key: str) -> Any:
    """``episode[key]`` of a mapping or ``episode.key`` of an object (``None`` when it has none)."""
    if isinstance(episode, Mapping):
        return episode.get(key)
    return getattr(episode, key, None)


def _flags(value: Any, length: int, where: str) -> torch.Tensor:
    """Terminated / truncated flags: ``length`` values that are 0 or 1."""
    array = np.asarray(value)
    if array.shape not in ((length,), (length, 1)) or array.dtype.kind not in "biuf":
        raise DatasetError(
            f"{where}: expected {length} flags, got an array of shape {list(array.shape)} and "
            f"dtype {array.dtype}"
        )
    binary = (array == 0) | (array == 1)
    if not binary.all():
        step = int(np.argwhere(~binary)[0][0])
        raise DatasetError(f"{where}: step {step} holds {array[step].tolist()!r}, not a 0/1 flag")
    return torch.as_tensor(array.reshape(length).astype(bool))


def _rewards(value: Any, length: int, where: str) -> torch.Tensor:
    array = np.asarray(value)
    if array.shape not in ((length,), (length, 1)) or array.dtype.kind not in "biuf":
        raise DatasetError(
            f"{where}: expected {length} rewards, got an array of shape {list(array.shape)} and "
            f"dtype {array.dtype}"
        )
    _check_finite(array, where)
    return torch.as_tensor(array.reshape(length).astype(np.float64))


class _EpisodeReader:
    """Turns one episode (a mapping or an object with :data:`EPISODE_KEYS`) into buffer columns."""

    def __init__(
        self,
        dataset: str,
        observation_space: gym.Space,
        action_space: gym.Space,
        state_key: str,
        action_key: str,
    ):
        self.dataset = dataset
        self.observations = _SpaceRows(dataset, "observation", observation_space)
        self.actions = _SpaceRows(dataset, "action", action_space)
        self.state_key, self.action_key = state_key, action_key

    def columns(self, episode: Any, episode_id: Any) -> Dict[str, Any]:
        """The checked columns of one episode, for :meth:`Buffer.extend_columns`."""
        prefix = f"dataset {self.dataset!r}, episode {episode_id}"
        values = {key: _field(episode, key) for key in EPISODE_KEYS}
        for key, value in values.items():
            if value is None:
                raise DatasetError(f"{prefix}: key {key!r} is missing")
        length = len(values["actions"])
        if length == 0:
            raise DatasetError(f"{prefix}: key 'actions' is empty (an episode of length 0)")

        def where(key: str) -> str:
            return f"{prefix}, key {key!r}"

        observations = self.observations.convert(
            values["observations"], length + 1, where("observations")
        )
        _flags(values["truncations"], length, where("truncations"))
        return {
            "state": {self.state_key: observations[:-1]},
            "action": {
                self.action_key: self.actions.convert(values["actions"], length, where("actions"))
            },
            "next_state": {self.state_key: observations[1:]},
            "reward": _rewards(values["rewards"], length, where("rewards")),
            "terminal": _flags(values["terminations"], length, where("terminations")),
        }


# -- loading whole or not at all -------------------------------------------------------------
def _check_room(buffer: Buffer, count: int, dataset: str) -> None:
    room = buffer.buffer_size - buffer.size()
    if count > room:
        raise DatasetError(
            f"dataset {dataset!r} does not fit: it has {count} more transitions, the buffer "
            f"(buffer_size={buffer.buffer_size}) holds {buffer.size()} and has room for {room}; "
            f"a loader never overwrites stored transitions"
        )


def _fill(
    buffer: Buffer,
    blocks: Iterable[Tuple[Any, Dict[str, Any]]],
    dataset: str,
    total: Optional[int],
) -> None:
    """Write every block ``(episode id, columns)`` into ``buffer``; on an error undo them all.

    ``blocks`` is read lazily (one episode in memory at a time), inside the undo: an
    error raised while reading an episode undoes the blocks written before it too.
    ``total`` (when known) is checked against the room first, and the columns are
    allocated for it after the first block.
    """
    if total is not None:
        _check_room(buffer, total, dataset)
    size_before, reserved = buffer.size(), total is None
    try:
        for episode_id, columns in blocks:
            _check_room(buffer, len(columns["reward"]), dataset)
            try:
                buffer.extend_columns(columns)
            except ValueError as error:
                raise DatasetError(
                    f"dataset {dataset!r}, episode {episode_id}: the buffer refused it: {error}"
                ) from error
            if not reserved:
                buffer.reserve(size_before + total - buffer.size())
                reserved = True
    except BaseException:
        buffer._keep_oldest(size_before)
        raise


def _new_buffer(buffer: Optional[Buffer], total: Optional[int]) -> Buffer:
    if buffer is None:
        return Buffer(1_000_000 if total is None else max(int(total), 1))
    if not isinstance(buffer, Buffer):
        raise TypeError(f"buffer must be a machin Buffer or None, got {type(buffer).__name__}")
    return buffer


def load_episodes(
    episodes: Iterable[Any],
    buffer: Optional[Buffer] = None,
    *,
    dataset: str,
    observation_space: gym.Space,
    action_space: gym.Space,
    total_steps: Optional[int] = None,
    state_key: str = "state",
    action_key: str = "action",
) -> Buffer:
    """Append episodes, each a mapping (or object) of :data:`EPISODE_KEYS` arrays, to a buffer.

    An episode of ``T`` steps has ``T + 1`` observations and ``T`` actions, rewards,
    terminations and truncations (the layout of a Minari episode). Each is checked
    against the spaces and written as one block; the first error undoes every block
    written before it.

    Args:
        episodes: The episodes; a mapping may name itself with an ``"id"`` entry (else
            episodes are counted from 0).
        buffer: The buffer to append to (its stored transitions are never overwritten);
            default: a new :class:`~machin.frame.buffers.buffer.Buffer` of
            ``total_steps`` (or 1,000,000) transitions.
        dataset: The name used in error messages.
        observation_space: The space of the observations.
        action_space: The space of the actions.
        total_steps: The number of steps of all episodes, when known: checked against the
            buffer's room before anything is read, and allocated at once.
        state_key: Key of the observation in the state dicts.
        action_key: Key of the action in the action dicts.

    Returns:
        The buffer.

    Raises:
        DatasetError: (a ``ValueError``) Naming the dataset, the episode and the key of
            the first problem: a missing key, an empty episode, rows that do not fit the
            spaces, a NaN or infinite number, a flag that is not 0/1, or a buffer without
            room or holding transitions of another layout.
    """
    reader = _EpisodeReader(dataset, observation_space, action_space, state_key, action_key)
    buffer = _new_buffer(buffer, total_steps)

    def blocks():
        for index, episode in enumerate(episodes):
            episode_id = _field(episode, "id")
            episode_id = index if episode_id is None else episode_id
            yield episode_id, reader.columns(episode, episode_id)

    _fill(buffer, blocks(), dataset, total_steps)
    return buffer


# -- Minari -----------------------------------------------------------------------------------
def _minari() -> Any:
    try:
        import minari
    except ImportError as error:
        raise ImportError(
            "loading Minari datasets needs the minari package: pip install machin[offline] "
            "(or pip install minari)"
        ) from error
    return minari


def _minari_episodes(dataset: Any, name: str) -> Iterator[Any]:
    """The episodes of a Minari dataset, read one at a time (a missing key names the episode).

    Each episode is read on its own (Minari opens the file for it): a file kept open for the
    whole dataset lets HDF5's metadata cache grow by tens of MiB while loading.
    """
    for index in dataset.episode_indices:
        episode_id = int(index)
        try:
            yield next(iter(dataset.iterate_episodes([episode_id])))
        except KeyError as error:  # h5py's message quotes the missing dataset's name
            key = next((k for k in EPISODE_KEYS if f"'{k}'" in str(error)), None)
            what = f"key {key!r} is missing" if key else f"a key is missing ({error})"
            raise DatasetError(f"dataset {name!r}, episode {episode_id}: {what}") from None


def load_minari(
    dataset: Any,
    buffer: Optional[Buffer] = None,
    *,
    observation_space: Optional[gym.Space] = None,
    action_space: Optional[gym.Space] = None,
    state_key: str = "state",
    action_key: str = "action",
) -> Buffer:
    """Append every episode of a Minari dataset to a buffer, whole or not at all.

    Args:
        dataset: A ``minari.MinariDataset``, or the id of a dataset stored locally (under
            ``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``; it is not downloaded:
            ``minari download <id>`` fetches a public one first).
        buffer: The buffer to append to; default: a new one sized for the dataset.
        observation_space: When given, the dataset must have been recorded with this
            observation space (e.g. ``env.observation_space`` of the environment the
            policy will act in).
        action_space: Likewise for the action space.
        state_key: Key of the observation in the state dicts (the name of the networks'
            ``forward`` argument).
        action_key: Key of the action in the action dicts.

    Returns:
        The buffer, holding one transition per step of the dataset.

    Raises:
        DatasetError: See :func:`load_episodes`; also when the dataset's spaces differ
            from those given.
        ImportError: When minari is not installed.
    """
    minari = _minari()
    if isinstance(dataset, (str, os.PathLike)):
        dataset = minari.load_dataset(os.fspath(dataset))
    name = dataset.spec.dataset_id
    _check_spaces(name, observation_space, dataset.spec.observation_space, "observation")
    _check_spaces(name, action_space, dataset.spec.action_space, "action")
    return load_episodes(
        _minari_episodes(dataset, name),
        buffer,
        dataset=name,
        observation_space=dataset.spec.observation_space,
        action_space=dataset.spec.action_space,
        total_steps=int(dataset.total_steps),
        state_key=state_key,
        action_key=action_key,
    )


# -- the experience of machin runs -----------------------------------------------------------
def save_experience(buffer: Buffer, path: Union[str, os.PathLike]) -> None:
    """Write the transitions of ``buffer`` to ``path``, for :func:`load_experience`.

    The file is a run-state file holding only the buffer (its columns as tensors, read
    back with ``weights_only=True``), written atomically with its manifest
    ``<path>.manifest.json``, as :meth:`~machin.frame.algorithms.base.TorchFramework.save_state`
    writes a whole run.

    Args:
        buffer: The buffer (custom attributes must be numbers or tensors).
        path: The file to write.
    """
    state = {
        "format": FORMAT,
        "class": _EXPERIENCE_CLASS,
        "buffers": {"replay_buffer": buffer.state_dict()},
    }
    write_run_state(state, os.fspath(path))


def _rows(col: Mapping[str, Any], start: int, end: int) -> Any:
    """Rows ``start:end`` of a saved column: a tensor, or a list for a list column."""
    rows = col["rows"][start:end]
    return list(rows) if col["kind"] == "list" else rows


def _state_blocks(state: Mapping[str, Any]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """The rows of a buffer state, oldest first, as one or two blocks of columns (views, no copies)."""
    layout, size = state.get("layout"), state.get("size", 0)
    if layout is None or size == 0:
        return
    pos, capacity = state["pos"], state["capacity"]
    spans = [(0, size)] if size < capacity or pos == 0 else [(pos, capacity), (0, pos)]
    for start, end in spans:
        columns: Dict[str, Any] = {
            group: {key: _rows(col, start, end) for key, col in cols.items()}
            for group, cols in layout["major"].items()
        }
        for part in ("sub", "custom"):
            columns.update({name: _rows(col, start, end) for name, col in layout[part].items()})
        yield f"rows {start}..{end - 1}", columns


def load_experience(
    source: Union[str, os.PathLike, Mapping[str, Any]],
    buffer: Optional[Buffer] = None,
    *,
    buffer_name: str = "replay_buffer",
) -> Buffer:
    """Append the transitions a machin run kept to a buffer, whole or not at all.

    Args:
        source: A file written by :func:`save_experience`, a run state written by
            :meth:`~machin.frame.algorithms.base.TorchFramework.save_state` (its buffer
            ``buffer_name``), or a buffer state (``Buffer.state_dict()``). Files are
            checked against their manifest first.
        buffer: The buffer to append to; default: a new one of the saved transitions' number.
        buffer_name: The algorithm attribute holding the buffer in a run state.

    Returns:
        The buffer.

    Raises:
        DatasetError: When the run state has no such buffer, or the buffer holds
            transitions of another layout or lacks room (nothing is loaded then).
        RunStateError: (a ``ValueError``) When the file is incomplete or damaged.
    """
    name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "buffer state"
    state = source
    if isinstance(source, (str, os.PathLike)):
        saved = read_run_state(name).get("buffers", {})
        if buffer_name not in saved:
            raise DatasetError(
                f"dataset {name!r}: the run state holds no buffer {buffer_name!r} "
                f"(it holds {sorted(saved)})"
            )
        state = saved[buffer_name]
    if not isinstance(state, Mapping):
        raise TypeError(
            f"source must be a path or a buffer state mapping, got {type(source).__name__}"
        )
    size = int(state.get("size", 0))
    buffer = _new_buffer(buffer, size)
    _fill(buffer, _state_blocks(state), name, size)
    return buffer
