"""The replaceable parts of the :class:`~machin.frame.trainer.Trainer`: callbacks.

The trainer's loop plays, stores and updates; everything around it is a
:class:`Callback` that the loop calls at fixed points of a run, as Stable-Baselines3 and
Tianshou users know them:

==========================  ===========================================================
event                       when
==========================  ===========================================================
``on_training_start``       :meth:`Trainer.run <machin.frame.trainer.Trainer.run>` begins
                            (``trainer.result`` is the run's new, empty result)
``on_step``                 after every training step (a step of the whole group with a
                            group of environments), after the updates it made due
``on_evaluation``           after every evaluation, with its :class:`Evaluation`
``on_episode_end``          after every training episode, with its :class:`EpisodeEnd`
``on_training_end``         when the run ends, also by an exception (``completed`` says which)
==========================  ===========================================================

A run resumed from a save (``trainer.run(..., resume=True)``, see
:class:`~machin.frame.run_checkpoint.RunCheckpoint`) first gives every part the state its
:meth:`Callback.state_dict` returned at the save (through :meth:`Callback.load_state_dict`),
then ``on_training_start``, with ``trainer.resumed_from`` set to the save's path.

``on_step``, ``on_episode_end`` and ``on_evaluation`` may return ``False`` to end the run;
as with a ``steps`` limit, the episode in progress is played to its end first (the
rollout in progress with ``rollout_steps``). Any other return value, ``None`` included,
lets the run go on. Every part gets every event, in this order: the evaluator, the
checkpointer, the loggers, then the user's callbacks.

The trainer's own parts are callbacks too, and each can be replaced:

* evaluation: :class:`Evaluator` (when to evaluate, and greedy evaluation episodes);
* checkpointing: :class:`BestCheckpoint` (saves the networks at every improved evaluation) and
  :class:`~machin.frame.run_checkpoint.RunCheckpoint` (saves the whole run, to resume it);
* logging: :class:`CSVLogger`, :class:`TensorBoardLogger`, :class:`ProgressBar`,
  :class:`LearningCurve` and :class:`EpisodeGif`.
"""

from __future__ import annotations

import csv
import glob
import itertools
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, TextIO, Union

import numpy as np

from ..utils.save_env import SaveEnv

if TYPE_CHECKING:
    import gymnasium as gym

    from .trainer import Trainer

__all__ = [
    "Callback",
    "EpisodeEnd",
    "Evaluation",
    "Evaluator",
    "BestCheckpoint",
    "CSVLogger",
    "TensorBoardLogger",
    "ProgressBar",
    "LearningCurve",
    "EpisodeGif",
    "run_directories",
]

_CSV_FIELDS = ["episode", "steps", "return", "smoothed", "eval_return", "seconds"]
_EVENT_FILE_NUMBERS = itertools.count(1)  # with the process id, names every event file apart


