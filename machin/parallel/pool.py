"""Process and thread pools that run lambdas, keep per-worker contexts and share tensors.

All pools here are :class:`multiprocessing.pool.Pool` subclasses and keep its
methods and their semantics (``apply``, ``apply_async``, ``map``, ``map_async``,
``imap``, ``imap_unordered``, ``starmap``, ``starmap_async``, ``close``,
``terminate``, ``join``, use as a context manager), plus ``size()``.

Process pools (:class:`Pool`, :class:`P2PPool`, :class:`CtxPool`) move every
task, argument and result through a :class:`~machin.parallel.queue.SimpleQueue`,
that is with dill, so lambdas and local functions can be submitted. The pool's
``is_copy_tensor`` and ``share_method`` decide whether tensors are copied or
shared (see :mod:`machin.parallel.pickle`). An exception raised by a task comes
back to the caller as the original exception, with the worker's traceback text
attached as a :class:`~machin.parallel.exception.RemoteTraceback` in ``__cause__``.

Start method: ``"fork"`` on Linux and ``"spawn"`` elsewhere
(:func:`machin.parallel.process.resolve_context`), except that
``share_method="cuda"`` selects ``"spawn"`` because CUDA cannot be used in a
forked child, and so does a pool that copies tensors created in a process where
CUDA is already initialized (Machin 0.3.4 always used "spawn" for those pools, so
its workers could use CUDA). The keyword-only ``context`` argument (a start method
name or a multiprocessing context) overrides the rule.
"""

import itertools
import os
import signal
import sys
import threading
from functools import partial
from multiprocessing import pool as mp_pool
from multiprocessing.context import BaseContext
from multiprocessing.dummy import DummyProcess
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from .exception import (
    ExceptionWithTraceback,
    TaskTimeoutError,
    ValueRuntimeError,
    WorkerDiedError,
)
from .pickle import dumps, loads
from .process import Process, resolve_context
from .queue import SimpleQueue

__all__ = [
    "Pool",
    "P2PPool",
    "CtxPool",
    "CtxPoolStorage",
    "ThreadPool",
    "CtxThreadPool",
    "proxy_caller",
    "proxy_ctx_caller",
    "proxy_dumper",
]

ContextLike = Union[BaseContext, str, None]
Function = Union[Callable[..., Any], bytes]


class CtxPoolStorage:
    """Where a :class:`CtxPool` worker process keeps its own context.

    Every worker process has its own copy of this class, so ``storage`` holds the
    context of the worker reading it. It is ``None`` in the process that owns the
    pool.
    """

    storage: Any = None


# Each CtxThreadPool worker thread keeps its context here.
_thread_context = threading.local()


def _as_function(func: Function) -> Callable[..., Any]:
    return loads(func) if isinstance(func, (bytes, bytearray)) else func


def _call_parts(input_: Tuple[Any, ...]) -> Tuple[Callable[..., Any], Sequence[Any], dict]:
    """``(function, args, kwargs)`` from the arguments of a proxy caller."""
    if len(input_) == 1 and isinstance(input_[0], (list, tuple)):
        input_ = tuple(input_[0])
    if len(input_) != 3:
        raise ValueError(
            "a proxy caller takes (function, args, kwargs), as three arguments or as one "
            f"sequence of three (an entry of proxy_dumper), got {len(input_)} value(s)"
        )
    func, args, kwargs = input_
    return _as_function(func), tuple(args), dict(kwargs or {})


def proxy_caller(*input_: Any) -> Any:
    """Call a function given with its arguments, deserializing it first if it is bytes.

    ``proxy_caller(func, args, kwargs)`` and ``proxy_caller((func, args, kwargs))``
    both return ``func(*args, **kwargs)``, where ``func`` is a callable or bytes
    from :func:`proxy_dumper` / :func:`~machin.parallel.pickle.dumps`. The
    one-argument form takes an entry of :func:`proxy_dumper`, so
    ``pool.map(proxy_caller, proxy_dumper(...))`` works on any pool (the calling
    convention of Machin 0.3.4).

    Args:
        *input_: ``func, args, kwargs``, or one sequence holding them.

    Returns:
        What the function returns.

    Raises:
        ValueError: If the arguments are not three values (or one sequence of three).
    """
    func, args, kwargs = _call_parts(input_)
    return func(*args, **kwargs)


