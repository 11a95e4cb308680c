"""Tests of machin.frame.transition (checklist 6.3, items 18-28)."""

import copy

import numpy as np
import pytest
import torch

from machin.frame.transition import (
    Transition,
    TransitionBase,
    TransitionStorageBasic,
    TransitionStorageSmart,
)


def make(i: float = 0.0, **custom) -> Transition:
    return Transition(
        state={"s": torch.full((1, 5), i)},
        action={"a": torch.full((1, 2), i)},
        next_state={"s": torch.full((1, 5), i + 1)},
        reward=i,
        terminal=False,
        **custom,
    )


# -- construction and attribute access (items 18, 25, 26) ------------------------------
def test_attributes_are_reachable():
    t = make(3.0)
    assert torch.equal(t.state["s"], torch.full((1, 5), 3.0))
    assert torch.equal(t.action["a"], torch.full((1, 2), 3.0))
    assert torch.equal(t.next_state["s"], torch.full((1, 5), 4.0))
    assert t.reward == 3.0
    assert t.terminal is False
    assert t["reward"] == 3.0
    assert t.batch_size == 1


def test_class_attributes_default_to_none():
    assert Transition.state is None and Transition.reward is None and Transition.terminal is None


def test_attribute_category_properties():
    t = make(extra=1, another="x")
    assert t.major_attr == ["state", "action", "next_state"]
    assert t.sub_attr == ["reward", "terminal"]
    assert t.custom_attr == ["another", "extra"]


def test_transition_base_describes_custom_schema():
    t = TransitionBase(
        major_attr=["obs"],
        sub_attr=["value"],
        custom_attr=["tag"],
        major_data=[{"x": torch.zeros(3, 2)}],
        sub_data=[torch.ones(3, 1)],
        custom_data=["hello"],
    )
    assert t.keys() == ["obs", "value", "tag"]
    assert t.batch_size == 3
    assert t.obs["x"].shape == (3, 2)
    assert t.tag == "hello"


def test_transition_base_rejects_mismatched_name_and_value_counts():
    with pytest.raises(ValueError, match=r"2 major attribute names .* with 1 values"):
        TransitionBase(["a", "b"], [], [], [{"x": torch.zeros(1, 1)}], [], [])


def test_transition_base_rejects_inconsistent_batch_sizes():
    with pytest.raises(
        ValueError, match="has batch size 2, but earlier attributes have batch size 3"
    ):
        TransitionBase(["obs"], ["value"], [], [{"x": torch.zeros(3, 2)}], [torch.ones(2, 1)], [])


# -- validation (item 19 and the attribute kinds) -------------------------------------
@pytest.mark.parametrize("attr", ["state", "action", "next_state"])
def test_major_tensor_with_batch_size_other_than_one_is_rejected(attr):
    kwargs = dict(
        state={"s": torch.zeros(1, 5)},
        action={"a": torch.zeros(1, 2)},
        next_state={"s": torch.zeros(1, 5)},
        reward=0.0,
        terminal=False,
    )
    key = "a" if attr == "action" else "s"
    kwargs[attr] = {key: torch.zeros(2, kwargs[attr][key].shape[1])}
    with pytest.raises(
        ValueError,
        match=rf"batch size 1: the first dimension of attribute '{attr}\.{key}' must be 1",
    ):
        Transition(**kwargs)


def test_sub_tensor_with_batch_size_other_than_one_is_rejected():
    with pytest.raises(ValueError, match=r"attribute 'reward' must be 1, got shape \(3, 1\)"):
        Transition(
            state={"s": torch.zeros(1, 5)},
            action={"a": torch.zeros(1, 2)},
            next_state={"s": torch.zeros(1, 5)},
            reward=torch.zeros(3, 1),
            terminal=False,
        )


def test_zero_dimensional_tensor_is_rejected():
    with pytest.raises(ValueError, match="'reward' must have a batch dimension"):
        Transition(
            state={"s": torch.zeros(1, 5)},
            action={"a": torch.zeros(1, 2)},
            next_state={"s": torch.zeros(1, 5)},
            reward=torch.tensor(1.0),
            terminal=False,
        )


def test_major_attribute_must_be_a_dict_of_tensors():
    with pytest.raises(
        ValueError, match=r"major attribute 'state' must be a Dict\[str, Tensor\], got Tensor"
    ):
        Transition(
            state=torch.zeros(1, 5),
            action={"a": torch.zeros(1, 2)},
            next_state={"s": torch.zeros(1, 5)},
            reward=0.0,
            terminal=False,
        )
    with pytest.raises(
        ValueError, match="major attribute 'action' must hold tensors, but key 'a' holds list"
    ):
        Transition(
            state={"s": torch.zeros(1, 5)},
            action={"a": [1, 2]},
            next_state={"s": torch.zeros(1, 5)},
            reward=0.0,
            terminal=False,
        )


