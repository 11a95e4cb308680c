"""A directory layout for the files of training runs ("trials").

Each trial gets a directory named after its start time inside a common root::

    <env_root>/
    └── 2020_05_09_15_00_31/        (the trial, named with ``time_format``)
        ├── config/
        ├── log/
        │   ├── images/
        │   └── train_log/
        └── model/

Trial names have a resolution of one second: two ``SaveEnv`` objects created
in the same second under the same root share the trial directory.
"""

from __future__ import annotations

import datetime
import os
import shutil
from typing import Iterable, List, Union

from .conf import Config, load_config_file, save_config
from .helper_classes import Object
from .logging import default_logger
from .prepare import prep_clear_dirs, prep_create_dirs

__all__ = ["SaveEnv"]

_KEPT_ON_RESTART = ("root_dir", "restart_from_trial")


class SaveEnv:
    """Create (or reopen) the directories of one trial.

    Args:
        env_root: Root directory holding all trials. A :class:`~machin.utils.conf.Config`
            is accepted too (as in the configuration example of the Machin manual):
            its ``root_dir`` entry is the root, its ``restart_from_trial`` entry (if
            any) is used when the argument is not given, and the configuration is
            saved to ``<trial>/config/config.json`` for a new trial, or updated from
            that file when a trial is restarted (except ``root_dir`` and
            ``restart_from_trial``).
        restart_from_trial: Name of an existing trial (formatted with
            ``time_format``), or its start time as a :class:`datetime.datetime` (what
            :meth:`get_trial_time` returns), to reuse instead of starting a new one. A
            trial that does not exist yet is created, with a warning.
        time_format: :func:`time.strftime` format of trial names.

    Attributes:
        env_root: The root directory.
        time_format: The format of trial names.
        env_create_time: Start time of the trial, a :class:`datetime.datetime`.

    Subclasses may override :meth:`_check_dirs`, which runs before the directories
    are created, to validate the layout (and raise ``RuntimeError`` if it is wrong).

    Raises:
        ValueError: When ``restart_from_trial`` is not a time in ``time_format``, or a
            Config without ``root_dir`` is given.
    """

    def __init__(
        self,
        env_root: Union[str, os.PathLike[str], Config],
        restart_from_trial: Union[str, datetime.datetime, None] = None,
        time_format: str = "%Y_%m_%d_%H_%M_%S",
    ):
        conf = None
        if isinstance(env_root, Object):
            conf = env_root
            if "root_dir" not in conf.data:
                raise ValueError(
                    f"a Config given as env_root must have a root_dir entry, got {conf!r}"
                )
            env_root = conf.data["root_dir"]
            if restart_from_trial is None:
                restart_from_trial = conf.data.get("restart_from_trial")
        self.env_root = os.fspath(env_root)
        self.time_format = time_format

        if isinstance(restart_from_trial, datetime.datetime):
            restart_from_trial = restart_from_trial.strftime(time_format)
        if restart_from_trial is not None:
            try:
                self.env_create_time = datetime.datetime.strptime(restart_from_trial, time_format)
            except (TypeError, ValueError):
                raise ValueError(
                    f"restart_from_trial must be a trial name in the format {time_format!r}, "
                    f"got {restart_from_trial!r} (time data does not match format)"
                ) from None
            self._trial_name = restart_from_trial
            trial_root = os.path.join(self.env_root, restart_from_trial)
            if not os.path.isdir(trial_root):
                default_logger.warning(
                    f"trial {restart_from_trial!r} to restart from does not exist under "
                    f"{self.env_root!r}; creating it"
                )
        else:
            self.env_create_time = datetime.datetime.now()
            self._trial_name = self.env_create_time.strftime(time_format)

        self._check_dirs()
        self._prep_dirs()
        if conf is not None:
            self._sync_config(conf, restarted=restart_from_trial is not None)

    def _check_dirs(self) -> None:
        """Validate the directory layout before it is created; does nothing by default.

        Override it in a subclass and raise ``RuntimeError`` for an invalid layout.
        """

    def _prep_dirs(self) -> None:
        """Create the trial directories."""
        prep_create_dirs(
            [
                self.get_trial_config_dir(),
                self.get_trial_image_dir(),
                self.get_trial_train_log_dir(),
                self.get_trial_model_dir(),
            ]
        )

    def _sync_config(self, conf: Object, restarted: bool) -> None:
        path = os.path.join(self.get_trial_config_dir(), "config.json")
        if restarted:
            if os.path.isfile(path):
                saved = load_config_file(path)
                for key, value in saved.data.items():
                    if key not in _KEPT_ON_RESTART:
                        conf.attr(key, value, change=True)
        else:
            save_config(conf, path)

    def create_dirs(self, dirs: Iterable[str]) -> List[str]:
        """Create additional directories inside the trial directory.

        Args:
            dirs: Paths relative to the trial directory.

        Returns:
            The full paths of the directories.

        Raises:
            ValueError: When a path is absolute.
            TypeError: When ``dirs`` is a single path instead of a collection.
        """
        if isinstance(dirs, (str, bytes, os.PathLike)):
            raise TypeError(
                f"dirs must be an iterable of relative paths, got the single path {dirs!r}"
            )
        paths = []
        for directory in dirs:
            if os.path.isabs(directory):
                raise ValueError(
                    f"dirs must be relative to the trial directory, got the absolute path {directory!r}"
                )
            paths.append(os.path.join(self.get_trial_root(), directory))
        prep_create_dirs(paths)
        return paths

    def get_trial_root(self) -> str:
        """Return the trial directory ``<env_root>/<trial name>``."""
        return os.path.join(self.env_root, self._trial_name)

    def get_trial_time(self) -> datetime.datetime:
        """Return the start time of the trial (``env_create_time``).

        ``get_trial_time().strftime(time_format)`` is the trial's directory name.
        """
        return self.env_create_time

    def get_trial_config_dir(self) -> str:
        """Return ``<trial>/config``."""
        return os.path.join(self.get_trial_root(), "config")

    def get_trial_model_dir(self) -> str:
        """Return ``<trial>/model``."""
        return os.path.join(self.get_trial_root(), "model")

    def get_trial_image_dir(self) -> str:
        """Return ``<trial>/log/images``."""
        return os.path.join(self.get_trial_root(), "log", "images")

    def get_trial_train_log_dir(self) -> str:
        """Return ``<trial>/log/train_log``."""
        return os.path.join(self.get_trial_root(), "log", "train_log")

    def clear_trial_config_dir(self) -> None:
        """Delete the contents of the config directory."""
        prep_clear_dirs([self.get_trial_config_dir()])

    def clear_trial_model_dir(self) -> None:
        """Delete the contents of the model directory."""
        prep_clear_dirs([self.get_trial_model_dir()])

    def clear_trial_image_dir(self) -> None:
        """Delete the contents of the image directory."""
        prep_clear_dirs([self.get_trial_image_dir()])

    def clear_trial_train_log_dir(self) -> None:
        """Delete the contents of the training-log directory."""
        prep_clear_dirs([self.get_trial_train_log_dir()])

    def remove_trials_older_than(
        self, diff_day: int = 0, diff_hour: int = 1, diff_minute: int = 0, diff_second: int = 0
    ) -> List[str]:
        """Delete the trials under the root that started before now minus the given time.

        Only directories whose names parse with ``time_format`` are considered, and
        the current trial is never deleted. By default, trials that started more
        than one hour ago are removed.

        Args:
            diff_day: Days of the age limit.
            diff_hour: Hours of the age limit.
            diff_minute: Minutes of the age limit.
            diff_second: Seconds of the age limit.

        Returns:
            The names of the removed trials, sorted.
        """
        limit = datetime.datetime.now() - datetime.timedelta(
            days=diff_day, hours=diff_hour, minutes=diff_minute, seconds=diff_second
        )
        removed = []
        for name in sorted(os.listdir(self.env_root)):
            path = os.path.join(self.env_root, name)
            if name == self._trial_name or not os.path.isdir(path):
                continue
            try:
                started = datetime.datetime.strptime(name, self.time_format)
            except ValueError:
                continue
            if started < limit:
                default_logger.info(f"removing trial directory {path!r}")
                shutil.rmtree(path)
                removed.append(name)
        return removed