def proxy_ctx_caller(*input_: Any) -> Any:
    """Like :func:`proxy_caller`, passing the worker context as the first argument.

    ``proxy_ctx_caller(func, args, kwargs)`` returns
    ``func(CtxPoolStorage.storage, *args, **kwargs)``.

    Args:
        *input_: ``func, args, kwargs``, or one sequence holding them.

    Returns:
        What the function returns.

    Raises:
        ValueError: If the arguments are not three values (or one sequence of three).
    """
    func, args, kwargs = _call_parts(input_)
    return func(CtxPoolStorage.storage, *args, **kwargs)


def proxy_dumper(
    recurse: bool, copy_tensor: bool, func: Callable[..., Any], args_list: Iterable[Sequence[Any]]
) -> List[List[Any]]:
    """Serialize ``func`` once and pair it with each argument tuple.

    Each entry is ``[func_bytes, args, {}]``, which :func:`proxy_caller` accepts as
    its only argument; so ``pool.map(proxy_caller, entries)`` runs the calls on any
    pool, including the plain :mod:`multiprocessing` ones, since the function
    travels as bytes.

    Note that with ``copy_tensor=False`` the bytes may hold handles of shared CPU
    tensors, meant to be deserialized once each.

    Args:
        recurse: See :func:`~machin.parallel.pickle.dumps`.
        copy_tensor: See :func:`~machin.parallel.pickle.dumps`.
        func: The function to serialize.
        args_list: One sequence of positional arguments per call.

    Returns:
        ``[[func_bytes, args, {}] for args in args_list]``.
    """
    func_bytes = dumps(func, recurse=recurse, copy_tensor=copy_tensor)
    return [[func_bytes, tuple(args), {}] for args in args_list]


class _RemoteError(Exception):
    """Carries a task's exception out of a worker; it unpickles as that exception."""

    def __init__(self, error: BaseException):
        super().__init__(repr(error))
        self.carrier = ExceptionWithTraceback(error)

    def __reduce__(self) -> Any:
        return self.carrier.__reduce__()


def _call_reporting_errors(
    caller: Callable[..., Any], func: Function, *args: Any, **kwargs: Any
) -> Any:
    try:
        return caller(func, args, kwargs)
    except Exception as error:
        raise _RemoteError(error) from None


