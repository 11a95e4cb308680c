"""One-call set-up of the parameter servers used by the distributed algorithms.

Every process of the running world must call a helper (with the same arguments),
after the :class:`~machin.parallel.distributed.World` has started. Each helper
creates an RPC group over ``members``, starts the servers in it and returns one
accessor per server on every process.

:func:`role_groups` does the same from a
:class:`~machin.parallel.distributed.roles.Roles`: the algorithm's group, the model
server where the roles place it and the learners' collective group; :func:`place_replay`
then keeps a distributed replay buffer's parts where the roles put the replay,
forwarding samplers' transitions (:class:`ForwardedReplay`) when it lives elsewhere.
"""

import inspect
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

import torch
from torch import nn

from ...parallel.distributed import CollectiveGroup, RpcGroup
from ...parallel.distributed._context import require_world
from ...parallel.distributed.roles import Roles, check_world, member_order, names_of
from ...parallel.server import (
    PushPullGradServer,
    PushPullGradServerImpl,
    PushPullModelServer,
    PushPullModelServerImpl,
)
from ..optimizers import build_optimizer

__all__ = [
    "grad_server_helper",
    "model_server_helper",
    "role_groups",
    "RoleGroups",
    "place_replay",
    "ForwardedReplay",
    "build_from_roles",
]


def _group(group_name: str, members: Union[str, Sequence[str]]) -> RpcGroup:
    """Create the helper's group (members) or a handle to it (other processes)."""
    world = require_world()
    if isinstance(members, str):
        if members != "all":
            raise ValueError(f"members must be 'all' or a list of process names, got {members!r}")
        members = world.get_members()
    members = list(members)
    if world.name in members:
        return world.create_rpc_group(group_name, members)
    return RpcGroup(group_name, members, first_create=False)


def _per_model(value: Any, count: int, name: str, default: Any) -> List[Any]:
    if value is None:
        return [default] * count
    if len(value) != count:
        raise ValueError(f"{name} must hold one entry per model creator ({count}), got {value!r}")
    return list(value)


def grad_server_helper(
    model_creators: List[Callable[[], nn.Module]],
    optimizer: Type[torch.optim.Optimizer] = torch.optim.Adam,
    learning_rate: Union[float, List[float]] = 1e-3,
    group_name: str = "grad_server",
    members: Union[str, List[str]] = "all",
    optimizer_kwargs: Optional[List[Dict[str, Any]]] = None,
    lr_scheduler: Optional[Callable[..., Any]] = None,
    lr_scheduler_args: Optional[List[Tuple[Any, ...]]] = None,
    lr_scheduler_kwargs: Optional[List[Dict[str, Any]]] = None,
) -> Tuple[PushPullGradServer, ...]:
    """Start one :class:`PushPullGradServerImpl` per model and return their accessors.

    Every member is a secondary reducer and the first member is the primary
    reducer, which builds each managed model with its creator and its optimizer
    ``optimizer(model.parameters(), lr=learning_rate[i], **optimizer_kwargs[i])``
    (and scheduler ``lr_scheduler(optimizer, *lr_scheduler_args[i],
    **lr_scheduler_kwargs[i])``). Servers are named ``"grad_server_<i>"``.

    The first three parameters are those of Machin 0.3.4, in its order, so a
    positional call ``grad_server_helper(creators, Adam, 1e-3)`` binds as it did;
    give the others by keyword.

    Args:
        model_creators: One function per model, returning a new model.
        optimizer: Optimizer class of the managed models.
        learning_rate: One learning rate for all models, or one per model.
        group_name: Name of the RPC group created for the servers.
        members: Names of the reducer processes, or ``"all"`` for the whole world.
        optimizer_kwargs: Extra optimizer arguments, one dict per model.
        lr_scheduler: Learning-rate scheduler class, or ``None``.
        lr_scheduler_args: Positional scheduler arguments, one tuple per model.
        lr_scheduler_kwargs: Keyword scheduler arguments, one dict per model.

    Returns:
        One accessor per model creator, in order.

    Raises:
        RuntimeError: If no world is running.
        ValueError: If a per-model list has the wrong length.
        TypeError: If ``optimizer`` is a string (a group name given by position).
    """
    if isinstance(optimizer, str):
        raise TypeError(
            f"optimizer must be an optimizer class, got the string {optimizer!r}: the second "
            f"positional parameter is optimizer (as in Machin 0.3.4); give group_name and "
            f"members by keyword"
        )
    count = len(model_creators)
    rates = (
        [learning_rate] * count
        if isinstance(learning_rate, (int, float))
        else _per_model(learning_rate, count, "learning_rate", None)
    )
    opt_kwargs = _per_model(optimizer_kwargs, count, "optimizer_kwargs", {})
    sched_args = _per_model(lr_scheduler_args, count, "lr_scheduler_args", ())
    sched_kwargs = _per_model(lr_scheduler_kwargs, count, "lr_scheduler_kwargs", {})
    world = require_world()
    group = _group(group_name, members)
    names = [f"grad_server_{i}" for i in range(count)]
    if group.is_member():
        primary = group.get_group_members()[0]
        for i, (name, creator) in enumerate(zip(names, model_creators)):
            server = PushPullGradServerImpl(name, group, primary_reducer=primary)
            if world.name == primary:
                model = creator()
                opt = build_optimizer(optimizer, model.parameters(), rates[i], **opt_kwargs[i])
                sched = (
                    None
                    if lr_scheduler is None
                    else lr_scheduler(opt, *sched_args[i], **sched_kwargs[i])
                )
                server.manage_model(model, opt, sched)
            server.start()
    world.barrier()
    return tuple(group.get_paired(name).to_here() for name in names)


