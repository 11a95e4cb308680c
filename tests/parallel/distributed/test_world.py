"""World, RpcGroup and CollectiveGroup on a 3-process world (one world start per test)."""

import os
import pickle
import re
import threading
import time

import pytest
import torch
from torch import nn

from machin.parallel.distributed import (
    CollectiveGroup,
    MemberLeftError,
    RpcGroup,
    World,
    get_cur_name,
    get_cur_rank,
    get_world,
)
from machin.parallel.exception import RemoteTraceback
from tests.multiprocess import Exited, no_children_left, run_ranks  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]

MEMBERS = ["0", "1", "2"]


# -- without a world ------------------------------------------------------------------------
def test_world_arguments_are_checked_before_anything_starts(monkeypatch):
    for variable in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(
        ValueError, match="world_size was not given and the WORLD_SIZE environment variable"
    ):
        World(rank=0)
    with pytest.raises(ValueError, match="rank was not given and the RANK environment variable"):
        World(world_size=2)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(
        ValueError, match="the RANK environment variable must be an integer, got 'x'"
    ):
        World(world_size=2)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\], got 3"):
        World(rank=3, world_size=3)
    with pytest.raises(TypeError, match="rank must be an int, got '1'"):
        World(rank="1", world_size=3)
    with pytest.raises(ValueError, match="name must be 1 to 127 letters, digits"):
        World(name="a b", rank=0, world_size=1)
    with pytest.raises(ValueError, match="rpc_timeout must be a positive number of seconds, got 0"):
        World(rank=0, world_size=1, rpc_timeout=0)
    with pytest.raises(ValueError, match="rpc_threads must be a positive int, got 0"):
        World(rank=0, world_size=1, rpc_threads=0)
    assert get_world() is None
    with pytest.raises(RuntimeError, match="no distributed World is running in this process"):
        get_cur_rank()
    with pytest.raises(RuntimeError, match="no distributed World is running"):
        get_cur_name()


def test_group_handles_are_plain_values_without_a_world():
    group = RpcGroup("g", ["0", "1"], first_create=False)
    assert group.get_group_name() == "g"
    assert group.get_group_members() == ["0", "1"]
    assert group.size() == 2
    assert group.is_member("1") and not group.is_member("2")
    with pytest.raises(RuntimeError, match="no distributed World is running"):
        group.is_paired("k")
    import pickle

    copy = pickle.loads(pickle.dumps(group))
    assert (copy.group_name, copy.group_members) == ("g", ["0", "1"])


# -- RPC groups -----------------------------------------------------------------------------
def _wait_until_registered(group, key):
    group.barrier()
    assert group.is_registered(key)


