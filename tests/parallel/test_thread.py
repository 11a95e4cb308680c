import threading

import pytest

from machin.parallel.exception import format_exceptions
from machin.parallel.thread import Thread, ThreadException


def fail_in_thread(message):
    raise ValueError(message)


def run(thread):
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    return thread


def test_target_exception_is_kept_and_watch_raises_it_with_traceback():
    thread = run(Thread(target=fail_in_thread, args=("thread failed",)))
    assert isinstance(thread.exception, ThreadException)
    assert [type(error) for error in thread.exception.exceptions] == [ValueError]
    with pytest.raises(ThreadException, match="ValueError: thread failed") as info:
        thread.watch()
    message = str(info.value)
    assert "in fail_in_thread" in message
    assert "raise ValueError(message)" in message
    assert info.value is thread.exception


def test_successful_thread_has_no_exception():
    results = []
    thread = run(Thread(target=lambda a, b: results.append(a + b), args=(1,), kwargs={"b": 2}))
    assert results == [3]
    assert thread.exception is None
    assert thread.watch() is None


def test_cleaner_runs_after_failing_target_and_its_exception_is_kept():
    order = []

    def target():
        order.append("target")
        raise KeyError("from target")

    def cleaner():
        order.append("cleaner")
        raise RuntimeError("from cleaner")

    thread = run(Thread(target=target, cleaner=cleaner))
    assert order == ["target", "cleaner"]
    exception = thread.exception
    assert [type(error) for error in exception.exceptions] == [KeyError, RuntimeError]
    assert "Exception 1 of 2" in str(exception)
    assert "RuntimeError: from cleaner" in str(exception)


def test_cleaner_runs_in_the_thread_after_successful_target():
    seen = []
    thread = run(
        Thread(target=lambda: seen.append("target"), cleaner=lambda: seen.append("cleaner"))
    )
    assert seen == ["target", "cleaner"]
    assert thread.exception is None


def test_watch_does_not_raise_while_target_runs():
    release = threading.Event()
    thread = Thread(target=lambda: (release.wait(10), fail_in_thread("late")))
    thread.start()
    try:
        assert thread.watch() is None
        assert thread.exception is None
    finally:
        release.set()
        thread.join(10)
    with pytest.raises(ThreadException, match="ValueError: late"):
        thread.watch()


def test_thread_options_are_passed_on():
    thread = Thread(target=lambda: None, name="worker-7", daemon=True)
    assert thread.name == "worker-7"
    assert thread.daemon is True
    assert Thread.format_exceptions is format_exceptions