def model_server_helper(
    model_num: int, group_name: str = "model_server", members: Union[str, List[str]] = "all"
) -> Tuple[PushPullModelServer, ...]:
    """Start ``model_num`` :class:`PushPullModelServerImpl` on the first member; return their accessors.

    Servers are named ``"model_server_<i>"``.

    Args:
        model_num: Number of models (one server each).
        group_name: Name of the RPC group created for the servers.
        members: Names of the member processes, or ``"all"`` for the whole world.

    Returns:
        One accessor per model.

    Raises:
        RuntimeError: If no world is running.
        ValueError: If ``model_num`` is not a positive int.
    """
    if isinstance(model_num, bool) or not isinstance(model_num, int) or model_num < 1:
        raise ValueError(f"model_num must be a positive int, got {model_num!r}")
    world = require_world()
    group = _group(group_name, members)
    names = [f"model_server_{i}" for i in range(model_num)]
    if world.name == group.get_group_members()[0]:
        for name in names:
            PushPullModelServerImpl(name, group)
    world.barrier()
    return tuple(group.get_paired(name).to_here() for name in names)


class RoleGroups(NamedTuple):
    """What :func:`role_groups` returns: ``group``, the RPC group over every process of the
    world (its first member, which keeps the group's table, is the coordinating learner);
    ``model_servers``, the model-server accessors (on every process); ``learner_group``, on
    learners the collective group of all learners when there are several (for
    ``DistributedDataParallel``), else ``None``.
    """

    group: RpcGroup
    model_servers: Tuple[PushPullModelServer, ...]
    learner_group: Optional[CollectiveGroup]


