"""Preparing a training run: directories, and saving and loading model checkpoints.

Checkpoint files hold a module's ``state_dict`` and are named
``<name>_<version>.pt``, where ``name`` matches ``[a-zA-Z0-9_-]+`` and
``version`` is a non-negative integer (``qnet_target_1000.pt`` is model
``qnet_target`` at version ``1000``). Files are written atomically by
:func:`prep_save_state_dict` and read with ``torch.load(path, map_location="cpu",
weights_only=True)``, so loading a checkpoint never runs code from the file.
The loaded tensors are then copied into the parameters and buffers the model
already has, on whatever devices those live.

Machin 0.3.4 saved whole pickled modules (``torch.save(model)``). Such files cannot
be read with ``weights_only=True``: :func:`prep_load_model` refuses them with a
:class:`CheckpointLoadError` unless it is called with ``trusted=True``, which
unpickles the file (and so can run code from it) and copies the pickled module's
``state_dict`` into your model.

The algorithm base class saves and loads its networks through
:func:`prep_save_model` / :func:`prep_save_state_dict` and :func:`prep_load_model`.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import tempfile
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

import torch
from torch import nn

from .logging import default_logger

__all__ = [
    "CheckpointLoadError",
    "MODEL_FILE_PATTERN",
    "StateDictMismatchError",
    "prep_clear_dirs",
    "prep_create_dirs",
    "prep_list_model_versions",
    "prep_load_model",
    "prep_load_state_dict",
    "prep_model_path",
    "prep_save_model",
    "prep_save_state_dict",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Checkpoint file names: group 1 is the model name, group 2 the version.
MODEL_FILE_PATTERN = re.compile(r"^([a-zA-Z0-9_-]+)_([0-9]+)\.pt$")
_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")


class StateDictMismatchError(RuntimeError, KeyError):
    """A state dict does not fit the model: keys are missing or unexpected, or shapes differ.

    A :class:`RuntimeError`, and a :class:`KeyError` as Machin 0.3.4 raised for a
    missing key.
    """

    __str__ = BaseException.__str__  # the message as is, not quoted like a KeyError's


class CheckpointLoadError(pickle.UnpicklingError, RuntimeError):
    """A checkpoint file cannot be read without unpickling arbitrary objects.

    Raised by :func:`prep_load_model` for files that ``torch.load(...,
    weights_only=True)`` rejects, such as the whole pickled modules Machin 0.3.4
    wrote. It is both a :class:`pickle.UnpicklingError` and a :class:`RuntimeError`.
    """


def _path_list(dirs: Iterable[PathLike], arg: str) -> List[PathLike]:
    if isinstance(dirs, (str, bytes, os.PathLike)):
        raise TypeError(
            f"{arg} must be an iterable of directory paths, got the single path {dirs!r}"
        )
    return list(dirs)


def prep_clear_dirs(dirs: Iterable[PathLike]) -> None:
    """Delete everything inside each directory, keeping the directories themselves.

    Directories that do not exist are skipped.

    Args:
        dirs: Directories to empty.

    Raises:
        TypeError: When ``dirs`` is a single path instead of a collection of paths.
    """
    for directory in _path_list(dirs, "dirs"):
        if not os.path.isdir(directory):
            continue
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.remove(entry.path)


def prep_create_dirs(dirs: Iterable[PathLike]) -> None:
    """Create each directory, with missing parents; existing directories are left alone.

    Args:
        dirs: Directories to create.

    Raises:
        TypeError: When ``dirs`` is a single path instead of a collection of paths.
    """
    for directory in _path_list(dirs, "dirs"):
        os.makedirs(directory, exist_ok=True)


def prep_model_path(model_dir: PathLike, name: str, version: int) -> str:
    """Return the checkpoint path ``<model_dir>/<name>_<version>.pt``.

    Raises:
        ValueError: When ``name`` does not match ``[a-zA-Z0-9_-]+`` or ``version`` is
            not a non-negative integer.
    """
    if not isinstance(name, str) or not _NAME_PATTERN.match(name):
        raise ValueError(f"model name must match [a-zA-Z0-9_-]+, got {name!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version!r}")
    return os.path.join(os.fspath(model_dir), f"{name}_{version}.pt")


def prep_save_state_dict(path: PathLike, state_dict: Mapping[str, Any]) -> None:
    """Write a state dict to ``path`` atomically.

    The data is written to a temporary file in the same directory, flushed to
    disk and renamed over ``path`` with :func:`os.replace`, so ``path`` always
    holds either the old or the complete new checkpoint. The directory must exist.

    Args:
        path: Destination file, normally from :func:`prep_model_path`.
        state_dict: The mapping to save (usually ``module.state_dict()``).

    Raises:
        TypeError: When ``state_dict`` is not a mapping.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"state_dict must be a mapping such as module.state_dict(), got {type(state_dict).__name__}"
        )
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    fd, tmp_path = tempfile.mkstemp(
        dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(state_dict, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise


def prep_save_model(
    model_dir: PathLike, model_map: Mapping[str, nn.Module], version: int = 0
) -> List[str]:
    """Save each module's ``state_dict`` to ``<model_dir>/<name>_<version>.pt``.

    Args:
        model_dir: Directory to write to (created if missing).
        model_map: File name (without version) for each module.
        version: Version number written into the file names.

    Returns:
        The paths written, in the order of ``model_map``.

    Raises:
        ValueError: On an invalid name or version (see :func:`prep_model_path`).
        TypeError: When a value of ``model_map`` is not an ``nn.Module``.
    """
    _check_model_map(model_map)
    paths = [prep_model_path(model_dir, name, version) for name in model_map]
    os.makedirs(model_dir, exist_ok=True)
    for path, model in zip(paths, model_map.values()):
        prep_save_state_dict(path, model.state_dict())
    return paths


def prep_list_model_versions(model_dir: PathLike) -> Dict[str, List[int]]:
    """List the checkpoint versions in a directory.

    Files whose names do not match ``<name>_<version>.pt`` (such as ``qnet.pt``)
    are ignored.

    Args:
        model_dir: Directory to scan.

    Returns:
        For each model name, its versions in increasing order.

    Raises:
        RuntimeError: When ``model_dir`` is not an existing directory.
    """
    if not os.path.isdir(model_dir):
        raise RuntimeError(
            f"Model directory doesn't exist: {os.fspath(model_dir)!r} does not exist "
            "or is not a directory"
        )
    versions: Dict[str, List[int]] = {}
    for file_name in os.listdir(model_dir):
        match = MODEL_FILE_PATTERN.match(file_name)
        if match and os.path.isfile(os.path.join(model_dir, file_name)):
            versions.setdefault(match.group(1), []).append(int(match.group(2)))
    return {name: sorted(found) for name, found in sorted(versions.items())}


def prep_load_state_dict(model: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Copy an already loaded state dict into ``model``, whatever devices either side uses.

    Every tensor is copied into the matching parameter or buffer where it lives,
    so a checkpoint saved on a GPU loads into a CPU model and the other way round.
    The keys must match exactly, except for the layouts of Machin 0.3.4 modules,
    which are translated: entries that repeat another entry's tensor under a name
    the model does not have (0.3.4 registered the input and output modules of a
    ``NeuralNetworkModule`` a second time) are dropped, a ``wrapped_module.`` prefix
    (0.3.4's ``dynamic_module_wrapper``) is removed, and the ``weight_g`` /
    ``weight_v`` entries of the old ``torch.nn.utils.weight_norm`` are renamed to
    the parametrization entries of :func:`torch.nn.utils.parametrizations.weight_norm`.
    Each translation is made only where it yields a key of the model.

    Args:
        model: Module to load into.
        state_dict: Mapping from parameter/buffer names to tensors.

    Raises:
        TypeError: When ``model`` is not an ``nn.Module`` or ``state_dict`` not a mapping.
        StateDictMismatchError: When keys are missing or unexpected, or a tensor's shape
            differs from the model's; the message names every such parameter. It is a
            :class:`RuntimeError` (and a :class:`KeyError`).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping, got {type(state_dict).__name__}")
    own = model.state_dict()
    if state_dict.keys() != own.keys():
        state_dict = _adapt_legacy_layout(state_dict, own)
    problems = []
    missing = [key for key in own if key not in state_dict]
    unexpected = [key for key in state_dict if key not in own]
    if missing:
        problems.append(f"missing keys {missing}")
    if unexpected:
        problems.append(f"unexpected keys {unexpected}")
    for key, value in state_dict.items():
        target = own.get(key)
        if (
            isinstance(target, torch.Tensor)
            and isinstance(value, torch.Tensor)
            and target.shape != value.shape
        ):
            problems.append(
                f"parameter {key!r} has shape {list(value.shape)} in the state dict "
                f"but {list(target.shape)} in the model"
            )
    if problems:
        raise StateDictMismatchError(
            f"cannot load the state dict into {type(model).__name__}: " + "; ".join(problems)
        )
    # ``load_state_dict`` copies in place (``param.copy_(value)``), which moves each
    # tensor to the device of the parameter it is copied into.
    model.load_state_dict(state_dict)


_LEGACY_WRAPPER_PREFIX = "wrapped_module."
_LEGACY_WEIGHT_NORM = {
    "weight_g": "parametrizations.weight.original0",
    "weight_v": "parametrizations.weight.original1",
}


def _legacy_key(key: str, own: Mapping[str, Any]) -> str:
    """The key of ``own`` that a 0.3.4-style key stands for, else ``key`` itself."""
    if key in own or not isinstance(key, str):
        return key
    name = key[len(_LEGACY_WRAPPER_PREFIX) :] if key.startswith(_LEGACY_WRAPPER_PREFIX) else key
    head, _, leaf = name.rpartition(".")
    if leaf in _LEGACY_WEIGHT_NORM and name not in own:
        name = (head + "." if head else "") + _LEGACY_WEIGHT_NORM[leaf]
    return name if name in own else key


def _storage_identity(value: Any) -> Optional[tuple]:
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return None
    return (value.device, value.dtype, value.data_ptr(), tuple(value.shape), value.stride())


def _adapt_legacy_layout(state_dict: Mapping[str, Any], own: Mapping[str, Any]) -> Dict[str, Any]:
    """Translate the state-dict layout of Machin 0.3.4 modules (see prep_load_state_dict)."""
    aliases: Dict[tuple, List[str]] = {}
    for key, value in state_dict.items():
        identity = _storage_identity(value)
        if identity is not None:
            aliases.setdefault(identity, []).append(key)
    dropped = set()
    for keys in aliases.values():
        if len(keys) > 1:
            kept = [key for key in keys if _legacy_key(key, own) in own] or keys[:1]
            dropped.update(key for key in keys if key not in kept)
    return {_legacy_key(key, own): value for key, value in state_dict.items() if key not in dropped}


def _read_checkpoint(path: str, trusted: bool) -> Any:
    """Load one checkpoint file; a whole pickled module gives its ``state_dict``."""
    if trusted:
        content = torch.load(path, map_location="cpu", weights_only=False)
    else:
        try:
            content = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            reason = str(error).strip().splitlines()
            raise CheckpointLoadError(
                f"cannot load {path!r} with weights_only=True: the file holds pickled objects "
                "other than tensors, such as a whole module saved with torch.save(model) by "
                "Machin 0.3.4. Unpickling it can run arbitrary code from the file. If you "
                "trust the file, load it with trusted=True (prep_load_model(..., trusted=True), "
                "or the algorithm's load(..., trusted=True))"
                + (f". torch.load said: {reason[0]}" if reason else "")
            ) from error
    if isinstance(content, nn.Module):
        return content.state_dict()
    return content


def _check_model_map(model_map: Mapping[str, nn.Module]) -> None:
    if not isinstance(model_map, Mapping):
        raise TypeError(
            f"model_map must be a dict of name -> nn.Module, got {type(model_map).__name__}"
        )
    for name, model in model_map.items():
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model_map[{name!r}] must be a torch.nn.Module, got {type(model).__name__}"
            )


def prep_load_model(
    model_dir: PathLike,
    model_map: Mapping[str, nn.Module],
    version: Optional[int] = None,
    quiet: bool = False,
    logger: Optional[Any] = None,
    *,
    trusted: bool = False,
) -> Optional[int]:
    """Find and load the checkpoints ``<model_dir>/<name>_<version>.pt`` of several models.

    Only versions present for *every* name in ``model_map`` are usable. With
    ``version=None`` (or a negative version) the newest usable version is loaded.
    When a requested version is not present for every model, a warning is logged
    and the newest usable version is loaded instead. Example: with
    ``actor_target_{0,100,1000}.pt`` and ``critic_target_{0,100}.pt``, version 100
    is loaded.

    Args:
        model_dir: Directory holding the checkpoints.
        model_map: Module to load into for each file name (without version).
        version: Version to load; ``None`` for the newest usable one.
        quiet: When no usable version exists (or the directory is missing), log a
            warning and return ``None`` instead of raising.
        logger: Logger for progress and warnings; :data:`~machin.utils.logging.default_logger`
            when ``None``.
        trusted: Also accept files that hold pickled Python objects, such as the
            whole modules (``torch.save(model)``) Machin 0.3.4 wrote; the module's
            ``state_dict`` is loaded into your model. **This unpickles the file, which
            can run arbitrary code from it**: pass ``True`` only for files from a
            source you trust. With the default ``False`` files are read with
            ``weights_only=True`` and nothing in them is executed.

    Returns:
        The version loaded, or ``None`` when nothing was loaded (only with ``quiet``).

    Raises:
        RuntimeError: When ``model_dir`` does not exist or no version is present for
            every model (unless ``quiet``), or when a checkpoint does not fit its
            model (the message names the model and the parameter).
        CheckpointLoadError: When a file holds pickled objects (a 0.3.4 whole-module
            checkpoint, for instance) and ``trusted`` is false; the message says how
            to opt in. It is a :class:`RuntimeError`.
        TypeError: When ``model_map`` does not map names to modules, or ``version``
            is not an int.
        ValueError: When ``model_map`` is empty.
    """
    logger = default_logger if logger is None else logger
    _check_model_map(model_map)
    if not model_map:
        raise ValueError("model_map must name at least one model, got an empty mapping")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise TypeError(
            f"version must be an int or None, got {version!r} of type {type(version).__name__}"
        )
    try:
        available = prep_list_model_versions(model_dir)
    except RuntimeError:
        if quiet:
            logger.warning(
                f"Model directory doesn't exist: {os.fspath(model_dir)!r}; nothing loaded"
            )
            return None
        raise

    common = None
    for name in model_map:
        found = set(available.get(name, ()))
        common = found if common is None else common & found
    common = common or set()

    if not common:
        detail = {name: available.get(name, []) for name in model_map}
        message = (
            f"Cannot find a valid version for all models in {os.fspath(model_dir)!r}; "
            f"versions found per model: {detail}"
        )
        if quiet:
            logger.warning(message + ", nothing loaded")
            return None
        raise RuntimeError(message)

    latest = max(common)
    if version is None or version < 0:
        chosen = latest
    elif version in common:
        chosen = version
    else:
        lacking = [name for name in model_map if version not in available.get(name, ())]
        logger.warning(
            f"Specified version {version} is invalid: version {version} is missing for "
            f"models {lacking} in {os.fspath(model_dir)!r}; "
            f"loading the newest common version {latest} instead"
        )
        chosen = latest

    for name, model in model_map.items():
        path = prep_model_path(model_dir, name, chosen)
        state_dict = _read_checkpoint(path, trusted)
        try:
            prep_load_state_dict(model, state_dict)
        except (RuntimeError, TypeError) as error:
            kind = StateDictMismatchError if isinstance(error, KeyError) else RuntimeError
            raise kind(f"model {name!r} (file {path!r}): {error}") from error
        logger.info(f"loaded model {name!r} version {chosen} from {path!r}")
    return chosen
