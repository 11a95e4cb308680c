"""Parameter servers: whole models with ordered versions, or gradients reduced in a tree."""

import enum
import random
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from ..distributed._context import current_world
from ..distributed.rpc_group import RpcGroup
from ..exception import RuntimeAssertionError, ValueAssertionError
from ..thread import Thread
from .ordered_server import OrderedServerBase, OrderedServerSimple, OrderedServerSimpleImpl

__all__ = [
    "PushPullModelServer",
    "PushPullModelServerImpl",
    "PushPullGradServer",
    "PushPullGradServerImpl",
    "ReduceType",
    "REDUCE_MASTER",
    "REDUCE_SLAVE",
]


class ReduceType(enum.IntEnum):
    """Level of a gradient push (Machin 0.3.4's names; equal to the ints below)."""

    #: Reduced gradients sent by a secondary reducer to the primary.
    REDUCE_PRIMARY = 0
    #: Gradients sent by a client to a secondary reducer.
    REDUCE_SECONDARY = 1


#: Level of a gradient push: reduced gradients sent by a secondary reducer to the primary.
REDUCE_MASTER = int(ReduceType.REDUCE_PRIMARY)
#: Level of a gradient push: gradients sent by a client to a secondary reducer.
REDUCE_SLAVE = int(ReduceType.REDUCE_SECONDARY)

Grads = Dict[str, torch.Tensor]


def _unwrap(model: nn.Module) -> nn.Module:
    """The module inside a (Distributed)DataParallel wrapper, or the model itself."""
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return model.module
    return model


def _cpu_state_dict(model: nn.Module, copy: bool = False) -> Dict[str, torch.Tensor]:
    """The parameters and buffers of ``model`` on the CPU (copies with ``copy``, else maybe shared)."""
    return {k: v.detach().to("cpu", copy=copy) for k, v in model.state_dict().items()}


class _InProcessOrderedServer(OrderedServerBase):
    """The ordered server of this very process, called directly instead of over RPC.

    A model server's accessor uses it in the process that serves the model (usually the
    learner that pushes), so a push there is a store under a lock, not a round trip to
    itself with the state pickled twice.
    """

    def __init__(self, impl: OrderedServerSimpleImpl):
        self._impl = impl

    def push(self, key: Any, value: Any, version: Any, prev_version: Any) -> bool:
        return self._impl._push_service(key, value, version, prev_version)

    def pull(self, key: Any, version: Any = None) -> Optional[Tuple[Any, Any]]:
        return self._impl._pull_service(key, version)


def _ordered_server_for(
    server_name: str, group: RpcGroup
) -> Tuple[OrderedServerSimpleImpl, OrderedServerSimple]:
    """The default ordered server of a parameter server, run in the current process."""
    name = server_name + "_o_server"
    return OrderedServerSimpleImpl(name, group), OrderedServerSimple(name, group)


