"""The distributed world: RPC groups and collective groups on PyTorch's runtime.

Start one :class:`World` per process (from arguments, or from the environment
variables ``torchrun`` sets), then create :class:`RpcGroup` s for named services
and shared values, and :class:`CollectiveGroup` s for collective communication.
:func:`launch` runs a function in several local processes, one world rank each, and
:func:`run_script` runs a script's ``main(rank)`` either that way or, under
``torchrun``, as the rank ``torchrun`` started. :func:`launch_ray` runs it on a Ray
cluster instead, one actor per rank (the ``ray`` transport, see
:mod:`~machin.parallel.distributed.transport`). :class:`Roles` derives learners,
samplers and servers from the world's size and rank, :class:`RunControl` coordinates
such a run through losses of processes, and :class:`LearnerCheckpoint` lets it resume.
"""

from . import world
from ._transport import MemberLeftError, MemberLostError
from .checkpoint import LearnerCheckpoint
from .collective_group import CollectiveGroup
from .launcher import LaunchError, launch, run_script
from .ray_launcher import launch_ray
from .roles import LearnerLostError, Roles, RunControl
from .rpc_group import RpcGroup
from .world import RpcException, World, get_cur_name, get_cur_rank, get_world

__all__ = [
    "World",
    "get_world",
    "get_cur_rank",
    "get_cur_name",
    "RpcGroup",
    "CollectiveGroup",
    "RpcException",
    "launch",
    "run_script",
    "launch_ray",
    "LaunchError",
    "Roles",
    "RunControl",
    "LearnerLostError",
    "MemberLostError",
    "MemberLeftError",
    "LearnerCheckpoint",
    "world",
]
