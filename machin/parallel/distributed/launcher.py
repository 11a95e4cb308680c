"""Run a function in several local processes, one world rank each.

:func:`launch` is what ``torchrun --nproc_per_node=N`` does for a script, for a
single function: it starts ``world_size`` processes, sets ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE`` in each (so ``World()`` needs no argument there), calls
``target(rank, *args)`` and brings back every return value or exception. Every
child is killed and reaped before it returns, whatever happened.
"""

import faulthandler
import os
import signal
import socket
import time
import traceback
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..exception import ExceptionWithTraceback
from ..pickle import dumps, loads
from ..process import resolve_context
from ._transport import DillPayload

__all__ = ["launch", "run_script", "LaunchError", "Exited", "free_port"]


class Exited(NamedTuple):
    """Result of a rank allowed to exit without returning (see ``allow_exit``)."""

    exitcode: Optional[int]


class LaunchError(RuntimeError):
    """Some ranks of :func:`launch` failed, exited early or ran out of time.

    The message holds each failing rank's remote traceback.

    Attributes:
        exceptions: Rank -> exception raised in that rank (rebuilt in the parent,
            with the remote traceback as ``__cause__``).
        unfinished: Ranks killed before they finished (timeout, or after another
            rank failed).
    """

    def __init__(self, message: str, exceptions: Dict[int, BaseException], unfinished: List[int]):
        super().__init__(message)
        self.exceptions = exceptions
        self.unfinished = unfinished


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def rank_outcome(target: Callable[..., Any], rank: int, args: Tuple[Any, ...]) -> bytes:
    """Run ``target(rank, *args)``; return the dill-pickled ``(True, result)`` or ``(False, error)``.

    ``exit()`` / ``exit(0)`` count as a return of ``None``; the error carries its traceback.
    """
    try:
        message: Tuple[bool, Any] = (True, target(rank, *args))
    except SystemExit as error:
        code = error.code
        message = (True, None) if code in (None, 0) else (False, ExceptionWithTraceback(error))
    except BaseException as error:
        message = (False, ExceptionWithTraceback(error))
    try:
        return dumps(message, recurse=True)
    except Exception as error:
        failure = RuntimeError(f"rank {rank} returned a value that cannot be pickled: {error!r}")
        return dumps((False, ExceptionWithTraceback(failure)))


def _child(
    target: Callable[..., Any],
    args: Tuple[Any, ...],
    rank: int,
    env: Dict[str, str],
    writer: Connection,
    dump_after: Optional[float],
) -> None:
    os.environ.update(env)
    if dump_after is not None:
        faulthandler.dump_traceback_later(dump_after, exit=False)
    writer.send_bytes(rank_outcome(target, rank, args))
    writer.close()


def launch(
    target: Callable[..., Any],
    world_size: int,
    *,
    args: Sequence[Any] = (),
    timeout: Optional[float] = None,
    start_method: Union[str, BaseContext, None] = None,
    master_addr: str = "127.0.0.1",
    master_port: Optional[int] = None,
    allow_exit: Iterable[int] = (),
    failure_grace: float = 5.0,
    transport: str = "rpc",
    address: Optional[str] = None,
    restart: Iterable[int] = (),
    max_restarts: int = 1,
) -> List[Any]:
    """Run ``target(rank, *args)`` in ``world_size`` new processes and return their results.

    With "fork" the children inherit ``target`` and ``args``. With "spawn" they
    are pickled: a module-level function by reference (the child imports its
    module; a script's ``__main__`` is imported without running its
    ``if __name__ == "__main__":`` block), a lambda or local function by value
    through dill. Results and exceptions come back as dill payloads.

    Args:
        target: Function run by each process, with its rank as first argument.
        world_size: Number of processes.
        args: Further arguments of ``target``.
        timeout: Hard limit in seconds for the whole run; ``None`` for none. A
            child still running shortly before the limit prints the stacks of its
            threads (faulthandler) before it is killed.
        start_method: Multiprocessing context or start method ("fork", "spawn",
            "forkserver"); default as :mod:`machin.parallel.process`.
        master_addr: Address of the rendezvous (``MASTER_ADDR``).
        master_port: Port of the rendezvous; default: a free port.
        allow_exit: Ranks that may end without returning (e.g. a rank simulating
            a crash with ``os._exit``); their result is an :class:`Exited`.
        failure_grace: After a rank fails, seconds the others get to finish
            before they are killed.
        transport: ``"rpc"`` (local processes, as described here) or ``"ray"``: one
            Ray actor per rank, with
            :func:`~machin.parallel.distributed.ray_launcher.launch_ray` (which
            takes ``args``, ``timeout``, ``allow_exit``, ``failure_grace``,
            ``restart`` and ``max_restarts`` and ignores the process options).
        address: With ``transport="ray"``, the address of a running Ray cluster;
            ``None`` starts a local one.
        restart: With ``transport="ray"``, ranks whose actor Ray restarts when its
            process dies (see
            :func:`~machin.parallel.distributed.ray_launcher.launch_ray`).
        max_restarts: With ``transport="ray"``, how many times each rank of
            ``restart`` may be restarted.

    Returns:
        The return values, by rank.

    Raises:
        ValueError: If ``world_size`` is not a positive int, ``transport`` is unknown,
            or ``restart`` is given with ``transport="rpc"`` (local processes are not
            restarted).
        LaunchError: If a rank raised, exited early or the timeout passed.
    """
    if transport == "ray":
        from .ray_launcher import launch_ray

        return launch_ray(
            target,
            world_size,
            args=args,
            address=address,
            timeout=timeout,
            allow_exit=allow_exit,
            failure_grace=failure_grace,
            restart=restart,
            max_restarts=max_restarts,
        )
    if transport != "rpc":
        raise ValueError(f"transport must be 'rpc' or 'ray', got {transport!r}")
    if tuple(restart):
        raise ValueError(
            f"restart needs transport='ray' (Ray restarts a dead rank's actor); "
            f"transport='rpc' does not restart processes, got restart={tuple(restart)!r}"
        )
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    ctx = resolve_context(start_method)
    port = free_port(master_addr) if master_port is None else master_port
    if "<" in getattr(target, "__qualname__", "<"):  # a lambda or local function: send it by value
        target = DillPayload(target)
    args = tuple(args)
    start = time.monotonic()
    dump_after = None if timeout is None else max(timeout - 2.0, timeout * 0.8)
    processes, readers = [], []
    try:
        for rank in range(world_size):
            env = {
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world_size),
            }
            reader, writer = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_child,
                args=(target, args, rank, env, writer, dump_after),
                name=f"machin-rank-{rank}",
            )
            process.start()
            writer.close()
            processes.append(process)
            readers.append(reader)
        deadline = None if timeout is None else start + timeout
        outcome = _collect(processes, readers, deadline, set(allow_exit), failure_grace)
    finally:
        ended = _kill_and_reap(processes)
        for reader in readers:
            reader.close()
    _fail_crashed_exits(outcome, ended)
    return _results(outcome, world_size, timeout)


