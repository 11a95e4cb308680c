"""machin.frame.algorithms.worker_copy: a framework sent to process workers, optimizers included."""

import torch
from torch import nn

from machin.frame.algorithms.worker_copy import WorkerCopy, call_in_worker
from machin.frame.optimizers import build_optimizer, is_fused_by_default
from machin.parallel.pickle import dumps, loads


class Owner:
    """A stand-in framework: networks, optimizers alone and in nested lists, a pool that cannot travel."""

    def __init__(self):
        self.net = nn.Linear(2, 2)
        self.optim = build_optimizer(torch.optim.Adam, self.net.parameters(), 0.1)
        self.nested = [[torch.optim.SGD(self.net.parameters(), lr=0.5)]]
        self.visible = [[0, 1]]
        self._lr_schedulers = ["a scheduler"]
        self._pool = "a pool"

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_pool"] = None
        return state

    def scaled(self, factor):
        return self.net.weight.sum().item() * factor


def test_a_worker_copy_rebuilds_the_framework_with_its_optimizers_and_without_pool_and_schedulers():
    owner = Owner()
    rebuilt = loads(dumps(WorkerCopy(owner)))
    assert type(rebuilt) is Owner and rebuilt._pool is None and rebuilt._lr_schedulers == []
    assert isinstance(rebuilt.optim, torch.optim.Adam) and is_fused_by_default(rebuilt.optim)
    assert rebuilt.optim.param_groups[0]["params"][0] is rebuilt.net.weight
    assert (
        isinstance(rebuilt.nested[0][0], torch.optim.SGD)
        and rebuilt.nested[0][0].param_groups[0]["lr"] == 0.5
    )
    assert rebuilt.visible == [[0, 1]]
    assert torch.equal(rebuilt.net.weight, owner.net.weight)


def test_call_in_worker_calls_the_method_on_an_inherited_or_a_rebuilt_context():
    owner = Owner()
    expected = owner.scaled(3)
    assert call_in_worker(WorkerCopy(owner), "scaled", 3) == expected  # a forked worker's context
    assert (
        call_in_worker(loads(dumps(WorkerCopy(owner))), "scaled", 3) == expected
    )  # a spawned one's