@dataclass(frozen=True)
class EpisodeEnd:
    """A finished training episode, as ``on_episode_end`` receives it.

    Attributes:
        episode: Training episodes finished in this run, this one included.
        steps: Training environment steps taken in this run.
        episode_return: The episode's undiscounted return.
        smoothed: The smoothed training return after this episode.
        losses: The mean of what ``update()`` returned since the previous episode, by name
            (``loss``, or ``policy_value`` and ``value_loss``); empty without updates.
    """

    episode: int
    steps: int
    episode_return: float
    smoothed: float
    losses: Dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation, as ``on_evaluation`` receives it.

    Attributes:
        mean_return: The mean return of the evaluation episodes.
        episode: Training episodes finished when it ran.
        steps: Training steps taken when it ran.
        version: The checkpoint version it stands for: ``episode``, or ``steps`` when it
            was made due by a step count.
        by_steps: Whether a step count made it due (``eval_every_steps``).
        improved: Whether it is better than every earlier evaluation of the run.
    """

    mean_return: float
    episode: int
    steps: int
    version: int
    by_steps: bool
    improved: bool


class Callback:
    """Base class of the trainer's parts: every event does nothing; override those you need.

    Each method gets the :class:`~machin.frame.trainer.Trainer` first: its ``framework``,
    ``result`` (the :class:`~machin.frame.trainer.TrainResult` of the run in progress),
    ``steps`` (training steps so far), ``episode_limit`` and ``step_limit`` (the limits of
    :meth:`~machin.frame.trainer.Trainer.run`) and its options are there to read.
    """

    def on_training_start(self, trainer: Trainer) -> None:
        """The run begins; ``trainer.result`` is empty.

        Args:
            trainer: The trainer that runs.
        """

    def on_step(self, trainer: Trainer, transitions: int) -> Optional[bool]:
        """A training step was taken.

        Args:
            trainer: The trainer that runs.
            transitions: Transitions of the step, one per environment that stepped.

        Returns:
            ``False`` to end the run after the episode in progress.
        """
        return None

    def on_episode_end(self, trainer: Trainer, episode: EpisodeEnd) -> Optional[bool]:
        """A training episode ended.

        Args:
            trainer: The trainer that runs.
            episode: What the episode gave.

        Returns:
            ``False`` to end the run now.
        """
        return None

    def on_evaluation(self, trainer: Trainer, evaluation: Evaluation) -> Optional[bool]:
        """An evaluation was made and recorded in ``trainer.result``.

        Args:
            trainer: The trainer that runs.
            evaluation: What the evaluation gave.

        Returns:
            ``False`` to end the run after the episode in progress.
        """
        return None

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        """The run ends.

        Args:
            trainer: The trainer that ran.
            completed: ``False`` when the run ends by an exception or is halted
                (:meth:`Trainer.halt <machin.frame.trainer.Trainer.halt>`).
        """

    def state_dict(self) -> Optional[Dict[str, Any]]:
        """What a save of the run keeps of this part (``None``: nothing); called between two steps.

        It may hold only tensors, numbers, strings, ``None`` and lists, tuples and dicts of them.
        """
        return None

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        """Continue from what :meth:`state_dict` returned; called before ``on_training_start`` of a resumed run.

        Args:
            state: What :meth:`state_dict` returned at the save.
        """


class Evaluator(Callback):
    """Evaluates every ``interval`` training episodes or every ``every_steps`` training steps.

    An evaluation calls ``trainer.evaluate()``, which plays :meth:`evaluate`'s greedy
    episodes, and records the mean return with
    :meth:`Trainer.record_evaluation <machin.frame.trainer.Trainer.record_evaluation>`. One
    made due by the step count runs right after that step, unless the evaluation
    environment is the training environment: it then waits for the end of the episode.

    Args:
        interval: Evaluate after every this many training episodes (0: never).
        every_steps: Evaluate when the step count reaches a multiple of this (0: never).
    """

    def __init__(self, interval: int = 10, every_steps: int = 0) -> None:
        self.interval = interval
        self.every_steps = every_steps
        self._next = every_steps
        self._due = False

    def on_training_start(self, trainer: Trainer) -> None:
        if trainer.resumed_from is None:
            self._next, self._due = self.every_steps, False

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return {"next": self._next, "due": self._due}

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        self._next, self._due = int(state["next"]), bool(state["due"])

    def on_step(self, trainer: Trainer, transitions: int) -> Optional[bool]:
        if self.every_steps and trainer.steps >= self._next:
            self._due = True
            self._next = (trainer.steps // self.every_steps + 1) * self.every_steps
        if self._due and trainer.eval_env is not trainer.env:
            self._evaluate_by_steps(trainer)
        return None

    def on_episode_end(self, trainer: Trainer, episode: EpisodeEnd) -> Optional[bool]:
        if self.interval and episode.episode % self.interval == 0:
            trainer.record_evaluation(trainer.evaluate())
        if self._due:
            self._evaluate_by_steps(trainer)
        return None

    def _evaluate_by_steps(self, trainer: Trainer) -> None:
        self._due = False
        trainer.record_evaluation(trainer.evaluate(), by_steps=True)

    def evaluate(self, trainer: Trainer, episodes: int) -> float:
        """Mean return of ``episodes`` greedy episodes on ``trainer.eval_env``, which store nothing.

        Evaluation episode ``j`` is reset with ``trainer.evaluation_seed(j)``.
        """
        returns = [
            trainer.play_episode(trainer.eval_env, trainer.evaluation_seed(i))[0]
            for i in range(episodes)
        ]
        return float(np.mean(returns))


def run_directories(log_dir: Union[str, os.PathLike, SaveEnv]) -> Dict[str, str]:
    """Where the parts write for ``log_dir``: ``{"log", "tensorboard", "checkpoints", "images": directory}``.

    A path holds ``progress.csv`` and the pictures itself, and ``tensorboard/`` and
    ``checkpoints/`` below it; a :class:`~machin.utils.save_env.SaveEnv` puts the CSV and
    the scalars into its trial's train-log directory, checkpoints into its model
    directory and the pictures into its image directory.
    """
    if isinstance(log_dir, SaveEnv):
        log = log_dir.get_trial_train_log_dir()
        return {
            "log": log,
            "tensorboard": log,
            "checkpoints": log_dir.get_trial_model_dir(),
            "images": log_dir.get_trial_image_dir(),
        }
    log = os.fspath(log_dir)
    return {
        "log": log,
        "tensorboard": os.path.join(log, "tensorboard"),
        "checkpoints": os.path.join(log, "checkpoints"),
        "images": log,
    }


class BestCheckpoint(Callback):
    """Saves the framework as version ``evaluation.version`` whenever an evaluation improves.

    Sets ``trainer.result.best_version`` and ``result.paths["checkpoints"]``. A framework
    without a ``save`` method is not saved.

    Args:
        directory: The checkpoint directory handed to ``framework.save``.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def on_evaluation(self, trainer: Trainer, evaluation: Evaluation) -> Optional[bool]:
        if evaluation.improved and callable(getattr(trainer.framework, "save", None)):
            trainer.framework.save(self.directory, version=evaluation.version)
            trainer.result.best_version = evaluation.version
            trainer.result.paths["checkpoints"] = self.directory
        return None


