"""Preparing a training run: directories, and saving and loading model checkpoints.

Checkpoint files hold a module's ``state_dict`` and are named
``<name>_<version>.pt``, where ``name`` matches ``[a-zA-Z0-9_-]+`` and
``version`` is a non-negative integer (``qnet_target_1000.pt`` is model
``qnet_target`` at version ``1000``). Each file is written atomically (temporary
file, ``fsync``, :func:`os.replace`) and read with ``torch.load(path,
map_location="cpu", weights_only=True)``, so loading a checkpoint never runs code
from the file. The loaded tensors are then copied into the parameters and
buffers the model already has, on whatever devices those live.

**A version is one unit.** :func:`prep_save_checkpoint` (used by
:func:`prep_save_model` and by the algorithms' ``save``) writes the files of a
version and then, last and atomically, a manifest
``<first name>_<version>.manifest.json`` that lists every file of the version
with its size and SHA-256. Before the first file is touched the manifest is
replaced by an *in-progress* one, so a save that is killed half way leaves a
version that is visibly incomplete (even when it overwrote an existing version).
:func:`prep_load_checkpoint` / :func:`prep_load_model` load a version only when
it is complete, read and check every file (size, checksum, readability, keys and
shapes against the models) before changing any model, and name the file on any
failure. The rules for a version ``v`` and the files a load needs:

* a *complete* manifest of ``v`` that lists every needed file: the version is
  complete if the files still have the listed sizes and checksums;
* otherwise, a manifest of ``v`` (complete or in progress) that lists any needed
  file: the version is incomplete (an interrupted or partial save);
* no manifest of ``v`` mentions the needed files (directories written by earlier
  Machin versions, or by hand): the version is complete when every file exists.

When the newest version is incomplete or damaged and an older complete one
exists, loading the newest (``version=None``/``-1``) loads the older one and logs
a warning naming what was skipped; asking for that version explicitly raises.
Temporary files left by killed saves (``.<file>.<pid>.<random>.tmp``) are removed
by the next save into the directory once their writer process is gone.

Machin 0.3.4 saved whole pickled modules (``torch.save(model)``). Such files cannot
be read with ``weights_only=True``: :func:`prep_load_model` refuses them with a
:class:`CheckpointLoadError` unless it is called with ``trusted=True``, which
unpickles the file (and so can run code from it) and copies the pickled module's
``state_dict`` into your model.

The algorithm base class saves and loads its networks through
:func:`prep_save_checkpoint` and :func:`prep_load_checkpoint`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from .logging import default_logger

__all__ = [
    "CheckpointLoadError",
    "MANIFEST_FILE_PATTERN",
    "MODEL_FILE_PATTERN",
    "StateDictMismatchError",
    "prep_clear_dirs",
    "prep_create_dirs",
    "prep_list_model_versions",
    "prep_load_checkpoint",
    "prep_load_model",
    "prep_load_state_dict",
    "prep_model_path",
    "prep_save_checkpoint",
    "prep_save_model",
    "prep_save_state_dict",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Checkpoint file names: group 1 is the model name, group 2 the version.
MODEL_FILE_PATTERN = re.compile(r"^([a-zA-Z0-9_-]+)_([0-9]+)\.pt$")
#: Manifest file names (``<name>_<version>.manifest.json``): group 1 the name, group 2 the version.
MANIFEST_FILE_PATTERN = re.compile(r"^([a-zA-Z0-9_-]+)_([0-9]+)\.manifest\.json$")
_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
# Temporary files of the atomic writes: ``.<target>.<pid>.<random>.tmp`` (earlier releases
# wrote ``.<target>.<random>.tmp``, without the writer's process id).
_TEMP_FILE_PATTERN = re.compile(
    r"^\.[a-zA-Z0-9_-]+_[0-9]+\.(?:pt|manifest\.json)\.(?:([0-9]+)\.)?[a-z0-9_]+\.tmp$"
)
_MANIFEST_FORMAT = "machin-checkpoint"


class StateDictMismatchError(RuntimeError, KeyError):
    """A state dict does not fit the model: keys are missing or unexpected, or shapes differ.

    A :class:`RuntimeError`, and a :class:`KeyError` as Machin 0.3.4 raised for a
    missing key.
    """

    __str__ = BaseException.__str__  # the message as is, not quoted like a KeyError's


class CheckpointLoadError(pickle.UnpicklingError, RuntimeError):
    """A checkpoint file cannot be read; the message names the file.

    Raised by :func:`prep_load_model` for files that ``torch.load(...,
    weights_only=True)`` rejects, such as the whole pickled modules Machin 0.3.4
    wrote (the message says how to opt in with ``trusted=True``), and for damaged
    files: empty, truncated, not a checkpoint, or not matching the size and
    checksum in the version's manifest. It is both a :class:`pickle.UnpicklingError`
    and a :class:`RuntimeError`.
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