def _rpc_group_checks(rank):
    world = World(rpc_timeout=30)  # from the torchrun variables set by the harness
    me = str(rank)
    assert get_world() is world
    assert (get_cur_rank(), get_cur_name(), world.rank, world.world_size) == (rank, me, rank, 3)
    assert world.get_members() == MEMBERS
    with pytest.raises(RuntimeError, match="a World is already running in this process"):
        World()

    group = world.create_rpc_group("g", MEMBERS)
    sub = world.create_rpc_group("sub", ["1", "2"]) if rank in (1, 2) else None
    assert (
        group.get_group_name() == "g" and group.get_group_members() == MEMBERS and group.size() == 3
    )
    assert group.is_member("0") and group.is_member() and not group.is_member("9")
    assert RpcGroup.get_cur_name() == me
    with pytest.raises(RuntimeError, match="an RPC group named 'g' already exists in this process"):
        world.create_rpc_group("g", MEMBERS)
    with pytest.raises(
        ValueError, match=r"members must be names of world processes \['0', '1', '2'\], got"
    ):
        world.create_rpc_group("h", ["0", "7"])
    with pytest.raises(ValueError, match="must be one of the members"):
        world.create_rpc_group("h", [m for m in MEMBERS if m != me])
    with pytest.raises(TypeError, match="members must be a list of process names"):
        world.create_rpc_group("h", "012")

    # paired values: visible everywhere once pair() returned, held by one member only
    if rank == 0:
        group.pair("k0", {"v": 0, "inc": lambda x: x + 1})
    group.barrier()
    assert group.is_paired("k0") and not group.is_paired("k1")
    value = group.get_paired("k0").to_here()
    assert value["v"] == 0 and value["inc"](1) == 2
    with pytest.raises(KeyError, match="paired value 'missing' is not paired in RPC group 'g'"):
        group.get_paired("missing")
    if rank == 1:
        with pytest.raises(
            KeyError, match=r"Value with key 'k0' already paired to Group \[g\] \(by member '0'\)"
        ):
            group.pair("k0", 1)
        with pytest.raises(
            RuntimeError, match="held by member '0'; only its holder can withdraw it, not '1'"
        ):
            group.unpair("k0")
    group.barrier()
    if rank == 0:
        group.unpair("k0")
        with pytest.raises(KeyError, match="paired value 'k0' is not paired in group 'g'"):
            group.unpair("k0")
    group.barrier()
    assert not group.is_paired("k0")

    # services
    if rank == 1:
        group.register("add", lambda a, b=0: a + b + 1)
        group.register("fail", _failing_service)
        with pytest.raises(TypeError, match="service must be callable, got 3"):
            group.register("x", 3)
        with pytest.raises(
            KeyError,
            match=r"Service with key 'add' already registered in Group \[g\] \(by this process\)",
        ):
            group.register("add", len)
    if rank == 2:
        group.register("apply", lambda f, x: f(x))
    group.barrier()
    assert group.is_registered("add") and not group.is_registered("nothing")
    assert group.registered_sync("add", args=(1,), kwargs={"b": 2}) == 4
    assert group.registered_async("add", args=(2,)).wait() == 3
    assert group.registered_remote("add", args=(3,)).to_here() == 4
    assert group.registered_sync("apply", args=(lambda v: v * 10, 4)) == 40
    assert torch.equal(group.registered_sync("add", args=(torch.ones(2),)), torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="bad input 7") as info:
        group.registered_sync("fail", args=(7,))
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "_failing_service" in info.value.__cause__.tb
    with pytest.raises(ValueError, match="bad input 8"):
        group.registered_async("fail", args=(8,)).wait()
    with pytest.raises(KeyError, match="service 'nothing' is not registered in RPC group 'g'"):
        group.registered_sync("nothing")
    with pytest.raises(KeyError, match="service 'nothing' is not registered"):
        group.registered_async("nothing")
    with pytest.raises(KeyError, match="service 'nothing' is not registered"):
        group.registered_remote("nothing")
    group.barrier()
    if rank == 0:
        with pytest.raises(RuntimeError, match="service 'add' of group 'g' is held by member '1'"):
            group.deregister("add")
    group.barrier()
    if rank == 1:
        group.deregister("add")
        with pytest.raises(KeyError, match="service 'add' is not registered in group 'g'"):
            group.deregister("add")
    group.barrier()
    assert not group.is_registered("add")
    with pytest.raises(KeyError, match="service 'add' is not registered"):
        group.registered_sync("add", args=(1,))

    # plain RPC to members, lambdas included
    assert torch.equal(
        group.rpc_sync("2", lambda x: x * 3, args=(torch.ones(2),)), torch.full((2,), 3.0)
    )
    assert group.rpc_async(1, lambda: get_cur_name()).wait() == "1"
    assert group.remote("0", lambda a, b: a - b, kwargs={"a": 5, "b": 2}).to_here() == 3
    with pytest.raises(ZeroDivisionError):
        group.rpc_sync("1", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        group.rpc_async("1", lambda: 1 / 0).wait()
    with pytest.raises(
        ValueError, match=r"to must be a member of RPC group 'g' \['0', '1', '2'\], got 'x'"
    ):
        group.rpc_sync("x", len)
    with pytest.raises(
        TypeError, match="to must be a member name, a rank or a WorkerInfo, got 1.5"
    ):
        group.rpc_sync(1.5, len)
    with pytest.raises(ValueError, match=r"to must be a rank in \[0, 2\], got 5"):
        group.rpc_sync(5, len)

    # the barrier waits for the slowest member
    if rank == 2:
        time.sleep(0.3)
        group.register("late", len)
    group.barrier()
    assert group.is_registered("late")

    # a non-member reaches a group through a handle; a member that leaves withdraws its keys
    if rank == 1:
        sub.register("sub_svc", lambda: "from 1")
    if rank == 2:
        sub.register("leaving", len)
    group.barrier()
    if rank == 0:
        handle = RpcGroup("sub", ["1", "2"], first_create=False)
        assert handle.is_registered("sub_svc") and handle.registered_sync("sub_svc") == "from 1"
        with pytest.raises(RuntimeError, match="process '0' is not a member of RPC group 'sub'"):
            handle.register("x", len)
        with pytest.raises(RuntimeError, match="process '0' is not a member"):
            handle.barrier()
    if rank == 2:
        sub.destroy()
        sub.destroy()  # a second call does nothing
        with pytest.raises(
            RuntimeError, match="RPC group 'sub' has been destroyed in this process"
        ):
            sub.register("again", len)
    group.barrier()
    if rank == 1:
        assert not sub.is_registered("leaving")
        with pytest.raises(
            KeyError, match="service 'leaving' is not registered in RPC group 'sub'"
        ):
            sub.registered_sync("leaving")
    world.barrier()
    world.stop()
    world.stop()  # a second call does nothing
    assert get_world() is None
    return me


def _failing_service(x):
    raise ValueError(f"bad input {x}")


@pytest.mark.timeout(300)
def test_rpc_group_services_values_calls_and_barriers(run_on):
    assert run_on(_rpc_group_checks, 3) == MEMBERS


# -- collective groups ------------------------------------------------------------------------
def _collective_checks(rank):
    torch.manual_seed(0)
    world = World(name=f"w{rank}", rank=rank, world_size=3, rpc_timeout=30)
    assert world.get_members() == ["w0", "w1", "w2"]
    every = world.create_collective_group([0, 1, 2])
    pair = world.create_collective_group([1, 0]) if rank < 2 else None
    with pytest.raises(ValueError, match=r"ranks must be distinct ranks in \[0, 2\], got \[0, 5\]"):
        world.create_collective_group([0, 5])
    with pytest.raises(ValueError, match="the current rank"):
        world.create_collective_group([r for r in range(3) if r != rank])
    assert isinstance(every, CollectiveGroup) and every.size() == 3
    assert every.current_relative_rank == rank

    t = torch.tensor([rank + 1.0])
    every.all_reduce(t)
    assert t.item() == 6.0
    t = torch.tensor([float(rank)])
    every.all_reduce(t, op=torch.distributed.ReduceOp.MAX, async_op=True).wait()
    assert t.item() == 2.0
    t = torch.tensor([float(rank)])
    every.broadcast(t, src=2)
    assert t.item() == 2.0
    gathered = [torch.zeros(1) for _ in range(3)] if rank == 0 else None
    every.gather(torch.tensor([rank * 2.0]), gathered, dst=0)
    if rank == 0:
        assert [g.item() for g in gathered] == [0.0, 2.0, 4.0]
    t = torch.zeros(1)
    every.scatter(t, [torch.tensor([10.0 * i]) for i in range(3)] if rank == 1 else None, src=1)
    assert t.item() == 10.0 * rank
    everyone = [torch.zeros(1) for _ in range(3)]
    every.all_gather(everyone, torch.tensor([rank + 0.5]))
    assert [e.item() for e in everyone] == [0.5, 1.5, 2.5]
    t = torch.tensor([1.0])
    every.reduce(t, dst=1)
    if rank == 1:
        assert t.item() == 3.0
    every.barrier()

    # receiving from any source returns the sender's rank
    if rank == 0:
        senders, values = set(), set()
        for _ in range(2):
            t = torch.zeros(1)
            senders.add(every.recv(t))
            values.add(t.item())
        assert senders == {1, 2} and values == {100.0, 200.0}
        every.barrier()
        t = torch.zeros(1)
        request = every.irecv(t)
        assert request.wait() == 2 and t.item() == 7.0
        assert request.wait() == 2 and request.is_completed()  # waiting again gives the same sender
        every.barrier()
        t = torch.zeros(1)
        assert every.irecv(t, src=1).wait() == 1 and t.item() == 8.0
    else:
        every.send(torch.tensor([rank * 100.0]), dst=0)
        every.barrier()
        if rank == 2:
            every.isend(torch.tensor([7.0]), dst=0).wait()
        every.barrier()
        if rank == 1:
            every.isend(torch.tensor([8.0]), dst=0).wait()

    # the multigpu variants, with one tensor per "device" (CPU here)
    tensors = [torch.tensor([float(rank)]), torch.tensor([float(rank + 10)])]
    every.all_reduce_multigpu(tensors)
    assert [x.item() for x in tensors] == [36.0, 36.0]
    tensors = [torch.zeros(1), torch.tensor([float(rank)])]
    assert every.broadcast_multigpu(tensors, src=2, src_tensor=1, async_op=True).wait()
    assert [x.item() for x in tensors] == [2.0, 2.0]
    tensors = [torch.ones(1), torch.ones(1)]
    every.reduce_multigpu(tensors, dst=0, dst_tensor=1)
    if rank == 0:
        assert [x.item() for x in tensors] == [1.0, 6.0]
    outputs = [[torch.zeros(1) for _ in range(6)]]
    every.all_gather_multigpu(outputs, [torch.tensor([rank * 2.0]), torch.tensor([rank * 2.0 + 1])])
    assert [x.item() for x in outputs[0]] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]

    # .group drives DistributedDataParallel over a subset of the world
    if rank < 2:
        model = nn.parallel.DistributedDataParallel(nn.Linear(2, 1), process_group=pair.group)
        model(torch.full((1, 2), float(rank + 1))).sum().backward()
        grad = model.module.weight.grad.clone()
        assert torch.allclose(grad, torch.full((1, 2), 1.5))  # the mean of the ranks' inputs
        assert pair.size() == 2
        pair.destroy()
    every.destroy()
    world.stop()
    return rank