class CSVLogger(Callback):
    """Writes ``progress.csv``: one row per training episode, flushed at once.

    Columns: ``episode``, ``steps``, ``return``, ``smoothed``, ``eval_return`` (the last
    evaluation since the previous row, else empty) and ``seconds`` since the run began.
    Each run rewrites the file; a resumed run cuts it back to the rows written when its
    save was made and appends to them, so no episode is written twice.

    Args:
        directory: The directory of ``progress.csv`` (created if missing).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._handle: Any = None
        self._rows: Optional[csv.DictWriter] = None
        self._pending: Optional[float] = None
        self._start = 0.0
        self._resume: Optional[Dict[str, Any]] = None

    def on_training_start(self, trainer: Trainer) -> None:
        os.makedirs(self.directory, exist_ok=True)
        path = trainer.result.paths["csv"] = os.path.join(self.directory, "progress.csv")
        resume, self._resume = self._resume, None
        if resume is not None:
            self._continue(path, resume)
            return
        self._handle = open(path, "w", newline="")  # noqa: SIM115 (closed in on_training_end)
        self._rows = csv.DictWriter(self._handle, fieldnames=_CSV_FIELDS)
        self._rows.writeheader()
        self._pending, self._start = None, time.time()

    def _continue(self, path: str, state: Dict[str, Any]) -> None:
        """Cut ``path`` back to its size at the save and append to it."""
        size, offset = (os.path.getsize(path) if os.path.exists(path) else None), int(state["size"])
        if size is None or size < offset:
            raise ValueError(
                f"cannot continue {path!r} from the save: it has {size} bytes, it had {offset} when "
                f"the save was made"
            )
        os.truncate(path, offset)
        self._handle = open(path, "a", newline="")  # noqa: SIM115 (closed in on_training_end)
        self._rows = csv.DictWriter(self._handle, fieldnames=_CSV_FIELDS)
        self._pending, self._start = state["pending"], time.time() - float(state["seconds"])

    def state_dict(self) -> Optional[Dict[str, Any]]:
        if self._handle is None:
            return None
        self._handle.flush()
        return {
            "size": os.fstat(self._handle.fileno()).st_size,
            "pending": self._pending,
            "seconds": time.time() - self._start,
        }

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        self._resume = state

    def on_evaluation(self, trainer: Trainer, evaluation: Evaluation) -> Optional[bool]:
        self._pending = evaluation.mean_return
        return None

    def on_episode_end(self, trainer: Trainer, episode: EpisodeEnd) -> Optional[bool]:
        shown, self._pending = self._pending, None
        self._rows.writerow(
            {
                "episode": episode.episode,
                "steps": episode.steps,
                "return": episode.episode_return,
                "smoothed": episode.smoothed,
                "eval_return": "" if shown is None else shown,
                "seconds": round(time.time() - self._start, 3),
            }
        )
        self._handle.flush()
        return None

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = self._rows = None


class TensorBoardLogger(Callback):
    """Writes TensorBoard scalars through :class:`machin.utils.tensor_board.TensorBoard`.

    By episode: ``train/return``, ``train/smoothed_return``, ``train/<name>`` for the
    episode's mean update results and ``eval/return`` of an evaluation made at that
    episode; an evaluation made due by the step count is written at once, by step.

    The writer writes in a background thread: :meth:`state_dict` (a save of the run)
    closes it, so that every scalar so far is in its file, and goes on in a new file. A
    resumed run deletes the event files made after the save (and cuts those it kept back
    to their size then), so no scalar is written twice.

    Args:
        directory: The directory of the event files.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._board: Any = None
        self._episode_eval: Optional[float] = None
        self._resume: Optional[Dict[str, Any]] = None

    def on_training_start(self, trainer: Trainer) -> None:
        resume, self._resume = self._resume, None
        self._episode_eval = None
        if resume is not None:
            _cut_event_files(self.directory, resume["files"])
            self._episode_eval = resume["episode_eval"]
        self._open()
        trainer.result.paths["tensorboard"] = self.directory

    def _open(self) -> None:
        """A new writer, in a new event file (named with the process id and a count, never reused)."""
        from ..utils.tensor_board import TensorBoard

        self._board = TensorBoard()
        self._board.init(
            logdir=self.directory, filename_suffix=f".{os.getpid()}.{next(_EVENT_FILE_NUMBERS)}"
        )

    def state_dict(self) -> Optional[Dict[str, Any]]:
        if self._board is None:
            return None
        self._board.writer.close()
        files = {
            os.path.basename(path): os.path.getsize(path) for path in _event_files(self.directory)
        }
        self._open()
        return {"files": files, "episode_eval": self._episode_eval}

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        self._resume = state

    def on_evaluation(self, trainer: Trainer, evaluation: Evaluation) -> Optional[bool]:
        if evaluation.by_steps:
            self._board.writer.add_scalar("eval/return", evaluation.mean_return, evaluation.steps)
        else:
            self._episode_eval = evaluation.mean_return
        return None

    def on_episode_end(self, trainer: Trainer, episode: EpisodeEnd) -> Optional[bool]:
        scalars = {
            "train/return": episode.episode_return,
            "train/smoothed_return": episode.smoothed,
            **{f"train/{name}": value for name, value in episode.losses.items()},
        }
        if self._episode_eval is not None:
            scalars["eval/return"] = self._episode_eval
            self._episode_eval = None
        for tag, value in scalars.items():
            self._board.writer.add_scalar(tag, value, episode.episode)
        return None

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        if self._board is not None:
            self._board.writer.close()
            self._board = None


