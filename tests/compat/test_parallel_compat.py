"""Machin 0.3.4 behaviours of ``machin.parallel`` and ``machin.frame.helpers.servers``.

One test per restored behaviour. The distributed ones share two world runs (three
processes for the RPC group, two started with 0.3.4's explicit arguments): each rank
runs every check, records its failure, and one test per check reads the records.
"""

import gc
import glob
import inspect
import multiprocessing
import os
import pickle
import queue
import sys
import threading
import traceback
from datetime import timedelta

import pytest
import torch
from torch import nn

import machin.parallel
from machin.frame.helpers.servers import grad_server_helper
from machin.parallel.assigner import ModelAssigner
from machin.parallel.distributed import RpcGroup, World, get_cur_name, get_cur_rank
from machin.parallel.distributed.world import LUTType, RpcException
from machin.parallel.event import AndEvent, MultiEvent, OrEvent, init_or_register
from machin.parallel.exception import RemoteTraceback
from machin.parallel.pool import (
    CtxPool,
    CtxThreadPool,
    P2PPool,
    Pool,
    ThreadPool,
    proxy_caller,
    proxy_dumper,
)
from machin.parallel.process import Process
from machin.parallel.queue import SimpleQueue
from machin.parallel.server import (
    OrderedServerBase,
    OrderedServerSimple,
    OrderedServerSimpleImpl,
    PushPullGradServerImpl,
    PushPullModelServer,
)
from machin.parallel.server.param_server import ReduceType
from machin.parallel.thread import Thread
from machin.utils.compat import ExtraArgumentsWarning
from tests.multiprocess import no_children_left, run_ranks, wait_for  # noqa: F401

MEMBERS = ["0", "1", "2"]


# -- names ------------------------------------------------------------------------------------
def test_names_of_0_3_4_exist():
    assert machin.parallel.get_context is multiprocessing.get_context
    assert machin.parallel.get_start_method is multiprocessing.get_start_method
    assert machin.parallel.distributed.world.World is World
    assert machin.parallel.server.param_server.ReduceType is ReduceType
    assert (LUTType.VALUE.value, LUTType.SERVICE.value) == (0, 1)
    assert issubclass(RpcException, Exception)
    assert (ReduceType.REDUCE_PRIMARY, ReduceType.REDUCE_SECONDARY) == (0, 1)
    assert PushPullGradServerImpl.REDUCE_MASTER == ReduceType.REDUCE_PRIMARY
    assert callable(init_or_register) and callable(MultiEvent.get_leaf_events)


def test_rpc_exception_takes_a_message_or_an_exception():
    assert str(RpcException("remote failure")) == "remote failure"
    try:
        raise ValueError("inner")
    except ValueError as error:
        wrapped = RpcException(error)
    assert "ValueError: inner" in str(wrapped) and "Traceback" in str(wrapped)


def test_register_names_its_function_service():
    assert list(inspect.signature(RpcGroup.register).parameters)[1:] == ["key", "service"]


def test_world_defaults_rank_minus_one_from_the_environment():
    parameters = inspect.signature(World).parameters
    assert parameters["rank"].default == -1


def test_functions_without_a_world_name_the_uninitialized_environment():
    with pytest.raises(RuntimeError, match="Distributed environment not initialized"):
        get_cur_rank()
    with pytest.raises(RuntimeError, match="Distributed environment not initialized"):
        get_cur_name()


def test_missing_rank_minus_one_reads_rank_and_fails_without_it(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="rank was not given and the RANK environment variable"):
        World(rank=-1, world_size=2)


# -- threads, processes, events -----------------------------------------------------------------
def _record(box, value=1):
    box.append(value)


def test_thread_and_process_take_no_kwargs_or_none_alike():
    for kwargs in ({}, {"kwargs": None}):
        box = []
        thread = Thread(target=_record, args=(box,), **kwargs)
        thread.start()
        thread.join(10)
        assert box == [1] and thread.exception is None
        process = Process(target=_record, args=([],), ctx="fork", **kwargs)
        process.start()
        process.join(30)
        assert process.exitcode == 0 and process.exception is None