def _fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(path: str, write: Callable[[Any], None]) -> Tuple[int, str]:
    """Write ``path`` through a temporary file, fsync and :func:`os.replace`.

    Returns the size and SHA-256 (hex) of what was written.
    """
    directory = os.path.dirname(path) or "."
    fd, tmp_path = tempfile.mkstemp(
        dir=directory, prefix=f".{os.path.basename(path)}.{os.getpid()}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "w+b") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
            file.seek(0)
            digest = hashlib.sha256()
            size = 0
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
                size += len(block)
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise
    _fsync_directory(directory)
    return size, digest.hexdigest()


def prep_save_state_dict(path: PathLike, state_dict: Mapping[str, Any]) -> None:
    """Write a state dict to ``path`` atomically.

    The data is written to a temporary file in the same directory, flushed to
    disk and renamed over ``path`` with :func:`os.replace`, so ``path`` always
    holds either the old or the complete new checkpoint. The directory must exist.
    This writes one file and no manifest; use :func:`prep_save_checkpoint` to
    write a whole version.

    Args:
        path: Destination file, normally from :func:`prep_model_path`.
        state_dict: The mapping to save (usually ``module.state_dict()``).

    Raises:
        TypeError: When ``state_dict`` is not a mapping.
    """
    _check_state_mapping(state_dict)
    _write_atomic(os.fspath(path), lambda file: torch.save(state_dict, file))


def _check_state_mapping(state_dict: Any) -> None:
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"state_dict must be a mapping such as module.state_dict(), got {type(state_dict).__name__}"
        )


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but belongs to someone else
        return True
    return True


def _remove_stale_temporaries(model_dir: str, logger: Any) -> List[str]:
    """Remove the temporary files of saves that were killed (their writer is gone)."""
    removed = []
    with os.scandir(model_dir) as entries:
        for entry in entries:
            match = _TEMP_FILE_PATTERN.match(entry.name)
            if not match or not entry.is_file(follow_symlinks=False):
                continue
            if match.group(1) is not None and _pid_alive(int(match.group(1))):
                continue  # a save in progress in a live process
            try:
                os.remove(entry.path)
            except FileNotFoundError:
                continue
            removed.append(entry.name)
    if removed:
        logger.info(
            f"removed temporary files of interrupted saves in {model_dir!r}: {sorted(removed)}"
        )
    return removed


def _manifest_path(model_dir: str, names: Sequence[str], version: int) -> str:
    return os.path.join(model_dir, f"{names[0]}_{version}.manifest.json")


def _write_manifest(
    path: str, version: int, files: Dict[str, Optional[Dict[str, Any]]], complete: bool
) -> None:
    manifest = {
        "format": _MANIFEST_FORMAT,
        "format_version": 1,
        "version": version,
        "complete": complete,
        "files": files,
    }
    data = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _write_atomic(path, lambda file: file.write(data))


