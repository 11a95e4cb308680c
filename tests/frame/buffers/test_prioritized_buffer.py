"""Tests of WeightTree and PrioritizedBuffer (checklist 6.5, items 48-60)."""

import numpy as np
import pytest
import torch

from machin.frame.buffers.prioritized_buffer import PrioritizedBuffer, WeightTree
from machin.frame.transition import Transition


def make(i: int, **custom) -> Transition:
    return Transition(
        state={"s": torch.full((1, 2), float(i))},
        action={"a": torch.tensor([[i]])},
        next_state={"s": torch.full((1, 2), float(i + 1))},
        reward=float(i),
        terminal=False,
        **custom,
    )


def filled(n: int, size: int = 100, **kwargs) -> PrioritizedBuffer:
    kwargs.setdefault("generator", np.random.default_rng(0))
    buffer = PrioritizedBuffer(size, **kwargs)
    for i in range(n):
        buffer.append(make(i))
    return buffer


# -- WeightTree ------------------------------------------------------------------------------
def test_flat_layout_leaves_first_root_last():
    # The 0.3.4 manual prints [1, 2, 3, 4, 3, 7, 11] for this tree, an arithmetic slip:
    # the root is 3 + 7 = 10.
    tree = WeightTree(4)
    tree.update_all_leaves([1, 2, 3, 4])
    assert tree.weights.tolist() == [1, 2, 3, 4, 3, 7, 10]
    assert tree.get_weight_sum() == 10.0


def test_leaves_are_padded_to_a_power_of_two_as_in_0_3_4():
    tree = WeightTree(5)
    tree.update_all_leaves([1, 1, 1, 1, 3])
    assert tree.weights.tolist() == [1, 1, 1, 1, 3, 0, 0, 0, 2, 2, 3, 0, 4, 3, 7]
    assert tree.sizes.tolist() == [8, 4, 2, 1] and tree.offsets.tolist() == [0, 8, 12, 14, 15]
    assert tree.depth == 4 and tree.find_leaf_index(6.99) == 4
    single = WeightTree(1)
    single.update_leaf(2.5, 0)
    assert single.get_weight_sum() == 2.5 and single.find_leaf_index(1.0) == 0


def test_weight_sum_matches_leaf_sum_after_mixed_updates():
    rng = np.random.default_rng(3)
    tree = WeightTree(37)
    reference = np.zeros(37)
    for _ in range(50):
        if rng.random() < 0.5:
            i, w = int(rng.integers(37)), float(rng.random())
            tree.update_leaf(w, i)
            reference[i] = w
        else:
            idx = rng.integers(37, size=8)
            w = rng.random(8)
            tree.update_leaf_batch(w, idx)
            for j, v in zip(idx, w):  # the last weight for a repeated index wins
                reference[j] = v
        assert tree.get_weight_sum() == pytest.approx(reference.sum())
        np.testing.assert_allclose(tree.get_leaf_all_weights(), reference)
    # Every inner node is the sum of its children (rebuild from scratch and compare).
    rebuilt = WeightTree(37)
    rebuilt.update_all_leaves(reference)
    np.testing.assert_allclose(tree.weights, rebuilt.weights)


def test_find_leaf_index_uses_cumulative_intervals():
    tree = WeightTree(4)
    tree.update_all_leaves([1, 2, 3, 4])  # intervals [0,1] (1,3] (3,6] (6,10]
    assert tree.find_leaf_index(0.0) == 0
    assert tree.find_leaf_index(0.5) == 0
    assert tree.find_leaf_index(1.0) == 0
    assert tree.find_leaf_index(1.5) == 1
    assert tree.find_leaf_index(3.5) == 2
    assert tree.find_leaf_index(9.9) == 3
    assert tree.find_leaf_index(10.0) == 3
    assert isinstance(tree.find_leaf_index(2.0), int)
    found = tree.find_leaf_index([0.5, 2.0, 5.0, 7.0])
    assert isinstance(found, np.ndarray) and found.tolist() == [0, 1, 2, 3]
    assert tree.find_leaf_index(np.array([9.0])).tolist() == [3]


def test_find_leaf_index_skips_zero_weight_leaves():
    tree = WeightTree(6)
    tree.update_all_leaves([0, 1, 0, 0, 2, 0])
    targets = np.linspace(0.001, 3.0, 50)
    assert set(tree.find_leaf_index(targets).tolist()) == {1, 4}
    assert tree.find_leaf_index(3.0) == 4