class PushPullModelServer:
    """Accessor of a :class:`PushPullModelServerImpl`: push and pull whole models.

    The version of a model's parameters is kept in its ``pp_version`` attribute
    (0 when absent). A push succeeds only if that version is still the newest on
    the server, so pushes from models that fell behind are refused; a pull only
    loads parameters newer than the model's own.
    ``DataParallel`` / ``DistributedDataParallel`` wrappers are looked through.

    Args:
        model_name: Key of the model in the ordered server.
        o_server: Accessor of the ordered server holding the versions.

    Raises:
        ValueError: If ``o_server`` is missing.
    """

    def __init__(self, model_name: str, o_server: Optional[OrderedServerBase] = None):
        if o_server is None:
            raise ValueError("o_server must be an ordered server accessor, got None")
        self.model_name = model_name
        self.o_server = o_server
        self._in_process: Optional[_InProcessOrderedServer] = None  # set by the serving Impl

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_in_process"] = None  # the direct route exists only in the serving process
        return state

    @property
    def serves_here(self) -> bool:
        """Whether the model's ordered server lives in this process (a push is then a local store)."""
        return self.__dict__.get("_in_process") is not None

    def _route(self) -> OrderedServerBase:
        """The ordered server, called directly when it lives in this process."""
        return self.__dict__.get("_in_process") or self.o_server

    def push_state(self, state: Dict[str, torch.Tensor], version: int) -> bool:
        """Push ``state``, taken from a model at ``version``, as version ``version + 1``.

        The low-level part of :meth:`push`, for a caller that took the state itself (e.g.
        a copy, to push from another thread while the model trains on): nothing is
        pulled when the push is refused, and no ``pp_version`` is changed.

        Returns:
            Whether the push was accepted (``version`` was the newest on the server).
        """
        return self._route().push(self.model_name, state, version + 1, version)

    def pull_state(self) -> Optional[Tuple[Dict[str, torch.Tensor], int]]:
        """The newest ``(state, version)`` on the server, or ``None`` when nothing was pushed."""
        return self._route().pull(self.model_name)

    def push(self, model: nn.Module, pull_on_fail: bool = True) -> bool:
        """Push the parameters of ``model`` as the next version.

        Gradients are left alone.

        Args:
            model: The model.
            pull_on_fail: When the push is refused (``model`` is not at the newest
                version), load the newest parameters into ``model`` instead, whatever
                its ``pp_version``.

        Returns:
            Whether the push was accepted.

        Raises:
            RuntimeError: If the push was refused and the server has nothing to pull.
        """
        module = _unwrap(model)
        version = getattr(module, "pp_version", 0)
        # stored as it is in this process: a copy, so that training does not change it
        state = _cpu_state_dict(module, copy=self._route() is not self.o_server)
        accepted = self.push_state(state, version)
        if accepted:
            module.pp_version = version + 1
        elif pull_on_fail:
            result = self.pull_state()
            if result is None:
                raise RuntimeError(
                    f"the push of model {self.model_name!r} was refused, then the pull of its "
                    f"newest version found nothing (Pull failed, this should not happen)"
                )
            self._load(module, *result)
        return accepted

    def pull(self, model: nn.Module) -> bool:
        """Load the newest parameters into ``model`` if they are newer than its own.

        Parameters are loaded, and ``pp_version`` set, when ``model`` has no
        ``pp_version`` or an older one; a model at the newest version (or ahead of
        the server) keeps its parameters, local changes included. Gradients are
        left alone.

        Returns:
            ``False`` (leaving ``model`` unchanged) when nothing has been pushed yet,
            ``True`` otherwise.
        """
        result = self.pull_state()
        if result is None:
            return False
        state, version = result
        module = _unwrap(model)
        if not hasattr(module, "pp_version") or module.pp_version < version:
            self._load(module, state, version)
        return True

    @staticmethod
    def _load(module: nn.Module, state: Dict[str, torch.Tensor], version: int) -> None:
        module.load_state_dict(state)
        module.pp_version = version


class PushPullModelServerImpl:
    """A server of one model's parameters, as a strictly ordered chain of versions.

    Construct it only in the process that serves it, a member of ``group``. It
    pairs a :class:`PushPullModelServer` accessor under ``server_name``.

    Args:
        server_name: Name of the server, unique in the group.
        group: RPC group of the server (and of the default ordered server).
        model_name: Key of the model in the ordered server.
        o_server: Accessor of an existing ordered server to keep the versions in;
            by default an :class:`OrderedServerSimpleImpl` is created here.
    """

    def __init__(
        self,
        server_name: str,
        group: RpcGroup,
        model_name: str = "model",
        o_server: Optional[OrderedServerBase] = None,
    ):
        self.server_name = server_name
        self.group = group
        self.model_name = model_name
        self._o_impl = None
        if o_server is None:
            self._o_impl, o_server = _ordered_server_for(server_name, group)
        self.o_server = o_server
        accessor = PushPullModelServer(model_name, o_server)
        if self._o_impl is not None:
            accessor._in_process = _InProcessOrderedServer(self._o_impl)
        group.pair(server_name, accessor)