@pytest.mark.timeout(300)
def test_collective_group_operations_and_ddp(run_on):
    assert run_on(_collective_checks, 3) == [0, 1, 2]


# -- a member that dies, another that leaves -------------------------------------------------------------------
def _death_checks(rank):
    world = World(rpc_timeout=20)
    group = world.create_rpc_group("g", MEMBERS)
    survivors = world.create_rpc_group("survivors", ["0", "1"]) if rank < 2 else None
    if rank == 2:
        group.register("die", lambda: os._exit(0))
        group.register("svc", len)
    group.barrier()
    if rank == 2:
        time.sleep(60)  # rank 0's call below ends this process
    if rank == 0:
        with pytest.raises(
            RuntimeError,
            match="calling service 'die' of RPC group 'g' failed: member '2' could not",
        ):
            group.registered_sync("die")
    survivors.barrier()
    # calls to the dead member fail at once (or within the timeout), never hang
    with pytest.raises(
        RuntimeError, match="member '2' could not be reached or did not answer in time"
    ):
        group.registered_sync("svc", args=([1],))
    with pytest.raises(RuntimeError, match="member '2' could not be reached"):
        group.registered_async("svc", args=([1],)).wait()
    with pytest.raises(RuntimeError, match="member '2' could not be reached"):
        group.rpc_sync("2", len, args=([1],), timeout=5)
    with pytest.raises(RuntimeError, match="barrier 2 of RPC group 'g'"):
        group.barrier(timeout=3)
    survivors.barrier()
    # rank 1 leaves the world on its own; rank 0's calls to it then fail as well
    if rank == 1:
        world.stop(graceful=False)
        return rank
    deadline = time.monotonic() + 20
    while True:
        try:
            group.rpc_sync("1", len, args=([],), timeout=2)
        except RuntimeError as error:
            assert (
                "member '1' left the world (it stopped its World without waiting for the others)"
                in str(error)
            )
            break
        assert time.monotonic() < deadline, "rank 1 is still answering after it stopped"
        time.sleep(0.05)
    world.stop(graceful=False)
    return rank


