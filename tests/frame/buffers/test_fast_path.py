"""The fast storing path of Buffer / PrioritizedBuffer (issue #21): same data as the full path, same errors.

Once a transition is stored, later transitions of the same layout (dicts or Transition
objects) are checked and written through a cached layout without building a Transition.
These tests compare it with the full path (forced by a subclass that overrides ``_write``,
which turns the fast path off) and check that anything the fast path does not accept still
gets the full checks, the documented errors and the transactional guarantee.
"""

import copy
import pickle
from unittest import mock

import numpy as np
import pytest
import torch

from machin.frame.buffers import Buffer, PrioritizedBuffer, WeightTree
from machin.frame.buffers import buffer as buffer_module
from machin.frame.transition import Transition

NAN, INF = float("nan"), float("inf")


class FullPathBuffer(Buffer):
    """Stores everything the full way: overriding a hook the fast path stands in for turns it off."""

    def _write(self, transitions):
        return super()._write(transitions)


class FullPathPrioritizedBuffer(PrioritizedBuffer):
    def _write(self, transitions):
        return super()._write(transitions)


def step(i: int, **custom) -> dict:
    """Transition ``i`` as the documented dict: two state keys, an int action, float reward, bool terminal."""
    g = torch.Generator().manual_seed(i)
    return {
        "state": {"pos": torch.randn(1, 3, generator=g), "img": torch.randn(1, 2, 2, generator=g)},
        "action": {"a": torch.tensor([[i % 5]])},
        "next_state": {"pos": torch.randn(1, 3, generator=g), "img": torch.randn(1, 2, 2, generator=g)},
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
    return buffer._pos, buffer._size, buffer._capacity, everything(buffer) if buffer.size() else None


@pytest.fixture
def count_full_writes(monkeypatch):
    """Count the writes that go the full way (Buffer._write)."""
    calls = []
    original = Buffer._write

    def counting(self, transitions):
        calls.append(len(transitions))
        return original(self, transitions)

    monkeypatch.setattr(Buffer, "_write", counting)
    return calls


# -- same data as the full path ---------------------------------------------------------------
@pytest.mark.parametrize("size", [7, 2000])  # a small ring that wraps; a buffer that grows past 1024 rows
@pytest.mark.parametrize("as_transition", [False, True])
def test_fast_appends_store_and_sample_exactly_what_the_full_path_does(size, as_transition):
    fast, full = Buffer(size), FullPathBuffer(size)
    for i in range(1300):
        data = step(i, note=f"n{i}", count=i, weight=i / 7)
        t = Transition(**data) if as_transition else data
        assert fast.append(t) == full.append(t if as_transition else step(i, note=f"n{i}", count=i, weight=i / 7))
    assert (fast._pos, fast._size, fast._capacity) == (full._pos, full._size, full._capacity)
    assert_same(everything(fast), everything(full))
    assert_same(fast[3], full[3])
    gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    fast.generator, full.generator = gen_a, gen_b
    assert_same(fast.sample_batch(5, concatenate=False), full.sample_batch(5, concatenate=False))


def general_gather(buffer: Buffer, *args):
    """``buffer._gather`` the general way: without a cached layout there is no generated gather."""
    cached, buffer._fast = buffer._fast, False
    try:
        return buffer._gather(*args)
    finally:
        buffer._fast = cached


def store(buffer: Buffer, size: int) -> None:
    """Fill ``buffer`` to ``size`` rows, with custom attributes of every storage kind."""
    while buffer.size() < size:
        i = buffer.size()
        buffer.append(step(i, note=f"n{i}", count=i, weight=i / 7, vec=torch.full((1, 2), float(i))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_concatenated_samples_through_the_generated_gather_equal_the_general_ones(dtype):
    buffer = Buffer(3000)
    attrs = [None, ["state", "action", "reward", "next_state", "terminal", "*"], ["*"], ["reward", "count", "nope"],
             ["next_state", "note", "vec", "terminal"], ["weight"]]
    default = torch.get_default_dtype()
    for size in (900, 1500):  # growing past 1024 rows replaces the columns and their views
        store(buffer, size)
        index = torch.randint(size, (40,), generator=torch.Generator().manual_seed(size))
        torch.set_default_dtype(dtype)  # float rewards come back in the default dtype
        try:
            for sample_attrs in attrs:
                assert_same(buffer._gather(index, True, None, sample_attrs, None),
                            general_gather(buffer, index, True, None, sample_attrs, None))
            assert (*buffer._keys, dtype) in buffer._fast.gathers  # every attribute (sample_attrs=None) too
            state, action, reward, *_ = buffer._gather(index, True, None, attrs[1], None)
        finally:
            torch.set_default_dtype(default)
        assert buffer._fast.gathers  # the generated path was taken
        assert action["a"].dtype == torch.long and reward.dtype == dtype and state["img"].shape == (40, 2, 2)
        assert torch.equal(state["pos"], buffer._major["state"]["pos"].tensor[index])
    # other calls keep the general path: per-sample lists, extra concatenated attributes, another device
    before = len(buffer._fast.gathers)
    for args in [(False, None, attrs[1], None), (True, None, attrs[1], ["count"])]:
        assert_same(buffer._gather(index, *args), general_gather(buffer, index, *args))
    assert buffer._gather(index, True, "meta", attrs[1], None)[0]["pos"].device.type == "meta"
    assert len(buffer._fast.gathers) == before


def test_the_fast_path_is_taken_after_the_first_append(count_full_writes):
    buffer = Buffer(5000)
    for i in range(1500):
        buffer.append(step(i))
    # the first append builds the layout; after that only growing (1024 -> 2048) goes the full way
    assert count_full_writes == [1, 1]
    assert buffer.size() == 1500


def test_fast_extend_matches_the_full_path_and_wraps(count_full_writes):
    fast, full = Buffer(50), FullPathBuffer(50)
    for start in (0, 30, 60, 90):  # an episode of 30 crosses the end of the ring
        episode = [step(i, note=str(i)) for i in range(start, start + 30)]
        assert fast.extend(episode) == full.extend([step(i, note=str(i)) for i in range(start, start + 30)])
    assert_same(everything(fast), everything(full))
    assert fast.extend([step(i, note="x") for i in range(120)])[-1] == full.extend(
        [step(i, note="x") for i in range(120)])[-1]  # longer than the buffer: the last 50 stay
    assert_same(everything(fast), everything(full))
    assert len([n for n in count_full_writes if n]) == 4 + 1 + 1  # FullPathBuffer's, plus fast's first extend


def test_extend_checks_dicts_with_the_generated_row_function_and_transitions_without():
    buffer = Buffer(100)
    buffer.extend([step(i) for i in range(5)])  # builds the layout
    plan, calls = buffer._fast_layout(), []
    generated = plan.row_dict
    plan.row_dict = lambda values, check: calls.append(values) or generated(values, check)
    dicts = [step(i) for i in range(5, 10)]
    assert buffer.extend(dicts) == list(range(5, 10))
    assert calls == dicts  # every dict, in order
    assert buffer.extend([Transition(**step(i)) for i in range(10, 13)]) == [10, 11, 12]
    assert len(calls) == 5  # Transition objects take the general row check
    bad = step(13)
    bad["state"]["pos"] = torch.zeros(1, 2)
    assert plan.row_dict(bad, True) is False  # refused, so the full path reports it
    values, row = step(14), generated(step(14), True)
    assert len(row) == len(plan.targets)  # the values in the order of plan.targets
    for j, (name, _, key, *_) in enumerate(plan.tensors):
        assert np.array_equal(row[j], values[name][key].numpy())
    assert row[len(plan.tensors):] == (values["reward"], values["terminal"])


def test_numpy_scalars_and_tensor_sub_attributes_take_the_fast_path(count_full_writes):
    def numpy_step(i):
        data = step(i)
        data["reward"], data["terminal"] = np.float32(i / 3), np.bool_(i % 2)
        return data

    fast, full = Buffer(10), FullPathBuffer(10)
    for i in range(15):
        fast.append(numpy_step(i))
        full.append(numpy_step(i))
    assert_same(everything(fast), everything(full))
    fast_writes = len(count_full_writes) - 15
    assert fast_writes == 1

    def tensor_step(i):
        data = step(i)
        data["reward"], data["terminal"] = torch.full((1, 2), i / 3), torch.tensor([[float(i % 2)]])
        return data

    fast, full = Buffer(10), FullPathBuffer(10)
    for i in range(15):
        fast.append(tensor_step(i))
        full.append(tensor_step(i))
    assert_same(everything(fast), everything(full))


def assert_stored_through_host_copies(off_host_step, count_full_writes):
    """Transitions ``off_host_step(i)``, with tensors off the host, store what ``step(i)`` stores.

    Appended one by one, all but the first take the fast path (each tensor copied to the host);
    an episode of them goes the full way, once (one host copy per column, not one per tensor).
    """
    fast, full = Buffer(10), FullPathBuffer(10)
    for i in range(15):
        fast.append(off_host_step(i))
        full.append(step(i))
    assert_same(everything(fast), everything(full))
    assert everything(fast)[0]["pos"].device.type == "cpu"
    assert len(count_full_writes) - 15 == 1  # of the fast buffer's appends only the first went the full way
    fast.extend([off_host_step(i) for i in range(15, 55)])
    full.extend([step(i) for i in range(15, 55)])
    assert_same(everything(fast), everything(full))
    assert count_full_writes[-2] == 40


@pytest.mark.parametrize("as_transition", [False, True])
def test_tensors_that_numpy_refuses_are_copied_to_the_host_on_the_fast_path(monkeypatch, count_full_writes,
                                                                            as_transition):
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
        values = data.__dict__ if as_transition else data  # a Transition holds copies of its tensors
        kept.extend([values["state"]["pos"], values["action"]["a"]])
        elsewhere.update(map(id, kept[-2:]))
        return data

    assert_stored_through_host_copies(remote_step, count_full_writes)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("as_transition", [False, True])
def test_cuda_tensors_are_copied_into_the_cpu_columns_on_the_fast_path(count_full_writes, as_transition):
    def cuda_step(i):  # states and actions on the GPU, as a loop that acts on the GPU has them
        data = step(i)
        data["state"] = {k: v.cuda() for k, v in data["state"].items()}
        data["action"] = {"a": data["action"]["a"].cuda()}
        return Transition(**data) if as_transition else data

    assert_stored_through_host_copies(cuda_step, count_full_writes)


def test_values_the_full_path_converts_still_store_the_same(count_full_writes):
    fast, full = Buffer(10), FullPathBuffer(10)
    variants = [step(0), step(1), {**step(2), "reward": 2}, {**step(3), "terminal": 1},
                {**step(4), "state": {"pos": torch.zeros(1, 3, requires_grad=True), "img": torch.zeros(1, 2, 2)}}]
    for data in variants:
        fast.append(data)
        full.append(data)
    assert_same(everything(fast), everything(full))


# -- mismatches get the full checks ----------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    (lambda d: d["state"].update(pos=torch.zeros(1, 4)), r"state\['pos'\] must have shape"),
    (lambda d: d["state"].update(pos=torch.zeros(2, 3)), "Transition holds batch size 1"),
    (lambda d: d["action"].update(a=torch.zeros(1, 1)), r"action\['a'\] must have .*dtype torch.int64"),
    (lambda d: d["state"].pop("img"), r"major attribute 'state' has keys \['pos'\]"),
    (lambda d: d["state"].update(extra=torch.zeros(1, 1)), r"major attribute 'state' has keys"),
    (lambda d: d.update(extra=1), "differ from those already stored"),
    (lambda d: d.update(reward=torch.ones(1, 1)), "attribute 'reward' must be a float scalar, got Tensor"),
    (lambda d: d.update(terminal=2), "attribute 'terminal' must be a bool or 0/1, got 2"),
    (lambda d: d.update(reward=NAN), "attribute 'reward' must be a finite number, got nan"),
    (lambda d: d["next_state"].update(pos=torch.tensor([[0.0, INF, 1.0]])), r"next_state\['pos'\].*finite.*inf"),
    (lambda d: d["state"]["img"].__setitem__((0, 1, 1), NAN), r"state\['img'\].*finite.*nan"),
    (lambda d: d.pop("terminal"), "cannot build a Transition from the dictionary"),
    (lambda d: d["state"].update(pos=[[0.0, 0.0, 0.0]]), "major attribute 'state' must hold tensors"),
])
def test_a_mismatch_after_the_layout_is_cached_gets_the_documented_error_and_changes_nothing(change, message):
    buffer = Buffer(6)
    for i in range(9):  # a full ring, written by the fast path
        buffer.append(step(i))
    assert buffer._fast  # the layout is cached
    before = snapshot(buffer)
    bad = step(99)
    change(bad)
    with pytest.raises(ValueError, match=message):
        buffer.append(bad)
    assert_same(snapshot(buffer), before)
    with pytest.raises(ValueError, match=message):
        buffer.extend([step(100), bad, step(101)])
    assert_same(snapshot(buffer), before)
    buffer.append(step(102))  # and the buffer still stores
    assert buffer.size() == 6


def test_missing_required_attributes_are_reported_on_the_fast_path():
    buffer = Buffer(10)
    buffer.append(step(0), required_attrs=())
    with pytest.raises(ValueError, match=r"missing required attribute\(s\) \['cost'\]"):
        buffer.append(step(1), required_attrs=("state", "cost"))
    with pytest.raises(ValueError, match=r"missing required attribute\(s\) \['cost'\]"):
        buffer.append(step(1), required_attrs=iter(["state", "cost"]))  # an iterator is read once, by the full path
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
    _, (state, reward) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["state", "reward"])
    assert torch.isnan(state["pos"][3, 0]) and reward[4, 0] == INF
    with pytest.raises(ValueError, match="'terminal' must be a bool or 0/1"):  # checked either way
        buffer.append({**step(5), "terminal": 0.5})


