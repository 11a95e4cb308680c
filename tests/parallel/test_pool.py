import multiprocessing
import multiprocessing.pool
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from machin.parallel.exception import RemoteTraceback
from machin.parallel.pool import (
    CtxPool,
    CtxPoolStorage,
    CtxThreadPool,
    P2PPool,
    Pool,
    ThreadPool,
    proxy_caller,
    proxy_ctx_caller,
    proxy_dumper,
)
from machin.parallel.process import Process

multiprocess = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def square(x):
    return x * x


def fail_in_worker(x):
    raise ValueError(f"worker failed on {x}")


def start_grandchild(_=None):
    child = Process(target=square, args=(3,), ctx="fork")
    child.start()
    child.join(20)
    return child.exitcode


def check_every_method(pool, uses_context=False):
    """Run all eight call methods with a lambda and a local function."""
    offset = 100

    def add(*args):
        # With a context pool the first argument is the context: drop it.
        args = args[1:] if uses_context else args
        return sum(args) + offset

    if uses_context:

        def neg(ctx, x):
            return -x

        def mul(ctx, a, b):
            return a * b
    else:

        def neg(x):
            return -x

        def mul(a, b):
            return a * b

    items = [1, 2, 3, 4]
    pairs = [(1, 2), (3, 4)]
    assert pool.apply(add, (1, 2)) == 103
    assert pool.apply(mul, (), {"a": 6, "b": 7}) == 42
    assert pool.apply_async(add, (5,)).get(timeout=30) == 105
    assert pool.map(neg, items) == [-1, -2, -3, -4]
    assert pool.map(add, items, chunksize=2) == [101, 102, 103, 104]
    assert pool.map_async(neg, items).get(timeout=30) == [-1, -2, -3, -4]
    assert list(pool.imap(add, items)) == [101, 102, 103, 104]
    assert sorted(pool.imap_unordered(neg, items)) == [-4, -3, -2, -1]
    assert pool.starmap(mul, pairs) == [2, 12]
    assert pool.starmap_async(add, pairs).get(timeout=30) == [103, 107]
    if uses_context:
        assert pool.map(lambda ctx, x: x + 1, items) == [2, 3, 4, 5]
    else:
        assert pool.map(lambda x: x + 1, items) == [2, 3, 4, 5]
        assert pool.starmap(lambda a, b: a - b, pairs) == [-1, -1]


PROCESS_POOLS = [
    pytest.param(lambda **kw: Pool(2, **kw), False, id="Pool"),
    pytest.param(lambda **kw: P2PPool(2, **kw), False, id="P2PPool"),
    pytest.param(lambda **kw: CtxPool(2, worker_contexts=["a", "b"], **kw), True, id="CtxPool"),
]


@pytest.mark.parametrize("make_pool, uses_context", PROCESS_POOLS)
@pytest.mark.parametrize("is_recursive", [False, True])
@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_every_method_with_lambdas_under_fork(make_pool, uses_context, is_recursive):
    with make_pool(is_recursive=is_recursive, context="fork") as pool:
        assert pool.size() == 2
        check_every_method(pool, uses_context)


@pytest.mark.parametrize("make_pool, uses_context", PROCESS_POOLS)
@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_every_method_with_lambdas_under_spawn(make_pool, uses_context):
    with make_pool(is_recursive=True, context="spawn") as pool:
        assert pool.size() == 2
        check_every_method(pool, uses_context)


@pytest.mark.parametrize(
    "make_pool, uses_context",
    [
        pytest.param(lambda: ThreadPool(2), False, id="ThreadPool"),
        pytest.param(
            lambda: CtxThreadPool(2, worker_contexts=["a", "b"]), True, id="CtxThreadPool"
        ),
    ],
)
def test_every_method_in_thread_pools(make_pool, uses_context):
    with make_pool() as pool:
        assert pool.size() == 2
        check_every_method(pool, uses_context)


@pytest.mark.parametrize("cls", [Pool, P2PPool])
@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_shared_tensors_are_written_by_workers(cls):
    argument, captured = torch.zeros(4), torch.zeros(4)
    with cls(2, is_copy_tensor=False, share_method="cpu") as pool:
        pool.starmap(lambda t, i: t.__setitem__(i, 1.0), [(argument, i) for i in range(4)])
        pool.map(lambda i: captured.__setitem__(i, 2.0), range(4))
        returned = pool.apply(lambda: torch.ones(2))
        assert returned.is_shared()
        assert returned.tolist() == [1.0, 1.0]
    assert argument.tolist() == [1.0] * 4
    assert captured.tolist() == [2.0] * 4


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_copied_tensors_are_not_written_back():
    tensor = torch.zeros(4)
    with Pool(2) as pool:
        results = pool.starmap(
            lambda t, i: t.__setitem__(i, 1.0) or t.sum().item(), [(tensor, i) for i in range(4)]
        )
    assert results == [1.0] * 4  # each worker changed its own copy
    assert tensor.tolist() == [0.0] * 4
    assert not tensor.is_shared()


