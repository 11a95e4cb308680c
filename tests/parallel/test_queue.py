import queue

import pytest
import torch

from machin.parallel.process import Process
from machin.parallel.queue import Empty, SimpleQueue


def start(target, *args):
    process = Process(target=target, args=args, ctx="fork")
    process.start()
    return process


def finish(*processes):
    for process in processes:
        process.join(30)
        process.watch()
        assert process.exitcode == 0


def apply_from_queue(tasks, results):
    func, value = tasks.get(timeout=20)
    results.put(func(value))


def fill_received_tensor(tensors):
    tensors.get(timeout=20).fill_(1.0)


def put_values(results, values):
    for value in values:
        results.put(value)


def test_put_get_and_empty_in_one_process():
    q = SimpleQueue()
    try:
        assert q.empty()
        q.put({"a": [1, 2]})
        q.quick_put("quick")
        assert not q.empty()
        assert q.get() == {"a": [1, 2]}
        assert q.quick_get() == "quick"
        assert q.empty()
    finally:
        q.close()


@pytest.mark.parametrize("method", ["get", "quick_get"])
def test_get_times_out_with_queue_empty(method):
    q = SimpleQueue()
    try:
        with pytest.raises(Empty, match="no object arrived within timeout=0.05 seconds"):
            getattr(q, method)(timeout=0.05)
        assert Empty is queue.Empty
    finally:
        q.close()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_lambda_travels_to_a_child_and_its_result_back():
    tasks, results = SimpleQueue(), SimpleQueue()
    scale = 3
    child = start(apply_from_queue, tasks, results)
    tasks.put((lambda x: x * scale, 14))
    assert results.get(timeout=20) == 42
    finish(child)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_shared_tensor_is_written_by_the_child():
    tensors = SimpleQueue(copy_tensor=False)
    tensor = torch.zeros(3)
    child = start(fill_received_tensor, tensors)
    tensors.put(tensor)
    finish(child)
    assert tensor.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_copied_tensor_is_not_written_by_the_child():
    tensors = SimpleQueue(copy_tensor=True)
    tensor = torch.zeros(3)
    child = start(fill_received_tensor, tensors)
    tensors.put(tensor)
    finish(child)
    assert tensor.tolist() == [0.0, 0.0, 0.0]
    assert not tensor.is_shared()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_several_senders_share_one_queue():
    results = SimpleQueue()
    senders = [start(put_values, results, range(k * 10, k * 10 + 10)) for k in range(2)]
    received = sorted(results.get(timeout=20) for _ in range(20))
    finish(*senders)
    assert received == list(range(20))
    assert results.empty()


def test_closed_queue_cannot_be_used():
    q = SimpleQueue()
    q.close()
    with pytest.raises(OSError):
        q.put(1)


def test_queue_cannot_be_pickled_outside_process_start():
    q = SimpleQueue()
    try:
        with pytest.raises(RuntimeError, match="inheritance"):
            q.__getstate__()
    finally:
        q.close()
