"""The name service behind :class:`~machin.parallel.distributed.rpc_group.RpcGroup`.

Each RPC group has a table of *services* (functions registered with ``register``)
and *paired values* (objects shared with ``pair``), each entry naming the member
that holds it. The first member of a group is its **manager**: it owns the
authoritative table, decides every change (a key can be held by one member at a
time) and pushes each change, with a version number, to the replica every member
keeps. Once ``register`` or ``pair`` has returned, every member can resolve the key
locally, so calling a service costs one round trip to its holder.

The functions and values themselves never leave their holder: only names travel.

The manager also runs the group barriers (the creation of a group is its first
barrier). Barrier arrivals and table changes are handled by functions that
return futures (``returns_future=True`` of the transport), so on the ``rpc``
transport a member waiting at a barrier holds no RPC thread of the manager.

A process that leaves the world before the others (its ``World`` stopped without
waiting, or its interpreter exiting) tells every other process first. From then on
a barrier that still waits for it fails at once with an error naming it, and so
does any later barrier of a group it belongs to, instead of running into the
timeout.

A member whose process was restarted (Ray's ``restart`` of a rank) *rejoins*: it
tells the others, and a group it creates again is not a barrier with the others
(they passed it long ago) but a readmission by the manager, which drops what the
dead process held (the new one registers it again) and hands over its table and
the number of barriers completed so far. A group's manager cannot rejoin: its
table died with it.
"""

import threading
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Set, Tuple

import torch
from torch.futures import Future

from ..exception import KeyRuntimeError
from ._context import current_world, require_world
from ._transport import (
    DillPayload,
    MemberLeftError,
    done_future,
    run_wrapped,
    transport_error,
    wait_local,
)
from .transport import Transport

SERVICE = "service"
PAIRED = "paired value"
VERBS = {SERVICE: "registered", PAIRED: "paired"}


def taken_message(kind: str, key: Hashable, group: str, holder: str) -> str:
    """The error of a key that is taken already, in Machin 0.3.4's words, naming its ``holder``."""
    if kind == SERVICE:
        return f"Service with key {key!r} already registered in Group [{group}] ({holder})"
    return f"Value with key {key!r} already paired to Group [{group}] ({holder})"


# (error class name or None, message): what a table change replies.
_Outcome = Tuple[Optional[str], str]
_ERRORS = {
    "KeyError": KeyError,
    "RuntimeError": RuntimeError,
    "ValueError": ValueError,
    "KeyRuntimeError": KeyRuntimeError,
}


class _GroupState:
    """What one process knows about a group it belongs to."""

    __slots__ = ("members", "table", "version", "barrier_count", "completed")

    def __init__(self, members: Sequence[str]):
        self.members = tuple(members)
        # (kind, key) -> (holder or None once removed, version of the change)
        self.table: Dict[Tuple[str, Hashable], Tuple[Optional[str], int]] = {}
        self.version = 0
        self.barrier_count = 0
        # (manager side) the last barrier of the group that completed (0: the creation)
        self.completed = -1


class _Barrier:
    __slots__ = ("members", "arrived", "futures", "timers")

    def __init__(self, members: Tuple[str, ...]):
        self.members = members
        self.arrived: Set[str] = set()
        self.futures: List[Future] = []
        self.timers: List[threading.Timer] = []


# A member waits this much longer than its barrier timeout for the manager's answer, so
# that the manager, which knows who has not arrived, reports the timeout.
_BARRIER_MARGIN = 2.0


def _raise(outcome: _Outcome) -> None:
    error, message = outcome
    if error is not None:
        raise _ERRORS[error](message)


