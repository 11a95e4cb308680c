"""One-call set-up of the parameter servers used by the distributed algorithms.

Every process of the running world must call a helper (with the same arguments),
after the :class:`~machin.parallel.distributed.World` has started. Each helper
creates an RPC group over ``members``, starts the servers in it and returns one
accessor per server on every process.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

import torch
from torch import nn

from ...parallel.distributed import RpcGroup
from ...parallel.distributed._context import require_world
from ...parallel.server import (
    PushPullGradServer,
    PushPullGradServerImpl,
    PushPullModelServer,
    PushPullModelServerImpl,
)

__all__ = ["grad_server_helper", "model_server_helper"]


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
                opt = optimizer(model.parameters(), lr=rates[i], **opt_kwargs[i])
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
