"""Thread pools and context thread pools.

ThreadPool runs any callable (lambdas included) on a fixed set of threads.
CtxThreadPool gives every thread its own context object, passed as the first
argument of each task: here each thread owns a private accumulator, so no lock
is needed.
"""

import threading
import time

from machin.parallel.pool import CtxThreadPool, ThreadPool


def main() -> None:
    with ThreadPool(4) as pool:
        print("pool size:", pool.size())
        print("squares:", pool.map(lambda x: x * x, range(8)))
        print("sums:", pool.starmap(lambda a, b: a + b, [(1, 2), (3, 4)]))
        print("async:", pool.apply_async(max, (3, 9, 4)).get())

    # One private list per thread, handed over as the task's first argument.
    accumulators = [[] for _ in range(2)]

    def record(ctx, value):
        time.sleep(0.01)  # long enough for both threads to take tasks
        ctx.append(value)
        return threading.current_thread().name

    with CtxThreadPool(2, worker_contexts=accumulators) as pool:
        names = pool.map(record, range(10), chunksize=1)
    print("threads used:", sorted(set(names)))
    print("per-thread accumulators:", accumulators)
    print("all values recorded once:", sorted(sum(accumulators, [])) == list(range(10)))


if __name__ == "__main__":
    main()