def test_sub_attribute_must_be_scalar_or_tensor():
    with pytest.raises(
        ValueError, match="sub attribute 'reward' must be a scalar or a tensor, got str"
    ):
        Transition(
            state={"s": torch.zeros(1, 5)},
            action={"a": torch.zeros(1, 2)},
            next_state={"s": torch.zeros(1, 5)},
            reward="1",
            terminal=False,
        )


def test_numpy_scalars_are_accepted_as_sub_attributes():
    # Environments often report numpy scalars (np.float32 rewards, np.bool_ terminals).
    t = Transition(
        state={"s": torch.zeros(1, 5)},
        action={"a": torch.zeros(1, 2)},
        next_state={"s": torch.zeros(1, 5)},
        reward=np.float32(0.5),
        terminal=np.bool_(True),
    )
    assert t.reward == 0.5
    assert bool(t.terminal) is True


def test_custom_tensor_is_kept_as_a_detached_copy():
    # Machin 0.3.4 accepted tensors as custom attributes (they are never moved between devices).
    source = torch.zeros(1, 1, requires_grad=True)
    t = make(value=source * 2)
    assert isinstance(t.value, torch.Tensor) and not t.value.requires_grad
    with torch.no_grad():
        source.add_(1.0)
    assert torch.equal(t.value, torch.zeros(1, 1))
    assert t.to("meta").value.device.type == "cpu"


# -- copies (items 20, 21) -------------------------------------------------------------
def test_tensors_are_cloned_and_detached():
    source = torch.zeros(1, 5, requires_grad=True)
    reward = torch.ones(1, 1)
    t = Transition(
        state={"s": source},
        action={"a": torch.zeros(1, 2)},
        next_state={"s": source},
        reward=reward,
        terminal=False,
    )
    with torch.no_grad():
        source.add_(5.0)
    reward.add_(1.0)
    assert torch.equal(t.state["s"], torch.zeros(1, 5))
    assert torch.equal(t.reward, torch.ones(1, 1))
    assert not t.state["s"].requires_grad
    assert t.state["s"].data_ptr() != source.data_ptr()


def test_custom_attributes_are_deep_copied():
    history = [1, [2, 3]]
    t = make(history=history)
    history.append(4)
    history[1].append(5)
    assert t.history == [1, [2, 3]]


def test_assignment_after_construction_is_validated_and_copied():
    t = make()
    new_state = torch.ones(1, 5)
    t.state = {"s": new_state}
    new_state.add_(1.0)
    assert torch.equal(t.state["s"], torch.ones(1, 5))
    with pytest.raises(ValueError, match="first dimension of attribute 'state.s' must be 1"):
        t["state"] = {"s": torch.ones(2, 5)}
    with pytest.raises(KeyError, match="has no attribute 'missing'"):
        t["missing"] = 1


# -- keys, items, has_keys (items 22, 23) ----------------------------------------------
def test_keys_order_major_sub_then_sorted_custom():
    t = make(zeta=1, alpha=2, mid=3)
    assert t.keys() == [
        "state",
        "action",
        "next_state",
        "reward",
        "terminal",
        "alpha",
        "mid",
        "zeta",
    ]


def test_items_are_name_value_pairs_in_key_order():
    t = make(2.0, zeta=1, alpha="a")
    items = t.items()
    assert [name for name, _ in items] == t.keys()
    assert torch.equal(items[0][1]["s"], torch.full((1, 5), 2.0))
    assert [value for _, value in items[3:]] == [2.0, False, "a", 1]
    assert dict(items)["zeta"] == 1


def test_has_keys_and_contains():
    t = make(extra=1)
    assert t.has_keys(["state", "extra"])
    assert not t.has_keys(["state", "foo"])
    assert t.has_keys([])
    assert "reward" in t and "foo" not in t
    with pytest.raises(KeyError, match="'foo'"):
        t["foo"]


# -- devices (item 24) ----------------------------------------------------------------
def test_to_same_device_returns_self_and_keeps_values():
    t = make(1.0)
    before = t.state["s"]
    assert t.to("cpu") is t
    assert torch.equal(t.state["s"], before)
    assert t.state["s"].device.type == "cpu"


