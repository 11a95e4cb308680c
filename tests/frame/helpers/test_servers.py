"""grad_server_helper and model_server_helper on a 3-process world."""

import pytest
import torch
from torch import nn

from machin.frame.helpers import grad_server_helper, model_server_helper
from machin.frame.helpers.servers import grad_server_helper as from_module
from machin.parallel.distributed import World
from machin.parallel.server import PushPullGradServer, PushPullModelServer
from tests.multiprocess import no_children_left, run_ranks, wait_for  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]


def _helper_checks(rank):
    world = World(rpc_timeout=30)
    with pytest.raises(
        ValueError, match=r"learning_rate must hold one entry per model creator \(2\)"
    ):
        grad_server_helper([nn.Linear, nn.Linear], learning_rate=[0.1])
    with pytest.raises(ValueError, match="model_num must be a positive int, got 0"):
        model_server_helper(model_num=0)
    with pytest.raises(
        ValueError, match="members must be 'all' or a list of process names, got 'some'"
    ):
        model_server_helper(model_num=1, members="some")

    torch.manual_seed(0)
    servers = grad_server_helper(
        [lambda: nn.Linear(2, 1, bias=False), lambda: nn.Linear(3, 1, bias=False)],
        optimizer=torch.optim.SGD,
        learning_rate=[1.0, 0.1],
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_args=((lambda epoch: 0.5,), (lambda epoch: 1.0,)),
    )
    assert len(servers) == 2 and all(isinstance(s, PushPullGradServer) for s in servers)
    models = model_server_helper(model_num=1)
    assert len(models) == 1 and isinstance(models[0], PushPullModelServer)
    # a group over some members only: the other processes get accessors too
    subset = model_server_helper(model_num=2, group_name="learners", members=["1", "2"])
    assert len(subset) == 2

    actor = nn.Linear(2, 1, bias=False)
    assert servers[0].pull(actor)
    start = actor.weight.detach().clone()  # the same managed model everywhere
    actor.weight.grad = torch.ones(1, 2)
    servers[0].push(actor)
    world.barrier()
    # SGD with lr 1.0, scaled by the scheduler to 0.5, on the sum of three pushes of ones
    wait_for(lambda: servers[0].pull(actor) and torch.allclose(actor.weight, start - 1.5))

    net = nn.Linear(2, 2)
    if rank == 2:
        assert subset[1].push(net)
    world.barrier()
    if rank == 0:
        assert subset[1].pull(net) and net.pp_version == 1
    world.barrier()
    world.stop()
    return start


@pytest.mark.timeout(90)
def test_helpers_return_working_accessors_on_every_process():
    starts = run_ranks(_helper_checks, 3)
    assert all(torch.equal(s, starts[0]) for s in starts)
    assert from_module is grad_server_helper
