"""Loggers that send a :class:`~machin.frame.trainer.Trainer` run to an experiment tracker.

:class:`MLflowLogger` writes to MLflow (by default a local store inside the run directory,
an SQLite file; no server) and :class:`WandbLogger` to Weights & Biases (offline by
default: files that ``wandb sync`` uploads later). Both are callbacks
(:mod:`machin.frame.callbacks`) and log what :class:`~machin.frame.callbacks.CSVLogger`
writes, with the training step count as the x-axis:

* after every training episode: ``train/episode`` (its number), ``train/return``,
  ``train/smoothed_return`` and the episode's mean update results (``train/loss``, or
  ``train/policy_value`` and ``train/value_loss``);
* after every evaluation: ``eval/evaluation`` (its number in the run) and ``eval/return``,
  at the step count when it ran.

A run's parameters are the algorithm's class and its options (or the ``params`` given);
the tracker's run ends with the training run. Each tracker is an optional extra
(``pip install machin[mlflow]``, ``pip install machin[wandb]``), imported only when a
logger is made.

A run resumed from a save (:class:`~machin.frame.run_checkpoint.RunCheckpoint`) goes on in
the same tracker run: the logger's ``state_dict`` keeps the run's id. What the run logged
after that save, before it was stopped, is already in the tracker; since a resumed run
repeats those episodes exactly, the logger does not send them again, so no step is
logged twice.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import struct
import time
import warnings
import zlib
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from .callbacks import Callback, EpisodeEnd, Evaluation, run_directories

if TYPE_CHECKING:
    from .trainer import Trainer

__all__ = [
    "TrackerLogger",
    "MLflowLogger",
    "WandbLogger",
    "require",
    "flat_params",
    "algorithm_params",
    "offline_history",
]

#: The metrics that number the training episodes and the evaluations of a run.
NUMBERS = ("train/episode", "eval/evaluation")


def require(module: str, extra: str) -> Any:
    """Import the optional package ``module``, or raise an ``ImportError`` saying how to install it.

    Args:
        module: The module to import (``"mlflow"``).
        extra: The extra of machin that installs it (``"mlflow"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"logging to {extra} needs the {module} package; install it with: "
            f"pip install machin[{extra}]"
        ) from error