def test_to_moves_every_tensor():
    # The meta device stands in for a second device on a CPU-only machine.
    t = Transition(
        state={"s": torch.zeros(1, 5)},
        action={"a": torch.zeros(1, 2)},
        next_state={"s": torch.zeros(1, 5)},
        reward=torch.ones(1, 1),
        terminal=False,
        note="x",
    )
    assert t.to("meta") is t
    assert t.state["s"].device.type == "meta"
    assert t.action["a"].device.type == "meta"
    assert t.next_state["s"].device.type == "meta"
    assert t.reward.device.type == "meta"
    assert t.terminal is False and t.note == "x"


# -- equality, repr, copies -------------------------------------------------------------
def test_equality_compares_values():
    assert make(1.0, k=1) == make(1.0, k=1)
    assert make(1.0) != make(2.0)
    assert make(1.0, k=1) != make(1.0, k=2)
    assert make(1.0) != make(1.0, k=1)


def test_repr_shows_shapes_not_values():
    text = repr(make(extra=7))
    assert text.startswith("Transition(")
    assert "Tensor(1, 5)" in text and "extra=7" in text


def test_repr_of_dict_and_tensor_valued_customs():
    text = repr(make(info={"count": 3, "t": torch.zeros(2)}))
    assert "info={'count': 3, 't': 'Tensor(2,)'}" in text


def test_deepcopy_gives_an_equal_independent_transition():
    t = make(1.0, lst=[1])
    c = copy.deepcopy(t)
    assert c == t
    c.state["s"].add_(1.0)
    c.lst.append(2)
    assert torch.equal(t.state["s"], torch.full((1, 5), 1.0))
    assert t.lst == [1]


# -- storages (items 27, 28) -------------------------------------------------------------
def test_storage_basic_caps_size_and_wraps_positions():
    storage = TransitionStorageBasic(3)
    positions = [storage.store(make(float(i))) for i in range(5)]
    assert positions == [0, 1, 2, 0, 1]
    assert len(storage) == 3
    assert [t.reward for t in storage] == [3.0, 4.0, 2.0]


def test_storage_basic_stores_isolated_copies():
    storage = TransitionStorageBasic(2)
    t = make(1.0, lst=[1])
    storage.store(t)
    t.state["s"].add_(10.0)
    t.lst.append(2)
    assert torch.equal(storage[0].state["s"], torch.full((1, 5), 1.0))
    assert storage[0].lst == [1]
    assert storage[0] is not t


def test_storage_clear_resets_position():
    storage = TransitionStorageBasic(2)
    storage.store(make())
    storage.store(make())
    storage.clear()
    assert len(storage) == 0
    assert storage.store(make()) == 0


def test_storage_rejects_non_positive_size():
    with pytest.raises(ValueError, match="max_size must be a positive integer, got 0"):
        TransitionStorageBasic(0)


def test_storage_smart_shares_state_with_previous_next_state():
    storage = TransitionStorageSmart(10)
    first = make(0.0)
    second = make(1.0)  # its state (ones) equals first's next_state (ones)
    storage.store(first)
    storage.store(second)
    stored_first, stored_second = storage
    assert stored_second.state["s"] is stored_first.next_state["s"]
    assert stored_second.state["s"].data_ptr() == stored_first.next_state["s"].data_ptr()
    # Unequal tensors are not shared, and the values are right.
    assert stored_second.next_state["s"] is not stored_first.next_state["s"]
    assert torch.equal(stored_second.next_state["s"], torch.full((1, 5), 2.0))
    # Sub and custom attributes are plain copies.
    assert stored_second.reward == 1.0


def test_storage_smart_copies_are_isolated_from_the_caller():
    storage = TransitionStorageSmart(4)
    t = make(0.0)
    storage.store(t)
    t.next_state["s"].add_(100.0)
    assert torch.equal(storage[0].next_state["s"], torch.ones(1, 5))


def test_storage_smart_does_not_share_tensors_of_other_dtype():
    storage = TransitionStorageSmart(4)
    storage.store(make(0.0))
    t = Transition(
        state={"s": torch.ones(1, 5, dtype=torch.float64)},
        action={"a": torch.zeros(1, 2)},
        next_state={"s": torch.zeros(1, 5)},
        reward=0.0,
        terminal=True,
    )
    storage.store(t)
    assert storage[1].state["s"].dtype == torch.float64
    assert storage[1].state["s"] is not storage[0].next_state["s"]


def test_storage_smart_wraps_like_basic():
    storage = TransitionStorageSmart(2)
    positions = [storage.store(make(float(i))) for i in range(3)]
    assert positions == [0, 1, 0]
    assert [t.reward for t in storage] == [2.0, 1.0]
    # Shared with the transition stored just before (slot 1), not with the one it replaced.
    assert storage[0].state["s"] is storage[1].next_state["s"]
