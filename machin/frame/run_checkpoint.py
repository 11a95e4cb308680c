"""Saves of a whole :class:`~machin.frame.trainer.Trainer` run, and the newest one to resume from.

A :class:`RunCheckpoint` (the trainer makes one for ``save_every``) saves the run every
``every`` training steps, when the process receives SIGTERM or SIGINT, and when the run
completes. Each save is a directory ``steps_<n>`` (``n``: the training steps taken) holding:

* ``algorithm.pt`` and its manifest: the algorithm's
  :meth:`~machin.frame.algorithms.base.TorchFramework.save_state`;
* ``trainer.pt``: the trainer's counters, its result so far (returns, evaluation history),
  the training episode in progress (its reset seed and actions, to replay it) and the state
  of every part (evaluator, loggers, callbacks) that has one;
* ``manifest.json``: written last and atomically, with the size and SHA-256 of
  ``trainer.pt``. A save without it is incomplete and never resumed from.

``trainer.run(..., resume=True)`` continues from the newest complete save (see
:meth:`Trainer.run <machin.frame.trainer.Trainer.run>`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Union

import torch

from ..utils.prepare import _write_atomic
from ..utils.save_env import SaveEnv
from .callbacks import Callback

if TYPE_CHECKING:
    from .trainer import Trainer

__all__ = [
    "RunCheckpoint",
    "RunCheckpointError",
    "default_save_directory",
    "newest_save",
    "read_trainer_state",
]

#: Version of the layout of a save.
FORMAT = 1
_KIND = "machin trainer run"
_SAVE_NAME = re.compile(r"^steps_(\d+)$")
_MANIFEST = "manifest.json"
_TRAINER_FILE = "trainer.pt"
ALGORITHM_FILE = "algorithm.pt"


class RunCheckpointError(ValueError, RuntimeError):
    """A trainer save that cannot be resumed from: damaged, foreign, or made by another setup."""


def default_save_directory(log_dir: Union[str, os.PathLike, SaveEnv]) -> str:
    """Where ``save_every`` saves go: ``<log_dir>/saves``, or ``saves`` in a SaveEnv's trial model directory."""
    if isinstance(log_dir, SaveEnv):
        return os.path.join(log_dir.get_trial_model_dir(), "saves")
    return os.path.join(os.fspath(log_dir), "saves")


def _complete_saves(directory: str) -> List[tuple]:
    """``(steps, path)`` of every save in ``directory`` that has its manifest, oldest first."""
    if not os.path.isdir(directory):
        return []
    saves = []
    for name in os.listdir(directory):
        match = _SAVE_NAME.match(name)
        path = os.path.join(directory, name)
        if match and os.path.isfile(os.path.join(path, _MANIFEST)):
            saves.append((int(match.group(1)), path))
    return sorted(saves)


def newest_save(directory: str) -> Optional[str]:
    """The newest complete save (the one with the most steps) in ``directory``, or ``None``."""
    saves = _complete_saves(os.fspath(directory))
    return saves[-1][1] if saves else None


def write_save(trainer: Trainer, directory: str) -> str:
    """Save ``trainer``'s run into ``directory/steps_<n>``, manifest last; return the save's path."""
    path = os.path.join(directory, f"steps_{trainer.steps}")
    os.makedirs(path, exist_ok=True)
    manifest_path = os.path.join(path, _MANIFEST)
    if os.path.exists(manifest_path):  # saved again at the same step (e.g. by a resumed run)
        os.remove(manifest_path)
    state = trainer.state_dict()
    trainer.framework.save_state(os.path.join(path, ALGORITHM_FILE))
    size, sha256 = _write_atomic(
        os.path.join(path, _TRAINER_FILE), lambda file: torch.save(state, file)
    )
    manifest = {
        "format": FORMAT,
        "kind": _KIND,
        "steps": trainer.steps,
        "episodes": trainer.result.episodes,
        "algorithm": _class_name(trainer.framework),
        "trainer": {"size": size, "sha256": sha256},
    }
    _write_atomic(manifest_path, lambda file: file.write(json.dumps(manifest, indent=1).encode()))
    return path


def _class_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _read_manifest(path: str) -> Dict[str, Any]:
    manifest_path = os.path.join(path, _MANIFEST)
    try:
        with open(manifest_path, "rb") as file:
            manifest = json.loads(file.read().decode())
    except FileNotFoundError:
        raise RunCheckpointError(
            f"cannot resume from {path!r}: {manifest_path!r} is missing, so the save did "
            f"not complete"
        ) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise RunCheckpointError(
            f"cannot resume from {path!r}: {manifest_path!r} is damaged ({error})"
        ) from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("kind") != _KIND
        or manifest.get("format") != FORMAT
    ):
        raise RunCheckpointError(
            f"cannot resume from {path!r}: {manifest_path!r} is not the manifest of a "
            f"trainer save of format {FORMAT}"
        )
    return manifest


