"""Catch an exception raised in a sub-process.

The child formats its traceback and sends it back through a pipe. In the
parent, ``exception`` holds a ProcessException and ``watch()`` raises it; each
rebuilt exception carries the child's traceback text as its ``__cause__``.
"""

import torch

from machin.parallel.process import Process, ProcessException


def train_step(batch_size: int) -> None:
    data = torch.zeros(batch_size, 4)
    weights = torch.zeros(3, 4)
    data @ weights  # shape mismatch: [n, 4] @ [3, 4]


def main() -> None:
    torch.set_num_threads(1)
    process = Process(
        target=train_step,
        args=(8,),
        cleaner=lambda: print("cleaner ran in the child"),
    )
    process.start()
    process.join()
    print("child exit code:", process.exitcode)

    try:
        process.watch()
    except ProcessException as error:
        print("caught in the parent:")
        print(error)
        first = error.exceptions[0]
        print("rebuilt exception type:", type(first).__name__)
        print("child traceback available as __cause__:", first.__cause__ is not None)


if __name__ == "__main__":
    main()