def test_event_rejects_non_events_with_0_3_4_phrase():
    with pytest.raises(ValueError, match="type str is not a valid event type"):
        OrEvent(threading.Event(), "x")
    with pytest.raises(ValueError, match="is not a valid event type"):
        init_or_register(threading.Event(), "parent")


@pytest.mark.parametrize(
    "module, names",
    [
        ("machin.parallel.event", {"Event", "Lock", "OrEvent", "AndEvent"}),
        ("machin.parallel.server", {"ordered_server", "param_server"}),
        ("machin.model.nets", {"base", "resnet", "ResNet"}),
    ],
)
def test_star_imports_bring_what_0_3_4_brought(module, names):
    # 0.3.4's event module had no __all__, so a star import carried threading's Event and
    # Lock (its tutorial builds `Event()` after one); two packages listed their submodules.
    namespace = {}
    exec(f"from {module} import *", namespace)
    assert names <= set(namespace)
    if module == "machin.parallel.event":
        combined = namespace["OrEvent"](namespace["Event"](), namespace["Event"]())
        assert not combined.is_set()
        assert namespace["Event"] is threading.Event


def test_get_leaf_events_flattens_nested_events():
    a, b, c = threading.Event(), threading.Event(), threading.Event()
    nested = OrEvent(AndEvent(a, b), c)
    assert list(nested.get_leaf_events()) == [a, b, c]


@pytest.mark.timeout(30)
def test_init_or_register_wakes_the_waiters_of_the_parent_event():
    child, parent = threading.Event(), threading.Event()
    init_or_register(child, parent)
    woken = threading.Event()

    def wait_then_tell():
        parent.wait(20)
        woken.set()

    waiter = threading.Thread(target=wait_then_tell)
    waiter.start()
    wait_for(lambda: len(parent._cond._waiters) == 1, 10)
    child.set()
    waiter.join(10)
    assert woken.is_set() and not parent.is_set()


def test_combined_events_ignore_set_and_clear_and_accept_no_members():
    a = threading.Event()
    either = OrEvent(a)
    either.set()
    assert not either.is_set()
    assert AndEvent().is_set() and not OrEvent().is_set()


# -- pools and queues ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [Pool, P2PPool, CtxPool, ThreadPool, CtxThreadPool])
def test_pools_are_not_reducible(cls):
    kind = "Thread" if issubclass(cls, ThreadPool) else "Process"
    with cls(1) as pool:
        with pytest.raises(RuntimeError, match=f"{kind} pool is not reducible"):
            pickle.dumps(pool)
        with pytest.raises(RuntimeError, match=f"{kind} pool is not reducible"):
            machin.parallel.pickle.dumps(pool)


def test_pool_argument_errors_keep_0_3_4_types_and_phrases():
    with pytest.raises(RuntimeError, match='Invalid share method: "gpu"') as info:
        Pool(1, is_copy_tensor=False, share_method="gpu")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match="Number of processes must be at least 1"):
        Pool(0)
    with pytest.raises(ValueError, match="Number of processes must be at least 1"):
        ThreadPool(0)
    for cls in (CtxPool, CtxThreadPool):
        with pytest.raises(
            ValueError, match="Context number is not equal to the number of pool workers"
        ):
            cls(2, worker_contexts=[1])


@pytest.mark.parametrize("cls", [Pool, CtxThreadPool])
def test_a_closed_pool_refuses_work_with_value_error(cls):
    pool = cls(1)
    pool.close()
    pool.join()
    with pytest.raises(ValueError, match="Pool not running"):
        pool.apply(len, ([],))
    with pytest.raises(ValueError, match="Pool not running"):
        pool.map(len, [[]])


def test_a_copying_pool_spawns_its_workers_once_cuda_is_initialized(monkeypatch):
    # 0.3.4's copying pools always spawned; machin forks, but not where a forked
    # worker could not use CUDA.
    from machin.parallel.pool import _choose_context
    from machin.parallel.process import DEFAULT_START_METHOD

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert _choose_context(True, None, None).get_start_method() == DEFAULT_START_METHOD
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert _choose_context(True, None, None).get_start_method() == "spawn"
    assert _choose_context(True, None, "forkserver").get_start_method() == "forkserver"


