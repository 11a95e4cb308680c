"""Tests of machin.frame.buffers.buffer.Buffer (checklist 6.4, items 29-47)."""

import numpy as np
import pytest
import torch

from machin.frame.buffers.buffer import DEFAULT_REQUIRED_ATTRS, Buffer
from machin.frame.buffers.prioritized_buffer import PrioritizedBuffer, WeightTree
from machin.frame.transition import Transition, TransitionBase


def make(i: int, **custom) -> Transition:
    """Transition ``i``: every tensor and the reward encode ``i`` so rows can be identified."""
    return Transition(
        state={"s": torch.full((1, 3), float(i))},
        action={"a": torch.tensor([[i]])},
        next_state={"s": torch.full((1, 3), float(i + 1))},
        reward=float(i),
        terminal=i % 2 == 1,
        **custom,
    )


def as_dict(i: int) -> dict:
    return dict(
        state={"s": torch.full((1, 3), float(i))},
        action={"a": torch.tensor([[i]])},
        next_state={"s": torch.full((1, 3), float(i + 1))},
        reward=float(i),
        terminal=False,
    )


def filled(n: int, size: int = 100, **kwargs) -> Buffer:
    buffer = Buffer(size, **kwargs)
    for i in range(n):
        buffer.append(make(i))
    return buffer


def all_rewards(buffer: Buffer) -> list:
    _, (reward,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["reward"])
    return reward.view(-1).tolist()


def ids(batch) -> list:
    """Transition ids of a concatenated ``(state, action, ...)`` sample."""
    return batch[1]["a"].view(-1).tolist()


# -- construction --------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, -1, 2.5, True, "10"])
def test_buffer_size_must_be_a_positive_integer(size):
    with pytest.raises(ValueError, match="buffer_size must be a positive integer"):
        Buffer(size)


# -- ring behaviour, appending (items 29-34) ------------------------------------------
def test_ring_keeps_the_newest_entries():
    buffer = filled(5, size=3)
    assert buffer.size() == 3 and len(buffer) == 3
    assert all_rewards(buffer) == [2.0, 3.0, 4.0]


def test_append_returns_storage_positions_that_wrap():
    buffer = Buffer(3)
    assert [buffer.append(make(i)) for i in range(5)] == [0, 1, 2, 0, 1]


def test_growth_past_the_initial_capacity_keeps_every_row_in_order():
    # The columns start at 1024 rows and grow; crossing that boundary must lose nothing.
    buffer = Buffer(3000)
    positions = [buffer.append(make(i)) for i in range(1500)]
    assert positions == list(range(1500))
    assert all_rewards(buffer) == [float(i) for i in range(1500)]
    _, (state, action) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["state", "action"]
    )
    assert torch.equal(action["a"].view(-1), torch.arange(1500))
    assert torch.equal(state["s"][:, 0], torch.arange(1500, dtype=torch.float32))


def test_growth_then_wrap_around():
    buffer = Buffer(1100)
    for i in range(2500):
        buffer.append(make(i))
    assert buffer.size() == 1100
    assert all_rewards(buffer) == [float(i) for i in range(1400, 2500)]


def test_extend_wraps_and_keeps_the_last_rows_of_a_long_episode():
    buffer = Buffer(4)
    buffer.append(make(0))
    positions = buffer.extend([make(i) for i in range(1, 8)])
    assert positions == [1, 2, 3, 0]  # only the last 4 of the 7 are kept
    assert all_rewards(buffer) == [4.0, 5.0, 6.0, 7.0]
    assert buffer.extend([]) == []


def test_extend_across_the_ring_end():
    buffer = Buffer(5)
    buffer.extend([make(i) for i in range(4)])
    assert buffer.extend([make(i) for i in range(4, 7)]) == [4, 0, 1]
    assert all_rewards(buffer) == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_append_accepts_dicts_and_transitions():
    buffer = Buffer(10)
    buffer.append(as_dict(0))
    buffer.append(make(1))
    assert buffer.size() == 2
    _, (action,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["action"])
    assert action["a"].view(-1).tolist() == [0, 1]


def test_append_rejects_other_types():
    with pytest.raises(TypeError, match="transition must be a Transition or a dict, got list"):
        Buffer(2).append([1, 2])


def test_missing_required_attribute_raises():
    data = as_dict(0)
    del data["terminal"]
    with pytest.raises(ValueError, match="cannot build a Transition from the dictionary"):
        Buffer(2).append(data)
    base = TransitionBase(["state"], ["reward"], [], [{"s": torch.zeros(1, 1)}], [1.0], [])
    with pytest.raises(
        ValueError, match=r"missing required attribute\(s\) \['action', 'next_state', 'terminal'\]"
    ):
        Buffer(2).append(base)


def test_different_attribute_set_raises():
    buffer = Buffer(10)
    buffer.append(make(0))
    with pytest.raises(ValueError, match="differ from those already stored"):
        buffer.append(make(1, extra=1))
    assert buffer.size() == 1


def test_different_major_keys_shapes_or_dtypes_raise():
    buffer = Buffer(10)
    buffer.append(make(0))
    other_key = as_dict(1)
    other_key["state"] = {"t": torch.zeros(1, 3)}
    with pytest.raises(ValueError, match=r"major attribute 'state' has keys \['t'\]"):
        buffer.append(other_key)
    other_shape = as_dict(1)
    other_shape["state"] = {"s": torch.zeros(1, 4)}
    with pytest.raises(ValueError, match=r"state\['s'\] must have shape"):
        buffer.append(other_shape)
    other_dtype = as_dict(1)
    other_dtype["action"] = {"a": torch.zeros(1, 1)}
    with pytest.raises(ValueError, match=r"action\['a'\] must have .*dtype torch.int64"):
        buffer.append(other_dtype)
    tensor_reward = as_dict(1)
    tensor_reward["reward"] = torch.ones(1, 1)
    with pytest.raises(ValueError, match="attribute 'reward' must be a float scalar, got Tensor"):
        buffer.append(tensor_reward)
    assert buffer.size() == 1