def test_a_large_but_finite_sum_is_not_rejected():
    buffer = Buffer(10)
    buffer.append(step(0))
    big = step(1)
    big["state"]["pos"] = torch.full((1, 3), 3e38)  # each finite; their float64 sum too, float32 would overflow
    big["state"]["img"] = torch.full((1, 2, 2), 3e38)
    buffer.append(big)
    assert buffer.size() == 2


# -- storage that moves: copies, pickles, shared memory ---------------------------------------
def test_a_deep_copy_or_pickle_writes_into_its_own_columns():
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


def all_actions(buffer: Buffer) -> list:
    _, (action,) = Buffer.sample_batch(buffer, -1, sample_method="all", sample_attrs=["action"])
    return action["a"].view(-1).tolist()


def test_moving_columns_to_shared_memory_after_forget_views():
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(step(i))
    everything(buffer)  # builds the gathering views too
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


# -- prioritized ------------------------------------------------------------------------------
def test_prioritized_fast_appends_match_the_full_path(count_full_writes):
    fast = PrioritizedBuffer(9, generator=np.random.default_rng(0))
    full = FullPathPrioritizedBuffer(9, generator=np.random.default_rng(0))
    for i in range(20):
        priority = None if i % 3 else float(i) - 5
        assert fast.append(step(i), priority) == full.append(step(i), priority)
        if i == 10:
            for b in (fast, full):
                b.update_priority(np.array([40.0, 0.5]), np.array([2, 3]))
    assert_same(everything(fast), everything(full))
    np.testing.assert_allclose(fast.wt_tree.get_leaf_all_weights(), full.wt_tree.get_leaf_all_weights(),
                               rtol=1e-15)
    assert fast.wt_tree.get_weight_sum() == pytest.approx(full.wt_tree.get_weight_sum(), rel=1e-12)
    assert count_full_writes.count(1) == 20 + 1  # all of FullPath's appends, and fast's first


