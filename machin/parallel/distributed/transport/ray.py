"""The ``ray`` transport: one Ray actor per rank.

:func:`~machin.parallel.distributed.ray_launcher.launch_ray` creates one
:class:`RankActor` per rank, named ``rank-<r>`` in a namespace of its own run, and
calls the user's ``main(rank)`` in it. The actor is threaded: while ``main`` runs in
one of its threads, the others serve calls from the other ranks, so services that
call services do not block each other (up to the actor's ``max_concurrency``).

A ``World`` started in such an actor (``transport="ray"``, the default there)
finds the other ranks' actors by name, exchanges the members' names with them and
starts the default ``torch.distributed`` process group (gloo) at an address rank 0
chose (a free port on its node's IP). A call is an actor method call
(:meth:`RankActor.serve`) whose result travels back through Ray's object store;
a "remote" call keeps its result there and returns a :class:`RayReference`.

A rank the launcher lists in ``restart`` has an actor that Ray restarts when its
process dies. The launcher then runs ``main(rank)`` again in the new process,
telling it how many times the actor was restarted (:func:`restarts`). A ``World``
started there *rejoins* the run: it exchanges names with the others again, but it
cannot enter the default process group of the first start (its members already
formed it), so it has none and makes no collective groups. (A rank whose process
died before that group formed takes its place in it as if nothing happened.)
"""

import heapq
import itertools
import multiprocessing.spawn
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.futures import Future

from ...pickle import loads
from .._transport import MemberLostError, as_rpc_exception
from ..launcher import rank_outcome
from .base import Reference, Transport

#: The ray module once :func:`require_ray` has imported it (it is an optional
#: dependency, and importing it takes a while: only the Ray transport does).
ray: Any = None

__all__ = [
    "INSTALL_HINT",
    "require_ray",
    "actor_name",
    "RankActor",
    "RankHost",
    "RayReference",
    "RayTransport",
    "ray_node_index",
    "restarts",
]

INSTALL_HINT = "the 'ray' transport needs the ray package; install it with: pip install machin[ray]"
#: Seconds added to a member's own limit when it waits for an answer about that limit.
_MARGIN = 5.0


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        ImportError: If Ray is not installed, telling how to install it.
    """
    global ray
    if ray is None:
        try:
            import ray as module
        except ImportError as error:
            raise ImportError(INSTALL_HINT) from error
        ray = module
    return ray


def actor_name(rank: int) -> str:
    """The name of the actor of ``rank`` in its run's namespace."""
    return f"rank-{rank}"


class RankHost:
    """What the actor of one rank shares with the ``World`` running in it.

    Args:
        rank: The rank of the actor.
        world_size: Number of ranks of the run.
        namespace: Ray namespace of the run (the actors are named in it).
    """

    def __init__(self, rank: int, world_size: int, namespace: str):
        self.rank = rank
        self.world_size = world_size
        self.namespace = namespace
        self.info: Optional[Tuple[str, Optional[str]]] = None
        self.restarts = 0
        self.runs = 0
        #: Whether the world's default process group has formed (set once this rank is in it).
        self.formed = False
        self.joined = threading.Event()
        self.stopping = threading.Event()
        self.stopped = False

    def publish(self, name: str, init_method: Optional[str]) -> None:
        """Make this rank's member ``name`` (and rank 0's rendezvous address, ``init_method``) known."""
        self.stopped = False
        self.stopping.clear()
        self.info = (name, init_method)
        self.formed = False
        self.joined.set()

    def close(self) -> None:
        """Refuse further calls: the world of this rank has stopped."""
        self.stopped = True
        self.stopping.set()
        self.joined.clear()


_HOST: Optional[RankHost] = None


def current_host() -> Optional[RankHost]:
    """The :class:`RankHost` of this process, or ``None`` outside a rank actor."""
    return _HOST


def ray_node_index() -> Optional[int]:
    """In a rank actor: the place of its Ray node among the cluster's live nodes, ordered by
    node id (so every rank numbers the nodes alike); ``None`` elsewhere."""
    if _HOST is None:
        return None
    ray_module = require_ray()
    mine = ray_module.get_runtime_context().get_node_id()
    alive = sorted(node["NodeID"] for node in ray_module.nodes() if node.get("Alive"))
    return alive.index(mine) if mine in alive else None


def restarts() -> int:
    """How many times Ray restarted the actor of this rank (0 at first, and outside a Ray rank)."""
    return 0 if _HOST is None else _HOST.restarts


