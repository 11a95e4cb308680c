"""The distributed world: a transport for calls plus process groups, in one object.

One process runs one :class:`World`. Starting it starts its transport (see
:mod:`machin.parallel.distributed.transport`): by default ``"rpc"``,
:mod:`torch.distributed.rpc` (TensorPipe agent), or ``"ray"``, Ray actors, and the
default ``torch.distributed`` process group (gloo, plus nccl for CUDA tensors when
CUDA is available); on top of them it creates RPC groups (:class:`RpcGroup`) and
collective groups (:class:`CollectiveGroup`).

The keyword ``transport`` picks the transport; ``backend`` stays the backend of the
process groups, as in every earlier version (``backend="ray"`` or ``"rpc"`` is read
as ``transport=...``, since no process-group backend has those names).

The world can be started from arguments or from the environment variables of
``torchrun`` (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``)::

    # python script.py, one process per rank started by the script
    world = World(name=str(rank), rank=rank, world_size=3, rpc_timeout=20)
    # torchrun --nproc_per_node=3 script.py
    world = World()

Machin 0.3.4's names are kept here: :class:`LUTType` and :class:`RpcException`.
"""

import contextlib
import enum
import os
import re
import threading
from datetime import timedelta
from multiprocessing import util as mp_util
from typing import Callable, List, Optional, Union

import torch.distributed as dist

from ..exception import ValueRuntimeError
from . import transport as transports
from ._context import current_world, require_world, set_world
from ._names import NameService
from ._transport import RpcException
from .collective_group import CollectiveGroup
from .rpc_group import RpcGroup

__all__ = [
    "World",
    "get_world",
    "get_cur_rank",
    "get_cur_name",
    "RpcGroup",
    "CollectiveGroup",
    "RpcException",
    "LUTType",
]


class LUTType(enum.Enum):
    """The two kinds of entries of an RPC group's table: paired values and services.

    Kept from Machin 0.3.4, whose RPC functions took it as an argument; machin's
    own table names the kinds with strings.
    """

    VALUE = 0
    SERVICE = 1


DEFAULT_INIT_METHOD = "tcp://localhost:9100"
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_:\-]{1,127}$")


def _env_int(value: Optional[int], variable: str, argument: str) -> int:
    if value is not None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(
                f"{argument} must be an int, got {value!r} of type {type(value).__name__}"
            )
        return value
    text = os.environ.get(variable)
    if text is None:
        raise ValueError(
            f"{argument} was not given and the {variable} environment variable is not set "
            f"(torchrun sets it; otherwise pass {argument}=...)"
        )
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"the {variable} environment variable must be an integer, got {text!r}"
        ) from None


def _default_init_method() -> str:
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return "env://"
    return DEFAULT_INIT_METHOD