def test_prioritized_bad_priority_on_the_fast_path_changes_nothing():
    buffer = PrioritizedBuffer(4)
    for i in range(6):
        buffer.append(step(i))
    before, weights = snapshot(buffer), buffer.wt_tree.get_leaf_all_weights()
    for bad in (NAN, INF, "x", 10 ** 400):
        with pytest.raises(ValueError, match="priority must be a finite number"):
            buffer.append(step(9), priority=bad)
    nan_state = step(9)
    nan_state["state"]["pos"][0, 0] = NAN
    with pytest.raises(ValueError, match="finite"):
        buffer.append(nan_state, priority=1.0)
    assert_same(snapshot(buffer), before)
    np.testing.assert_array_equal(buffer.wt_tree.get_leaf_all_weights(), weights)


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
    tree = WeightTree(100)
    tree.update_all_leaves(np.arange(100.0))
    for clone in (copy.deepcopy(tree), pickle.loads(pickle.dumps(tree))):
        clone.update_leaf(500.0, 3)
        clone.update_leaf_batch([1.0, 2.0], [99, 98])
        assert clone.get_leaf_weight(3) == 500.0
        assert clone.get_weight_sum() == pytest.approx(clone.get_leaf_all_weights().sum())
        assert clone.get_leaf_max() == 500.0
        assert clone.find_leaf_index(clone.get_weight_sum() - 0.5) == 99 and clone.find_leaf_index(6.5) == 3
    assert tree.get_leaf_weight(3) == 3.0 and tree.get_leaf_max() == 99.0  # the original is untouched