def test_find_leaf_index_matches_a_cumulative_sum_search():
    rng = np.random.default_rng(1)
    weights = rng.random(1000)
    tree = WeightTree(1000)
    tree.update_all_leaves(weights)
    targets = rng.random(5000) * weights.sum()
    expected = np.searchsorted(np.cumsum(weights), targets)
    np.testing.assert_array_equal(tree.find_leaf_index(targets), expected)


def test_leaf_getters():
    tree = WeightTree(5)
    tree.update_all_leaves([3, 1, 4, 1, 5])
    assert tree.get_leaf_weight(2) == 4.0 and isinstance(tree.get_leaf_weight(2), float)
    weights = tree.get_leaf_weight([0, 4])
    assert isinstance(weights, np.ndarray) and weights.tolist() == [3.0, 5.0]
    assert tree.get_leaf_max() == 5.0
    all_weights = tree.get_leaf_all_weights()
    assert all_weights.shape == (5,) and all_weights.tolist() == [3, 1, 4, 1, 5]
    all_weights[0] = 100.0  # a copy: the tree is unchanged
    assert tree.get_leaf_weight(0) == 3.0


@pytest.mark.parametrize("size", [1, 2, 7, 64, 1001])
def test_leaf_max_follows_every_kind_of_update(size):
    """The maximum is kept in its own tree: it must match a scan after any update, also when it decreases."""
    rng = np.random.default_rng(size)
    tree = WeightTree(size)
    assert tree.get_leaf_max() == 0.0
    tree.update_all_leaves(rng.random(size))
    assert tree.get_leaf_max() == tree.get_leaf_all_weights().max()
    for _ in range(50):
        count = int(rng.integers(1, size + 1))
        indexes = rng.integers(0, size, count)
        tree.update_leaf_batch(rng.random(count) * rng.choice([0.1, 10.0]), indexes)
        assert tree.get_leaf_max() == tree.get_leaf_all_weights().max()
        largest = int(np.argmax(tree.get_leaf_all_weights()))
        tree.update_leaf(0.0, largest)  # lowering the maximum must lower the root too
        assert tree.get_leaf_max() == tree.get_leaf_all_weights().max()


def test_update_all_leaves_accepts_any_length_up_to_size():
    tree = WeightTree(4)
    tree.update_all_leaves([1, 2, 3, 4])
    tree.update_all_leaves([5])
    assert tree.get_leaf_all_weights().tolist() == [5, 0, 0, 0]
    assert tree.get_weight_sum() == 5.0
    tree.update_all_leaves([])
    assert tree.get_weight_sum() == 0.0
    with pytest.raises(ValueError, match="got 5 weights for a tree of 4 leaves"):
        tree.update_all_leaves([1, 1, 1, 1, 1])


@pytest.mark.parametrize("index", [-1, 4, [0, 4]])
def test_out_of_range_indexes_raise(index):
    tree = WeightTree(4)
    with pytest.raises(ValueError, match=r"leaf index out of range \[0, 3\]"):
        tree.get_leaf_weight(index)
    with pytest.raises(ValueError, match=r"leaf index out of range \[0, 3\]"):
        tree.update_leaf_batch(np.ones(np.size(index)), index)
    if np.isscalar(index):  # the one-leaf path checks as the batch path does
        with pytest.raises(ValueError, match=r"leaf index out of range \[0, 3\]"):
            tree.update_leaf(1.0, index)
    assert tree.get_weight_sum() == 0.0


def test_invalid_weights_and_sizes_raise():
    with pytest.raises(ValueError, match="WeightTree size must be a positive integer, got 0"):
        WeightTree(0)
    tree = WeightTree(4)
    with pytest.raises(ValueError, match="finite and non-negative"):
        tree.update_leaf(-1.0, 0)
    with pytest.raises(ValueError, match="finite and non-negative"):
        tree.update_leaf(float("nan"), 0)
    with pytest.raises(ValueError, match="finite and non-negative"):
        tree.update_leaf_batch([np.nan], [1])
    with pytest.raises(ValueError, match="finite and non-negative"):
        tree.update_all_leaves([1.0, np.inf])
    with pytest.raises(ValueError, match="got 2 weights for 1 indexes"):
        tree.update_leaf_batch([1.0, 2.0], [0])
    assert tree.get_weight_sum() == 0.0


def test_print_weights(capsys):
    tree = WeightTree(4)
    tree.update_all_leaves([1, 2, 3, 4])
    tree.print_weights(precision=1)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == ["10.0", "3.0 7.0", "1.0 2.0 3.0 4.0"]


