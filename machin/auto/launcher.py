"""What the subcommands of ``python -m machin.auto`` do, as functions.

``train`` builds the algorithm of a launcher config (:mod:`machin.auto.config`) and trains
it with :class:`~machin.frame.trainer.Trainer` in a run directory; ``enjoy`` plays the
networks a run saved.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym

from machin.frame.algorithms.config import ConfigError
from machin.frame.trainer import Trainer, TrainResult
from machin.utils.media import create_video
from machin.utils.seeding import seed as seed_everything

from . import config as auto_config

CONFIG_FILE = "config.json"
RESULT_FILE = "result.json"
FINAL_DIR = "final"
#: Trainer options that matter when only playing.
_PLAY_KEYS = ("eval_act_method", "eval_act_kwargs", "state_key")


def build_framework(config: Dict[str, Any]) -> Any:
    """Seed (when the config has a ``seed``) and build the config's algorithm."""
    auto_config.validate(config)
    if config.get("seed") is not None:
        seed_everything(config["seed"])
    return auto_config.algorithm_class(config["frame"]).init_from_config(config)


def _make_trainer(framework: Any, config: Dict[str, Any], options: Dict[str, Any]) -> Trainer:
    """A trainer on the config's environment; a refused option becomes a :class:`ConfigError`."""
    try:
        return Trainer(framework, auto_config.env_maker(config), seed=config.get("seed"), **options)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"trainer_config refused by Trainer: {error}") from error


def tracker_loggers(config: Dict[str, Any], run_dir: str) -> List[Any]:
    """A logger (:mod:`machin.frame.trackers`) for every tracker the config's ``trackers`` names.

    Each logs into the run directory (MLflow's local store ``mlruns/``, W&B's offline
    ``wandb/``), in an experiment (project) named ``<frame>_<env>``, a run named as the run
    directory and the whole config, flattened, as the run's parameters.

    Args:
        config: The launcher config.
        run_dir: The run directory the trackers write into.

    Raises:
        ConfigError: If a tracker's package is not installed (the message says how to
            install it).
    """
    from machin.frame.trackers import MLflowLogger, WandbLogger, flat_params

    name = re.sub(r"[/\\#?%:]", "_", f"{config['frame']}_{config['env']}")
    run_name = os.path.basename(os.path.abspath(run_dir))
    params = flat_params(config)
    makers = {
        "mlflow": lambda: MLflowLogger(experiment=name, run_name=run_name, params=params),
        "wandb": lambda: WandbLogger(project=name, run_name=run_name, params=params),
    }
    try:
        return [makers[tracker]() for tracker in config.get("trackers") or []]
    except ImportError as error:
        raise ConfigError(f"trackers: {error}") from error


def run_directory(config: Dict[str, Any], log_dir: Optional[str] = None) -> str:
    """``log_dir``, or a new ``<root_dir>/<frame>_<env>_<time>`` folder named from ``config``;
    created if missing."""
    if log_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{config['frame']}_{config['env']}_{stamp}".replace("/", "_")
        log_dir = os.path.join(config.get("root_dir") or "runs", name)
    os.makedirs(log_dir, exist_ok=True)
    return log_dir