def test_fast_path_is_off_for_subclasses_that_wrap_storing():
    class Locked(Buffer):
        def extend(self, transitions, required_attrs=buffer_module.DEFAULT_REQUIRED_ATTRS):
            self.calls = getattr(self, "calls", 0) + 1
            return super().extend(transitions, required_attrs)

    buffer = Locked(10)
    for i in range(5):
        buffer.append(step(i))
    assert buffer.calls == 5  # append never skips the overridden extend
    assert (Locked._fast_store_ok, Locked._fast_append_ok) == (True, False)
    assert (FullPathBuffer._fast_store_ok, FullPathBuffer._fast_append_ok) == (False, False)
    with mock.patch.object(Buffer, "_extend_fast", side_effect=AssertionError("fast path used")):
        FullPathBuffer(10).extend([step(i) for i in range(3)])


def test_a_dict_stores_its_own_copy_of_list_column_values(count_full_writes):
    buffer = Buffer(4)
    notes = [{"seen": [0]} for _ in range(3)]
    for i, note in enumerate(notes):
        buffer.append(step(i, note=note, weight=torch.ones(1) * i))
    assert len(count_full_writes) == 1  # the later two took the fast path
    notes[2]["seen"].append(1)  # the caller changes what it passed ...
    _, (stored, weight) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["note", "weight"])
    assert stored == [{"seen": [0]}] * 3  # ... the buffer keeps what was given
    assert [w.tolist() for w in weight] == [[0.0], [1.0], [2.0]]


