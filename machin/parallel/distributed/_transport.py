"""How calls, values and failures cross processes in :mod:`machin.parallel.distributed`.

* Callables travel as dill payloads (``recurse=True``), so lambdas and local
  functions work; everything else uses PyTorch's own RPC serialization, which
  sends tensors without extra copies.
* A function run on behalf of a caller returns ``(True, result)`` or
  ``(False, exception)``; the caller re-raises the exception with the remote
  traceback attached (see :mod:`machin.parallel.exception`). The raised object is
  also an :class:`RpcException`, the type Machin 0.3.4 raised for every failure of
  a remote function. Any exception the RPC call itself raises is then a transport
  failure (a member that died, left or did not answer in time) and is reported as a
  :class:`RuntimeError` naming the member.
* The one warning PyTorch prints while starting RPC over gloo is filtered here.
"""

import contextlib
import functools
import threading
import traceback
import types
import warnings
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import torch
from torch.futures import Future

from ..exception import ExceptionWithTraceback
from ..pickle import dumps, loads
from ._context import current_world

__all__ = [
    "RpcException",
    "as_rpc_exception",
    "DillPayload",
    "pack_args",
    "pack_kwargs",
    "run_wrapped",
    "unwrap",
    "CallFuture",
    "transport_error",
    "wait_local",
    "quiet_rpc_startup",
]

_CALLABLE_TYPES = (types.FunctionType, functools.partial)


class RpcException(Exception):
    """A failure of a function that ran in another process on behalf of the caller.

    Machin 0.3.4 raised this type, with the remote traceback as its message, for
    whatever a service or an RPC-called function raised. machin raises the original
    exception instead (with the remote traceback as its ``__cause__``), but as an
    instance of a class deriving from both the original type and this one, so
    ``except RpcException`` and ``except ValueError`` both catch a remote
    ``ValueError``.

    Args:
        msg: The message, or an exception whose formatted traceback becomes the message.
    """

    def __init__(self, msg: Any):
        if isinstance(msg, BaseException):
            msg = "".join(traceback.format_exception(type(msg), msg, msg.__traceback__))
        super().__init__(msg)


_RPC_VARIANTS: Dict[type, Optional[type]] = {}
_VARIANTS_LOCK = threading.Lock()


def _reduce_as_original(self: BaseException) -> Any:
    # Pickle the exception as an instance of its original class: the variant class is
    # made at run time and cannot be found by name.
    original = type(self).__bases__[0]
    reduced = original.__reduce__(self)
    if isinstance(reduced, tuple) and reduced and reduced[0] is type(self):
        reduced = (original,) + reduced[1:]
    return reduced


def _rpc_variant(cls: type) -> Optional[type]:
    """The class deriving from ``cls`` and :class:`RpcException` (``None`` if impossible)."""
    with _VARIANTS_LOCK:
        if cls not in _RPC_VARIANTS:
            try:
                _RPC_VARIANTS[cls] = type(
                    cls.__name__,
                    (cls, RpcException),
                    {
                        "__module__": cls.__module__,
                        "__qualname__": cls.__qualname__,
                        "__slots__": (),
                        "__reduce__": _reduce_as_original,
                        "__doc__": cls.__doc__,
                    },
                )
            except TypeError:  # a final class, a metaclass or layout conflict
                _RPC_VARIANTS[cls] = None
        return _RPC_VARIANTS[cls]


def as_rpc_exception(error: BaseException) -> BaseException:
    """Make ``error`` an :class:`RpcException` as well, keeping its type, message and cause.

    The result is an instance of a class deriving from ``type(error)`` and
    :class:`RpcException`, named and printed like ``type(error)``: ``error`` itself
    with its class changed, or, for built-in exception types (whose class cannot be
    changed), a copy with the same arguments, attributes, cause and traceback.
    Exceptions that already are ``RpcException`` s, that are not
    :class:`Exception` s, or whose class cannot be extended come back unchanged.

    Args:
        error: An exception rebuilt from another process.

    Returns:
        The exception to raise.
    """
    if isinstance(error, RpcException) or not isinstance(error, Exception):
        return error
    variant = _rpc_variant(type(error))
    if variant is None:
        return error
    try:
        error.__class__ = variant
        return error
    except TypeError:  # instances of built-in types
        pass
    try:
        twin = variant.__new__(variant, *error.args)
        twin.__init__(*error.args)
    except Exception:
        return error
    twin.__dict__.update(error.__dict__)
    twin.__cause__ = error.__cause__
    twin.__context__ = error.__context__
    twin.__suppress_context__ = error.__suppress_context__
    return twin.with_traceback(error.__traceback__)


class DillPayload:
    """Carries an object through a torch RPC message as a dill payload.

    Unpickling yields the wrapped object itself (not the wrapper), so a wrapped
    function arrives on the other side as a plain function. The wrapper is also
    callable, which lets it stand for the function of an RPC call.

    Args:
        obj: The object to carry (typically a lambda or a local function).
    """

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __reduce__(self) -> Tuple[Callable, Tuple[bytes]]:
        return loads, (dumps(self.obj, recurse=True, copy_tensor=True),)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.obj(*args, **kwargs)