def test_a_bad_transition_in_extend_leaves_the_buffer_unchanged():
    buffer = Buffer(10)
    buffer.append(make(0))
    with pytest.raises(ValueError):
        buffer.extend([make(1), make(2, extra=1)])
    assert buffer.size() == 1
    assert all_rewards(buffer) == [0.0]


def test_a_failed_first_extend_leaves_the_buffer_empty_and_open_to_any_layout():
    buffer = Buffer(10)
    with pytest.raises(ValueError):
        buffer.extend([make(0), make(1, extra=1)])
    assert buffer.size() == 0
    buffer.append(make(1, extra=1))  # the rejected layout did not stick
    assert buffer.size() == 1
    assert buffer.attribute_names[-1] == "extra"


def test_transitions_with_more_than_one_row_are_rejected_before_writing():
    def base(rows):
        return TransitionBase(
            ["state"], ["reward"], [], [{"s": torch.zeros(rows, 2)}], [torch.zeros(rows, 1)], []
        )

    buffer = Buffer(10)
    buffer.append(base(1), required_attrs=())
    with pytest.raises(ValueError, match=r"state\['s'\] must have shape \[1, 2\]"):
        buffer.append(base(2), required_attrs=())
    assert buffer.size() == 1
    empty = Buffer(10)
    with pytest.raises(ValueError, match="must have shape"):
        empty.append(base(2), required_attrs=())
    assert empty.size() == 0


def test_required_attrs_empty_accepts_arbitrary_attributes():
    buffer = Buffer(10)
    t = TransitionBase(["obs"], [], ["note"], [{"x": torch.zeros(1, 2)}], [], ["hi"])
    buffer.append(t, required_attrs=())
    assert buffer.size() == 1
    _, (obs, note) = buffer.sample_batch(1)
    assert obs["x"].shape == (1, 2) and note == ["hi"]


def test_clear_empties_and_forgets_layout():
    buffer = filled(4)
    buffer.clear()
    assert buffer.size() == 0
    assert buffer.attribute_names is None
    assert buffer.sample_batch(3) == (0, None)
    buffer.append(make(0, extra=1))
    assert buffer.size() == 1


def test_stored_rows_are_isolated_from_the_caller():
    buffer = Buffer(4)
    t = make(0)
    buffer.append(t)
    t.state["s"].add_(50.0)
    _, (state,) = buffer.sample_batch(1, sample_attrs=["state"])
    assert torch.equal(state["s"], torch.zeros(1, 3))


# -- sampling (items 35-39) ------------------------------------------------------------
def test_sampling_an_empty_buffer_returns_zero_and_none():
    buffer = Buffer(10)
    for method in ("random_unique", "random", "all"):
        assert buffer.sample_batch(10, sample_method=method) == (0, None)


def test_random_unique_returns_distinct_transitions():
    torch.manual_seed(0)
    buffer = filled(50)
    size, batch = buffer.sample_batch(20)
    assert size == 20
    drawn = ids(batch)
    assert len(set(drawn)) == 20 and all(0 <= i < 50 for i in drawn)
    size, batch = buffer.sample_batch(200)
    assert size == 50
    assert sorted(ids(batch)) == list(range(50))


def test_random_unique_uses_rejection_path_without_duplicates():
    torch.manual_seed(1)
    buffer = filled(1000, size=1000)
    for _ in range(20):
        size, batch = buffer.sample_batch(60)  # 16 * 60 <= 1000: rejection sampling
        assert size == 60 and len(set(ids(batch))) == 60