class PushPullGradServer:
    """Accessor of a :class:`PushPullGradServerImpl`: push gradients, pull parameters.

    Args:
        server_name: Name of the server.
        group: Its RPC group.
        model_name: Key of the model in the ordered server.
        secondary_reducers: Names of the processes that accept gradient pushes.
        o_server: Accessor of the ordered server the primary reducer publishes to.
    """

    def __init__(
        self,
        server_name: str,
        group: RpcGroup,
        model_name: str,
        secondary_reducers: List[str],
        o_server: OrderedServerBase,
    ):
        self.server_name = server_name
        self.group = group
        self.model_name = model_name
        self.secondary_reducers = list(secondary_reducers)
        self.o_server = o_server

    def push(self, model: nn.Module) -> None:
        """Send the gradients of ``model`` to a random secondary reducer, then :meth:`pull`.

        The reduction runs asynchronously, so the parameters pulled may not include
        these gradients yet. Gradients of ``model`` are cleared: zero-filled, as in
        Machin 0.3.4 (parameters without a gradient are skipped and keep ``None``).

        Args:
            model: The model whose gradients are pushed.
        """
        # Copies: the pull below zero-fills the gradients in place, and a push to this
        # very process may not copy them.
        grads = {
            name: p.grad.detach().to("cpu", copy=True)
            for name, p in _unwrap(model).named_parameters()
            if p.grad is not None
        }
        reducer = random.choice(self.secondary_reducers)
        self.group.registered_sync(
            f"{self.server_name}/{reducer}/_push_service", args=(grads, 1, REDUCE_SLAVE)
        )
        self.pull(model)

    def pull(self, model: nn.Module) -> bool:
        """Load the newest parameters into ``model`` and clear its gradients.

        Gradients are zero-filled, not set to ``None`` (Machin 0.3.4's
        ``zero_grad()``); parameters that have no gradient keep ``None``.

        Args:
            model: The model to update.

        Returns:
            ``False`` (parameters unchanged) when the server has published nothing yet.
        """
        model.zero_grad(set_to_none=False)
        result = self.o_server.pull(self.model_name)
        if result is not None:
            _unwrap(model).load_state_dict(result[0])
        return result is not None


