"""The whole state of an algorithm in one file, for an exact resume of a training run.

:meth:`TorchFramework.save_state <machin.frame.algorithms.base.TorchFramework.save_state>`
and :meth:`~machin.frame.algorithms.base.TorchFramework.resume` use this module. A state
holds everything the algorithm's future depends on:

* every network of ``_is_top`` (targets included), every optimizer and learning-rate scheduler;
* every replay buffer (its :meth:`~machin.frame.buffers.buffer.Buffer.state_dict`);
* the tensors, ``torch.Generator`` states and plain values (numbers, strings, ``None``:
  counters such as ``updates_done``, options such as ``epsilon``) among the algorithm's
  attributes, and what a subclass adds with ``_extra_run_state``;
* the shared Ornstein-Uhlenbeck generator of
  :func:`~machin.frame.noise.action_space_noise.add_ou_noise_to_action`;
* the global torch, numpy and Python ``random`` generator states.

The file is written atomically, then a manifest ``<path>.manifest.json`` with its size and
SHA-256, last and atomically: a file without its manifest, or one that differs from it,
is never resumed from. It is read with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from typing import Any, BinaryIO, Dict, List, Mapping, Tuple

import numpy as np
import torch
from torch import nn

from ...utils.prepare import _write_atomic
from ..buffers import Buffer
from ..noise.action_space_noise import load_shared_ou_state, shared_ou_state

__all__ = [
    "RunStateError",
    "save_run_state",
    "resume_run_state",
    "algorithm_state",
    "write_run_state",
    "read_run_state",
    "load_run_state",
    "FORMAT",
]

#: Version of the layout of a state file.
FORMAT = 1
_PLAIN = (bool, int, float, str, type(None))


class RunStateError(ValueError, RuntimeError):
    """A run state that cannot be resumed from: incomplete, damaged, or of another algorithm or architecture."""


def _class_name(algorithm: Any) -> str:
    return f"{type(algorithm).__module__}.{type(algorithm).__qualname__}"


# -- global random generators ----------------------------------------------------------
def random_state() -> Dict[str, Any]:
    """The states of the global torch (CPU and, when initialised, CUDA), numpy and Python generators."""
    _, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    cuda = (
        torch.cuda.get_rng_state_all()
        if torch.cuda.is_available() and torch.cuda.is_initialized()
        else []
    )
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {
            "version": version,
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }


def set_random_state(state: Mapping[str, Any]) -> None:
    """Restore the global generators.

    Args:
        state: What :func:`random_state` returned.
    """
    torch.set_rng_state(state["torch"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
    numpy = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            numpy["keys"].numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"].tolist()), python["gauss_next"]))


# -- the parts of an algorithm ---------------------------------------------------------
def _parts(algorithm: Any) -> Dict[str, Dict[str, Any]]:
    """The algorithm's attributes that a state holds, by kind."""
    networks = {name: getattr(algorithm, name, None) for name in algorithm._is_top}
    networks = {name: net for name, net in networks.items() if isinstance(net, nn.Module)}
    parts: Dict[str, Dict[str, Any]] = {
        "networks": networks,
        "optimizers": {},
        "buffers": {},
        "tensors": {},
        "generators": {},
        "values": {},
    }
    for name, value in vars(algorithm).items():
        if name in networks:
            continue
        if isinstance(value, torch.optim.Optimizer):
            parts["optimizers"][name] = value
        elif isinstance(value, Buffer):
            parts["buffers"][name] = value
        elif isinstance(value, torch.Tensor):
            parts["tensors"][name] = value
        elif isinstance(value, torch.Generator):
            parts["generators"][name] = value
        elif isinstance(value, _PLAIN):
            parts["values"][name] = value
    return parts


