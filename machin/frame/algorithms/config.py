"""Algorithm configs: plain dicts that describe how to build an algorithm.

A config is what Machin 0.4 called an algorithm config: a dict that survives a trip
through JSON (or YAML), with two keys

``"frame"``
    The algorithm's class name (``"PPO"``).
``"frame_config"``
    How to build it:

    * ``"models"``: one importable class path per network of the constructor, in the
      constructor's order (``"machin.auto.networks.QNet"``); ``"model_args"`` and
      ``"model_kwargs"``: the arguments of each network's constructor.
    * ``"optimizer"``: a class of :mod:`torch.optim` by name (``"Adam"``) or a class path.
    * ``"criterion"`` (for algorithms that take one): a loss of :mod:`torch.nn` by name
      (``"MSELoss"``) or a class path, built with ``"criterion_args"`` and
      ``"criterion_kwargs"``.
    * ``"lr_scheduler"``: ``None``, a scheduler of :mod:`torch.optim.lr_scheduler` by name
      or a class path; its arguments stay in the options ``"lr_scheduler_args"`` /
      ``"lr_scheduler_kwargs"``.
    * every other positional value of the constructor by its name (RAINBOW's
      ``"value_min"`` and ``"value_max"``) and every keyword option by its name.

:func:`generate_config` fills in what a config lacks and :func:`init_from_config` builds
the algorithm, raising :class:`ConfigError` that names the key at fault. Both are also
classmethods of every algorithm (``PPO.generate_config({})``). This module does not import
the algorithms: it works on the class it is given.
"""

from __future__ import annotations

import copy
import importlib
import inspect
from typing import Any, Dict, List, Optional

import torch
from torch import nn

from .options import option_specs
from .replay import PrioritizedReplayMixin

#: Keys of ``frame_config`` that are not options of the algorithm.
MODEL_KEYS = ("models", "model_args", "model_kwargs")
OPTIMIZER_KEY = "optimizer"
CRITERION_KEYS = ("criterion", "criterion_args", "criterion_kwargs")
#: Placeholder class names by network role, as Machin 0.4 wrote them (they must be replaced
#: by importable class paths before :func:`init_from_config`).
_PLACEHOLDERS = (("qnet", "QNet"), ("actor", "Actor"), ("critic", "Critic"))


class ConfigError(ValueError):
    """A config that cannot build an algorithm; the message names the key at fault."""


class ConstructorLayout:
    """The positional parameters of an algorithm's constructor, sorted by kind.

    Attributes:
        networks: Names of the network parameters, in order.
        values: Names of the other positional values (e.g. RAINBOW's ``value_min``).
        has_criterion: Whether the constructor takes a criterion.
        order: All positional parameter names, in order.
    """

    def __init__(self, algorithm: type):
        self.networks: List[str] = []
        self.values: List[str] = []
        self.order: List[str] = []
        self.has_criterion = False
        unsupported = []
        for param in list(inspect.signature(algorithm.__init__).parameters.values())[1:]:
            if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                continue
            self.order.append(param.name)
            annotation = str(param.annotation)
            if param.name == "optimizer":
                continue
            if param.name == "criterion":
                self.has_criterion = True
            elif (
                annotation in ("nn.Module", "Optional[nn.Module]") or param.annotation is nn.Module
            ):
                self.networks.append(param.name)
            elif annotation in ("float", "int") or param.annotation in (float, int):
                self.values.append(param.name)
            else:
                unsupported.append(param.name)
        if unsupported or not self.networks:
            raise NotImplementedError(
                f"{algorithm.__name__} cannot be built from a config yet: its constructor needs "
                f"{unsupported or 'no network'} (distributed and multi-agent algorithms are not supported)"
            )


def _placeholder(network: str) -> str:
    """Machin 0.4's placeholder class name for a network parameter."""
    for prefix, name in _PLACEHOLDERS:
        if network.startswith(prefix):
            return name
    return "Network"


def _json_value(value: Any) -> Any:
    """``value`` as JSON gives it back: tuples become lists (inside dicts and lists too)."""
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    return value