def train(
    config: Dict[str, Any], log_dir: Optional[str] = None, resume: bool = False
) -> Tuple[str, TrainResult]:
    """Train the config's algorithm on its environment.

    The run directory gets ``config.json`` (the config as run), the trainer's files
    (``progress.csv``, ``tensorboard/``, ``checkpoints/`` with the best evaluated networks,
    ``learning_curve.png``), ``final/`` with the networks at the end and ``result.json``
    with a summary of the run; with ``trackers`` in the config, the trackers' files too
    (:func:`tracker_loggers`).

    Args:
        config: A launcher config.
        log_dir: The run directory (default: a new folder in the config's ``root_dir``).
        resume: Continue the run saved in ``log_dir`` by the trainer (its ``save_every``
            option), see :doc:`resuming`; a run directory without a save starts afresh.

    Returns:
        ``(run directory, the trainer's result)``.

    Raises:
        ConfigError: For a config that cannot build the algorithm or the trainer.
    """
    framework = build_framework(config)
    run_dir = run_directory(config, log_dir)
    auto_config.save(config, os.path.join(run_dir, CONFIG_FILE))
    options = {
        **auto_config.trainer_options(config),
        "log_dir": run_dir,
        "callbacks": tracker_loggers(config, run_dir),
    }
    with _make_trainer(framework, config, options) as trainer:
        result = trainer.run(
            episodes=config.get("max_episodes"), steps=config.get("max_steps"), resume=resume
        )
    framework.save(os.path.join(run_dir, FINAL_DIR))
    summary = {
        "episodes": result.episodes,
        "steps": result.steps,
        "last_return": result.returns[-1] if result.returns else None,
        "best_eval_return": result.best_eval_return if result.eval_returns else None,
        "best_version": result.best_version,
        "solved_episode": result.solved_episode,
    }
    with open(os.path.join(run_dir, RESULT_FILE), "w", encoding="utf-8") as file:
        json.dump(summary, file, indent=2)
    return run_dir, result


def load_run(run_dir: str, checkpoint: str = FINAL_DIR) -> Tuple[Dict[str, Any], Any]:
    """The config of the run directory ``run_dir`` and its algorithm with the networks of ``checkpoint``
    (``"final"``, or ``"checkpoints"`` for the best evaluated ones); ``enjoy`` and ``export``
    load runs with it.

    Raises:
        ConfigError: When ``run_dir`` has no config, no ``checkpoint`` folder, or networks
            that do not load.
    """
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        raise ConfigError(
            f"RUN_DIR: {run_dir!r} holds no {CONFIG_FILE} (is it a run directory of train?)"
        )
    model_dir = os.path.join(run_dir, checkpoint)
    if not os.path.isdir(model_dir):
        raise ConfigError(
            f"RUN_DIR: {run_dir!r} has no saved networks: no folder {checkpoint!r} in it "
            f"(train writes {FINAL_DIR!r} at the end of a run)"
        )
    config = auto_config.load(path)
    framework = build_framework(config)
    try:
        framework.load(model_dir)
    except RuntimeError as error:
        raise ConfigError(f"RUN_DIR: the networks in {model_dir!r} do not load: {error}") from error
    return config, framework


def enjoy(
    run_dir: str, episodes: int = 1, gif: Optional[str] = None, checkpoint: str = FINAL_DIR
) -> List[float]:
    """Play ``episodes`` episodes with the trained networks of a run directory, the way the
    trainer evaluates (no exploration, nothing stored).

    Args:
        run_dir: A directory written by :func:`train`.
        episodes: Number of episodes.
        gif: When given, the frames of every episode are written to this GIF file.
        checkpoint: ``"final"`` or ``"checkpoints"`` (the best evaluated networks).

    Returns:
        The return of each episode.
    """
    config, framework = load_run(run_dir, checkpoint)
    options = {
        key: value
        for key, value in auto_config.trainer_options(config).items()
        if key in _PLAY_KEYS
    }
    make = auto_config.env_maker(config, **({"render_mode": "rgb_array"} if gif else {}))
    frames: Optional[List[Any]] = [] if gif else None
    returns = []
    with _make_trainer(
        framework, config, {**options, "progress": False, "eval_interval": 0}
    ) as trainer:
        env: gym.Env = make()
        try:
            for index in range(episodes):
                returns.append(
                    trainer.play_episode(env, trainer.evaluation_seed(index), frames=frames)[0]
                )
        finally:
            env.close()
    if gif:
        directory, name = os.path.split(os.path.abspath(gif))
        stem, extension = os.path.splitext(name)
        create_video(frames, directory, stem, extension or ".gif")
    return returns