class RankActor:
    """The Ray actor of one rank (made a Ray actor class by the launcher).

    Args:
        rank: The rank.
        world_size: Number of ranks.
        namespace: Ray namespace of the run.
        env: Environment variables to set in the actor's process (``RANK``,
            ``WORLD_SIZE``, ``MACHIN_TRANSPORT`` ...).
    """

    def __init__(self, rank: int, world_size: int, namespace: str, env: Dict[str, str]):
        global _HOST
        os.environ.update(env)
        _HOST = RankHost(rank, world_size, namespace)

    def run(
        self,
        payload: bytes,
        main_script: Optional[str],
        args: Tuple[Any, ...],
        restarts: int = 0,
    ) -> bytes:
        """Run ``target(rank, *args)`` (``payload`` is the dill-pickled target).

        ``main_script``: the caller's script, to load as this process's ``__main__``
        before reading ``payload`` (see :func:`load_target`). ``restarts``: how many
        times Ray has restarted this actor (a ``World`` started by a restarted actor
        rejoins the run).

        Returns:
            The dill-pickled ``(True, result)`` or ``(False, exception with traceback)``.
        """
        _HOST.restarts = restarts
        _HOST.runs += 1
        return rank_outcome(load_target(payload, main_script, _HOST.rank), _HOST.rank, args)

    def serve(
        self, func: Callable, args: Tuple[Any, ...], kwargs: Dict[str, Any], returns_future: bool
    ) -> Any:
        """Run a call of another rank: ``func(*args, **kwargs)`` (waited on if it returns a
        future and ``returns_future`` is set).

        Raises:
            ConnectionError: If the world of this rank is not running.
        """
        if _HOST.stopped or not _HOST.joined.is_set():
            raise ConnectionError(
                f"rank {_HOST.rank} has no running world (it left or not yet joined)"
            )
        result = func(*args, **kwargs)
        return result.wait() if returns_future else result

    def stacks(self) -> str:
        """The Python stacks of every thread of this actor's process (what a hanging run is doing)."""
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        return "\n".join(
            f"thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}"
            for ident, frame in sys._current_frames().items()
        )

    def process_info(self) -> Tuple[str, int]:
        """``(Ray worker id, runs started in it)``: the launcher tells a restarted process by it."""
        return require_ray().get_runtime_context().get_worker_id(), _HOST.runs

    def member_info(self, timeout: float) -> Tuple[str, Optional[str], bool]:
        """This rank's ``(name, init_method, formed)``, once its world has started.

        ``formed``: whether this rank has entered the default process group.

        Raises:
            TimeoutError: If no world started here within ``timeout`` seconds.
        """
        if not _HOST.joined.wait(timeout if timeout > 0 else None):
            raise TimeoutError(
                f"rank {_HOST.rank} did not start its World within {timeout} seconds"
            )
        return (*_HOST.info, _HOST.formed)

    def await_stop(self, timeout: float) -> bool:
        """Whether the world of this rank began to stop within ``timeout`` seconds."""
        return _HOST.stopping.wait(timeout if timeout > 0 else None)


def load_target(payload: bytes, main_script: Optional[str], rank: int) -> Callable:
    """The target function of a launch, read from its dill ``payload``.

    With ``main_script`` (a payload that refers to the globals of ``__main__``), the
    script is loaded as this process's ``__main__`` first, once, as multiprocessing's
    spawn start does.

    Raises:
        FileNotFoundError: When ``main_script`` is not on this rank's node.
    """
    current = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_script is not None and current != main_script:
        if not os.path.isfile(main_script):
            raise FileNotFoundError(
                f"rank {rank} must load the launching script {main_script} as its __main__ "
                f"(functions of the script that call each other travel with its globals by "
                f"reference), but this node has no such file: copy the script to the same "
                f"path on every node, or move those functions into an importable module"
            )
        multiprocessing.spawn.import_main_path(main_script)
    return loads(payload)