@pytest.mark.parametrize(
    "stored, n",
    [
        (40, 10),  # 16 * n > stored: a prefix of a random permutation
        (1500, 60),  # repeats are frequent: the repeated draws are redrawn
        (500, 20),  # repeats are rare
    ],
)
def test_random_unique_is_uniform_and_in_random_order(stored, n):
    buffer = filled(stored, size=stored, generator=torch.Generator().manual_seed(3))
    draws = 6000 if stored > 100 else 2000  # enough for every position to be counted often
    overall = [0] * stored
    first = [0] * stored
    first_is_smallest = 0
    for _ in range(draws):
        size, positions = Buffer.sample_method_random_unique(buffer, n)
        drawn = positions.tolist()
        assert size == n and len(set(drawn)) == n
        for p in drawn:
            overall[p] += 1
        first[drawn[0]] += 1
        first_is_smallest += drawn[0] == min(drawn)
    expected = draws * n / stored
    assert 0.7 * expected < min(overall) and max(overall) < 1.3 * expected
    # The first slot is uniform too (counted over 10 groups of positions).
    groups = [sum(first[g * stored // 10 : (g + 1) * stored // 10]) for g in range(10)]
    assert 0.7 * draws / 10 < min(groups) and max(groups) < 1.3 * draws / 10
    # With a random order the first position is the smallest one time in n.
    assert 0.6 * draws / n < first_is_smallest < 1.4 * draws / n


def test_random_unique_from_several_threads_at_once_stays_distinct_and_is_not_pickled():
    import pickle
    import threading

    buffer = filled(3000, size=3000, generator=torch.Generator().manual_seed(4))
    failures = []

    def draw():
        for _ in range(300):
            size, positions = Buffer.sample_method_random_unique(buffer, 150)
            if size != 150 or len(set(positions.tolist())) != 150:
                failures.append(positions.tolist())

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads) and not failures
    assert "_unique_scratch" in vars(buffer) and "_unique_scratch" not in vars(
        pickle.loads(pickle.dumps(buffer))
    )


def test_random_with_replacement_may_repeat():
    torch.manual_seed(0)
    buffer = filled(3)
    size, batch = buffer.sample_batch(30, sample_method="random")
    assert size == 30
    assert set(ids(batch)) == {0, 1, 2}
    assert buffer.sample_batch(0, sample_method="random") == (0, None)


def test_all_ignores_batch_size_and_is_oldest_first():
    buffer = filled(7, size=5)
    for batch_size in (-1, 0, 2, 100):
        size, batch = buffer.sample_batch(batch_size, sample_method="all")
        assert size == 5
        assert ids(batch) == [2, 3, 4, 5, 6]


def test_callable_sample_method_positions_count_from_the_oldest_row():
    buffer = filled(6, size=4)  # holds 2, 3, 4, 5; storage rows are rotated

    def newest_two(buf, batch_size):
        assert buf is buffer and batch_size == 9
        return 2, [buf.size() - 1, buf.size() - 2]

    size, batch = buffer.sample_batch(9, sample_method=newest_two)
    assert size == 2
    assert ids(batch) == [5, 4]


def test_callable_sample_method_returning_nothing():
    buffer = filled(3)
    assert buffer.sample_batch(2, sample_method=lambda b, n: (0, [])) == (0, None)


def test_callable_sample_method_out_of_range_raises():
    buffer = filled(3)
    with pytest.raises(ValueError, match=r"positions outside \[0, 2\]: 0\.\.3"):
        buffer.sample_batch(2, sample_method=lambda b, n: (2, [0, 3]))


def test_static_sample_methods_return_size_and_positions():
    buffer = filled(5)
    size, positions = Buffer.sample_method_all(buffer, -1)
    assert size == 5 and positions.tolist() == [0, 1, 2, 3, 4]
    size, positions = Buffer.sample_method_random_unique(buffer, 3)
    assert size == 3 and len(set(positions.tolist())) == 3
    size, positions = Buffer.sample_method_random(buffer, 8)
    assert size == 8 and all(0 <= p < 5 for p in positions.tolist())


def test_unknown_sample_method_raises():
    buffer = filled(2)
    with pytest.raises(
        ValueError,
        match="sample_method must be 'random_unique', 'random', 'all' or a callable, got 'best'",
    ):
        buffer.sample_batch(1, sample_method="best")
    with pytest.raises(TypeError, match="sample_method must be a string or a callable, got int"):
        buffer.sample_batch(1, sample_method=3)


def test_generator_makes_sampling_repeatable():
    def draw(seed):
        buffer = filled(100, generator=torch.Generator().manual_seed(seed))
        return [ids(buffer.sample_batch(10)[1]) for _ in range(3)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


# -- output formats (items 40-46) --------------------------------------------------------
def test_concatenated_major_and_sub_attributes():
    buffer = filled(4)
    size, (state, action, next_state, reward, terminal) = buffer.sample_batch(
        -1, sample_method="all"
    )
    assert size == 4
    assert set(state) == {"s"} and set(action) == {"a"} and set(next_state) == {"s"}
    assert state["s"].shape == (4, 3) and state["s"].dtype == torch.float32
    assert torch.equal(next_state["s"][:, 0], torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert action["a"].shape == (4, 1) and action["a"].dtype == torch.int64
    assert reward.shape == (4, 1) and reward.dtype == torch.float32
    assert reward.view(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert terminal.shape == (4, 1) and terminal.dtype == torch.bool
    assert terminal.view(-1).tolist() == [False, True, False, True]


def test_integer_and_tensor_sub_attributes():
    buffer = Buffer(5)
    for i in range(3):
        buffer.append(
            TransitionBase(
                ["state"],
                ["count", "value"],
                [],
                [{"s": torch.zeros(1, 1)}],
                [i, torch.full((1, 2), float(i))],
                [],
            ),
            required_attrs=(),
        )
    _, (count, value) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["count", "value"]
    )
    assert count.dtype == torch.int64 and count.view(-1).tolist() == [0, 1, 2]
    assert value.shape == (3, 2) and value[:, 1].tolist() == [0.0, 1.0, 2.0]


def test_numpy_scalar_rewards_and_terminals_are_stored():
    buffer = Buffer(5)
    data = as_dict(0)
    data["reward"], data["terminal"] = np.float32(0.5), np.bool_(True)
    buffer.append(data)
    _, (reward, terminal) = buffer.sample_batch(1, sample_attrs=["reward", "terminal"])
    assert reward.tolist() == [[0.5]]
    assert terminal.dtype == torch.bool and terminal.tolist() == [[True]]


def test_scalar_sub_attribute_widens_from_int_to_float():
    buffer = Buffer(5)
    data = as_dict(0)
    data["reward"] = 1
    buffer.append(data)
    data = as_dict(1)
    data["reward"] = 2.5
    buffer.append(data)
    _, (reward,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["reward"])
    assert reward.dtype == torch.float32 and reward.view(-1).tolist() == [1.0, 2.5]
    _, (rewards,) = buffer.sample_batch(
        -1, concatenate=False, sample_method="all", sample_attrs=["reward"]
    )
    assert rewards == [1.0, 2.5] and all(isinstance(r, float) for r in rewards)


def test_custom_attributes_are_lists_unless_concatenated():
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(make(i, value=i * 0.5, tag=f"t{i}", flag=i == 1))
    _, (value, tag, flag) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["value", "tag", "flag"]
    )
    assert value == [0.0, 0.5, 1.0] and isinstance(value, list)
    assert tag == ["t0", "t1", "t2"]
    assert flag == [False, True, False] and all(isinstance(f, bool) for f in flag)
    _, (value, flag) = buffer.sample_batch(
        -1,
        sample_method="all",
        sample_attrs=["value", "flag"],
        additional_concat_attrs=["value", "flag"],
    )
    assert value.shape == (3, 1) and value.dtype == torch.float32
    assert value.view(-1).tolist() == [0.0, 0.5, 1.0]
    assert flag.dtype == torch.bool and flag.view(-1).tolist() == [False, True, False]


def test_custom_attribute_that_turns_non_numeric_becomes_a_list():
    buffer = Buffer(10)
    buffer.append(make(0, info=1))
    buffer.append(make(1, info={"k": "v"}))
    buffer.append(make(2, info=3))
    _, (info,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["info"])
    assert info == [1, {"k": "v"}, 3]


def test_list_custom_attribute_concatenated_on_request():
    buffer = Buffer(10)
    buffer.append(make(0, pair=[1.0, 2.0]))
    buffer.append(make(1, pair=[3.0, 4.0]))
    _, (pair,) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["pair"], additional_concat_attrs=["pair"]
    )
    assert pair.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_wildcard_gathers_remaining_custom_attributes_only():
    buffer = Buffer(10)
    buffer.append(make(0, gae=0.5, value=1.5, note="n"))
    _, (state, reward, rest) = buffer.sample_batch(1, sample_attrs=["state", "reward", "*"])
    assert set(rest) == {"gae", "value", "note"}
    assert rest["note"] == ["n"] and rest["gae"] == [0.5]
    _, (value, rest) = buffer.sample_batch(
        1, sample_attrs=["value", "*"], additional_concat_attrs=["gae"]
    )
    assert value == [1.5]
    assert set(rest) == {"gae", "note"}  # never major or sub attributes, nor named ones
    assert rest["gae"].tolist() == [[0.5]]


def test_unknown_names_are_ignored_and_order_is_kept():
    buffer = filled(2)
    _, values = buffer.sample_batch(1, sample_attrs=["reward", "nonsense", "state", "terminal"])
    assert len(values) == 3
    reward, state, terminal = values
    assert reward.shape == (1, 1) and isinstance(state, dict) and terminal.dtype == torch.bool


def test_concatenate_false_returns_per_sample_lists():
    buffer = filled(3)
    size, (state, action, next_state, reward, terminal) = buffer.sample_batch(
        -1, concatenate=False, sample_method="all"
    )
    assert size == 3
    assert isinstance(state["s"], list) and len(state["s"]) == 3
    assert all(t.shape == (1, 3) for t in state["s"])
    assert [t.item() for t in action["a"]] == [0, 1, 2]
    assert reward == [0.0, 1.0, 2.0]
    assert terminal == [False, True, False] and all(isinstance(t, bool) for t in terminal)


def test_output_device_is_honoured():
    # The meta device stands in for an accelerator on a CPU-only machine.
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(make(i, value=float(i), tag=[i]))
    _, (state, action, next_state, reward, terminal, tag, value) = buffer.sample_batch(
        2, device="meta", additional_concat_attrs=["value", "tag"]
    )
    for tensor in (state["s"], action["a"], next_state["s"], reward, terminal, tag, value):
        assert tensor.device.type == "meta"
    assert reward.shape == (2, 1) and state["s"].shape == (2, 3)
    # Stored data stays where it was.
    _, (state,) = buffer.sample_batch(1, sample_attrs=["state"])
    assert state["s"].device.type == "cpu"


def test_buffer_device_holds_the_stored_columns():
    buffer = Buffer(4, buffer_device="meta")
    buffer.append(make(0))
    _, (state, reward) = buffer.sample_batch(1, sample_attrs=["state", "reward"])
    assert state["s"].device.type == "meta" and reward.device.type == "meta"
    assert state["s"].shape == (1, 3) and reward.shape == (1, 1)


def test_sampled_tensors_do_not_alias_storage():
    buffer = filled(2)
    _, (state,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["state"])
    state["s"].add_(100.0)
    _, (state,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["state"])
    assert state["s"][:, 0].tolist() == [0.0, 1.0]


# -- documented helpers (item 47) ---------------------------------------------------------
def test_make_tensor_from_batch():
    assert Buffer.make_tensor_from_batch([], "cpu", True) == []
    scalars = Buffer.make_tensor_from_batch([1.0, 2.0, 3.0], "cpu", True)
    assert scalars.shape == (3, 1) and scalars.view(-1).tolist() == [1.0, 2.0, 3.0]
    tensors = Buffer.make_tensor_from_batch([torch.zeros(1, 2), torch.ones(2, 2)], "cpu", True)
    assert tensors.shape == (3, 2) and tensors[1:].sum().item() == 4.0
    raw = [torch.zeros(1, 2), torch.ones(1, 2)]
    assert Buffer.make_tensor_from_batch(raw, "cpu", False) is raw
    assert Buffer.make_tensor_from_batch([1, 2], "meta", True).device.type == "meta"


def test_post_process_batch_matches_sample_batch():
    transitions = [make(i, value=float(i), note=str(i)) for i in range(3)]
    buffer = Buffer(5)
    buffer.extend(transitions)
    attrs = ["state", "reward", "terminal", "*"]
    by_list = Buffer.post_process_batch(transitions, "cpu", True, attrs, ["value"])
    _, by_buffer = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=attrs, additional_concat_attrs=["value"]
    )
    assert torch.equal(by_list[0]["s"], by_buffer[0]["s"])
    assert torch.equal(by_list[1], by_buffer[1])
    assert torch.equal(by_list[2], by_buffer[2])
    assert torch.equal(by_list[3]["value"], by_buffer[3]["value"])
    assert by_list[3]["note"] == by_buffer[3]["note"] == ["0", "1", "2"]
    assert Buffer.post_process_batch([], "cpu", True, None, None) is None
    unconcatenated = Buffer.post_process_batch(transitions, "cpu", False, ["reward"], None)
    assert unconcatenated == ([0.0, 1.0, 2.0],)


def test_extend_checks_shapes_dtypes_and_kinds_of_every_transition():
    buffer = Buffer(10)
    buffer.append(make(0))
    wrong_shape, wrong_dtype, int_reward = make(2), make(3), make(4)
    wrong_shape.state["s"] = torch.zeros(1, 7)
    wrong_dtype.state["s"] = wrong_dtype.state["s"].double()
    with pytest.raises(ValueError, match=r"state\['s'\] must have shape"):
        buffer.extend([make(1), wrong_shape])
    with pytest.raises(ValueError, match="dtype torch.float32"):
        buffer.extend([make(1), wrong_dtype])
    assert buffer.size() == 1
    int_reward.reward = 4  # an int fits a float column: accepted by the full check
    buffer.extend([make(1), int_reward])
    assert all_rewards(buffer) == [0.0, 1.0, 4.0]


def _bad_shape(t):
    t.state["s"] = torch.zeros(1, 7)


def _bad_dtype(t):
    t.state["s"] = t.state["s"].double()


def _missing_key(t):
    t.state = {"other": torch.zeros(1, 3)}


def _nan_state(t):
    t.next_state["s"] = torch.full((1, 3), float("nan"))


@pytest.mark.parametrize(
    "spoil, message",
    [
        (_bad_shape, r"state\['s'\] must have shape"),
        (_bad_dtype, "dtype torch.float32"),
        (_missing_key, "keys"),
        (_nan_state, "must hold finite values"),
    ],
)
def test_a_long_episode_is_checked_row_by_row_too(spoil, message):
    """Long lists of Transition objects are checked column by column; a bad row still gets its error."""
    buffer = Buffer(100)
    buffer.append(make(0))
    episode = [make(i) for i in range(1, 41)]
    spoil(episode[37])
    with pytest.raises(ValueError, match=message):
        buffer.extend(episode)
    assert buffer.size() == 1
    episode = [make(i) for i in range(1, 41)]
    episode[5].state["s"] = torch.nn.Parameter(
        episode[5].state["s"], requires_grad=False
    )  # a Tensor subclass
    episode[7].reward = 8  # transition 8: an int fits a float column
    buffer.extend(episode)
    assert all_rewards(buffer) == [float(i) for i in range(41)]


def test_concatenating_a_non_numeric_custom_attribute_names_it():
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(make(i, tag=f"t{i}"))
    with pytest.raises(
        ValueError,
        match="cannot concatenate the custom attribute 'tag' into a tensor: it holds str",
    ):
        buffer.sample_batch(2, additional_concat_attrs=["tag"])
    _, (tags,) = buffer.sample_batch(3, sample_method="all", sample_attrs=["tag"])
    assert sorted(tags) == ["t0", "t1", "t2"]


# -- one storing path for dicts and Transition objects (moved from test_fast_path.py) ------------------
NAN, INF = float("nan"), float("inf")


def step(i: int, **custom) -> dict:
    """Transition ``i`` as the documented dict: two state keys, an int action, float reward, bool terminal."""
    g = torch.Generator().manual_seed(i)
    return {
        "state": {"pos": torch.randn(1, 3, generator=g), "img": torch.randn(1, 2, 2, generator=g)},
        "action": {"a": torch.tensor([[i % 5]])},
        "next_state": {
            "pos": torch.randn(1, 3, generator=g),
            "img": torch.randn(1, 2, 2, generator=g),
        },
        "reward": float(i) / 3,
        "terminal": i % 7 == 6,
        **custom,
    }


def everything(buffer: Buffer):
    """Every stored attribute, oldest first (concatenated, custom ones as lists)."""
    _, batch = Buffer.sample_batch(buffer, -1, sample_method="all")  # also for a PrioritizedBuffer
    return batch


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert type(a) is type(b) and a == b


def snapshot(buffer: Buffer):
    return (
        buffer._pos,
        buffer._size,
        buffer._capacity,
        everything(buffer) if buffer.size() else None,
    )


def expected_rows(indexes, **custom):
    """What a buffer holding ``step(i, **custom(i))`` for ``indexes`` returns for ``sample_method="all"``."""
    rows = [step(i) for i in indexes]
    major = {
        name: {k: torch.cat([r[name][k] for r in rows]) for k in rows[0][name]}
        for name in ("state", "action", "next_state")
    }
    reward = torch.tensor([[r["reward"]] for r in rows])
    terminal = torch.tensor([[r["terminal"]] for r in rows])
    return (
        major["state"],
        major["action"],
        major["next_state"],
        reward,
        terminal,
        *([custom[name](i) for i in indexes] for name in sorted(custom)),
    )


@pytest.mark.parametrize(
    "size", [7, 2000]
)  # a small ring that wraps; a buffer that grows past 1024 rows
def test_dicts_and_transitions_store_the_same_rows(size):
    def custom(i):
        return {"note": f"n{i}", "count": i, "weight": i / 7}

    by_dict, by_transition = Buffer(size), Buffer(size)
    for i in range(1300):
        assert by_dict.append(step(i, **custom(i))) == by_transition.append(
            Transition(**step(i, **custom(i)))
        )
    kept = range(1300 - min(size, 1300), 1300)
    wanted = expected_rows(kept, count=lambda i: i, note=lambda i: f"n{i}", weight=lambda i: i / 7)
    assert_same(everything(by_dict), wanted)
    assert_same(everything(by_transition), wanted)
    assert_same(by_dict[3], by_transition[3])
    # an episode of dicts, across the end of the ring, and one longer than the buffer
    assert by_dict.extend(
        [step(i, **custom(i)) for i in range(2000, 2030)]
    ) == by_transition.extend([Transition(**step(i, **custom(i))) for i in range(2000, 2030)])
    assert (
        by_dict.extend([step(i, **custom(i)) for i in range(3000, 3000 + 2 * size)])[-1]
        == (
            by_transition.extend(
                [Transition(**step(i, **custom(i))) for i in range(3000, 3000 + 2 * size)]
            )[-1]
        )
    )
    assert_same(everything(by_dict), everything(by_transition))
    assert everything(by_dict)[6] == [
        f"n{i}" for i in range(3000 + size, 3000 + 2 * size)
    ]  # (count, note, weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_concatenated_samples_of_every_kind_of_column_after_growth(dtype):
    buffer = Buffer(3000)
    for i in range(1500):  # growing past 1024 rows replaces the columns
        buffer.append(
            step(i, note=f"n{i}", count=i, weight=i / 7, vec=torch.full((1, 2), float(i)))
        )
    index = torch.randint(1500, (40,), generator=torch.Generator().manual_seed(1))
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # float rewards come back in the default dtype
    try:
        _, (state, action, reward, rest) = buffer.sample_batch(
            40,
            sample_method=lambda b, n: (40, index),
            sample_attrs=["state", "action", "reward", "*"],
        )
        _, (count, vec) = buffer.sample_batch(
            40,
            sample_method=lambda b, n: (40, index),
            sample_attrs=["count", "vec"],
            additional_concat_attrs=["count"],
        )
    finally:
        torch.set_default_dtype(default)
    rows = index.tolist()
    assert reward.dtype == dtype and reward.view(-1).tolist() == pytest.approx(
        [i / 3 for i in rows]
    )
    assert action["a"].dtype == torch.long and action["a"].view(-1).tolist() == [
        i % 5 for i in rows
    ]
    assert torch.equal(state["img"], torch.cat([step(i)["state"]["img"] for i in rows]))
    assert set(rest) == {"note", "count", "weight", "vec"} and rest["note"] == [
        f"n{i}" for i in rows
    ]
    assert rest["count"] == rows and rest["weight"] == [i / 7 for i in rows]
    assert count.tolist() == [[i] for i in rows] and [v.tolist() for v in vec] == [
        [[float(i)] * 2] for i in rows
    ]


def test_numpy_scalars_and_tensor_sub_attributes_are_stored_as_their_values():
    buffer = Buffer(10)
    for i in range(15):
        data = step(i)
        data["reward"], data["terminal"] = np.float32(i / 4), np.bool_(i % 2)
        buffer.append(data)
    _, (reward, terminal) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["reward", "terminal"]
    )
    assert reward.view(-1).tolist() == [i / 4 for i in range(5, 15)]
    assert terminal.dtype == torch.bool and terminal.view(-1).tolist() == [
        bool(i % 2) for i in range(5, 15)
    ]
    tensors = Buffer(10)
    for i in range(15):
        data = step(i)
        data["reward"], data["terminal"] = torch.full((1, 2), i / 4), torch.tensor([[float(i % 2)]])
        tensors.append(data)
    _, (reward, terminal) = tensors.sample_batch(
        -1, sample_method="all", sample_attrs=["reward", "terminal"]
    )
    assert reward.shape == (10, 2) and reward[:, 1].tolist() == [i / 4 for i in range(5, 15)]
    assert terminal.view(-1).tolist() == [float(i % 2) for i in range(5, 15)]