@pytest.mark.timeout(90)
def test_dead_or_departed_members_make_calls_fail_instead_of_hanging():
    assert run_ranks(_death_checks, 3, allow_exit=[2]) == [0, 1, Exited(0)]


# -- a member that exits in the middle of the run ------------------------------------------------------------
def _exit_mid_run(rank, leaver):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("g", MEMBERS)  # rank 0 runs the group's barriers
    group.register(f"svc{rank}", len)
    group.barrier()
    if rank == leaver:
        assert group.registered_sync("svc1", args=([1, 2],)) == 2
        exit(0)  # as the 0.3.4 examples end a run: the others are still at work
    left = f"member '{leaver}' left the world"
    start = time.monotonic()
    if rank == 1:  # waits at a barrier that the leaver never reaches
        with pytest.raises(RuntimeError) as caught:
            group.barrier()
        assert re.match(
            rf"barrier 2 of RPC group 'g' (cannot complete|failed): {left} \(its process exited\)",
            str(caught.value),
        ), str(caught.value)
    else:  # keeps calling into the leaver until it is told that the leaver left
        # MemberLeftError (a MemberLostError): code that can go on without a member tells
        # this apart from an error raised by the service itself
        with pytest.raises(MemberLeftError, match=left) as caught:
            while time.monotonic() < start + 25:
                group.registered_sync(f"svc{leaver}", args=([1],))
    took = time.monotonic() - start
    with pytest.raises(
        RuntimeError, match=f"barrier {3 if rank == 1 else 2} of RPC group 'g'.*{left}"
    ):
        group.barrier()  # later barriers fail at once too
    world.stop()  # the leaver waits in its exit for this graceful stop of the others
    return rank, took