def test_proxy_caller_takes_entries_of_proxy_dumper():
    entries = proxy_dumper(True, True, lambda a, b: a * b, [(2, 3), (4, 5)])
    assert [proxy_caller(entry) for entry in entries] == [6, 20]
    with ThreadPool(1) as pool:
        assert pool.map(proxy_caller, entries) == [6, 20]


def test_queue_timeout_is_a_timeout_error():
    tasks = SimpleQueue()
    with pytest.raises(TimeoutError, match="Timeout") as info:
        tasks.get(timeout=0.01)
    assert isinstance(info.value, queue.Empty)
    with pytest.raises(TimeoutError, match="Timeout"):
        tasks.quick_get(timeout=0.01)


# -- shared tensors outlive their sender --------------------------------------------------------
def _send_shared_tensor(tasks):
    tasks.put(torch.arange(4.0))


def _shm_files(pid):
    return glob.glob(f"/dev/shm/torch_{pid}_*")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /dev/shm")
@pytest.mark.timeout(60)
@pytest.mark.usefixtures("no_children_left")
def test_a_shared_tensor_is_readable_after_its_sender_exited():
    tasks = SimpleQueue(ctx="fork", copy_tensor=False)
    sender = Process(target=_send_shared_tensor, args=(tasks,), ctx="fork")
    sender.start()
    sender.join(30)
    assert sender.exitcode == 0
    assert _shm_files(sender.pid)  # the tensor's file outlives its creator...
    tensor = tasks.get(timeout=10)
    assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0] and tensor.is_shared()
    del tensor
    gc.collect()
    wait_for(lambda: not _shm_files(sender.pid), 10)  # ...until its last user drops it


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("no_children_left")
def test_a_pool_worker_that_exits_after_its_task_returns_a_readable_tensor():
    with Pool(1, maxtasksperchild=1, is_copy_tensor=False, share_method="cpu") as pool:
        first = pool.apply(lambda: torch.full((3,), 2.0))
        second = pool.apply(lambda: torch.ones(2))  # a fresh worker: the first has exited
    assert first.tolist() == [2.0] * 3 and second.tolist() == [1.0, 1.0]


# -- servers in one process (a local stand-in for the group) ------------------------------------
class _LocalServer(OrderedServerBase):
    def __init__(self):
        self.versions = []

    def push(self, key, value, version, prev_version):
        if self.versions and self.versions[-1][0] != prev_version:
            return False
        self.versions.append((version, {k: v.clone() for k, v in value.items()}))
        return True

    def pull(self, key, version=None):
        return (self.versions[-1][1], self.versions[-1][0]) if self.versions else None


class _LocalGroup:
    def __init__(self, members=("me",), me="me"):
        self.members, self.me, self.services, self.paired = list(members), me, {}, {}

    def get_group_members(self):
        return self.members

    def get_cur_name(self):
        return self.me

    def is_member(self, target=None):
        return (self.me if target is None else target) in self.members

    def register(self, key, service):
        self.services[key] = service

    def pair(self, key, value):
        self.paired[key] = value

    def registered_sync(self, key, args=(), kwargs=None):
        return self.services[key](*args, **(kwargs or {}))


def test_ordered_server_impl_ignores_extra_arguments_with_a_warning():
    group = _LocalGroup()
    with pytest.warns(ExtraArgumentsWarning, match="'server_runner'"):
        OrderedServerSimpleImpl("kv", group, version_depth=2, server_runner="me")
    assert isinstance(group.paired["kv"], OrderedServerSimple)


def test_server_argument_errors_are_assertion_errors_as_well():
    with pytest.raises(AssertionError, match="version_depth must be a positive int"):
        OrderedServerSimpleImpl("kv", _LocalGroup(), version_depth=0)
    with pytest.raises(AssertionError, match="not a member of the group"):
        OrderedServerSimpleImpl("kv", _LocalGroup(members=["other"]))
    with pytest.raises(AssertionError, match="reduce_method must be 'sum' or 'mean'"):
        PushPullGradServerImpl("g", _LocalGroup(), reduce_method="max", o_server=_LocalServer())