def _event_files(directory: str) -> List[str]:
    return glob.glob(os.path.join(glob.escape(directory), "events.out.tfevents.*"))


def _cut_event_files(directory: str, sizes: Dict[str, int]) -> None:
    """Delete the event files of ``directory`` not in ``sizes`` and cut the others back to their size there."""
    for path in _event_files(directory):
        size = sizes.get(os.path.basename(path))
        if size is None:
            os.remove(path)
        elif os.path.getsize(path) > size:
            os.truncate(path, size)


class ProgressBar(Callback):
    """Shows the run's progress: episodes (steps when the run has a step limit), the smoothed
    return and, once there is one, the best evaluation so far.

    On a terminal it is a tqdm bar. A stream that is not a terminal (a log file, a pipe,
    a captured stream) gets no bar, whose ``\\r`` updates would pile up into one long
    line: it gets a plain line at most every ``interval`` seconds, and the last episode's
    line when the run ends.

    Args:
        stream: Where to write; ``None``: ``sys.stderr`` as it is when each run starts.
        interval: Seconds between two plain lines on a stream that is not a terminal
            (0: a line after every episode).

    Raises:
        ValueError: When ``interval`` is not a number ``>= 0``.
    """

    def __init__(self, stream: Optional[TextIO] = None, interval: float = 30.0) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
            raise ValueError(f"interval must be a number >= 0 (seconds), got {interval!r}")
        self.stream = stream
        self.interval = float(interval)
        self._bar: Any = None
        self._plain: Optional[TextIO] = None  # the stream of plain lines, during a run
        self._started = self._written = 0.0
        self._pending: Optional[str] = None  # the newest line not written yet

    def on_training_start(self, trainer: Trainer) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        if not _is_terminal(stream):
            self._plain, self._pending = stream, None
            self._started = self._written = time.monotonic()
            return
        from tqdm import tqdm

        if trainer.step_limit is not None:
            total, initial, unit = (
                trainer.step_limit,
                min(trainer.steps, trainer.step_limit),
                "step",
            )
        else:
            total, initial, unit = trainer.episode_limit, trainer.result.episodes, "episode"
        self._bar = tqdm(total=total, initial=initial, unit=unit, dynamic_ncols=True, file=stream)

    def on_episode_end(self, trainer: Trainer, episode: EpisodeEnd) -> Optional[bool]:
        if self._plain is not None:
            self._pending = self._line(trainer, episode)
            if time.monotonic() - self._written >= self.interval:
                self._write_pending()
            return None
        shown = {"smoothed": f"{episode.smoothed:.1f}"}
        if trainer.result.eval_returns:
            shown["best_eval"] = f"{trainer.result.best_eval_return:.1f}"
        self._bar.set_postfix(shown)
        limit = trainer.step_limit
        self._bar.update(1 if limit is None else min(episode.steps, limit) - self._bar.n)
        return None

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        if self._plain is not None:
            self._write_pending()
            self._plain = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _line(self, trainer: Trainer, episode: EpisodeEnd) -> str:
        """One plain progress line: episodes and steps (of their limits, as the bar counts
        them), the smoothed return, the best evaluation, the seconds since the start."""

        def count(name: str, value: int, limit: Optional[int]) -> str:
            return f"{name} {value}" if limit is None else f"{name} {min(value, limit)}/{limit}"

        parts = [
            count("episode", episode.episode, trainer.episode_limit),
            count("steps", episode.steps, trainer.step_limit),
            f"smoothed={episode.smoothed:.1f}",
        ]
        if trainer.result.eval_returns:
            parts.append(f"best_eval={trainer.result.best_eval_return:.1f}")
        parts.append(f"{time.monotonic() - self._started:.0f} s")
        return "  ".join(parts)

    def _write_pending(self) -> None:
        if self._pending is not None:
            self._plain.write(self._pending + "\n")
            self._plain.flush()
            self._pending = None
        self._written = time.monotonic()