def default_frame_config(algorithm: type) -> Dict[str, Any]:
    """The ``frame_config`` of ``algorithm`` with every default: placeholder networks
    without arguments, Adam, ``MSELoss`` (unreduced for prioritized replay), the positional
    values at 0.4's defaults and every option at its default."""
    layout = ConstructorLayout(algorithm)
    frame_config: Dict[str, Any] = {
        "models": [_placeholder(name) for name in layout.networks],
        "model_args": [[] for _ in layout.networks],
        "model_kwargs": [{} for _ in layout.networks],
        "optimizer": "Adam",
    }
    if layout.has_criterion:
        # prioritized replay weights each sample's loss, so it needs the losses unreduced
        per_sample = issubclass(algorithm, PrioritizedReplayMixin)
        frame_config.update(
            criterion="MSELoss",
            criterion_args=[],
            criterion_kwargs={"reduction": "none"} if per_sample else {},
        )
    value_defaults = {"value_min": -1.0, "value_max": 1.0}
    for name in layout.values:
        frame_config[name] = value_defaults.get(name, 0.0)
    for name, option in option_specs(algorithm).items():
        frame_config[name] = _json_value(option.default)
    return frame_config


def generate_config(algorithm: type, config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """A complete config of ``algorithm``: ``config`` (not modified) with what it lacks.

    Keys already in ``config["frame_config"]`` keep their values; the others get their
    defaults (see :func:`default_frame_config`). Other top-level keys are kept.

    Args:
        algorithm: An algorithm class (``machin.frame.algorithms.PPO``).
        config: A config to complete, or ``None``.

    Returns:
        A new dict with ``"frame"`` set to the class name and a complete ``"frame_config"``.

    Raises:
        ConfigError: If ``config`` or its ``frame_config`` is not a dict, or names another
            algorithm.
        NotImplementedError: For algorithms whose constructor needs more than networks,
            an optimizer, a criterion and plain values (the distributed ones).
    """
    config = {} if config is None else config
    _expect_dict("config", config)
    frame = config.get("frame", algorithm.__name__)
    if frame != algorithm.__name__:
        raise ConfigError(
            f"config['frame'] is {frame!r}, but the config is for {algorithm.__name__}"
        )
    given = config.get("frame_config", {})
    _expect_dict("frame_config", given)
    result = {"frame": algorithm.__name__, **copy.deepcopy(config)}
    result["frame"] = algorithm.__name__
    result["frame_config"] = {**default_frame_config(algorithm), **copy.deepcopy(given)}
    return result


def init_from_config(algorithm: type, config: Dict[str, Any], model_device: Any = "cpu") -> Any:
    """Build ``algorithm`` from ``config`` (see the module's description of the keys).

    Networks are made with their arguments and moved to ``model_device``; the options
    are checked by the algorithm's constructor, and a bad one is reported with its key.

    Args:
        algorithm: The algorithm class.
        config: A config, e.g. one of :func:`generate_config` written to JSON and read back.
        model_device: Device of the networks.

    Returns:
        The algorithm.

    Raises:
        ConfigError: For an unknown or missing key, a class path that does not import, a
            network that cannot be built, or an option the algorithm refuses.
    """
    _expect_dict("config", config)
    frame = config.get("frame", algorithm.__name__)
    if frame != algorithm.__name__:
        raise ConfigError(
            f"config['frame'] is {frame!r}, but init_from_config was called on {algorithm.__name__}"
        )
    if "frame_config" not in config:
        raise ConfigError(f"config of {algorithm.__name__} lacks the key 'frame_config'")
    frame_config = config["frame_config"]
    _expect_dict("frame_config", frame_config)
    layout = ConstructorLayout(algorithm)
    options = _split_options(algorithm, layout, frame_config)
    positional = _positional_arguments(layout, frame_config, model_device)
    if frame_config.get("lr_scheduler") is not None:
        options["lr_scheduler"] = resolve_class(
            frame_config["lr_scheduler"], "frame_config.lr_scheduler", torch.optim.lr_scheduler
        )
    try:
        return algorithm(*positional, **options)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"frame_config of {algorithm.__name__} refused: {error}") from error