def prep_save_checkpoint(
    model_dir: PathLike,
    state_dicts: Mapping[str, Mapping[str, Any]],
    version: int = 0,
    logger: Optional[Any] = None,
) -> List[str]:
    """Save one version as a unit: every ``<model_dir>/<name>_<version>.pt``, then its manifest.

    First the temporary files of earlier killed saves are removed (only files named
    like Machin's own temporaries, ``.<file>.<pid>.<random>.tmp``, whose writer
    process is gone). Then the manifest ``<first name>_<version>.manifest.json`` is
    replaced by an in-progress one, each state dict is written atomically, and
    finally the complete manifest (file sizes and SHA-256) is written atomically.
    A save killed at any point leaves the version incomplete, never a mix that
    loads.

    Args:
        model_dir: Directory to write to (created if missing).
        state_dicts: The state dict (any mapping ``torch.load(..., weights_only=True)``
            can read back) to write under each name.
        version: Version number written into the file names.
        logger: Logger for progress; :data:`~machin.utils.logging.default_logger` when ``None``.

    Returns:
        The paths of the state-dict files written, in the order of ``state_dicts``.

    Raises:
        ValueError: On an invalid name or version (see :func:`prep_model_path`), or
            when ``state_dicts`` is empty.
        TypeError: When a value of ``state_dicts`` is not a mapping.
    """
    logger = default_logger if logger is None else logger
    if not isinstance(state_dicts, Mapping) or not state_dicts:
        raise ValueError("state_dicts must map at least one name to a state dict")
    paths = [prep_model_path(model_dir, name, version) for name in state_dicts]
    for state_dict in state_dicts.values():
        _check_state_mapping(state_dict)
    model_dir = os.fspath(model_dir)
    os.makedirs(model_dir, exist_ok=True)
    _remove_stale_temporaries(model_dir, logger)
    manifest = _manifest_path(model_dir, list(state_dicts), version)
    file_names = [os.path.basename(path) for path in paths]
    try:
        with open(manifest, "rb") as file:
            previous: Optional[bytes] = file.read()
    except FileNotFoundError:
        previous = None
    _write_manifest(manifest, version, {name: None for name in file_names}, complete=False)
    files = {}
    try:
        for path, file_name, state_dict in zip(paths, file_names, state_dicts.values()):
            size, sha256 = _write_atomic(path, lambda file, sd=state_dict: torch.save(sd, file))
            files[file_name] = {"size": size, "sha256": sha256}
    except Exception:
        if not files:  # no file was replaced: the directory is as it was before this save
            if previous is None:
                os.remove(manifest)
            else:
                _write_atomic(manifest, lambda file: file.write(previous))
        raise
    _write_manifest(manifest, version, files, complete=True)
    return paths


def prep_save_model(
    model_dir: PathLike, model_map: Mapping[str, nn.Module], version: int = 0
) -> List[str]:
    """Save each module's ``state_dict`` to ``<model_dir>/<name>_<version>.pt``, as one version.

    The files and their manifest are written by :func:`prep_save_checkpoint`.

    Args:
        model_dir: Directory to write to (created if missing).
        model_map: File name (without version) for each module.
        version: Version number written into the file names.

    Returns:
        The paths written, in the order of ``model_map`` (the manifest not included).

    Raises:
        ValueError: On an invalid name or version (see :func:`prep_model_path`).
        TypeError: When a value of ``model_map`` is not an ``nn.Module``.
    """
    _check_model_map(model_map)
    for name in model_map:
        prep_model_path(model_dir, name, version)
    if not model_map:
        os.makedirs(model_dir, exist_ok=True)
        return []
    return prep_save_checkpoint(
        model_dir, {name: model.state_dict() for name, model in model_map.items()}, version
    )


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
    # ``load_state_dict`` copies in place (``param.copy_(value)``), which moves each
    # tensor to the device of the parameter it is copied into.
    fitted = _fit_state_dict(model, state_dict)
    model.load_state_dict(fitted)