def flat_params(params: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``params`` with nested dicts flattened into dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``).

    Args:
        params: The (nested) parameters.
        prefix: Put before every key (``"a."`` for the entries of ``a``).
    """
    flat: Dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_params(value, name + "."))
        else:
            flat[name] = value
    return flat


def algorithm_params(framework: Any) -> Dict[str, Any]:
    """The algorithm's class name and the value of each of its declared options.

    Args:
        framework: The algorithm.
    """
    from .algorithms.options import option_specs

    params: Dict[str, Any] = {"algorithm": type(framework).__name__}
    for name in option_specs(type(framework)):
        params[name] = getattr(framework, name, None)
    return params


def _plain(value: Any) -> Any:
    """``value`` if a tracker can hold it as it is (a number, string, bool or None), else its ``str``."""
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


class TrackerLogger(Callback):
    """What the tracker loggers share: what to log and when, the run id, resuming.

    A subclass opens, writes to and ends a run of its tracker (:meth:`_open`,
    :meth:`_log`, :meth:`_close`) and reads the last episode and evaluation numbers a
    continued run holds (:meth:`_last_numbers`).

    Args:
        params: The run's parameters (nested dicts are flattened into dotted names);
            default: the algorithm's class and options.
    """

    def __init__(self, params: Optional[Dict[str, Any]] = None) -> None:
        self.params = params
        #: The tracker's id of the run in progress (or of the last run), else ``None``.
        self.run_id: Optional[str] = None
        self._resume: Optional[Dict[str, Any]] = None
        self._skip: Tuple[int, int] = (0, 0)  # the last episode and evaluation the run holds
        self._open_run = False

    # -- what a tracker does -------------------------------------------------------------
    def _open(self, trainer: Trainer, run_id: Optional[str], params: Dict[str, Any]) -> str:
        """Start a new run with ``params`` (``run_id`` ``None``) or continue ``run_id``; its id."""
        raise NotImplementedError

    def _log(self, metrics: Dict[str, float], step: int) -> None:
        """Send ``metrics`` at the step count ``step``."""
        raise NotImplementedError

    def _last_numbers(self, trainer: Trainer) -> Dict[str, float]:
        """The last value of each metric of :data:`NUMBERS` the continued run holds (missing: none)."""
        raise NotImplementedError

    def _close(self, status: str) -> None:
        """End the run: ``status`` is ``"FINISHED"``, ``"KILLED"`` (halted) or ``"FAILED"``."""
        raise NotImplementedError

    # -- the callback --------------------------------------------------------------------
    def on_training_start(self, trainer: Trainer) -> None:
        resume, self._resume = self._resume, None
        params = flat_params(
            self.params if self.params is not None else algorithm_params(trainer.framework)
        )
        if resume is None:
            self.run_id, self._skip = self._open(trainer, None, params), (0, 0)
        else:
            self.run_id = self._open(trainer, str(resume["run_id"]), params)
            last = self._last_numbers(trainer)
            self._skip = (int(last.get(NUMBERS[0], 0)), int(last.get(NUMBERS[1], 0)))
        self._open_run = True

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return None if self.run_id is None else {"run_id": self.run_id}

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        self._resume = state

    def on_episode_end(self, trainer: Trainer, episode: EpisodeEnd) -> Optional[bool]:
        if episode.episode > self._skip[0]:
            metrics = {
                NUMBERS[0]: float(episode.episode),
                "train/return": float(episode.episode_return),
                "train/smoothed_return": float(episode.smoothed),
                **{f"train/{name}": float(value) for name, value in episode.losses.items()},
            }
            self._log(metrics, episode.steps)
        return None

    def on_evaluation(self, trainer: Trainer, evaluation: Evaluation) -> Optional[bool]:
        number = len(trainer.result.eval_returns)
        if number > self._skip[1]:
            metrics = {NUMBERS[1]: float(number), "eval/return": float(evaluation.mean_return)}
            self._log(metrics, evaluation.steps)
        return None

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        if self._open_run:
            self._open_run = False
            interrupted = trainer.result.interrupted
            self._close("FINISHED" if completed else "KILLED" if interrupted else "FAILED")


def _directory(trainer: Trainer) -> Optional[str]:
    """The directory of the trainer's CSV file, or ``None`` without ``log_dir``."""
    return None if trainer.log_dir is None else run_directories(trainer.log_dir)["log"]


class MLflowLogger(TrackerLogger):
    """Logs a trainer run to MLflow (see the module's description for what it logs).

    It talks to the tracking store through an ``mlflow.MlflowClient`` of its own, so it
    sets no global MLflow state (no active run, no global tracking URI). The default store
    is an SQLite file because MLflow's store of plain folders is in maintenance mode and
    refuses to open unless ``MLFLOW_ALLOW_FILE_STORE=true`` is set (with it,
    ``tracking_uri="file:..."`` works).

    Args:
        tracking_uri: The MLflow tracking URI. Default: a local store in the run
            directory, the SQLite file ``<log_dir>/mlruns/mlflow.db`` (``./mlruns``
            without ``log_dir``), with the artifacts in ``mlruns/artifacts``.
        experiment: The experiment's name (made if missing).
        run_name: The run's name (default: MLflow picks one).
        params: See :class:`TrackerLogger`.

    Raises:
        ImportError: If MLflow is not installed.
    """

    def __init__(
        self,
        tracking_uri: Optional[str] = None,
        experiment: str = "machin",
        run_name: Optional[str] = None,
        params: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(params)
        self._mlflow = require("mlflow", "mlflow")
        self.tracking_uri, self.experiment, self.run_name = tracking_uri, experiment, run_name
        self.client: Any = None

    def store_directory(self, trainer: Trainer) -> str:
        """The folder of the default local store: ``<log_dir>/mlruns`` (``./mlruns`` without ``log_dir``).

        Args:
            trainer: The trainer whose run directory holds the store.
        """
        return os.path.abspath(os.path.join(_directory(trainer) or os.curdir, "mlruns"))

    def uri(self, trainer: Trainer) -> str:
        """The tracking URI used for ``trainer``'s run: ``tracking_uri``, else the local store's."""
        if self.tracking_uri is not None:
            return self.tracking_uri
        return "sqlite:///" + os.path.join(self.store_directory(trainer), "mlflow.db")

    def _open(self, trainer: Trainer, run_id: Optional[str], params: Dict[str, Any]) -> str:
        artifacts = None
        if self.tracking_uri is None:
            os.makedirs(self.store_directory(trainer), exist_ok=True)
            artifacts = os.path.join(self.store_directory(trainer), "artifacts")
        self.client = self._mlflow.MlflowClient(tracking_uri=self.uri(trainer))
        if run_id is not None:
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        found = self.client.get_experiment_by_name(self.experiment)
        experiment_id = (
            found.experiment_id
            if found is not None
            else self.client.create_experiment(self.experiment, artifact_location=artifacts)
        )
        run = self.client.create_run(experiment_id, run_name=self.run_name)
        entities = self._mlflow.entities
        limit = 6000  # MLflow's longest parameter value
        values = [entities.Param(key, str(value)[:limit]) for key, value in params.items()]
        for start in range(0, len(values), 100):  # at most 100 parameters per batch
            self.client.log_batch(run.info.run_id, params=values[start : start + 100])
        return run.info.run_id

    def _log(self, metrics: Dict[str, float], step: int) -> None:
        stamp = int(time.time() * 1000)
        Metric = self._mlflow.entities.Metric
        self.client.log_batch(
            self.run_id,
            metrics=[Metric(key, value, stamp, step) for key, value in metrics.items()],
        )

    def _last_numbers(self, trainer: Trainer) -> Dict[str, float]:
        return dict(self.client.get_run(self.run_id).data.metrics)

    def _close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)