def test_values_that_are_converted_store_their_values():
    buffer = Buffer(10)
    variants = [
        step(0),
        {**step(1), "reward": 2},
        {**step(2), "terminal": 1},
        {**step(3), "terminal": np.bool_(False)},
        {
            **step(4),
            "state": {"pos": torch.ones(1, 3, requires_grad=True), "img": torch.zeros(1, 2, 2)},
        },
    ]
    for data in variants:
        buffer.append(data)
    state, _, _, reward, terminal = everything(buffer)
    assert reward.view(-1).tolist() == pytest.approx([0.0, 2.0, 2 / 3, 1.0, 4 / 3])
    assert terminal.view(-1).tolist() == [False, False, True, False, False]
    assert not state["pos"].requires_grad and state["pos"][4].tolist() == [1.0, 1.0, 1.0]
    assert not buffer._major["state"][
        "pos"
    ].tensor.requires_grad  # the storage joined no autograd graph


def assert_stored_through_host_copies(off_host_step):
    """Transitions ``off_host_step(i)``, with tensors off the host, store what ``step(i)`` stores (one by one, and
    an episode of them)."""
    buffer = Buffer(10)
    for i in range(15):
        buffer.append(off_host_step(i))
    assert_same(everything(buffer), expected_rows(range(5, 15)))
    assert everything(buffer)[0]["pos"].device.type == "cpu"
    buffer.extend([off_host_step(i) for i in range(15, 55)])
    assert_same(everything(buffer), expected_rows(range(45, 55)))