def _fit_state_dict(model: nn.Module, state_dict: Mapping[str, Any]) -> Mapping[str, Any]:
    """Check ``state_dict`` against ``model`` (see prep_load_state_dict); return it translated."""
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
    return state_dict


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


def _first_sentence(error: BaseException) -> str:
    """A short reason from an exception, never one that advises ``weights_only=False``."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if "weights_only" in text:
        return ""
    return text.split(". ")[0][:200]


def _damaged(path: str, error: BaseException, size: Optional[int] = None) -> CheckpointLoadError:
    size = os.path.getsize(path) if size is None and os.path.exists(path) else size
    if size == 0:
        what = "it is empty (0 bytes)"
    else:
        what = "it is damaged (truncated or overwritten) or is not a torch checkpoint"
    reason = _first_sentence(error)
    result = CheckpointLoadError(
        f"cannot read the checkpoint file {path!r}: {what}"
        + (f" ({type(error).__name__}: {reason})" if reason else f" ({type(error).__name__})")
    )
    result.damaged = True
    return result


def _read_checkpoint(path: str, trusted: bool, data: Optional[bytes] = None) -> Any:
    """Load one checkpoint file (or its bytes); a whole pickled module gives its ``state_dict``."""
    source: Any = path if data is None else io.BytesIO(data)
    size = None if data is None else len(data)
    try:
        content = torch.load(source, map_location="cpu", weights_only=not trusted)
    except pickle.UnpicklingError as error:
        globals_line = [line.strip() for line in str(error).splitlines() if "GLOBAL" in line]
        if trusted or not globals_line:
            raise _damaged(path, error, size) from error
        raise CheckpointLoadError(
            f"cannot load {path!r} with weights_only=True: the file holds pickled objects "
            "other than tensors, such as a whole module saved with torch.save(model) by "
            "Machin 0.3.4. Unpickling it can run arbitrary code from the file. If you "
            "trust the file, load it with trusted=True (prep_load_model(..., trusted=True), "
            "or the algorithm's load(..., trusted=True)). torch.load said: "
            + globals_line[0]
            .split(" was not an allowed global")[0]
            .replace("WeightsUnpickler error: ", "")[:200]
        ) from error
    except (OSError, MemoryError):
        raise
    except (
        Exception
    ) as error:  # torch raises RuntimeError, EOFError, ValueError... for damaged files
        raise _damaged(path, error, size) from error
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


def _read_manifests(model_dir: str) -> Dict[int, List[Tuple[str, Optional[Dict[str, Any]]]]]:
    """Every manifest in the directory by version; an unreadable one is ``(path, None)``."""
    manifests: Dict[int, List[Tuple[str, Optional[Dict[str, Any]]]]] = {}
    for file_name in sorted(os.listdir(model_dir)):
        match = MANIFEST_FILE_PATTERN.match(file_name)
        if not match:
            continue
        path = os.path.join(model_dir, file_name)
        try:
            with open(path, "rb") as file:
                content = json.loads(file.read().decode())
            if (
                not isinstance(content, dict)
                or content.get("format") != _MANIFEST_FORMAT
                or not isinstance(content.get("files"), dict)
            ):
                content = None
        except (OSError, ValueError):
            content = None
        manifests.setdefault(int(match.group(2)), []).append((path, content))
    return manifests


class _Version:
    """What a directory holds of one version for a set of needed files."""

    def __init__(
        self,
        version: int,
        complete: bool,
        reason: str = "",
        manifest: str = "",
        entries: Optional[Dict[str, Any]] = None,
        present: bool = True,
    ):
        self.version = version
        self.complete = complete
        self.reason = reason
        self.manifest = manifest
        self.entries = entries
        #: Whether the version shows up at all (a file or a manifest of it).
        self.present = present
        #: Whether a manifest governs this version (else it is a manifest-less version).
        self.managed = entries is not None or bool(manifest)


def _version_state(
    model_dir: str,
    names: Sequence[str],
    version: int,
    manifests: Mapping[int, List[Tuple[str, Optional[Dict[str, Any]]]]],
    optional: Sequence[str] = (),
) -> _Version:
    """Whether ``version`` of the files ``names`` is complete (rules in the module docstring).

    Files of ``optional`` names are checked like the others when present, but may be absent.
    """
    needed = [f"{name}_{version}.pt" for name in list(names) + list(optional)]
    optional_files = {f"{name}_{version}.pt" for name in optional}
    entries: Dict[str, Any] = {}
    listed_by: Dict[str, str] = {}
    for path, content in manifests.get(version, []):
        if content is None:
            stem = MANIFEST_FILE_PATTERN.match(os.path.basename(path)).group(1)
            if stem in names or stem in optional:
                return _Version(version, False, f"its manifest {path!r} is unreadable", path)
            continue
        mentioned = [file_name for file_name in needed if file_name in content["files"]]
        if mentioned and content.get("complete") is not True:
            return _Version(
                version,
                False,
                f"its save was interrupted (the manifest {path!r} is still in progress)",
                path,
            )
        for file_name in mentioned:
            entry = content["files"][file_name]
            if isinstance(entry, dict):
                entries[file_name] = entry
                listed_by[file_name] = path
    missing = []
    for file_name in needed:
        file_path = os.path.join(model_dir, file_name)
        if file_name in entries:
            expected = entries[file_name].get("size")
            if not os.path.isfile(file_path):
                return _Version(
                    version,
                    False,
                    f"{file_path!r} listed in {listed_by[file_name]!r} is missing",
                    listed_by[file_name],
                )
            actual = os.path.getsize(file_path)
            if expected != actual:
                return _Version(
                    version,
                    False,
                    f"{file_path!r} has {actual} bytes but its manifest {listed_by[file_name]!r} "
                    f"says {expected}",
                    listed_by[file_name],
                )
        elif not os.path.isfile(file_path) and file_name not in optional_files:
            missing.append(file_name)
    if missing:
        # a file no manifest mentions is absent: the version was never saved for that model
        return _Version(
            version,
            False,
            f"files {missing} are missing",
            present=len(missing) < len(needed) - len(optional_files),
        )
    manifest = sorted(set(listed_by.values()))
    return _Version(
        version, True, manifest=", ".join(manifest), entries=entries if entries else None
    )


def _read_version(
    model_dir: str,
    model_map: Mapping[str, nn.Module],
    state: _Version,
    trusted: bool,
    extra: Sequence[str],
) -> Tuple[Dict[str, Mapping[str, Any]], Dict[str, Any]]:
    """Read and check every file of a version; nothing is changed yet."""

    def read(name: str) -> Any:
        file_name = f"{name}_{state.version}.pt"
        path = os.path.join(model_dir, file_name)
        entry = state.entries.get(file_name) if state.entries is not None else None
        if entry is None:
            return _read_checkpoint(path, trusted)
        with open(path, "rb") as file:
            data = file.read()
        if len(data) != entry.get("size") or hashlib.sha256(data).hexdigest() != entry.get(
            "sha256"
        ):
            error = CheckpointLoadError(
                f"cannot read the checkpoint file {path!r}: its content does not match its "
                f"manifest {state.manifest!r} (size {len(data)}, expected {entry.get('size')}; "
                "the file was damaged or overwritten after the save)"
            )
            error.damaged = True
            raise error
        return _read_checkpoint(path, trusted, data)

    fitted = {}
    for name, model in model_map.items():
        path = prep_model_path(model_dir, name, state.version)
        content = read(name)
        try:
            fitted[name] = _fit_state_dict(model, content)
        except (RuntimeError, TypeError) as error:
            kind = StateDictMismatchError if isinstance(error, KeyError) else RuntimeError
            raise kind(f"model {name!r} (file {path!r}): {error}") from error
    extras = {}
    for name in extra:
        file_name = f"{name}_{state.version}.pt"
        present = file_name in (state.entries or {}) or os.path.isfile(
            os.path.join(model_dir, file_name)
        )
        extras[name] = read(name) if present else None
    return fitted, extras


def prep_load_checkpoint(
    model_dir: PathLike,
    model_map: Mapping[str, nn.Module],
    version: Optional[int] = None,
    quiet: bool = False,
    logger: Optional[Any] = None,
    *,
    trusted: bool = False,
    extra: Sequence[str] = (),
) -> Optional[Tuple[int, Dict[str, Any]]]:
    """Load one complete version into several models; also read extra files of that version.

    Same as :func:`prep_load_model` (see there for the rules and errors), and also reads
    the ``extra`` files of the chosen version.

    Args:
        model_dir: Directory holding the checkpoints.
        model_map: Module to load into for each file name (without version).
        version: Version to load; ``None`` (or negative) for the newest complete one.
        quiet: When no usable version exists (or the directory is missing), log a
            warning and return ``None`` instead of raising.
        logger: Logger for progress and warnings; :data:`~machin.utils.logging.default_logger`
            when ``None``.
        trusted: Also accept files holding pickled objects (0.3.4 whole modules);
            **unpickling can run code from the file**, see :func:`prep_load_model`.
        extra: Names of further files (``<name>_<version>.pt``) saved with the version,
            read (and checked against the manifest) with the models' files but not
            loaded into a model. A name missing from the chosen version gives ``None``.

    Returns:
        ``(version, {extra name: content or None})``, or ``None`` when nothing was
        loaded (only with ``quiet``).
    """
    logger = default_logger if logger is None else logger
    _check_load_arguments(model_dir, model_map, version, extra)
    try:
        available = prep_list_model_versions(model_dir)
    except RuntimeError:
        if quiet:
            logger.warning(
                f"Model directory doesn't exist: {os.fspath(model_dir)!r}; nothing loaded"
            )
            return None
        raise
    loader = _VersionLoader(os.fspath(model_dir), model_map, available, logger, trusted, extra)
    requested = None if version is None or version < 0 else version
    if requested is not None:
        state = loader.state_of(requested)
        if state.complete:
            return requested, loader.load(state)
        if state.managed:
            raise RuntimeError(
                f"cannot load version {requested} from {loader.model_dir!r}: the version is incomplete, "
                f"{state.reason}"
            )
    loaded = loader.load_newest(requested)
    if loaded is not None:
        return loaded
    message = loader.nothing_found()
    if quiet:
        logger.warning(message + ", nothing loaded")
        return None
    raise RuntimeError(message)


def _check_load_arguments(
    model_dir: PathLike, model_map: Mapping[str, nn.Module], version: Any, extra: Sequence[str]
) -> None:
    """The argument checks of :func:`prep_load_checkpoint`."""
    _check_model_map(model_map)
    if not model_map:
        raise ValueError("model_map must name at least one model, got an empty mapping")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise TypeError(
            f"version must be an int or None, got {version!r} of type {type(version).__name__}"
        )
    for name in extra:
        prep_model_path(model_dir, name, 0)


class _VersionLoader:
    """Finds the complete versions of a set of models in one directory and loads one of them."""

    def __init__(
        self,
        model_dir: str,
        model_map: Mapping[str, nn.Module],
        available: Mapping[str, List[int]],
        logger: Any,
        trusted: bool,
        extra: Sequence[str],
    ) -> None:
        self.model_dir = model_dir
        self.model_map = model_map
        self.names = list(model_map)
        self.available = available
        self.logger = logger
        self.trusted = trusted
        self.extra = extra
        self.manifests = _read_manifests(model_dir)
        #: Versions that were passed over, each with the reason, for the warnings and errors.
        self.skipped: List[str] = []

    def state_of(self, version: int) -> _Version:
        return _version_state(
            self.model_dir, self.names, version, self.manifests, optional=self.extra
        )

    def load(self, state: _Version) -> Dict[str, Any]:
        """Read every file of ``state``, then load the models; returns the extra files' contents."""
        fitted, extras = _read_version(
            self.model_dir, self.model_map, state, self.trusted, self.extra
        )
        # every file is read and fits its model: only now is any model changed
        for name, model in self.model_map.items():
            model.load_state_dict(fitted[name])
            path = prep_model_path(self.model_dir, name, state.version)
            self.logger.info(f"loaded model {name!r} version {state.version} from {path!r}")
        return extras

    def load_newest(self, requested: Optional[int]) -> Optional[Tuple[int, Dict[str, Any]]]:
        """Load the newest complete, undamaged version; ``None`` when there is none."""
        candidates = set(self.manifests)
        for name in self.names:
            candidates.update(self.available.get(name, ()))
        for v in sorted(candidates, reverse=True):
            state = self.state_of(v)
            if not state.complete:
                if state.managed:
                    self.skipped.append(f"version {v} (incomplete: {state.reason})")
                continue
            try:
                extras = self.load(state)
            except CheckpointLoadError as error:
                if not getattr(error, "damaged", False):
                    raise  # pickled objects (needs trusted=True): an older version would be no better
                self.skipped.append(f"version {v} ({error})")
                continue
            self._warn_loaded(v, requested)
            return v, extras
        return None

    def _warn_loaded(self, v: int, requested: Optional[int]) -> None:
        """Say that version ``v`` was loaded instead of the requested one or of newer damaged ones."""
        if requested is not None:
            lacking = [name for name in self.names if requested not in self.available.get(name, ())]
            self.logger.warning(
                f"Specified version {requested} is invalid: version {requested} is missing for "
                f"models {lacking} in {self.model_dir!r}; "
                f"loading the newest common version {v} instead"
            )
        if self.skipped:
            self.logger.warning(
                f"Loaded version {v} from {self.model_dir!r}, the newest complete one; skipped "
                + "; ".join(self.skipped)
            )

    def nothing_found(self) -> str:
        """The message when no version could be loaded."""
        detail = {name: self.available.get(name, []) for name in self.model_map}
        message = (
            f"Cannot find a valid version for all models in {self.model_dir!r}; "
            f"versions found per model: {detail}"
        )
        if self.skipped:
            message += "; skipped " + "; ".join(self.skipped)
        return message


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

    Only versions complete for *every* name in ``model_map`` are usable (see the
    module documentation: a version with a manifest must have a complete manifest
    listing every file, with matching sizes and checksums; a version without one
    must have every file). With ``version=None`` (or a negative version) the newest
    usable version is loaded; newer versions that are incomplete or damaged are
    skipped with a warning that names them. When a requested version is not present
    for every model (and no manifest of it exists), a warning is logged and the
    newest usable version is loaded instead; a requested version that a manifest
    shows to be incomplete, or whose files are damaged, raises. Example: with
    ``actor_target_{0,100,1000}.pt`` and ``critic_target_{0,100}.pt`` (no manifests),
    version 100 is loaded.

    Every file of the version is read and checked against its model before any
    model is changed: a failure leaves all models as they were.

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
        RuntimeError: When ``model_dir`` does not exist or no usable version is
            present for every model (unless ``quiet``), when a requested version is
            incomplete, or when a checkpoint does not fit its model (the message names
            the model, the file and the parameter).
        StateDictMismatchError: When keys are missing or unexpected or shapes differ
            (a :class:`RuntimeError`).
        CheckpointLoadError: When a file is damaged (empty, truncated, not a checkpoint,
            not matching its manifest) and no older complete version can be loaded
            instead, or holds pickled objects (a 0.3.4 whole-module checkpoint, for
            instance) and ``trusted`` is false; the message names the file and, for
            pickled objects, says how to opt in. It is a :class:`RuntimeError`.
        TypeError: When ``model_map`` does not map names to modules, or ``version``
            is not an int.
        ValueError: When ``model_map`` is empty.
    """
    result = prep_load_checkpoint(model_dir, model_map, version, quiet, logger, trusted=trusted)
    return None if result is None else result[0]