def algorithm_state(algorithm: Any) -> Dict[str, Any]:
    """The state of ``algorithm`` (see the module docstring).

    Args:
        algorithm: The algorithm (a ``TorchFramework``).
    """
    parts = _parts(algorithm)
    return {
        "format": FORMAT,
        "class": _class_name(algorithm),
        "networks": {name: net.state_dict() for name, net in parts["networks"].items()},
        "optimizers": {name: opt.state_dict() for name, opt in parts["optimizers"].items()},
        "schedulers": [scheduler.state_dict() for scheduler in algorithm._lr_schedulers],
        "buffers": {name: buffer.state_dict() for name, buffer in parts["buffers"].items()},
        "tensors": {name: tensor.detach().clone() for name, tensor in parts["tensors"].items()},
        "generators": {name: gen.get_state() for name, gen in parts["generators"].items()},
        "values": dict(parts["values"]),
        "extra": algorithm._extra_run_state(),
        "noise": shared_ou_state(),
        "random": random_state(),
    }


def save_run_state(algorithm: Any, path: str) -> None:
    """Write the state of ``algorithm`` to ``path``, then its manifest (see the module docstring).

    Args:
        algorithm: The algorithm (a ``TorchFramework``).
        path: The file to write.
    """
    write_run_state(algorithm_state(algorithm), path)


def write_run_state(state: Mapping[str, Any], path: str) -> None:
    """Write a state (what :func:`algorithm_state` returned, possibly with more entries) to
    ``path`` atomically, then its manifest, last and atomically.

    ``torch.save`` writes each tensor's memory into the file as it is: the state's buffer
    columns, which share the buffers' memory, are not copied on the way.

    Args:
        state: The state.
        path: The file to write.
    """
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    size, sha256 = _write_atomic(path, lambda file: torch.save(state, file))
    manifest = {
        "format": FORMAT,
        "file": os.path.basename(path),
        "size": size,
        "sha256": sha256,
        "class": state["class"],
    }
    _write_atomic(
        _manifest_path(path), lambda file: file.write(json.dumps(manifest, indent=1).encode())
    )


def _manifest_path(path: str) -> str:
    return path + ".manifest.json"


# -- reading and checking --------------------------------------------------------------
def _read_manifest(path: str) -> Dict[str, Any]:
    manifest_path = _manifest_path(path)
    try:
        with open(manifest_path, "rb") as file:
            manifest = json.loads(file.read().decode())
    except FileNotFoundError:
        raise RunStateError(
            f"cannot resume from {path!r}: its manifest {manifest_path!r} is missing, so the "
            f"save did not complete (resume from an earlier save)"
        ) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise RunStateError(
            f"cannot resume from {path!r}: its manifest {manifest_path!r} is damaged ({error})"
        ) from None
    if not isinstance(manifest, dict) or not {"size", "sha256"} <= set(manifest):
        raise RunStateError(
            f"cannot resume from {path!r}: its manifest {manifest_path!r} lacks size and sha256"
        )
    return manifest


def _digest(file: BinaryIO) -> Tuple[int, str]:
    """The size and SHA-256 (hex) of an open file, read in blocks (never whole into memory)."""
    digest, size = hashlib.sha256(), 0
    for block in iter(lambda: file.read(1 << 20), b""):
        digest.update(block)
        size += len(block)
    return size, digest.hexdigest()