class World:
    """The distributed world of this process; create exactly one per process.

    Every process of the world creates its ``World`` with the same
    ``world_size`` and ``init_method`` and its own ``rank`` and ``name``; the
    constructor returns once all of them have joined.

    Args:
        name: Unique name of this process (letters, digits, ``_ : -``). Default:
            ``str(rank)``.
        rank: Rank of this process in ``[0, world_size)``. The default, ``-1`` (as in
            Machin 0.3.4; ``None`` means the same), reads the ``RANK`` environment
            variable.
        world_size: Number of processes. Default: the ``WORLD_SIZE`` environment variable.
        init_method: Rendezvous URL, e.g. ``"tcp://10.0.0.1:9100"``. Default:
            ``"env://"`` (``MASTER_ADDR`` / ``MASTER_PORT``) when those variables
            are set, else ``"tcp://localhost:9100"`` (Machin 0.3.4's default).
        rpc_timeout: Default timeout of RPC calls and of the start-up, in seconds.
        rpc_threads: Threads serving incoming RPC calls (TensorPipe worker threads;
            16, TensorPipe's own default, as services may call other services).
        backend: Backend of the process groups; default ``"gloo"``, or
            ``"cpu:gloo,cuda:nccl"`` when CUDA is available.
        collective_timeout: Timeout of collective operations, in seconds;
            default: that of ``torch.distributed`` (30 minutes).
        transport: How members reach each other: ``"rpc"`` (torch RPC, the
            default) or ``"ray"`` (inside ranks started by
            :func:`~machin.parallel.distributed.ray_launcher.launch_ray`); see
            :mod:`machin.parallel.distributed.transport`. ``backend="ray"`` is
            accepted for ``transport="ray"``. Default: ``"ray"`` inside a Ray rank,
            else ``"rpc"``.

    Raises:
        RuntimeError: If a world is already running in this process.
        ValueError: For an invalid argument, or one that is missing from both the
            arguments and the environment.
    """

    def __init__(
        self,
        name: Optional[str] = None,
        rank: Optional[int] = -1,
        world_size: Optional[int] = None,
        init_method: Optional[str] = None,
        rpc_timeout: float = 60,
        rpc_threads: int = 16,
        *,
        backend: Optional[str] = None,
        collective_timeout: Optional[float] = None,
        transport: Optional[str] = None,
    ):
        if current_world() is not None:
            raise RuntimeError(
                "a World is already running in this process; stop() it before creating another "
                "(World could only be initialized once at a time)"
            )
        world_size = _env_int(world_size, "WORLD_SIZE", "world_size")
        if type(rank) is int and rank == -1:  # Machin 0.3.4's "not given"
            rank = None
        rank = _env_int(rank, "RANK", "rank")
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size - 1}], got {rank}")
        name = str(rank) if name is None else name
        if not isinstance(name, str) or not _NAME_PATTERN.match(name):
            raise ValueError(
                f"name must be 1 to 127 letters, digits, '_', ':' or '-', got {name!r}"
            )
        if (
            isinstance(rpc_timeout, bool)
            or not isinstance(rpc_timeout, (int, float))
            or rpc_timeout <= 0
        ):
            raise ValueError(
                f"rpc_timeout must be a positive number of seconds, got {rpc_timeout!r}"
            )
        if isinstance(rpc_threads, bool) or not isinstance(rpc_threads, int) or rpc_threads < 1:
            raise ValueError(f"rpc_threads must be a positive int, got {rpc_threads!r}")
        init_method = _default_init_method() if init_method is None else init_method

        transport, backend = transports.resolve(transport, backend)

        self.name = name
        self.rank = rank
        self.world_size = world_size
        self.rpc_timeout = float(rpc_timeout)
        self.transport = transports.make_transport(
            transport,
            name=name,
            rank=rank,
            world_size=world_size,
            timeout=self.rpc_timeout,
            init_method=init_method,
            rpc_threads=rpc_threads,
            backend=backend,
            collective_timeout=collective_timeout,
        )
        self.names = NameService(name, self.rpc_timeout, self.transport)
        self._stop_callbacks: List[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._stopped = False
        self._pid = os.getpid()

        # Installed first: calls may arrive as soon as this process has joined.
        set_world(self)
        try:
            self._members: List[str] = self.transport.start()
        except BaseException:
            set_world(None)
            raise
        if self.transport.rejoined:  # a restarted Ray rank: see create_collective_group
            self.names.announce_rejoin(self._members, self.rpc_timeout)
        _leave_when_exiting()

    def __repr__(self) -> str:
        return f"World(name={self.name!r}, rank={self.rank}, world_size={self.world_size})"

    def __reduce__(self) -> None:
        raise RuntimeError(
            "World is not picklable: it holds this process's RPC agent; create one World "
            "per process instead"
        )

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def get_members(self) -> List[str]:
        """Names of all processes of the world, by rank."""
        return list(self._members)

    def create_rpc_group(self, group_name: str, members: List[str]) -> RpcGroup:
        """Create an RPC group; every member must call this, with the same arguments.

        It blocks until every member has called it.

        Args:
            group_name: Name of the group, unique in the world.
            members: Names of the member processes (this process among them); the
                first one keeps the group's table.

        Returns:
            The group.

        Raises:
            TypeError: If the arguments have the wrong types.
            ValueError: If a member is not a process of the world, is repeated, or
                the current process is not among the members (that one is a
                :class:`~machin.parallel.exception.ValueRuntimeError`, also the
                ``RuntimeError`` of Machin 0.3.4).
            RuntimeError: If the group already exists here, or not every member
                joined within ``rpc_timeout``.
        """
        self._check_running()
        if not isinstance(group_name, str) or not group_name:
            raise TypeError(f"group_name must be a non-empty str, got {group_name!r}")
        if isinstance(members, str) or not all(isinstance(m, str) for m in members):
            raise TypeError(f"members must be a list of process names (str), got {members!r}")
        members = list(members)
        unknown = [m for m in members if m not in self._members]
        if unknown or not members:
            raise ValueError(
                f"members must be names of world processes {self._members}, got {members}"
            )
        if len(set(members)) != len(members):
            raise ValueError(f"members must not repeat a name, got {members}")
        if self.name not in members:
            raise ValueRuntimeError(
                f"Creator Process {self.name!r} not in Group {group_name!r}: the current process "
                f"must be one of the members {members}; only members create a group (other "
                f"processes can use a handle passed to them)"
            )
        return RpcGroup(group_name, members, first_create=True)

    def create_collective_group(
        self,
        ranks: List[int],
        timeout: Union[float, timedelta, None] = None,
        backend: Optional[str] = None,
    ) -> CollectiveGroup:
        """Create a collective group over some ranks; only those ranks call this.

        Args:
            ranks: World ranks of the members (this process among them).
            timeout: Timeout of its operations, in seconds or as a
                :class:`~datetime.timedelta` (as Machin 0.3.4 took it); default as the
                world's.
            backend: Backend; default as the world's.

        Returns:
            The group; ``.group`` is the ``torch.distributed`` process group.

        Raises:
            ValueError: If a rank is out of range or repeated, or the current rank
                is not among them.
            RuntimeError: In a world that rejoined a run after its Ray actor was
                restarted: it has no default process group.
        """
        self._check_running()
        if self.transport.rejoined:
            raise RuntimeError(
                f"World {self.name!r} rejoined the run after its Ray actor was restarted; "
                f"the default process group of the run cannot be entered again, so it has "
                f"no collective groups (use its RPC groups)"
            )
        ranks = list(ranks)
        if not ranks or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise ValueError(f"ranks must be a non-empty list of ints, got {ranks!r}")
        if any(not 0 <= r < self.world_size for r in ranks) or len(set(ranks)) != len(ranks):
            raise ValueError(
                f"ranks must be distinct ranks in [0, {self.world_size - 1}], got {ranks}"
            )
        if self.rank not in ranks:
            raise ValueError(f"the current rank {self.rank} must be one of the ranks {ranks}")
        ranks = sorted(ranks)
        if timeout is not None and not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=timeout)
        kwargs = {} if timeout is None else {"timeout": timeout}
        group = dist.new_group(ranks, backend=backend, use_local_synchronization=True, **kwargs)
        return CollectiveGroup(group, ranks.index(self.rank))

    def add_stop_callback(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` at the start of :meth:`stop` (servers stop their threads there)."""
        with self._lock:
            self._stop_callbacks.append(callback)

    def barrier(self, timeout: float = -1) -> None:
        """Wait until every process of the world has called ``barrier``.

        Args:
            timeout: Seconds to wait; negative uses ``rpc_timeout``, 0 waits forever.

        Raises:
            RuntimeError: If not every process arrived in time.
        """
        self._check_running()
        timeout = self.rpc_timeout if timeout < 0 else timeout
        created = not self.names.has_group(_WORLD_GROUP) and self.names.create_group(
            _WORLD_GROUP, self._members, timeout
        )
        if created:  # the creation was the barrier (unless a rejoining process was readmitted)
            return
        self.names.barrier(_WORLD_GROUP, tuple(self._members), timeout)

    def stop(self, graceful: bool = True, timeout: Optional[float] = None) -> None:
        """Shut the world down in this process.

        With ``graceful=True`` (as :func:`torch.distributed.rpc.shutdown`) every
        process must call ``stop``: it returns once all have, so no process leaves
        while others may still call it. With ``graceful=False`` only this process
        shuts down, at once: it first tells the others that it leaves, so their
        barriers and calls that need it fail at once with an error naming it. A
        graceful stop after another process has stopped without waiting is a stop
        without waiting too, since not everyone can stop together any more.

        A process whose world is still running when it exits (it returned, called
        ``exit()`` or raised) stops by itself: it tells the others that it leaves
        (from then on it serves no calls, and their barriers and calls that need it
        fail naming it), then waits at most ``rpc_timeout`` for the others to stop
        too, and shuts down without waiting after that.

        Whatever happens, the local RPC agent and process groups are shut down and
        another world can be started afterwards. Calling it again does nothing.

        Args:
            graceful: Wait for every process (see above).
            timeout: Seconds to wait for the others; default ``rpc_timeout``.

        Raises:
            RuntimeError: If a graceful stop failed (a process died or did not call
                ``stop`` in time); the local shutdown is complete anyway.
        """
        how = None if graceful else "it stopped its World without waiting for the others"
        self._shut_down(graceful, timeout, how)

    def _shut_down(self, graceful: bool, timeout: Optional[float], how: Optional[str]) -> None:
        """:meth:`stop`, first telling the others how this process leaves unless ``how`` is None."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            callbacks, self._stop_callbacks = self._stop_callbacks, []
        if how is not None:
            self.names.announce_departure(
                self._members, how, min(self.rpc_timeout, _DEPARTURE_NOTICE_TIMEOUT), graceful
            )
        graceful = graceful and not self.names.left_at_once()
        errors = []
        for callback in reversed(callbacks):
            try:
                callback()
            except Exception as error:
                errors.append(error)
        try:
            self.transport.shutdown(graceful, self.rpc_timeout if timeout is None else timeout)
        except Exception as error:
            errors.append(error)
        finally:
            if dist.is_initialized():
                # (not once a member rejoined: its new process is not in the process group)
                if graceful and not errors and not self.names.rejoined():
                    # Rank 0 hosts the rendezvous store that the others' RPC shutdown still
                    # talks to: nobody leaves (and exits) before everyone has shut down.
                    self._leave_together(self.rpc_timeout if timeout is None else timeout, errors)
                dist.destroy_process_group()
            set_world(None)
        if errors:
            raise RuntimeError(
                f"World {self.name!r} was shut down, but not cleanly: {errors[0]!r}"
                + (f" (and {len(errors) - 1} more error(s))" if len(errors) > 1 else "")
            ) from errors[0]

    @staticmethod
    def _leave_together(timeout: float, errors: list) -> None:
        """A collective barrier with a timeout, after the RPC shutdown."""
        try:
            dist.barrier(async_op=True).wait(timeout=timedelta(seconds=timeout))
        except Exception as error:
            errors.append(error)

    def _check_running(self) -> None:
        if self._stopped:
            raise RuntimeError(f"World {self.name!r} has been stopped")


_WORLD_GROUP = "__machin_world__"
#: Seconds a leaving process waits for the others to take note of its departure.
_DEPARTURE_NOTICE_TIMEOUT = 5.0
_exit_hook_pid: Optional[int] = None


def _leave_when_exiting() -> None:
    """Make this process leave its running world, if any, when it exits (once per process).

    Without it, the interpreter tears the RPC agent down while the agent's threads still
    run Python code; such a thread, stopped by the finalizing interpreter, aborts the
    process (``terminate called without an active exception``, SIGABRT). The hook is a
    :mod:`multiprocessing` finalizer: those run at the exit of the main process (from
    ``atexit``) and at the end of every ``multiprocessing`` child, forked ones included,
    which skip ``atexit``.
    """
    global _exit_hook_pid
    if _exit_hook_pid != os.getpid():
        _exit_hook_pid = os.getpid()
        mp_util.Finalize(None, _leave_at_exit, exitpriority=100)


def _leave_at_exit() -> None:
    world = current_world()
    if world is None or world._pid != os.getpid():  # none, or a copy inherited through fork
        return
    # The process ends anyway, and the others were told it left: nothing to report.
    with contextlib.suppress(Exception):
        world._shut_down(True, None, "its process exited")


def get_world() -> Optional[World]:
    """The world running in this process, or ``None`` when there is none."""
    return current_world()


def get_cur_rank() -> int:
    """Rank of the current process in the running world.

    Raises:
        RuntimeError: If no world is running.
    """
    return require_world().rank


def get_cur_name() -> str:
    """Name of the current process in the running world.

    Raises:
        RuntimeError: If no world is running.
    """
    return require_world().name