def test_manage_model_off_the_primary_says_it_is_not_the_reduce_master():
    group = _LocalGroup(members=["me", "other"], me="other")
    server = PushPullGradServerImpl("g", group, o_server=_LocalServer())
    with pytest.raises(RuntimeError, match="not the reduce master"):
        server.manage_model(nn.Linear(1, 1), None)


def _local_grad_server(**kwargs):
    group, o_server = _LocalGroup(), _LocalServer()
    server = PushPullGradServerImpl("grads", group, o_server=o_server, **kwargs)
    managed = nn.Linear(3, 1, bias=False)
    nn.init.zeros_(managed.weight)
    server.manage_model(managed, torch.optim.SGD(managed.parameters(), lr=1.0))
    return server, group.paired["grads"], o_server


@pytest.mark.timeout(30)
def test_push_and_pull_leave_zero_filled_gradients():
    server, accessor, o_server = _local_grad_server(reduce_batch_size=1)
    server.start()
    server.start()  # a second start does nothing, as in 0.3.4
    client = nn.Linear(3, 1, bias=False)
    client.weight.grad = torch.ones(1, 3)
    accessor.push(client)
    assert torch.equal(client.weight.grad, torch.zeros(1, 3))
    wait_for(lambda: len(o_server.versions) == 2)  # the pushed values were not zeroed with it
    assert torch.equal(o_server.versions[-1][1]["weight"], torch.full((1, 3), -1.0))
    client.weight.grad = torch.ones(1, 3)
    accessor.pull(client)
    assert torch.equal(client.weight.grad, torch.zeros(1, 3))
    fresh = nn.Linear(3, 1, bias=False)
    accessor.pull(fresh)
    assert fresh.weight.grad is None  # as 0.3.4's zero_grad(): no gradient, nothing to zero
    server.stop()


@pytest.mark.timeout(30)
def test_grad_push_service_takes_reduce_type_levels():
    server, accessor, o_server = _local_grad_server(reduce_batch_size=1)
    server.start()
    push = accessor.group.services["grads/me/_push_service"]
    push({"weight": torch.ones(1, 3)}, 1, ReduceType.REDUCE_SECONDARY)
    wait_for(lambda: len(o_server.versions) == 2)
    with pytest.raises(ValueError, match="Unknown push level: 7"):
        push({"weight": torch.ones(1, 3)}, 1, 7)
    server.stop()


def test_model_server_pull_loads_only_newer_versions():
    server = PushPullModelServer("m", _LocalServer())
    source = nn.Linear(2, 2)
    assert server.push(source) and source.pp_version == 1
    ahead = nn.Linear(2, 2)
    ahead.pp_version = 1  # already at the newest version, with local changes
    local = ahead.weight.detach().clone()
    assert server.pull(ahead) and torch.equal(ahead.weight, local)
    fresh = nn.Linear(2, 2)
    assert server.pull(fresh) and torch.equal(fresh.weight, source.weight)
    stale = nn.Linear(2, 2)
    stale.pp_version = 5  # a refused push loads the newest, whatever the version
    assert not server.push(stale) and stale.pp_version == 1
    assert torch.equal(stale.weight, source.weight)


# -- assigner -------------------------------------------------------------------------------------
def test_assigner_refuses_models_that_do_not_fit(monkeypatch):
    monkeypatch.setattr("machin.parallel.assigner._memory_mebibytes", lambda device: 1.0)
    with pytest.raises(RuntimeError, match="Estimated model will use .* MB, but only have"):
        ModelAssigner([nn.Linear(1000, 1000)], {}, devices=["cpu"])


def test_assigner_drops_unavailable_gpus():
    with pytest.warns(UserWarning, match="'cuda:99'.*removed"):
        assigner = ModelAssigner([nn.Linear(2, 2)], {}, devices=["cuda:99"])
    assert assigner.assignment == [torch.device("cpu")]


# -- helpers ----------------------------------------------------------------------------------------
def test_grad_server_helper_positional_order_is_that_of_0_3_4():
    names = list(inspect.signature(grad_server_helper).parameters)
    assert names[:3] == ["model_creators", "optimizer", "learning_rate"]


