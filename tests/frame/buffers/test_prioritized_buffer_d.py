"""DistributedPrioritizedBuffer: sampling by priority across members, taint table (2-3 processes; on both
transports, torch RPC and Ray, where a test takes ``run_on``)."""

from collections import OrderedDict

import numpy as np
import pytest

from machin.frame.buffers.prioritized_buffer import PrioritizedBuffer
from machin.frame.buffers.prioritized_buffer_d import DistributedPrioritizedBuffer
from machin.parallel.distributed import World
from tests.frame.buffers.test_buffer_d import transition
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]

EPSILON, ALPHA = 0.01, 0.6
LOW, HIGH = (1.0 + EPSILON) ** ALPHA, (5.0 + EPSILON) ** ALPHA


def _prioritized_checks(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("apex", world.get_members())
    buffer = DistributedPrioritizedBuffer(
        "per",
        group,
        buffer_size=4,
        epsilon=EPSILON,
        alpha=ALPHA,
        beta=0.4,
        generator=np.random.default_rng(rank),
    )
    assert isinstance(buffer, PrioritizedBuffer)
    sent = []  # (member, operation) of every request this process sends over RPC
    remote_call = group.registered_async
    group.registered_async = lambda key, args=(), **kw: (
        sent.append((key.split("/")[1], args[0])),
        remote_call(key, args, **kw),
    )[1]
    group.barrier()
    result = {}
    if rank == 0:
        assert buffer.sample_batch(8) == (0, None, None, None)  # nothing stored anywhere yet
    group.barrier()
    if rank != 0:  # the workers fill their 4 slots, the learner stores nothing
        for i in range(4):
            buffer.append(transition(rank, i), priority=1.0)
    group.barrier()

    if rank == 0:
        sent.clear()
        assert buffer.size() == 0 and buffer.all_size() == 8
        assert sent == [
            ("1", "size"),
            ("2", "size"),
        ]  # its own part is asked in place, not over RPC
        sent.clear()
        size, (marks,), indexes, is_weights = buffer.sample_batch(16, sample_attrs=["mark"])
        assert size == 16 and len(marks) == 16
        assert isinstance(indexes, OrderedDict) and set(indexes) == {"1", "2"}
        offset = 0
        for member, (
            index,
            taint,
        ) in indexes.items():  # values come member by member, in this order
            assert index.dtype == np.int64 and taint.shape == index.shape and np.all(taint == 1)
            assert [m // 100 for m in marks[offset : offset + len(index)]] == [int(member)] * len(
                index
            )
            assert [m % 100 for m in marks[offset : offset + len(index)]] == index.tolist()
            offset += len(index)
        assert np.allclose(is_weights, 1.0)  # equal priorities: uniform sampling
        result["sampled"] = {m: sorted(set(index.tolist())) for m, (index, _) in indexes.items()}
    group.barrier()
    # The learner holds its samples; worker 2 keeps appending (nothing waits for the learner)
    # and overwrites every slot the learner sampled from it.
    if rank == 2:
        for i in range(4, 8):
            buffer.append(transition(rank, i), priority=1.0)
        assert buffer.size() == 4
    group.barrier()
    if rank == 0:
        with pytest.raises(ValueError, match="got 3 priorities for 16 sampled indexes"):
            buffer.update_priority(np.ones(3), indexes)
        sent.clear()
        buffer.update_priority(np.full(16, 5.0), indexes)  # worker 2's updates are stale: dropped
        assert sorted(sent) == [("1", "update"), ("2", "update")]
        sent.clear()
    group.barrier()
    if rank != 0:
        result["leaves"] = buffer.wt_tree.get_leaf_all_weights().tolist()
    group.barrier()

    if rank == 0:
        # importance-sampling weights follow (N * P(j)) ** -curr_beta, normalized to a maximum of 1
        beta = buffer.curr_beta  # the exponent of this sample (it grows afterwards)
        size, (marks,), indexes, is_weights = buffer.sample_batch(64, sample_attrs=["mark"])
        assert buffer.curr_beta == pytest.approx(beta + 1e-3) and buffer.beta == 0.4
        high = {100 + i for i in result["sampled"]["1"]}
        weights = np.array([HIGH if m in high else LOW for m in marks])
        expected = (weights / weights.min()) ** -beta
        assert np.allclose(is_weights, expected)
        # the parts' totals came back with the priority update: only the learner's own (empty)
        # part was asked for its total, in place, and the batch cost one round of requests
        assert sorted(sent) == [("1", "sample"), ("2", "sample")]
        result["high_fraction"] = float(np.mean([m in high for m in marks]))
    group.barrier()
    if rank == 1:
        buffer.clear()
    group.barrier()
    if rank == 0:
        assert buffer.all_size() == 4
        size, (marks,), _, _ = buffer.sample_batch(8, sample_attrs=["mark"])
        assert size == 8 and {m // 100 for m in marks} == {2}
        buffer.all_clear()
        assert buffer.all_size() == 0 and buffer.sample_batch(4) == (0, None, None, None)
    group.barrier()
    world.stop()
    return result


@pytest.mark.timeout(180)
def test_priorities_are_sampled_across_members_and_stale_updates_are_dropped(run_on):
    learner, worker1, worker2 = run_on(_prioritized_checks, 3)
    sampled = learner["sampled"]["1"]
    # worker 1: the sampled slots now have the new priority, the others kept theirs
    assert worker1["leaves"] == pytest.approx([HIGH if i in sampled else LOW for i in range(4)])
    # worker 2: every sampled slot was overwritten after sampling, so nothing changed
    assert worker2["leaves"] == pytest.approx([LOW] * 4)
    # higher priority, sampled more often: about n * HIGH / (total weight) of the batch
    total = 8 * LOW + len(sampled) * (HIGH - LOW)
    assert learner["high_fraction"] == pytest.approx(len(sampled) * HIGH / total, abs=0.2)


def _four_on_member_1(rank, group_name):
    """A two-member world whose buffer holds four transitions of priority 1 on member 1."""
    world = World(rpc_timeout=30)
    group = world.create_rpc_group(group_name, world.get_members())
    buffer = DistributedPrioritizedBuffer(
        "per",
        group,
        buffer_size=4,
        epsilon=EPSILON,
        alpha=ALPHA,
        generator=np.random.default_rng(rank),
    )
    group.barrier()
    if rank == 1:
        for i in range(4):
            buffer.append(transition(rank, i), priority=1.0)
    group.barrier()
    return world, group, buffer


def _with_leaves_of_member_1(rank, world, group, buffer, result):
    """``result``, with member 1's priorities once everyone is done; then the world stops."""
    group.barrier()
    if rank == 1:
        result["leaves"] = buffer.wt_tree.get_leaf_all_weights().tolist()
    group.barrier()
    world.stop()
    return result


def _deferred_checks(rank):
    world, group, buffer = _four_on_member_1(rank, "deferred")
    result = {}
    if rank == 0:
        size, (marks,), indexes, _ = buffer.sample_batch(4, sample_attrs=["mark"])
        result["sampled"] = sorted({m % 100 for m in marks})
        with buffer.deferred_priority_updates():
            with buffer.deferred_priority_updates():  # nested: only the outermost block waits
                buffer.update_priority(np.full(size, 5.0), indexes)
            result["queued_after_inner_block"] = buffer.queued_priority_updates
        result["queued_after_block"] = buffer.queued_priority_updates
        # slot 9 does not exist on member 1: the failure is raised where the block ends
        bad = OrderedDict({"1": (np.array([1, 9]), np.array([1, 1]))})
        with (
            pytest.raises(IndexError, match="index 9 is out of bounds") as failure,
            buffer.deferred_priority_updates(),
        ):
            buffer.update_priority(np.ones(2), bad)
            result["returned_before_the_failure"] = True
        result["remote_traceback"] = type(failure.value.__cause__).__name__
    # the block has ended: member 1 has applied the first update
    return _with_leaves_of_member_1(rank, world, group, buffer, result)


@pytest.mark.timeout(90)
def test_deferred_priority_updates_are_applied_when_the_block_ends_and_failures_surface_there():
    learner, worker = run_ranks(_deferred_checks, 2)
    assert learner["queued_after_inner_block"] == 4 and learner["queued_after_block"] == 0
    assert learner["returned_before_the_failure"]
    assert learner["remote_traceback"] == "RemoteTraceback"  # raised on member 1, carried back
    assert worker["leaves"] == pytest.approx(
        [HIGH if i in learner["sampled"] else LOW for i in range(4)]
    )


def _async_checks(rank):
    world, group, buffer = _four_on_member_1(rank, "async")
    result = {}
    if rank == 0:
        buffer.set_async_priority_updates(True)
        pending = buffer.sample_batch_async(4, sample_attrs=["mark"])
        size, (marks,), indexes, _ = pending.wait()
        assert pending.wait()[0] == size  # waiting again gives the same sample
        result["sampled"] = sorted({m % 100 for m in marks})
        buffer.update_priority(np.full(size, 5.0), indexes)
        result["queued_after_update"] = buffer.queued_priority_updates  # returned without sending
        buffer.wait_priority_updates()
        result["queued_after_wait"] = buffer.queued_priority_updates
        # slot 9 does not exist on member 1: the update returns, its failure comes with the next call
        bad = OrderedDict({"1": (np.array([1, 9]), np.array([1, 1]))})
        buffer.update_priority(np.ones(2), bad)
        result["returned_before_the_failure"] = True
        with pytest.raises(IndexError, match="index 9 is out of bounds") as failure:
            buffer.sample_batch(2)
        result["remote_traceback"] = type(failure.value.__cause__).__name__
        result["sample_after_failure"] = buffer.sample_batch(2)[0]  # the buffer goes on working
    return _with_leaves_of_member_1(rank, world, group, buffer, result)


@pytest.mark.timeout(180)
def test_async_priority_updates_do_not_wait_and_a_failure_surfaces_on_the_next_call(run_on):
    learner, worker = run_on(_async_checks, 2)
    assert learner["queued_after_update"] == 4 and learner["queued_after_wait"] == 0
    assert (
        learner["returned_before_the_failure"] and learner["remote_traceback"] == "RemoteTraceback"
    )
    assert learner["sample_after_failure"] == 2
    assert worker["leaves"] == pytest.approx(
        [HIGH if i in learner["sampled"] else LOW for i in range(4)]
    )


def _batches_checks(rank):
    world, group, buffer = _four_on_member_1(rank, "batches")
    result = {}
    if rank == 0:
        buffer.set_async_priority_updates(True)
        sent = []  # (member, operation) of every request sent over RPC
        remote_call = group.registered_async
        group.registered_async = lambda key, args=(), **kw: (
            sent.append((key.split("/")[1], args[0])),
            remote_call(key, args, **kw),
        )[1]
        beta = buffer.curr_beta
        samples = buffer.sample_batches_async(3, 4, sample_attrs=["mark"]).wait()
        result["sizes"] = [size for size, *_ in samples]
        result["rows_match_indexes"] = all(
            list(indexes) == ["1"]
            and [m % 100 for m in marks] == indexes["1"][0].tolist()
            and {m // 100 for m in marks} == {1}
            and weights.max() == 1.0
            for _, (marks,), indexes, weights in samples
        )
        result["beta_steps"] = round((buffer.curr_beta - beta) / buffer.beta_increment_per_sampling)
        result["first_requests"] = list(sent)
        size, _, indexes, _ = samples[0]
        buffer.update_priority(np.full(size, 5.0), indexes)
        result["queued"] = buffer.queued_priority_updates
        result["updated"] = sorted(set(indexes["1"][0].tolist()))
        sent.clear()
        buffer.sample_batches_async(2, 4).wait()  # the queued priorities travel with this request
        result["carrying_requests"] = list(sent)
        result["queued_after"] = buffer.queued_priority_updates
        sent.clear()
        buffer.sample_batches_async(2, 4).wait()  # the totals came back with the previous answer
        result["next_requests"] = list(sent)
        with pytest.raises(ValueError, match="batches must be a positive int, got 0"):
            buffer.sample_batches_async(0, 4)
    return _with_leaves_of_member_1(rank, world, group, buffer, result)


@pytest.mark.timeout(180)
def test_several_batches_come_in_one_request_which_carries_the_queued_priorities(run_on):
    learner, worker = run_on(_batches_checks, 2)
    assert learner["sizes"] == [4, 4, 4] and learner["rows_match_indexes"]
    assert learner["beta_steps"] == 3  # one step per batch, as three sample_batch calls make
    assert learner["first_requests"] == [("1", "weight"), ("1", "sample")]
    assert learner["queued"] == 4 and learner["queued_after"] == 0
    assert learner["carrying_requests"] == [
        ("1", "weight"),
        ("1", "sample"),
    ]  # no update request of its own
    assert learner["next_requests"] == [("1", "sample")]
    assert worker["leaves"] == pytest.approx(
        [HIGH if i in learner["updated"] else LOW for i in range(4)]
    )
