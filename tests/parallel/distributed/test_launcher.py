"""launch(): one process per rank, results and tracebacks back, nothing left behind."""

import faulthandler
import multiprocessing.util
import os
import time

import psutil
import pytest

from machin.parallel.distributed import LaunchError, launch
from machin.parallel.distributed.launcher import Exited
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]


def _environment(rank, scale):
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")
    return rank * scale, {k: os.environ[k] for k in keys}, os.getpid()


@pytest.mark.timeout(60)
def test_results_come_back_by_rank_with_torchrun_variables():
    results = run_ranks(_environment, 3, args=(10,), timeout=30)
    assert [r[0] for r in results] == [0, 10, 20]
    assert [r[1] for r in results] == [
        {"RANK": str(i), "WORLD_SIZE": "3", "LOCAL_RANK": str(i), "MASTER_ADDR": "127.0.0.1"}
        for i in range(3)
    ]
    pids = {r[2] for r in results}
    assert len(pids) == 3 and os.getpid() not in pids
    assert not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        for pid in pids
    )


def _fail_or_hang(rank):
    if rank == 1:
        raise ValueError(f"rank {rank} rejects its input")
    time.sleep(120)


@pytest.mark.timeout(60)
def test_a_failing_rank_reports_its_traceback_and_the_others_are_killed():
    start = time.monotonic()
    with pytest.raises(LaunchError, match="rank 1 failed") as info:
        launch(_fail_or_hang, 3, timeout=50, start_method="fork", failure_grace=0.5)
    assert time.monotonic() - start < 40  # killed after the grace, not at the timeout
    error = info.value
    assert set(error.exceptions) == {1}
    assert isinstance(error.exceptions[1], ValueError)
    assert "rank 1 rejects its input" in str(error)
    assert "_fail_or_hang" in str(error)  # the remote traceback
    assert error.unfinished == [0, 2]


@pytest.mark.timeout(60)
def test_timeout_kills_hanging_ranks_and_lambdas_and_exits_are_handled():
    with pytest.raises(LaunchError, match=r"ranks \[0, 1\] were still running .* 1.5 s timeout"):
        launch(lambda rank: time.sleep(120), 2, timeout=1.5, start_method="fork")
    assert run_ranks(lambda rank, k: rank + k, 2, args=(5,), timeout=30) == [5, 6]
    results = run_ranks(
        lambda rank: os._exit(3) if rank == 0 else "ok", 2, timeout=30, allow_exit=[0]
    )
    assert results == [Exited(3), "ok"]
    with pytest.raises(LaunchError, match="rank 0 exited with code 3 without returning a result"):
        run_ranks(lambda rank: os._exit(3) if rank == 0 else "ok", 2, timeout=30)


@pytest.mark.timeout(60)
def test_spawned_ranks_run_a_module_function_or_a_lambda():
    # spawned children import torch anew (seconds each): one rank, one lambda
    factor = 3
    assert launch(lambda rank: (rank, factor * 2), 1, timeout=50, start_method="spawn") == [(0, 6)]


def test_world_size_must_be_positive():
    with pytest.raises(ValueError, match="world_size must be a positive int, got 0"):
        launch(_environment, 0)


def _abort_quietly():
    faulthandler.disable()  # pytest's handler would print the stacks of the aborting child
    os.abort()


def _crash_after_returning(rank):
    if rank == 1:  # as an RPC agent torn down by a finalizing interpreter does
        multiprocessing.util.Finalize(None, _abort_quietly, exitpriority=1)
    return rank


@pytest.mark.timeout(60)
def test_a_rank_that_returns_then_crashes_while_exiting_fails_the_launch():
    with pytest.raises(LaunchError) as caught:
        run_ranks(_crash_after_returning, 2, timeout=30)
    assert "rank 1 returned, then its process was killed by signal SIGABRT while it exited" in str(
        caught.value
    )
    assert list(caught.value.exceptions) == [1]