def read_run_state(path: str) -> Dict[str, Any]:
    """Read a state file after checking it against its manifest; raise :class:`RunStateError` naming the file.

    The file is hashed block by block, then loaded from the same open file, so only the
    loaded tensors take memory (not also the file's bytes).

    Args:
        path: The state file (its manifest is ``<path>.manifest.json``).
    """
    path = os.fspath(path)
    manifest = _read_manifest(path)
    try:
        with open(path, "rb") as file:
            size, sha256 = _digest(file)
            if size != manifest["size"] or sha256 != manifest["sha256"]:
                raise RunStateError(
                    f"cannot resume from {path!r}: the file is truncated or was changed after it was saved "
                    f"({size} bytes with SHA-256 {sha256[:12]}..., the manifest says {manifest['size']} bytes "
                    f"with SHA-256 {str(manifest['sha256'])[:12]}...)"
                )
            file.seek(0)
            state = _load(path, file)
    except OSError as error:
        raise RunStateError(f"cannot resume from {path!r}: {error.strerror or error}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise RunStateError(f"cannot resume from {path!r}: not a run state of format {FORMAT}")
    return state


def _load(path: str, file: BinaryIO) -> Any:
    try:
        return torch.load(file, weights_only=True)
    except Exception as error:  # noqa: BLE001 (any unpickling error means the same: not a state file)
        raise RunStateError(
            f"cannot resume from {path!r}: the file is not a run state ({error})"
        ) from None


def _same_names(path: str, what: str, saved: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    if list(saved) != list(mine):
        raise RunStateError(
            f"cannot resume from {path!r}: it holds the {what} {sorted(saved)}, "
            f"this algorithm has {sorted(mine)}"
        )


def _check_network(path: str, name: str, saved: Any, network: nn.Module) -> None:
    """Raise unless ``saved`` has the parameter names, shapes and dtypes of ``network``'s state dict."""
    mine = network.state_dict()
    theirs = saved if isinstance(saved, Mapping) else {}
    differ = sorted(
        k
        for k in mine.keys() | theirs.keys()
        if k not in mine
        or k not in theirs
        or not isinstance(theirs[k], torch.Tensor)
        or theirs[k].shape != mine[k].shape
        or theirs[k].dtype != mine[k].dtype
    )
    if differ:

        def shown(state: Mapping[str, Any], key: str) -> str:
            value = state.get(key)
            return (
                f"{list(value.shape)} {value.dtype}"
                if isinstance(value, torch.Tensor)
                else "missing"
            )

        raise RunStateError(
            f"cannot resume from {path!r}: network {name!r} has another architecture than the saved one: "
            + ", ".join(f"{k}: saved {shown(theirs, k)}, here {shown(mine, k)}" for k in differ[:4])
            + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
        )


def _check_optimizer(path: str, name: str, saved: Any, optimizer: torch.optim.Optimizer) -> None:
    groups = saved.get("param_groups") if isinstance(saved, Mapping) else None
    mine = [len(group["params"]) for group in optimizer.param_groups]
    theirs = (
        [len(group.get("params", ())) for group in groups] if isinstance(groups, list) else None
    )
    if theirs != mine:
        raise RunStateError(
            f"cannot resume from {path!r}: optimizer {name!r} was saved with parameter groups "
            f"of sizes {theirs}, here {mine}"
        )


def _check_random(path: str, state: Any) -> None:
    """Raise unless ``state`` has the form of :func:`random_state`."""
    try:
        well_formed = (
            state["torch"].dtype == torch.uint8
            and state["numpy"]["keys"].shape == (624,)
            and state["python"]["internal"].shape == (625,)
            and isinstance(state["cuda"], list)
        )
    except (KeyError, TypeError, AttributeError):
        well_formed = False
    if not well_formed:
        raise RunStateError(
            f"cannot resume from {path!r}: its random generator states are malformed"
        )


def _check_values(path: str, values: Any, taken: List[str]) -> None:
    """Plain values may only set attributes that hold no network, optimizer, buffer or tensor."""
    if not isinstance(values, Mapping):
        raise RunStateError(f"cannot resume from {path!r}: its values are not a mapping")
    for name, value in values.items():
        if not isinstance(name, str) or name in taken or not isinstance(value, _PLAIN):
            raise RunStateError(
                f"cannot resume from {path!r}: value {name!r} = {value!r:.60} would replace an "
                f"attribute that is not a plain value"
            )


def check_run_state(
    algorithm: Any, state: Mapping[str, Any], path: str
) -> Dict[str, Dict[str, Any]]:
    """Raise :class:`RunStateError` unless ``state`` fits ``algorithm``; changes nothing. Returns its parts.

    Args:
        algorithm: The algorithm to resume.
        state: What :func:`read_run_state` returned.
        path: The file it came from (named in the errors).
    """
    if state.get("class") != _class_name(algorithm):
        raise RunStateError(
            f"cannot resume from {path!r}: it is the state of a {state.get('class')}, "
            f"this algorithm is a {_class_name(algorithm)}"
        )
    parts = _parts(algorithm)
    for kind in ("networks", "optimizers", "buffers", "tensors", "generators"):
        _same_names(path, kind, state.get(kind) or {}, parts[kind])
    for name, network in parts["networks"].items():
        _check_network(path, name, state["networks"][name], network)
    for name, optimizer in parts["optimizers"].items():
        _check_optimizer(path, name, state["optimizers"][name], optimizer)
    if len(state.get("schedulers", ())) != len(algorithm._lr_schedulers):
        raise RunStateError(
            f"cannot resume from {path!r}: it holds {len(state.get('schedulers', ()))} "
            f"learning-rate schedulers, this algorithm has {len(algorithm._lr_schedulers)}"
        )
    for name, buffer in parts["buffers"].items():
        try:
            buffer.check_state_dict(state["buffers"][name])
        except ValueError as error:
            raise RunStateError(f"cannot resume from {path!r}: buffer {name!r}: {error}") from None
    for name, tensor in parts["tensors"].items():
        saved = state["tensors"][name]
        if (
            not isinstance(saved, torch.Tensor)
            or saved.shape != tensor.shape
            or saved.dtype != tensor.dtype
        ):
            raise RunStateError(
                f"cannot resume from {path!r}: tensor {name!r} differs in shape or dtype "
                f"from the saved one"
            )
    _check_random(path, state.get("random"))
    taken = [
        name
        for kind in ("networks", "optimizers", "buffers", "tensors", "generators")
        for name in parts[kind]
    ]
    _check_values(
        path,
        state.get("values"),
        taken + [n for n, v in vars(algorithm).items() if not isinstance(v, _PLAIN)],
    )
    return parts


def _apply(algorithm: Any, state: Mapping[str, Any], parts: Dict[str, Dict[str, Any]]) -> None:
    """Load a checked state into ``algorithm``."""
    for name, network in parts["networks"].items():
        network.load_state_dict(state["networks"][name])
    for name, optimizer in parts["optimizers"].items():
        optimizer.load_state_dict(state["optimizers"][name])
    for scheduler, saved in zip(algorithm._lr_schedulers, state["schedulers"]):
        scheduler.load_state_dict(saved)
    for name, buffer in parts["buffers"].items():
        buffer._load_checked_state(state["buffers"][name])
    with torch.no_grad():
        for name, tensor in parts["tensors"].items():
            tensor.copy_(state["tensors"][name])
    for name, generator in parts["generators"].items():
        generator.set_state(state["generators"][name])
    for name in set(parts["values"]) - set(state["values"]):
        del algorithm.__dict__[name]  # made after the save (e.g. a lazily created counter)
    algorithm.__dict__.update(state["values"])
    algorithm._load_extra_run_state(state.get("extra") or {})
    load_shared_ou_state(state.get("noise"))
    set_random_state(state["random"])


def resume_run_state(algorithm: Any, path: str) -> None:
    """Read, check, then load the state at ``path`` into ``algorithm`` (see the module docstring).

    Args:
        algorithm: The algorithm (a ``TorchFramework``), built as the saved one was.
        path: A file written by :func:`save_run_state`.
    """
    path = os.fspath(path)
    load_run_state(algorithm, read_run_state(path), path)


def load_run_state(algorithm: Any, state: Mapping[str, Any], path: str) -> None:
    """Check ``state`` (read by :func:`read_run_state`) against ``algorithm``, then load it.

    On an error (a :class:`RunStateError` naming ``path``) nothing of the algorithm changed.

    Args:
        algorithm: The algorithm (a ``TorchFramework``), built as the saved one was.
        state: The state.
        path: The file it came from (named in the errors).
    """
    parts = check_run_state(algorithm, state, path)
    algorithm._check_extra_run_state(state.get("extra") or {}, path)
    _apply(algorithm, state, parts)