@pytest.mark.parametrize("as_transition", [False, True])
def test_tensors_that_numpy_refuses_are_copied_to_the_host(monkeypatch, as_transition):
    # Without a GPU: tensors marked "elsewhere" behave as CUDA tensors do, numpy() raises a
    # TypeError and cpu() returns a host copy. (The CUDA test below does the same on a GPU.)
    elsewhere, numpy, cpu = set(), torch.Tensor.numpy, torch.Tensor.cpu

    def fake_numpy(tensor, *args, **kwargs):
        if id(tensor) in elsewhere:
            raise TypeError("can't convert cuda:0 device type tensor to numpy")
        return numpy(tensor, *args, **kwargs)

    def fake_cpu(tensor, *args, **kwargs):
        return tensor.clone() if id(tensor) in elsewhere else cpu(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "numpy", fake_numpy)
    monkeypatch.setattr(torch.Tensor, "cpu", fake_cpu)
    kept = []  # the marked tensors stay alive, so that no other tensor takes their id

    def remote_step(i):
        data = step(i)
        data = Transition(**data) if as_transition else data
        values = (
            data.__dict__ if as_transition else data
        )  # a Transition holds copies of its tensors
        kept.extend([values["state"]["pos"], values["action"]["a"]])
        elsewhere.update(map(id, kept[-2:]))
        return data

    assert_stored_through_host_copies(remote_step)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("as_transition", [False, True])