def _call_catching_exit(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a thread pool task; a ``SystemExit`` fails the task instead of ending the thread."""
    try:
        return func(*args, **kwargs)
    except SystemExit as exit_:
        name = threading.current_thread().name
        raise WorkerDiedError(
            f"pool worker thread {name} would have exited (SystemExit with code "
            f"{exit_.code!r}) while running {_function_name(func)}; the task failed and "
            f"the thread keeps serving",
            worker=name,
            exitcode=exit_.code if isinstance(exit_.code, int) else None,
        ) from exit_


def _call_with_thread_context(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return func(_thread_context.value, *args, **kwargs)


def _set_process_context(context: Any) -> None:
    CtxPoolStorage.storage = context


def _set_thread_context(context: Any) -> None:
    _thread_context.value = context


def _enter_context(
    setter: Callable[[Any], None],
    context: Any,
    initializer: Optional[Callable[..., Any]],
    *initargs: Any,
) -> None:
    setter(context)
    if initializer is not None:
        initializer(*initargs)


# The standard pool starts each worker with the arguments
# (inqueue, outqueue, initializer, initargs, maxtasks, wrap_exception). The
# adapters below change them for the worker of one slot.


def _adapt_context(
    setter: Callable[[Any], None], contexts: Sequence[Any], slot: int, args: Tuple[Any, ...]
) -> Tuple[Any, ...]:
    inqueue, outqueue, initializer, initargs, *rest = args
    initializer = partial(_enter_context, setter, contexts[slot], initializer)
    return (inqueue, outqueue, initializer, initargs, *rest)


def _adapt_p2p(queues: Sequence[SimpleQueue], slot: int, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    return (queues[slot], *args[1:])


class _PoolWorker(Process):
    """A pool worker process; the pool sets its daemon flag once, at creation.

    The standard pool forces ``daemon = True`` on every worker; that assignment
    is ignored here so ``is_daemon=False`` can hold.
    """

    daemon = property(BaseProcess.daemon.fget, lambda self, value: None)


def _create_process_worker(is_daemon: bool, ctx: BaseContext, **kwds: Any) -> _PoolWorker:
    worker = _PoolWorker(ctx=ctx, **kwds)
    BaseProcess.daemon.fset(worker, is_daemon)
    return worker


def _create_thread_worker(ctx: BaseContext, **kwds: Any) -> DummyProcess:
    return DummyProcess(**kwds)


# What a process worker is doing, kept in shared memory (3 integers per slot: job, task
# number, state) so the pool can tell which task a dead worker was running.
_IDLE, _RUNNING, _SENDING = 0, 1, 2


def _tracked_worker(
    record: Any,
    slot: int,
    inqueue: Any,
    outqueue: Any,
    initializer: Optional[Callable[..., Any]] = None,
    initargs: Tuple[Any, ...] = (),
    maxtasks: Optional[int] = None,
    wrap_exception: bool = False,
) -> None:
    """The loop of :func:`multiprocessing.pool.worker`, recording the task being run."""
    base = 3 * slot
    record[base + 2] = _IDLE
    put = outqueue.put
    get = inqueue.get
    if hasattr(inqueue, "_writer"):
        inqueue._writer.close()
        outqueue._reader.close()
    if initializer is not None:
        initializer(*initargs)
    completed = 0
    while maxtasks is None or (maxtasks and completed < maxtasks):
        try:
            task = get()
        except (EOFError, OSError):
            break
        if task is None:
            break
        job, i, func, args, kwds = task
        record[base], record[base + 1], record[base + 2] = job, i, _RUNNING
        try:
            result = (True, func(*args, **kwds))
        except Exception as e:
            if wrap_exception and func is not mp_pool._helper_reraises_exception:
                e = mp_pool.ExceptionWithTraceback(e, e.__traceback__)
            result = (False, e)
        record[base + 2] = _SENDING
        try:
            put((job, i, result))
        except Exception as e:
            put((job, i, (False, mp_pool.MaybeEncodingError(e, result[1]))))
        record[base + 2] = _IDLE
        task = job = result = func = args = kwds = None
        completed += 1


def _how_it_ended(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = str(-exitcode)
        return f"was killed by signal {name} (exit code {exitcode})"
    return f"exited with code {exitcode}"


def _describe_task(cache: Any, job: int, index: int) -> str:
    result = cache.get(job) if cache is not None else None
    describe = getattr(result, "_describe_task", None)
    if describe is not None:
        return describe(index)
    return f"task {index} of job {job}"


class _WorkerFactory:
    """The ``Process`` attribute of a pool: creates its workers.

    With an ``adapt`` function each worker occupies one of ``slot_count`` slots,
    and a worker replacing an exited one (``maxtasksperchild``) takes its slot, so
    slot-specific arguments (a context, a task queue) survive replacement. The
    factory holds no reference to its pool, so an abandoned pool can still be
    garbage collected.

    With a ``record`` (process pools), every worker runs :func:`_tracked_worker`,
    which notes the task it is running in the record. When a worker that ended while
    running a task is replaced, that task is failed with a
    :class:`~machin.parallel.exception.WorkerDiedError`, sent through the result
    queue (after anything the dead worker sent, so no result is lost or doubled).
    """

    def __init__(
        self,
        create: Callable[..., Any],
        slot_count: int,
        adapt: Optional[Callable[[int, Tuple[Any, ...]], Tuple[Any, ...]]] = None,
        record: Any = None,
    ):
        self._create = create
        self._adapt = adapt
        self._record = record
        self._slots: List[Any] = [None] * slot_count
        self._lock = threading.Lock()
        self.cache: Any = None  # the pool's job cache, to describe failed tasks

    def __call__(self, ctx: BaseContext, **kwds: Any) -> Any:
        if self._adapt is None and self._record is None:
            return self._create(ctx, **kwds)
        with self._lock:
            free = [i for i, w in enumerate(self._slots) if w is None or w.exitcode is not None]
            if not free:
                raise RuntimeError("every worker slot of the pool is taken by a live worker")
            slot = free[0]
            args = tuple(kwds["args"])
            if self._record is not None and self._slots[slot] is not None:
                self._report_ended(slot, self._slots[slot], args[1])
            if self._adapt is not None:
                args = self._adapt(slot, args)
            if self._record is not None:
                kwds["target"] = _tracked_worker
                args = (self._record, slot, *args)
            kwds["args"] = args
            worker = self._create(ctx, **kwds)
            self._slots[slot] = worker
            return worker

    def _report_ended(self, slot: int, worker: Any, outqueue: Any) -> None:
        base = 3 * slot
        if self._record[base + 2] != _RUNNING:
            return  # idle, or its last result was sent: nothing is lost
        job, index = self._record[base], self._record[base + 1]
        self._record[base + 2] = _IDLE
        task = _describe_task(self.cache, job, index)
        error = WorkerDiedError(
            f"pool worker {worker.name} (pid {worker.pid}) {_how_it_ended(worker.exitcode)} "
            f"while running {task}; the task failed and a new worker replaces it",
            worker=worker.name,
            pid=worker.pid,
            exitcode=worker.exitcode,
            job=job,
            index=index,
        )
        outqueue.put((job, index, (False, error)))


class _P2PTaskQueue:
    """The task queue of a :class:`P2PPool`: one queue per worker, filled in turn."""

    def __init__(self, queues: Sequence[SimpleQueue]):
        self._queues = list(queues)
        self._turn = itertools.cycle(self._queues)

    def quick_put(self, obj: Any) -> None:
        if obj is None:
            # The pool's stop signal must reach every worker.
            for queue in self._queues:
                queue.quick_put(None)
        else:
            next(self._turn).quick_put(obj)

    def _discard_while(self, keep_going: Callable[[], bool]) -> None:
        for queue in self._queues:
            _discard_tasks(queue, keep_going)


#: Seconds a terminating pool waits for the read lock of a task pipe (see
#: :func:`_discard_tasks`): live workers hand it over within moments.
_READ_LOCK_WAIT = 5.0


def _discard_tasks(queue: SimpleQueue, keep_going: Callable[[], bool]) -> None:
    """Stop workers from taking tasks of ``queue`` and drop what waits there (on terminate).

    A worker waits for its next task holding the read lock, so a worker killed then
    (a lost worker) keeps it forever: when the lock does not come free, no worker
    can read any more, and the pipe is drained without it (the workers are
    terminated right after this).
    """
    if queue._rlock.acquire(timeout=_READ_LOCK_WAIT):
        queue._rlock.release()
        queue._discard_while(keep_going)
        return
    while keep_going() and not queue.empty():
        queue._reader.recv_bytes()


def _check_processes(processes: Optional[int]) -> int:
    if processes is None:
        return os.cpu_count() or 1
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(
            f"processes must be a positive int or None, got {processes!r} "
            f"(Number of processes must be at least 1)"
        )
    return processes


def _check_contexts(worker_contexts: Optional[Sequence[Any]], processes: int) -> List[Any]:
    if worker_contexts is None:
        return [None] * processes
    if not isinstance(worker_contexts, (list, tuple)):
        raise TypeError(
            "worker_contexts must be a list or tuple with one context per worker, "
            f"got {type(worker_contexts).__name__}"
        )
    if len(worker_contexts) != processes:
        raise ValueError(
            f"worker_contexts must hold one context per worker (processes={processes}), "
            f"got {len(worker_contexts)}: Context number is not equal to the number of pool "
            f"workers"
        )
    return list(worker_contexts)


def _choose_context(
    is_copy_tensor: bool, share_method: Optional[str], context: ContextLike
) -> BaseContext:
    if is_copy_tensor:
        if context is None and torch.cuda.is_initialized():
            return resolve_context("spawn")  # a forked worker could not use CUDA
        return resolve_context(context)
    if share_method not in ("cpu", "cuda"):
        raise ValueRuntimeError(
            'share_method must be "cpu" or "cuda" when is_copy_tensor is False, '
            f'got {share_method!r} (Invalid share method: "{share_method}")'
        )
    if share_method == "cuda":
        if context is None:
            return resolve_context("spawn")
        resolved = resolve_context(context)
        if resolved.get_start_method() == "fork":
            raise ValueError(
                'share_method="cuda" needs the "spawn" or "forkserver" start method, '
                'got context "fork"'
            )
        return resolved
    return resolve_context(context)


def _function_name(func: Any) -> str:
    """The name of the user's function inside the wrappers of the pools."""
    while isinstance(func, partial):
        if func.func in (_call_reporting_errors, _call_catching_exit):
            func = func.args[-1]
        elif func.func is _call_with_thread_context:
            func = func.args[0]
        else:
            func = func.func
    if isinstance(func, (bytes, bytearray)):
        return "a serialized function"
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


class _NamedResult:
    """Results whose timeout error names the task (:class:`TaskTimeoutError`)."""

    _description = "a task"

    def _whole(self) -> str:
        return f"{self._description} (job {self._job})"

    def _describe_task(self, index: int) -> str:
        return self._whole()

    def get(self, timeout: Optional[float] = None) -> Any:
        """Wait for the result; raise :class:`TaskTimeoutError` naming the task on timeout."""
        self.wait(timeout)
        if not self.ready():
            raise TaskTimeoutError(f"{self._whole()} did not finish within {timeout} s")
        if self._success:
            return self._value
        raise self._value


class _ApplyResult(_NamedResult, mp_pool.ApplyResult):
    pass


class _MapResult(_NamedResult, mp_pool.MapResult):
    """A map result that keeps the other items' results when a worker dies.

    As for the standard pool, the map fails once every chunk is done. When a chunk
    was lost with its worker, its :class:`WorkerDiedError` carries in
    ``partial_results`` the results of all items (``None`` for lost ones).
    """

    def __init__(self, pool: Any, chunksize: int, length: int, *args: Any, **kwargs: Any):
        self._length = length
        self._partial: List[Any] = [None] * length
        super().__init__(pool, chunksize, length, *args, **kwargs)

    def _describe_task(self, index: int) -> str:
        first = index * self._chunksize
        last = min(first + self._chunksize, self._length) - 1
        items = f"item {first}" if first == last else f"items {first} to {last}"
        return f"{items} of {self._whole()}"

    def _set(self, i: int, success_result: Tuple[bool, Any]) -> None:
        success, value = success_result
        if success:
            self._partial[i * self._chunksize : (i + 1) * self._chunksize] = value
        elif isinstance(value, WorkerDiedError):
            value.partial_results = self._partial
        super()._set(i, success_result)


class _PoolAPI:
    """The methods shared by every pool here.

    Each call method hands the user's function to the standard pool after
    ``self._wrap``, which subclasses override.
    """

    _processes: int

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # A constructor that rejected its arguments leaves no pool state behind. A pool
        # collected while the interpreter shuts down was terminated by its exit finalizer
        # already, and the standard __del__ would wake its handler through a queue whose
        # module globals are gone by then ("'NoneType' object has no attribute 'dumps'").
        # ``_finalizing`` is bound at definition, as module globals may be None then too.
        if "_state" in self.__dict__ and not _finalizing():
            super().__del__()

    def __reduce__(self) -> None:
        kind = "Thread" if isinstance(self, mp_pool.ThreadPool) else "Process"
        raise RuntimeError(
            f"{kind} pool is not reducible: a {type(self).__name__} cannot be pickled or "
            f"copied (its workers and handler threads belong to this process)"
        )

    def _wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        return func

    def size(self) -> int:
        """Number of workers in the pool.

        Returns:
            The worker count.
        """
        return self._processes

    def apply(
        self, func: Callable[..., Any], args: Sequence[Any] = (), kwds: Optional[dict] = None
    ) -> Any:
        """Call ``func(*args, **kwds)`` in a worker and wait for the result.

        Args:
            func: The function (lambdas and local functions are fine).
            args: Its positional arguments.
            kwds: Its keyword arguments.

        Returns:
            What ``func`` returned.
        """
        return self.apply_async(func, args, kwds).get()

    def apply_async(
        self,
        func: Callable[..., Any],
        args: Sequence[Any] = (),
        kwds: Optional[dict] = None,
        callback: Optional[Callable[[Any], None]] = None,
        error_callback: Optional[Callable[[BaseException], None]] = None,
    ) -> mp_pool.AsyncResult:
        """Asynchronous :meth:`apply`.

        Args:
            func: The function.
            args: Its positional arguments.
            kwds: Its keyword arguments.
            callback: Called with the result when it is ready.
            error_callback: Called with the exception if the call fails.

        Returns:
            An :class:`~multiprocessing.pool.AsyncResult`.
        """
        self._check_running()
        result = _ApplyResult(self, callback, error_callback)
        result._description = f"apply of {_function_name(func)}"
        self._taskqueue.put(([(result._job, 0, self._wrap(func), tuple(args), kwds or {})], None))
        return result

    def _map_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Any],
        mapper: Callable[..., Any],
        chunksize: Optional[int] = None,
        callback: Optional[Callable[[List[Any]], None]] = None,
        error_callback: Optional[Callable[[BaseException], None]] = None,
    ) -> mp_pool.MapResult:
        # multiprocessing.pool.Pool._map_async, with a result that names its task.
        self._check_running()
        if not hasattr(iterable, "__len__"):
            iterable = list(iterable)
        if chunksize is None:
            chunksize, extra = divmod(len(iterable), len(self._pool) * 4)
            if extra:
                chunksize += 1
        if len(iterable) == 0:
            chunksize = 0
        batches = mp_pool.Pool._get_tasks(func, iterable, chunksize)
        result = _MapResult(self, chunksize, len(iterable), callback, error_callback=error_callback)
        kind = "starmap" if mapper is mp_pool.starmapstar else "map"
        result._description = f"{kind} of {_function_name(func)} over {len(iterable)} item(s)"
        self._taskqueue.put((self._guarded_task_generation(result._job, mapper, batches), None))
        return result

    def map(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: Optional[int] = None
    ) -> List[Any]:
        """Apply ``func`` to every item of ``iterable`` and return the results in order.

        Args:
            func: A function of one argument.
            iterable: The items.
            chunksize: Items sent to a worker at once (``None`` picks one).

        Returns:
            The list of results.
        """
        return super().map(self._wrap(func), iterable, chunksize)

    def map_async(
        self,
        func: Callable[[Any], Any],
        iterable: Iterable[Any],
        chunksize: Optional[int] = None,
        callback: Optional[Callable[[List[Any]], None]] = None,
        error_callback: Optional[Callable[[BaseException], None]] = None,
    ) -> mp_pool.MapResult:
        """Asynchronous :meth:`map`.

        Args:
            func: A function of one argument.
            iterable: The items.
            chunksize: Items sent to a worker at once.
            callback: Called with the list of results.
            error_callback: Called with the exception if a call fails.

        Returns:
            A :class:`~multiprocessing.pool.MapResult`.
        """
        return super().map_async(self._wrap(func), iterable, chunksize, callback, error_callback)

    def imap(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int = 1
    ) -> Iterable[Any]:
        """Lazy :meth:`map`: an iterator over the results, in order.

        Args:
            func: A function of one argument.
            iterable: The items.
            chunksize: Items sent to a worker at once.

        Returns:
            An iterator over the results.
        """
        return super().imap(self._wrap(func), iterable, chunksize)

    def imap_unordered(
        self, func: Callable[[Any], Any], iterable: Iterable[Any], chunksize: int = 1
    ) -> Iterable[Any]:
        """Like :meth:`imap`, yielding results as they complete, in any order.

        Args:
            func: A function of one argument.
            iterable: The items.
            chunksize: Items sent to a worker at once.

        Returns:
            An iterator over the results.
        """
        return super().imap_unordered(self._wrap(func), iterable, chunksize)

    def starmap(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Sequence[Any]],
        chunksize: Optional[int] = None,
    ) -> List[Any]:
        """Like :meth:`map`, unpacking each item as the arguments: ``func(*item)``.

        Args:
            func: The function.
            iterable: Argument sequences.
            chunksize: Items sent to a worker at once.

        Returns:
            The list of results.
        """
        return super().starmap(self._wrap(func), iterable, chunksize)

    def starmap_async(
        self,
        func: Callable[..., Any],
        iterable: Iterable[Sequence[Any]],
        chunksize: Optional[int] = None,
        callback: Optional[Callable[[List[Any]], None]] = None,
        error_callback: Optional[Callable[[BaseException], None]] = None,
    ) -> mp_pool.MapResult:
        """Asynchronous :meth:`starmap`.

        Args:
            func: The function.
            iterable: Argument sequences.
            chunksize: Items sent to a worker at once.
            callback: Called with the list of results.
            error_callback: Called with the exception if a call fails.

        Returns:
            A :class:`~multiprocessing.pool.MapResult`.
        """
        return super().starmap_async(
            self._wrap(func), iterable, chunksize, callback, error_callback
        )


