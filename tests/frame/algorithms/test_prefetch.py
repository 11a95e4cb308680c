"""The learner's pipeline: the prefetched batch, calls that do not wait, and stopping with one in flight."""

import threading

import pytest

from machin.frame.algorithms.prefetch import BackgroundCall, Prefetcher


class _Ready:
    def __init__(self, value):
        self.value = value

    def wait(self):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class _Source:
    """A buffer stand-in: a sample is what is stored when the sample starts."""

    def __init__(self):
        self.stored = []
        self.started = []

    def start(self, size, tag="batch"):
        self.started.append((size, tag))
        return _Ready(list(self.stored[-size:]))


def test_take_returns_the_batch_sampled_before_and_requests_the_next():
    source = _Source()
    prefetcher = Prefetcher(source.start)
    source.stored.extend([1, 2])
    assert prefetcher.take((2,)) == [1, 2]  # nothing in flight: sampled now
    assert (
        source.started == [(2, "batch"), (2, "batch")] and prefetcher.in_flight
    )  # the next one too
    source.stored.append(3)  # stored while the learner works on [1, 2]
    assert prefetcher.take((2,)) == [
        1,
        2,
    ]  # the batch sampled one take earlier, before 3 was stored
    assert prefetcher.take((2,)) == [2, 3]
    assert len(source.started) == 4


def test_other_arguments_drop_the_batch_in_flight_and_an_unwanted_result_is_not_prefetched():
    source = _Source()
    prefetcher = Prefetcher(source.start)
    source.stored.extend([1, 2, 3])
    prefetcher.take((1,))
    assert prefetcher.take((2, "other")) == [2, 3]  # sampled now, for the new arguments
    assert source.started[-2:] == [(2, "other"), (2, "other")]
    assert prefetcher.take((2, "other"), prefetch=lambda batch: False) == [2, 3]
    assert not prefetcher.in_flight  # e.g. an empty sample: the next take samples afresh


def test_a_failed_prefetch_is_raised_by_the_take_that_wanted_it_and_dropped_by_cancel():
    results = iter([[1], ValueError("member 1 failed"), [2], ValueError("member 2 failed")])
    prefetcher = Prefetcher(lambda: _Ready(next(results)))
    assert prefetcher.take(()) == [1]
    with pytest.raises(ValueError, match="member 1 failed"):
        prefetcher.take(())
    assert not prefetcher.in_flight
    assert prefetcher.take(()) == [2]
    prefetcher.cancel()  # the prefetched call failed, but nobody wants its result
    assert not prefetcher.in_flight


def _threads(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_background_call_keeps_one_call_and_surfaces_its_error():
    calls = BackgroundCall("h41_push")
    calls.submit(lambda x: x + 1, 1)
    with pytest.raises(RuntimeError, match="h41_push: a call is still outstanding"):
        calls.submit(lambda: None)
    assert calls.wait() == 2 and not calls.in_flight

    def fail():
        raise ConnectionError("model server 'learner' left")

    calls.submit(fail)
    with pytest.raises(ConnectionError, match="model server 'learner' left"):
        calls.close()
    assert _threads("h41_push") == []


def test_closing_with_a_call_in_flight_waits_for_it_and_leaves_no_thread():
    release, running, done = threading.Event(), threading.Event(), []
    calls = BackgroundCall("h41_slow")

    def slow():
        running.set()
        assert release.wait(30)
        done.append(True)
        return "pushed"

    calls.submit(slow)
    assert running.wait(30) and len(_threads("h41_slow")) == 1
    closer = threading.Thread(target=calls.close)
    closer.start()
    assert not done  # close is waiting for the call
    release.set()
    closer.join(30)
    assert not closer.is_alive() and done == [True]
    assert _threads("h41_slow") == []
    calls.submit(lambda: "again")  # a closed BackgroundCall starts a new thread when used again
    assert calls.wait() == "again"
    calls.close()
    assert _threads("h41_slow") == []
