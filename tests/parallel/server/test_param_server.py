"""PushPullModelServer and PushPullGradServer, on a 3-process world and in one process."""

import pytest
import torch
from torch import nn

from machin.parallel.distributed import World
from machin.parallel.server import (
    OrderedServerBase,
    PushPullGradServer,
    PushPullGradServerImpl,
    PushPullModelServer,
    PushPullModelServerImpl,
)
from machin.parallel.server.param_server import REDUCE_SLAVE
from machin.parallel.thread import ThreadException
from tests.multiprocess import no_children_left, run_ranks, wait_for  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_children_left")


def _params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _param_server_checks(rank):
    torch.manual_seed(rank)
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("ps", world.get_members())
    if rank == 0:
        PushPullModelServerImpl("models", group)
    reducer = PushPullGradServerImpl("grads", group, reduce_batch_size=3, reduce_method="sum")
    if rank == 1:
        with pytest.raises(
            RuntimeError,
            match="manage_model must be called on the primary reducer '0' of 'grads', not on '1'",
        ):
            reducer.manage_model(nn.Linear(2, 1), None)
    if rank == 0:
        with pytest.raises(
            RuntimeError, match="call manage_model\\(\\) on the primary reducer before start\\(\\)"
        ):
            reducer.start()
        managed = nn.Linear(2, 1, bias=False)
        nn.init.zeros_(managed.weight)
        reducer.manage_model(managed, torch.optim.SGD(managed.parameters(), lr=1.0))
    reducer.start()
    if rank == 0:
        with pytest.raises(RuntimeError, match="manage_model must be called before start"):
            reducer.manage_model(managed, None)
    group.barrier()
    models = group.get_paired("models").to_here()
    grads = group.get_paired("grads").to_here()
    assert isinstance(models, PushPullModelServer) and isinstance(grads, PushPullGradServer)

    # the model server: ordered versions, stale pushes refused
    model = nn.Linear(2, 2)
    if rank == 0:
        assert not models.pull(model)  # nothing pushed yet: unchanged
        model.weight.grad = torch.ones(2, 2)
        assert models.push(model) and model.pp_version == 1
        assert torch.equal(model.weight.grad, torch.ones(2, 2))  # gradients are left alone
    group.barrier()
    pushed_by_0 = None
    if rank == 1:
        assert models.pull(model) and model.pp_version == 1
        pushed_by_0 = _params(model)
        stale = nn.Linear(2, 2)
        assert not models.push(stale, pull_on_fail=False)
        assert not hasattr(stale, "pp_version")
        assert not models.push(stale)  # refused, and overwritten with the newest instead
        assert stale.pp_version == 1 and _same(_params(stale), pushed_by_0)
        with torch.no_grad():
            model.weight.add_(1.0)
        solo = world.create_collective_group([rank])  # DDP over this rank alone, on the CPU
        wrapped = nn.parallel.DistributedDataParallel(model, process_group=solo.group)
        assert models.push(wrapped) and model.pp_version == 2  # the wrapper is looked through
    group.barrier()
    newest = nn.Linear(2, 2)
    assert models.pull(newest) and newest.pp_version == 2

    # the gradient server: pushes of all members are summed and applied by the primary
    client = nn.Linear(2, 1, bias=False)
    assert grads.pull(client)
    assert torch.equal(
        client.weight.detach(), torch.zeros(1, 2)
    )  # the managed model's initial values
    client.weight.grad = torch.full((1, 2), rank + 1.0)
    grads.push(client)
    assert torch.equal(client.weight.grad, torch.zeros(1, 2))  # cleared (zero-filled) by push
    group.barrier()

    def applied():
        grads.pull(client)
        return torch.equal(client.weight.detach(), torch.full((1, 2), -6.0))

    wait_for(applied)  # SGD(lr=1) on 1 + 2 + 3
    client.weight.grad = torch.ones(1, 2)
    grads.pull(client)
    assert torch.equal(client.weight.grad, torch.zeros(1, 2))  # cleared (zero-filled) by pull
    reducer.watch()
    group.barrier()
    world.stop()
    return _params(newest), pushed_by_0


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_model_and_gradient_servers_on_three_processes(run_on):
    results = run_on(_param_server_checks, 3)
    newest = results[0][0]
    assert all(_same(r[0], newest) for r in results)
    pushed_by_0 = results[1][1]
    assert torch.equal(newest["weight"], pushed_by_0["weight"] + 1.0)


