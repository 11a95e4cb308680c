"""RPC groups: named sets of processes with a shared table of services and values."""

from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple, Union

from ..exception import TypeRuntimeError, ValueRuntimeError
from ._context import current_world, require_world
from ._names import PAIRED, SERVICE, VERBS, NameService, paired_value, serve, serve_raw
from ._transport import (
    CallFuture,
    DillPayload,
    pack_args,
    pack_kwargs,
    run_wrapped,
    transport_error,
    unwrap,
)
from .transport import Reference, Transport

__all__ = ["RpcGroup"]

#: A member: its name, its world rank, or a transport's handle of it (a torch ``WorkerInfo``).
Target = Union[str, int, Any]


class RpcGroup:
    """A named group of processes of the world that share services and values.

    A group is a namespace, like a small DNS: a member **registers** a function
    under a key (``register``) or **pairs** a value with a key (``pair``), and any
    member then reaches it by key (``registered_sync`` / ``get_paired`` ...)
    without knowing which process holds it. Keys are unique within a group. The
    group also offers plain RPC to its members (``rpc_sync`` ...), with lambdas and
    local functions allowed, and a barrier.

    Create groups with :meth:`World.create_rpc_group`, which every member must call.
    An ``RpcGroup`` object is a light handle: it can be passed to other processes
    (inside a paired value, as an argument...), where it refers to the same group.

    Errors raised by a remote function are raised again in the caller, with the
    remote traceback attached as ``__cause__``; they are also instances of
    :class:`~machin.parallel.distributed.world.RpcException`, the type Machin 0.3.4
    raised for them. When the member that should answer died, left or does not answer
    within the timeout, the call raises :class:`RuntimeError` naming that member.

    No consistency, availability or partition tolerance is promised beyond that:
    this is a convenience layer over the world's transport (torch RPC or Ray).

    Args:
        group_name: Name of the group, unique in the world.
        group_members: Names of the member processes; the first one keeps the
            group's table and runs its barriers.
        first_create: ``True`` creates the group in this process (a blocking call
            that waits for every member); ``False`` only builds a handle to a group
            created elsewhere.
    """

    def __init__(self, group_name: str, group_members: List[str], first_create: bool = True):
        self.group_name = group_name
        self.group_members = list(group_members)
        self.destroyed = False
        if first_create:
            world = require_world()
            world.names.create_group(group_name, self.group_members, world.rpc_timeout)

    def __reduce__(self) -> Tuple[type, Tuple[str, List[str], bool]]:
        return RpcGroup, (self.group_name, self.group_members, False)

    def __repr__(self) -> str:
        return f"RpcGroup({self.group_name!r}, {self.group_members!r})"

    # -- membership ------------------------------------------------------------------
    @staticmethod
    def get_cur_name() -> str:
        """Name of the current process in the world."""
        return require_world().name

    def get_group_name(self) -> str:
        """Name of this group."""
        return self.group_name

    def get_group_members(self) -> List[str]:
        """Names of the members, in the order given at creation."""
        return list(self.group_members)

    def size(self) -> int:
        """Number of members."""
        return len(self.group_members)

    def is_member(self, target: Optional[str] = None) -> bool:
        """Whether ``target`` (default: the current process) is a member of this group."""
        if target is None:
            target = require_world().name
        return target in self.group_members

    def _names(self) -> NameService:
        world = require_world()
        if self.destroyed:
            raise RuntimeError(f"RPC group {self.group_name!r} has been destroyed in this process")
        return world.names

    def _own_names(self, action: str) -> NameService:
        """The name service, checking that this process is a live member (to hold keys)."""
        names = self._names()
        if not names.has_group(self.group_name):
            raise RuntimeError(
                f"cannot {action}: process {names.name!r} is not a member of RPC group "
                f"{self.group_name!r} (members {self.group_members}), or has destroyed it; "
                f"the current process is not a member of the group"
            )
        return names

    def _holder(self, kind: str, key: Hashable) -> str:
        holder = self._names().lookup(self.group_name, self.group_members, kind, key)
        if holder is None:
            raise KeyError(
                f"{kind} {key!r} is not {VERBS[kind]} in RPC group {self.group_name!r} "
                f"(not found in the group's table)"
            )
        return holder

    @staticmethod
    def _transport() -> Transport:
        return require_world().transport

    def _timeout(self, timeout: float) -> float:
        return require_world().rpc_timeout if timeout is None or timeout < 0 else timeout

    # -- paired values ---------------------------------------------------------------
    def pair(self, key: Hashable, value: Any) -> None:
        """Share ``value`` under ``key``; the value stays in this process.

        Other members reach it with :meth:`get_paired`. Returns once every member
        can see the key.

        Raises:
            KeyError: If ``key`` is already paired in this group.
            RuntimeError: If this process is not a member.
        """
        names = self._own_names("pair a value")
        # The first reference to an instance of a class makes torch RPC inspect the class,
        # iterating over its __dict__; the first pickling of an instance (a member fetching
        # the value) adds __slotnames__ to that __dict__. Both at once, in two threads, fail
        # with "dictionary changed size during iteration". Making one reference now, before
        # any member can see the value, does the inspection (torch caches it per class)
        # while no other thread can be pickling it.
        names.transport.local_ref(value)
        names.hold(self.group_name, PAIRED, key, value)

    def unpair(self, key: Hashable) -> None:
        """Withdraw a value this process paired.

        Raises:
            KeyError: If ``key`` is not paired in this group, or another member paired
                it (then a :class:`~machin.parallel.exception.KeyRuntimeError`, also a
                ``RuntimeError``).
            RuntimeError: If this process is not a member.
        """
        self._own_names("unpair a value").release(self.group_name, PAIRED, key)

    def is_paired(self, key: Hashable) -> bool:
        """Whether a value is paired with ``key`` in this group."""
        return self._names().lookup(self.group_name, self.group_members, PAIRED, key) is not None

    def get_paired(self, key: Hashable) -> Reference:
        """An RRef (a reference) to the value paired with ``key``.

        ``to_here()`` fetches a copy of the value (the value itself in the process
        that paired it).

        Raises:
            KeyError: If no value is paired with ``key``.
        """
        holder = self._holder(PAIRED, key)
        names = self._names()
        if holder == names.name:
            return names.transport.local_ref(names.held(self.group_name, PAIRED, key))
        return names.transport.remote(holder, paired_value, args=(self.group_name, key))

    # -- services ----------------------------------------------------------------------
    def register(self, key: Hashable, service: Callable) -> None:
        """Offer the function ``service`` under ``key``; it runs in this process when called.

        Returns once every member can see the key.

        Args:
            key: Name of the service, unique in the group.
            service: The function (or other callable) to run.

        Raises:
            TypeError: If ``service`` is not callable.
            KeyError: If ``key`` is already registered in this group.
            RuntimeError: If this process is not a member.
        """
        if not callable(service):
            raise TypeError(
                f"service must be callable, got {service!r} of type {type(service).__name__}"
            )
        self._own_names("register a service").hold(self.group_name, SERVICE, key, service)

    def deregister(self, key: Hashable) -> None:
        """Withdraw a service this process registered.

        Raises:
            KeyError: If ``key`` is not registered in this group, or another member
                registered it (then a :class:`~machin.parallel.exception.KeyRuntimeError`,
                also a ``RuntimeError``).
            RuntimeError: If this process is not a member.
        """
        self._own_names("deregister a service").release(self.group_name, SERVICE, key)

    def is_registered(self, key: Hashable) -> bool:
        """Whether a service is registered under ``key`` in this group."""
        return self._names().lookup(self.group_name, self.group_members, SERVICE, key) is not None

    def registered_sync(
        self,
        key: Hashable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        *,
        timeout: float = -1,
    ) -> Any:
        """Call the service registered under ``key`` and wait for its result.

        Args:
            key: Key of the service.
            args: Positional arguments of the service.
            kwargs: Keyword arguments of the service.
            timeout: Seconds to wait; negative uses the world's ``rpc_timeout``, 0 waits forever.

        Returns:
            What the service returned.

        Raises:
            KeyError: If no service is registered under ``key``.
            RuntimeError: If the holder cannot be reached or does not answer in time.
            Exception: Whatever the service raised, with the remote traceback attached.
        """
        holder = self._holder(SERVICE, key)
        try:
            reply = self._transport().call_sync(
                holder,
                serve,
                args=self._service_args(key, args, kwargs),
                timeout=self._timeout(timeout),
            )
        except Exception as error:
            raise transport_error(self._what("service", key), holder, error) from error
        return unwrap(reply)

    def registered_async(
        self,
        key: Hashable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        *,
        timeout: float = -1,
    ) -> CallFuture:
        """Call the service registered under ``key`` without waiting.

        Args:
            key: Key of the service.
            args: Positional arguments of the service.
            kwargs: Keyword arguments of the service.
            timeout: Seconds to wait; negative uses the world's ``rpc_timeout``, 0 waits forever.

        Returns:
            A future whose ``wait()`` returns the service's result or raises its
            error (see :meth:`registered_sync`).

        Raises:
            KeyError: If no service is registered under ``key``.
        """
        holder = self._holder(SERVICE, key)
        future = self._transport().call(
            holder,
            serve,
            args=self._service_args(key, args, kwargs),
            timeout=self._timeout(timeout),
        )
        return CallFuture(future, self._what("service", key), holder)

    def registered_remote(
        self,
        key: Hashable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        *,
        timeout: float = -1,
    ) -> Reference:
        """Call the service registered under ``key``, keeping the result on its holder.

        Args:
            key: Key of the service.
            args: Positional arguments of the service.
            kwargs: Keyword arguments of the service.
            timeout: Seconds to wait; negative uses the world's ``rpc_timeout``, 0 waits forever.

        Returns:
            An RRef to the result (owned by the holder of the service).

        Raises:
            KeyError: If no service is registered under ``key``.
        """
        holder = self._holder(SERVICE, key)
        return self._transport().remote(
            holder,
            serve_raw,
            args=self._service_args(key, args, kwargs),
            timeout=self._timeout(timeout),
        )

    def _service_args(
        self, key: Hashable, args: Tuple[Any, ...], kwargs: Optional[Dict[str, Any]]
    ) -> tuple:
        return self.group_name, key, pack_args(args), pack_kwargs(kwargs)

    def _what(self, kind: str, target: Any) -> str:
        return f"calling {kind} {target!r} of RPC group {self.group_name!r}"

    # -- plain RPC to members --------------------------------------------------------
    def _member(self, to: Target) -> str:
        # ValueError/TypeError for machin, RuntimeError for Machin 0.3.4: both catch these.
        world = require_world()
        name = world.transport.member_name(to)
        if name is None and isinstance(to, int) and not isinstance(to, bool):
            members = world.get_members()
            if not 0 <= to < len(members):
                raise ValueRuntimeError(
                    f"to must be a rank in [0, {len(members) - 1}], got {to!r} "
                    f"(the RPC target is not a member of group {self.group_name!r})"
                )
            name = members[to]
        elif isinstance(to, str):
            name = to
        elif name is None:
            raise TypeRuntimeError(
                f"to must be a member name, a rank or a WorkerInfo, got {to!r} of type "
                f"{type(to).__name__} (the RPC target is not a member of group {self.group_name!r})"
            )
        if name not in self.group_members:
            raise ValueRuntimeError(
                f"to must be a member of RPC group {self.group_name!r} {self.group_members}, "
                f"got {name!r}: the RPC target is not a member of group {self.group_name!r}"
            )
        return name

    def rpc_sync(
        self,
        to: Target,
        func: Callable,
        timeout: float = -1,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        """Run ``func(*args, **kwargs)`` on member ``to`` and wait for the result.

        ``func`` may be a lambda or a local function: it travels as a dill payload.

        Args:
            to: Member name, world rank or ``WorkerInfo`` of the target.
            func: The callable.
            timeout: Seconds to wait; negative uses the world's ``rpc_timeout``, 0 waits forever.
            args: Positional arguments.
            kwargs: Keyword arguments.

        Returns:
            What ``func`` returned.

        Raises:
            ValueError: If ``to`` is not a member of this group (a
                :class:`~machin.parallel.exception.ValueRuntimeError`, also the
                ``RuntimeError`` of Machin 0.3.4).
            RuntimeError: If the member cannot be reached or does not answer in time.
            Exception: Whatever ``func`` raised, with the remote traceback attached.
        """
        name = self._member(to)
        try:
            reply = self._transport().call_sync(
                name,
                run_wrapped,
                args=self._call_args(func, args, kwargs),
                timeout=self._timeout(timeout),
            )
        except Exception as error:
            raise transport_error(self._what("function", func), name, error) from error
        return unwrap(reply)

    def rpc_async(
        self,
        to: Target,
        func: Callable,
        timeout: float = -1,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> CallFuture:
        """Run ``func`` on member ``to`` without waiting (arguments as :meth:`rpc_sync`).

        Args:
            to: Member name, world rank or ``WorkerInfo`` of the target.
            func: The callable (lambdas and local functions travel with dill).
            timeout: Seconds to wait; negative uses the world's ``rpc_timeout``, 0 waits forever.
            args: Positional arguments of ``func``.
            kwargs: Keyword arguments of ``func``.

        Returns:
            A future whose ``wait()`` returns the result or raises the failure.
        """
        name = self._member(to)
        future = self._transport().call(
            name,
            run_wrapped,
            args=self._call_args(func, args, kwargs),
            timeout=self._timeout(timeout),
        )
        return CallFuture(future, self._what("function", func), name)

    def remote(
        self,
        to: Target,
        func: Callable,
        timeout: float = -1,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Reference:
        """Run ``func`` on member ``to`` and return an RRef to the result it keeps there.

        Arguments as :meth:`rpc_sync`; errors surface when the RRef is used
        (``to_here()``), as with torch's ``rpc.remote``.

        Args:
            to: Member name, world rank or ``WorkerInfo`` of the target.
            func: The callable (lambdas and local functions travel with dill).
            timeout: Seconds to wait; negative uses the world's ``rpc_timeout``, 0 waits forever.
            args: Positional arguments of ``func``.
            kwargs: Keyword arguments of ``func``.
        """
        name = self._member(to)
        if not callable(func):
            raise TypeError(f"func must be callable, got {func!r} of type {type(func).__name__}")
        return self._transport().remote(
            name,
            DillPayload(func),
            args=pack_args(args),
            kwargs=pack_kwargs(kwargs),
            timeout=self._timeout(timeout),
        )

    @staticmethod
    def _call_args(
        func: Callable, args: Tuple[Any, ...], kwargs: Optional[Dict[str, Any]]
    ) -> tuple:
        if not callable(func):
            raise TypeError(f"func must be callable, got {func!r} of type {type(func).__name__}")
        return DillPayload(func), pack_args(args), pack_kwargs(kwargs)

    # -- group-wide operations -------------------------------------------------------
    def barrier(self, timeout: float = -1) -> None:
        """Wait until every member of the group has called ``barrier``.

        Args:
            timeout: Seconds to wait; negative uses the world's ``rpc_timeout``, 0 waits forever.

        Raises:
            RuntimeError: If this process is not a member, or not every member
                arrived in time (one may have died or left).
        """
        names = self._own_names("wait at the barrier")
        names.barrier(self.group_name, tuple(self.group_members), self._timeout(timeout))

    def destroy(self) -> None:
        """Leave the group in this process.

        Services and values this process holds in the group are withdrawn (other
        members then get :class:`KeyError` for them), and this handle can no longer
        be used here. Other members are not waited for. Calling it again does nothing.

        Raises:
            RuntimeError: If some entries could not be withdrawn (the group's first
                member is unreachable); the group is forgotten here anyway.
        """
        if self.destroyed:
            return
        world = current_world()
        self.destroyed = True
        if world is not None:
            world.names.destroy_group(self.group_name)
