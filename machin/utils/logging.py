"""The library's logger and a logger that does nothing.

``default_logger`` is a standard :class:`logging.Logger` named ``"default_logger"``
at level INFO. It writes to standard error in the form
``[2020-07-26 22:45:53,764] <INFO>:default_logger:message`` and does not pass
records on to the root logger, so messages are not printed twice when an
application configures logging itself. Use ``default_logger.setLevel`` to change
how much it prints.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["default_logger", "fake_logger", "FakeLogger", "LOG_FORMAT"]

#: Format of the records written by :data:`default_logger`.
LOG_FORMAT = "[%(asctime)s] <%(levelname)s>:%(name)s:%(message)s"


def _make_default_logger() -> logging.Logger:
    logger = logging.getLogger("default_logger")
    # Modules may be imported again (reload, several interpreters sharing state in
    # tests); the handler is only added once.
    if not any(getattr(handler, "_machin_default", False) for handler in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._machin_default = True
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


#: The global logger of the library.
default_logger: logging.Logger = _make_default_logger()


class FakeLogger:
    """A stand-in for :class:`logging.Logger` whose methods accept the usual arguments and do nothing.

    Pass it where a ``logger`` argument is expected to silence the output.
    """

    def setLevel(self, level: Any) -> None:  # noqa: N802 (mirrors logging.Logger)
        """Ignore ``level``."""

    def debug(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Ignore ``msg`` and the other arguments."""

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Ignore ``msg`` and the other arguments."""

    def warning(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Ignore ``msg`` and the other arguments."""

    def warn(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Ignore ``msg`` and the other arguments."""

    def error(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Ignore ``msg`` and the other arguments."""

    def exception(self, msg: Any, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        """Ignore ``msg``, ``exc_info`` and the other arguments."""

    def critical(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Ignore ``msg`` and the other arguments."""

    def log(self, level: Any, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Ignore ``level``, ``msg`` and the other arguments."""


#: A shared :class:`FakeLogger`.
fake_logger = FakeLogger()
