"""A thread that records the exceptions of its target and cleaner."""

import threading
from typing import Any, Callable, Dict, Iterable, List, Optional

from .exception import WorkerException, collect_exceptions, format_exceptions

__all__ = ["Thread", "ThreadException"]


class ThreadException(WorkerException):
    """Raised by :meth:`Thread.watch`: what the thread's target and cleaner raised.

    ``exceptions`` holds the original exception objects (with their tracebacks);
    the message holds their formatted tracebacks.
    """


class Thread(threading.Thread):
    """:class:`threading.Thread` that catches the exceptions of its target.

    Python prints an exception raised in a thread and forgets it. This thread
    keeps it instead: after the thread ends, :attr:`exception` tells whether the
    target (or the cleaner) failed, and :meth:`watch` raises that failure in the
    calling thread, with the original traceback text in the message.

    Args:
        group: Reserved, must be ``None`` (as for :class:`threading.Thread`).
        target: Callable run by the thread.
        name: Thread name.
        args: Positional arguments for ``target``.
        kwargs: Keyword arguments for ``target`` (``None`` means none).
        cleaner: Callable taking no argument, run after ``target`` in the same
            thread, even when the target raised. Its exceptions are kept too.
        daemon: Whether the thread is a daemon thread (``None`` inherits it from
            the creating thread).
    """

    def __init__(
        self,
        group: None = None,
        target: Optional[Callable[..., Any]] = None,
        name: Optional[str] = None,
        args: Iterable[Any] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        cleaner: Optional[Callable[[], Any]] = None,
        *,
        daemon: Optional[bool] = None,
    ):
        super().__init__(group, target, name, args, kwargs, daemon=daemon)
        self._cleaner = cleaner
        self._raised: List[BaseException] = []
        self._exception: Optional[ThreadException] = None

    format_exceptions = staticmethod(format_exceptions)

    def run(self) -> None:
        """Run the target, then the cleaner, keeping what they raise."""
        try:
            self._raised = collect_exceptions(self._target, self._args, self._kwargs, self._cleaner)
        finally:
            # Like threading.Thread.run: drop references to the callables and arguments.
            del self._target, self._args, self._kwargs, self._cleaner

    @property
    def exception(self) -> Optional[ThreadException]:
        """The :class:`ThreadException` of the target and cleaner, or ``None`` if they
        did not raise (or have not finished yet)."""
        if self._exception is None and self._raised:
            self._exception = ThreadException(self._raised)
        return self._exception

    def watch(self) -> None:
        """Raise :attr:`exception` in the caller if there is one; return otherwise.

        It does not wait: call :meth:`join` first to wait for the thread to end.

        Raises:
            ThreadException: If the target or the cleaner raised.
        """
        exception = self.exception
        if exception is not None:
            raise exception
