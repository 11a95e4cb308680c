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
restorable networks, written atomically and sealed by a manifest) followed by
``learner_state_<v>.pt`` (every network of the framework, online ones included, the
optimizers' and learning-rate schedulers' states, the update count and any extra
tensors or numbers the caller adds), also written atomically. The first part is an
ordinary checkpoint that ``framework.load`` reads (e.g. to evaluate the learner); the
second makes the resume exact. The learner-state file is written last, so its presence marks a complete
checkpoint; everything is read back with ``torch.load(weights_only=True)``. The replay
buffers are not saved: samplers refill them after a resume.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Dict, List, Mapping, Optional

import torch

from ...utils.prepare import prep_model_path, prep_save_state_dict

__all__ = ["LearnerCheckpoint"]

_FILE = re.compile(r"^(?P<name>.+)_(?P<version>\d+)(?P<kind>\.pt|\.manifest\.json)$")


class LearnerCheckpoint:
    """Checkpoints of a learner every ``every`` updates, and :meth:`resume` from the newest one.

    Only one process (the first learner) should write to a directory; the directory
    should hold nothing else, since old checkpoints are deleted (``keep``).

    Args:
        framework: The learner's algorithm: an object with
            :meth:`~machin.frame.algorithms.base.TorchFramework.save` and ``load``. Its
            optimizers (attributes holding a ``torch.optim.Optimizer``) and learning-rate
            schedulers are saved too.
        directory: Directory of the checkpoints (created when first written).
        every: Updates between two checkpoints written by :meth:`step`; 0 writes none.
        keep: How many of the newest checkpoints to keep (older ones are deleted after each
            save); ``None`` keeps all.

    Raises:
        ValueError: When ``every`` or ``keep`` is not a non-negative (positive) int.
    """

    STATE_NAME = "learner_state"

    def __init__(self, framework: Any, directory: str, every: int = 1000, keep: Optional[int] = 3):
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"every must be a non-negative int (updates between checkpoints), got {every!r}")
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep must be a positive int or None, got {keep!r}")
        if not callable(getattr(framework, "save", None)) or not callable(getattr(framework, "load", None)):
            raise TypeError(
                f"framework must have save() and load() like TorchFramework, got {type(framework).__name__}"
            )
        self.framework = framework
        self.directory = os.fspath(directory)
        self.every = every
        self.keep = keep
        self.last_saved = 0
        #: The ``extra`` mapping of the checkpoint loaded by :meth:`resume`.
        self.extra: Dict[str, Any] = {}

    # -- what is saved ---------------------------------------------------------------------
    def _optimizers(self) -> Dict[str, torch.optim.Optimizer]:
        return {name: value for name, value in sorted(vars(self.framework).items())
                if isinstance(value, torch.optim.Optimizer)}

    def _schedulers(self) -> List[Any]:
        return list(getattr(self.framework, "_lr_schedulers", None) or [])

    def _networks(self) -> Dict[str, torch.nn.Module]:
        get_top = getattr(self.framework, "get_top", None)
        names = get_top() if callable(get_top) else []
        return {name: getattr(self.framework, name) for name in names
                if isinstance(getattr(self.framework, name, None), torch.nn.Module)}

    def _state(self, updates: int, extra: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
        return {
            "updates": int(updates),
            "networks": {name: net.state_dict() for name, net in self._networks().items()},
            "optimizers": {name: opt.state_dict() for name, opt in self._optimizers().items()},
            "schedulers": [scheduler.state_dict() for scheduler in self._schedulers()],
            "extra": dict(extra or {}),
        }

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
        """
        if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
            raise ValueError(f"updates must be a non-negative int, got {updates!r}")
        state = self._state(updates, extra)  # before writing anything: a bad extra fails here
        self.framework.save(self.directory, version=updates)
        path = prep_model_path(self.directory, self.STATE_NAME, updates)
        prep_save_state_dict(path, state)
        self.last_saved = updates
        self._prune()
        return path

    def versions(self) -> List[int]:
        """Versions of the complete checkpoints in the directory, oldest first."""
        if not os.path.isdir(self.directory):
            return []
        found = []
        for file_name in os.listdir(self.directory):
            match = _FILE.match(file_name)
            if match and match["name"] == self.STATE_NAME and match["kind"] == ".pt":
                found.append(int(match["version"]))
        return sorted(found)

    def _prune(self) -> None:
        if self.keep is None:
            return
        old = set(self.versions()[: -self.keep])
        if not old:
            return
        # the learner-state file first: without it, a half-deleted version is never resumed from
        for version in sorted(old):
            os.remove(prep_model_path(self.directory, self.STATE_NAME, version))
        for file_name in os.listdir(self.directory):
            match = _FILE.match(file_name)
            if match and int(match["version"]) in old:
                with contextlib.suppress(FileNotFoundError):  # another process pruned it
                    os.remove(os.path.join(self.directory, file_name))

    # -- reading ---------------------------------------------------------------------------------
    def resume(self) -> Optional[int]:
        """Load the newest complete checkpoint into the framework; return its number of updates.

        The framework's ``load`` reads its checkpoint first (checked before any change),
        then every network, optimizer and scheduler takes its saved state. :attr:`extra`
        holds the saved extra state.

        Returns:
            The update count of the loaded checkpoint, or ``None`` when the directory holds
            none (nothing is changed then).

        Raises:
            RuntimeError: When the newest checkpoint cannot be loaded (a damaged file, or
                networks that do not fit), naming the file.
        """
        versions = self.versions()
        if not versions:
            return None
        version = versions[-1]
        path = prep_model_path(self.directory, self.STATE_NAME, version)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise RuntimeError(f"cannot read the learner state {path!r}: {error}") from error
        optimizers, networks = self._optimizers(), self._networks()
        saved, saved_networks = state.get("optimizers", {}), state.get("networks", {})
        for kind, have, got in (("optimizers", optimizers, saved), ("networks", networks, saved_networks)):
            if sorted(got) != sorted(have):
                raise RuntimeError(
                    f"the learner state {path!r} holds {kind} {sorted(got)}, but "
                    f"{type(self.framework).__name__} has {sorted(have)}"
                )
        self.framework.load(self.directory, version=version)
        for name, network in networks.items():
            network.load_state_dict(saved_networks[name])
        for name, optimizer in optimizers.items():
            optimizer.load_state_dict(saved[name])
        for scheduler, scheduler_state in zip(self._schedulers(), state.get("schedulers", [])):
            scheduler.load_state_dict(scheduler_state)
        self.extra = dict(state.get("extra", {}))
        self.last_saved = int(state["updates"])
        return self.last_saved
