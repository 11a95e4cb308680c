"""Fixtures shared by the tests of machin.parallel."""

import contextlib
import time

import psutil
import pytest

from tests.multiprocess import _live_children  # skips the session helpers (torch_shm_manager)

GRACE_SECONDS = 5.0


def _describe(child):
    try:
        return f"{child.pid}: {' '.join(child.cmdline())[:80]}"
    except psutil.Error:
        return str(child.pid)


@pytest.fixture(autouse=True)
def no_child_process_left():
    """Fail a test that leaves a live child process behind (after a grace period)."""
    yield
    deadline = time.monotonic() + GRACE_SECONDS
    left = _live_children()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _live_children()
    if left:
        described = [_describe(child) for child in left]
        for child in left:  # do not let them leak into the next tests
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(left, timeout=GRACE_SECONDS)
        pytest.fail(f"the test left {len(left)} live child process(es): {described}")