class NameService:
    """Per-process state of the RPC groups: replicas, manager tables, barriers.

    Args:
        name: Name of this process in the world.
        timeout: Timeout of its internal RPCs, in seconds.
        transport: The world's transport.
    """

    def __init__(self, name: str, timeout: float, transport: Transport):
        self.name = name
        self.timeout = timeout
        self.transport = transport
        self._lock = threading.Lock()
        self._groups: Dict[str, _GroupState] = {}
        self._barriers: Dict[Tuple[str, int], _Barrier] = {}
        self._held: Dict[Tuple[str, str, Hashable], Any] = {}
        # member -> how it left the world (told by the member itself before it left)
        self._departed: Dict[str, str] = {}
        # members among them that shut down at once, without waiting for the others
        self._left_at_once: Set[str] = set()
        # members whose process was restarted and that rejoined the world
        self._rejoined: Set[str] = set()
        #: How this process leaves the world, once it has told the others (it then
        #: serves no more calls); ``None`` while it stays.
        self.leaving: Optional[str] = None

    # -- groups ------------------------------------------------------------------------
    def has_group(self, group: str) -> bool:
        """Whether this process has created ``group`` (and not destroyed it)."""
        return group in self._groups

    def create_group(self, group: str, members: Sequence[str], timeout: float) -> bool:
        """Create the local state of ``group`` and wait until every member has done so.

        A rejoining process is readmitted instead, without waiting, if the others
        created the group already.

        Returns:
            ``True`` when the creation was a barrier of all members, ``False`` when
            this process was readmitted.

        Raises:
            RuntimeError: If this process already has a group of that name, the
                members did not all arrive within ``timeout``, or a rejoining
                process is the group's manager.
            ValueError: If the members disagree on the member list.
        """
        with self._lock:
            if group in self._groups:
                raise RuntimeError(f"an RPC group named {group!r} already exists in this process")
            self._groups[group] = _GroupState(members)
        try:
            if self.transport.rejoined and self._readmit(group, tuple(members)):
                return False
            self._barrier(group, tuple(members), 0, timeout)
        except BaseException:
            with self._lock:
                self._groups.pop(group, None)
            raise
        return True

    def _readmit(self, group: str, members: Tuple[str, ...]) -> bool:
        """(Rejoining member) take the manager's table of a group the others created.

        ``False`` when the group's creation has not completed yet (then this process
        takes part in it as every member does).
        """
        manager = members[0]
        if manager == self.name:
            raise RuntimeError(
                f"member {self.name!r} rejoined the world after its process was restarted, "
                f"but it is the first member (the manager) of RPC group {group!r}, whose table "
                f"died with its previous process; put a member that is not restarted first"
            )
        try:
            outcome, completed, entries = self.transport.call_sync(
                manager, _rpc_readmit, args=(group, self.name, members), timeout=self.timeout
            )
        except Exception as error:
            raise transport_error(f"rejoining RPC group {group!r}", manager, error) from error
        _raise(outcome)
        if completed < 0:
            return False
        for kind, key, holder, version in entries:
            self.apply(group, kind, key, holder, version)
        with self._lock:
            self._groups[group].barrier_count = completed
        return True

    def readmit(self, group: str, member: str, members: Tuple[str, ...]) -> tuple:
        """(Manager side) readmit a restarted ``member``: drop what it held, return the table.

        Returns:
            ``(outcome, completed, entries)``: the last completed barrier (-1 while the
            creation is incomplete) and the table as ``(kind, key, holder, version)``.
        """
        with self._lock:
            state = self._groups.get(group)
            if state is None or state.completed < 0:
                return (None, ""), -1, []
            if state.members != members:
                message = (
                    f"members of RPC group {group!r} disagree: {member!r} gave {list(members)}, "
                    f"the group has {list(state.members)}"
                )
                return ("ValueError", message), -1, []
            dropped = []
            for (kind, key), (holder, _) in list(state.table.items()):
                if holder == member:
                    state.version += 1
                    state.table[(kind, key)] = (None, state.version)
                    dropped.append((kind, key, state.version))
            entries = [(k, key, h, v) for (k, key), (h, v) in state.table.items()]
            others = [m for m in state.members if m not in (self.name, member)]
            completed = state.completed
        for kind, key, version in dropped:  # the dead process's entries, withdrawn everywhere
            for other in others:
                self.transport.call(
                    other, _rpc_apply, args=(group, kind, key, None, version), timeout=self.timeout
                )
        return (None, ""), completed, entries

    def destroy_group(self, group: str) -> None:
        """Withdraw what this process holds in ``group``, then forget the group."""
        state = self._groups.get(group)
        if state is None:
            return
        mine = [key for key, (holder, _) in list(state.table.items()) if holder == self.name]
        errors = []
        for kind, key in mine:
            try:
                self.change(group, state.members, kind, "remove", key)
            except Exception as error:  # go on withdrawing the rest
                errors.append(error)
        with self._lock:
            self._groups.pop(group, None)
            for held in [k for k in self._held if k[0] == group]:
                del self._held[held]
        if errors:
            raise RuntimeError(f"could not withdraw every entry of group {group!r}: {errors[0]}")

    # -- barriers ----------------------------------------------------------------------
    def barrier(self, group: str, members: Tuple[str, ...], timeout: float) -> None:
        """Wait until every member of ``group`` reaches its next barrier."""
        with self._lock:
            state = self._groups.get(group)
            if state is None:
                raise RuntimeError(f"this process is not a member of the group {group!r}")
            state.barrier_count += 1
            count = state.barrier_count
        self._barrier(group, members, count, timeout)

    def _barrier(self, group: str, members: Tuple[str, ...], count: int, timeout: float) -> None:
        manager = members[0]
        what = f"barrier {count} of RPC group {group!r}"
        if manager in self._departed:
            raise self.departure_error(what, manager)
        # The manager fails a member's wait after ``timeout`` naming the members that did
        # not arrive; the member's own limit, a little longer, only catches a manager
        # that is gone (then the manager is named).
        wait = timeout + _BARRIER_MARGIN if timeout > 0 else timeout
        if manager == self.name:
            outcome = wait_local(self.arrive(group, count, self.name, members, timeout), wait, what)
        else:
            try:
                outcome = self.transport.call_sync(
                    manager,
                    _rpc_arrive,
                    args=(group, count, self.name, members, timeout),
                    timeout=wait,
                    returns_future=True,
                )
            except Exception as error:
                raise transport_error(what, manager, error) from error
        _raise(outcome)

    def _expire(self, group: str, count: int, member: str, future: Future, timeout: float) -> None:
        """(Manager side) fail ``member``'s wait at a barrier that is still incomplete."""
        with self._lock:
            barrier = self._barriers.get((group, count))
            if barrier is None or future not in barrier.futures:
                return
            barrier.futures.remove(future)
            missing = [m for m in barrier.members if m not in barrier.arrived]
        future.set_result(
            (
                "RuntimeError",
                f"barrier {count} of RPC group {group!r} did not complete within {timeout} "
                f"seconds for member {member!r}: member(s) {missing} did not arrive (gone, "
                f"or late); the members {sorted(barrier.arrived)} did",
            )
        )

    def arrive(
        self,
        group: str,
        count: int,
        member: str,
        members: Tuple[str, ...],
        timeout: float = -1,
    ) -> Future:
        """(Manager side) record ``member`` at a barrier; the future completes when all are there.

        With a positive ``timeout``, the future completes with an error naming the
        members that did not arrive if the barrier is still incomplete by then.
        """
        with self._lock:
            gone = self._absent_departed(group, count, members)
            if gone:
                return done_future(("RuntimeError", self._barrier_left(group, count, gone)))
            barrier = self._barriers.setdefault((group, count), _Barrier(members))
            if barrier.members != members:
                return done_future(
                    (
                        "ValueError",
                        f"members of RPC group {group!r} disagree: {member!r} gave {list(members)}, "
                        f"another member gave {list(barrier.members)}",
                    )
                )
            future: Future = torch.futures.Future()
            barrier.arrived.add(member)
            barrier.futures.append(future)
            if barrier.arrived != set(members):
                if timeout > 0:
                    timer = threading.Timer(
                        timeout, self._expire, args=(group, count, member, future, timeout)
                    )
                    timer.daemon = True
                    barrier.timers.append(timer)
                    timer.start()
                return future
            del self._barriers[(group, count)]
            state = self._groups.get(group)
            if state is not None:
                state.completed = max(state.completed, count)
        for timer in barrier.timers:
            timer.cancel()
        for waiting in barrier.futures:
            waiting.set_result((None, ""))
        return future

    # -- departures and returns -----------------------------------------------------------
    def rejoined(self) -> List[str]:
        """The members known to have rejoined the world after a restart (this one included)."""
        with self._lock:
            return sorted(self._rejoined)

    def record_rejoin(self, member: str) -> None:
        """Note that ``member`` rejoined the world in a new process: it is no longer gone."""
        with self._lock:
            self._rejoined.add(member)
            self._departed.pop(member, None)
            self._left_at_once.discard(member)

    def announce_rejoin(self, members: Sequence[str], timeout: float) -> None:
        """Tell the other ``members`` that this process rejoined; skip those that cannot be told."""
        self.record_rejoin(self.name)
        futures = [
            self.transport.call(m, _rpc_rejoined, args=(self.name,), timeout=timeout)
            for m in members
            if m != self.name
        ]
        for future in futures:
            try:
                future.wait()
            except Exception:  # gone itself: nobody there to tell
                continue

    def departure(self, member: str) -> Optional[str]:
        """How ``member`` left the world, or ``None`` if it has not told this process so."""
        return self._departed.get(member)

    def departed(self) -> List[str]:
        """The members known to have left the world."""
        with self._lock:
            return list(self._departed)

    def left_at_once(self) -> List[str]:
        """The members known to have left without waiting for the others to stop too."""
        with self._lock:
            return sorted(self._left_at_once)

    def departure_error(self, what: str, member: str) -> MemberLeftError:
        """The error of ``what`` that could not be done because ``member`` left the world."""
        return MemberLeftError(
            f"{what} failed: member {member!r} left the world ({self._departed[member]})"
        )

    def record_departure(self, member: str, how: str, waits: bool = False) -> None:
        """Note that ``member`` left the world, and fail every barrier still waiting for it.

        ``waits``: the member still takes part in a graceful stop of the world.
        """
        with self._lock:
            if not waits:
                self._left_at_once.add(member)
            if member in self._departed:
                return
            self._departed[member] = how
            stuck = [
                (key, barrier)
                for key, barrier in self._barriers.items()
                if member in barrier.members and member not in barrier.arrived
            ]
            for key, _ in stuck:
                del self._barriers[key]
        for (group, count), barrier in stuck:
            for timer in barrier.timers:
                timer.cancel()
            message = self._barrier_left(group, count, [member])
            for waiting in barrier.futures:
                waiting.set_result(("RuntimeError", message))

    def announce_departure(
        self, members: Sequence[str], how: str, timeout: float, waits: bool = False
    ) -> None:
        """Tell the other ``members`` that this process leaves the world; wait at most ``timeout``.

        From then on this process serves no more calls, and the barriers it manages
        fail for want of it. ``waits``: it still takes part in a graceful stop.
        Members that cannot be told (gone themselves) are skipped.
        """
        self.leaving = how
        self.record_departure(self.name, how, waits=True)
        futures = []
        for member in members:
            if member == self.name or member in self._departed:
                continue
            try:
                futures.append(
                    self.transport.call(
                        member, _rpc_departed, args=(self.name, how, waits), timeout=timeout
                    )
                )
            except Exception:  # this member cannot be reached: nobody left to tell there
                continue
        for future in futures:
            try:
                future.wait()
            except Exception:
                continue

    def _absent_departed(self, group: str, count: int, members: Sequence[str]) -> List[str]:
        """(Under the lock) departed members that have not arrived at a barrier."""
        barrier = self._barriers.get((group, count))
        return [
            m
            for m in members
            if m in self._departed and (barrier is None or m not in barrier.arrived)
        ]

    def _barrier_left(self, group: str, count: int, gone: Sequence[str]) -> str:
        reasons = "; ".join(f"member {m!r} left the world ({self._departed[m]})" for m in gone)
        return f"barrier {count} of RPC group {group!r} cannot complete: {reasons}"

    # -- table ---------------------------------------------------------------------------
    def hold(self, group: str, kind: str, key: Hashable, obj: Any) -> None:
        """Keep ``obj`` (a service function or a paired value) locally, then publish it.

        Raises:
            KeyError: If the key is already taken in the group.
        """
        local = (group, kind, key)
        with self._lock:
            if local in self._held:
                raise KeyError(taken_message(kind, key, group, "by this process"))
            self._held[local] = obj
        try:
            self.change(group, self._groups[group].members, kind, "add", key)
        except BaseException:
            with self._lock:
                self._held.pop(local, None)
            raise

    def release(self, group: str, kind: str, key: Hashable) -> None:
        """Withdraw a key this process holds, then drop the local object.

        Raises:
            KeyError: If the key is not held in the group.
            KeyRuntimeError: If another member holds it (a ``KeyError`` and a
                ``RuntimeError``).
        """
        self.change(group, self._groups[group].members, kind, "remove", key)
        with self._lock:
            self._held.pop((group, kind, key), None)

    def held(self, group: str, kind: str, key: Hashable) -> Any:
        """The local object of a key held here.

        Raises:
            KeyError: If this process does not hold it.
        """
        try:
            return self._held[(group, kind, key)]
        except KeyError:
            raise KeyError(
                f"{kind} {key!r} is not {VERBS[kind]} on member {self.name!r} of group {group!r} "
                f"(not found there)"
            ) from None

    def lookup(self, group: str, members: Sequence[str], kind: str, key: Hashable) -> Optional[str]:
        """Holder of a key, or ``None``: from the local replica, or asked from the manager."""
        state = self._groups.get(group)
        if state is not None:
            entry = state.table.get((kind, key))
            return None if entry is None else entry[0]
        manager = members[0]
        try:
            return self.transport.call_sync(
                manager, _rpc_lookup, args=(group, kind, key), timeout=self.timeout
            )
        except Exception as error:
            raise transport_error(
                f"looking up {kind} {key!r} of RPC group {group!r}", manager, error
            ) from error

    def local_lookup(self, group: str, kind: str, key: Hashable) -> Optional[str]:
        """(Manager side) holder of a key in the local table, or ``None``."""
        state = self._groups.get(group)
        entry = None if state is None else state.table.get((kind, key))
        return None if entry is None else entry[0]

    def change(self, group: str, members: Sequence[str], kind: str, op: str, key: Hashable) -> None:
        """Ask the manager to add or remove a key held by this process, and wait for it."""
        manager = members[0]
        what = f"{'publishing' if op == 'add' else 'withdrawing'} {kind} {key!r} in RPC group {group!r}"
        if manager == self.name:
            outcome = wait_local(self.decide(group, kind, op, key, self.name), self.timeout, what)
        else:
            try:
                outcome = self.transport.call_sync(
                    manager,
                    _rpc_decide,
                    args=(group, kind, op, key, self.name),
                    timeout=self.timeout,
                    returns_future=True,
                )
            except Exception as error:
                raise transport_error(what, manager, error) from error
        _raise(outcome)

    def decide(self, group: str, kind: str, op: str, key: Hashable, holder: str) -> Future:
        """(Manager side) apply a change to the authoritative table and push it to every member."""
        verb = VERBS[kind]
        with self._lock:
            state = self._groups.get(group)
            if state is None:
                return done_future(
                    (
                        "RuntimeError",
                        f"RPC group {group!r} does not exist on its manager {self.name!r}",
                    )
                )
            entry = state.table.get((kind, key))
            current = None if entry is None else entry[0]
            if op == "add" and current is not None:
                return done_future(
                    (
                        "KeyError",
                        taken_message(kind, key, group, f"by member {current!r}"),
                    )
                )
            if op == "remove" and current is None:
                return done_future(("KeyError", f"{kind} {key!r} is not {verb} in group {group!r}"))
            if op == "remove" and current != holder:
                return done_future(
                    (
                        "KeyRuntimeError",
                        f"{kind} {key!r} of group {group!r} is held by member {current!r}; "
                        f"only its holder can withdraw it, not {holder!r} (it is not {verb} "
                        f"by this process)",
                    )
                )
            new_holder = holder if op == "add" else None
            state.version += 1
            version = state.version
            state.table[(kind, key)] = (new_holder, version)
            others = [m for m in state.members if m != self.name]
        if not others:
            return done_future((None, ""))
        futures = [
            self.transport.call(
                m, _rpc_apply, args=(group, kind, key, new_holder, version), timeout=self.timeout
            )
            for m in others
        ]

        def report(_: Future) -> _Outcome:
            failed = []
            for member, future in zip(others, futures):
                try:
                    future.wait()
                except Exception as error:
                    failed.append(f"{member!r} ({error})")
            if failed:
                return (
                    "RuntimeError",
                    f"the change of {kind} {key!r} in group {group!r} did not reach {', '.join(failed)}",
                )
            return None, ""

        return torch.futures.collect_all(futures).then(report)

    def apply(
        self, group: str, kind: str, key: Hashable, holder: Optional[str], version: int
    ) -> None:
        """(Member side) apply a change pushed by the manager, unless a newer one is known."""
        with self._lock:
            state = self._groups.get(group)
            if state is None:
                return
            entry = state.table.get((kind, key))
            if entry is None or entry[1] < version:
                state.table[(kind, key)] = (holder, version)


