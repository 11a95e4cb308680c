"""Reading checkpoints that Machin 0.3.4 wrote in a layout of its own.

Most 0.3.4 checkpoints name their files and keys as machin does, and
:meth:`TorchFramework.load <machin.frame.algorithms.base.TorchFramework.load>` reads them.
An algorithm whose 0.3.4 files were laid out otherwise (MADDPG kept every agent's
target network in one ``all_*_target`` module) describes that layout with a
:class:`LegacyFile` per network and reads the files with :func:`load_legacy_files`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, Mapping, Pattern

import torch
from torch import nn

__all__ = ["LegacyFile", "file_versions", "load_legacy_files"]


@dataclass(frozen=True)
class LegacyFile:
    """Where 0.3.4 kept one network, and how its keys map to today's.

    Args:
        name: The file name before ``_<version>.pt``.
        child: A pattern matching the start of each old key; its non-empty groups, joined
            by dots, replace the match (``actor_(\\d+)_(\\d+)\\.`` turns ``actor_0_1.w`` into
            ``0.1.w``).
    """

    name: str
    child: Pattern[str]

    def renamed(self, state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """``state`` with its keys in today's layout."""
        return {
            self.child.sub(lambda m: ".".join(g for g in m.groups() if g) + ".", key): value
            for key, value in state.items()
        }


def file_versions(model_dir: str, name: str) -> set:
    """Versions ``v`` of the files ``<model_dir>/<name>_<v>.pt`` (none when the directory is missing).

    Args:
        model_dir: The checkpoint directory.
        name: The file name before ``_<version>.pt``.
    """
    pattern = re.compile(re.escape(name) + r"_(\d+)\.pt$")
    try:
        files = os.listdir(model_dir)
    except OSError:
        return set()
    return {int(m.group(1)) for m in map(pattern.match, files) if m}


def _read(path: str, trusted: bool) -> Dict[str, torch.Tensor]:
    """The state dict in the 0.3.4 file ``path`` (a pickled module, read only when ``trusted``)."""
    from ...utils.prepare import CheckpointLoadError

    try:
        loaded = torch.load(path, map_location="cpu", weights_only=not trusted)
    except Exception as e:  # noqa: BLE001 - the unpickler's error type depends on the content
        if not trusted and "GLOBAL" in str(e):
            raise RuntimeError(
                f"{path} looks like a Machin 0.3.4 checkpoint (a whole pickled module), which is "
                f"not read by default because unpickling it can run code. If you trust the file, "
                f"load it with load(..., trusted=True)."
            ) from e
        raise CheckpointLoadError(
            f"cannot read the checkpoint file {path!r}: it is damaged (truncated, empty or "
            f"overwritten) or is not a torch checkpoint ({type(e).__name__})"
        ) from e
    state = loaded.state_dict() if isinstance(loaded, nn.Module) else loaded
    if not isinstance(state, dict):
        raise RuntimeError(f"{path!r} holds a {type(state).__name__}, not a state dict")
    return state


def load_legacy_files(
    networks: Mapping[str, nn.Module],
    files: Mapping[str, LegacyFile],
    model_dir: str,
    version: int,
    trusted: bool,
) -> None:
    """Load ``networks[attr]`` from the 0.3.4 file ``files[attr]`` of ``version``, for every ``attr``.

    Every file is read and checked against its network before any network changes.

    Args:
        networks: The networks to load, by attribute name.
        files: The 0.3.4 file of each of them.
        model_dir: The checkpoint directory.
        version: The version to read.
        trusted: Whether the files may be unpickled (0.3.4 saved whole modules).

    Raises:
        RuntimeError: When a file is a pickled module and ``trusted`` is false.
        CheckpointLoadError: When a file cannot be read.
        StateDictMismatchError: When a file does not fit its network (naming both).
    """
    from ...utils.prepare import StateDictMismatchError, _fit_state_dict

    fitted = {}
    for attr, legacy in files.items():
        path = os.path.join(model_dir, f"{legacy.name}_{version}.pt")
        try:
            fitted[attr] = _fit_state_dict(networks[attr], legacy.renamed(_read(path, trusted)))
        except StateDictMismatchError as e:
            raise StateDictMismatchError(f"network {attr!r} (file {path!r}): {e}") from e
    for attr, state in fitted.items():
        networks[attr].load_state_dict(state)