def test_cuda_tensors_are_copied_into_the_cpu_columns(as_transition):
    def cuda_step(i):  # states and actions on the GPU, as a loop that acts on the GPU has them
        data = step(i)
        data["state"] = {k: v.cuda() for k, v in data["state"].items()}
        data["action"] = {"a": data["action"]["a"].cuda()}
        return Transition(**data) if as_transition else data

    assert_stored_through_host_copies(cuda_step)


DICT_ONLY = (
    "Transition holds batch size 1",
    "cannot build a Transition from the dictionary",
    "major attribute 'state' must hold tensors",
)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["state"].update(pos=torch.zeros(1, 4)), r"state\['pos'\] must have shape"),
        (lambda d: d["state"].update(pos=torch.zeros(2, 3)), "Transition holds batch size 1"),
        (
            lambda d: d["action"].update(a=torch.zeros(1, 1)),
            r"action\['a'\] must have .*dtype torch.int64",
        ),
        (lambda d: d["state"].pop("img"), r"major attribute 'state' has keys \['pos'\]"),
        (lambda d: d["state"].update(extra=torch.zeros(1, 1)), r"major attribute 'state' has keys"),
        (lambda d: d.update(extra=1), "differ from those already stored"),
        (
            lambda d: d.update(reward=torch.ones(1, 1)),
            "attribute 'reward' must be a float scalar, got Tensor",
        ),
        (lambda d: d.update(terminal=2), "attribute 'terminal' must be a bool or 0/1, got 2"),
        (lambda d: d.update(reward=NAN), "attribute 'reward' must be a finite number, got nan"),
        (
            lambda d: d["next_state"].update(pos=torch.tensor([[0.0, INF, 1.0]])),
            r"next_state\['pos'\].*finite.*inf",
        ),
        (lambda d: d["state"]["img"].__setitem__((0, 1, 1), NAN), r"state\['img'\].*finite.*nan"),
        (lambda d: d.pop("terminal"), "cannot build a Transition from the dictionary"),
        (
            lambda d: d["state"].update(pos=[[0.0, 0.0, 0.0]]),
            "major attribute 'state' must hold tensors",
        ),
    ],
)
@pytest.mark.parametrize("as_transition", [False, True])
def test_a_mismatch_gets_the_documented_error_and_changes_nothing(change, message, as_transition):
    buffer = Buffer(6)
    for i in range(9):  # a full ring
        buffer.append(step(i))
    before = snapshot(buffer)
    bad = step(99)
    change(bad)
    if (
        as_transition and message in DICT_ONLY
    ):  # no Transition holds this: building one raises the same
        with pytest.raises(
            (TypeError, ValueError),
            match=message.replace("cannot build a Transition from the dictionary", "missing"),
        ):
            Transition(**bad)
        return
    if as_transition:
        bad = Transition(**bad)
    with pytest.raises(ValueError, match=message):
        buffer.append(bad)
    assert_same(snapshot(buffer), before)
    with pytest.raises(ValueError, match=message):
        buffer.extend([step(100), bad, step(101)])
    assert_same(snapshot(buffer), before)
    buffer.append(step(102))  # and the buffer still stores
    assert buffer.size() == 6 and buffer[-1].reward == 102 / 3


