"""Buffer.state_dict / load_state_dict: an exact copy through ``torch.load(weights_only=True)``, and refusals."""

import io

import numpy as np
import pytest
import torch

from machin.frame.buffers import Buffer, PrioritizedBuffer, SequenceBuffer
from machin.frame.buffers.buffer_state import BufferStateError


def _step(i: int, **custom):
    return {
        "state": {"state": torch.full((1, 3), float(i))},
        "action": {"action": torch.tensor([[i % 2]])},
        "next_state": {"state": torch.full((1, 3), i + 1.0)},
        "reward": i / 3,
        "terminal": i % 5 == 0,
        **custom,
    }


def _round_trip(state):
    """``state`` written with torch.save and read back with weights_only=True."""
    file = io.BytesIO()
    torch.save(state, file)
    file.seek(0)
    return torch.load(file, weights_only=True)


def test_ring_buffer_comes_back_exactly():
    buffer = Buffer(10, generator=torch.Generator().manual_seed(1))
    for i in range(23):  # wraps around twice
        buffer.append(_step(i, count=i))
    copy = Buffer(10, generator=torch.Generator().manual_seed(99))
    copy.load_state_dict(_round_trip(buffer.state_dict()))
    assert (copy._pos, copy.size()) == (buffer._pos, buffer.size()) == (3, 10)
    assert [t["count"] for t in copy] == [t["count"] for t in buffer] == list(range(13, 23))
    ours, theirs = buffer.sample_batch(6), copy.sample_batch(6)  # same generator state: same rows
    assert torch.equal(ours[1][0]["state"], theirs[1][0]["state"])
    copy.append(_step(23, count=23))
    buffer.append(_step(23, count=23))
    assert [t["count"] for t in copy] == [t["count"] for t in buffer]


def test_prioritized_buffer_keeps_its_tree_beta_and_generator():
    buffer = PrioritizedBuffer(16, generator=np.random.default_rng(3))
    for i in range(20):
        buffer.append(_step(i), priority=float(i % 4) + 0.5)
    buffer.sample_batch(4)
    copy = PrioritizedBuffer(16, generator=np.random.default_rng(7))
    copy.load_state_dict(_round_trip(buffer.state_dict()))
    assert copy.curr_beta == buffer.curr_beta
    assert np.array_equal(copy.wt_tree.weights, buffer.wt_tree.weights)
    ours, theirs = buffer.sample_batch(5), copy.sample_batch(5)
    assert np.array_equal(ours[2], theirs[2]) and np.array_equal(ours[3], theirs[3])


def test_sequence_buffer_keeps_its_episode_count():
    buffer = SequenceBuffer(40, sequence_length=2, burn_in=0, n_step=1)
    for length in (4, 6):
        buffer.store_episode([_step(i) for i in range(length)])
    copy = SequenceBuffer(40, sequence_length=2, burn_in=0, n_step=1)
    copy.load_state_dict(_round_trip(buffer.state_dict()))
    assert copy._episodes == buffer._episodes == 2
    assert copy.size() == buffer.size() == 10


def test_empty_buffer_round_trips():
    copy = Buffer(5)
    copy.append(_step(0))
    copy.load_state_dict(_round_trip(Buffer(5).state_dict()))
    assert copy.size() == 0 and copy.attribute_names is None


def test_other_columns_are_refused_and_nothing_changes():
    saved = Buffer(8)
    for i in range(3):
        saved.append(_step(i, weight=0.5))
    buffer = Buffer(8)
    for i in range(4):
        buffer.append(_step(i))
    with pytest.raises(BufferStateError, match="other columns.*'weight'"):
        buffer.load_state_dict(saved.state_dict())
    assert buffer.size() == 4 and [float(t["state"]["state"][0, 0]) for t in buffer] == [
        0.0,
        1.0,
        2.0,
        3.0,
    ]


def test_other_size_and_class_are_refused():
    state = Buffer(8).state_dict()
    with pytest.raises(BufferStateError, match="buffer_size=8.*buffer_size=9"):
        Buffer(9).load_state_dict(state)
    with pytest.raises(
        BufferStateError, match="state is of a Buffer, the buffer is a PrioritizedBuffer"
    ):
        PrioritizedBuffer(8).load_state_dict({**state, "priority": {"tree": {}}})


def test_inconsistent_state_is_refused():
    buffer = Buffer(8)
    for i in range(3):
        buffer.append(_step(i))
    state = buffer.state_dict()
    state["layout"]["sub"]["reward"]["rows"] = state["layout"]["sub"]["reward"]["rows"][:2]
    with pytest.raises(
        BufferStateError, match="column 'reward' holds 2 rows, but the state's size is 3"
    ):
        Buffer(8).load_state_dict(state)


def test_python_objects_cannot_be_saved():
    buffer = Buffer(4)
    buffer.append(_step(0, note={"a": 1}))
    with pytest.raises(BufferStateError, match="column 'note' holds Python objects \\(dict\\)"):
        buffer.state_dict()


def _weighted_step(i: int, dtype: torch.dtype):
    step = _step(i)
    step["state"]["weight"] = torch.full((1, 2), i, dtype=dtype)
    return step


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_partly_filled_column_is_saved_without_its_empty_rows_and_shared_where_numpy_can(dtype):
    buffer = Buffer(10_000)
    buffer.extend([_weighted_step(i, dtype) for i in range(1024)])
    buffer.append(_weighted_step(1024, dtype))  # the columns grow to 2048 rows
    column = buffer._major["state"]["weight"].tensor
    assert column.shape[0] == 2048 and buffer.size() == 1025
    state = buffer.state_dict()
    states, weights = (
        state["layout"]["major"]["state"][key]["rows"] for key in ("state", "weight")
    )
    assert (
        states.untyped_storage().nbytes() == 1025 * 3 * 4
    )  # torch.save writes the filled rows only
    assert states.data_ptr() == buffer._major["state"]["state"].tensor.data_ptr()  # not a copy
    assert weights.untyped_storage().nbytes() == 1025 * 2 * weights.element_size()
    assert (weights.data_ptr() == column.data_ptr()) == (
        dtype == torch.float32
    )  # numpy lacks bfloat16: copied
    file = io.BytesIO()
    torch.save(state, file)
    assert len(file.getvalue()) < 1025 * (3 + 2 + 3 + 1 + 1 + 1) * 8 + 10_000
    copy = Buffer(10_000)
    copy.load_state_dict(_round_trip(state))
    assert torch.equal(
        torch.cat([t["state"]["weight"] for t in copy]),
        torch.cat([t["state"]["weight"] for t in buffer]),
    )
    assert [t["state"]["state"][0, 0].item() for t in copy] == list(range(1025))