# -- after clear(): the columns of the same layout are used again, any other layout still stores -----
@pytest.mark.parametrize("as_transition", [False, True])
@pytest.mark.parametrize("length", [5, 100])  # short episodes go row by row, long Transition lists by column
def test_after_clear_the_same_layout_reuses_the_columns(count_full_writes, as_transition, length):
    def episode(start):
        rows = [step(i, value=i / 2) for i in range(start, start + length)]
        return [Transition(**r) for r in rows] if as_transition else rows

    fast, full = Buffer(200), FullPathBuffer(200)
    for start in (0, 1000, 2000):  # an on-policy loop: store a rollout, train, clear
        fast.extend(episode(start))
        full.extend(episode(start))
        assert_same(everything(fast), everything(full))
        columns = fast._major["state"]["pos"].tensor
        fast.clear()
        full.clear()
        assert fast.size() == 0 and fast.attribute_names is None
    fast.extend(episode(3000))
    assert fast._major["state"]["pos"].tensor is columns  # the same storage, not a new allocation
    assert_same(everything(fast), everything(full.extend(episode(3000)) and full))
    writes_of_fast = len(count_full_writes) - 4  # FullPathBuffer wrote 4 times
    assert writes_of_fast == (1 if length <= buffer_module._ROWWISE_MAX or not as_transition else 4)


@pytest.mark.parametrize("length", [1, 3, 100])
def test_after_clear_another_layout_or_a_bad_value_is_handled_as_in_an_empty_buffer(length):
    buffer = Buffer(200)
    buffer.extend([Transition(**step(i)) for i in range(length)])
    buffer.clear()
    other = [{"state": {"x": torch.ones(1, 2)}, "action": {"a": torch.zeros(1, 1)}, "next_state": {"x": torch.ones(1, 2)},
              "reward": 1.0, "terminal": False} for _ in range(length)]
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


# -- _append_dict: one call per dict, for the algorithms' store_transition ----------------------
def append_through_append_dict(buffer: Buffer, transition: dict):
    """What ReplayMixin.store_transition does: the offered function, else append; which one stored."""
    offered = buffer._append_dict
    if offered is not None:
        position = offered(buffer, transition)
        if position is not None:
            return position, "direct"
    return buffer.append(transition), "append"


@pytest.mark.parametrize("size", [7, 2000])  # a small ring that wraps; a buffer that grows past 1024 rows
def test_append_dict_stores_exactly_what_append_stores(size):
    fast, full = Buffer(size), FullPathBuffer(size)
    ways = []
    for i in range(1300):
        position, way = append_through_append_dict(fast, step(i, note=f"n{i}", count=i))
        assert position == full.append(step(i, note=f"n{i}", count=i))
        ways.append(way)
    assert (fast._pos, fast._size, fast._capacity) == (full._pos, full._size, full._capacity)
    assert_same(everything(fast), everything(full))
    # append stores the first dict and the one for which the columns must grow; the function the rest
    grown = [i for i in range(1, 1300) if ways[i] == "append"]
    assert ways[0] == "append" and grown == ([] if size == 7 else [1024])
    assert FullPathBuffer._direct_append_ok is False and full._append_dict is None