class Pool(_PoolAPI, mp_pool.Pool):
    """A process pool that accepts lambdas and lets you choose how tensors travel.

    To share CPU tensors through shared memory instead of copying them, pass
    ``is_copy_tensor=False, share_method="cpu"``: a worker writing into a tensor
    it received (as an argument, or captured by the function) changes the
    caller's tensor. For CUDA tensors pass ``share_method="cuda"`` (this selects
    the "spawn" start method). Only one share method can be used by a pool.

    Shared CPU tensors travel as named shared-memory files (see
    :mod:`machin.parallel.pickle`), so a tensor returned by a worker can still be
    read after that worker has exited (``maxtasksperchild``). A pool cannot be
    pickled or copied (``RuntimeError``, as in Machin 0.3.4).

    Args:
        processes: Number of worker processes; ``None`` uses ``os.cpu_count()``.
        initializer: Called as ``initializer(*initargs)`` in each worker when it
            starts.
        initargs: Arguments of ``initializer``.
        maxtasksperchild: Tasks a worker completes before it is replaced by a fresh
            one; ``None`` keeps workers for the pool's lifetime.
        is_recursive: Pickle functions with dill's ``recurse`` option (only the
            globals they use are saved). Enable it for lambdas and local functions
            defined where the module's globals cannot be pickled, such as
            ``__main__``; lambdas from importable modules work either way.
        is_daemon: Whether workers are daemon processes. Daemon processes cannot
            start children of their own, so use ``False`` to nest pools.
        is_copy_tensor: ``True`` copies tensors into every message; ``False``
            passes them by reference and requires ``share_method``.
        share_method: ``"cpu"`` or ``"cuda"``, used when ``is_copy_tensor`` is
            ``False`` (ignored otherwise).
        context: Keyword only. Start method name or multiprocessing context that
            overrides the rule of the module notes.

    Raises:
        ValueError: For a non-positive ``processes`` or ``maxtasksperchild``, a
            missing or unknown ``share_method`` with ``is_copy_tensor=False`` (a
            :class:`~machin.parallel.exception.ValueRuntimeError`, also the
            ``RuntimeError`` of Machin 0.3.4), or ``share_method="cuda"`` with a
            "fork" context.
    """

    # Task errors are packed by _call_reporting_errors, not by the standard worker.
    _wrap_exception = False

    def __init__(
        self,
        processes: Optional[int] = None,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Sequence[Any] = (),
        maxtasksperchild: Optional[int] = None,
        is_recursive: bool = False,
        is_daemon: bool = True,
        is_copy_tensor: bool = True,
        share_method: Optional[str] = None,
        *,
        context: ContextLike = None,
    ):
        processes = _check_processes(processes)
        if maxtasksperchild is not None and (
            isinstance(maxtasksperchild, bool)
            or not isinstance(maxtasksperchild, int)
            or maxtasksperchild < 1
        ):
            raise ValueError(
                f"maxtasksperchild must be a positive int or None, got {maxtasksperchild!r}"
            )
        context = _choose_context(is_copy_tensor, share_method, context)
        self._is_recursive = is_recursive
        self._is_copy_tensor = is_copy_tensor
        self._context = context
        self.Process = _WorkerFactory(
            partial(_create_process_worker, is_daemon),
            processes,
            self._worker_adapter(processes),
            record=context.RawArray("q", 3 * processes),
        )
        super().__init__(processes, initializer, tuple(initargs), maxtasksperchild, context)
        self.Process.cache = self._cache

    def _worker_adapter(
        self, processes: int
    ) -> Optional[Callable[[int, Tuple[Any, ...]], Tuple[Any, ...]]]:
        return None

    def _new_queue(self) -> SimpleQueue:
        return SimpleQueue(
            ctx=self._context, copy_tensor=self._is_copy_tensor, recurse=self._is_recursive
        )

    def _setup_queues(self) -> None:
        self._inqueue = self._new_queue()
        self._outqueue = self._new_queue()
        self._quick_put = self._inqueue.quick_put
        self._quick_get = self._outqueue.quick_get

    @staticmethod
    def _help_stuff_finish(inqueue: Any, task_handler: threading.Thread, size: int) -> None:
        # On terminate: stop workers from taking tasks; unblock a task handler
        # waiting on a full pipe.
        if isinstance(inqueue, _P2PTaskQueue):
            inqueue._discard_while(task_handler.is_alive)
        else:
            _discard_tasks(inqueue, task_handler.is_alive)

    def _wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        return partial(_call_reporting_errors, proxy_caller, func)


