import pickle
import time

import pytest

from machin.utils.helper_classes import Counter, Object, Switch, Timer, Trigger


def test_counter_counts_by_step_and_resets_to_start():
    counter = Counter(start=5, step=2)
    assert counter.get() == 5
    counter.count()
    counter.count()
    assert counter.get() == 9
    counter.reset()
    assert counter.get() == 5


def test_counter_defaults():
    counter = Counter()
    counter.count()
    assert counter.get() == 1


def test_switch_on_off_flip():
    switch = Switch()
    assert switch.get() is False
    switch.on()
    assert switch.get() is True
    switch.off()
    assert switch.get() is False
    switch.flip()
    assert switch.get() is True
    switch.flip()
    assert switch.get() is False
    assert Switch(state=True).get() is True


def test_trigger_fires_once_after_on():
    trigger = Trigger()
    assert trigger.get() is False
    trigger.on()
    assert trigger.get() is True
    assert trigger.get() is False
    assert isinstance(trigger, Switch)
    assert Trigger(state=True).get() is True


def test_timer_measures_at_least_the_sleep():
    timer = Timer()
    timer.begin()
    time.sleep(0.05)
    first = timer.end()
    assert first >= 0.05
    timer.begin()
    assert timer.end() < first


def test_timer_counts_from_creation_without_begin():
    timer = Timer()
    time.sleep(0.01)
    assert timer.end() >= 0.01


def test_object_reads_and_writes_its_data():
    obj = Object(data={"x": 1})
    assert obj.x == 1
    obj.y = 2
    assert obj.data == {"x": 1, "y": 2}
    del obj.x
    assert obj.data == {"y": 2}


def test_object_uses_the_given_dict():
    data = {"a": 1}
    obj = Object(data)
    obj.b = 2
    assert data == {"a": 1, "b": 2}
    assert Object().data == {}


def test_object_missing_entries_read_as_none():
    obj = Object({"x": 1})
    assert obj.missing is None
    assert obj["missing"] is None
    with pytest.raises(AttributeError, match="Failed to find attribute: __missing_dunder__"):
        _ = obj.__missing_dunder__


def test_object_const_attrs_are_read_only():
    obj = Object({"fixed": 1, "free": 2}, const_attrs=["fixed"])
    obj.free = 3
    with pytest.raises(
        AttributeError, match="fixed is const: entry 'fixed' of Object is read-only"
    ):
        obj.fixed = 5
    with pytest.raises(RuntimeError, match="is const"):
        obj["fixed"] = 5
    with pytest.raises(AttributeError, match="read-only"):
        del obj.fixed
    assert obj.data == {"fixed": 1, "free": 3}
    # attr() is the low-level access and ignores const_attrs, as in Machin 0.3.4.
    assert obj.attr("fixed", 5, change=True) == 5


def test_object_attr_reaches_any_key():
    obj = Object()
    assert obj.attr("call", 7, change=True) == 7
    assert obj.attr("not an identifier", [1], change=True) == [1]
    assert obj.attr("call") == 7
    assert obj.data == {"call": 7, "not an identifier": [1]}
    assert obj.attr("nope") is None


def test_object_call_can_be_overridden():
    assert Object()() is None
    obj = Object()
    obj.call = lambda a, b=0: a + b
    assert obj(1, b=2) == 3
    assert "call" not in obj.data

    class Doubler(Object):
        def call(self, value):
            return 2 * value

    assert Doubler()(4) == 8


def test_object_data_must_be_a_dict():
    with pytest.raises(TypeError, match="data must be a dict or None .*got \\[1\\] of type list"):
        Object([1])
    obj = Object()
    with pytest.raises(TypeError, match="data attribute must be a dictionary"):
        obj.data = 3
    obj.data = {"z": 1}
    assert obj.z == 1


def test_object_pickles_and_reprs():
    obj = Object({"a": 1, "b": "x"}, const_attrs=["a"])
    copy = pickle.loads(pickle.dumps(obj))
    assert copy.data == {"a": 1, "b": "x"}
    assert copy.const_attrs == frozenset({"a"})
    assert repr(obj) == "Object(a=1, b='x')"
    assert "a" in dir(obj)
