"""Serialization with machin.parallel.pickle.

* Lambdas and local functions can be dumped (dill, ``recurse=True``).
* Tensors are either copied into the bytes (``copy_tensor=True``) or passed by
  reference through shared memory (``copy_tensor=False``).
* A module marked static is saved as a reference to its name.
"""

import math

import torch

from machin.parallel.pickle import dumps, loads, mark_static_module


def main() -> None:
    torch.set_num_threads(1)
    exponent = 3

    def power(x):  # a local function with a closure
        return x**exponent

    restored = loads(dumps(power, recurse=True))
    print("local function restored, power(2) =", restored(2))
    print("lambda restored:", loads(dumps(lambda s: s.upper(), recurse=True))("machin"))

    tensor = torch.zeros(3)
    copy = loads(dumps(tensor, copy_tensor=True))
    copy.fill_(1.0)
    print("after writing the copy, original =", tensor.tolist())

    alias = loads(dumps(tensor, copy_tensor=False))
    alias.fill_(2.0)
    print("after writing the shared alias, original =", tensor.tolist())
    print("original moved to shared memory:", tensor.is_shared())

    mark_static_module(math)
    print("static module bytes:", len(dumps(math)), "-> restored:", loads(dumps(math)) is math)


if __name__ == "__main__":
    main()
