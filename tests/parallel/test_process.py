import multiprocessing

import pytest
import torch

from machin.parallel.exception import RemoteTraceback, format_exceptions
from machin.parallel.process import (
    DEFAULT_START_METHOD,
    Process,
    ProcessException,
    resolve_context,
)


def fail_in_child(message):
    raise ValueError(message)


def write_marker(path):
    path.write_text("cleaned")


def exit_with(code):
    raise SystemExit(code)


def run(process):
    process.start()
    process.join(30)
    assert process.exitcode is not None, "child did not finish"
    return process


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_child_exception_reaches_parent_with_traceback():
    process = run(Process(target=fail_in_child, args=("child failed",), ctx="fork"))
    exception = process.exception
    assert isinstance(exception, ProcessException)
    [error] = exception.exceptions
    assert type(error) is ValueError and error.args == ("child failed",)
    assert isinstance(error.__cause__, RemoteTraceback)
    assert "in fail_in_child" in error.__cause__.tb
    with pytest.raises(ProcessException, match="ValueError: child failed") as info:
        process.watch()
    assert "raise ValueError(message)" in str(info.value)
    assert process.exitcode == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_cleaner_runs_in_child_even_when_target_fails(tmp_path):
    marker = tmp_path / "marker.txt"

    def cleaner():
        write_marker(marker)
        raise KeyError("cleaner failed too")

    process = run(Process(target=fail_in_child, args=("target",), cleaner=cleaner, ctx="fork"))
    assert marker.read_text() == "cleaned"
    errors = process.exception.exceptions
    assert [type(error) for error in errors] == [ValueError, KeyError]
    assert str(process.exception) == format_exceptions(errors)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_successful_child_reports_nothing(tmp_path):
    marker = tmp_path / "marker.txt"
    process = run(Process(target=write_marker, kwargs={"path": marker}, ctx="fork"))
    assert marker.read_text() == "cleaned"
    assert process.exception is None
    assert process.watch() is None
    assert process.exitcode == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_system_exit_sets_exit_code_without_report():
    process = run(Process(target=exit_with, args=(3,), ctx="fork"))
    assert process.exitcode == 3
    assert process.exception is None


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_watch_returns_while_child_has_not_failed_yet():
    release = multiprocessing.get_context("fork").Event()
    process = Process(target=lambda: (release.wait(20), fail_in_child("late")), ctx="fork")
    process.start()
    try:
        assert process.watch() is None
    finally:
        release.set()
        process.join(30)
    with pytest.raises(ProcessException, match="ValueError: late"):
        process.watch()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_long_report_does_not_block_join():
    # Larger than a pipe buffer: join must read it while waiting.
    process = run(Process(target=fail_in_child, args=("x" * 300_000,), ctx="fork"))
    assert process.exception.exceptions[0].args[0] == "x" * 300_000


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_shared_tensor_written_by_forked_child():
    tensor = torch.zeros(2).share_memory_()
    run(Process(target=lambda t: t.fill_(3.0), args=(tensor,), ctx="fork"))
    assert tensor.tolist() == [3.0, 3.0]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_spawned_child_runs_lambdas_and_reports_local_exceptions():
    class LocalError(Exception):
        pass

    tensor = torch.zeros(2)

    def target(t):
        t.fill_(5.0)
        raise LocalError("from spawn")

    process = run(Process(target=target, args=(tensor,), cleaner=lambda: None, ctx="spawn"))
    assert tensor.tolist() == [5.0, 5.0]  # passed by reference through shared memory
    [error] = process.exception.exceptions
    assert type(error).__name__ == "LocalError"
    assert "in target" in error.__cause__.tb


def test_resolve_context():
    assert resolve_context().get_start_method() == DEFAULT_START_METHOD
    assert resolve_context("spawn").get_start_method() == "spawn"
    ctx = multiprocessing.get_context("spawn")
    assert resolve_context(ctx) is ctx
    with pytest.raises(ValueError, match="ctx must be one of the start methods .* got 'bogus'"):
        resolve_context("bogus")
    with pytest.raises(TypeError, match="ctx must be a multiprocessing context.*got 3 of type int"):
        resolve_context(3)


def test_process_options_are_passed_on():
    process = Process(target=print, name="child-3", ctx="spawn", daemon=True)
    assert process.name == "child-3"
    assert process.daemon is True
    assert process.exception is None
    assert Process.format_exceptions is format_exceptions
    process.close()
