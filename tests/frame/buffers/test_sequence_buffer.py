import numpy as np
import pytest
import torch

from machin.frame.buffers import PrioritizedBuffer, SequenceBuffer


def episode(length, first=0.0, terminal=True, hidden_size=2, rewards=None):
    """Steps with state ``first + i``, hidden ``first + i`` (every entry), action ``i % 2``."""
    rewards = rewards or [float(i + 1) for i in range(length)]
    return [
        {
            "state": {
                "state": torch.tensor([[first + i]]),
                "hidden": torch.full((1, hidden_size), first + i),
            },
            "action": {"action": torch.tensor([[i % 2]])},
            "next_state": {
                "state": torch.tensor([[first + i + 1]]),
                "hidden": torch.zeros(1, hidden_size),
            },
            "reward": rewards[i],
            "terminal": terminal and i == length - 1,
        }
        for i in range(length)
    ]


def make(buffer_size=100, **kwargs):
    options = {"sequence_length": 3, "burn_in": 2, "n_step": 2, "discount": 0.5, **kwargs}
    return SequenceBuffer(buffer_size, generator=np.random.default_rng(0), **options)


def sample_starts(buffer, rows):
    """Sample exactly the sequences starting at storage ``rows`` (equal weights, stratified draw)."""
    weights = np.zeros(buffer.buffer_size)
    weights[rows] = 1.0
    buffer.wt_tree.update_all_leaves(weights)
    return buffer.sample_sequences(len(rows))


def test_is_a_prioritized_buffer_with_the_sequence_options():
    buffer = make()
    assert isinstance(buffer, PrioritizedBuffer)
    assert (buffer.sequence_length, buffer.burn_in, buffer.n_step, buffer.discount) == (
        3,
        2,
        2,
        0.5,
    )
    assert buffer.window == 2 + 3 + 2
    assert buffer.sample_sequences(4) is None


def test_store_episode_returns_rows_and_gives_new_sequences_the_top_priority():
    buffer = make()
    assert buffer.store_episode(episode(4)) == [0, 1, 2, 3]
    assert buffer.wt_tree.get_leaf_weight([0, 1, 2, 3]).tolist() == [1.0] * 4
    buffer.update_priority(np.array([3.0]), np.array([1]))
    top = buffer.wt_tree.get_leaf_weight(1)
    assert buffer.store_episode(episode(2)) == [4, 5]
    assert buffer.wt_tree.get_leaf_weight([4, 5]).tolist() == [top, top]
    assert buffer.size() == 6


def test_window_at_episode_start_is_front_padded_with_the_first_hidden_state():
    buffer = make()
    buffer.store_episode(episode(5, first=10.0))
    batch = sample_starts(buffer, [0])
    # positions are episode steps -2..4: two padding steps, then steps 0..4
    assert batch.step_mask.tolist() == [[False, False, True, True, True, True, True]]
    assert batch.state["state"].view(-1).tolist() == [0.0, 0.0, 10.0, 11.0, 12.0, 13.0, 14.0]
    assert batch.hidden.tolist() == [[10.0, 10.0]]
    assert batch.train_mask.tolist() == [[True, True, True]]
    assert "hidden" not in batch.state


def test_window_in_the_middle_carries_the_stored_hidden_state_of_its_first_step():
    buffer = make()
    buffer.store_episode(episode(9, first=0.0))
    batch = sample_starts(buffer, [4])
    assert batch.step_mask.all()
    assert batch.state["state"].view(-1).tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert batch.action["action"].view(-1).tolist() == [0, 1, 0, 1, 0, 1, 0]
    assert batch.hidden.tolist() == [[2.0, 2.0]]


