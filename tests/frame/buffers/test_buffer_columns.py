"""Buffer.extend_columns (a block of transitions, one checked write per column), reserve and _keep_oldest."""

import numpy as np
import pytest
import torch

from machin.frame.buffers import Buffer, PrioritizedBuffer
from machin.frame.transition import Transition


def block(n, start=0, state_dim=3, **overrides):
    """``n`` transitions as columns: state rows ``start..start+n-1`` in every feature."""
    rows = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(1).repeat(1, state_dim)
    columns = {
        "state": {"state": rows},
        "action": {"action": rows[:, :1] * 10},
        "next_state": {"state": rows + 1},
        "reward": torch.arange(start, start + n, dtype=torch.float64),
        "terminal": torch.zeros(n, dtype=torch.bool),
    }
    columns.update(overrides)
    return columns


def one(i, state_dim=3):
    return Transition(
        state={"state": torch.full((1, state_dim), float(i))},
        action={"action": torch.full((1, 1), 10.0 * i)},
        next_state={"state": torch.full((1, state_dim), float(i + 1))},
        reward=float(i),
        terminal=False,
    )


def everything(buffer):
    _, (state, action, reward, next_state, terminal) = buffer.sample_batch(
        0,
        sample_method="all",
        sample_attrs=["state", "action", "reward", "next_state", "terminal"],
    )
    return state["state"], action["action"], reward, next_state["state"], terminal


def test_a_block_reads_back_as_the_same_transitions_stored_one_by_one():
    by_block, by_row = Buffer(100), Buffer(100)
    assert by_block.extend_columns(block(5)) == 5
    by_row.extend([one(i) for i in range(5)])
    for a, b in zip(everything(by_block), everything(by_row)):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert by_block[2].reward == 2.0 and by_block[2].terminal is False


def test_blocks_append_after_transitions_and_wrap_around_the_ring():
    buffer = Buffer(8)
    buffer.append(one(0))
    buffer.extend_columns(block(4, start=1))
    assert everything(buffer)[0][:, 0].tolist() == [0, 1, 2, 3, 4]
    buffer.extend_columns(block(6, start=5))  # 11 in all: the 3 oldest are overwritten
    assert buffer.size() == 8
    assert everything(buffer)[0][:, 0].tolist() == [3, 4, 5, 6, 7, 8, 9, 10]


def test_a_block_longer_than_the_buffer_keeps_its_newest_rows():
    buffer = Buffer(4)
    assert buffer.extend_columns(block(10)) == 10
    assert everything(buffer)[2].view(-1).tolist() == [6.0, 7.0, 8.0, 9.0]


def test_numbers_may_come_as_lists_arrays_or_column_tensors():
    buffer = Buffer(10)
    buffer.extend_columns(block(3, reward=[1.0, 2.0, 3.0], terminal=np.array([0, 0, 1])))
    buffer.extend_columns(
        block(2, reward=torch.ones(2, 1), terminal=torch.tensor([[True], [False]]))
    )
    _, _, reward, _, terminal = everything(buffer)
    assert reward.view(-1).tolist() == [1, 2, 3, 1, 1]
    assert terminal.view(-1).tolist() == [0, 0, 1, 1, 0]


def test_custom_attributes_are_stored_as_numbers_or_objects():
    buffer = Buffer(10)
    buffer.extend_columns({**block(2), "steps": torch.tensor([1, 2]), "note": ["a", "b"]})
    assert buffer[0].steps == 1 and buffer[1].note == "b"
    buffer.extend_columns({**block(1), "steps": torch.tensor([0.5]), "note": ["c"]})  # int -> float
    assert [buffer[i].steps for i in range(3)] == [1.0, 2.0, 0.5]