# -- one three-process world: RPC groups ------------------------------------------------------------
def _failing_service(x):
    raise ValueError(f"bad input {x}")


def _second_world(rank, world, group):
    with pytest.raises(RuntimeError, match="World could only be initialized once"):
        World()


def _world_not_picklable(rank, world, group):
    with pytest.raises(RuntimeError, match="World is not picklable"):
        pickle.dumps(world)


def _default_rank(rank, world, group):
    assert world.rank == rank == int(os.environ["RANK"]) and world.name == str(rank)


def _create_group_errors(rank, world, group):
    others = [m for m in MEMBERS if m != str(rank)]
    with pytest.raises(RuntimeError, match=f"Creator Process '{rank}' not in Group 'h'") as info:
        world.create_rpc_group("h", others)
    assert isinstance(info.value, ValueError)
    with pytest.raises(RuntimeError, match="already exists"):
        world.create_rpc_group("g", MEMBERS)


def _pair_errors(rank, world, group):
    if rank == 2:
        with pytest.raises(KeyError, match="already paired"):
            group.pair("value", 1)
        with pytest.raises(KeyError, match="not paired") as info:
            group.unpair("value")  # paired by rank 0
        assert isinstance(info.value, RuntimeError)
        with pytest.raises(KeyError, match="not paired"):
            group.unpair("nothing")


def _register_errors(rank, world, group):
    if rank == 2:
        with pytest.raises(KeyError, match="already registered"):
            group.register("add", len)
        with pytest.raises(KeyError, match="not registered") as info:
            group.deregister("add")  # registered by rank 1
        assert isinstance(info.value, RuntimeError)
        with pytest.raises(KeyError, match="not registered"):
            group.deregister("nothing")


def _unknown_keys(rank, world, group):
    with pytest.raises(KeyError, match="not found"):
        group.get_paired("nothing")
    with pytest.raises(KeyError, match="not found"):
        group.registered_sync("nothing")
    with pytest.raises(KeyError, match="not found"):
        group.registered_async("nothing")
    with pytest.raises(KeyError, match="not found"):
        group.registered_remote("nothing")


def _remote_errors(rank, world, group):
    with pytest.raises(RpcException, match="bad input 7") as info:
        group.registered_sync("fail", args=(7,))
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, RemoteTraceback)
    with pytest.raises(RpcException, match="bad input 8") as info:
        group.registered_async("fail", args=(8,)).wait()
    assert isinstance(info.value, ValueError)
    with pytest.raises(RpcException) as info:
        group.rpc_sync("1", lambda: 1 / 0)
    assert isinstance(info.value, ZeroDivisionError)
    with pytest.raises(RpcException):
        group.rpc_async("2", lambda: [][1]).wait()


def _rpc_target_not_member(rank, world, group):
    for call, to in ((group.rpc_sync, "9"), (group.rpc_async, 1.5), (group.remote, 7)):
        with pytest.raises(RuntimeError, match="RPC target is not a member of group") as info:
            call(to, len, args=([],))
        assert isinstance(info.value, (ValueError, TypeError))


def _non_member_calls(rank, world, group):
    if rank == 0:
        handle = RpcGroup("sub", ["1", "2"], first_create=False)
        for call in (
            lambda: handle.pair("k", 1),
            lambda: handle.unpair("k"),
            lambda: handle.register("k", len),
            lambda: handle.deregister("k"),
            handle.barrier,
        ):
            with pytest.raises(RuntimeError, match="not a member of the group"):
                call()


def _register_by_service_keyword(rank, world, group):
    group.register(f"own{rank}", service=lambda: rank * 10)
    assert group.registered_sync(f"own{rank}") == rank * 10
    group.deregister(f"own{rank}")


RPC_CHECKS = {
    "default_rank_reads_the_environment": _default_rank,
    "second_world": _second_world,
    "world_not_picklable": _world_not_picklable,
    "create_group_errors": _create_group_errors,
    "pair_errors": _pair_errors,
    "register_errors": _register_errors,
    "unknown_keys": _unknown_keys,
    "remote_errors_are_rpc_exceptions": _remote_errors,
    "rpc_target_not_member": _rpc_target_not_member,
    "non_member_calls": _non_member_calls,
    "register_by_service_keyword": _register_by_service_keyword,
}