def _is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an open terminal (a closed or unusual stream counts as not)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):
        return False


class LearningCurve(Callback):
    """Draws ``learning_curve.png`` of the training returns when the run ends (also by an error).

    Uses :func:`machin.utils.media.create_learning_curve` with the trainer's ``smoothing``
    and the framework's class name as the title.

    Args:
        directory: The directory of the picture.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        result = trainer.result
        if result.returns:
            from ..utils.media import create_learning_curve

            result.paths["curve"] = create_learning_curve(
                result.returns,
                self.directory,
                "learning_curve",
                title=type(trainer.framework).__name__,
                smoothing=trainer.smoothing,
            )


class EpisodeGif(Callback):
    """Records one greedy episode as ``episode.gif`` after a run that completed.

    The episode is reset with ``trainer.evaluation_seed(0)``.

    Args:
        env: An environment made with ``render_mode="rgb_array"``.
        directory: The directory of the GIF.
    """

    def __init__(self, env: gym.Env, directory: str) -> None:
        self.env = env
        self.directory = directory

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        if not completed:
            return
        from ..utils.media import create_video

        frames: List[np.ndarray] = []
        trainer.play_episode(self.env, trainer.evaluation_seed(0), frames=frames)
        trainer.result.paths["gif"] = create_video(frames, self.directory, "episode")