def _expect_dict(key: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a dict, got {value!r} of type {type(value).__name__}")


def _split_options(
    algorithm: type, layout: ConstructorLayout, frame_config: Dict[str, Any]
) -> Dict[str, Any]:
    """The keyword options of ``frame_config``, after checking that every key is known."""
    specs = option_specs(algorithm)
    known = set(MODEL_KEYS) | {OPTIMIZER_KEY} | set(layout.values) | set(specs)
    if layout.has_criterion:
        known |= set(CRITERION_KEYS)
    unknown = sorted(set(frame_config) - known)
    if unknown:
        raise ConfigError(
            f"unknown key frame_config.{unknown[0]} for {algorithm.__name__}; "
            f"known keys are {sorted(known)}"
        )
    required = list(MODEL_KEYS) + [OPTIMIZER_KEY] + layout.values
    required += list(CRITERION_KEYS) if layout.has_criterion else []
    missing = [key for key in required if key not in frame_config]
    if missing:
        raise ConfigError(f"config of {algorithm.__name__} lacks the key frame_config.{missing[0]}")
    return {name: frame_config[name] for name in specs if name in frame_config}


def _positional_arguments(
    layout: ConstructorLayout, frame_config: Dict[str, Any], model_device: Any
) -> List[Any]:
    """The constructor's positional arguments, in order, made from ``frame_config``."""
    networks = dict(
        zip(layout.networks, build_networks(frame_config, len(layout.networks), model_device))
    )
    made: Dict[str, Any] = {
        **networks,
        "optimizer": resolve_class(
            frame_config["optimizer"], "frame_config.optimizer", torch.optim
        ),
    }
    if layout.has_criterion:
        made["criterion"] = _build_criterion(frame_config)
    for name in layout.values:
        made[name] = frame_config[name]
    return [made[name] for name in layout.order]


def build_networks(
    frame_config: Dict[str, Any], count: int, model_device: Any = "cpu"
) -> List[nn.Module]:
    """Make the ``count`` networks of ``frame_config`` (``models``, ``model_args``, ``model_kwargs``)
    on ``model_device``.

    Raises:
        ConfigError: If a list has another length than ``count``, a class path does not
            import or a network cannot be built with its arguments.
    """
    for key in MODEL_KEYS:
        value = frame_config[key]
        if not isinstance(value, (list, tuple)) or len(value) != count:
            raise ConfigError(
                f"frame_config.{key} must be a list of {count} entries "
                f"(one per network), got {value!r}"
            )
    networks = []
    for index, (path, args, kwargs) in enumerate(zip(*(frame_config[key] for key in MODEL_KEYS))):
        key = f"frame_config.models[{index}]"
        cls = resolve_class(path, key)
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
            raise ConfigError(f"{key}: {path!r} is not a torch.nn.Module class")
        networks.append(_construct(cls, args, kwargs, key).to(model_device))
    return networks


def _build_criterion(frame_config: Dict[str, Any]) -> Any:
    cls = resolve_class(frame_config["criterion"], "frame_config.criterion", nn)
    return _construct(
        cls,
        frame_config["criterion_args"],
        frame_config["criterion_kwargs"],
        "frame_config.criterion",
    )


def _construct(cls: type, args: Any, kwargs: Any, key: str) -> Any:
    """``cls(*args, **kwargs)``, a failure being reported with ``key``."""
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise ConfigError(
            f"{key}: arguments must be a list and a dict, got {args!r} and {kwargs!r}"
        )
    try:
        return cls(*args, **kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError(
            f"{key}: {cls.__name__}(*{args!r}, **{kwargs!r}) failed: {error}"
        ) from error


def resolve_class(name: Any, key: str, namespace: Any = None) -> Any:
    """The class (or callable) that ``name`` designates.

    Args:
        name: A class, a name of ``namespace`` (``"Adam"`` in :mod:`torch.optim`) or an
            importable path ``"package.module.Name"``.
        key: The config key, for the error message.
        namespace: A module searched for bare names.

    Raises:
        ConfigError: If nothing of that name can be imported.
    """
    if not isinstance(name, str):
        if callable(name):
            return name
        raise ConfigError(f"{key} must be a class name or an importable class path, got {name!r}")
    if (
        namespace is not None
        and "." not in name
        and inspect.isclass(getattr(namespace, name, None))
    ):
        return getattr(namespace, name)
    module_name, _, attribute = name.rpartition(".")
    where = (
        f" (a name of {namespace.__name__} or module.Class)"
        if namespace is not None
        else " (module.Class)"
    )
    if not module_name:
        raise ConfigError(f"{key}: {name!r} is not an importable class path{where}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"{key}: {name!r} does not import: {error}") from error
    if not hasattr(module, attribute):
        raise ConfigError(
            f"{key}: {name!r} does not import: module {module_name!r} has no {attribute!r}"
        )
    return getattr(module, attribute)