def _pack(value: Any) -> Any:
    return DillPayload(value) if isinstance(value, _CALLABLE_TYPES) else value


def pack_args(args: Any) -> Tuple[Any, ...]:
    """Wrap the plain functions among ``args`` (top level only) in :class:`DillPayload`.

    Raises:
        TypeError: If ``args`` is not a tuple or a list.
    """
    if not isinstance(args, (tuple, list)):
        raise TypeError(
            f"args must be a tuple or a list, got {args!r} of type {type(args).__name__}"
        )
    return tuple(_pack(a) for a in args)


def pack_kwargs(kwargs: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Like :func:`pack_args` for keyword arguments; ``None`` gives ``{}``.

    Raises:
        TypeError: If ``kwargs`` is neither ``None`` nor a dict.
    """
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise TypeError(
            f"kwargs must be a dict or None, got {kwargs!r} of type {type(kwargs).__name__}"
        )
    return {k: _pack(v) for k, v in kwargs.items()}


def run_wrapped(func: Callable, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[bool, Any]:
    """Run ``func(*args, **kwargs)`` and return ``(True, result)`` or ``(False, packed exception)``."""
    try:
        return True, func(*args, **kwargs)
    except Exception as error:
        return False, ExceptionWithTraceback(error)


def unwrap(reply: Tuple[bool, Any]) -> Any:
    """Return the result of a :func:`run_wrapped` reply, or raise its exception.

    The exception is raised as an :class:`RpcException` too (see :func:`as_rpc_exception`).
    """
    ok, value = reply
    if ok:
        return value
    if isinstance(value, ExceptionWithTraceback):  # a reply that never crossed a process
        value = loads(dumps(value))
    raise as_rpc_exception(value)


class MemberLostError(RuntimeError):
    """A call failed because its member left the world, died or did not answer in time.

    The type of every transport failure, so that code which can go on without a
    member (a distributed buffer sampling the others, say) tells such a failure
    apart from an error that a remote function raised.
    """


class MemberLeftError(MemberLostError):
    """A call failed because its member left the world (and said so before it went)."""


def transport_error(what: str, member: str, error: BaseException) -> MemberLostError:
    """The error raised when an RPC to ``member`` failed in the transport layer.

    When ``member`` told this process that it left the world, or the transport knows
    that it died, the error says so.
    """
    world = current_world()
    how = None if world is None else world.names.departure(member)
    if how is not None:
        return MemberLeftError(
            f"{what} failed: member {member!r} left the world ({how}). Cause: {error}"
        )
    reason = None if world is None else world.transport.failure_reason(error)
    if reason is not None:
        return MemberLostError(f"{what} failed: member {member!r} {reason}. Cause: {error}")
    return MemberLostError(
        f"{what} failed: member {member!r} could not be reached or did not answer in time "
        f"(it may have died or left). Cause: {error}"
    )


class CallFuture:
    """The result of an asynchronous call (``registered_async``, ``rpc_async``).

    ``wait()`` blocks until the call completes, then returns its result or raises
    the exception the remote function raised (with the remote traceback attached
    as ``__cause__``). A transport failure raises :class:`RuntimeError`.

    Args:
        future: The torch future of a call whose function replied through
            :func:`run_wrapped`.
        what: Description of the call, for error messages.
        member: Name of the member that runs the call.
    """

    __slots__ = ("_future", "_what", "_member")

    def __init__(self, future: Future, what: str, member: str):
        self._future = future
        self._what = what
        self._member = member

    def done(self) -> bool:
        """Whether the call has completed (successfully or not)."""
        return self._future.done()

    def wait(self) -> Any:
        """Block until completion; return the result or raise the failure."""
        try:
            reply = self._future.wait()
        except Exception as error:
            raise transport_error(self._what, self._member, error) from error
        return unwrap(reply)


def wait_local(future: Future, timeout: float, what: str) -> Any:
    """Wait for a future completed in this process, at most ``timeout`` seconds (0: forever).

    Raises:
        RuntimeError: When the timeout passes first.
    """
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    if not done.wait(timeout if timeout > 0 else None):
        raise RuntimeError(f"{what} did not complete within {timeout} seconds")
    return future.wait()


def done_future(value: Any) -> Future:
    """A torch future already completed with ``value``."""
    future: Future = torch.futures.Future()
    future.set_result(value)
    return future


@contextlib.contextmanager
def quiet_rpc_startup() -> Iterator[None]:
    """Silence the deprecation warning PyTorch emits when RPC starts over gloo.

    TensorPipe's start-up passes a gloo backend where torch now expects a
    process group and warns about its own internal use; users cannot act on it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"You are using a Backend .* as a ProcessGroup", category=UserWarning
        )
        yield