def read_trainer_state(path: str, framework: Any) -> Dict[str, Any]:
    """Read the trainer's part of the save at ``path``, checked against the manifest and ``framework``'s class.

    Raises:
        RunCheckpointError: Naming the save and what is wrong with it.
    """
    manifest = _read_manifest(path)
    if manifest.get("algorithm") != _class_name(framework):
        raise RunCheckpointError(
            f"cannot resume from {path!r}: it is a run of a {manifest.get('algorithm')}, "
            f"this trainer trains a {_class_name(framework)}"
        )
    file_path = os.path.join(path, _TRAINER_FILE)
    try:
        with open(file_path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise RunCheckpointError(
            f"cannot resume from {path!r}: {error.strerror or error} ({file_path!r})"
        ) from None
    expected = manifest.get("trainer") or {}
    if len(data) != expected.get("size") or hashlib.sha256(data).hexdigest() != expected.get(
        "sha256"
    ):
        raise RunCheckpointError(
            f"cannot resume from {path!r}: {file_path!r} is truncated or was changed after "
            f"it was saved ({len(data)} bytes, the manifest says {expected.get('size')})"
        )
    try:
        state = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # noqa: BLE001 (any unpickling error means the same: not a trainer state)
        raise RunCheckpointError(
            f"cannot resume from {path!r}: {file_path!r} is not a trainer state ({error})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise RunCheckpointError(
            f"cannot resume from {path!r}: {file_path!r} is not a trainer state of format {FORMAT}"
        )
    return state


class RunCheckpoint(Callback):
    """Saves the whole run every ``every`` training steps, on SIGTERM / SIGINT and when the run completes.

    A periodic save is made after the step that reaches a multiple of ``every``, after its
    updates and after every other part received ``on_step`` (give it last among the
    callbacks; the trainer puts the one it makes for ``save_every`` last). A signal
    received during a run lets the current step finish (one received between two steps,
    e.g. during an evaluation: the next step), then the run is saved and stops at once
    (``trainer.result.interrupted`` is set); one received when no step follows is
    honoured by the save at the end of the run. A second signal of the same kind
    goes to the handler installed before. The handlers are installed only when the run
    is in the main thread, and the previous ones are put back when the run ends.

    Saves need a ``seed`` on the trainer and a single training environment or a group
    whose environments can be replayed one by one
    (:func:`~machin.frame.sampler.replay_problem`), so that the episodes in progress can
    be replayed on resume.

    Args:
        directory: Where the saves go (one ``steps_<n>`` directory each; created if missing).
        every: Save every this many training steps.
        keep: Keep the newest ``keep`` complete saves, delete older ones (``None``: keep all).
        signals: The signals that save and stop the run (``()``: none).

    Raises:
        ValueError: If ``every`` or ``keep`` is not a positive integer.
    """

    def __init__(
        self,
        directory: Union[str, os.PathLike],
        every: int,
        keep: Optional[int] = 3,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
    ) -> None:
        from ._trainer_options import check_number

        check_number("every", every, minimum=1, integer=True)
        if keep is not None:
            check_number("keep", keep, minimum=1, integer=True)
        self.directory = os.fspath(directory)
        self.every, self.keep, self.signals = every, keep, tuple(signals)
        self.last_save: Optional[str] = None
        self._next = every
        self._received: Optional[int] = None
        self._previous: Dict[int, Any] = {}

    def newest(self) -> Optional[str]:
        """The newest complete save in ``directory``, or ``None``."""
        return newest_save(self.directory)

    def save(self, trainer: Trainer) -> str:
        """Save the run now (it must be at a step boundary, as in ``on_step``); return the save's path.

        Args:
            trainer: The trainer whose run is saved.
        """
        self.last_save = write_save(trainer, self.directory)
        if self.keep is not None:
            for _, old in _complete_saves(self.directory)[: -self.keep]:
                os.remove(
                    os.path.join(old, _MANIFEST)
                )  # incomplete first, so never half-deleted and resumed
                shutil.rmtree(old, ignore_errors=True)
        return self.last_save

    def on_training_start(self, trainer: Trainer) -> None:
        trainer.check_resumable()
        self._next = (trainer.steps // self.every + 1) * self.every
        self._received, self.last_save = None, None
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Remember the signal; the next step saves and stops. A second one gets the previous handler."""
        self._received = signum
        self._restore_handler(signum)

    def on_step(self, trainer: Trainer, transitions: int) -> Optional[bool]:
        if self._received is not None:
            self.save(trainer)
            trainer.halt()
        elif trainer.steps >= self._next:
            self.save(trainer)
            self._next = (trainer.steps // self.every + 1) * self.every
        return None

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        self._restore_handlers()
        saved_now = (
            self.last_save is not None
            and os.path.basename(self.last_save) == f"steps_{trainer.steps}"
        )
        if completed and not saved_now:
            self.save(trainer)

    def _restore_handlers(self) -> None:
        for signum in list(self._previous):
            self._restore_handler(signum)

    def _restore_handler(self, signum: int) -> None:
        """Put back the handler of ``signum`` that was there before (one not set from Python: the default)."""
        if signum in self._previous:
            previous = self._previous.pop(signum)
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)


def _storable(value: Any) -> bool:
    """Whether ``torch.load(weights_only=True)`` reads ``value`` back: tensors, plain values and containers."""
    if isinstance(value, (torch.Tensor, bool, int, float, str, type(None))):
        return True
    if isinstance(value, (list, tuple)):
        return all(_storable(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, (str, int)) and _storable(item) for key, item in value.items())
    return False


def check_storable(
    what: str, value: Any, make_error: Callable[[str], Exception] = RunCheckpointError
) -> None:
    """Raise unless ``value`` can be saved in a trainer state (see :func:`_storable`).

    Args:
        what: Names the value in the error.
        value: The value to check.
        make_error: Builds the exception raised, from its message.
    """
    if not _storable(value):
        raise make_error(
            f"cannot save {what}: a trainer save holds only tensors, numbers, strings, None and "
            f"lists, tuples and dicts of them, got {value!r:.200}"
        )