@pytest.mark.parametrize(
    "columns, message",
    [
        (
            block(2, state=torch.zeros(2, 3)),
            r"major attribute 'state' must be a dict \{key: tensor\[n, \.\.\.\]\}, got Tensor",
        ),
        (
            {**block(3), "state": {"state": torch.zeros(3, 3, dtype=torch.float64)}},
            r"attribute state\['state'\] must be a tensor of 3 rows of shape \[3\] and dtype "
            r"torch.float32, got shape \[3, 3\] and dtype torch.float64",
        ),
        (
            {
                **block(3),
                "state": {"state": torch.tensor([[0.0] * 3, [0.0, float("nan"), 0.0], [0.0] * 3])},
            },
            r"attribute state\['state'\] must hold finite values, got nan in transition 1",
        ),
        (
            block(3, reward=torch.tensor([0.0, 0.0, float("inf")])),
            r"attribute 'reward' must hold finite values, got inf in transition 2",
        ),
        (
            block(2, terminal=torch.tensor([0, 2])),
            r"attribute 'terminal' must be a bool or 0/1, got 2 in transition 1",
        ),
        (
            block(2, reward=torch.zeros(3)),
            r"every column of a block must have the same number of rows",
        ),
        ({**block(2), "extra": torch.zeros(2)}, r"different attributes"),
        (
            {k: v for k, v in block(2).items() if k != "reward"},
            r"missing required attribute\(s\) \['reward'\]",
        ),
        (
            {**block(2), "action": {"other": torch.zeros(2, 1)}},
            r"major attribute 'action' has keys \['other'\]",
        ),
        (
            block(2, reward=torch.zeros(2, 2)),
            r"attribute 'reward' must be 2 real numbers \(shape \[2\] or \[2, 1\]\)",
        ),
    ],
)
def test_a_bad_block_is_refused_naming_the_problem_and_nothing_is_written(columns, message):
    buffer = Buffer(10)
    buffer.extend_columns(block(2))
    before = [t.clone() for t in everything(buffer)]
    with pytest.raises(ValueError, match=message):
        buffer.extend_columns(columns)
    assert buffer.size() == 2
    for a, b in zip(before, everything(buffer)):
        assert torch.equal(a, b)
    buffer.extend_columns(block(1, start=7))  # still takes good blocks after the refusal
    assert everything(buffer)[0][:, 0].tolist() == [0, 1, 7]


def test_a_refused_first_block_leaves_no_layout_behind():
    buffer = Buffer(10)
    with pytest.raises(ValueError, match="finite"):
        buffer.extend_columns(block(2, reward=torch.tensor([0.0, float("nan")])))
    assert buffer.size() == 0 and buffer.attribute_names is None
    buffer.extend_columns(block(2, state_dim=5))  # another layout is fine now
    assert everything(buffer)[0].shape == (2, 5)


def test_check_finite_off_lets_nan_through():
    buffer = Buffer(10, check_finite=False)
    buffer.extend_columns(block(2, reward=torch.tensor([float("nan"), 1.0])))
    assert torch.isnan(everything(buffer)[2][0, 0])


def test_a_failed_write_puts_a_widened_column_back():
    buffer = Buffer(10)
    buffer.extend_columns({**block(2), "steps": torch.tensor([1, 2]), "zz": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"attribute 'zz' must be 1 real numbers"):
        # "steps" is widened to floats before "zz" is found wrong
        buffer.extend_columns({**block(1), "steps": torch.tensor([0.5]), "zz": torch.zeros(1, 2)})
    assert buffer._custom["steps"].kind is int and buffer[1].steps == 2 and buffer.size() == 2


def test_buffers_with_their_own_extend_refuse_blocks():
    with pytest.raises(TypeError, match="PrioritizedBuffer stores through its own extend"):
        PrioritizedBuffer(10).extend_columns(block(2))


def test_reserve_allocates_once_and_keeps_the_rows():
    buffer = Buffer(10_000)
    with pytest.raises(ValueError, match="reserve needs the columns"):
        buffer.reserve(10)
    buffer.extend_columns(block(3))
    assert buffer._capacity == 1024  # the first allocation
    buffer.reserve(2000)
    assert buffer._capacity == 2003
    column = buffer._major["state"]["state"].tensor
    buffer.extend_columns(block(2000, start=3))
    assert buffer._major["state"]["state"].tensor is column  # no growth after the reservation
    assert everything(buffer)[0][:, 0].tolist() == list(range(2003))
    buffer.reserve(10**6)  # capped at buffer_size
    assert buffer._capacity == 10_000
    with pytest.raises(ValueError, match="count must be a non-negative integer, got -1"):
        buffer.reserve(-1)


def test_keep_oldest_forgets_the_newest_rows():
    buffer = Buffer(100)
    buffer.extend_columns(block(5))
    buffer.extend_columns(block(3, start=5))
    buffer._keep_oldest(5)
    buffer.extend_columns(block(1, start=40))
    assert everything(buffer)[0][:, 0].tolist() == [0, 1, 2, 3, 4, 40]
    buffer._keep_oldest(0)
    assert buffer.size() == 0 and buffer.attribute_names is None