def run_script(main: Callable[[int], Any], world_size: int, **launch_kwargs: Any) -> None:
    """Run a distributed script's ``main(rank)`` the way it was started.

    Under ``torchrun`` (or any launcher that sets ``RANK`` and ``WORLD_SIZE``) this
    process is one rank: ``main`` runs here, with that rank. Started directly
    (``python script.py``), it runs ``main`` on ``world_size`` local processes with
    :func:`launch` (which takes ``launch_kwargs``). With ``transport="ray"`` in
    ``launch_kwargs`` it always runs ``main`` on Ray actors, through :func:`launch`.

    Args:
        main: The script's entry point, called with the rank.
        world_size: Number of local processes when not started by a launcher.
        launch_kwargs: Keyword arguments of :func:`launch`.
    """
    if launch_kwargs.get("transport", "rpc") != "ray" and (
        "RANK" in os.environ and "WORLD_SIZE" in os.environ
    ):
        main(int(os.environ["RANK"]))
    else:
        launch(main, world_size, **launch_kwargs)


_Outcome = Tuple[Dict[int, Any], Dict[int, BaseException], List[int]]


def _collect(
    processes: List[Any],
    readers: List[Connection],
    deadline: Optional[float],
    allow_exit: set,
    grace: float,
) -> _Outcome:
    results: Dict[int, Any] = {}
    failures: Dict[int, BaseException] = {}
    pending = set(range(len(processes)))
    give_up: Optional[float] = deadline
    while pending:
        remaining = None if give_up is None else give_up - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        handles = [readers[r] for r in pending] + [processes[r].sentinel for r in pending]
        ready = set(wait(handles, remaining))
        for rank in sorted(pending):
            reader, process = readers[rank], processes[rank]
            if reader not in ready and process.sentinel not in ready:
                continue
            report = _read(reader)
            if report is None:
                if reader in ready or process.sentinel in ready:
                    process.join(1.0)
                if process.exitcode is None:
                    continue
                if rank in allow_exit:
                    results[rank] = Exited(process.exitcode)
                else:
                    failures[rank] = RuntimeError(
                        f"rank {rank} exited with code {process.exitcode} without returning a result"
                    )
            elif report[0]:
                results[rank] = report[1]
            else:
                failures[rank] = report[1]
            pending.discard(rank)
        if failures:
            soon = time.monotonic() + grace
            give_up = soon if give_up is None else min(give_up, soon)
    return results, failures, sorted(pending)


def _read(reader: Connection) -> Optional[Tuple[bool, Any]]:
    """The report of a child, or ``None`` if it has none (yet, or ever)."""
    try:
        if not reader.poll():
            return None
        return loads(reader.recv_bytes())
    except (EOFError, OSError):
        return None


def _kill_and_reap(processes: List[Any], grace: float = 2.0) -> Dict[int, int]:
    """Give the children ``grace`` seconds to end by themselves, then kill and reap them.

    Returns:
        Rank -> exit code of the children that ended by themselves.
    """
    end = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, end - time.monotonic()))
    ended = {rank: p.exitcode for rank, p in enumerate(processes) if p.exitcode is not None}
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join()
    return ended


def _fail_crashed_exits(outcome: "_Outcome", ended: Dict[int, int]) -> None:
    """Count a rank that returned, then died by a signal while its process exited, as failed."""
    results, failures, _ = outcome
    for rank, code in sorted(ended.items()):
        if code < 0 and rank in results and not isinstance(results[rank], Exited):
            del results[rank]
            failures[rank] = RuntimeError(
                f"rank {rank} returned, then its process was killed by signal "
                f"{signal.Signals(-code).name} while it exited"
            )


def _results(outcome: _Outcome, world_size: int, timeout: Optional[float]) -> List[Any]:
    results, failures, unfinished = outcome
    if not failures and not unfinished:
        return [results[rank] for rank in range(world_size)]
    parts = []
    for rank, error in sorted(failures.items()):
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        parts.append(f"rank {rank} failed:\n{text}")
    if unfinished:
        reason = "after another rank failed" if failures else f"when the {timeout} s timeout passed"
        parts.append(f"ranks {unfinished} were still running and were killed {reason}")
    raise LaunchError("\n".join(parts), failures, unfinished)
