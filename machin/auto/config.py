"""Launcher configs: an algorithm config plus the environment and the training loop.

A launcher config is a dict (a JSON or YAML file) with these keys:

``frame``, ``frame_config``
    The algorithm and how to build it (:mod:`machin.frame.algorithms.config`).
``env``, ``env_kwargs``
    A gymnasium id and the keyword arguments of ``gymnasium.make``.
``trainer_config``
    Keyword options of :class:`~machin.frame.trainer.Trainer` (those a file can hold:
    numbers, strings, lists and dicts).
``max_episodes``, ``max_steps``
    The limits of the run (``None`` for no limit; at least one is set).
``seed``
    Seed of :func:`machin.utils.seed` and of the trainer (``None``: not seeded).
``root_dir``
    Folder in which ``train`` makes a run directory when none is given.
``trackers``
    Experiment trackers that ``train`` also logs to, a list of :data:`TRACKERS` names
    (:mod:`machin.frame.trackers`; optional, default none).
``tune``
    The search space of ``python -m machin.auto tune`` (:mod:`machin.auto.tune`; optional,
    ignored by ``train``).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

import machin.frame.algorithms as algorithms
from machin.frame.algorithms.base import TorchFramework
from machin.frame.algorithms.config import ConfigError

NETWORKS = "machin.auto.networks."

#: Trainer options a config may hold (the others take Python objects).
TRAINER_KEYS = (
    "act_method",
    "act_kwargs",
    "eval_act_method",
    "eval_act_kwargs",
    "store",
    "updates_per_step",
    "updates_per_episode",
    "train_freq",
    "gradient_steps",
    "rollout_steps",
    "warmup_steps",
    "random_steps",
    "state_key",
    "eval_interval",
    "eval_every_steps",
    "eval_episodes",
    "smoothing",
    "solved_reward",
    "solved_repeat",
    "tensorboard",
    "progress",
    "save_every",
)
TOP_KEYS = (
    "frame",
    "frame_config",
    "env",
    "env_kwargs",
    "trainer_config",
    "max_episodes",
    "max_steps",
    "seed",
    "root_dir",
    "trackers",
    "tune",
)
#: Experiment trackers a config may name in ``trackers``.
TRACKERS = ("mlflow", "wandb")

DISCRETE_ONLY = ("DQN", "DQNPer", "RAINBOW")
BOX_ONLY = ("DDPG", "DDPGPer", "HDDPG", "TD3", "SAC")
BOTH_SPACES = ("A2C", "PPO", "TRPO")
#: Algorithms ``generate`` makes default networks for.
SUPPORTED = DISCRETE_ONLY + BOX_ONLY + BOTH_SPACES


def algorithm_class(name: Any) -> type:
    """The algorithm class of ``machin.frame.algorithms`` called ``name``."""
    cls = getattr(algorithms, name, None) if isinstance(name, str) else None
    if not (
        isinstance(cls, type) and issubclass(cls, TorchFramework) and cls is not TorchFramework
    ):
        raise ConfigError(
            f"frame: {name!r} is not an algorithm of machin.frame.algorithms; "
            f"generate supports {list(SUPPORTED)}"
        )
    return cls


def _spaces(env_id: str, env_kwargs: Dict[str, Any]) -> Tuple[gym.Space, gym.Space]:
    try:
        env = gym.make(env_id, **env_kwargs)
    except gym.error.Error as error:
        raise ConfigError(f"env: gymnasium cannot make {env_id!r}: {error}") from error
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _state_dim(space: gym.Space, env_id: str) -> int:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ConfigError(
            f"env: the default networks need a flat Box observation space, {env_id!r} has {space}"
        )
    return int(space.shape[0])


def _box_bounds(space: gym.spaces.Box, env_id: str) -> Tuple[List[float], List[float]]:
    if len(space.shape) != 1 or not (
        np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
    ):
        raise ConfigError(
            f"env: the default networks need a flat, bounded Box action space, "
            f"{env_id!r} has {space}"
        )
    return [float(v) for v in space.low], [float(v) for v in space.high]


def _network_kwargs(
    algo: str, state_dim: int, action_space: gym.Space, env_id: str
) -> Dict[str, Any]:
    """``frame_config`` entries with the default networks of ``algo`` for these spaces."""
    discrete = isinstance(action_space, gym.spaces.Discrete)
    box = isinstance(action_space, gym.spaces.Box)
    if (discrete and algo in BOX_ONLY) or (box and algo in DISCRETE_ONLY) or not (discrete or box):
        wanted = (
            "Discrete"
            if algo in DISCRETE_ONLY
            else "Box"
            if algo in BOX_ONLY
            else "Discrete or Box"
        )
        raise ConfigError(
            f"env: {algo} needs a {wanted} action space, {env_id!r} has {action_space}"
        )
    if discrete:
        action = {"state_dim": state_dim, "action_num": int(action_space.n)}
        if algo in BOTH_SPACES:
            return _models(
                [("CategoricalActor", action), ("ValueCritic", {"state_dim": state_dim})]
            )
        name = "DistributionalQNet" if algo == "RAINBOW" else "QNet"
        return _models([(name, action)] * 2)
    low, high = _box_bounds(action_space, env_id)
    critic = {"state_dim": state_dim, "action_dim": len(low)}
    bounded = {**critic, "low": low, "high": high}
    if algo in BOTH_SPACES:
        return _models([("GaussianActor", critic), ("ValueCritic", {"state_dim": state_dim})])
    if algo == "SAC":
        return _models([("SquashedGaussianActor", bounded)] + [("QCritic", critic)] * 4)
    critics = 4 if algo == "TD3" else 2
    return _models([("DeterministicActor", bounded)] * 2 + [("QCritic", critic)] * critics)


def _models(networks: List[Tuple[str, Dict[str, Any]]]) -> Dict[str, Any]:
    return {
        "models": [NETWORKS + name for name, _ in networks],
        "model_args": [[] for _ in networks],
        "model_kwargs": [copy.deepcopy(kwargs) for _, kwargs in networks],
    }


def generate(
    algo: str,
    env_id: str,
    env_kwargs: Optional[Dict[str, Any]] = None,
    max_steps: int = 50000,
    seed: Optional[int] = 0,
    root_dir: str = "runs",
) -> Dict[str, Any]:
    """A launcher config training ``algo`` on the gymnasium environment ``env_id`` with
    default networks (:mod:`machin.auto.networks`) sized for its spaces.

    Args:
        algo: An algorithm name of :data:`SUPPORTED`.
        env_id: A gymnasium id.
        env_kwargs: Keyword arguments of ``gymnasium.make``.
        max_steps: Step limit of the run.
        seed: Seed of the run (``None``: not seeded).
        root_dir: Folder in which ``train`` makes run directories.

    Raises:
        ConfigError: For an algorithm without default networks, an id gymnasium does not
            know, or spaces the default networks do not fit.
    """
    if algo not in SUPPORTED:
        raise ConfigError(f"--algo: generate supports {list(SUPPORTED)}, got {algo!r}")
    env_kwargs = dict(env_kwargs or {})
    observation_space, action_space = _spaces(env_id, env_kwargs)
    frame_config = _network_kwargs(
        algo, _state_dim(observation_space, env_id), action_space, env_id
    )
    if algo == "RAINBOW":
        frame_config.update(value_min=-100.0, value_max=100.0)
    config = algorithm_class(algo).generate_config({"frame_config": frame_config})
    trainer_config = {
        "warmup_steps": 0 if algo in BOTH_SPACES else 1000,
        "eval_interval": 10,
        "eval_episodes": 5,
        "solved_reward": None,
        "progress": True,
        "tensorboard": True,
    }
    config.update(
        env=env_id,
        env_kwargs=env_kwargs,
        trainer_config=trainer_config,
        max_episodes=None,
        max_steps=max_steps,
        seed=seed,
        root_dir=root_dir,
    )
    return config


def validate(config: Any) -> Dict[str, Any]:
    """Check the keys of a launcher config that the algorithm does not check itself.

    Returns:
        ``config``.

    Raises:
        ConfigError: Naming the first unknown, missing or ill-typed key.
    """
    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a dict (a JSON object), got {type(config).__name__}")
    unknown = sorted(set(config) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; a config has the keys {list(TOP_KEYS)}")
    for key in ("frame", "frame_config", "env"):
        if key not in config:
            raise ConfigError(f"the config lacks the key {key!r}")
    algorithm_class(config["frame"])
    _check_type(config, "env", str)
    for key in ("env_kwargs", "trainer_config", "tune"):
        _check_type(config, key, dict, optional=True)
    for key in ("max_episodes", "max_steps", "seed"):
        _check_type(config, key, int, optional=True)
    _check_type(config, "root_dir", str, optional=True)
    if config.get("max_episodes") is None and config.get("max_steps") is None:
        raise ConfigError(
            "the config sets neither 'max_episodes' nor 'max_steps'; set at least one"
        )
    unknown = sorted(set(config.get("trainer_config") or {}) - set(TRAINER_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown key trainer_config.{unknown[0]}; a config may set {list(TRAINER_KEYS)}"
        )
    _check_trackers(config.get("trackers"))
    return config


def _check_trackers(trackers: Any) -> None:
    """``trackers`` is ``None`` or a list of names of :data:`TRACKERS`, none twice."""
    if trackers is None:
        return
    if not isinstance(trackers, list):
        raise ConfigError(
            f"trackers must be a list of tracker names, got {trackers!r} of type "
            f"{type(trackers).__name__}"
        )
    for name in trackers:
        if name not in TRACKERS:
            raise ConfigError(
                f"trackers: unknown tracker {name!r}; the known trackers are {list(TRACKERS)}"
            )
    if len(set(trackers)) != len(trackers):
        raise ConfigError(f"trackers: a tracker is named twice in {trackers!r}")


def _check_type(config: Dict[str, Any], key: str, kind: type, optional: bool = False) -> None:
    value = config.get(key)
    if value is None and optional:
        return
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(
            f"{key} must be of type {kind.__name__}, got {value!r} of type {type(value).__name__}"
        )


def trainer_options(config: Dict[str, Any]) -> Dict[str, Any]:
    """The trainer options of ``config``, with JSON lists turned back into the tuples the
    trainer takes (``train_freq``)."""
    options = dict(config.get("trainer_config") or {})
    if isinstance(options.get("train_freq"), list):
        options["train_freq"] = tuple(options["train_freq"])
    return options


def env_maker(config: Dict[str, Any], **extra: Any) -> Callable[[], gym.Env]:
    """A function making the config's environment (``extra`` added to ``env_kwargs``)."""
    kwargs = {**(config.get("env_kwargs") or {}), **extra}
    return lambda: gym.make(config["env"], **kwargs)


def load(path: str) -> Dict[str, Any]:
    """Read a config from the JSON file ``path``, or from YAML (``.yaml`` / ``.yml``, needs PyYAML).

    Raises:
        ConfigError: If the file cannot be parsed.
    """
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if os.path.splitext(path)[1].lower() in (".yaml", ".yml"):
        yaml = _yaml(path)
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: not valid YAML: {error}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not valid JSON: {error}") from error


def save(config: Dict[str, Any], path: str) -> None:
    """Write ``config`` as JSON, or as YAML for a ``.yaml`` / ``.yml`` path (needs PyYAML)."""
    if os.path.splitext(path)[1].lower() in (".yaml", ".yml"):
        text = _yaml(path).safe_dump(config, sort_keys=False)
    else:
        text = json.dumps(config, indent=2) + "\n"
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)


def _yaml(path: str) -> Any:
    try:
        import yaml
    except ImportError as error:
        raise ConfigError(
            f"{path}: YAML configs need PyYAML (pip install pyyaml); use a .json path"
        ) from error
    return yaml