@pytest.mark.parametrize("cls", [Pool, P2PPool])
@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_worker_exception_reaches_caller_with_remote_traceback(cls):
    errors = []
    with cls(2) as pool:
        with pytest.raises(ValueError, match="worker failed on 7") as info:
            pool.apply(fail_in_worker, (7,))
        with pytest.raises(ValueError, match="worker failed on 1"):
            pool.map(fail_in_worker, [1])
        with pytest.raises(ValueError, match="worker failed on 2"):
            list(pool.imap(fail_in_worker, [2]))
        pool.apply_async(fail_in_worker, (3,), error_callback=errors.append).wait(30)
        assert pool.apply(square, (5,)) == 25  # the pool still works
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "in fail_in_worker" in cause.tb
    assert 'raise ValueError(f"worker failed on {x}")' in cause.tb
    assert [str(error) for error in errors] == ["worker failed on 3"]


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_worker_exception_of_a_local_class():
    class LocalError(Exception):
        pass

    def fail():
        raise LocalError("local")

    with Pool(1, is_recursive=True) as pool, pytest.raises(Exception, match="local") as info:
        pool.apply(fail)
    assert type(info.value).__name__ == "LocalError"
    assert "in fail" in info.value.__cause__.tb


def test_thread_pool_exception_is_the_original():
    with ThreadPool(1) as pool, pytest.raises(ValueError, match="worker failed on 4"):
        pool.apply(fail_in_worker, (4,))


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_each_ctx_pool_worker_has_its_own_context():
    barrier = multiprocessing.get_context("fork").Barrier(2)
    contexts = [("a", barrier), ("b", barrier)]

    def name_after_meeting(ctx, _):
        name, meeting = ctx
        meeting.wait(20)  # both workers must hold one task each
        return name, os.getpid()

    with CtxPool(2, worker_contexts=contexts, context="fork") as pool:
        results = pool.map(name_after_meeting, range(2), chunksize=1)
    assert sorted(name for name, _ in results) == ["a", "b"]
    assert len({pid for _, pid in results}) == 2
    assert CtxPoolStorage.storage is None  # only workers hold contexts


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_replacement_workers_inherit_context_and_pipe():
    with CtxPool(2, maxtasksperchild=1, worker_contexts=["a", "b"]) as pool:
        results = pool.map(lambda ctx, _: (ctx, os.getpid()), range(6), chunksize=1)
    names = {}
    for name, pid in results:
        assert names.setdefault(pid, name) == name
    assert set(names.values()) <= {"a", "b"}
    assert len(names) == 6  # one worker per task
    with P2PPool(2, maxtasksperchild=1) as pool:
        assert pool.map(square, range(6), chunksize=1) == [0, 1, 4, 9, 16, 25]


def test_each_ctx_thread_pool_thread_has_its_own_context():
    barrier = threading.Barrier(2)

    def name_after_meeting(ctx, _):
        barrier.wait(20)
        return ctx, threading.get_ident()

    with CtxThreadPool(2, worker_contexts=["a", "b"]) as pool:
        results = pool.map(name_after_meeting, range(2), chunksize=1)
    assert sorted(name for name, _ in results) == ["a", "b"]
    assert len({ident for _, ident in results}) == 2


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_initializer_runs_in_every_worker():
    with Pool(
        2, initializer=lambda v: os.environ.__setitem__("MACHIN_INIT", v), initargs=("set",)
    ) as pool:
        assert pool.map(lambda _: os.environ.get("MACHIN_INIT"), range(4)) == ["set"] * 4
    with CtxPool(
        1, initializer=lambda: os.environ.__setitem__("MACHIN_INIT", "ctx"), worker_contexts=[5]
    ) as pool:
        assert pool.apply(lambda ctx: (ctx, os.environ.get("MACHIN_INIT"))) == (5, "ctx")
    assert "MACHIN_INIT" not in os.environ


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_daemon_workers_cannot_start_children_but_non_daemon_ones_can():
    with Pool(1, is_daemon=True) as pool, pytest.raises(AssertionError, match="daemonic"):
        pool.apply(start_grandchild)
    with Pool(1, is_daemon=False) as pool:
        assert pool.apply(start_grandchild) == 0


@pytest.mark.parametrize("cls", [Pool, P2PPool])
@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_close_and_join_stop_every_worker(cls):
    pool = cls(3)
    try:
        assert pool.map(square, range(9)) == [x * x for x in range(9)]
    finally:
        pool.close()
        pool.join()
    assert [worker.exitcode for worker in pool._pool] == [0, 0, 0]


@pytest.mark.parametrize("cls", [Pool, P2PPool])
@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_terminate_stops_busy_workers(cls, tmp_path):
    started = tmp_path / "started"
    with cls(2) as pool:
        pending = pool.apply_async(lambda: (started.touch(), time.sleep(120)))
        while not started.exists():  # bounded by the timeout mark
            time.sleep(0.01)
        workers = list(pool._pool)
    assert not pending.ready()
    assert all(worker.exitcode is not None for worker in workers)


