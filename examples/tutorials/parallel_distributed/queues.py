"""Inter-process queues that choose how tensors travel.

``machin.parallel.queue.SimpleQueue`` pickles with dill, so lambdas and local
functions can be sent through it. The sender decides what a tensor becomes:

* ``copy_tensor=True``: the receiver gets its own copy; its writes stay local.
* ``copy_tensor=False`` (the default): the tensor moves into shared memory and the
  receiver gets a view of the same storage, so its writes are seen by the sender.

A worker process receives tasks (a function and a tensor) on one queue and answers
on another; ``get`` takes a timeout so a lost worker cannot hang the parent.
"""

import torch

from machin.parallel.process import Process
from machin.parallel.queue import Empty, SimpleQueue


def worker(tasks: SimpleQueue, results: SimpleQueue) -> None:
    torch.set_num_threads(1)
    while True:
        task = tasks.get(timeout=30)
        if task is None:
            return
        function, tensor = task
        tensor.add_(1.0)  # in place: visible to the parent only when shared
        results.put(function(tensor))


def main() -> None:
    torch.set_num_threads(1)
    shared_tasks, copied_tasks = SimpleQueue(copy_tensor=False), SimpleQueue(copy_tensor=True)
    results = SimpleQueue()
    processes = [
        Process(target=worker, args=(queue, results)) for queue in (shared_tasks, copied_tasks)
    ]
    for process in processes:
        process.start()

    offset = 100.0
    shared, copied = torch.zeros(3), torch.zeros(3)
    shared_tasks.put((lambda t: (t + offset).tolist(), shared))  # a lambda with a closure
    print("worker result (shared):", results.get(timeout=30))
    copied_tasks.put((lambda t: (t + offset).tolist(), copied))
    print("worker result (copied):", results.get(timeout=30))
    print("shared tensor after the worker's add_:", shared.tolist())
    print("copied tensor after the worker's add_:", copied.tolist())

    try:
        results.get(timeout=0.1)
    except Empty:
        print("nothing left: get(timeout) raised queue.Empty")

    for queue in (shared_tasks, copied_tasks):
        queue.put(None)
    for process in processes:
        process.join(timeout=30)
        process.watch()  # re-raises a worker's exception here, if there was one
    print("workers exited with codes", [process.exitcode for process in processes])


if __name__ == "__main__":
    main()
