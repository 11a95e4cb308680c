"""``python -m machin.auto tune``: a hyperparameter search over a launcher config, with Optuna.

Every trial trains the config (:mod:`machin.auto.config`) with values drawn from a search
space, through :class:`~machin.frame.trainer.Trainer`; every evaluation of the run is
reported to the trial, and a trial the pruner gives up on stops at the end of its episode.
The objective of a trial is the mean return of its last evaluation. The best trial's values
are written into a complete launcher config that ``python -m machin.auto train`` runs.

The search space is the config's ``"tune"`` key: a dict from dotted paths into the config
(``"frame_config.discount"``, ``"frame_config.model_kwargs.0.hidden"``,
``"trainer_config.rollout_steps"``, ``"env_kwargs.<name>"``) to specs:

==================  ==========================================  ===============================
``type``            keys                                        drawn with
==================  ==========================================  ===============================
``"float"``         ``low``, ``high``, optional ``step``        ``trial.suggest_float``
``"log_float"``     ``low``, ``high`` (``low > 0``)             ``suggest_float(log=True)``
``"int"``           ``low``, ``high``, optional ``step``        ``trial.suggest_int``
``"log_int"``       ``low``, ``high`` (``low > 0``)             ``suggest_int(log=True)``
``"categorical"``   ``choices`` (numbers, strings, booleans,    ``trial.suggest_categorical``
                    ``null``)
==================  ==========================================  ===============================

Without a ``"tune"`` key the search space is :func:`default_space` of the algorithm. Optuna
is an optional dependency: ``pip install machin[tune]``.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from machin.frame.algorithms.config import ConfigError, default_frame_config
from machin.frame.callbacks import Callback, Evaluation
from machin.frame.trainer import Trainer

from . import config as auto_config
from . import launcher

__all__ = [
    "INSTALL_HINT",
    "BEST_FILE",
    "TRIALS_CSV",
    "TRIALS_JSON",
    "TuneResult",
    "TrialPruning",
    "require_optuna",
    "default_space",
    "search_space",
    "tune",
]

INSTALL_HINT = "tune needs the optuna package; install it with: pip install machin[tune]"
BEST_FILE = "best.json"
TRIALS_CSV = "trials.csv"
TRIALS_JSON = "trials.json"

#: Where a path may start; only ``frame_config`` keys and ``trainer_config`` keys are checked
#: by name, the keyword-argument dicts (``env_kwargs``, ``model_kwargs`` entries, ...) take any.
_ROOTS = ("frame_config", "trainer_config", "env_kwargs")
_NUMERIC = ("float", "log_float", "int", "log_int")
_SPEC_KEYS = {
    "float": ("low", "high", "step"),
    "log_float": ("low", "high"),
    "int": ("low", "high", "step"),
    "log_int": ("low", "high"),
    "categorical": ("choices",),
}
_LEARNING_RATE = {"type": "log_float", "low": 1e-4, "high": 1e-2}
#: The default search space draws from these options, each one the algorithm has.
_DEFAULT_CANDIDATES = {
    "learning_rate": _LEARNING_RATE,
    "actor_learning_rate": _LEARNING_RATE,
    "critic_learning_rate": _LEARNING_RATE,
    "discount": {"type": "categorical", "choices": [0.9, 0.95, 0.98, 0.99, 0.995, 0.999]},
    "batch_size": {"type": "categorical", "choices": [32, 64, 128, 256]},
    "update_rate": {"type": "log_float", "low": 1e-3, "high": 5e-2},
    "gae_lambda": {"type": "categorical", "choices": [0.8, 0.9, 0.95, 0.98, 1.0]},
    "surrogate_loss_clip": {"type": "categorical", "choices": [0.1, 0.2, 0.3]},
    "kl_max_delta": {"type": "log_float", "low": 1e-3, "high": 5e-2},
}


def require_optuna() -> Any:
    """The ``optuna`` module.

    Raises:
        ImportError: If Optuna is not installed, naming the extra that installs it.
    """
    try:
        import optuna
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return optuna


@dataclass
class TuneResult:
    """What :func:`tune` found.

    Attributes:
        best_config: The launcher config with the best trial's values (also in ``best.json``).
        best_value: The objective of the best trial (its last evaluation's mean return).
        best_params: The best trial's values, by path.
        best_trial: The number of the best trial.
        study: The ``optuna.Study``, with every trial.
        paths: Files written, by kind: ``"best"``, ``"csv"``, ``"json"``.
    """

    best_config: Dict[str, Any]
    best_value: float
    best_params: Dict[str, Any]
    best_trial: int
    study: Any
    paths: Dict[str, str] = field(default_factory=dict)


class TrialPruning(Callback):
    """Reports every evaluation's mean return to an Optuna trial and ends the run when the
    trial's pruner says so.

    The report's step is the evaluation's number in the run (0, 1, 2, ...), which matches
    between trials (Optuna's pruners compare trials at equal steps; training step counts
    differ from trial to trial). The run ends at the end of the episode in progress (see :class:`~machin.frame.callbacks.Callback`); ``pruned`` then says
    so, and the caller raises ``optuna.TrialPruned``. Usable with any
    :class:`~machin.frame.trainer.Trainer` (``callbacks=[TrialPruning(trial)]``).

    Args:
        trial: An ``optuna.Trial``.

    Attributes:
        pruned: Whether the pruner stopped the run.
        reported: Evaluations reported so far.
        last_return: The mean return of the last evaluation reported (``None`` before one).
    """

    def __init__(self, trial: Any) -> None:
        self.trial = trial
        self.pruned = False
        self.reported = 0
        self.last_return: Optional[float] = None

    def report(self, mean_return: float) -> None:
        """Report ``mean_return`` as the next evaluation of the trial."""
        self.trial.report(mean_return, self.reported)
        self.reported += 1
        self.last_return = mean_return

    def on_evaluation(self, trainer: Trainer, evaluation: Evaluation) -> Optional[bool]:
        self.report(evaluation.mean_return)
        if self.trial.should_prune():
            self.pruned = True
            return False
        return None


# -- the search space -----------------------------------------------------------------------
def default_space(frame: str) -> Dict[str, Dict[str, Any]]:
    """The search space used when a config has no ``"tune"`` key: of the options
    ``learning_rate``, ``actor_learning_rate``, ``critic_learning_rate`` (log-uniform in
    ``[1e-4, 1e-2]``), ``discount``, ``batch_size``, ``update_rate`` (log-uniform in
    ``[1e-3, 5e-2]``), ``gae_lambda``, ``surrogate_loss_clip`` and ``kl_max_delta``
    (log-uniform in ``[1e-3, 5e-2]``), those the algorithm ``frame`` has, under
    ``frame_config``."""
    options = default_frame_config(auto_config.algorithm_class(frame))
    return {
        f"frame_config.{name}": copy.deepcopy(spec)
        for name, spec in _DEFAULT_CANDIDATES.items()
        if name in options
    }


def search_space(config: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The checked search space of a launcher config: its ``"tune"`` key, else
    :func:`default_space` of its algorithm.

    Raises:
        ConfigError: Naming the entry of an unknown path, an unknown type, a missing or
            ill-typed bound, ``low >= high`` or empty choices.
    """
    auto_config.validate(config)
    space = config.get("tune")
    if space is None:
        return default_space(config["frame"])
    if not space:
        raise ConfigError("tune: the search space is empty; give at least one path")
    full = _complete(config)
    for path, spec in space.items():
        _check_spec(path, spec)
        _resolve(full, path)
    return copy.deepcopy(space)


def _complete(config: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of ``config`` with every ``frame_config`` default, ``trainer_config`` and
    ``env_kwargs`` dicts, and no ``tune`` key."""
    full = auto_config.algorithm_class(config["frame"]).generate_config(config)
    full.pop("tune", None)
    full["trainer_config"] = dict(full.get("trainer_config") or {})
    full["env_kwargs"] = dict(full.get("env_kwargs") or {})
    return full


def _entry(path: Any) -> str:
    return f"tune entry {path!r}"


def _check_spec(path: Any, spec: Any) -> None:
    """Check one entry of the search space (not its path)."""
    if not isinstance(spec, dict) or "type" not in spec:
        raise ConfigError(
            f"{_entry(path)} must be a dict with a 'type' (one of {list(_SPEC_KEYS)}), got {spec!r}"
        )
    kind = spec["type"]
    if kind not in _SPEC_KEYS:
        raise ConfigError(f"{_entry(path)}: unknown type {kind!r}; types are {list(_SPEC_KEYS)}")
    unknown = sorted(set(spec) - {"type", *_SPEC_KEYS[kind]})
    if unknown:
        raise ConfigError(
            f"{_entry(path)}: unknown key {unknown[0]!r} for type {kind!r}; "
            f"its keys are {['type', *_SPEC_KEYS[kind]]}"
        )
    if kind == "categorical":
        _check_choices(path, spec.get("choices"))
    else:
        _check_bounds(path, spec)


def _check_choices(path: Any, choices: Any) -> None:
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{_entry(path)}: choices must be a non-empty list, got {choices!r}")
    for choice in choices:
        if choice is not None and not isinstance(choice, (bool, int, float, str)):
            raise ConfigError(
                f"{_entry(path)}: a choice must be a number, a string, a boolean or null, "
                f"got {choice!r} of type {type(choice).__name__}"
            )


def _check_bounds(path: Any, spec: Dict[str, Any]) -> None:
    kind = spec["type"]
    integer = kind in ("int", "log_int")
    for key in ("low", "high"):
        if key not in spec:
            raise ConfigError(f"{_entry(path)}: type {kind!r} needs the key {key!r}")
    for key in ("low", "high", "step"):
        value = spec.get(key)
        if key == "step" and value is None:
            continue
        wanted = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted) or not math.isfinite(value):
            raise ConfigError(
                f"{_entry(path)}: {key} must be a finite {'int' if integer else 'number'}, "
                f"got {value!r} of type {type(value).__name__}"
            )
    low, high = spec["low"], spec["high"]
    if low >= high:
        raise ConfigError(f"{_entry(path)}: low ({low!r}) must be below high ({high!r})")
    if kind.startswith("log_") and low <= 0:
        raise ConfigError(f"{_entry(path)}: type {kind!r} needs low > 0, got {low!r}")
    if spec.get("step") is not None and spec["step"] <= 0:
        raise ConfigError(f"{_entry(path)}: step must be positive, got {spec['step']!r}")


def _resolve(config: Dict[str, Any], path: Any) -> Tuple[Union[Dict[str, Any], List[Any]], Any]:
    """The container and the key (or list index) that ``path`` names in a completed config.

    Raises:
        ConfigError: If the path leaves the config, names an unknown ``frame_config`` or
            ``trainer_config`` key, or indexes past a list.
    """
    parts = path.split(".") if isinstance(path, str) else []
    if len(parts) < 2 or parts[0] not in _ROOTS:
        raise ConfigError(
            f"{_entry(path)}: unknown path; a path starts with one of {list(_ROOTS)} and names "
            f"a key below it, e.g. 'frame_config.discount'"
        )
    if parts[0] == "trainer_config" and (
        len(parts) > 2 or parts[1] not in auto_config.TRAINER_KEYS
    ):
        raise ConfigError(
            f"{_entry(path)}: unknown path; trainer_config may set {list(auto_config.TRAINER_KEYS)}"
        )
    if parts[0] == "frame_config" and parts[1] not in config["frame_config"]:
        raise ConfigError(
            f"{_entry(path)}: unknown path; {config['frame']} has no key frame_config.{parts[1]}, "
            f"its keys are {sorted(config['frame_config'])}"
        )
    node: Any = config[parts[0]]
    for depth in range(1, len(parts) - 1):
        node = node[_key(node, parts[depth], path, ".".join(parts[:depth]), new=False)]
    return node, _key(node, parts[-1], path, ".".join(parts[:-1]), new=True)


def _key(node: Any, part: str, path: str, where: str, new: bool) -> Any:
    """``part`` as a key of the dict or an index of the list ``node`` (found at ``where``);
    a key the dict lacks only when ``new``."""
    if isinstance(node, dict) and not new and part not in node:
        raise ConfigError(f"{_entry(path)}: unknown path; {where} has no key {part!r}")
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            raise ConfigError(
                f"{_entry(path)}: unknown path; {where} is a list of {len(node)} entries, "
                f"{part!r} is not an index of it"
            )
        return int(part)
    if not isinstance(node, dict):
        raise ConfigError(
            f"{_entry(path)}: unknown path; {where} is {node!r}, not a dict or a list"
        )
    return part


def _apply(config: Dict[str, Any], params: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of the completed ``config`` with the value of every path in ``params``."""
    result = copy.deepcopy(config)
    for path, value in params.items():
        container, key = _resolve(result, path)
        container[key] = value
    return result


# -- the study --------------------------------------------------------------------------------
def _suggest(trial: Any, path: str, spec: Dict[str, Any]) -> Any:
    kind = spec["type"]
    if kind == "categorical":
        return trial.suggest_categorical(path, spec["choices"])
    if kind in ("int", "log_int"):
        return trial.suggest_int(
            path, spec["low"], spec["high"], step=spec.get("step") or 1, log=kind == "log_int"
        )
    return trial.suggest_float(
        path, spec["low"], spec["high"], step=spec.get("step"), log=kind == "log_float"
    )


def _trial_options(config: Dict[str, Any], pruning: TrialPruning) -> Dict[str, Any]:
    """Trainer options of a trial: the config's, quiet, writing no files, with ``pruning``."""
    options = auto_config.trainer_options(config)
    options.pop("save_every", None)
    options.update(progress=False, tensorboard=False, callbacks=[pruning])
    return options


def _run_trial(trial: Any, config: Dict[str, Any]) -> float:
    """Train ``config`` for ``trial``; the objective, or ``optuna.TrialPruned``."""
    framework = launcher.build_framework(config)
    pruning = TrialPruning(trial)
    options = _trial_options(config, pruning)
    with launcher._make_trainer(framework, config, options) as trainer:
        result = trainer.run(episodes=config.get("max_episodes"), steps=config.get("max_steps"))
        if pruning.last_return is None:  # no evaluation during the run: one at its end
            pruning.report(trainer.evaluate())
    trial.set_user_attr("steps", result.steps)
    trial.set_user_attr("episodes", result.episodes)
    if pruning.pruned:
        raise require_optuna().TrialPruned(
            f"pruned after {result.steps} steps at return {pruning.last_return}"
        )
    return pruning.last_return


def _objective(base: Dict[str, Any], space: Dict[str, Dict[str, Any]]) -> Any:
    """The function Optuna calls for every trial."""
    optuna = require_optuna()

    def objective(trial: Any) -> float:
        params = {path: _suggest(trial, path, spec) for path, spec in space.items()}
        try:
            return _run_trial(trial, _apply(base, params))
        except optuna.TrialPruned:
            raise
        except Exception as error:  # the study records the trial as failed and goes on
            trial.set_user_attr("error", f"{type(error).__name__}: {error}")
            raise

    return objective


def _trial_rows(study: Any, space: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    rows = []
    for trial in study.get_trials(deepcopy=False):
        done, start = trial.datetime_complete, trial.datetime_start
        rows.append(
            {
                "number": trial.number,
                "state": trial.state.name,
                "value": trial.value,
                "params": {path: trial.params.get(path) for path in space},
                "steps": trial.user_attrs.get("steps"),
                "episodes": trial.user_attrs.get("episodes"),
                "seconds": None if done is None else round((done - start).total_seconds(), 3),
                "error": trial.user_attrs.get("error"),
            }
        )
    return rows


def _write_trials(study: Any, space: Dict[str, Dict[str, Any]], out_dir: str) -> Dict[str, str]:
    """Write ``trials.csv`` (one column per path) and ``trials.json``; their paths."""
    rows = _trial_rows(study, space)
    paths = {"csv": os.path.join(out_dir, TRIALS_CSV), "json": os.path.join(out_dir, TRIALS_JSON)}
    with open(paths["json"], "w", encoding="utf-8") as file:
        json.dump(rows, file, indent=2)
    fields = ["number", "state", "value", "steps", "episodes", "seconds", *space, "error"]
    with open(paths["csv"], "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            params = row.pop("params")
            writer.writerow({**row, **params})
    return paths


def tune(
    config: Dict[str, Any],
    trials: int = 20,
    out_dir: str = "tune",
    steps: Optional[int] = None,
    seed: Optional[int] = None,
    storage: Optional[str] = None,
    study_name: Optional[str] = None,
    sampler: Any = None,
    pruner: Any = None,
) -> TuneResult:
    """Search the hyperparameters of a launcher config with Optuna.

    Every trial trains the config with values drawn from :func:`search_space`, quietly and
    writing no run directory, and is pruned by ``pruner`` on its evaluation returns; the
    objective is the mean return of its last evaluation (with no evaluation during the run,
    one made at its end). A trial whose run raises is recorded as failed, with its error, and
    the study goes on. After every trial, ``out_dir`` gets ``trials.csv`` and ``trials.json``
    (number, state, value, steps, episodes, seconds, the values, the error) and, once a trial
    completed, ``best.json``: the config with the best values, its own run length and
    ``seed``, without the ``tune`` key.

    Args:
        config: A launcher config, with or without a ``"tune"`` key.
        trials: Number of trials to run (added to those of a resumed study).
        out_dir: Folder of the files (created if missing).
        steps: ``max_steps`` of every trial (default: the config's run length).
        seed: Seed of every trial's run and of the default sampler (default: the config's).
        storage: An Optuna storage URL (``"sqlite:///study.db"``) in which the study is kept
            and from which a study of the same name is resumed; ``None``: in memory.
        study_name: Name of the study in ``storage`` (default ``"<frame>_<env>"``).
        sampler: An Optuna sampler (default: TPE, seeded with ``seed`` plus the number of
            trials a resumed study already has).
        pruner: An Optuna pruner (default: ``MedianPruner(n_startup_trials=5,
            n_warmup_steps=2)``: no pruning before 5 trials completed, nor at a trial's
            first two evaluations).

    Returns:
        A :class:`TuneResult`.

    Raises:
        ImportError: If Optuna is not installed.
        ConfigError: For a bad config, search space, ``trials`` or ``steps``, or when no
            trial completed (naming the first error).
    """
    optuna = require_optuna()
    _check_count("trials", trials)
    if steps is not None:
        _check_count("steps", steps)
    space = search_space(config)
    base = _complete(config)
    base["seed"] = config.get("seed") if seed is None else seed
    trial_config = {**base, "max_steps": steps} if steps is not None else base
    study = optuna.create_study(
        direction="maximize",
        storage=storage,
        study_name=study_name or f"{base['frame']}_{base['env']}".replace("/", "_"),
        load_if_exists=storage is not None,
        sampler=sampler,
        pruner=_default_pruner(optuna) if pruner is None else pruner,
    )
    if sampler is None:  # a resumed study goes on drawing, instead of repeating its first draws
        offset = len(study.get_trials(deepcopy=False))
        study.sampler = optuna.samplers.TPESampler(
            seed=None if base["seed"] is None else base["seed"] + offset
        )
    os.makedirs(out_dir, exist_ok=True)
    paths: Dict[str, str] = {}

    def write(study: Any, _trial: Any = None) -> None:
        paths.update(_write_results(study, space, base, out_dir))

    study.optimize(
        _objective(trial_config, space), n_trials=trials, catch=(Exception,), callbacks=[write]
    )
    write(study)
    return _result(study, base, paths)


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _default_pruner(optuna: Any) -> Any:
    """Optuna's median pruner: nothing is pruned before 5 trials completed, nor at a trial's
    first two evaluations."""
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2)


def _write_results(
    study: Any, space: Dict[str, Dict[str, Any]], base: Dict[str, Any], out_dir: str
) -> Dict[str, str]:
    """Write the trials tables and, once a trial completed, ``best.json``; their paths."""
    paths = _write_trials(study, space, out_dir)
    states = {trial.state.name for trial in study.get_trials(deepcopy=False)}
    if "COMPLETE" in states:
        paths["best"] = os.path.join(out_dir, BEST_FILE)
        auto_config.save(_apply(base, study.best_trial.params), paths["best"])
    return paths


def _result(study: Any, base: Dict[str, Any], paths: Dict[str, str]) -> TuneResult:
    """The :class:`TuneResult` of a finished study; a :class:`ConfigError` when no trial completed."""
    if "best" not in paths:
        errors = [t.user_attrs["error"] for t in study.trials if "error" in t.user_attrs]
        first = f"; the first error: {errors[0]}" if errors else ""
        raise ConfigError(
            f"no trial of the study completed ({len(study.trials)} trials, see "
            f"{paths['csv']}){first}"
        )
    best = study.best_trial
    return TuneResult(
        best_config=_apply(base, best.params),
        best_value=best.value,
        best_params=dict(best.params),
        best_trial=best.number,
        study=study,
        paths=paths,
    )
