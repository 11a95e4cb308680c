"""Who learns, who samples and who serves: roles derived from the world, and the run's control.

A distributed algorithm (Ape-X, IMPALA, ARS) splits its processes into *learners*,
*samplers* and, optionally, dedicated *servers*. :class:`Roles` derives that split from
the size of the world and the rank of the current process alone (``WORLD_SIZE`` and
``RANK``, which ``torchrun`` and :func:`~machin.parallel.distributed.launch` set), so the
same script runs on 3 processes of one machine or on many nodes::

    world = World()
    roles = Roles.from_world()              # rank 0 learns, every other rank samples
    roles = Roles.from_world(learners=2)    # ranks 0 and 1 learn (DistributedDataParallel)

The default split is **one learner, rank 0, and every other process a sampler**.
Learners come first, then servers, then samplers, so that the learner and the servers
live on ``torchrun``'s node 0: that node hosts the rendezvous and must stay up anyway,
and losing any other node then costs samplers only.

:class:`RunControl` coordinates a run without needing every process to stay alive: the
first learner (the *coordinator*) counts updates and environment steps, decides when to
stop, watches the other processes and says who left; samplers report to it once per
episode and stop with a :class:`LearnerLostError` when it stops answering.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import torch
import torch.distributed as dist

from ._context import current_world, require_world
from ._transport import MemberLostError
from .rpc_group import RpcGroup

__all__ = ["Roles", "RunControl", "RunStatus", "LearnerLostError", "REPLAY_PLACES", "node_rank"]

#: Where the parts of a distributed replay buffer may live (see :class:`Roles`).
REPLAY_PLACES = ("samplers", "learners", "servers")


def node_rank() -> int:
    """Rank of this process's node: ``GROUP_RANK`` as set by ``torchrun``; in a rank actor of
    the Ray launcher, the place of its Ray node among the cluster's live nodes (ordered by
    node id); else 0."""
    if "GROUP_RANK" not in os.environ:
        from .transport.ray import ray_node_index  # imports Ray only inside a Ray rank

        index = ray_node_index()
        return 0 if index is None else index
    try:
        return int(os.environ["GROUP_RANK"])
    except ValueError:
        return 0


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int of at least {minimum}, got {value!r}")
    return value


def _from_environment(world_size: Optional[int], rank: Optional[int]) -> Tuple[int, int]:
    """World size and rank: given, else from the running world, else from the environment."""
    world = current_world()
    if world_size is None:
        if world is not None:
            world_size = world.world_size
        elif "WORLD_SIZE" in os.environ:
            world_size = _env_number("WORLD_SIZE")
        else:
            raise ValueError(
                "world_size was not given, no World is running and the WORLD_SIZE environment "
                "variable is not set (torchrun and machin's launch() set it; otherwise pass "
                "world_size=...)"
            )
    if rank is None:
        if world is not None:
            rank = world.rank
        elif "RANK" in os.environ:
            rank = _env_number("RANK")
        else:
            raise ValueError(
                "rank was not given, no World is running and the RANK environment variable is "
                "not set (torchrun and machin's launch() set it; otherwise pass rank=...)"
            )
    return world_size, rank


def _env_number(variable: str) -> int:
    text = os.environ[variable]
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"the {variable} environment variable must be an integer, got {text!r}"
        ) from None


@dataclass(frozen=True)
class Roles:
    """The split of a world's ranks into learners, servers and samplers, seen from one rank.

    Build it with :meth:`from_world`; construct it directly only for a custom split
    (every rank in exactly one of the three tuples, at least one learner and one sampler).

    Attributes:
        world_size: Number of processes.
        rank: Rank of the current process.
        learners: Ranks that train (the first one also coordinates the run and, without
            servers, hosts the model server).
        servers: Ranks that only host servers (the model server, and with
            ``replay="servers"`` the replay buffer).
        samplers: Ranks that play and store experience.
        replay: Where the replay buffer's parts live: ``"samplers"`` (each sampler keeps
            what it played; no transfer), ``"learners"`` or ``"servers"`` (samplers send
            their transitions to one of those ranks, assigned round-robin).
    """

    world_size: int
    rank: int
    learners: Tuple[int, ...]
    servers: Tuple[int, ...]
    samplers: Tuple[int, ...]
    replay: str = "samplers"

    def __post_init__(self) -> None:
        _count(self.world_size, "world_size", 1)
        if (
            isinstance(self.rank, bool)
            or not isinstance(self.rank, int)
            or not 0 <= self.rank < self.world_size
        ):
            raise ValueError(
                f"rank must be an int in [0, {self.world_size - 1}], got {self.rank!r}"
            )
        everyone = sorted((*self.learners, *self.servers, *self.samplers))
        if everyone != list(range(self.world_size)):
            raise ValueError(
                f"learners {list(self.learners)}, servers {list(self.servers)} and samplers "
                f"{list(self.samplers)} must hold every rank of the world [0, {self.world_size - 1}] "
                f"exactly once"
            )
        if not self.learners or not self.samplers:
            raise ValueError(
                f"a run needs at least one learner and one sampler, got learners {list(self.learners)} "
                f"and samplers {list(self.samplers)}"
            )
        if self.replay not in REPLAY_PLACES:
            raise ValueError(f"replay must be one of {REPLAY_PLACES}, got {self.replay!r}")
        if self.replay == "servers" and not self.servers:
            raise ValueError(
                'replay="servers" needs at least one server rank (servers=1 or more), got none'
            )

    @classmethod
    def from_world(
        cls,
        world_size: Optional[int] = None,
        rank: Optional[int] = None,
        *,
        learners: int = 1,
        servers: int = 0,
        replay: str = "samplers",
    ) -> Roles:
        """The standard split: ranks ``0 .. learners-1`` learn, the next ``servers`` ranks
        serve, every other rank samples.

        Args:
            world_size: Number of processes; default: the running
                :class:`~machin.parallel.distributed.World`'s, else ``WORLD_SIZE``.
            rank: Rank of this process; default: the running world's, else ``RANK``.
            learners: Number of learners (more than one train together with
                ``DistributedDataParallel``).
            servers: Number of ranks that only host servers (0: the model server lives
                on the first learner).
            replay: Where the replay buffer lives, see the class attributes.

        Raises:
            ValueError: When an argument is invalid, missing everywhere, or the world is
                too small for the learners, the servers and one sampler.
        """
        world_size, rank = _from_environment(world_size, rank)
        _count(learners, "learners", 1)
        _count(servers, "servers", 0)
        if world_size < learners + servers + 1:
            raise ValueError(
                f"a world of {world_size} process(es) cannot hold {learners} learner(s), {servers} "
                f"server(s) and at least one sampler: start at least {learners + servers + 1} "
                f"processes (for instance torchrun --nproc_per_node {learners + servers + 1}), or ask "
                f"for fewer learners or servers"
            )
        return cls(
            world_size,
            rank,
            tuple(range(learners)),
            tuple(range(learners, learners + servers)),
            tuple(range(learners + servers, world_size)),
            replay,
        )

    # -- this rank -------------------------------------------------------------------------
    def role_of(self, rank: int) -> str:
        """``"learner"``, ``"server"`` or ``"sampler"``: the role of ``rank``."""
        if rank in self.learners:
            return "learner"
        return "server" if rank in self.servers else "sampler"

    @property
    def role(self) -> str:
        """Role of the current process."""
        return self.role_of(self.rank)

    @property
    def is_learner(self) -> bool:
        """Whether the current process learns."""
        return self.rank in self.learners

    @property
    def is_sampler(self) -> bool:
        """Whether the current process samples."""
        return self.rank in self.samplers

    @property
    def is_server(self) -> bool:
        """Whether the current process only hosts servers."""
        return self.rank in self.servers

    # -- placement -------------------------------------------------------------------------
    @property
    def coordinator(self) -> int:
        """Rank that coordinates the run (:class:`RunControl`) and manages the groups: the first learner."""
        return self.learners[0]

    @property
    def model_server(self) -> int:
        """Rank hosting the model server: the first server, else the first learner."""
        return self.servers[0] if self.servers else self.learners[0]

    @property
    def replay_holders(self) -> Tuple[int, ...]:
        """Ranks holding a part of the replay buffer."""
        return {"samplers": self.samplers, "learners": self.learners, "servers": self.servers}[
            self.replay
        ]

    def replay_holder(self, rank: Optional[int] = None) -> int:
        """Rank whose part of the replay buffer receives the transitions of sampler ``rank``.

        Args:
            rank: A sampler's rank; default: the current process.

        Raises:
            ValueError: When ``rank`` is not a sampler.
        """
        rank = self.rank if rank is None else rank
        if rank not in self.samplers:
            raise ValueError(
                f"rank {rank} is a {self.role_of(rank)}, not a sampler {list(self.samplers)}"
            )
        if self.replay == "samplers":
            return rank
        holders = self.replay_holders
        return holders[self.samplers.index(rank) % len(holders)]

    def describe(self, rank: Optional[int] = None) -> str:
        """``"sampler 2 (rank 3)"``: the role, the index within it and the rank."""
        rank = self.rank if rank is None else rank
        role = self.role_of(rank)
        index = {"learner": self.learners, "server": self.servers, "sampler": self.samplers}[
            role
        ].index(rank)
        return f"{role} {index} (rank {rank})"

    def __str__(self) -> str:
        servers = f", servers {list(self.servers)}" if self.servers else ""
        return (
            f"{self.world_size} processes: learners {list(self.learners)}{servers}, samplers "
            f"{list(self.samplers)}; model server on rank {self.model_server}, replay on the {self.replay}"
        )


class LearnerLostError(RuntimeError):
    """The coordinating learner stopped answering: this process cannot go on with the run."""


class RunStatus(NamedTuple):
    """What the coordinator tells a process about the run: ``stop``, whether the run is over
    (or ending); ``reason``, why it stops (``""`` while it goes on); ``updates``, the updates
    the learners have made; ``solved_by``, the rank of the sampler that first reported
    solving the task, or ``None``; ``gone``, the ranks that left the run without saying
    goodbye (killed, or unreachable).
    """

    stop: bool
    reason: str
    updates: int
    solved_by: Optional[int]
    gone: Tuple[int, ...]


def _alive() -> bool:
    """The coordinator's ping, answered by any live process."""
    return True