def test_window_at_episode_end_holds_the_final_observation_then_zero_padding():
    buffer = make()
    buffer.store_episode(episode(4, first=1.0))
    batch = sample_starts(buffer, [2])
    # positions are episode steps 0..6; step 4 is the final observation (next_state of step 3)
    assert batch.step_mask.tolist() == [[True, True, True, True, False, False, False]]
    assert batch.observed.tolist() == [[True, True, True, True, True, False, False]]
    assert batch.state["state"].view(-1).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]
    assert batch.train_mask.tolist() == [[True, True, False]]
    assert batch.reward[0, 4:].tolist() == [0.0, 0.0, 0.0]
    assert batch.steps[0, 4:].tolist() == [0, 0, 0]
    assert batch.action["action"][0, 4:].view(-1).tolist() == [0, 0, 0]


def test_windows_never_mix_episodes():
    buffer = make()
    buffer.store_episode(episode(3, first=0.0))
    buffer.store_episode(episode(3, first=100.0))
    batch = sample_starts(buffer, [2, 3])
    # start at the last step of episode 1: steps 0..2, final observation 3, padding
    assert batch.state["state"][0].view(-1).tolist() == [0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0]
    # start at the first step of episode 2: padding, steps 100..102, final observation 103
    assert batch.state["state"][1].view(-1).tolist() == [0.0, 0.0, 100.0, 101.0, 102.0, 103.0, 0.0]
    assert batch.hidden.tolist() == [[0.0, 0.0], [100.0, 100.0]]


def test_n_step_returns_at_a_terminal_end():
    buffer = make()
    buffer.store_episode(episode(3, terminal=True, rewards=[1.0, 2.0, 4.0]))
    batch = sample_starts(buffer, [0])
    # positions: padding, padding, steps 0..2, final observation, padding
    assert batch.reward[0].tolist() == [0.0, 0.0, 1 + 0.5 * 2, 2 + 0.5 * 4, 4.0, 0.0, 0.0]
    assert batch.steps[0].tolist() == [0, 0, 2, 2, 1, 0, 0]
    # step 1 looks two steps ahead and reaches the terminal end, as does step 2
    assert batch.terminal[0].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]


def test_n_step_returns_at_a_truncation_bootstrap_from_the_final_observation():
    buffer = make()
    buffer.store_episode(episode(3, terminal=False, rewards=[1.0, 2.0, 4.0]))
    batch = sample_starts(buffer, [0])
    assert batch.reward[0].tolist() == [0.0, 0.0, 2.0, 4.0, 4.0, 0.0, 0.0]
    assert batch.terminal[0].tolist() == [0.0] * 7
    # step k bootstraps from position k + steps: steps 1 and 2 both from the final observation
    position = torch.arange(7) + batch.steps[0]
    assert position[3].item() == position[4].item() == 5
    assert batch.observed[0, 5] and batch.state["state"][0, 5].item() == 3.0


