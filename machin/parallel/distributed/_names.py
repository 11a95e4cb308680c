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
barrier). Barrier arrivals and table changes are handled by asynchronous RPC
functions, so a member waiting at a barrier holds no RPC thread of the manager.
"""

import threading
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Set, Tuple

import torch
import torch.distributed.rpc as rpc
from torch.futures import Future

from ..exception import KeyRuntimeError
from ._context import require_world
from ._transport import DillPayload, done_future, run_wrapped, transport_error, wait_local

SERVICE = "service"
PAIRED = "paired value"
VERBS = {SERVICE: "registered", PAIRED: "paired"}

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

    __slots__ = ("members", "table", "version", "barrier_count")

    def __init__(self, members: Sequence[str]):
        self.members = tuple(members)
        # (kind, key) -> (holder or None once removed, version of the change)
        self.table: Dict[Tuple[str, Hashable], Tuple[Optional[str], int]] = {}
        self.version = 0
        self.barrier_count = 0


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
    """

    def __init__(self, name: str, timeout: float):
        self.name = name
        self.timeout = timeout
        self._lock = threading.Lock()
        self._groups: Dict[str, _GroupState] = {}
        self._barriers: Dict[Tuple[str, int], _Barrier] = {}
        self._held: Dict[Tuple[str, str, Hashable], Any] = {}

    # -- groups ------------------------------------------------------------------------
    def has_group(self, group: str) -> bool:
        """Whether this process has created ``group`` (and not destroyed it)."""
        return group in self._groups

    def create_group(self, group: str, members: Sequence[str], timeout: float) -> None:
        """Create the local state of ``group`` and wait until every member has done so.

        Raises:
            RuntimeError: If this process already has a group of that name, or the
                members did not all arrive within ``timeout``.
            ValueError: If the members disagree on the member list.
        """
        with self._lock:
            if group in self._groups:
                raise RuntimeError(f"an RPC group named {group!r} already exists in this process")
            self._groups[group] = _GroupState(members)
        try:
            self._barrier(group, tuple(members), 0, timeout)
        except BaseException:
            with self._lock:
                self._groups.pop(group, None)
            raise

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
        # The manager fails a member's wait after ``timeout`` naming the members that did
        # not arrive; the member's own limit, a little longer, only catches a manager
        # that is gone (then the manager is named).
        wait = timeout + _BARRIER_MARGIN if timeout > 0 else timeout
        if manager == self.name:
            outcome = wait_local(self.arrive(group, count, self.name, members, timeout), wait, what)
        else:
            try:
                outcome = rpc.rpc_sync(
                    manager,
                    _rpc_arrive,
                    args=(group, count, self.name, members, timeout),
                    timeout=wait,
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
        for timer in barrier.timers:
            timer.cancel()
        for waiting in barrier.futures:
            waiting.set_result((None, ""))
        return future

    # -- table ---------------------------------------------------------------------------
    def hold(self, group: str, kind: str, key: Hashable, obj: Any) -> None:
        """Keep ``obj`` (a service function or a paired value) locally, then publish it.

        Raises:
            KeyError: If the key is already taken in the group.
        """
        local = (group, kind, key)
        with self._lock:
            if local in self._held:
                raise KeyError(
                    f"{kind} {key!r} is already {VERBS[kind]} by this process in group {group!r}"
                )
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
            return rpc.rpc_sync(manager, _rpc_lookup, args=(group, kind, key), timeout=self.timeout)
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
                outcome = rpc.rpc_sync(
                    manager,
                    _rpc_decide,
                    args=(group, kind, op, key, self.name),
                    timeout=self.timeout,
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
                        f"{kind} {key!r} is already {verb} by member {current!r} in group {group!r}",
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
            rpc.rpc_async(
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


@rpc.functions.async_execution
def _rpc_arrive(
    group: str, count: int, member: str, members: Tuple[str, ...], timeout: float = -1
) -> Future:
    return _names().arrive(group, count, member, members, timeout)


@rpc.functions.async_execution
def _rpc_decide(group: str, kind: str, op: str, key: Hashable, holder: str) -> Future:
    return _names().decide(group, kind, op, key, holder)


def _rpc_apply(group: str, kind: str, key: Hashable, holder: Optional[str], version: int) -> None:
    _names().apply(group, kind, key, holder, version)


def _rpc_lookup(group: str, kind: str, key: Hashable) -> Optional[str]:
    return _names().local_lookup(group, kind, key)


def _call_held(group: str, key: Hashable, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    func: Callable = _names().held(group, SERVICE, key)
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
    return DillPayload(_names().held(group, PAIRED, key))