def test_missing_required_attributes_are_reported_with_a_layout():
    buffer = Buffer(10)
    buffer.append(step(0), required_attrs=())
    with pytest.raises(ValueError, match=r"missing required attribute\(s\) \['cost'\]"):
        buffer.append(step(1), required_attrs=("state", "cost"))
    with pytest.raises(ValueError, match=r"missing required attribute\(s\) \['cost'\]"):
        buffer.append(step(1), required_attrs=iter(["state", "cost"]))
    buffer.append(step(1), required_attrs=["state", "reward"])
    assert buffer.size() == 2


def test_check_finite_is_read_at_every_append():
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(step(i))
    nan_state = step(3)
    nan_state["state"]["pos"][0, 0] = NAN
    with pytest.raises(ValueError, match="finite"):
        buffer.append(nan_state)
    buffer.check_finite = False
    buffer.append(nan_state)
    buffer.append({**step(4), "reward": INF})
    assert buffer.size() == 5
    _, (state, reward) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["state", "reward"]
    )
    assert torch.isnan(state["pos"][3, 0]) and reward[4, 0] == INF
    with pytest.raises(ValueError, match="'terminal' must be a bool or 0/1"):  # checked either way
        buffer.append({**step(5), "terminal": 0.5})


def test_a_large_but_finite_sum_is_not_rejected():
    buffer = Buffer(10)
    buffer.append(step(0))
    big = step(1)
    big["state"]["pos"] = torch.full(
        (1, 3), 3e38
    )  # each finite; their float64 sum too, float32 would overflow
    big["state"]["img"] = torch.full((1, 2, 2), 3e38)
    buffer.append(big)
    assert buffer.size() == 2 and buffer[1].state["img"].max().item() == pytest.approx(3e38)


def test_an_int_beyond_int64_is_rejected_and_changes_nothing():
    buffer = Buffer(4)
    for i in range(6):
        buffer.append(step(i, count=i))
    before = snapshot(buffer)
    with pytest.raises(
        ValueError,
        match=r"attribute 'count' must fit in a 64-bit integer, got 2\*\*70|got 1180591620717411303424",
    ):
        buffer.append(step(9, count=2**70))
    assert_same(snapshot(buffer), before)


def all_actions(buffer: Buffer) -> list:
    _, (action,) = Buffer.sample_batch(buffer, -1, sample_method="all", sample_attrs=["action"])
    return action["a"].view(-1).tolist()


def test_a_deep_copy_or_pickle_writes_into_its_own_columns():
    import copy
    import pickle

    buffer = Buffer(10)
    for i in range(4):
        buffer.append(step(i))
    for clone in (copy.deepcopy(buffer), pickle.loads(pickle.dumps(buffer))):
        clone.append(step(50))
        clone.append(step(51))
        assert buffer.size() == 4 and clone.size() == 6
        assert all_actions(clone)[-2:] == [0, 1] and all_actions(buffer) == [0, 1, 2, 3]
    buffer.append(step(5))  # the original still writes into its own columns
    assert all_actions(buffer) == [0, 1, 2, 3, 0]


def test_moving_columns_to_shared_memory_after_forget_views():
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(step(i))
    everything(buffer)  # gathers through views of the columns too
    for col in buffer._columns():
        col.tensor.share_memory_()
    buffer._forget_views()
    buffer.append(step(3))
    assert all_actions(buffer) == [0, 1, 2, 3]


def test_shm_buffer_stores_through_shared_columns():
    from machin.frame.buffers import SHMBuffer

    buffer = SHMBuffer(2000)
    for i in range(1100):  # past the initial capacity: the columns are replaced and shared again
        buffer.append(step(i))
    assert all(col.tensor.is_shared() for col in buffer._columns())
    assert all_actions(buffer) == [i % 5 for i in range(1100)]


def test_a_subclass_that_wraps_extend_sees_every_append():
    class Counting(Buffer):
        def extend(self, transitions, required_attrs=DEFAULT_REQUIRED_ATTRS):
            self.calls = getattr(self, "calls", 0) + 1
            return super().extend(transitions, required_attrs)

    buffer = Counting(10)
    for i in range(5):
        buffer.append(step(i))
    assert buffer.calls == 5 and all_actions(buffer) == [0, 1, 2, 3, 4]


def test_a_dict_stores_its_own_copy_of_custom_values():
    buffer = Buffer(4)
    notes = [{"seen": [0]} for _ in range(3)]
    for i, note in enumerate(notes):
        buffer.append(step(i, note=note, weight=torch.ones(1) * i))
    notes[2]["seen"].append(1)  # the caller changes what it passed ...
    _, (stored, weight) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["note", "weight"]
    )
    assert stored == [{"seen": [0]}] * 3  # ... the buffer keeps what was given
    assert [w.tolist() for w in weight] == [[0.0], [1.0], [2.0]]