def test_sequence_priority_mixes_max_and_mean_over_masked_steps():
    buffer = make(priority_eta=0.9)
    td = torch.tensor([[1.0, -3.0, 100.0], [2.0, 2.0, 2.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert buffer.sequence_priority(td, mask) == pytest.approx([0.9 * 3 + 0.1 * 2, 2.0])
    buffer.store_episode(episode(5))
    buffer.update_sequence_priority(td, mask, np.array([1, 3]))
    expected = (np.array([2.9, 2.0]) + buffer.epsilon) ** buffer.alpha
    assert buffer.wt_tree.get_leaf_weight([1, 3]) == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        buffer.sequence_priority(td, mask[:, :2])


def test_sampling_follows_priorities_and_returns_importance_weights():
    buffer = make()
    buffer.store_episode(episode(6))
    buffer.update_priority(np.array([1.0] * 5 + [9.0]), np.arange(6))
    batch = buffer.sample_sequences(16)
    assert batch.size == 16 and batch.weight.shape == (16, 1)
    probability = buffer.wt_tree.get_leaf_weight(batch.index) / buffer.wt_tree.get_weight_sum()
    assert 0.3 < (batch.index == 5).mean() < 0.6  # its share of the priority mass is 43%
    expected = (probability / probability.min()) ** -buffer.beta
    assert batch.weight.view(-1).numpy() == pytest.approx(expected, rel=1e-5)
    high = torch.from_numpy(batch.index == 5)
    assert batch.weight[high].max() < batch.weight[~high].min() == 1.0


def test_sequence_stride_lets_only_every_kth_step_start_a_sequence():
    buffer = make(sequence_stride=3)
    buffer.store_episode(episode(7))
    weights = buffer.wt_tree.get_leaf_weight(np.arange(7))
    assert (weights > 0).tolist() == [True, False, False, True, False, False, True]
    batch = buffer.sample_sequences(64)
    assert set(batch.index.tolist()) <= {0, 3, 6}


def test_overwritten_burn_in_rows_are_masked_and_the_hidden_state_comes_from_the_first_kept_step():
    buffer = make(buffer_size=8)
    buffer.store_episode(episode(6, first=0.0))  # rows 0..5
    buffer.store_episode(episode(3, first=50.0))  # rows 6, 7, 0: step 0 of episode 1 is overwritten
    batch = sample_starts(buffer, [2])  # episode 1, step 2: burn-in reads steps 0 (gone) and 1
    assert batch.step_mask[0].tolist() == [False, True, True, True, True, True, False]
    assert batch.observed[0].tolist() == [False, True, True, True, True, True, True]
    assert batch.state["state"][0].view(-1).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert batch.hidden.tolist() == [[1.0, 1.0]]


def test_an_episode_written_across_the_ring_end_is_read_in_order():
    buffer = make(buffer_size=8)
    buffer.store_episode(episode(5, first=0.0))  # rows 0..4
    assert buffer.store_episode(episode(5, first=20.0)) == [5, 6, 7, 0, 1]
    batch = sample_starts(buffer, [7])  # step 2 of the second episode
    assert batch.state["state"][0].view(-1).tolist() == [20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 0.0]
    assert batch.hidden.tolist() == [[20.0, 20.0]]


def test_episodes_without_a_hidden_key_give_no_hidden_state():
    buffer = make()
    steps = episode(4)
    for step in steps:
        step["state"] = {"state": step["state"]["state"]}
    buffer.store_episode(steps)
    assert sample_starts(buffer, [1]).hidden is None


def test_append_and_extend_ask_for_whole_episodes():
    buffer = make()
    with pytest.raises(RuntimeError, match="store_episode"):
        buffer.append(episode(1)[0])
    with pytest.raises(RuntimeError, match="store_episode"):
        buffer.extend(episode(2))
    assert buffer.size() == 0


def test_bad_episodes_are_rejected_before_anything_is_stored():
    buffer = make(buffer_size=4)
    with pytest.raises(ValueError, match="empty episode"):
        buffer.store_episode([])
    with pytest.raises(ValueError, match="5 steps does not fit in buffer_size=4"):
        buffer.store_episode(episode(5))
    steps = episode(2)
    steps[1]["episode_step"] = 3
    with pytest.raises(
        ValueError, match=r"step 1 uses the reserved attribute name\(s\) \['episode_step'\]"
    ):
        buffer.store_episode(steps)
    with pytest.raises(TypeError, match="transition must be a Transition or a dict, got str"):
        buffer.store_episode(["step"])
    assert buffer.size() == 0


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("sequence_length", 0, "sequence_length must be a positive integer, got 0"),
        ("burn_in", -1, "burn_in must be a non-negative integer, got -1"),
        ("n_step", 1.5, "n_step must be a positive integer, got 1.5"),
        ("sequence_stride", 0, "sequence_stride must be a positive integer, got 0"),
        ("discount", 1.5, r"discount must be in \[0, 1\], got 1.5"),
        ("priority_eta", -0.1, r"priority_eta must be in \[0, 1\], got -0.1"),
    ],
)
def test_bad_options_are_rejected(option, value, message):
    with pytest.raises(ValueError, match=message):
        make(**{option: value})
    with pytest.raises(TypeError, match="hidden_key must be a string, got int"):
        make(hidden_key=3)


def test_clear_forgets_episodes_and_priorities():
    buffer = make()
    buffer.store_episode(episode(3))
    buffer.clear()
    assert buffer.size() == 0 and buffer.sample_sequences(2) is None
    assert buffer.store_episode(episode(2)) == [0, 1]