def test_large_tree_batched_update_and_search_are_consistent():
    # A scaled-down version of the documented 10M / 1M sanity check (timings live in benchmarks/).
    rng = np.random.default_rng(2)
    size = 200_000
    weights = rng.random(size)
    tree = WeightTree(size)
    tree.update_all_leaves(weights)
    idx = rng.integers(size, size=20_000)
    new = rng.random(20_000)
    tree.update_leaf_batch(new, idx)
    _, last = np.unique(idx[::-1], return_index=True)
    weights[np.unique(idx)] = new[::-1][last]
    assert tree.get_weight_sum() == pytest.approx(weights.sum(), rel=1e-9)
    targets = rng.random(1000) * weights.sum()
    np.testing.assert_array_equal(
        tree.find_leaf_index(targets), np.searchsorted(np.cumsum(weights), targets)
    )


# -- PrioritizedBuffer -----------------------------------------------------------------------
def test_empty_buffer_returns_four_nones():
    buffer = PrioritizedBuffer(10)
    assert buffer.sample_batch(4) == (0, None, None, None)
    filled_buffer = filled(3)
    assert filled_buffer.sample_batch(0) == (0, None, None, None)


def test_sample_batch_returns_values_indexes_and_weights():
    buffer = filled(20)
    size, values, indexes, is_weights = buffer.sample_batch(8)
    assert size == 8
    state, action, next_state, reward, terminal = values
    assert state["s"].shape == (8, 2) and reward.shape == (8, 1) and terminal.dtype == torch.bool
    assert isinstance(indexes, np.ndarray) and indexes.shape == (8,)
    assert isinstance(is_weights, np.ndarray) and is_weights.shape == (8,)
    # The returned indexes are the storage rows of the returned transitions.
    assert action["a"].view(-1).tolist() == indexes.tolist()


def test_sample_attrs_and_concatenation_options_are_passed_through():
    buffer = PrioritizedBuffer(10, generator=np.random.default_rng(0))
    for i in range(4):
        buffer.append(make(i, tag=f"t{i}", value=float(i)))
    _, (reward, rest), indexes, _ = buffer.sample_batch(
        3, sample_attrs=["reward", "*"], additional_concat_attrs=["value"]
    )
    assert set(rest) == {"tag", "value"}
    assert (
        rest["value"].view(-1).tolist() == reward.view(-1).tolist() == [float(i) for i in indexes]
    )
    assert rest["tag"] == [f"t{i}" for i in indexes]
    _, (reward,), _, _ = buffer.sample_batch(2, concatenate=False, sample_attrs=["reward"])
    assert isinstance(reward, list) and len(reward) == 2


def test_is_weights_are_normalized_to_at_most_one():
    buffer = filled(50)
    rng = np.random.default_rng(4)
    buffer.update_priority(rng.random(50) * 10, np.arange(50))
    for _ in range(10):
        _, _, indexes, is_weights = buffer.sample_batch(16)
        assert is_weights.max() == pytest.approx(1.0)
        assert np.all(is_weights > 0) and np.all(is_weights <= 1.0)


def test_is_weights_follow_the_formula():
    buffer = filled(4, alpha=1.0, epsilon=0.0, beta=0.5, beta_increment_per_sampling=0.0)
    buffer.update_priority(np.array([1.0, 2.0, 3.0, 4.0]), np.arange(4))
    _, _, indexes, is_weights = buffer.sample_batch(4)
    probability = (indexes + 1) / 10.0
    expected = (4 * probability) ** -0.5
    np.testing.assert_allclose(is_weights, expected / expected.max())


def test_curr_beta_grows_per_sample_and_stops_at_one():
    # As in Machin 0.3.4: ``beta`` keeps the initial exponent, ``curr_beta`` is the current one.
    buffer = filled(5, beta=0.4, beta_increment_per_sampling=0.25)
    assert buffer.curr_beta == 0.4
    buffer.sample_batch(2)
    assert buffer.curr_beta == pytest.approx(0.65)
    buffer.sample_batch(2)
    assert buffer.curr_beta == pytest.approx(0.9)
    buffer.sample_batch(2)
    buffer.sample_batch(2)
    assert buffer.curr_beta == 1.0
    assert buffer.beta == 0.4
    buffer.clear()
    assert buffer.curr_beta == 0.4


def test_high_priority_item_is_sampled_much_more_often():
    buffer = filled(20)
    buffer.update_priority(np.array([1000.0]), np.array([7]))
    counts = np.zeros(20)
    for _ in range(50):
        _, _, indexes, _ = buffer.sample_batch(10)
        np.add.at(counts, indexes, 1)
    assert counts[7] > 0.5 * counts.sum()
    assert counts[7] > 10 * np.delete(counts, 7).max()


