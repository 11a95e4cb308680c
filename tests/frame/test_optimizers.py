"""machin.frame.optimizers: PyTorch's fused Adam where it is the same algorithm."""

import functools

import pytest
import torch
from torch import nn

from machin.frame.optimizers import adopt, build_optimizer, is_fused_by_default


def _fused(optimizer):
    return [group["fused"] for group in optimizer.param_groups]


def test_build_optimizer_fuses_adam_and_adamw_unless_the_caller_chose_an_implementation():
    net = nn.Linear(3, 2)
    for cls in (torch.optim.Adam, torch.optim.AdamW):
        built = build_optimizer(cls, net.parameters(), 0.01)
        assert type(built) is cls and _fused(built) == [True] and built.defaults["lr"] == 0.01
    kept = build_optimizer(functools.partial(torch.optim.Adam, eps=1e-5), net.parameters(), 0.01)
    assert _fused(kept) == [True] and kept.defaults["eps"] == 1e-5
    for chosen in ({"fused": False}, {"foreach": True}, {"foreach": False}):
        built = build_optimizer(functools.partial(torch.optim.Adam, **chosen), net.parameters(), 0.01)
        assert not built.defaults["fused"], chosen
        assert all(built.defaults[k] == v for k, v in chosen.items())
        built = build_optimizer(torch.optim.Adam, net.parameters(), 0.01, **chosen)  # keywords given apart
        assert not built.defaults["fused"] and all(built.defaults[k] == v for k, v in chosen.items())
    assert _fused(build_optimizer(torch.optim.AdamW, net.parameters(), 0.01, weight_decay=0.5)) == [True]

    class MyAdam(torch.optim.Adam):
        pass

    for other in (torch.optim.SGD, torch.optim.RMSprop, MyAdam):
        assert not build_optimizer(other, net.parameters(), 0.01).defaults.get("fused"), other
    # integer tensors have no fused kernel; parameter groups are passed on as they are
    assert not build_optimizer(torch.optim.Adam, [torch.zeros(2, dtype=torch.long)], 0.01).defaults["fused"]
    grouped = build_optimizer(torch.optim.Adam, [{"params": net.parameters(), "lr": 0.5}], 0.01)
    assert not grouped.defaults["fused"] and grouped.param_groups[0]["lr"] == 0.5


def test_an_algorithm_with_fused_adam_trains_like_one_with_the_default_step():
    from machin.frame.algorithms import DQN

    from .algorithms.nets import QNet

    runs = []
    for optimizer in (torch.optim.Adam, functools.partial(torch.optim.Adam, fused=False)):
        torch.manual_seed(0)
        q = QNet(hidden=16)
        dqn = DQN(q, QNet(hidden=16), optimizer, nn.MSELoss(), batch_size=16, replay_size=64)
        generator = torch.Generator().manual_seed(1)
        for _ in range(64):
            dqn.store_transition({"state": {"state": torch.randn(1, 4, generator=generator)},
                                  "action": {"action": torch.randint(2, (1, 1), generator=generator)},
                                  "next_state": {"state": torch.randn(1, 4, generator=generator)},
                                  "reward": float(torch.rand((), generator=generator)), "terminal": False})
        losses = [dqn.update() for _ in range(50)]
        runs.append((dqn, losses))
    (fused, fused_losses), (plain, plain_losses) = runs
    assert _fused(fused.qnet_optim) == [True] and _fused(plain.qnet_optim) == [False]
    assert fused_losses == pytest.approx(plain_losses, rel=1e-4, abs=1e-6)
    for a, b in zip(fused.qnet.parameters(), plain.qnet.parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert fused_losses[0] != fused_losses[-1]  # it trained


def _stepped(optimizer, params):
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    return optimizer


def test_a_loaded_state_keeps_the_optimizers_own_implementation():
    net = nn.Linear(3, 2)
    fused = _stepped(build_optimizer(torch.optim.Adam, net.parameters(), 0.01), list(net.parameters()))
    other = nn.Linear(3, 2)
    plain = _stepped(torch.optim.Adam(other.parameters(), lr=0.5, foreach=True), list(other.parameters()))
    _stepped(plain, list(other.parameters()))
    fused.load_state_dict(plain.state_dict())
    group = fused.param_groups[0]
    assert group["fused"] and group["foreach"] is None and group["lr"] == 0.5  # the learning state is loaded
    assert float(fused.state[net.weight]["step"]) == 2
    assert torch.equal(fused.state[net.weight]["exp_avg"], plain.state[other.weight]["exp_avg"])
    _stepped(fused, list(net.parameters()))  # and it steps, fused
    # the other way round: an optimizer built unfused stays so after loading a fused state
    unfused = build_optimizer(functools.partial(torch.optim.Adam, fused=False), other.parameters(), 0.01)
    unfused.load_state_dict(fused.state_dict())
    assert not unfused.param_groups[0]["fused"] and float(unfused.state[other.weight]["step"]) == 3
    # torch's own load, for comparison, takes the saved implementation
    torch_adam = torch.optim.Adam(other.parameters(), lr=0.01)
    torch_adam.load_state_dict(fused.state_dict())
    assert torch_adam.param_groups[0]["fused"]


def test_a_rebuilt_optimizer_is_adopted_again():
    from machin.frame.algorithms.maddpg import _PortableOptimizer, _rebuild_optimizer

    net = nn.Linear(3, 2)
    built = build_optimizer(torch.optim.Adam, net.parameters(), 0.01)
    assert is_fused_by_default(built)
    rebuilt = _rebuild_optimizer(*_PortableOptimizer(built).__reduce__()[1])
    assert rebuilt is not built and is_fused_by_default(rebuilt)
    rebuilt.load_state_dict(torch.optim.Adam(net.parameters(), lr=0.01).state_dict())
    assert rebuilt.param_groups[0]["fused"]
    sgd = adopt(torch.optim.SGD(net.parameters(), lr=0.1))
    assert not is_fused_by_default(sgd) and not is_fused_by_default(
        _rebuild_optimizer(*_PortableOptimizer(sgd).__reduce__()[1]))