class _Deadlines:
    """One daemon thread that runs callbacks when their time has come (call timeouts)."""

    def __init__(self):
        self._heap: List[Tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._thread: Optional[threading.Thread] = None

    def add(self, seconds: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` in ``seconds`` seconds."""
        due = time.monotonic() + seconds
        with self._condition:
            earliest = not self._heap or due < self._heap[0][0]
            heapq.heappush(self._heap, (due, next(self._order), callback))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="machin-ray-deadlines", daemon=True
                )
                self._thread.start()
            if earliest:  # the thread sleeps until the earliest deadline: wake it for a sooner one
                self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._heap:
                    self._condition.wait()
                due, _, callback = self._heap[0]
                delay = due - time.monotonic()
                if delay > 0:
                    self._condition.wait(delay)
                    continue
                heapq.heappop(self._heap)
            callback()


_DEADLINES = _Deadlines()


class _Pending:
    """A torch future completed once by a Ray result, or by a timeout, whichever comes first.

    Once settled it lets go of the future (and so of the result): the timeout's entry
    stays queued until its time, and must not keep every answer alive that long.
    """

    __slots__ = ("future", "_lock", "_what", "_timeout")

    def __init__(self, what: str, timeout: float):
        self.future: Optional[Future] = Future()
        self._lock = threading.Lock()
        self._what = what
        self._timeout = timeout

    def settle(self, ok: bool, value: Any) -> None:
        with self._lock:
            future, self.future = self.future, None
        if future is None:
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def expire(self) -> None:
        """Fail the future with a timeout, unless it was settled already."""
        if self.future is not None:
            self.settle(
                False, TimeoutError(f"{self._what} did not answer within {self._timeout} seconds")
            )

    def on_ready(self, done: Any) -> None:
        try:
            value = done.result()
        except BaseException as error:
            self.settle(False, error)
            return
        self.settle(True, value)


def _torch_future(ref: Any, timeout: float, what: str) -> Future:
    """A torch future completed with the value of the Ray object ``ref`` (or its failure)."""
    pending = _Pending(what, timeout)
    future = pending.future
    ref.future().add_done_callback(pending.on_ready)
    if timeout > 0:
        _DEADLINES.add(timeout, pending.expire)
    return future


def _task_failure(error: Exception) -> BaseException:
    """The exception a function raised in another rank, out of Ray's wrapper."""
    cause = getattr(error, "cause", None)
    return as_rpc_exception(cause) if isinstance(cause, Exception) else error


class RayReference(Reference):
    """A reference to the result of a call kept in Ray's object store.

    Args:
        ref: The Ray object reference.
        owner: Name of the member that computed it.
        timeout: Default timeout of :meth:`to_here`, in seconds (0: none).
    """

    def __init__(self, ref: Any, owner: str, timeout: float):
        self.ref = ref
        self.owner_name = owner
        self.timeout = timeout

    def to_here(self, timeout: float = 0) -> Any:
        """The value; raises what the function raised (with its remote traceback).

        See :meth:`Reference.to_here` for ``timeout``.
        """
        timeout = timeout if timeout > 0 else self.timeout
        require_ray()
        try:
            return ray.get(self.ref, timeout=timeout if timeout > 0 else None)
        except ray.exceptions.RayTaskError as error:
            raise _task_failure(error) from error

    def is_owner(self) -> bool:
        """``False``: the value lives in the object store."""
        return False

    def __repr__(self) -> str:
        return f"RayReference(owner={self.owner_name!r})"


def _default_backend() -> str:
    """gloo, plus nccl for CUDA tensors when the actor sees a GPU (``num_gpus`` in its options)."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def _free_init_method() -> str:
    """A ``tcp://`` rendezvous address on this node's IP, on a port free right now."""
    from ..launcher import free_port

    host = require_ray().util.get_node_ip_address()
    return f"tcp://{host}:{free_port(host)}"


class RayTransport(Transport):
    """Members reached as Ray actors (see the module's description).

    Args:
        name: Name of the current member.
        rank: Its rank (must be the rank of the actor it runs in).
        world_size: Number of members (must be the run's).
        timeout: Default timeout of calls and of the start, in seconds.
        backend: Process-group backend (default ``"gloo"``, plus ``"nccl"`` for CUDA
            tensors when the actor has a GPU).
        collective_timeout: Timeout of collective operations, in seconds.

    Raises:
        ImportError: If Ray is not installed.
        RuntimeError: Outside an actor started by the Ray launcher.
        ValueError: If ``rank`` or ``world_size`` differ from the actor's.
    """

    kind = "ray"

    def __init__(
        self,
        name: str,
        rank: int,
        world_size: int,
        timeout: float,
        *,
        backend: Optional[str] = None,
        collective_timeout: Optional[float] = None,
    ):
        require_ray()
        super().__init__(name, rank, world_size, timeout)
        host = current_host()
        if host is None:
            raise RuntimeError(
                "transport='ray' runs inside the ranks started by "
                "machin.parallel.distributed.launch_ray (or launch / run_script with "
                "transport='ray'); this process is not one of them"
            )
        if (rank, world_size) != (host.rank, host.world_size):
            raise ValueError(
                f"rank and world_size must be those of this Ray rank ({host.rank}, "
                f"{host.world_size}), got ({rank}, {world_size})"
            )
        self.host = host
        self.backend = backend or _default_backend()
        self.collective_timeout = collective_timeout
        self._actors: Dict[str, Any] = {}

    def start(self) -> List[str]:
        """Exchange names with the other ranks' actors, then start the process group.

        A restarted rank whose previous process saw the process group form (rank 0
        is in it) rejoins (see :attr:`rejoined`) and starts none; one that died
        before joins the group as the first time.
        """
        self.host.publish(self.name, _free_init_method() if self.rank == 0 else None)
        try:
            names, init_method, formed = self._gather()
            self.rejoined = self.host.restarts > 0 and formed
            if self.rejoined:
                return names
            kwargs = {}
            if self.collective_timeout is not None:
                kwargs["timeout"] = timedelta(seconds=self.collective_timeout)
            dist.init_process_group(
                self.backend,
                init_method=init_method,
                rank=self.rank,
                world_size=self.world_size,
                **kwargs,
            )
            self.host.formed = True
        except BaseException:
            self.host.close()
            raise
        return names

    def _gather(self) -> Tuple[List[str], str, bool]:
        """The members' names, rank 0's rendezvous address and whether its process group formed."""
        handles = [
            ray.get_actor(actor_name(r), namespace=self.host.namespace)
            for r in range(self.world_size)
        ]
        deadline = time.monotonic() + self.timeout + _MARGIN
        infos = [self._member_info(rank, h, deadline) for rank, h in enumerate(handles)]
        names = [name for name, _, _ in infos]
        if len(set(names)) != len(names):
            raise ValueError(f"the names of the ranks must differ, got {names}")
        self._actors = dict(zip(names, handles))
        return names, infos[0][1], infos[0][2]

    def _member_info(self, rank: int, handle: Any, deadline: float) -> tuple:
        """``member_info`` of the actor of ``rank``, asked again while Ray restarts it."""
        while True:
            try:
                ref = handle.member_info.remote(self.timeout)
                return ray.get(ref, timeout=max(deadline - time.monotonic(), 0.1))
            except ray.exceptions.ActorUnavailableError as error:
                if time.monotonic() >= deadline:
                    raise self._unreachable(rank, error) from error
                time.sleep(0.2)
            except ray.exceptions.RayActorError as error:
                raise self._unreachable(rank, error) from error

    def _unreachable(self, rank: int, error: BaseException) -> MemberLostError:
        return MemberLostError(
            f"rank {rank} could not be reached while the World of rank {self.rank} started: "
            f"its Ray actor died or is restarting ({error})"
        )

    def failure_reason(self, error: BaseException) -> Optional[str]:
        """What ``error`` says about the member's actor: that it died, or is restarting."""
        if isinstance(error, ray.exceptions.ActorUnavailableError):
            return "is unavailable (its Ray actor is restarting or cannot be reached)"
        if isinstance(error, ray.exceptions.RayActorError):
            return "died (its Ray actor is dead)"
        return None

    def shutdown(self, graceful: bool, timeout: float) -> None:
        """Stop serving calls; gracefully: once every member has begun to stop too (see :meth:`Transport.shutdown`)."""
        self.host.stopping.set()
        try:
            if graceful:
                others = [n for n in self._actors if n != self.name]
                refs = [self._actors[n].await_stop.remote(timeout) for n in others]
                stopped = ray.get(refs, timeout=timeout + _MARGIN if timeout > 0 else None)
                late = [n for n, ok in zip(others, stopped) if not ok]
                if late:
                    raise RuntimeError(f"member(s) {late} did not stop within {timeout} seconds")
        finally:
            self.host.close()

    def _submit(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...],
        kwargs: Optional[Dict[str, Any]],
        returns_future: bool,
    ) -> Any:
        handle = self._actors.get(to)
        if handle is None:
            raise ValueError(f"to must be a member of the world {list(self._actors)}, got {to!r}")
        return handle.serve.remote(func, tuple(args), kwargs or {}, returns_future)

    def call(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
        returns_future: bool = False,
    ) -> Future:
        """Call ``func`` on ``to``'s actor; a torch future completes with the result (see :meth:`Transport.call`)."""
        ref = self._submit(to, func, args, kwargs, returns_future)
        return _torch_future(ref, self._timeout(timeout), f"the call on member {to!r}")

    def call_sync(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
        returns_future: bool = False,
    ) -> Any:
        """Call ``func`` on ``to``'s actor and wait for the result (see :meth:`Transport.call`)."""
        ref = self._submit(to, func, args, kwargs, returns_future)
        timeout = self._timeout(timeout)
        return ray.get(ref, timeout=timeout if timeout > 0 else None)

    def remote(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
    ) -> RayReference:
        """Call ``func`` on ``to``'s actor, keeping the result in the object store (see :meth:`Transport.remote`)."""
        ref = self._submit(to, func, args, kwargs, False)
        return RayReference(ref, to, self._timeout(timeout))