def test_alpha_zero_samples_uniformly():
    buffer = filled(10, alpha=0.0)
    buffer.update_priority(np.array([1000.0, 0.0]), np.array([3, 4]))
    assert np.allclose(buffer.wt_tree.get_leaf_all_weights()[:10], 1.0)
    counts = np.zeros(10)
    for _ in range(200):
        _, _, indexes, is_weights = buffer.sample_batch(10)
        np.add.at(counts, indexes, 1)
        assert np.allclose(is_weights, 1.0)
    assert counts.min() > 0.7 * counts.mean() and counts.max() < 1.3 * counts.mean()


def test_epsilon_keeps_zero_priority_reachable():
    buffer = filled(4, epsilon=0.5, alpha=1.0)
    buffer.update_priority(np.zeros(4), np.arange(4))
    weights = buffer.wt_tree.get_leaf_all_weights()[:4]
    assert np.allclose(weights, 0.5)
    seen = set()
    for _ in range(20):
        seen.update(buffer.sample_batch(4)[2].tolist())
    assert seen == {0, 1, 2, 3}


def test_default_priority_is_the_current_maximum():
    buffer = PrioritizedBuffer(10, alpha=1.0, epsilon=0.0)
    buffer.append(make(0))
    assert buffer.wt_tree.get_leaf_weight(0) == 1.0  # empty buffer: weight 1
    buffer.update_priority(np.array([5.0]), np.array([0]))
    buffer.append(make(1))
    assert buffer.wt_tree.get_leaf_weight(1) == 5.0
    buffer.append(make(2), priority=2.0)
    assert buffer.wt_tree.get_leaf_weight(2) == 2.0


def test_explicit_priority_is_normalized():
    buffer = PrioritizedBuffer(10, epsilon=0.01, alpha=0.6)
    buffer.append(make(0), priority=-3.0)
    assert buffer.wt_tree.get_leaf_weight(0) == pytest.approx((3.0 + 0.01) ** 0.6)


def test_extend_with_priorities():
    buffer = PrioritizedBuffer(3, alpha=1.0, epsilon=0.0)
    positions = buffer.extend([make(i) for i in range(5)], priorities=[1, 2, 3, 4, 5])
    assert positions == [0, 1, 2]
    assert buffer.wt_tree.get_leaf_all_weights().tolist() == [3.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="got 1 priorities for 2 transitions"):
        buffer.extend([make(0), make(1)], priorities=[1.0])


def test_invalid_priority_leaves_the_buffer_unchanged():
    buffer = filled(2)
    before = buffer.wt_tree.get_leaf_all_weights()
    with pytest.raises(ValueError, match=r"priority must be a finite number, got nan"):
        buffer.append(make(9), priority=float("nan"))
    assert buffer.size() == 2
    np.testing.assert_array_equal(buffer.wt_tree.get_leaf_all_weights(), before)


def test_overwritten_slot_gets_a_fresh_priority():
    buffer = PrioritizedBuffer(2, alpha=1.0, epsilon=0.0)
    buffer.append(make(0), priority=9.0)
    buffer.append(make(1), priority=1.0)
    buffer.append(make(2), priority=3.0)  # overwrites slot 0
    assert buffer.wt_tree.get_leaf_all_weights().tolist() == [3.0, 1.0]
    assert buffer.wt_tree.get_weight_sum() == 4.0


def test_samples_never_land_beyond_the_filled_rows():
    buffer = filled(5, size=1000)
    for _ in range(50):
        _, values, indexes, _ = buffer.sample_batch(64)
        assert indexes.max() < 5
        assert values[1]["a"].view(-1).tolist() == indexes.tolist()


def test_update_priority_out_of_range_raises():
    buffer = filled(3, size=4)
    with pytest.raises(ValueError, match="index 4 is out of range, it holds no transition"):
        buffer.update_priority(np.array([1.0]), np.array([4]))


def test_constructor_rejects_negative_parameters():
    with pytest.raises(ValueError, match="epsilon must be a finite, non-negative number, got -0.1"):
        PrioritizedBuffer(10, epsilon=-0.1)


def test_clear_resets_the_tree():
    buffer = filled(5)
    buffer.clear()
    assert buffer.size() == 0
    assert buffer.wt_tree.get_weight_sum() == 0.0
    assert buffer.sample_batch(2) == (0, None, None, None)
    buffer.append(make(0))
    assert buffer.wt_tree.get_leaf_weight(0) == 1.0


def test_seeded_generator_repeats_samples():
    def draw():
        buffer = filled(30, generator=np.random.default_rng(11))
        return [buffer.sample_batch(5)[2].tolist() for _ in range(3)]

    assert draw() == draw()
