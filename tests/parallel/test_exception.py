import pickle

import dill
import pytest

from machin.parallel.exception import (
    ExceptionWithTraceback,
    RemoteTraceback,
    WorkerException,
    collect_exceptions,
    format_exceptions,
    rebuild_exception,
)


def raise_value_error():
    raise ValueError("bad value 42")


def caught(func):
    try:
        func()
    except Exception as error:
        return error
    raise AssertionError("func did not raise")


class NeedsTwoArguments(Exception):
    def __init__(self, first, second):
        super().__init__(first)
        self.second = second


@pytest.mark.parametrize("module", [pickle, dill])
def test_unpickling_gives_original_exception_with_remote_traceback(module):
    error = caught(raise_value_error)
    rebuilt = module.loads(module.dumps(ExceptionWithTraceback(error)))
    assert type(rebuilt) is ValueError
    assert rebuilt.args == ("bad value 42",)
    assert isinstance(rebuilt.__cause__, RemoteTraceback)
    text = rebuilt.__cause__.tb
    assert "in raise_value_error" in text
    assert 'raise ValueError("bad value 42")' in text
    assert text.rstrip().endswith("ValueError: bad value 42")
    assert text.rstrip() in str(rebuilt.__cause__)


def test_traceback_text_can_be_given():
    carrier = ExceptionWithTraceback(KeyError("k"), "custom text\n")
    assert carrier.tb == "custom text\n"
    rebuilt = pickle.loads(pickle.dumps(carrier))
    assert rebuilt.__cause__.tb == "custom text\n"


def test_traceback_object_can_be_given():
    error = caught(raise_value_error)
    carrier = ExceptionWithTraceback(ValueError("other"), error.__traceback__)
    assert "in raise_value_error" in carrier.tb
    assert "ValueError: other" in carrier.tb


def test_exception_without_traceback_still_carries_its_line():
    carrier = ExceptionWithTraceback(RuntimeError("never raised"))
    assert carrier.tb == "RuntimeError: never raised\n"


def test_non_exception_is_rejected():
    with pytest.raises(
        TypeError, match="exc must be an exception instance, got 'text' of type str"
    ):
        ExceptionWithTraceback("text")


def test_exception_that_cannot_be_rebuilt_travels_as_runtime_error():
    error = NeedsTwoArguments("first", "second")
    rebuilt = pickle.loads(pickle.dumps(ExceptionWithTraceback(error)))
    assert type(rebuilt) is RuntimeError
    assert str(rebuilt) == "NeedsTwoArguments: first"
    assert isinstance(rebuilt.__cause__, RemoteTraceback)


def test_rebuild_exception_sets_cause():
    error = KeyError("k")
    assert rebuild_exception(error, "text") is error
    assert error.__cause__.tb == "text"


def test_format_exceptions_numbers_and_formats_each_exception():
    first, second = caught(raise_value_error), ZeroDivisionError("zero")
    text = format_exceptions([first, second])
    assert text.startswith("Exception 1 of 2:\nTraceback (most recent call last):")
    assert "in raise_value_error" in text
    assert "ValueError: bad value 42" in text
    assert "Exception 2 of 2:\nZeroDivisionError: zero" in text
    assert format_exceptions([]) == ""


def test_collect_exceptions_runs_the_cleaner_after_a_failing_target():
    calls = []

    def target(a, b=0):
        calls.append(("target", a, b))
        raise ValueError("target failed")

    def cleaner():
        calls.append("cleaner")
        raise KeyError("cleaner failed")

    raised = collect_exceptions(target, (1,), {"b": 2}, cleaner)
    assert calls == [("target", 1, 2), "cleaner"]
    assert [type(error) for error in raised] == [ValueError, KeyError]


def test_collect_exceptions_returns_nothing_on_success():
    calls = []
    assert collect_exceptions(lambda: calls.append(1), cleaner=lambda: calls.append(2)) == []
    assert calls == [1, 2]
    assert collect_exceptions(None) == []


def test_collect_exceptions_lets_system_exit_through_after_cleaning():
    calls = []

    def target():
        raise SystemExit(3)

    with pytest.raises(SystemExit) as info:
        collect_exceptions(target, cleaner=lambda: calls.append("cleaner"))
    assert info.value.code == 3
    assert calls == ["cleaner"]


def test_worker_exception_message_and_pickling():
    errors = [ValueError("a"), KeyError("b")]
    exception = WorkerException(errors)
    assert exception.exceptions == errors
    assert str(exception) == format_exceptions(errors)
    rebuilt = pickle.loads(pickle.dumps(exception))
    assert type(rebuilt) is WorkerException
    assert [type(error) for error in rebuilt.exceptions] == [ValueError, KeyError]
    assert str(rebuilt) == str(exception)
