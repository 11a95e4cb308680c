"""Exceptions that keep their traceback text when they travel between processes.

A traceback object cannot be pickled, so an exception sent from a worker process
to its parent normally arrives without any hint of where it was raised.
:class:`ExceptionWithTraceback` formats the traceback into text on the sending
side; unpickling it yields the original exception again, with a
:class:`RemoteTraceback` holding that text set as its ``__cause__``. Printing the
exception in the parent therefore shows the remote stack first, followed by the
local one.
"""

import multiprocessing
import traceback
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .pickle import dumps, loads

__all__ = [
    "RemoteTraceback",
    "ExceptionWithTraceback",
    "WorkerException",
    "rebuild_exception",
    "format_exceptions",
    "collect_exceptions",
    "ValueRuntimeError",
    "TypeRuntimeError",
    "KeyRuntimeError",
    "ValueAssertionError",
    "RuntimeAssertionError",
    "WorkerDiedError",
    "TaskTimeoutError",
]


# -- errors of two types --------------------------------------------------------------------
# Where Machin 0.3.4 raised one exception type and machin now raises a more precise one, the
# error is an instance of a class deriving from both, so ``except`` clauses written for
# either version keep catching it.


class ValueRuntimeError(ValueError, RuntimeError):
    """An invalid value that Machin 0.3.4 reported as a :class:`RuntimeError`.

    Catch it as either type.
    """


class TypeRuntimeError(TypeError, RuntimeError):
    """An argument of the wrong type that Machin 0.3.4 reported as a :class:`RuntimeError`.

    Catch it as either type.
    """


class KeyRuntimeError(KeyError, RuntimeError):
    """A key held by another process: a :class:`RuntimeError` for machin, a
    :class:`KeyError` for Machin 0.3.4 (which only looked at the local table).

    Catch it as either type.
    """


class ValueAssertionError(ValueError, AssertionError):
    """An invalid value that Machin 0.3.4 rejected with an ``assert`` statement.

    Catch it as either type.
    """


class RuntimeAssertionError(RuntimeError, AssertionError):
    """A call from the wrong process, which Machin 0.3.4 rejected with an ``assert`` statement.

    Catch it as either type.
    """


class WorkerDiedError(RuntimeError):
    """A pool worker ended (killed by a signal, or exited) while it was running a task.

    The task fails with this error; the pool replaces the worker and keeps serving the
    other tasks. For ``map``/``starmap``, :attr:`partial_results` holds the results of
    the other items (``None`` where an item was lost) once the call has finished.

    Args:
        message: Description naming the worker, how it ended and the task.
        worker: Name of the worker process or thread.
        pid: Process id of the worker, ``None`` for a thread.
        exitcode: Exit code of the process; ``-N`` when killed by signal ``N``.
        job: The pool's job number of the task.
        index: The task (chunk) number within the job.

    Attributes:
        worker, pid, exitcode, job, index: As given.
        partial_results: For a map, the list of results by item, else ``None``.
    """

    def __init__(
        self,
        message: str,
        worker: Optional[str] = None,
        pid: Optional[int] = None,
        exitcode: Optional[int] = None,
        job: Optional[int] = None,
        index: Optional[int] = None,
    ):
        super().__init__(message)
        self.worker = worker
        self.pid = pid
        self.exitcode = exitcode
        self.job = job
        self.index = index
        self.partial_results: Optional[List[Any]] = None

    def __reduce__(self) -> Any:
        return type(self), (
            self.args[0],
            self.worker,
            self.pid,
            self.exitcode,
            self.job,
            self.index,
        )


class TaskTimeoutError(multiprocessing.TimeoutError, TimeoutError):
    """A pool task did not finish within the timeout given to ``get``.

    It is the :class:`multiprocessing.TimeoutError` that the standard pools raise and the
    built-in :class:`TimeoutError`; its message names the task.
    """


class RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in another process or thread.

    It is attached as ``__cause__`` to a rebuilt exception, so Python prints it
    above the local traceback.

    Args:
        tb: The traceback text, as produced by :func:`traceback.format_exception`.
    """

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return "\n--- remote traceback ---\n" + self.tb.rstrip("\n") + "\n--- end ---"


class ExceptionWithTraceback:
    """An exception packed together with its traceback text, ready for pickling.

    Unpickling an instance does not give an :class:`ExceptionWithTraceback` back:
    it gives the wrapped exception, whose ``__cause__`` is a
    :class:`RemoteTraceback` carrying the text captured here.

    If the exception itself cannot survive a pickle round trip (for example its
    constructor needs arguments that are not stored in ``args``), a
    :class:`RuntimeError` naming the original type and message travels instead, so
    the receiving side never fails while unpickling.

    Args:
        exc: The exception to carry.
        tb: The traceback to format. ``None`` uses ``exc.__traceback__``; a string
            is taken as already formatted text.

    Raises:
        TypeError: If ``exc`` is not an exception instance.
    """

    def __init__(self, exc: BaseException, tb: Union[TracebackType, str, None] = None):
        if not isinstance(exc, BaseException):
            raise TypeError(
                f"exc must be an exception instance, got {exc!r} of type {type(exc).__name__}"
            )
        if isinstance(tb, str):
            text = tb
        else:
            tb = exc.__traceback__ if tb is None else tb
            text = "".join(traceback.format_exception(type(exc), exc, tb))
        self.exc = exc
        self.tb = text

    def __reduce__(self) -> Tuple[Callable, Tuple[BaseException, str]]:
        return rebuild_exception, (_portable(self.exc), self.tb)


def rebuild_exception(exc: BaseException, tb: str) -> BaseException:
    """Attach ``RemoteTraceback(tb)`` to ``exc`` as its cause and return ``exc``.

    This is the unpickling half of :class:`ExceptionWithTraceback`.

    Args:
        exc: The exception that was carried.
        tb: Its traceback text.

    Returns:
        ``exc`` itself.
    """
    exc.__cause__ = RemoteTraceback(tb)
    return exc


def _portable(exc: BaseException) -> BaseException:
    """Return ``exc`` if it survives a dill round trip, else a RuntimeError describing it."""
    try:
        loads(dumps(exc, recurse=True))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__qualname__}: {exc}")


def format_exceptions(exceptions: Sequence[BaseException]) -> str:
    """Format several exceptions, with their tracebacks and causes, into one text.

    Exceptions rebuilt from an :class:`ExceptionWithTraceback` print their remote
    traceback through their ``__cause__``.

    Args:
        exceptions: The exceptions, in the order they were raised.

    Returns:
        The formatted text; an empty string for an empty sequence.
    """
    parts = []
    for index, exc in enumerate(exceptions, 1):
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        parts.append(f"Exception {index} of {len(exceptions)}:\n{text}")
    return "\n".join(parts)


class WorkerException(Exception):
    """What a thread's or process's target and cleaner raised, as one exception.

    The message is :func:`format_exceptions` of the collected exceptions, so it
    holds their full traceback text. Base of
    :class:`~machin.parallel.thread.ThreadException` and
    :class:`~machin.parallel.process.ProcessException`.

    Args:
        exceptions: The collected exceptions, target first.

    Attributes:
        exceptions: The same, as a list, for programmatic inspection.
    """

    def __init__(self, exceptions: Sequence[BaseException] = ()):
        self.exceptions = list(exceptions)
        super().__init__(format_exceptions(self.exceptions))

    def __reduce__(self) -> Tuple[type, Tuple[List[BaseException]]]:
        return type(self), (self.exceptions,)


def collect_exceptions(
    target: Optional[Callable[..., Any]],
    args: Sequence[Any] = (),
    kwargs: Optional[Dict[str, Any]] = None,
    cleaner: Optional[Callable[[], Any]] = None,
) -> List[BaseException]:
    """Call ``target(*args, **kwargs)``, then ``cleaner()``, and return what they raised.

    The cleaner runs even when the target fails. Only :class:`Exception`
    subclasses are collected: ``SystemExit`` and ``KeyboardInterrupt`` keep their
    usual meaning and propagate (after the cleaner has run).

    Args:
        target: The callable to run; ``None`` runs nothing.
        args: Positional arguments for ``target``.
        kwargs: Keyword arguments for ``target``.
        cleaner: A callable taking no argument, run after ``target``.

    Returns:
        The exceptions raised by the target and then by the cleaner (zero, one or two).
    """
    raised: List[BaseException] = []
    try:
        if target is not None:
            target(*args, **(kwargs or {}))
    except Exception as error:
        raised.append(error)
    finally:
        if cleaner is not None:
            try:
                cleaner()
            except Exception as error:
                raised.append(error)
    return raised