@pytest.mark.timeout(120)
@pytest.mark.parametrize("leaver", [2, 0], ids=["a member", "the group's barrier keeper"])
def test_a_rank_that_exits_mid_run_is_named_by_the_others_at_once(leaver):
    results = run_ranks(_exit_mid_run, 3, args=(leaver,), timeout=100)
    assert results[leaver] is None  # exit(0): no result, and its process ended without a signal
    for rank in {0, 1, 2} - {leaver}:
        assert results[rank][0] == rank
        assert results[rank][1] < 10, (
            f"rank {rank} learnt of the departure only after {results[rank][1]} s"
        )


# -- torch's first look at a paired value's class, while a member fetches it --------------------------------
def _plain_method(self):
    return 0


class _Inspection:
    """A class attribute that notices (and, once armed, holds open) a lookup on its class.

    torch RPC looks up every attribute of a value's class the first time it makes an
    RRef to an instance; a pickling thread can add ``__slotnames__`` to the class at the
    same time. This descriptor makes that interleaving certain instead of rare.
    """

    def __init__(self):
        self.armed = False
        self.seen = threading.Event()
        self.pickled = threading.Event()

    def __get__(self, obj, owner):
        if obj is None and self.armed:
            self.seen.set()
            self.pickled.wait(10)
        return _plain_method


class _Paired:
    probe = _Inspection()
    method = _plain_method

    def __init__(self):
        self.payload = [1, 2, 3]


def _pair_while_pickled(rank):
    world = World(rpc_timeout=20)
    group = world.create_rpc_group("g", ["0"])
    value = _Paired()
    group.pair("value", value)
    inspection = _Paired.__dict__["probe"]
    inspection.armed = True

    def pickle_during_inspection():
        inspection.seen.wait(2)  # torch is inside the class's __dict__ if it looks again
        pickle.dumps(value)  # the first pickling adds __slotnames__ to that __dict__
        inspection.pickled.set()

    thread = threading.Thread(target=pickle_during_inspection)
    thread.start()
    try:
        fetched = group.get_paired("value").to_here()
    finally:
        thread.join()
    world.stop()
    return fetched.payload, inspection.seen.is_set(), "__slotnames__" in _Paired.__dict__


def test_get_paired_does_not_race_with_a_member_pickling_the_value():
    # before the fix: RuntimeError("dictionary changed size during iteration") in get_paired
    assert run_ranks(_pair_while_pickled, 1, timeout=40) == [([1, 2, 3], False, True)]
