"""The interface every transport of :mod:`machin.parallel.distributed` offers.

A transport moves calls between the members of one world. It knows the name and
rank of the current member, joins and leaves the world, runs a function on a
member (giving back a future, or a reference to a result kept there) and wraps a
local value as a reference. Everything above it (the name service, RPC groups,
servers, distributed buffers) talks only to this interface.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from torch.futures import Future

__all__ = ["Reference", "LocalReference", "Transport"]


class Reference:
    """A handle to a value that may live in another member (an RRef-like object).

    ``to_here()`` returns a copy of the value (the value itself when it lives in
    the current member).
    """

    def to_here(self, timeout: float = 0) -> Any:
        """The referenced value; ``timeout`` in seconds (0: the transport's default)."""
        raise NotImplementedError

    def is_owner(self) -> bool:
        """Whether the value lives in the current member."""
        raise NotImplementedError


class LocalReference(Reference):
    """A reference to a value of the current member.

    Args:
        value: The value.
    """

    __slots__ = ("_value",)

    def __init__(self, value: Any):
        self._value = value

    def to_here(self, timeout: float = 0) -> Any:
        """The value itself (``timeout`` is not needed here; see :meth:`Reference.to_here`)."""
        return self._value

    def local_value(self) -> Any:
        """The value itself (as :meth:`torch.distributed.rpc.RRef.local_value`)."""
        return self._value

    def is_owner(self) -> bool:
        """Always ``True``."""
        return True


class Transport:
    """How the members of one world reach each other.

    A transport is made for one member (``name``, ``rank``) of a world of
    ``world_size`` members. :meth:`start` joins the world; afterwards the other
    methods reach any member by its name. Functions given to :meth:`call` and
    :meth:`remote` are module-level functions or picklable callables (machin wraps
    lambdas and local functions in dill payloads before they get here).

    Args:
        name: Name of the current member.
        rank: Rank of the current member in ``[0, world_size)``.
        world_size: Number of members.
        timeout: Default timeout of calls and of the start, in seconds.
    """

    #: Name of the transport, as given to ``World(transport=...)``.
    kind = ""
    #: Whether this member rejoins a running world (its process was restarted after
    #: a crash): it then has no default process group, and its RPC groups readmit it.
    rejoined = False

    def __init__(self, name: str, rank: int, world_size: int, timeout: float):
        self.name = name
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout

    def start(self) -> List[str]:
        """Join the world (with its default process group); return the members' names by rank."""
        raise NotImplementedError

    def shutdown(self, graceful: bool, timeout: float) -> None:
        """Leave the world (the default process group is left to the caller).

        With ``graceful=True`` wait (at most ``timeout`` seconds) until every member
        has called ``shutdown``. Whatever happens, the local side is shut down when it
        returns or raises.
        """
        raise NotImplementedError

    def call(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
        returns_future: bool = False,
    ) -> Future:
        """Run ``func(*args, **kwargs)`` on member ``to`` without waiting.

        Args:
            to: Name of the member.
            func: The function.
            args: Positional arguments.
            kwargs: Keyword arguments.
            timeout: Seconds; negative: the default, 0: no limit.
            returns_future: ``func`` returns a :class:`torch.futures.Future` and the
                call completes with that future's value (the member does not hold a
                thread while it waits).

        Returns:
            A future with ``wait()`` and ``done()``; ``wait()`` raises when the call
            failed in the transport (member gone, timeout) or ``func`` raised.
        """
        raise NotImplementedError

    def call_sync(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
        returns_future: bool = False,
    ) -> Any:
        """Like :meth:`call`, waiting for the result.

        Args:
            to: Name of the member; ``func``, ``args``, ``kwargs``, ``timeout`` and
                ``returns_future`` as for :meth:`call`.
        """
        return self.call(to, func, args, kwargs, timeout, returns_future).wait()

    def remote(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
    ) -> Reference:
        """Run ``func`` on member ``to`` and return a reference to its result.

        A failure of ``func`` surfaces when the reference is used (``to_here()``).
        ``args``, ``kwargs`` and ``timeout`` are as for :meth:`call`.
        """
        raise NotImplementedError

    def local_ref(self, value: Any) -> Reference:
        """A reference to ``value``, a value of the current member."""
        return LocalReference(value)

    def failure_reason(self, error: BaseException) -> Optional[str]:
        """What a failed call's ``error`` says about its member (e.g. that it died), or ``None``."""
        return None

    def member_name(self, target: Any) -> Optional[str]:
        """The member name the transport-specific handle ``target`` stands for, or ``None``."""
        return None

    def _timeout(self, timeout: float) -> float:
        """Seconds of a call: the default for a negative ``timeout``, 0 for no limit."""
        return self.timeout if timeout is None or timeout < 0 else float(timeout)
