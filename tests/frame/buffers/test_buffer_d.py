"""DistributedBuffer: local parts, group-wide size, clear and sampling (3-process world, on both transports)."""

import pytest
import torch

from machin.frame.buffers.buffer import Buffer
from machin.frame.buffers.buffer_d import DistributedBuffer
from machin.parallel.distributed import World
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]

MEMBERS = ["0", "1", "2"]
ALL_MARKS = sorted(r * 100 + i for r in range(3) for i in range(r + 2))  # rank r stores r + 2


def transition(rank, i, device="cpu"):
    mark = rank * 100 + i
    return {
        "state": {"state": torch.full((1, 2), float(mark), device=device)},
        "action": {"action": torch.tensor([[i]], device=device)},
        "next_state": {"state": torch.zeros(1, 2, device=device)},
        "reward": float(i),
        "terminal": i % 2 == 0,
        "mark": mark,
    }


def _first_of_each_member(buffer, size):
    return Buffer.sample_method_all(buffer, size)


def _distributed_buffer_checks(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("buffers", MEMBERS)
    buffer = DistributedBuffer(
        "replay", group, buffer_size=20, generator=torch.Generator().manual_seed(rank)
    )
    with pytest.raises(ValueError, match="buffer_name 'replay' is already used in group 'buffers'"):
        DistributedBuffer("replay", group, 5)
    group.barrier()
    assert buffer.sample_batch(4) == (0, None)  # every part is empty
    group.barrier()

    for i in range(rank + 2):
        buffer.append(transition(rank, i))
    assert buffer.size() == rank + 2  # append is local
    assert buffer.buffer_device == torch.device("cpu")
    group.barrier()
    assert buffer.all_size() == 9

    # "all": every transition of every member
    size, (state, reward, marks) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["state", "reward", "mark"]
    )
    assert size == 9 and sorted(marks) == ALL_MARKS
    assert torch.equal(state["state"][:, 0], torch.tensor(marks, dtype=torch.float32))
    assert reward.shape == (9, 1)

    # "random_unique": distinct transitions from the whole group, as many as exist at most
    size, (state, action, marks) = buffer.sample_batch(6, sample_attrs=["state", "action", "mark"])
    assert size == 6 and len(set(marks)) == 6 and set(marks) <= set(ALL_MARKS)
    assert state["state"].shape == (6, 2) and action["action"].shape == (6, 1)
    size, (marks,) = buffer.sample_batch(50, sample_attrs=["mark"])
    assert size == 9 and sorted(marks) == ALL_MARKS

    # "random": with replacement
    size, (marks, terminal) = buffer.sample_batch(
        40, sample_method="random", sample_attrs=["mark", "terminal"]
    )
    assert size == 40 and set(marks) <= set(ALL_MARKS) and terminal.dtype == torch.bool

    # the Buffer contract: "*" gathers the remaining custom attributes, unknown names are skipped,
    # additional_concat_attrs turns a custom attribute into a [B, 1] tensor, concatenate=False gives lists
    size, (reward, others) = buffer.sample_batch(3, sample_attrs=["reward", "nothing", "*"])
    assert (
        size == 3
        and reward.shape == (3, 1)
        and list(others) == ["mark"]
        and len(others["mark"]) == 3
    )
    size, (marks,) = buffer.sample_batch(4, sample_attrs=["mark"], additional_concat_attrs=["mark"])
    assert isinstance(marks, torch.Tensor) and marks.shape == (4, 1)
    size, (state, reward) = buffer.sample_batch(
        4, concatenate=False, device="cpu", sample_attrs=["state", "reward"]
    )
    assert len(state["state"]) == 4 and all(s.shape == (1, 2) for s in state["state"])
    assert all(isinstance(r, float) for r in reward)
    size, values = buffer.sample_batch(2)
    assert len(values) == 6  # every attribute, in the stored order

    # a callable sample method runs on every member with a share of the batch
    size, (marks,) = buffer.sample_batch(
        9, sample_method=_first_of_each_member, sample_attrs=["mark"]
    )
    assert size == 9 and sorted(marks) == ALL_MARKS
    size, (marks,) = buffer.sample_batch(
        9, sample_method=lambda buf, n: (min(n, 1), [0][:n]), sample_attrs=["mark"]
    )
    assert sorted(marks) == [0, 100, 200]  # the oldest transition of each member
    with pytest.raises(
        ValueError, match="sample_method must be 'random_unique', 'random', 'all' or a callable"
    ):
        buffer.sample_batch(2, sample_method="best")

    # clear() is local, all_clear() empties every member
    group.barrier()
    if rank == 2:
        buffer.clear()
        assert buffer.size() == 0
    group.barrier()
    assert buffer.all_size() == 5
    group.barrier()
    if rank == 0:
        buffer.all_clear()
    group.barrier()
    assert buffer.size() == 0 and buffer.all_size() == 0
    assert buffer.sample_batch(3) == (0, None)
    world.stop()
    return rank


@pytest.mark.timeout(180)
def test_parts_are_local_and_sampling_spans_the_group(run_on):
    assert run_on(_distributed_buffer_checks, 3) == [0, 1, 2]


def _cuda_checks(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("buffers", world.get_members())
    buffer = DistributedBuffer("replay", group, buffer_size=8)
    buffer.append(transition(rank, 0, device="cuda"))
    stored = buffer.sample_batch(1, sample_attrs=["state"])[1][0]["state"]
    moved = buffer.sample_batch(1, device="cuda", sample_attrs=["state"])[1][0]["state"]
    world.stop()
    return stored.device.type, moved.device.type


@pytest.mark.timeout(90)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_transitions_are_stored_on_the_cpu():
    # a forked child cannot use CUDA once the parent has touched it (the skipif above does)
    assert run_ranks(_cuda_checks, 1, start_method="spawn") == [("cpu", "cuda")]
