"""Reliability of the pools and of barriers when a worker or a member dies.

Workers are killed with real signals (``SIGKILL``) or ``os._exit`` from inside their
task; every test has a hard timeout and leaves no process behind.
"""

import multiprocessing
import os
import signal
import sys
import time
import typing

import pytest

from machin.parallel.distributed import World
from machin.parallel.exception import TaskTimeoutError, WorkerDiedError
from machin.parallel.pickle import dumps, loads
from machin.parallel.pool import CtxPool, CtxThreadPool, P2PPool, Pool, ThreadPool
from tests.multiprocess import Exited, no_children_left, run_ranks, wait_for  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]

PROCESS_POOLS = [
    pytest.param(lambda: Pool(2), id="Pool"),
    pytest.param(lambda: P2PPool(2), id="P2PPool"),
    pytest.param(lambda: CtxPool(2, worker_contexts=[None, None]), id="CtxPool"),
    pytest.param(lambda: Pool(2, context="spawn"), id="Pool-spawn"),
]


def _kill_self(*args):
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # never reached


def _twice_or_die(*args):
    x = args[-1]  # CtxPool passes its context first
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)
    return x * 2


def _exit_3(*args):
    os._exit(3)


def _pid(*args):
    return os.getpid()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make_pool", PROCESS_POOLS)
def test_a_killed_worker_fails_its_task_and_is_replaced(make_pool):
    pool = make_pool()
    try:
        # a map may be served by one worker alone; the pool's own list names them all
        served = set(pool.map(_pid, range(8)))
        before = {p.pid for p in pool._pool}
        assert served and served <= before
        with pytest.raises(WorkerDiedError, match=r"was killed by signal SIGKILL") as info:
            pool.apply(_kill_self)
        error = info.value
        assert isinstance(error, RuntimeError)
        assert error.exitcode == -signal.SIGKILL and error.pid is not None
        assert error.worker in str(error) and f"pid {error.pid}" in str(error)
        assert "apply of _kill_self" in str(error)
        assert error.pid in before
        with pytest.raises(WorkerDiedError, match=r"exited with code 3 while running apply"):
            pool.apply(_exit_3)
        # the pool still has its full strength and serves new tasks
        assert pool.apply(_twice_or_die, (5,)) == 10
        wait_for(lambda: len(pool._pool) == 2 and all(p.is_alive() for p in pool._pool))
        assert error.pid not in {p.pid for p in pool._pool}
    finally:
        pool.close()
        pool.join()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make_pool", PROCESS_POOLS)
def test_map_keeps_the_other_results_and_raises_for_the_lost_item(make_pool):
    pool = make_pool()
    try:
        with pytest.raises(WorkerDiedError, match=r"item 3 of map of _twice_or_die") as info:
            pool.map(_twice_or_die, range(6), chunksize=1)
        assert info.value.partial_results == [0, 2, 4, None, 8, 10]
        assert info.value.index == 3
        # imap yields the others and raises at the lost item
        results = []
        iterator = pool.imap(_twice_or_die, range(6))
        for _ in range(6):
            try:
                results.append(next(iterator))
            except WorkerDiedError:
                results.append("died")
        assert results == [0, 2, 4, "died", 8, 10]
    finally:
        pool.close()
        pool.join()


@pytest.mark.timeout(60)
def test_close_and_join_return_after_a_worker_died_with_tasks_pending():
    pool = Pool(2)
    lost = pool.apply_async(_kill_self)
    others = [pool.apply_async(_twice_or_die, (x,)) for x in (0, 1, 2, 4)]
    pool.close()
    pool.join()  # must not hang
    with pytest.raises(WorkerDiedError):
        lost.get(0)
    assert [result.get(0) for result in others] == [0, 2, 4, 8]


@pytest.mark.timeout(60)
def test_get_timeout_names_the_task():
    with Pool(1) as pool:
        result = pool.apply_async(time.sleep, (3,))
        with pytest.raises(
            TaskTimeoutError, match=r"apply of sleep \(job \d+\) did not finish within 0.1 s"
        ) as info:
            result.get(timeout=0.1)
        assert isinstance(info.value, multiprocessing.TimeoutError)
        assert isinstance(info.value, TimeoutError)
        mapped = pool.map_async(time.sleep, [1, 1])
        with pytest.raises(TaskTimeoutError, match=r"map of sleep over 2 item\(s\)"):
            mapped.get(timeout=0.1)
        pool.terminate()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "make_pool", [ThreadPool, lambda n: CtxThreadPool(n, worker_contexts=[1, 2])]
)
def test_thread_pool_task_exiting_fails_the_task_not_the_thread(make_pool):
    pool = make_pool(2)
    try:
        with pytest.raises(WorkerDiedError, match=r"SystemExit with code 4"):
            pool.apply(lambda *a: sys.exit(4))
        assert pool.map(lambda *a: a[-1], range(4)) == [0, 1, 2, 3]
    finally:
        pool.close()
        pool.join()


# -- barrier after a member died -------------------------------------------------------------
def _barrier_after_death(rank):
    world = World()
    world.barrier()
    if rank == 2:
        os._exit(0)  # rank 2 is gone
    try:
        world.barrier(timeout=3)
    except RuntimeError as error:
        message = str(error)
    else:
        message = "no error"
    time.sleep(1.0)  # the manager (rank 0) stays until rank 1 had its answer
    world.stop(graceful=False)
    return message


@pytest.mark.timeout(90)
def test_barrier_error_names_the_member_that_is_gone():
    results = run_ranks(_barrier_after_death, 3, allow_exit=[2])
    assert isinstance(results[2], Exited)
    for rank in (0, 1):
        message = results[rank]
        assert "member(s) ['2'] did not arrive" in message, message
        assert f"for member '{rank}'" in message, message
        assert "could not be reached" not in message, message


# -- classes saved by value keep their base class ------------------------------------------
_T = typing.TypeVar("_T")


@pytest.mark.timeout(60)
def test_a_class_saved_by_value_keeps_a_generic_base_class():
    class GenericBase(typing.Generic[_T]):
        pass

    class Base(GenericBase[int]):
        def hello(self):
            return "base"

    class Local(Base):  # inherits __orig_bases__ from Base, as gymnasium.Env subclasses do
        pass

    rebuilt = loads(dumps(Local, recurse=True))
    assert [c.__name__ for c in rebuilt.__mro__[:3]] == ["Local", "Base", "GenericBase"]
    assert rebuilt().hello() == "base"
    assert "__orig_bases__" not in Local.__dict__  # the class itself is left unchanged