# -- functions the other processes run here through RPC ----------------------------------
def _names() -> NameService:
    return require_world().names


def _rpc_arrive(
    group: str, count: int, member: str, members: Tuple[str, ...], timeout: float = -1
) -> Future:
    return _names().arrive(group, count, member, members, timeout)


def _rpc_decide(group: str, kind: str, op: str, key: Hashable, holder: str) -> Future:
    return _names().decide(group, kind, op, key, holder)


def _rpc_apply(group: str, kind: str, key: Hashable, holder: Optional[str], version: int) -> None:
    _names().apply(group, kind, key, holder, version)


def _rpc_readmit(group: str, member: str, members: Tuple[str, ...]) -> tuple:
    return _names().readmit(group, member, members)


def _rpc_rejoined(member: str) -> None:
    _names().record_rejoin(member)


def _rpc_departed(member: str, how: str, waits: bool) -> None:
    world = current_world()
    if world is not None:  # a notice that arrives while this process stops is moot
        world.names.record_departure(member, how, waits)


def _serving() -> NameService:
    """The name service, if this process still serves calls.

    Raises:
        RuntimeError: Naming this process, once it has left the world.
    """
    names = _names()
    if names.leaving is not None:
        raise MemberLeftError(
            f"member {names.name!r} left the world ({names.leaving}) and serves no more calls"
        )
    return names


def _rpc_lookup(group: str, kind: str, key: Hashable) -> Optional[str]:
    return _names().local_lookup(group, kind, key)


def _call_held(group: str, key: Hashable, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    func: Callable = _serving().held(group, SERVICE, key)
    return func(*args, **kwargs)


def serve(
    group: str, key: Hashable, args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> Tuple[bool, Any]:
    """Run a registered service of this process for a caller (reply as :func:`run_wrapped`)."""
    return run_wrapped(_call_held, (group, key, args, kwargs), {})


def serve_raw(group: str, key: Hashable, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """Run a registered service for a caller that wants an RRef to its bare result."""
    return _call_held(group, key, args, kwargs)


def paired_value(group: str, key: Hashable) -> DillPayload:
    """The value paired to ``key`` on this process, packed for the trip back."""
    return DillPayload(_serving().held(group, PAIRED, key))
