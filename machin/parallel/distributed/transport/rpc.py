"""The ``rpc`` transport: :mod:`torch.distributed.rpc` (TensorPipe) plus a gloo/nccl process group.

This is the only module of machin that imports :mod:`torch.distributed.rpc`. The
world joins in one step: the default ``torch.distributed`` process group and the
TensorPipe RPC agent rendezvous at the same ``init_method``, then the members'
names are gathered over the process group.
"""

from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
from torch.futures import Future

from .._transport import quiet_rpc_startup
from .base import Transport

__all__ = ["RpcTransport", "CPU_CHANNELS", "TENSORPIPE_TRANSPORTS", "rpc_running"]

#: TensorPipe channels the RPC agent may use. RPC moves CPU tensors only, and leaving
#: out the CUDA channels keeps TensorPipe from initializing CUDA, which fails in a
#: process forked from one that had already initialized it.
CPU_CHANNELS = ["cma", "mpt_uv", "basic"]
#: TensorPipe transports. The shared-memory transport ("shm") busy-polls: every idle
#: process kept about two thirds of a core busy, which starved the work itself on
#: small machines. The libuv (TCP) transport waits without spinning.
TENSORPIPE_TRANSPORTS = ["uv"]


def rpc_running() -> bool:
    """Whether this process has a running RPC agent."""
    try:
        rpc.get_worker_info()
    except RuntimeError:
        return False
    return True


def default_backend() -> str:
    """The process-group backend: gloo, plus nccl for CUDA tensors when CUDA is available."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


@rpc.functions.async_execution
def _run_returning_future(func: Callable, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Future:
    """Run a function that returns a future; the RPC replies once that future completes."""
    return func(*args, **kwargs)


class RpcTransport(Transport):
    """Members reached through :mod:`torch.distributed.rpc`.

    Args:
        name: Name of the current member.
        rank: Its rank.
        world_size: Number of members.
        timeout: Default timeout of calls and of the start, in seconds.
        init_method: Rendezvous URL of the RPC agent and the process group.
        rpc_threads: TensorPipe threads serving incoming calls.
        backend: Process-group backend (default :func:`default_backend`).
        collective_timeout: Timeout of collective operations, in seconds (``None``:
            torch's default).
    """

    kind = "rpc"

    def __init__(
        self,
        name: str,
        rank: int,
        world_size: int,
        timeout: float,
        *,
        init_method: str,
        rpc_threads: int = 16,
        backend: Optional[str] = None,
        collective_timeout: Optional[float] = None,
    ):
        super().__init__(name, rank, world_size, timeout)
        self.init_method = init_method
        self.rpc_threads = rpc_threads
        self.backend = backend
        self.collective_timeout = collective_timeout

    def start(self) -> List[str]:
        """Start the process group and the RPC agent; return the members' names by rank."""
        pg_kwargs = (
            {}
            if self.collective_timeout is None
            else {"timeout": timedelta(seconds=self.collective_timeout)}
        )
        options = rpc.TensorPipeRpcBackendOptions(
            init_method=self.init_method,
            rpc_timeout=self.timeout,
            num_worker_threads=self.rpc_threads,
            _channels=CPU_CHANNELS,
            _transports=TENSORPIPE_TRANSPORTS,
        )
        try:
            with quiet_rpc_startup():
                dist.init_process_group(
                    self.backend or default_backend(),
                    init_method=self.init_method,
                    rank=self.rank,
                    world_size=self.world_size,
                    **pg_kwargs,
                )
                rpc.init_rpc(
                    self.name,
                    rank=self.rank,
                    world_size=self.world_size,
                    rpc_backend_options=options,
                )
            members: List[Optional[str]] = [None] * self.world_size
            dist.all_gather_object(members, self.name)
        except BaseException:
            if rpc_running():
                rpc.shutdown(graceful=False)
            if dist.is_initialized():
                dist.destroy_process_group()
            raise
        return [str(m) for m in members]

    def shutdown(self, graceful: bool, timeout: float) -> None:
        """Shut the RPC agent down (gracefully: once every member has called this; see :meth:`Transport.shutdown`)."""
        try:
            if graceful:
                rpc.shutdown(graceful=True, timeout=timeout)
            else:
                rpc.shutdown(graceful=False)
        except BaseException:
            if rpc_running():
                rpc.shutdown(graceful=False)
            raise

    def call(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
        returns_future: bool = False,
    ) -> Future:
        """Run ``func`` on ``to`` with :func:`torch.distributed.rpc.rpc_async` (see :meth:`Transport.call`)."""
        func, args, kwargs = self._target(func, args, kwargs, returns_future)
        return rpc.rpc_async(to, func, args=args, kwargs=kwargs, timeout=self._timeout(timeout))

    def call_sync(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
        returns_future: bool = False,
    ) -> Any:
        """Run ``func`` on ``to`` with :func:`torch.distributed.rpc.rpc_sync` (see :meth:`Transport.call`)."""
        func, args, kwargs = self._target(func, args, kwargs, returns_future)
        return rpc.rpc_sync(to, func, args=args, kwargs=kwargs, timeout=self._timeout(timeout))

    def remote(
        self,
        to: str,
        func: Callable,
        args: Tuple[Any, ...] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        timeout: float = -1,
    ) -> rpc.RRef:
        """Run ``func`` on ``to`` with :func:`torch.distributed.rpc.remote`; return its RRef (see :meth:`Transport.remote`)."""
        return rpc.remote(to, func, args=args, kwargs=kwargs, timeout=self._timeout(timeout))

    def local_ref(self, value: Any) -> rpc.RRef:
        """An RRef to ``value``, owned by this member (as Machin 0.3.4 returned)."""
        return rpc.RRef(value)

    def member_name(self, target: Any) -> Optional[str]:
        """The name of ``target`` when it is a :class:`torch.distributed.rpc.WorkerInfo`, else ``None``."""
        return target.name if isinstance(target, rpc.WorkerInfo) else None

    @staticmethod
    def _target(
        func: Callable,
        args: Tuple[Any, ...],
        kwargs: Optional[Dict[str, Any]],
        returns_future: bool,
    ) -> Tuple[Callable, Tuple[Any, ...], Dict[str, Any]]:
        kwargs = {} if kwargs is None else kwargs
        if returns_future:
            return _run_returning_future, (func, args, kwargs), {}
        return func, args, kwargs