def role_groups(roles: Roles, group_name: str, model_num: int = 1) -> RoleGroups:
    """Create an algorithm's groups and model servers where ``roles`` places them.

    Every process of the world calls it, with its own ``roles`` and the same other
    arguments. The model servers run on ``roles.model_server`` (the first server rank,
    else the first learner) in a group named ``"<group_name>_model_server"``. The
    learners' collective group times its operations out after the world's
    ``rpc_timeout``, so the learners fail instead of waiting when one of them dies.

    Args:
        roles: The roles, as seen from this process.
        group_name: Name of the algorithm's RPC group.
        model_num: Number of model servers.

    Raises:
        RuntimeError: If no world is running.
        ValueError: If ``roles`` does not describe the running world.
    """
    world = require_world()
    check_world(roles, world)
    group = world.create_rpc_group(
        group_name, names_of(world, member_order(roles, roles.coordinator))
    )
    servers = model_server_helper(
        model_num,
        group_name=f"{group_name}_model_server",
        members=names_of(world, member_order(roles, roles.model_server)),
    )
    learner_group = None
    if roles.is_learner and len(roles.learners) > 1:
        # A learner that dies must not leave the others waiting in DistributedDataParallel for
        # torch's default 30 minutes: they fail after the world's RPC timeout instead.
        learner_group = world.create_collective_group(
            list(roles.learners), timeout=world.rpc_timeout
        )
    return RoleGroups(group, servers, learner_group)


class ForwardedReplay:
    """A sampler's replay buffer whose transitions live in another process's part.

    ``append`` and ``extend`` collect transitions and send them, ``chunk`` at a time (at
    once after a terminal transition), to the holder's part; one send is in flight at a
    time, and its failure is raised by the next send. Everything else is the sampler's
    own (empty) part: ``all_size()`` still counts the whole group.

    Args:
        buffer: The sampler's own part of the distributed buffer.
        holder: Name of the member whose part receives the transitions.
        chunk: Transitions collected before a send.
    """

    def __init__(self, buffer: Any, holder: str, chunk: int = 32):
        self.buffer = buffer
        self.holder = holder
        self.chunk = chunk
        self._pending: List[Any] = []
        self._required: Any = None
        self._future: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.buffer, name)

    def __repr__(self) -> str:
        return f"ForwardedReplay({self.buffer.buffer_name!r} -> {self.holder!r})"

    def append(self, transition: Any, required_attrs: Optional[Iterable[str]] = None) -> None:
        """Queue one transition for the holder (sent with the next chunk).

        Args:
            transition: The transition (a ``Transition`` or a dict of its attributes).
            required_attrs: Attributes the holder checks; ``None`` uses its buffer's default.
        """
        self.extend([transition], required_attrs)

    def extend(
        self, transitions: Iterable[Any], required_attrs: Optional[Iterable[str]] = None
    ) -> None:
        """Queue transitions for the holder; send when a chunk is full or one is terminal.

        The holder's buffer checks them when they arrive; a rejection is raised by the
        next send (or :meth:`wait`).

        Args:
            transitions: The transitions.
            required_attrs: Attributes the holder checks; ``None`` uses its buffer's default.
        """
        transitions = list(transitions)
        required = None if required_attrs is None else tuple(required_attrs)
        if self._pending and required != self._required:
            self.flush()
        self._required = required
        self._pending.extend(transitions)
        if len(self._pending) >= self.chunk or any(_terminal(t) for t in transitions):
            self.flush()

    def flush(self) -> None:
        """Send the queued transitions now (waiting for the previous send first).

        Raises:
            RuntimeError: When the holder cannot be reached, or rejected a previous send.
        """
        self.wait()
        if not self._pending:
            return
        items, self._pending = self._pending, []
        kwargs = {} if self._required is None else {"required_attrs": self._required}
        self._future = self.buffer.group.registered_async(
            _store_key(self.buffer, self.holder), args=(items, kwargs)
        )

    def wait(self) -> None:
        """Wait for the send in flight, raising its failure."""
        future, self._future = self._future, None
        if future is not None:
            future.wait()


def _terminal(transition: Any) -> bool:
    try:
        value = transition["terminal"]
    except (KeyError, TypeError, IndexError):
        return True  # not a step (e.g. a whole episode): send at once
    return bool(value.any()) if isinstance(value, torch.Tensor) else bool(value)


def _store_key(buffer: Any, member: str) -> str:
    return f"{buffer.buffer_name}/{member}/_store"


