"""Short rows (at most 64 values in one dimension) are read as lists of Python numbers: stored exactly."""

import pytest
import torch

from machin.frame.buffers.buffer import Buffer


def step(row: torch.Tensor, i: int) -> dict:
    return {
        "state": {"s": row.roll(i, 1)},
        "action": {"a": torch.tensor([[i]])},
        "next_state": {"s": row.roll(i + 1, 1)},
        "reward": float(i),
        "terminal": False,
    }


@pytest.mark.parametrize(
    "dtype, values",
    [
        (torch.float16, [0.1, -2.5, 65504.0]),
        (torch.float32, [0.1, 1e-45, 3.4e38]),
        (torch.float64, [0.1, 1e-300, 1.7e308]),
        (torch.int64, [2**63 - 1, -(2**63), 7]),
        (torch.int8, [-128, 127, 0]),
        (torch.uint8, [0, 255, 3]),
        (torch.bool, [True, False, True]),
        (torch.complex64, [1 + 2j, -3j, 0.5]),
    ],
)
def test_short_rows_of_every_dtype_are_stored_exactly(dtype, values):
    row = torch.tensor([values], dtype=dtype)
    buffer = Buffer(8)
    for i in range(3):  # one row at a time
        buffer.append(step(row, i))
    buffer.extend([step(row, i) for i in range(3, 6)])  # a block of rows
    _, (state, action) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["state", "action"]
    )
    assert state["s"].dtype == dtype
    assert torch.equal(state["s"], torch.cat([row.roll(i, 1) for i in range(6)]))
    assert action["a"].view(-1).tolist() == list(range(6))


def test_a_short_row_with_a_nan_is_named_with_its_transition():
    buffer = Buffer(8)
    buffer.append(step(torch.ones(1, 3), 0))
    episode = [step(torch.ones(1, 3), i) for i in range(1, 5)]
    episode[2]["next_state"]["s"] = torch.tensor([[1.0, float("nan"), 2.0]])
    with pytest.raises(
        ValueError,
        match=r"attribute next_state\['s'\] must hold finite values, got nan in "
        r"transition 2 \(values are checked when stored",
    ):
        buffer.extend(episode)
    assert buffer.size() == 1


def test_a_device_this_process_cannot_use_is_refused_naming_the_option():
    missing = "cuda:99" if torch.cuda.is_available() else "cuda"  # no such device in this process
    with pytest.raises(
        ValueError, match=rf"buffer_device='{missing}' cannot hold tensors in this process"
    ):
        Buffer(10, buffer_device=missing)
    with pytest.raises(
        ValueError, match=r"buffer_device='gpu0' cannot hold tensors in this process"
    ):
        Buffer(10, buffer_device="gpu0")
    assert Buffer(10, buffer_device="cpu").buffer_device == torch.device("cpu")