class P2PPool(Pool):
    """A :class:`Pool` in which every worker has its own task pipe.

    Tasks are dealt to the workers in turn (point to point) rather than taken
    from one shared pipe, so workers never wait for each other to read. A worker
    busy with a long task delays the tasks queued behind it, so prefer it for
    many tasks of similar cost. A replacement worker (``maxtasksperchild``) takes
    over the pipe of the worker it replaces.

    Takes the same arguments as :class:`Pool`.
    """

    def _worker_adapter(
        self, processes: int
    ) -> Optional[Callable[[int, Tuple[Any, ...]], Tuple[Any, ...]]]:
        self._slot_queues = [self._new_queue() for _ in range(processes)]
        return partial(_adapt_p2p, self._slot_queues)

    def _setup_queues(self) -> None:
        self._inqueue = _P2PTaskQueue(self._slot_queues)
        self._outqueue = self._new_queue()
        self._quick_put = self._inqueue.quick_put
        self._quick_get = self._outqueue.quick_get

    def close(self) -> None:
        """Stop accepting tasks; workers exit once every submitted task is done.

        The stop signal is sent to every worker's own pipe.
        """
        super().close()


class CtxPool(Pool):
    """A :class:`Pool` whose workers each hold a context object.

    Worker ``i`` receives ``worker_contexts[i]`` when it starts (a replacement
    worker receives the context of the worker it replaces) and keeps it in
    :attr:`CtxPoolStorage.storage`. Every function run by the pool is called with
    that context as its first positional argument: ``pool.map(f, xs)`` calls
    ``f(ctx, x)``. Use it for objects that are expensive to build or send, such
    as environments or models.

    Contexts are inherited by forked workers and pickled (with dill) for spawned
    ones.

    Args:
        processes: Number of worker processes.
        initializer: See :class:`Pool`; it runs after the context is installed.
        initargs: See :class:`Pool`.
        maxtasksperchild: See :class:`Pool`.
        worker_contexts: One context per worker; ``None`` gives every worker the
            context ``None``.
        is_recursive: See :class:`Pool`.
        is_daemon: See :class:`Pool`.
        is_copy_tensor: See :class:`Pool`.
        share_method: See :class:`Pool`.
        context: See :class:`Pool` (keyword only).

    Raises:
        ValueError: If ``len(worker_contexts) != processes``, and as :class:`Pool`.
        TypeError: If ``worker_contexts`` is not a list or tuple.
    """

    def __init__(
        self,
        processes: int,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Sequence[Any] = (),
        maxtasksperchild: Optional[int] = None,
        worker_contexts: Optional[Sequence[Any]] = None,
        is_recursive: bool = False,
        is_daemon: bool = True,
        is_copy_tensor: bool = True,
        share_method: Optional[str] = None,
        *,
        context: ContextLike = None,
    ):
        self._worker_contexts = _check_contexts(worker_contexts, _check_processes(processes))
        super().__init__(
            processes,
            initializer,
            initargs,
            maxtasksperchild,
            is_recursive,
            is_daemon,
            is_copy_tensor,
            share_method,
            context=context,
        )

    def _worker_adapter(
        self, processes: int
    ) -> Optional[Callable[[int, Tuple[Any, ...]], Tuple[Any, ...]]]:
        return partial(_adapt_context, _set_process_context, self._worker_contexts)

    def _wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        return partial(_call_reporting_errors, proxy_ctx_caller, func)


