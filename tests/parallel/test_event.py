import threading

import pytest

from machin.parallel.event import AndEvent, MultiEvent, OrEvent


def test_or_event_follows_any_member():
    a, b = threading.Event(), threading.Event()
    either = OrEvent(a, b)
    assert not either.is_set()
    assert either.wait(timeout=0.01) is False
    b.set()
    assert either.is_set()
    assert either.wait(timeout=0) is True
    a.set()
    b.clear()
    assert either.is_set()
    a.clear()
    assert not either.is_set()


def test_and_event_needs_every_member():
    a, b = threading.Event(), threading.Event()
    both = AndEvent(a, b)
    a.set()
    assert not both.is_set()
    assert both.wait(timeout=0.01) is False
    b.set()
    assert both.is_set()
    assert both.wait(timeout=0) is True
    a.clear()
    assert not both.is_set()


def test_state_at_construction_reflects_members():
    a, b = threading.Event(), threading.Event()
    a.set()
    assert OrEvent(a, b).is_set()
    assert not AndEvent(a, b).is_set()


def test_nested_events():
    a, b, c = threading.Event(), threading.Event(), threading.Event()
    nested = OrEvent(AndEvent(a, b), c)
    a.set()
    assert not nested.is_set()
    b.set()
    assert nested.is_set()
    a.clear()
    assert not nested.is_set()
    c.set()
    assert nested.is_set()


def test_one_event_can_feed_several_combinations():
    a, b = threading.Event(), threading.Event()
    either, both = OrEvent(a, b), AndEvent(a, b)
    a.set()
    assert either.is_set() and not both.is_set()
    b.set()
    assert either.is_set() and both.is_set()


def test_wait_returns_when_another_thread_sets_a_member():
    a, b = threading.Event(), threading.Event()
    either = OrEvent(a, b)
    setter = threading.Thread(target=b.set)
    setter.start()
    assert either.wait(timeout=10) is True
    setter.join(10)


def test_and_event_wait_returns_once_all_are_set_by_other_threads():
    events = [threading.Event() for _ in range(3)]
    every = AndEvent(*events)
    setters = [threading.Thread(target=event.set) for event in events]
    for setter in setters:
        setter.start()
    assert every.wait(timeout=10) is True
    for setter in setters:
        setter.join(10)


@pytest.mark.parametrize("cls", [OrEvent, AndEvent])
def test_non_event_argument_is_rejected(cls):
    with pytest.raises(
        ValueError,
        match=f"every argument of {cls.__name__} must be a threading.Event, "
        "argument 1 is 'x' of type str .type str is not a valid event type.",
    ):
        cls(threading.Event(), "x")


def test_without_members_the_state_is_that_of_an_empty_combination():
    # As in Machin 0.3.4: no member is set, and every one of none is.
    assert not OrEvent().is_set() and OrEvent().wait(timeout=0) is False
    assert AndEvent().is_set() and AndEvent().wait(timeout=0) is True


def test_own_set_and_clear_change_nothing():
    a = threading.Event()
    either = OrEvent(a)
    either.set()
    assert not either.is_set()
    a.set()
    either.clear()
    assert either.is_set()


def test_multi_event_is_an_event():
    combined = OrEvent(threading.Event())
    assert isinstance(combined, MultiEvent)
    assert isinstance(combined, threading.Event)