class WandbLogger(TrackerLogger):
    """Logs a trainer run to Weights & Biases (see the module's description for what it logs).

    Offline by default: the run is written to ``<dir>/wandb/offline-run-*`` and
    ``wandb sync`` uploads it later; a resumed run continues the same run id in a new
    offline directory (upload them in order), and reads the earlier directories to know
    what they hold. (W&B's service process writes a finished run's file out completely
    when it ends, as it does with the training process; ``wandb.teardown()`` ends it
    earlier.) Every event is one history row with the
    step count in ``steps``, the x-axis of every ``train/*`` and ``eval/*`` chart.

    Args:
        project: The W&B project.
        run_name: The run's display name (default: W&B picks one).
        mode: ``"offline"``, ``"online"`` or ``"disabled"``.
        dir: The directory that receives ``wandb/`` (default: the run directory, the
            current directory without ``log_dir``).
        params: See :class:`TrackerLogger`; they become the run's ``config``.
        init_kwargs: More keyword arguments of ``wandb.init`` (``entity``, ``tags``,
            ``settings``, ...).

    Raises:
        ValueError: If ``mode`` is none of the three.
        ImportError: If wandb is not installed.
    """

    def __init__(
        self,
        project: str = "machin",
        run_name: Optional[str] = None,
        mode: str = "offline",
        dir: Optional[str] = None,
        params: Optional[Dict[str, Any]] = None,
        init_kwargs: Optional[Dict[str, Any]] = None,
    ) -> None:
        if mode not in ("offline", "online", "disabled"):
            raise ValueError(f"mode must be 'offline', 'online' or 'disabled', got {mode!r}")
        super().__init__(params)
        self._wandb = require("wandb", "wandb")
        self.project, self.run_name, self.mode, self.dir = project, run_name, mode, dir
        self.init_kwargs = dict(init_kwargs or {})
        #: The ``wandb`` run in progress, else ``None``.
        self.run: Any = None
        self._earlier: Dict[str, float] = {}  # the last numbers of a continued offline run

    def directory(self, trainer: Trainer) -> str:
        """The directory that receives ``wandb/`` for ``trainer``'s run."""
        return os.path.abspath(self.dir or _directory(trainer) or os.curdir)

    def _open(self, trainer: Trainer, run_id: Optional[str], params: Dict[str, Any]) -> str:
        directory = self.directory(trainer)
        os.makedirs(directory, exist_ok=True)
        options: Dict[str, Any] = {
            "project": self.project,
            "name": self.run_name,
            "mode": self.mode,
            "dir": directory,
            "reinit": "create_new",
            "settings": self._wandb.Settings(console="off", x_disable_stats=True),
            **self.init_kwargs,
        }
        if run_id is None:
            options["config"] = {key: _plain(value) for key, value in params.items()}
        else:
            options.update(id=run_id, resume="allow")
            if self.mode == "offline":  # read before this run adds a directory
                self._earlier = _earlier_numbers(directory, run_id)
        self.run = self._wandb.init(**options)
        self.run.define_metric("steps")
        for pattern in ("train/*", "eval/*"):
            self.run.define_metric(pattern, step_metric="steps")
        return self.run.id

    def _log(self, metrics: Dict[str, float], step: int) -> None:
        self.run.log({"steps": step, **metrics})

    def _last_numbers(self, trainer: Trainer) -> Dict[str, float]:
        """Offline: from the run's earlier offline directories; else: the run's summary."""
        return self._earlier if self.mode == "offline" else _last_values([dict(self.run.summary)])

    def _close(self, status: str) -> None:
        run, self.run = self.run, None
        run.finish(exit_code=0 if status == "FINISHED" else 1)