def place_replay(framework: Any, roles: Roles, chunk: int = 32) -> None:
    """Keep the parts of ``framework.replay_buffer`` only where ``roles`` puts the replay.

    Every process of the group calls it after constructing the algorithm. A process
    that holds no part withdraws its (empty) part from the group, so sampling never asks
    it; a holder offers a store service; a sampler whose holder is another process gets a
    :class:`ForwardedReplay` as ``framework.replay_buffer``. Ends with a group barrier,
    after which every part exists.

    Args:
        framework: The algorithm, whose ``replay_buffer`` is a distributed buffer.
        roles: The roles, as seen from this process.
        chunk: Transitions a forwarding sampler collects before sending.
    """
    buffer = framework.replay_buffer
    group = buffer.group
    world = require_world()
    me = world.name
    if roles.rank not in roles.replay_holders:
        group.deregister(buffer._service_key(me))
    elif roles.replay != "samplers":

        def store(items: List[Any], kwargs: Dict[str, Any]) -> None:
            buffer.extend(items, **kwargs)

        group.register(_store_key(buffer, me), store)
    if roles.is_sampler and roles.replay_holder() != roles.rank:
        holder = names_of(world, [roles.replay_holder()])[0]
        framework.replay_buffer = ForwardedReplay(buffer, holder, chunk)
    group.barrier()


def build_from_roles(
    cls: Type[Any],
    roles: Roles,
    args: Sequence[Any],
    kwargs: Dict[str, Any],
    *,
    group_name: str,
    ddp_networks: Sequence[str] = (),
    model_num: int = 1,
    replay_chunk: Optional[int] = None,
) -> Any:
    """Construct a distributed algorithm on this process from its roles (the ``from_roles`` body).

    Calls :func:`role_groups`, wraps the networks named in ``ddp_networks`` in
    ``DistributedDataParallel`` over the learners' collective group (on learners, when
    there are several), constructs ``cls(*args, group, model_servers, **kwargs)`` and,
    with ``replay_chunk`` set, places its replay with :func:`place_replay`. The
    algorithm gets the attributes ``roles``, ``learner_group`` and ``model_servers``.

    Args:
        cls: The algorithm class; its constructor takes the networks and options, the
            group and the model-server tuple, in that order.
        roles: The roles, as seen from this process.
        args: Positional constructor arguments before the group.
        kwargs: Keyword constructor arguments.
        group_name: Name of the algorithm's RPC group.
        ddp_networks: Names of the constructor parameters whose networks the learners train
            together.
        model_num: Number of model servers.
        replay_chunk: Transitions a forwarding sampler sends at once; ``None`` when the
            algorithm has no distributed replay to place.

    Raises:
        TypeError: When ``roles`` is not a :class:`Roles`.
        ValueError: When ``roles`` does not describe the running world.
    """
    if not isinstance(roles, Roles):
        raise TypeError(
            f"roles must be a machin.parallel.distributed.roles.Roles (e.g. Roles.from_world()), got "
            f"{roles!r} of type {type(roles).__name__}"
        )
    setup = role_groups(roles, group_name, model_num)
    args, kwargs = list(args), dict(kwargs)
    if setup.learner_group is not None and ddp_networks:
        from torch.nn.parallel import DistributedDataParallel

        names = list(inspect.signature(cls).parameters)
        for name in ddp_networks:
            position = names.index(name) if name in names else None
            if name in kwargs:
                kwargs[name] = DistributedDataParallel(
                    kwargs[name], process_group=setup.learner_group.group
                )
            elif position is not None and position < len(args):
                args[position] = DistributedDataParallel(
                    args[position], process_group=setup.learner_group.group
                )
    framework = cls(*args, setup.group, setup.model_servers, **kwargs)
    framework.roles = roles
    framework.learner_group = setup.learner_group
    framework.model_servers = setup.model_servers
    if replay_chunk is not None:
        place_replay(framework, roles, replay_chunk)
    return framework