@pytest.mark.parametrize("as_transition", [False, True])
@pytest.mark.parametrize("length", [5, 100])
def test_after_clear_the_same_layout_reuses_the_columns(as_transition, length):
    def episode(start):
        rows = [step(i, value=i / 2) for i in range(start, start + length)]
        return [Transition(**r) for r in rows] if as_transition else rows

    buffer = Buffer(200)
    for start in (0, 1000, 2000):  # an on-policy loop: store a rollout, train, clear
        buffer.extend(episode(start))
        assert_same(
            everything(buffer), expected_rows(range(start, start + length), value=lambda i: i / 2)
        )
        columns = buffer._major["state"]["pos"].tensor
        buffer.clear()
        assert buffer.size() == 0 and buffer.attribute_names is None
    buffer.extend(episode(3000))
    assert buffer._major["state"]["pos"].tensor is columns  # the same storage, not a new allocation
    assert_same(
        everything(buffer), expected_rows(range(3000, 3000 + length), value=lambda i: i / 2)
    )


@pytest.mark.parametrize("length", [1, 3, 100])
def test_after_clear_another_layout_or_a_bad_value_is_handled_as_in_an_empty_buffer(length):
    buffer = Buffer(200)
    buffer.extend([Transition(**step(i)) for i in range(length)])
    buffer.clear()
    other = [
        {
            "state": {"x": torch.ones(1, 2)},
            "action": {"a": torch.zeros(1, 1)},
            "next_state": {"x": torch.ones(1, 2)},
            "reward": 1.0,
            "terminal": False,
        }
        for _ in range(length)
    ]
    buffer.extend([Transition(**o) for o in other] if length > 2 else other)
    _, (state,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["state"])
    assert list(state) == ["x"] and state["x"].shape == (length, 2)
    buffer.clear()
    bad = [step(i) for i in range(length)]
    bad[-1]["reward"] = NAN
    with pytest.raises(ValueError, match="reward"):
        buffer.extend([Transition(**b) for b in bad] if length > 2 else bad)
    assert buffer.size() == 0 and buffer.attribute_names is None  # nothing stored, no layout kept
    buffer.append(other[0])  # so any layout is still welcome
    assert buffer.size() == 1 and buffer.attribute_names == list(other[0])


# -- PrioritizedBuffer and its WeightTree on the same storing path -----------------------------------
def test_prioritized_bad_priority_on_a_full_ring_changes_nothing():
    buffer = PrioritizedBuffer(4)
    for i in range(6):
        buffer.append(step(i))
    before, weights = snapshot(buffer), buffer.wt_tree.get_leaf_all_weights()
    for bad in (NAN, INF, "x", 10**400):
        with pytest.raises(ValueError, match="priority must be a finite number"):
            buffer.append(step(9), priority=bad)
    nan_state = step(9)
    nan_state["state"]["pos"][0, 0] = NAN
    with pytest.raises(ValueError, match="finite"):
        buffer.append(nan_state, priority=1.0)
    assert_same(snapshot(buffer), before)
    np.testing.assert_array_equal(buffer.wt_tree.get_leaf_all_weights(), weights)
    alpha_zero = PrioritizedBuffer(4, alpha=0.0)  # (nan + eps) ** 0 == 1 would hide a NaN priority
    alpha_zero.append(step(0))
    with pytest.raises(ValueError, match="priority must be a finite number, got nan"):
        alpha_zero.append(step(1), priority=NAN)
    assert alpha_zero.size() == 1


def test_update_priority_with_repeated_indexes_keeps_the_last_and_the_sums():
    buffer = PrioritizedBuffer(100, alpha=1.0, epsilon=0.0)
    buffer.extend([step(i) for i in range(100)])
    buffer.update_priority(np.array([1.0, 2.0, 3.0, 4.0]), np.array([5, 7, 5, 9]))
    leaves = buffer.wt_tree.get_leaf_all_weights()
    assert leaves[5] == 3.0 and leaves[7] == 2.0 and leaves[9] == 4.0
    assert buffer.wt_tree.get_weight_sum() == pytest.approx(leaves.sum())
    assert buffer.wt_tree.get_leaf_max() == 4.0
    with pytest.raises(ValueError, match="doesn't match: got 2 priorities for 1 indexes"):
        buffer.update_priority(np.array([1.0, 2.0]), np.array([3]))


def test_weight_tree_sums_stay_exact_enough_over_many_updates():
    rng = np.random.default_rng(0)
    tree = WeightTree(1000)
    reference = np.zeros(1000)
    for _ in range(400):  # past the periodic exact rebuild (every 4096 leaf updates)
        idx = rng.integers(0, 1000, 32)
        w = rng.random(32) * rng.choice([1e-3, 1.0, 1e3])
        tree.update_leaf_batch(w, idx)
        reference[idx] = w  # the last weight of a repeated index wins, as in numpy
        i, v = int(rng.integers(1000)), float(rng.random())
        tree.update_leaf(v, i)
        reference[i] = v
    np.testing.assert_array_equal(tree.get_leaf_all_weights(), reference)
    rebuilt = WeightTree(1000)
    rebuilt.update_all_leaves(reference)
    np.testing.assert_allclose(tree.weights, rebuilt.weights, rtol=1e-9, atol=1e-9)
    assert tree.get_leaf_max() == reference.max()


def test_a_copied_or_pickled_weight_tree_keeps_its_sums_and_maximum_in_step():
    import copy
    import pickle

    tree = WeightTree(100)
    tree.update_all_leaves(np.arange(100.0))
    for clone in (copy.deepcopy(tree), pickle.loads(pickle.dumps(tree))):
        clone.update_leaf(500.0, 3)
        clone.update_leaf_batch([1.0, 2.0], [99, 98])
        assert clone.get_leaf_weight(3) == 500.0
        assert clone.get_weight_sum() == pytest.approx(clone.get_leaf_all_weights().sum())
        assert clone.get_leaf_max() == 500.0
        assert (
            clone.find_leaf_index(clone.get_weight_sum() - 0.5) == 99
            and clone.find_leaf_index(6.5) == 3
        )
    assert (
        tree.get_leaf_weight(3) == 3.0 and tree.get_leaf_max() == 99.0
    )  # the original is untouched