# -- the reduction itself, in one process (a local stand-in for the group) ---------------------
class _LocalServer(OrderedServerBase):
    def __init__(self):
        self.versions = []

    def push(self, key, value, version, prev_version):
        self.versions.append((version, {k: v.clone() for k, v in value.items()}))
        return True

    def pull(self, key, version=None):
        return (self.versions[-1][1], self.versions[-1][0]) if self.versions else None


class _LocalGroup:
    """Just what a primary reducer that is its own only secondary uses of its group."""

    def __init__(self):
        self.services = {}

    def get_group_members(self):
        return ["me"]

    def get_cur_name(self):
        return "me"

    def register(self, key, func):
        self.services[key] = func

    def pair(self, key, value):
        self.paired = value

    def registered_sync(self, key, args=(), kwargs=None):
        return self.services[key](*args, **(kwargs or {}))


def _local_server(**kwargs):
    group, o_server = _LocalGroup(), _LocalServer()
    server = PushPullGradServerImpl("grads", group, o_server=o_server, **kwargs)
    model = nn.Linear(3, 1, bias=False)
    nn.init.zeros_(model.weight)
    server.manage_model(model, torch.optim.SGD(model.parameters(), lr=1.0))
    return server, group.paired, o_server, model


@pytest.mark.timeout(30)
def test_mean_divides_by_the_number_of_client_pushes():
    server, accessor, o_server, managed = _local_server(
        reduce_method="mean", reduce_batch_size=3, flush_interval=30
    )
    server.start()
    assert [v for v, _ in o_server.versions] == [1]  # the initial parameters are published at start
    client = nn.Linear(3, 1, bias=False)
    for value in (1.0, 2.0, 6.0):
        client.weight.grad = torch.full((1, 3), value)
        accessor.push(client)
    wait_for(lambda: len(o_server.versions) == 2)
    server.stop()
    assert torch.equal(
        o_server.versions[1][1]["weight"], torch.full((1, 3), -3.0)
    )  # one step, mean 3
    assert torch.equal(managed.weight.detach(), torch.full((1, 3), -3.0))


@pytest.mark.timeout(30)
def test_a_partial_batch_is_reduced_after_the_flush_interval():
    server, accessor, o_server, _ = _local_server(reduce_batch_size=100, flush_interval=0.05)
    server.start()
    client = nn.Linear(3, 1, bias=False)
    client.weight.grad = torch.ones(1, 3)
    accessor.push(client)
    wait_for(lambda: len(o_server.versions) == 2)
    server.stop()
    server.stop()  # a second call does nothing
    assert torch.equal(o_server.versions[-1][1]["weight"], torch.full((1, 3), -1.0))


@pytest.mark.timeout(30)
def test_reducer_errors_surface_through_watch():
    server, accessor, _, _ = _local_server(reduce_batch_size=1)
    server.start()
    wrong_shape = {"weight": torch.ones(1, 4)}  # the managed model's weight is [1, 3]
    accessor.group.registered_sync("grads/me/_push_service", args=(wrong_shape, 1, REDUCE_SLAVE))
    server._thread.join(10)
    with pytest.raises(ThreadException, match="size"):
        server.watch()


def test_constructor_arguments_are_checked():
    group = _LocalGroup()
    with pytest.raises(ValueError, match="reduce_method must be 'sum' or 'mean', got 'max'"):
        PushPullGradServerImpl("g", group, reduce_method="max")
    with pytest.raises(ValueError, match="reduce_batch_size must be a positive int, got 0"):
        PushPullGradServerImpl("g", group, reduce_batch_size=0)
    with pytest.raises(ValueError, match="must be members of group \\['me'\\]"):
        PushPullGradServerImpl("g", group, primary_reducer="other")
    with pytest.raises(ValueError, match="o_server must be an ordered server accessor, got None"):
        PushPullModelServer("model")