class PushPullGradServerImpl:
    """A parameter server that applies gradients reduced in a tree.

    1. Clients push gradients (:meth:`PushPullGradServer.push`) to a random
       secondary reducer, which sums batches of them.
    2. Secondary reducers push their sums to the primary reducer, which sums
       again, sets the result (divided by the number of client pushes for
       ``"mean"``) as the gradients of its **managed model** and steps the optimizer
       (and the learning-rate scheduler, if any).
    3. The primary publishes the new parameters to the ordered server, where
       clients pull them.

    Construct it on the primary reducer and on every secondary reducer (all
    members of ``group``); call :meth:`manage_model` on the primary, then
    :meth:`start` everywhere. No order between pushes is guaranteed.
    ``DistributedDataParallel`` is not supported for the managed model.

    A secondary reducer reduces as soon as ``reduce_batch_size`` client pushes are
    queued (the primary: as soon as it has one sum per secondary, at most
    ``reduce_batch_size``), or once the oldest queued push has waited
    ``flush_interval`` seconds (so a few clients never stall the server). At most ``max_queue_size`` pushes wait per level; the
    oldest are dropped beyond that.

    Args:
        server_name: Name of the server, unique in the group.
        group: The RPC group.
        model_name: Key of the model in the ordered server.
        primary_reducer: Name of the primary reducer; default: the first group member.
        secondary_reducers: Names of the secondary reducers; default: every group member.
        o_server: Accessor of the ordered server to publish to; default: an
            :class:`OrderedServerSimpleImpl` run by the primary reducer.
        reduce_method: ``"sum"`` or ``"mean"``.
        reduce_device: Device on which gradients are summed.
        reduce_batch_size: Pushes reduced together.
        max_queue_size: Longest queue of waiting pushes.
        flush_interval: Longest wait of a queued push before a partial batch is reduced.

    Raises:
        ValueError: For an invalid argument (also an ``AssertionError``, which Machin
            0.3.4 raised).
        RuntimeError: If the current process is neither the primary nor a secondary
            reducer (also an ``AssertionError``).
    """

    REDUCE_MASTER = REDUCE_MASTER
    REDUCE_SLAVE = REDUCE_SLAVE

    def __init__(
        self,
        server_name: str,
        group: RpcGroup,
        model_name: str = "model",
        primary_reducer: Optional[str] = None,
        secondary_reducers: Optional[List[str]] = None,
        o_server: Optional[OrderedServerBase] = None,
        reduce_method: str = "sum",
        reduce_device: Union[str, torch.device] = "cpu",
        reduce_batch_size: int = 4,
        max_queue_size: int = 64,
        *,
        flush_interval: float = 0.1,
    ):
        members = group.get_group_members()
        primary = members[0] if primary_reducer is None else primary_reducer
        secondaries = list(members if secondary_reducers is None else secondary_reducers)
        outsiders = [m for m in [primary, *secondaries] if m not in members]
        if outsiders or not secondaries:
            raise ValueAssertionError(
                f"primary_reducer and secondary_reducers must be members of group {members}, "
                f"got {primary!r} and {secondaries!r}"
            )
        if reduce_method not in ("sum", "mean"):
            raise ValueAssertionError(
                f"reduce_method must be 'sum' or 'mean', got {reduce_method!r}"
            )
        for arg, value in (
            ("reduce_batch_size", reduce_batch_size),
            ("max_queue_size", max_queue_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueAssertionError(f"{arg} must be a positive int, got {value!r}")
        if flush_interval <= 0:
            raise ValueError(
                f"flush_interval must be a positive number of seconds, got {flush_interval!r}"
            )
        me = group.get_cur_name()
        if me != primary and me not in secondaries:
            raise RuntimeAssertionError(
                f"PushPullGradServerImpl {server_name!r} must be created on its reducers "
                f"(primary {primary!r}, secondaries {secondaries}), not on {me!r}"
            )
        self.server_name = server_name
        self.group = group
        self.model_name = model_name
        self.primary_reducer = primary
        self.secondary_reducers = secondaries
        self.reduce_method = reduce_method
        self.reduce_device = torch.device(reduce_device)
        self.reduce_batch_size = reduce_batch_size
        self.max_queue_size = max_queue_size
        self.flush_interval = flush_interval
        self.is_primary = me == primary
        self.model: Optional[nn.Module] = None
        self.optimizer: Any = None
        self.lr_scheduler: Any = None
        self._version = 0
        self._queues: Dict[int, Deque[Tuple[Grads, int, float]]] = {
            REDUCE_MASTER: deque(maxlen=max_queue_size),
            REDUCE_SLAVE: deque(maxlen=max_queue_size),
        }
        # Each secondary forwards one sum per batch: the primary waits for at most one per secondary.
        self._batch_sizes = (
            (REDUCE_MASTER, min(reduce_batch_size, len(secondaries))),
            (REDUCE_SLAVE, reduce_batch_size),
        )
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: Optional[Thread] = None
        self._o_impl = None
        if self.is_primary and o_server is None:
            self._o_impl, o_server = _ordered_server_for(server_name, group)
        self.o_server = o_server
        group.register(self._push_key(me), self._push_service)
        if self.is_primary:
            group.pair(
                server_name,
                PushPullGradServer(server_name, group, model_name, secondaries, o_server),
            )

    def _push_key(self, reducer: str) -> str:
        return f"{self.server_name}/{reducer}/_push_service"

    def manage_model(self, model: nn.Module, optimizer: Any, lr_scheduler: Any = None) -> None:
        """Give the primary reducer the model it updates, with its optimizer (and scheduler).

        Use a model object of its own, not the one your algorithm trains.

        Args:
            model: The model the server updates and serves.
            optimizer: An optimizer over ``model``'s parameters.
            lr_scheduler: An optional learning-rate scheduler of ``optimizer``, stepped by the server.

        Raises:
            RuntimeError: If this process is not the primary reducer, or the server
                has already started.
        """
        if not self.is_primary:
            raise RuntimeError(
                f"manage_model must be called on the primary reducer {self.primary_reducer!r} of "
                f"{self.server_name!r}, not on {self.group.get_cur_name()!r} (Current worker is "
                f"not the reduce master, and cannot manage the model)"
            )
        if self._thread is not None:
            raise RuntimeError(
                f"manage_model must be called before start() of {self.server_name!r}"
            )
        self.model, self.optimizer, self.lr_scheduler = model, optimizer, lr_scheduler

    def start(self) -> None:
        """Start reducing (the primary first publishes its model's initial parameters).

        Calling it again does nothing, as in Machin 0.3.4.

        Raises:
            RuntimeError: On the primary reducer when no model is managed.
        """
        if self._thread is not None:
            return
        if self.is_primary:
            if self.model is None:
                raise RuntimeError(
                    f"call manage_model() on the primary reducer before start() of {self.server_name!r}"
                )
            self._publish()
        self._thread = Thread(target=self._run, name=f"{self.server_name}-reducer", daemon=True)
        self._thread.start()
        world = current_world()
        if world is not None:
            world.add_stop_callback(self.stop)

    def stop(self) -> None:
        """Stop reducing (queued pushes are dropped). Calling it again does nothing."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def watch(self) -> None:
        """Raise in the caller what the reducer thread raised, if anything.

        Raises:
            ThreadException: What the reducer thread raised.
        """
        if self._thread is not None:
            self._thread.watch()

    # -- reduction -----------------------------------------------------------------------
    def _push_service(self, grads: Grads, count: int, level: int) -> None:
        if level not in self._queues:
            raise ValueError(
                f"Unknown push level: {level!r}; expected a ReduceType ({list(ReduceType)})"
            )
        with self._cond:
            self._queues[level].append((grads, count, time.monotonic()))
            self._cond.notify()

    def _next_batch(self) -> Tuple[Optional[List[Tuple[Grads, int, float]]], int]:
        """(Under the condition lock) wait for a batch to reduce; ``(None, _)`` when stopping."""
        while not self._stopping:
            now = time.monotonic()
            for level, size in self._batch_sizes:
                queue = self._queues[level]
                if queue and (len(queue) >= size or now - queue[0][2] >= self.flush_interval):
                    return [queue.popleft() for _ in range(min(len(queue), size))], level
            oldest = [q[0][2] for q in self._queues.values() if q]
            self._cond.wait(max(0.0, min(oldest) + self.flush_interval - now) if oldest else None)
        return None, REDUCE_SLAVE

    def _run(self) -> None:
        while True:
            with self._cond:
                batch, level = self._next_batch()
            if batch is None:
                return
            grads, count = self._reduce(batch)
            if level == REDUCE_MASTER:
                self._apply(grads, count)
            elif self.is_primary:
                self._push_service(grads, count, REDUCE_MASTER)
            else:
                cpu = {name: g.to("cpu") for name, g in grads.items()}
                self.group.registered_sync(
                    self._push_key(self.primary_reducer), args=(cpu, count, REDUCE_MASTER)
                )

    def _reduce(self, batch: List[Tuple[Grads, int, float]]) -> Tuple[Grads, int]:
        total: Grads = {}
        count = 0
        for grads, n, _ in batch:
            count += n
            for name, grad in grads.items():
                grad = grad.to(self.reduce_device)
                total[name] = grad if name not in total else total[name].add_(grad)
        return total, count

    def _apply(self, grads: Grads, count: int) -> None:
        for name, param in self.model.named_parameters():
            grad = grads.get(name)
            if grad is not None and self.reduce_method == "mean":
                grad = grad / count
            param.grad = None if grad is None else grad.to(param.device, param.dtype)
        self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self._publish()

    def _publish(self) -> None:
        self.o_server.push(
            self.model_name, _cpu_state_dict(self.model), self._version + 1, self._version
        )
        self._version += 1
