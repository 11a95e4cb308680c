"""machin.frame.normalization: running statistics and the state filter (used by ARS)."""

import numpy as np
import pytest
import torch

from machin.frame.normalization import MeanStdFilter, RunningStat


# -- RunningStat ------------------------------------------------------------------------------
def test_running_stat_matches_numpy_for_single_samples_and_batches():
    data = np.random.default_rng(0).normal(3.0, 2.0, size=(50, 2, 3))
    one_by_one, batched = RunningStat((2, 3)), RunningStat([2, 3])
    for x in data:
        one_by_one.push(torch.from_numpy(x))
    batched.push(data[:1])  # a batch of one
    batched.push(torch.from_numpy(data[1:20]).float())  # any real dtype is converted to float64
    batched.push(data[20:])
    for stat in (one_by_one, batched):
        assert stat.n == 50 and stat.shape == torch.Size([2, 3])
        assert stat.mean.dtype == torch.float64
        np.testing.assert_allclose(stat.mean.numpy(), data.mean(axis=0), rtol=1e-6)
        np.testing.assert_allclose(stat.var.numpy(), data.var(axis=0, ddof=1), rtol=1e-5)
        np.testing.assert_allclose(stat.std.numpy(), data.std(axis=0, ddof=1), rtol=1e-5)


def test_running_stat_of_scalar_samples():
    # shape (): numpy's 0-dimensional arithmetic yields scalars; the statistics stay tensors
    stat = RunningStat(())
    for x in (1.0, torch.tensor(3.0, dtype=torch.float64), np.float64(8.0)):
        stat.push(x)
    stat.update(stat.copy())
    assert stat.mean.shape == () and stat.mean.dtype == torch.float64
    assert stat.mean.item() == pytest.approx(4.0)
    assert stat.var.item() == pytest.approx(np.var([1, 3, 8, 1, 3, 8], ddof=1))
    assert stat.std.item() == pytest.approx(np.std([1, 3, 8, 1, 3, 8], ddof=1))


def test_running_stat_update_merges_like_pushing_everything_into_one():
    data = np.random.default_rng(1).normal(size=(30, 4))
    left, right, whole = RunningStat(4), RunningStat(4), RunningStat(4)
    left.push(data[:12])
    right.push(data[12:])
    whole.push(data)
    merged = left.copy()
    merged.update(right)
    merged.update(RunningStat(4))  # merging nothing changes nothing
    assert merged.n == 30 and left.n == 12  # the copy is independent
    np.testing.assert_allclose(merged.mean.numpy(), whole.mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(merged.var.numpy(), whole.var.numpy(), rtol=1e-12)
    empty = RunningStat(4)
    empty.update(left)
    np.testing.assert_array_equal(empty.mean.numpy(), left.mean.numpy())


def test_running_stat_with_few_samples_and_bad_shapes():
    stat = RunningStat(2)
    assert stat.var.tolist() == [0.0, 0.0]
    stat.push(torch.tensor([3.0, -2.0], dtype=torch.float64))
    before = stat.mean
    assert stat.var.tolist() == [9.0, 4.0]  # 0.3.4: the squared mean until there are two samples
    stat.push([5.0, 0.0])
    assert before.tolist() == [3.0, -2.0], "a returned mean must not change with later pushes"
    assert stat.mean.tolist() == [4.0, -1.0] and stat.var.tolist() == [2.0, 2.0]
    for error in (ValueError, AssertionError):  # 0.3.4 asserted
        with pytest.raises(
            error,
            match=r"Shape mismatch: RunningStat of sample shape \[2\] got a value of shape \[3\]",
        ):
            stat.push(torch.zeros(3))
        with pytest.raises(error, match="Shape mismatch: cannot merge"):
            stat.update(RunningStat(3))
    assert "RunningStat(shape=[2], n=2" in repr(stat)


# -- MeanStdFilter ----------------------------------------------------------------------------
def test_filter_normalises_only_after_apply_stats_and_zeroes_constant_features():
    states = np.random.default_rng(2).normal(5.0, 3.0, size=(200, 3))
    states[:, 2] = 7.0  # a constant feature
    state_filter = MeanStdFilter((3,))
    first = state_filter.filter(torch.from_numpy(states[:1]))
    np.testing.assert_allclose(
        first.numpy(), states[:1] / (1 + 1e-8)
    )  # mean 0, std 1 until applied
    for row in states[1:]:
        state_filter.filter(torch.tensor(row, dtype=torch.float32))
    assert state_filter.rs.n == state_filter.rs_local.n == 200
    state_filter.apply_stats()
    out = state_filter.filter(torch.from_numpy(states), update=False).numpy()
    assert state_filter.rs.n == 200, "update=False must not count the state"
    np.testing.assert_allclose(out[:, :2].mean(axis=0), 0.0, atol=1e-6)  # rows pushed as float32
    np.testing.assert_allclose(out[:, :2].std(axis=0, ddof=1), 1.0, rtol=1e-6)
    assert np.all(out[:, 2] == 0.0)
    far = state_filter.filter(torch.tensor([[1e6, -1e6, 7.0]]), update=False)
    assert far[0, 0] > 1e4 and far[0, 1] < -1e4, "there is no clipping"
    for error in (ValueError, AssertionError):
        with pytest.raises(
            error, match=r"Shape mismatch: MeanStdFilter of state shape \[3\] got \[4\]"
        ):
            state_filter.filter(torch.zeros(4), update=False)


def test_filter_collect_sync_copy_and_clear_local():
    rng = np.random.default_rng(3)
    manager, worker = MeanStdFilter(2), MeanStdFilter(2)
    manager.filter(rng.normal(size=(5, 2)))
    seen_by_worker = rng.normal(size=(7, 2))
    worker.filter(seen_by_worker)
    manager.collect(worker)  # the worker's local part joins the manager's total
    assert manager.rs.n == 12
    manager.clear_local()
    assert manager.rs_local.n == 0 and manager.rs.n == 12
    worker.sync(manager)
    assert worker.rs.n == 12 and worker.rs_local.n == 0
    np.testing.assert_array_equal(worker.rs.mean.numpy(), manager.rs.mean.numpy())
    snapshot = worker.copy()
    worker.filter(rng.normal(size=(3, 2)))
    worker.apply_stats()
    assert snapshot.rs.n == 12 and snapshot.mean.tolist() == [0.0, 0.0]
    with pytest.raises(AssertionError, match="Shape mismatch: cannot sync"):
        worker.sync(MeanStdFilter(3))