class ThreadPool(_PoolAPI, mp_pool.ThreadPool):
    """A thread pool (:class:`multiprocessing.pool.ThreadPool`) with :meth:`size`.

    Nothing is pickled, so any callable works, and exceptions reach the caller
    as the original objects with their tracebacks.

    Args:
        processes: Number of worker threads; ``None`` uses ``os.cpu_count()``.
        initializer: Called as ``initializer(*initargs)`` in each thread when it
            starts.
        initargs: Arguments of ``initializer``.

    Raises:
        ValueError: If ``processes`` is not a positive int.
    """

    def __init__(
        self,
        processes: Optional[int] = None,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Sequence[Any] = (),
    ):
        processes = _check_processes(processes)
        self.Process = _WorkerFactory(
            _create_thread_worker, processes, self._worker_adapter(processes)
        )
        super().__init__(processes, initializer, tuple(initargs))

    def _worker_adapter(
        self, processes: int
    ) -> Optional[Callable[[int, Tuple[Any, ...]], Tuple[Any, ...]]]:
        return None

    def _wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        return partial(_call_catching_exit, func)


class CtxThreadPool(ThreadPool):
    """A :class:`ThreadPool` whose threads each hold a context object.

    Thread ``i`` keeps ``worker_contexts[i]``, and every function run by the
    pool is called with the context of the thread running it as its first
    positional argument, as in :class:`CtxPool`.

    Args:
        processes: Number of worker threads.
        initializer: See :class:`ThreadPool`; it runs after the context is installed.
        initargs: See :class:`ThreadPool`.
        worker_contexts: One context per thread; ``None`` gives every thread the
            context ``None``.

    Raises:
        ValueError: If ``len(worker_contexts) != processes``.
        TypeError: If ``worker_contexts`` is not a list or tuple.
    """

    def __init__(
        self,
        processes: int,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Sequence[Any] = (),
        worker_contexts: Optional[Sequence[Any]] = None,
    ):
        self._worker_contexts = _check_contexts(worker_contexts, _check_processes(processes))
        super().__init__(processes, initializer, initargs)

    def _worker_adapter(
        self, processes: int
    ) -> Optional[Callable[[int, Tuple[Any, ...]], Tuple[Any, ...]]]:
        return partial(_adapt_context, _set_thread_context, self._worker_contexts)

    def _wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        return partial(_call_catching_exit, partial(_call_with_thread_context, func))
