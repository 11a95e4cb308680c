"""Harness of the multi-process tests: one process per rank, a hard timeout, nothing left behind.

``run_ranks(target)`` runs ``target(rank, *args)`` in ``world_size`` processes
(forked by default: starting a process that imports torch anew costs seconds on
a loaded machine). Each process finds ``MASTER_ADDR`` / ``MASTER_PORT`` (a free
port per call) / ``RANK`` / ``WORLD_SIZE`` in its environment, as under
``torchrun``, so ``World()`` needs no argument there. Return values and
exceptions (with their remote tracebacks) come back to the test; each rank runs
torch with one intra-op thread; a rank that
hangs is killed at the timeout (after printing its threads' stacks), and every
child is killed and reaped before ``run_ranks`` returns or raises.

Test modules use the ``no_children_left`` fixture (import it, then
``pytestmark = pytest.mark.usefixtures("no_children_left")``) to check with
psutil that no child process survives a test.
"""

import contextlib
import functools
import multiprocessing
import os
import sys
import time
from multiprocessing import forkserver, resource_tracker
from typing import Any, Callable, Iterable, List, Sequence

import psutil
import pytest
import torch

from machin.parallel.distributed.launcher import Exited, LaunchError, launch

__all__ = [
    "run_ranks",
    "rank_context",
    "wait_for",
    "no_children_left",
    "keep_processes",
    "Exited",
    "LaunchError",
    "DEFAULT_TIMEOUT",
]

#: Modules the fork server imports once, so that its children do not (see run_ranks).
_PRELOAD = ["torch", "machin.parallel.distributed", "tests.multiprocess"]

#: Hard limit of one run, in seconds; keep it below the test's pytest timeout.
DEFAULT_TIMEOUT = 60.0
_GRACE = 5.0


def run_ranks(
    target: Callable[..., Any],
    world_size: int = 3,
    *,
    args: Sequence[Any] = (),
    timeout: float = DEFAULT_TIMEOUT,
    start_method: str = "fork",
    allow_exit: Iterable[int] = (),
) -> List[Any]:
    """Run ``target(rank, *args)`` on ``world_size`` ranks; return their results by rank.

    Raises:
        LaunchError: If a rank raised, exited early (unless in ``allow_exit``) or
            the timeout passed; its message holds the ranks' tracebacks.
    """
    start_method = _start_method(start_method)
    if start_method == "fork":
        _warm_up()
    return launch(
        functools.partial(_single_threaded, target),
        world_size,
        args=args,
        timeout=timeout,
        start_method=start_method,
        allow_exit=allow_exit,
    )


def _start_method(requested: str) -> str:
    """The start method of the ranks: ``requested``, or a fork server instead of "fork" next to Ray.

    A process that runs Ray's driver threads (connected to the cluster of the Ray tests
    of the running module) must not fork: a forked child inherits their locks mid-use and can
    hang. A fork server is a fresh interpreter (started before or after Ray, it has no Ray
    threads) that has imported torch and machin once: its children start in a moment.
    """
    if requested == "fork" and _ray_connected():
        multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)
        return "forkserver"
    return requested


def rank_context() -> multiprocessing.context.BaseContext:
    """The context ``run_ranks`` starts its ranks in: make the events and locks passed to them with it."""
    return multiprocessing.get_context(_start_method("fork"))


def _ray_connected() -> bool:
    """Whether this process is connected to a Ray cluster (without importing Ray)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _single_threaded(target: Callable[..., Any], rank: int, *args: Any) -> Any:
    """Run one rank with one intra-op thread: ranks share two cores with the other test worker."""
    torch.set_num_threads(1)
    return target(rank, *args)


def wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    """Poll ``condition`` until it is true; fail the test if it is still false after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"the condition did not become true within {seconds} s"
        time.sleep(0.02)


def _warm_up() -> None:
    """Pay once, here, for torch's lazy imports that every forked rank would repeat.

    Building an optimizer (or a DistributedDataParallel) imports ``torch._dynamo``,
    which takes seconds; forked ranks inherit it from the parent instead.
    """
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


#: Processes a fixture keeps alive across tests (a Ray cluster): they and their
#: descendants are not leaks.
_KEPT: set = set()


class keep_processes:
    """Exempt ``pids`` (and their descendants) from the leftover checks until ``release()``.

    Args:
        pids: Process ids, e.g. those of a cluster a module-scoped fixture started.
    """

    def __init__(self, pids: Iterable[int]):
        self.pids = set(pids)
        _KEPT.update(self.pids)

    def release(self) -> None:
        """Check these processes again (the fixture has ended them)."""
        _KEPT.difference_update(self.pids)


def _helper_pids() -> set:
    """Long-lived helpers multiprocessing starts once per session (not leaks)."""
    pids = {
        getattr(resource_tracker._resource_tracker, "_pid", None),
        getattr(forkserver._forkserver, "_forkserver_pid", None),
    }
    return (pids - {None}) | _KEPT


def _is_torch_helper(child: psutil.Process) -> bool:
    """A process torch keeps for the rest of the session: torch_shm_manager (file_system tensor
    sharing) or inductor's compile worker (the pool a compiling process starts on a machine
    with many cores)."""
    if child.name() == "torch_shm_manager":
        return True
    return any("_inductor" in part and "compile_worker" in part for part in child.cmdline())


def _live_children() -> List[psutil.Process]:
    helpers = _helper_pids()
    live, me = [], os.getpid()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid in helpers or child.status() == psutil.STATUS_ZOMBIE:
                continue
            chain = [
                child
            ]  # the child and its ancestors below this process: a helper's workers count too
            while chain[-1].ppid() != me and chain[-1].parent() is not None:
                chain.append(chain[-1].parent())
            if not any(_is_torch_helper(p) or p.pid in _KEPT for p in chain):
                live.append(child)
        except psutil.NoSuchProcess:
            pass
    return live


@pytest.fixture
def no_children_left():
    """Fail the test if a child process is still alive after it (killing it first)."""
    yield
    deadline = time.monotonic() + _GRACE
    left = _live_children()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _live_children()
    if left:
        pids = [child.pid for child in left]
        for child in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(left, timeout=_GRACE)
        pytest.fail(f"the test left {len(left)} live child process(es): {pids}")
