"""A process that sends the exceptions of its target and cleaner back to its parent.

It also holds the rule every process-based tool of :mod:`machin.parallel` uses to
pick a start method (:func:`resolve_context`).
"""

import multiprocessing
import sys
import time
from multiprocessing.connection import wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from .exception import (
    ExceptionWithTraceback,
    WorkerException,
    collect_exceptions,
    format_exceptions,
)
from .pickle import dumps, loads

__all__ = ["Process", "ProcessException", "resolve_context", "DEFAULT_START_METHOD"]

#: Start method used when none is given: "fork" on Linux, where it is available
#: and fast, "spawn" elsewhere (fork is unsafe on macOS and missing on Windows).
DEFAULT_START_METHOD = "fork" if sys.platform.startswith("linux") else "spawn"


def resolve_context(ctx: Union[BaseContext, str, None] = None) -> BaseContext:
    """Turn a context, a start method name or ``None`` into a multiprocessing context.

    Args:
        ctx: A context (returned as is), a start method name ("fork", "spawn",
            "forkserver") or ``None`` for :data:`DEFAULT_START_METHOD`.

    Returns:
        The multiprocessing context.

    Raises:
        ValueError: If the start method is not available on this platform.
        TypeError: If ``ctx`` is of another type.
    """
    if ctx is None:
        ctx = DEFAULT_START_METHOD
    if isinstance(ctx, str):
        methods = multiprocessing.get_all_start_methods()
        if ctx not in methods:
            raise ValueError(f"ctx must be one of the start methods {methods}, got {ctx!r}")
        return multiprocessing.get_context(ctx)
    if isinstance(ctx, BaseContext):
        return ctx
    raise TypeError(
        "ctx must be a multiprocessing context, a start method name or None, "
        f"got {ctx!r} of type {type(ctx).__name__}"
    )


class ProcessException(WorkerException):
    """Raised by :meth:`Process.watch`: what the child's target and cleaner raised.

    ``exceptions`` holds the exceptions rebuilt in the parent; each has a
    :class:`~machin.parallel.exception.RemoteTraceback` with the child's traceback
    text as ``__cause__``. The message holds all that text.
    """


class Process(BaseProcess):
    """A process whose target and cleaner exceptions reach the parent.

    The child formats the traceback of anything its target or cleaner raises and
    sends it, with the exception, through a pipe. In the parent,
    :attr:`exception` gives it as a :class:`ProcessException` and :meth:`watch`
    raises it.

    With a "spawn" or "forkserver" context the target, its arguments and the
    cleaner travel to the child as a dill payload (see
    :mod:`machin.parallel.pickle`), so lambdas and local functions work there too;
    tensors among them are passed by reference (CPU tensors through shared
    memory), as with :mod:`torch.multiprocessing`. With "fork" nothing is
    pickled: the child inherits them.

    Args:
        group: Reserved, must be ``None``.
        target: Callable run in the child.
        name: Process name.
        args: Positional arguments for ``target``.
        kwargs: Keyword arguments for ``target`` (``None`` means none).
        cleaner: Callable taking no argument, run in the child after ``target``,
            even when the target raised. Its exceptions are reported too.
        ctx: Multiprocessing context or start method name; ``None`` uses
            :data:`DEFAULT_START_METHOD`.
        daemon: Daemon flag (``None`` inherits it from the creating process).
    """

    def __init__(
        self,
        group: None = None,
        target: Optional[Callable[..., Any]] = None,
        name: Optional[str] = None,
        args: Iterable[Any] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        cleaner: Optional[Callable[[], Any]] = None,
        ctx: Union[BaseContext, str, None] = None,
        *,
        daemon: Optional[bool] = None,
    ):
        super().__init__(group, target, name, args, kwargs or {}, daemon=daemon)
        self._ctx = resolve_context(ctx)
        # Read by BaseProcess._bootstrap in the child, like the class attribute of
        # multiprocessing's own process classes.
        self._start_method = getattr(self._ctx.Process, "_start_method", None)
        self._cleaner = cleaner
        self._error_reader, self._error_writer = self._ctx.Pipe(duplex=False)
        self._exception: Optional[ProcessException] = None

    format_exceptions = staticmethod(format_exceptions)

    def _Popen(self, process_obj: BaseProcess) -> Any:
        # BaseProcess.start() calls this; delegate to the chosen context's process class.
        return self._ctx.Process._Popen(process_obj)

    def __getstate__(self) -> Dict[str, Any]:
        # Only used when a spawn/forkserver child is started.
        state = self.__dict__.copy()
        payload = tuple(state.pop(key) for key in ("_target", "_args", "_kwargs", "_cleaner"))
        state["_payload"] = dumps(payload, recurse=True, copy_tensor=False)
        state.update(_ctx=None, _error_reader=None, _exception=None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        target, args, kwargs, cleaner = loads(state.pop("_payload"))
        self.__dict__.update(state)
        self._target, self._args, self._kwargs, self._cleaner = target, args, kwargs, cleaner

    def start(self) -> None:
        """Start the child process."""
        super().start()
        # The child owns the writing end now; closing ours lets the reader see EOF.
        self._error_writer.close()

    def run(self) -> None:
        """Run the target, then the cleaner, and report what they raised (in the child)."""
        raised = collect_exceptions(self._target, self._args, self._kwargs, self._cleaner)
        if raised:
            payload = [ExceptionWithTraceback(error) for error in raised]
            self._error_writer.send_bytes(dumps(payload, recurse=True))
        self._error_writer.close()

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the child to end, reading its report meanwhile.

        Reading while waiting keeps a child with a long report from blocking on a
        full pipe.

        Args:
            timeout: Seconds to wait at most; ``None`` waits until the child ends.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._error_reader is not None and self._popen is not None:
            ready = wait([self._error_reader, self.sentinel], _remaining(deadline))
            if self._error_reader not in ready:
                break
            self._receive_report()
        super().join(_remaining(deadline))

    def _receive_report(self) -> None:
        try:
            data = self._error_reader.recv_bytes()
        except EOFError:
            self._error_reader.close()
            self._error_reader = None
            return
        raised: List[BaseException] = loads(data)
        self._exception = ProcessException(raised)

    @property
    def exception(self) -> Optional[ProcessException]:
        """The :class:`ProcessException` reported by the child, or ``None``.

        ``None`` also while the child runs and has not reported anything yet.
        """
        if self._exception is None and self._error_reader is not None and self._error_reader.poll():
            self._receive_report()
        return self._exception

    def watch(self) -> None:
        """Raise the child's failure in the parent if it has reported one.

        It does not wait for the child: call :meth:`join` first for that. A child
        that has already ended is joined (reaped) before raising.

        Raises:
            ProcessException: If the target or the cleaner raised in the child.
        """
        exception = self.exception
        if exception is None:
            return
        if self._popen is not None and not self.is_alive():
            self.join()
        raise exception

    def close(self) -> None:
        """Release the resources of an ended process (see :meth:`BaseProcess.close`)."""
        super().close()
        if self._error_reader is not None:
            self._error_reader.close()
            self._error_reader = None


def _remaining(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
