"""Learner checkpoints every K updates, and the resume of a run from the newest one.

A long distributed run loses its learner now and then (a killed process, a lost
node). :class:`LearnerCheckpoint` writes the learner's state every ``every`` updates
and, when the run is started again, loads the newest complete checkpoint, so the run
continues from there instead of from scratch::

    checkpoint = LearnerCheckpoint(apex, "checkpoints", every=1000)
    updates = (checkpoint.resume() or 0) if args.resume else 0
    while ...:
        apex.update()
        updates += 1
        checkpoint.step(updates)

A checkpoint of version ``v`` (= the number of updates) is the framework's own
:meth:`~machin.frame.algorithms.base.TorchFramework.save` of version ``v`` (its
restorable networks, written atomically and sealed by a manifest), which
``framework.load`` reads (e.g. to evaluate the learner), followed by
``learner_state_<v>.pt``: the learner's whole state, as
:meth:`~machin.frame.algorithms.base.TorchFramework.save_state` writes it (see
:mod:`machin.frame.algorithms.run_state`: every network, online ones included, the
optimizers and learning-rate schedulers, the learner's own part of its replay buffers, its
counters and other plain values, the shared noise and the process's random generators),
plus the update count and any extra tensors or numbers the caller adds. That file is
written atomically, then its manifest ``learner_state_<v>.pt.manifest.json`` (size and
SHA-256), last: a version counts once its manifest exists. Everything is read back with
``torch.load(weights_only=True)`` and checked against the learner before anything changes.
The samplers' parts of a distributed buffer live in their processes and are not saved:
samplers refill them after a resume.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional

from ...utils.prepare import prep_model_path

__all__ = ["LearnerCheckpoint"]

_FILE = re.compile(r"^(?P<name>.+)_(?P<version>\d+)(?P<kind>\.pt|\.manifest\.json)$")


class LearnerCheckpoint:
    """Checkpoints of a learner every ``every`` updates, and :meth:`resume` from the newest one.

    Only one process (the first learner) should write to a directory; the directory
    should hold nothing else, since old checkpoints are deleted (``keep``).

    Args:
        framework: The learner's algorithm (a
            :class:`~machin.frame.algorithms.base.TorchFramework`); its whole state is saved,
            as :meth:`~machin.frame.algorithms.base.TorchFramework.save_state` saves it.
        directory: Directory of the checkpoints (created when first written).
        every: Updates between two checkpoints written by :meth:`step`; 0 writes none.
        keep: How many of the newest checkpoints to keep (older ones are deleted after each
            save); ``None`` keeps all.

    Raises:
        ValueError: When ``every`` or ``keep`` is not a non-negative (positive) int.
        TypeError: When ``framework`` is not an algorithm.
    """

    STATE_NAME = "learner_state"

    def __init__(self, framework: Any, directory: str, every: int = 1000, keep: Optional[int] = 3):
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(
                f"every must be a non-negative int (updates between checkpoints), got {every!r}"
            )
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep must be a positive int or None, got {keep!r}")
        if not all(
            callable(getattr(framework, name, None)) for name in ("save", "load", "save_state")
        ):
            raise TypeError(
                f"framework must have save(), load() and save_state() like TorchFramework, "
                f"got {type(framework).__name__}"
            )
        self.framework = framework
        self.directory = os.fspath(directory)
        self.every = every
        self.keep = keep
        self.last_saved = 0
        #: The ``extra`` mapping of the checkpoint loaded by :meth:`resume`.
        self.extra: Dict[str, Any] = {}

    @contextlib.contextmanager
    def _buffers_locked(self) -> Iterator[None]:
        """Hold the lock of every buffer of the framework that has one (the distributed buffers'
        local parts), so that no other thread changes them while they are saved or loaded."""
        from ...frame.buffers import Buffer  # (machin.frame imports this package)

        with contextlib.ExitStack() as stack:
            for value in vars(self.framework).values():
                if isinstance(value, Buffer) and hasattr(value, "wr_lock"):
                    stack.enter_context(value.wr_lock)
            yield

    def _path(self, version: int) -> str:
        return prep_model_path(self.directory, self.STATE_NAME, version)

    # -- writing ---------------------------------------------------------------------------------
    def step(self, updates: int, extra: Optional[Mapping[str, Any]] = None) -> bool:
        """Write a checkpoint when ``every`` updates have passed since the last one.

        Args:
            updates: Updates made so far (the version of the checkpoint).
            extra: Further state to save (tensors, numbers, strings and containers of them).

        Returns:
            Whether a checkpoint was written.
        """
        if self.every and updates - self.last_saved >= self.every:
            self.save(updates, extra)
            return True
        return False

    def save(self, updates: int, extra: Optional[Mapping[str, Any]] = None) -> str:
        """Write the checkpoint of version ``updates`` now; returns the learner-state file's path.

        Args:
            updates: Updates made so far (the version of the checkpoint).
            extra: Further state to save, as in :meth:`step`.

        Raises:
            ValueError: When ``updates`` is not a non-negative int.
            TypeError: When ``extra`` is not a mapping.
        """
        if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
            raise ValueError(f"updates must be a non-negative int, got {updates!r}")
        if extra is not None and not isinstance(extra, Mapping):
            raise TypeError(
                f"extra must be a mapping of further state (or None), got {type(extra).__name__}"
            )
        from ...frame.algorithms.run_state import algorithm_state, write_run_state

        path = self._path(updates)
        with self._buffers_locked():
            state = algorithm_state(self.framework)
            state["learner"] = {"updates": updates, "extra": dict(extra or {})}
            self.framework.save(self.directory, version=updates)
            write_run_state(state, path)  # its manifest, written last, completes the version
        self.last_saved = updates
        self._prune()
        return path

    def versions(self) -> List[int]:
        """Versions of the complete checkpoints (those with a learner-state manifest), oldest first."""
        if not os.path.isdir(self.directory):
            return []
        complete = re.compile(rf"^{re.escape(self.STATE_NAME)}_(\d+)\.pt\.manifest\.json$")
        return sorted(
            int(match[1]) for match in map(complete.match, os.listdir(self.directory)) if match
        )

    def _prune(self) -> None:
        if self.keep is None:
            return
        old = set(self.versions()[: -self.keep])
        if not old:
            return
        # the learner-state manifest first: without it, a half-deleted version is never resumed from
        for version in sorted(old):
            for path in (self._path(version) + ".manifest.json", self._path(version)):
                with contextlib.suppress(FileNotFoundError):  # another process pruned it
                    os.remove(path)
        for file_name in os.listdir(self.directory):
            match = _FILE.match(file_name)
            if match and int(match["version"]) in old:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.directory, file_name))

    # -- reading ---------------------------------------------------------------------------------
    def resume(self) -> Optional[int]:
        """Load the newest complete checkpoint into the framework; return its number of updates.

        The learner-state file is compared with its manifest and checked against the
        framework (class, network architectures, optimizers, schedulers, buffers) before
        anything changes; then the framework takes the saved state, exactly as
        :meth:`~machin.frame.algorithms.base.TorchFramework.resume` gives it. :attr:`extra`
        holds the saved extra state.

        Returns:
            The update count of the loaded checkpoint, or ``None`` when the directory holds
            none (nothing is changed then).

        Raises:
            RunStateError: (a ``ValueError`` and a ``RuntimeError``) When the newest checkpoint
                cannot be loaded (a truncated or changed file, a file that is not a learner
                checkpoint, the state of another algorithm or architecture), naming the file
                and the mismatch; nothing of the framework changed then.
        """
        from ...frame.algorithms.run_state import RunStateError, load_run_state, read_run_state

        versions = self.versions()
        if not versions:
            return None
        path = self._path(versions[-1])
        state = read_run_state(path)
        learner = state.get("learner")
        updates = learner.get("updates") if isinstance(learner, Mapping) else None
        if (
            isinstance(updates, bool)
            or not isinstance(updates, int)
            or not isinstance(learner.get("extra"), Mapping)
        ):
            raise RunStateError(
                f"cannot resume the learner from {path!r}: it is not a learner checkpoint (it "
                f"lacks the update count and extra state that LearnerCheckpoint.save writes)"
            )
        with self._buffers_locked():
            load_run_state(self.framework, state, path)
        self.extra = dict(learner["extra"])
        self.last_saved = updates
        return updates