def _print(message: str) -> None:
    print(message, flush=True)


class RunControl:
    """Coordination of a learner/sampler run that survives samplers (and whole nodes) leaving.

    Every process of the world creates one, with the same group (an
    :class:`~machin.parallel.distributed.RpcGroup` over the whole world, whose first
    member is ``roles.coordinator``, as the algorithms' ``from_roles`` build it) and its
    own :class:`Roles`. The constructor waits for every process.

    **The coordinator** (the first learner) keeps the run's state: the number of
    updates (:meth:`set_updates`), the environment steps each sampler reported, who
    finished and who left. A thread pings every other process each ``check_interval``
    seconds; one that does not answer (killed, or its node gone) is reported once
    through ``log`` ("sampler 2 (rank 3) on node 1 left the run ...") and is not waited
    for again. :meth:`learner_should_stop` becomes true once a stop was requested
    (:meth:`request_stop`, or a sampler reporting ``solved``) or no sampler is left
    playing.

    **Samplers** call :meth:`report` once per episode (steps and episodes played since the
    last report) and stop when the returned :class:`RunStatus` says so;
    :meth:`wait_for_updates` paces them to the learner. When the coordinator cannot be
    reached within ``timeout`` seconds, both raise :class:`LearnerLostError` naming it.

    **Everyone** ends with :meth:`finish`, which stops the world: gracefully (every
    process waits for all) when nobody left, otherwise each survivor leaves on its own
    once the coordinator has seen it go, so that nobody waits for the dead.

    Args:
        group: RPC group over every process of the world, first member the coordinator.
        roles: The roles, as seen from this process.
        timeout: Seconds a call to the coordinator (and a ping from it) may take; default:
            the world's ``rpc_timeout``.
        check_interval: Seconds between two rounds of pings by the coordinator.
        log: Called with each message about processes that left; default: ``print``.
        learner_group: Collective group of the learners (``from_roles`` makes one when there
            are several): :meth:`learner_should_stop` then agrees across them.
        key: Name of the coordinator's service in ``group``.

    Raises:
        ValueError: When the group does not hold every process of the world, its first
            member is not the coordinator, or ``roles`` does not fit the running world.
    """

    def __init__(
        self,
        group: RpcGroup,
        roles: Roles,
        *,
        timeout: Optional[float] = None,
        check_interval: float = 2.0,
        log: Optional[Callable[[str], None]] = None,
        learner_group: Any = None,
        key: str = "run_control",
    ):
        world = require_world()
        check_world(roles, world)
        members = world.get_members()
        if sorted(group.get_group_members()) != sorted(members):
            raise ValueError(
                f"group must hold every process of the world {members}, got {group.get_group_members()}"
            )
        if group.get_group_members()[0] != members[roles.coordinator]:
            raise ValueError(
                f"the first member of group must be the coordinator {members[roles.coordinator]!r} "
                f"(rank {roles.coordinator}), got {group.get_group_members()[0]!r}"
            )
        if (
            isinstance(check_interval, bool)
            or not isinstance(check_interval, (int, float))
            or check_interval <= 0
        ):
            raise ValueError(
                f"check_interval must be a positive number of seconds, got {check_interval!r}"
            )
        self.group = group
        self.roles = roles
        self.timeout = world.rpc_timeout if timeout is None else float(timeout)
        self.check_interval = float(check_interval)
        self.learner_group = learner_group
        self._log = _print if log is None else log
        self._key = f"{key}/call"
        self._names = list(members)
        self._coordinator = roles.coordinator
        self.is_coordinator = roles.rank == roles.coordinator
        self._lock = threading.Lock()
        # the coordinator's state
        self._updates = 0
        self._stop_reason = ""
        self._solved_by: Optional[int] = None
        self._steps: Dict[int, int] = {}
        self._episodes: Dict[int, int] = {}
        self._done: Set[int] = set()
        self._gone: Dict[int, str] = {}
        self._goodbye: Set[int] = set()
        self._mode: Optional[str] = None
        self._nodes: Dict[int, Tuple[int, str]] = {}
        # what this process has already said about departures
        self._announced: Set[int] = set()
        self._watcher: Optional[threading.Thread] = None
        self._halt = threading.Event()
        self._last_status: Optional[RunStatus] = None

        if self.is_coordinator:
            group.register(self._key, self._serve)
        group.barrier()
        self._call("hello", roles.rank, node_rank(), socket.gethostname())
        group.barrier()  # the coordinator knows every process's node before it watches them
        if self.is_coordinator:
            self._watcher = threading.Thread(
                target=self._watch, name="machin-run-control", daemon=True
            )
            self._watcher.start()

    # -- descriptions ------------------------------------------------------------------------
    def describe(self, rank: int) -> str:
        """``"sampler 1 (rank 2) on node 1 (host h)"`` (the node as far as the coordinator knows it)."""
        text = self.roles.describe(rank)
        node = self._nodes.get(rank)
        return text if node is None else f"{text} on node {node[0]} (host {node[1]})"

    def rank_of(self, name: str) -> int:
        """World rank of the process named ``name``.

        Raises:
            ValueError: When no process has that name.
        """
        if name not in self._names:
            raise ValueError(
                f"name must be one of the world's processes {self._names}, got {name!r}"
            )
        return self._names.index(name)

    @property
    def nodes(self) -> Dict[int, int]:
        """(Coordinator) rank -> node rank of every process."""
        return {rank: node for rank, (node, _) in self._nodes.items()}

    @property
    def steps(self) -> Dict[int, int]:
        """(Coordinator) environment steps reported by each sampler."""
        with self._lock:
            return dict(self._steps)

    @property
    def gone(self) -> Dict[int, str]:
        """Ranks that left without saying goodbye, with the reason (the coordinator's view; elsewhere,
        what the last status said)."""
        if self.is_coordinator:
            with self._lock:
                return dict(self._gone)
        status = self._last_status
        return (
            {} if status is None else {rank: "reported by the coordinator" for rank in status.gone}
        )

    # -- calls to the coordinator -----------------------------------------------------------
    def _call(self, op: str, *args: Any) -> Any:
        if self.is_coordinator:
            return self._serve(op, *args)
        try:
            return self.group.registered_sync(self._key, args=(op, *args), timeout=self.timeout)
        except MemberLostError as error:
            coordinator = self.roles.describe(self._coordinator)
            raise LearnerLostError(
                f"{self.roles.describe()} on node {node_rank()} lost the coordinating {coordinator}, "
                f"process {self._names[self._coordinator]!r} ({_cause(error)}). The learner was "
                f"killed or its node is gone (or it did not answer within {self.timeout:g} s), so this "
                f"process stops. Restart the run to go on; a learner that writes checkpoints resumes "
                f"from its last one."
            ) from error

    def _serve(self, op: str, *args: Any) -> Any:
        with self._lock:
            if op == "hello":
                rank, node, host = args
                self._nodes[rank] = (node, host)
                return None
            if op == "report":
                rank, steps, episodes, solved, done = args
                self._steps[rank] = self._steps.get(rank, 0) + steps
                self._episodes[rank] = self._episodes.get(rank, 0) + episodes
                if solved and self._solved_by is None:
                    self._solved_by = rank
                    self._stop_reason = (
                        self._stop_reason or f"{self.roles.describe(rank)} solved the task"
                    )
                if done:
                    self._done.add(rank)
            elif op == "stop":
                self._stop_reason = self._stop_reason or args[0]
            elif op == "goodbye":
                self._goodbye.add(args[0])
                return None
            elif op == "mode":
                return self._mode
            elif op != "status":
                raise ValueError(f"unknown run-control operation {op!r}")
            return self._status()

    def _status(self) -> RunStatus:
        """(Coordinator, under the lock.)"""
        reason = self._stop_reason
        if not reason:
            playing = [
                r for r in self.roles.samplers if r not in self._done and r not in self._gone
            ]
            if not playing:
                left = [r for r in self.roles.samplers if r in self._gone]
                reason = (
                    "every sampler left the run"
                    if len(left) == len(self.roles.samplers)
                    else ("every sampler finished")
                )
        return RunStatus(
            bool(reason), reason, self._updates, self._solved_by, tuple(sorted(self._gone))
        )

    def _remember(self, status: RunStatus) -> RunStatus:
        self._last_status = status
        if not self.is_coordinator:
            for rank in status.gone:
                if rank not in self._announced:
                    self._announced.add(rank)
                    self._log(
                        f"{self.roles.describe()}: {self.roles.describe(rank)} has left the run; "
                        f"going on without it"
                    )
        return status

    # -- samplers -------------------------------------------------------------------------------
    def report(
        self, steps: int = 0, episodes: int = 0, *, solved: bool = False, done: bool = False
    ) -> RunStatus:
        """Tell the coordinator what this process did since its last report; get the run's status.

        Args:
            steps: Environment steps played since the last report.
            episodes: Episodes finished since the last report.
            solved: This process has solved the task (the first such report stops the run).
            done: This process has finished playing.

        Raises:
            LearnerLostError: When the coordinator does not answer within ``timeout``.
        """
        return self._remember(
            self._call(
                "report", self.roles.rank, int(steps), int(episodes), bool(solved), bool(done)
            )
        )

    def status(self) -> RunStatus:
        """The run's status (:class:`RunStatus`).

        Raises:
            LearnerLostError: When the coordinator does not answer within ``timeout``.
        """
        return self._remember(self._call("status"))

    def wait_for_updates(self, updates: int, poll: float = 0.05) -> RunStatus:
        """Wait until the learners have made ``updates`` updates, or the run stops.

        Args:
            updates: The update count to wait for.
            poll: Seconds between two questions to the coordinator.

        Raises:
            LearnerLostError: When the coordinator does not answer within ``timeout``.
        """
        status = self.status()
        while status.updates < updates and not status.stop:
            time.sleep(poll)
            status = self.status()
        return status

    # -- learners -------------------------------------------------------------------------------
    def set_updates(self, updates: int) -> None:
        """(Coordinator) record the number of updates made so far; other processes ignore it."""
        if self.is_coordinator:
            with self._lock:
                self._updates = int(updates)

    def request_stop(self, reason: str) -> None:
        """Ask the run to stop (the first reason given is kept).

        Raises:
            LearnerLostError: When the coordinator does not answer within ``timeout``.
        """
        self._call("stop", str(reason))

    def learner_should_stop(self) -> bool:
        """Whether the learners should leave their loop: a stop was requested or no sampler plays.

        With a ``learner_group``, every learner must call it the same number of times: they
        agree (a logical or), so learners kept in step by ``DistributedDataParallel`` leave
        after the same update.
        """
        stop = self.status().stop
        if self.learner_group is not None:
            flag = torch.tensor([1.0 if stop else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.learner_group.group)
            stop = bool(flag.item() > 0)
        return stop

    def learners_agree(self, flag: bool) -> bool:
        """Whether ``flag`` is true on every learner (just ``flag`` with one learner).

        With a ``learner_group`` every learner must call it at the same point of its loop:
        use it for decisions that must be the same everywhere (e.g. "enough samples to
        start updating"), since learners in ``DistributedDataParallel`` update in step.
        """
        if self.learner_group is None:
            return bool(flag)
        value = torch.tensor([1.0 if flag else 0.0])
        dist.all_reduce(value, op=dist.ReduceOp.MIN, group=self.learner_group.group)
        return bool(value.item() > 0)

    # -- watching ---------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._halt.wait(self.check_interval):
            self.check()

    def check(self) -> List[int]:
        """(Coordinator) ping every other process now; report and return those that left since the
        last check. The watcher thread calls it every ``check_interval`` seconds."""
        if not self.is_coordinator:
            return []
        with self._lock:
            watched = [
                r
                for r in range(self.roles.world_size)
                if r != self.roles.rank and r not in self._gone and r not in self._goodbye
            ]
        futures = {}
        for rank in watched:
            try:
                futures[rank] = self.group.rpc_async(
                    self._names[rank], _alive, timeout=self.timeout
                )
            except Exception as error:  # the agent refused at once
                futures[rank] = error
        left = []
        for rank, future in futures.items():
            try:
                if isinstance(future, Exception):
                    raise future
                future.wait()
            except Exception as error:
                with self._lock:
                    if rank in self._goodbye or rank in self._gone:
                        continue
                    self._gone[rank] = f"no answer: {_cause(error)}"
                left.append(rank)
        for rank in left:
            self._announce(rank)
        return left

    def _announce(self, rank: int) -> None:
        with self._lock:
            reason = self._gone[rank]
            still = [r for r in range(self.roles.world_size) if r not in self._gone]
        learners = [r for r in self.roles.learners if r in still]
        samplers = [r for r in self.roles.samplers if r in still]
        self._log(
            f"{self.describe(rank)} left the run ({reason}); going on with learners {learners} "
            f"and samplers {samplers}"
        )

    # -- the end -----------------------------------------------------------------------------------
    def finish(self, world: Any = None) -> RunStatus:
        """End this process's part of the run and stop the world (every process calls it once).

        The coordinator decides how the world stops once its learner loop is over: with
        nobody gone, every process stops gracefully together; otherwise each survivor says
        goodbye and stops on its own, the coordinator last. A process whose coordinator is
        gone stops at once and raises :class:`LearnerLostError`.

        Args:
            world: The running world (default: this process's).

        Returns:
            The final status.
        """
        world = require_world() if world is None else world
        if self.is_coordinator:
            return self._finish_coordinator(world)
        try:
            status = self.report(done=True)
            mode, pause = self._call("mode"), 0.05
            while mode is None:  # the learners are still at work
                time.sleep(pause)
                pause = min(1.0, pause * 1.5)
                mode = self._call("mode")
            status = self.status()
            if mode == "graceful":
                world.stop()
                return status
            self._call("goodbye", self.roles.rank)
        except LearnerLostError:
            world.stop(graceful=False)
            raise
        world.stop(graceful=False)
        return status

    def _finish_coordinator(self, world: Any) -> RunStatus:
        self.check()  # the latest news before deciding
        with self._lock:
            self._done.add(self.roles.rank)
            self._mode = "local" if self._gone else "graceful"
            mode = self._mode
        if mode == "local":
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                with self._lock:
                    waiting = [
                        r
                        for r in range(self.roles.world_size)
                        if r != self.roles.rank and r not in self._gone and r not in self._goodbye
                    ]
                if not waiting:
                    break
                time.sleep(0.05)
                if self._watcher is None:
                    self.check()
        self._halt.set()
        if self._watcher is not None:
            self._watcher.join()
        with self._lock:
            status = self._status()
        if mode == "graceful":
            world.stop()
        else:
            world.stop(graceful=False)
        return status


def _cause(error: BaseException, limit: int = 160) -> str:
    """The innermost cause in a transport error's message, shortened."""
    text = " ".join(str(error).split())
    text = text.rsplit("Cause: ", 1)[-1]
    text = text.split(" (this error originated at", 1)[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_world(roles: Roles, world: Any) -> None:
    """Raise a ``ValueError`` unless ``roles`` describes ``world`` as seen from its process."""
    if roles.world_size != world.world_size or roles.rank != world.rank:
        raise ValueError(
            f"roles must describe the running world (rank {world.rank} of {world.world_size} processes), "
            f"got roles for rank {roles.rank} of {roles.world_size}"
        )


def member_order(roles: Roles, first: int) -> List[int]:
    """Every rank of ``roles``' world, ``first`` first and the others in rank order (a group's
    first member manages it)."""
    return [first] + [r for r in range(roles.world_size) if r != first]


def names_of(world: Any, ranks: Sequence[int]) -> List[str]:
    """The world's names of ``ranks``."""
    members = world.get_members()
    return [members[r] for r in ranks]
