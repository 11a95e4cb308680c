"""Process pools and context process pools.

* Pool runs lambdas and local functions in worker processes.
* With ``is_copy_tensor=False, share_method="cpu"`` tensors travel through shared
  memory, so a worker's writes are seen by the caller.
* CtxPool gives each worker its own context, passed as the first argument.
* An exception raised in a worker reaches the caller with the worker's traceback.

Pass ``--spawn`` to use the "spawn" start method instead of the default.
"""

import os
import sys
import time

import torch

from machin.parallel.pool import CtxPool, Pool


def main(context: str) -> None:
    torch.set_num_threads(1)
    scale = 10
    with Pool(2, is_recursive=True, context=context) as pool:
        print("pool size:", pool.size())
        print("map with a lambda:", pool.map(lambda x: x * scale, range(6)))
        print("imap:", list(pool.imap(lambda x: -x, range(4))))
        print("starmap:", pool.starmap(lambda a, b: a**b, [(2, 3), (3, 2)]))
        try:
            pool.apply(lambda: 1 / 0)
        except ZeroDivisionError as error:
            print("worker exception reached the caller:", repr(error))
            print("worker traceback:", error.__cause__)

    shared = torch.zeros(4)
    with Pool(2, is_copy_tensor=False, share_method="cpu", context=context) as pool:
        pool.starmap(lambda t, i: t.__setitem__(i, i + 1.0), [(shared, i) for i in range(4)])
    print("tensor written by the workers through shared memory:", shared.tolist())

    copied = torch.zeros(4)
    with Pool(2, context=context) as pool:
        pool.starmap(lambda t, i: t.__setitem__(i, 1.0), [(copied, i) for i in range(4)])
    print("tensor sent as copies stays unchanged:", copied.tolist())

    contexts = [{"name": "left"}, {"name": "right"}]
    with CtxPool(2, worker_contexts=contexts, context=context) as pool:
        # The short sleep lets both workers take tasks.
        results = pool.map(
            lambda ctx, x: (time.sleep(0.05), ctx["name"], os.getpid(), x)[1:],
            range(6),
            chunksize=1,
        )
    for name, pid, x in results:
        print(f"  item {x} handled by worker {pid} holding context {name!r}")


if __name__ == "__main__":
    main("spawn" if "--spawn" in sys.argv else None)
