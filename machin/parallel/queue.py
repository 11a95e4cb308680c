"""A one-way inter-process queue that serializes with :mod:`machin.parallel.pickle`.

Objects are pickled with dill (so lambdas and local functions can be sent) and
the sender chooses whether tensors are copied or passed by reference through
shared memory.
"""

import time
from multiprocessing.context import BaseContext
from queue import Empty
from typing import Any, Callable, Optional, Union

from .pickle import dumps, loads
from .process import resolve_context

__all__ = ["SimpleQueue", "Empty", "QueueTimeout"]


class QueueTimeout(Empty, TimeoutError):
    """Nothing arrived in a :class:`SimpleQueue` within the timeout.

    It is a :class:`queue.Empty`, as for the standard queues, and a
    :class:`TimeoutError`, which Machin 0.3.4 raised: catch it as either.
    """


def _timed_out(timeout: Optional[float]) -> QueueTimeout:
    return QueueTimeout(f"Timeout: no object arrived within timeout={timeout} seconds")


class SimpleQueue:
    """A one-way queue over a pipe; any number of processes may put and get.

    :meth:`put` and :meth:`get` take a lock on their end of the pipe, so several
    processes can share each end. :meth:`quick_put` and :meth:`quick_get` skip the
    lock and are only safe when a single thread in a single process uses that
    end (the task and result handler threads of :class:`~machin.parallel.pool.Pool`
    work this way).

    Serialization happens in the sending process before the write lock is taken,
    and deserialization in the receiving process after the read lock is released.

    The queue can be handed to a child process as an argument of
    :class:`multiprocessing.Process` (or :class:`machin.parallel.process.Process`)
    when it starts, like :class:`multiprocessing.SimpleQueue`; it cannot be sent
    through another queue.

    Args:
        ctx: Multiprocessing context (or start method name) used to create the pipe
            and locks; ``None`` picks the default of
            :func:`machin.parallel.process.resolve_context`. Use the context of the
            processes that will share the queue.
        copy_tensor: ``True`` sends full copies of tensors; ``False`` (default) sends
            only a reference, moving CPU tensors into shared memory.
        recurse: Passed to :func:`machin.parallel.pickle.dumps`: save only the
            globals that sent functions refer to.
    """

    def __init__(
        self,
        *,
        ctx: Union[BaseContext, str, None] = None,
        copy_tensor: bool = False,
        recurse: bool = False,
    ):
        ctx = resolve_context(ctx)
        self._reader, self._writer = ctx.Pipe(duplex=False)
        self._rlock = ctx.Lock()
        self._wlock = ctx.Lock()
        self._copy_tensor = copy_tensor
        self._recurse = recurse

    def __getstate__(self) -> dict:
        from multiprocessing import context

        context.assert_spawning(self)
        return self.__dict__.copy()

    def _dump(self, obj: Any) -> bytes:
        return dumps(obj, recurse=self._recurse, copy_tensor=self._copy_tensor)

    def put(self, obj: Any) -> None:
        """Put an object into the queue, holding the write lock.

        This is the method pool workers use to send results.

        Args:
            obj: Any object the queue's pickler can serialize.
        """
        data = self._dump(obj)
        with self._wlock:
            self._writer.send_bytes(data)

    def quick_put(self, obj: Any) -> None:
        """Put an object into the queue without locking.

        Only safe when one thread of one process is the only writer (the pool's
        task handler thread uses it to send tasks).

        Args:
            obj: Any object the queue's pickler can serialize.
        """
        self._writer.send_bytes(self._dump(obj))

    def get(self, timeout: Optional[float] = None) -> Any:
        """Take an object from the queue, holding the read lock.

        This is the method pool workers use to receive tasks.

        Args:
            timeout: Seconds to wait at most; ``None`` waits forever.

        Returns:
            The next object.

        Raises:
            QueueTimeout: If nothing arrived within ``timeout`` seconds (a
                ``queue.Empty`` and a ``TimeoutError``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        acquired = (
            self._rlock.acquire(True, timeout) if timeout is not None else self._rlock.acquire()
        )
        if not acquired:
            raise _timed_out(timeout)
        try:
            data = self._receive(deadline, timeout)
        finally:
            self._rlock.release()
        return loads(data)

    def quick_get(self, timeout: Optional[float] = None) -> Any:
        """Take an object from the queue without locking.

        Only safe when one thread of one process is the only reader (the pool's
        result handler thread uses it to receive results).

        Args:
            timeout: Seconds to wait at most; ``None`` waits forever.

        Returns:
            The next object.

        Raises:
            QueueTimeout: If nothing arrived within ``timeout`` seconds (a
                ``queue.Empty`` and a ``TimeoutError``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        return loads(self._receive(deadline, timeout))

    def _receive(self, deadline: Optional[float], timeout: Optional[float]) -> bytes:
        if deadline is not None and not self._reader.poll(max(0.0, deadline - time.monotonic())):
            raise _timed_out(timeout)
        return self._reader.recv_bytes()

    def empty(self) -> bool:
        """Tell whether nothing is waiting in the queue right now.

        Returns:
            ``True`` if a get would have to wait.
        """
        return not self._reader.poll()

    def close(self) -> None:
        """Close both ends of the pipe in this process."""
        self._reader.close()
        self._writer.close()

    def _discard_while(self, keep_going: Callable[[], bool]) -> None:
        """Take the read lock and throw away waiting objects while ``keep_going()`` is true.

        The lock is not released: this is for pools shutting down, which must stop
        their workers from picking up tasks and unblock a writer waiting on a full
        pipe. Objects are dropped without being unpickled.

        Args:
            keep_going: Called before each discarded object; stop when it returns
                ``False``.
        """
        self._rlock.acquire()
        while keep_going() and self._reader.poll():
            self._reader.recv_bytes()
            time.sleep(0)