def test_pool_classes_extend_the_standard_ones():
    assert issubclass(Pool, multiprocessing.pool.Pool)
    assert issubclass(P2PPool, Pool) and issubclass(CtxPool, Pool)
    assert issubclass(ThreadPool, multiprocessing.pool.ThreadPool)
    assert issubclass(CtxThreadPool, ThreadPool)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_proxy_functions_work_with_a_plain_multiprocessing_pool():
    calls = proxy_dumper(True, True, lambda a, b: a * b, [(2, 3), (4, 5)])
    assert [type(call[0]) for call in calls] == [bytes, bytes]
    assert [call[1:] for call in calls] == [[(2, 3), {}], [(4, 5), {}]]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.map(proxy_caller, calls) == [6, 20]  # one entry per call (0.3.4's way)
        assert pool.starmap(proxy_caller, calls) == [6, 20]  # or its three parts


def test_proxy_callers_accept_functions_and_bytes(monkeypatch):
    assert proxy_caller(lambda a, b=0: a + b, (1,), {"b": 2}) == 3
    assert proxy_caller([lambda a: -a, [4], None]) == -4
    monkeypatch.setattr(CtxPoolStorage, "storage", "context")
    [entry] = proxy_dumper(False, True, lambda ctx, x: (ctx, x), [(1,)])
    assert proxy_ctx_caller(entry) == ("context", 1)
    assert proxy_ctx_caller(*entry) == ("context", 1)
    with pytest.raises(ValueError, match=r"takes \(function, args, kwargs\).* got 2 value"):
        proxy_caller(len, (1,))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"is_copy_tensor": False},
            'share_method must be "cpu" or "cuda" when is_copy_tensor is False, got None',
        ),
        ({"is_copy_tensor": False, "share_method": "gpu"}, "got 'gpu'"),
        (
            {"is_copy_tensor": False, "share_method": "cuda", "context": "fork"},
            'share_method="cuda" needs the "spawn" or "forkserver" start method',
        ),
        ({"processes": 0}, "processes must be a positive int or None, got 0"),
        ({"maxtasksperchild": 0}, "maxtasksperchild must be a positive int or None, got 0"),
        ({"context": "bogus"}, "ctx must be one of the start methods"),
    ],
)
def test_invalid_pool_arguments(kwargs, message):
    kwargs = {"processes": 1, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Pool(**kwargs)


@pytest.mark.parametrize("cls", [CtxPool, CtxThreadPool])
def test_worker_contexts_must_match_processes(cls):
    with pytest.raises(ValueError, match=r"one context per worker \(processes=2\), got 3"):
        cls(2, worker_contexts=[1, 2, 3])
    with pytest.raises(TypeError, match="worker_contexts must be a list or tuple"):
        cls(2, worker_contexts="ab")


def test_thread_pool_size_defaults_to_cpu_count():
    with ThreadPool() as pool:
        assert pool.size() == (os.cpu_count() or 1)
    with pytest.raises(ValueError, match="processes must be a positive int or None, got -1"):
        ThreadPool(-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_cuda_tensors_are_shared_with_spawned_workers():
    tensor = torch.zeros(4, device="cuda")
    with Pool(1, is_copy_tensor=False, share_method="cuda") as pool:
        # Return a number: torch cannot send a received CUDA tensor back.
        assert pool.apply(lambda t: t.fill_(2.0).sum().item(), (tensor,)) == 8.0
    assert tensor.tolist() == [2.0] * 4


_LEFT_OPEN = textwrap.dedent(
    """
    import os, signal, time
    from machin.parallel.pool import Pool, ThreadPool

    open_pool, thread_pool = Pool(2), ThreadPool(2)
    print(open_pool.map(abs, [-1, -2]), thread_pool.map(abs, [-3]))
    # a pool that lost its only worker while that worker waited for a task (holding
    # the read lock of the task pipe)
    lost = Pool(1)
    print(lost.map(abs, [-4]))
    lock = lost._inqueue._rlock
    while lock.acquire(block=False):  # free until the worker waits for its next task
        lock.release()
        time.sleep(0.01)
    os.kill(lost._pool[0].pid, signal.SIGKILL)
    print("exiting", flush=True)
    """
)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_pools_left_open_or_with_a_lost_worker_end_quietly_with_the_interpreter():
    # before: "Exception ignored in: <function _PoolAPI.__del__ ...> AttributeError:
    # 'NoneType' object has no attribute 'dumps'" at exit, and a hang in the exit
    # finalizer of the pool that lost its worker (the read lock never came free)
    env = dict(os.environ, PYTHONPATH=os.getcwd(), PYTHONWARNINGS="ignore::DeprecationWarning")
    done = subprocess.run(
        [sys.executable, "-c", _LEFT_OPEN], capture_output=True, text=True, timeout=100, env=env
    )
    assert done.stdout == "[1, 2] [3]\n[4]\nexiting\n"
    assert done.stderr == ""
    assert done.returncode == 0
