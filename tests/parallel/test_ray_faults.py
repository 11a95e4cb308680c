"""Faults on the Ray transport: a sampler restarted by Ray rejoins, a dead learner is reported.

The runs use the two-node cluster of :mod:`tests.ray_cluster` (rank 0 is the learner,
ranks 1 and 2 are samplers). A rank dies the hard way, by SIGKILL of its own actor
process, so it has no chance to tell anyone.
"""

import functools
import os
import signal
import threading
import time

import pytest
import torch

from machin.parallel.distributed import World
from machin.parallel.distributed._names import NameService
from machin.parallel.distributed._transport import MemberLostError
from machin.parallel.distributed.launcher import LaunchError
from machin.parallel.distributed.ray_launcher import launch_ray
from machin.parallel.distributed.transport import Transport
from machin.parallel.distributed.transport.ray import restarts
from tests.ray_cluster import RAY_TIMEOUT

MEMBERS = ["0", "1", "2"]
#: Seconds a rank waits for something before it fails (well inside RAY_TIMEOUT).
_PATIENCE = 60.0


def _single_threaded(target, rank, *args):
    torch.set_num_threads(1)
    return target(rank, *args)


def _launch(target, **options):
    return launch_ray(
        functools.partial(_single_threaded, target), 3, timeout=RAY_TIMEOUT, **options
    )


def _poll(condition, what):
    """Wait until ``condition()`` holds, at most ``_PATIENCE`` seconds."""
    deadline = time.monotonic() + _PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {_PATIENCE} s")
        time.sleep(0.05)


# -- a sampler killed and restarted ------------------------------------------------------------
def _learner(world, group):
    seen, lock = set(), threading.Lock()
    dying, finished = threading.Event(), threading.Event()

    def report(rank, incarnation, last):
        with lock:
            seen.add((rank, incarnation))
        if last:
            dying.set()
        if (2, 1) in seen:
            finished.set()
        return finished.is_set()

    group.register("report", report)
    group.barrier()  # barrier 1: every sampler has registered its own service and value
    world.barrier()  # the first barrier of the world's own group
    _poll(dying.is_set, "the last report of sampler 2 before its death")
    # the learner goes on while sampler 2 is away: its calls to it fail with MemberLostError
    outcomes, answer = [], None
    deadline = time.monotonic() + _PATIENCE
    while time.monotonic() < deadline:
        try:
            answer = group.registered_sync("sampler-2", timeout=5)
        except MemberLostError:
            outcomes.append("lost")
        except KeyError:  # the new process is readmitted and has not registered again yet
            outcomes.append("not registered")
        else:
            if answer == 1:
                break
            outcomes.append(answer)  # the old process, before the signal got it
        time.sleep(0.05)
    paired = group.get_paired("state-2").to_here()
    _poll(finished.is_set, "a report of the restarted sampler 2")
    group.barrier()  # barrier 2, with the restarted sampler
    world.barrier()
    return {"seen": sorted(seen), "outcomes": outcomes, "answer": answer, "paired": paired}


def _sampler(rank, world, group):
    incarnation = restarts()
    group.pair(f"state-{rank}", incarnation)  # replaces what a dead process of this rank held
    group.register(f"sampler-{rank}", lambda: incarnation)
    if incarnation == 0:
        group.barrier()  # barrier 1; a restarted process is readmitted past it
        world.barrier()  # and past this one (its next world.barrier is the others' second)
    else:
        with pytest.raises(RuntimeError, match="World '2' rejoined the run after its Ray actor"):
            world.create_collective_group([0, 1, 2])
    calls, done = 0, False
    deadline = time.monotonic() + _PATIENCE
    while not done and time.monotonic() < deadline:
        last = rank == 2 and incarnation == 0 and calls == 3
        done = group.registered_sync("report", args=(rank, incarnation, last))
        calls += 1
        if last:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)
    group.barrier()  # barrier 2
    world.barrier()
    return {
        "rank": rank,
        "restarts": incarnation,
        "done": done,
        "rejoined": world.transport.rejoined,
    }