def _outcome(check, *args):
    try:
        check(*args)
    except BaseException:
        return traceback.format_exc()
    return None


def _rpc_group_checks(rank):
    world = World(rpc_timeout=30)  # rank=-1: from RANK, as under torchrun
    group = world.create_rpc_group("g", MEMBERS)
    if rank > 0:
        world.create_rpc_group("sub", ["1", "2"])
    if rank == 0:
        group.pair("value", 42)
    if rank == 1:
        group.register("fail", _failing_service)
        group.register("add", lambda a, b: a + b)
    group.barrier()
    outcomes = {name: _outcome(check, rank, world, group) for name, check in RPC_CHECKS.items()}
    group.barrier()
    world.stop()
    return outcomes


@pytest.fixture(scope="module")
def rpc_outcomes():
    return run_ranks(_rpc_group_checks, 3, timeout=120)


def _assert_passed(outcomes, check):
    failures = [f"rank {rank}:\n{o[check]}" for rank, o in enumerate(outcomes) if o[check]]
    assert not failures, "\n".join(failures)


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
@pytest.mark.usefixtures("no_children_left")
@pytest.mark.parametrize("check", list(RPC_CHECKS))
def test_rpc_group_behaviour_of_0_3_4(rpc_outcomes, check):
    _assert_passed(rpc_outcomes, check)


# -- one two-process world started with 0.3.4's explicit arguments ----------------------------------
def _explicit_arguments(rank, world):
    assert (world.rank, world.name, world.world_size) == (rank, str(rank), 2)
    assert world.get_members() == ["0", "1"]


def _collective_group(rank, world):
    group = world.create_collective_group([0, 1], timeout=timedelta(seconds=60))
    assert group.current_rank == rank
    value = torch.tensor([rank + 1.0])
    group.all_reduce(value)
    assert value.item() == 3.0
    with pytest.raises(RuntimeError, match="not picklable"):
        pickle.dumps(group)
    group.destroy()


def _grad_server_helper_positional(rank, world):
    with pytest.raises(TypeError, match="the second positional parameter is optimizer"):
        grad_server_helper([nn.Linear], "grad_server")
    (server,) = grad_server_helper([lambda: nn.Linear(2, 1, bias=False)], torch.optim.SGD, 0.5)
    client = nn.Linear(2, 1, bias=False)
    assert server.pull(client)
    start = client.weight.detach().clone()
    client.weight.grad = torch.ones(1, 2)
    server.push(client)
    assert torch.equal(client.weight.grad, torch.zeros(1, 2))  # zero-filled, not None
    world.barrier()
    # SGD (not the default Adam) with lr 0.5 (not 1e-3) on the sum of two pushes of ones
    wait_for(lambda: server.pull(client) and torch.allclose(client.weight, start - 1.0))


EXPLICIT_CHECKS = {
    "explicit_0_3_4_world_arguments": _explicit_arguments,
    "collective_group_timedelta_timeout_and_current_rank": _collective_group,
    "grad_server_helper_positional_call": _grad_server_helper_positional,
}


def _explicit_world_checks(rank):
    port = os.environ["MASTER_PORT"]
    for variable in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        os.environ.pop(variable)  # a plain script, not torchrun: everything from arguments
    world = World(
        world_size=2,
        rank=rank,
        name=str(rank),
        init_method=f"tcp://localhost:{port}",
        rpc_timeout=20,
        rpc_threads=8,
    )
    outcomes = {name: _outcome(check, rank, world) for name, check in EXPLICIT_CHECKS.items()}
    world.barrier()
    world.stop()
    return outcomes


@pytest.fixture(scope="module")
def explicit_outcomes():
    return run_ranks(_explicit_world_checks, 2, timeout=120)


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
@pytest.mark.usefixtures("no_children_left")
@pytest.mark.parametrize("check", list(EXPLICIT_CHECKS))
def test_world_started_with_0_3_4_arguments(explicit_outcomes, check):
    _assert_passed(explicit_outcomes, check)