@pytest.mark.parametrize("change", [
    lambda d: d.update(reward=NAN),
    lambda d: d["next_state"].update(pos=torch.tensor([[0.0, INF, 1.0]])),
    lambda d: d.pop("terminal"),
    lambda d: d.update(terminal=0.5),
    lambda d: d.update(extra=1.0),
    lambda d: d["state"].update(pos=torch.zeros(1, 4)),
    lambda d: d["action"].update(a=torch.tensor([[1.5]])),
    lambda d: d["state"].update(pos=[[0.0, 0.0, 0.0]]),
])
def test_append_dict_declines_anything_else_and_changes_nothing(change):
    buffer = Buffer(6)
    for i in range(9):  # a full ring
        buffer.append(step(i))
    offered = buffer._append_dict
    before = snapshot(buffer)
    bad = step(99)
    change(bad)
    assert offered(buffer, bad) is None
    assert_same(snapshot(buffer), before)
    assert offered(buffer, step(100)) == before[0]  # and it still stores what fits


def test_append_dict_reads_check_finite_at_every_call():
    buffer = Buffer(10)
    buffer.append(step(0))
    assert buffer._append_dict(buffer, {**step(1), "reward": INF}) is None
    buffer.check_finite = False
    assert buffer._append_dict(buffer, {**step(1), "reward": INF}) == 1


def test_a_kept_append_dict_declines_once_the_layout_or_the_storage_changed():
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(step(i))
    kept = buffer._append_dict
    buffer.clear()
    other = {"state": {"x": torch.ones(1, 2)}, "action": {"a": torch.zeros(1, 1)},
             "next_state": {"x": torch.ones(1, 2)}, "reward": 1.0, "terminal": False}
    buffer.append(other)
    assert kept(buffer, step(3)) is None and buffer.size() == 1  # the old layout's function stores nothing
    function = buffer._append_dict
    assert function(buffer, other) == 1  # the new layout's does
    for clone in (copy.deepcopy(buffer), pickle.loads(pickle.dumps(buffer))):
        # copying forgets the original's views (see Buffer.__getstate__), so neither offers a function now
        assert clone._append_dict is None and buffer._append_dict is None
        assert function(clone, other) is None and function(buffer, other) is None
        clone.append(other)  # a copy offers its own function after its next append
        assert clone._append_dict(clone, other) == 3 and buffer.size() == 2
    buffer.append(other)
    function = buffer._append_dict
    assert function(buffer, other) == 3
    for col in buffer._columns():  # storage that moves (see test_moving_columns_to_shared_memory_after_forget_views)
        col.tensor.share_memory_()
    buffer._forget_views()
    assert function(buffer, other) is None and buffer._append_dict is None and buffer.size() == 4
    buffer.append(other)
    assert buffer._append_dict(buffer, other) == 5 and buffer.size() == 6


def test_append_dict_is_offered_only_where_the_class_appends_as_buffer_does():
    class Counting(Buffer):
        def append(self, transition, required_attrs=buffer_module.DEFAULT_REQUIRED_ATTRS):
            self.calls = getattr(self, "calls", 0) + 1
            return super().append(transition, required_attrs)

    for cls in (PrioritizedBuffer, Counting):
        buffer = cls(10)
        for i in range(3):
            buffer.append(step(i))
        assert not cls._direct_append_ok and buffer._append_dict is None


def test_store_transition_takes_the_offered_function(count_full_writes):
    from machin.frame.algorithms import DQN

    class Q(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)

        def forward(self, state):
            return self.fc(state)

    dqn = DQN(Q(), Q(), torch.optim.Adam, torch.nn.MSELoss(), replay_size=5)
    calls = []
    dqn.replay_buffer.append = lambda *a, **k: calls.append(1) or Buffer.append(dqn.replay_buffer, *a, **k)
    transitions = [{"state": {"state": torch.full((1, 3), float(i))}, "action": {"action": torch.tensor([[i % 2]])},
                    "next_state": {"state": torch.ones(1, 3)}, "reward": float(i), "terminal": False}
                   for i in range(8)]
    for t in transitions:
        dqn.store_transition(t)
    assert calls == [1] and len(count_full_writes) == 1  # only the first went through append
    _, (reward,) = dqn.replay_buffer.sample_batch(-1, sample_method="all", sample_attrs=["reward"])
    assert reward.view(-1).tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="reward"):
        dqn.store_transition({**transitions[0], "reward": NAN})  # declined, then append names the problem
    assert calls == [1, 1] and dqn.replay_buffer.size() == 5