def _earlier_numbers(directory: str, run_id: str) -> Dict[str, float]:
    """The last episode and evaluation numbers in the offline directories of ``run_id``;
    none, with a warning, when they cannot be read."""
    try:
        return _last_values(offline_history(directory, run_id))
    except ValueError as error:
        warnings.warn(
            f"WandbLogger cannot read what the offline run {run_id} logged before it was "
            f"resumed ({error}); episodes logged after its save may be logged twice",
            RuntimeWarning,
            stacklevel=3,
        )
        return {}


def _last_values(rows: List[Dict[str, Any]]) -> Dict[str, float]:
    """The last value of each metric of :data:`NUMBERS` in ``rows``."""
    last: Dict[str, float] = {}
    for row in rows:
        last.update({key: row[key] for key in NUMBERS if row.get(key) is not None})
    return last


def offline_history(directory: str, run_id: str) -> List[Dict[str, Any]]:
    """The history rows of the offline W&B run ``run_id`` under ``directory/wandb``.

    Rows from every offline directory of the run (a resumed run writes a new one), in
    the order they were written; each row maps a key to its value. A file cut short (its
    process was killed) is read up to its last whole record.

    Args:
        directory: The directory given to ``wandb.init`` as ``dir``.
        run_id: The run's id.
    """
    pattern = os.path.join(glob.escape(directory), "wandb", f"offline-run-*-{run_id}")
    rows: List[Dict[str, Any]] = []
    for run_dir in sorted(glob.glob(pattern)):
        rows.extend(_history_rows(os.path.join(run_dir, f"run-{run_id}.wandb")))
    return rows


def _history_rows(path: str) -> List[Dict[str, Any]]:
    """The history rows of one ``.wandb`` file, each as ``{key: value}``."""
    from wandb.proto import wandb_internal_pb2

    rows: List[Dict[str, Any]] = []
    for data in _log_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


_WANDB_HEADER = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 (little-endian), version 0
_BLOCK = 32768  # the log is written in blocks of this size; a record header never spans two
_RECORD = struct.Struct("<IHB")  # checksum (CRC-32 of the type byte and the data), length, type
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _log_records(path: str) -> Iterator[bytes]:
    """The records of a ``.wandb`` file, a LevelDB-style log; reading stops at a record cut short
    or damaged (the end of a file whose process was killed).

    Raises:
        ValueError: If the file does not start with the header of a W&B log of version 0.
    """
    with open(path, "rb") as file:
        data = file.read()
    if not data.startswith(_WANDB_HEADER):
        raise ValueError(
            f"{path!r} is not a W&B transaction log of the version this reader knows "
            f"(header {data[:7]!r}, expected {_WANDB_HEADER!r})"
        )
    offset, parts = len(_WANDB_HEADER), b""
    while True:
        left = _BLOCK - offset % _BLOCK
        if left < _RECORD.size:  # the zero trailer of a block
            offset += left
            continue
        if offset + _RECORD.size > len(data):
            return
        checksum, length, kind = _RECORD.unpack_from(data, offset)
        body = data[offset + _RECORD.size : offset + _RECORD.size + length]
        if len(body) < length or zlib.crc32(body, zlib.crc32(bytes([kind]))) != checksum:
            return
        offset += _RECORD.size + length
        if kind in (_FULL, _FIRST):
            parts = body
        elif kind in (_MIDDLE, _LAST):
            parts += body
        if kind in (_FULL, _LAST):
            yield parts