def _restarted_sampler_run(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("g", MEMBERS)
    result = _learner(world, group) if rank == 0 else _sampler(rank, world, group)
    world.stop()
    return result


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_killed_sampler_is_restarted_and_rejoins_while_the_learner_goes_on(ray_cluster):
    learner, first, second = _launch(_restarted_sampler_run, restart=[1, 2], max_restarts=1)
    assert first == {"rank": 1, "restarts": 0, "done": True, "rejoined": False}
    assert second == {"rank": 2, "restarts": 1, "done": True, "rejoined": True}
    assert learner["seen"] == [(1, 0), (2, 0), (2, 1)]
    # the new process's service and value replaced the dead one's (no KeyError on registering)
    assert learner["answer"] == 1 and learner["paired"] == 1
    assert "lost" in learner["outcomes"], learner["outcomes"]
    assert set(learner["outcomes"]) <= {"lost", "not registered", 0}


# -- a learner that dies ---------------------------------------------------------------------------
def _dying_learner_run(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("g", MEMBERS)
    if rank == 0:
        callers = set()
        group.register("report", lambda sampler: callers.add(sampler))
        group.barrier()
        _poll(lambda: callers == {1, 2}, "a report of each sampler")
        os.kill(os.getpid(), signal.SIGKILL)
    group.barrier()
    deadline = time.monotonic() + _PATIENCE
    try:
        while time.monotonic() < deadline:
            group.registered_sync("report", args=(rank,), timeout=10)
            time.sleep(0.05)
    except MemberLostError as error:
        lost = error
    else:
        raise AssertionError("the calls to the dead learner did not fail")
    world.stop(graceful=False)
    raise lost


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_dead_learner_is_named_to_every_sampler_and_fails_the_launch(ray_cluster):
    with pytest.raises(LaunchError) as caught:
        _launch(_dying_learner_run, restart=[1, 2], failure_grace=60)
    errors = caught.value.exceptions
    assert sorted(errors) == [0, 1, 2] and caught.value.unfinished == []
    assert "the actor of rank 0 died" in str(errors[0])
    assert "rank 0 failed" in str(caught.value)
    for sampler in (1, 2):
        assert isinstance(errors[sampler], MemberLostError)
        assert "calling service 'report' of RPC group 'g' failed: member '0' died" in str(
            errors[sampler]
        )


# -- a sampler that dies before the world has formed ----------------------------------------------
def _early_death_run(rank):
    if rank == 2 and restarts() == 0:
        os.kill(os.getpid(), signal.SIGKILL)  # before its World: the others wait for it
    world = World(rpc_timeout=30)
    every = world.create_collective_group([0, 1, 2])
    total = torch.tensor([rank + 1.0])
    every.all_reduce(total)
    rejoined = world.transport.rejoined
    world.stop()
    return restarts(), rejoined, total.item()


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_sampler_dead_before_the_world_formed_takes_its_place_after_its_restart(ray_cluster):
    results = _launch(_early_death_run, restart=[2])
    # it is in the default process group like the others: its collectives work
    assert results == [(0, False, 6.0), (0, False, 6.0), (1, False, 6.0)]


# -- a sampler that dies more often than it may be restarted ------------------------------------
def _dying_sampler_run(rank):
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # in every process Ray starts for it
    World(rpc_timeout=30)  # fails: rank 2 is gone for good
    raise AssertionError("rank 2 never started a World")


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_sampler_that_dies_once_too_often_fails_the_launch(ray_cluster):
    with pytest.raises(LaunchError) as caught:
        _launch(_dying_sampler_run, restart=[2], max_restarts=1, failure_grace=60)
    errors = caught.value.exceptions
    assert sorted(errors) == [0, 1, 2] and caught.value.unfinished == []
    assert "the actor of rank 2 died after 1 restart(s)" in str(errors[2])
    for other in (0, 1):
        assert isinstance(errors[other], MemberLostError)
        assert f"rank 2 could not be reached while the World of rank {other} started" in str(
            errors[other]
        )


# -- arguments -----------------------------------------------------------------------------------
def test_restart_arguments_are_checked():
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match=r"restart must list ranks in \[0, 2\], got \[1, 3\]"):
        launch_ray(len, 3, restart=[1, 3])
    with pytest.raises(ValueError, match="max_restarts must be a positive int, got 0"):
        launch_ray(len, 3, restart=[1], max_restarts=0)


def test_the_first_member_of_a_group_cannot_rejoin_it():
    transport = Transport("0", 0, 2, timeout=5.0)
    transport.rejoined = True  # as in a restarted Ray rank
    names = NameService("0", 5.0, transport)
    with pytest.raises(
        RuntimeError,
        match=r"member '0' rejoined the world after its process was restarted, but it is "
        r"the first member \(the manager\) of RPC group 'g'",
    ):
        names.create_group("g", ["0", "1"], 5.0)
    assert not names.has_group("g")


def _waits_forever_on_rank_1(rank):
    if rank == 1:
        threading.Event().wait()  # never set: the launch's timeout ends it
    return rank


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_rank_still_running_at_the_timeout_has_its_stacks_printed(ray_cluster, capfd):
    # (rank 0 returns at once, but on a busy machine its actor may still be starting at the timeout)
    with pytest.raises(
        LaunchError, match=r"ranks \[(0, )?1\] were still running and were killed when the 20 s"
    ):
        launch_ray(_waits_forever_on_rank_1, 2, timeout=20)
    printed = capfd.readouterr().err
    assert "rank 1 was still running; its threads:" in printed
    assert "_waits_forever_on_rank_1" in printed  # the frame it was stuck in


def _where(rank):
    import ray

    from machin.parallel.distributed.roles import node_rank

    return node_rank(), ray.get_runtime_context().get_node_id()


def test_node_rank_numbers_the_ray_nodes_of_the_ranks(ray_cluster):
    # RunControl names a rank's node by node_rank(); on Ray it was 0 for every rank
    import ray

    results = launch_ray(
        _where, 2, timeout=RAY_TIMEOUT, actor_options={"scheduling_strategy": "SPREAD"}
    )
    alive = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
    assert len(alive) == 2
    for index, node_id in results:
        assert index == alive.index(node_id)
    assert sorted(index for index, _ in results) == [0, 1]  # SPREAD put one rank on each node
