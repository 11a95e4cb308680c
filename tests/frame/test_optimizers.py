"""machin.frame.optimizers: PyTorch's fused Adam where it is the same algorithm."""

import functools
import warnings

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from machin.frame import optimizers
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
        built = build_optimizer(
            functools.partial(torch.optim.Adam, **chosen), net.parameters(), 0.01
        )
        assert not built.defaults["fused"], chosen
        assert all(built.defaults[k] == v for k, v in chosen.items())
        built = build_optimizer(
            torch.optim.Adam, net.parameters(), 0.01, **chosen
        )  # keywords given apart
        assert not built.defaults["fused"] and all(
            built.defaults[k] == v for k, v in chosen.items()
        )
    assert _fused(build_optimizer(torch.optim.AdamW, net.parameters(), 0.01, weight_decay=0.5)) == [
        True
    ]

    class MyAdam(torch.optim.Adam):
        pass

    for other in (torch.optim.SGD, torch.optim.RMSprop, MyAdam):
        assert not build_optimizer(other, net.parameters(), 0.01).defaults.get("fused"), other
    # integer tensors have no fused kernel; parameter groups are passed on as they are
    assert not build_optimizer(torch.optim.Adam, [torch.zeros(2, dtype=torch.long)], 0.01).defaults[
        "fused"
    ]
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
            dqn.store_transition(
                {
                    "state": {"state": torch.randn(1, 4, generator=generator)},
                    "action": {"action": torch.randint(2, (1, 1), generator=generator)},
                    "next_state": {"state": torch.randn(1, 4, generator=generator)},
                    "reward": float(torch.rand((), generator=generator)),
                    "terminal": False,
                }
            )
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
    fused = _stepped(
        build_optimizer(torch.optim.Adam, net.parameters(), 0.01), list(net.parameters())
    )
    other = nn.Linear(3, 2)
    plain = _stepped(
        torch.optim.Adam(other.parameters(), lr=0.5, foreach=True), list(other.parameters())
    )
    _stepped(plain, list(other.parameters()))
    fused.load_state_dict(plain.state_dict())
    group = fused.param_groups[0]
    assert (
        group["fused"] and group["foreach"] is None and group["lr"] == 0.5
    )  # the learning state is loaded
    assert float(fused.state[net.weight]["step"]) == 2
    assert torch.equal(fused.state[net.weight]["exp_avg"], plain.state[other.weight]["exp_avg"])
    _stepped(fused, list(net.parameters()))  # and it steps, fused
    # the other way round: an optimizer built unfused stays so after loading a fused state
    unfused = build_optimizer(
        functools.partial(torch.optim.Adam, fused=False), other.parameters(), 0.01
    )
    unfused.load_state_dict(fused.state_dict())
    assert not unfused.param_groups[0]["fused"] and float(unfused.state[other.weight]["step"]) == 3
    # torch's own load, for comparison, takes the saved implementation
    torch_adam = torch.optim.Adam(other.parameters(), lr=0.01)
    torch_adam.load_state_dict(fused.state_dict())
    assert torch_adam.param_groups[0]["fused"]


def test_a_rebuilt_optimizer_is_adopted_again():
    from machin.frame.optimizers import PortableOptimizer, rebuild_optimizer

    net = nn.Linear(3, 2)
    built = build_optimizer(torch.optim.Adam, net.parameters(), 0.01)
    assert is_fused_by_default(built)
    rebuilt = rebuild_optimizer(*PortableOptimizer(built).__reduce__()[1])
    assert rebuilt is not built and is_fused_by_default(rebuilt)
    rebuilt.load_state_dict(torch.optim.Adam(net.parameters(), lr=0.01).state_dict())
    assert rebuilt.param_groups[0]["fused"]
    sgd = adopt(torch.optim.SGD(net.parameters(), lr=0.1))
    assert not is_fused_by_default(sgd) and not is_fused_by_default(
        rebuild_optimizer(*PortableOptimizer(sgd).__reduce__()[1])
    )


# -- step / clear_grads: optimizer.step() and zero_grad() without torch's idle wrappers ---------------
def _trained_pair(cls, device="cpu", **kwargs):
    torch.manual_seed(0)
    nets = [nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).to(device) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    return nets, [cls(net.parameters(), lr=0.01, **kwargs) for net in nets]


def _stepped_both_ways(cls, kwargs, device):
    """Five steps with the optimizer methods and five with ``optimizers``; whatever differs after them."""
    (plain_net, fast_net), (plain, fast) = _trained_pair(cls, device, **kwargs)
    x = torch.randn(16, 3, device=device)
    for _ in range(5):
        plain.zero_grad(set_to_none=True)
        plain_net(x).pow(2).sum().backward()
        plain.step()
        optimizers.clear_grads(fast)
        fast_net(x).pow(2).sum().backward()
        optimizers.step(fast)
    differences = [
        name
        for (name, a), b in zip(plain_net.named_parameters(), fast_net.parameters())
        if not torch.equal(a, b) or a.grad is None or not torch.equal(a.grad, b.grad)
    ]
    if str(plain.state_dict()) != str(fast.state_dict()):
        differences.append("optimizer state")
    return differences, fast, fast_net


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (torch.optim.Adam, {"fused": True}),
        (torch.optim.Adam, {}),
        (torch.optim.SGD, {"momentum": 0.9}),
        (torch.optim.RMSprop, {}),
    ],
)
def test_step_and_clear_grads_change_parameters_and_state_exactly_as_the_methods(cls, kwargs):
    differences, fast, fast_net = _stepped_both_ways(cls, kwargs, "cpu")
    assert differences == []
    optimizers.clear_grads(fast)
    assert all(p.grad is None for p in fast_net.parameters())
    assert torch.is_grad_enabled()  # the step's own grad-mode switch was undone


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (torch.optim.Adam, {"fused": True}),
        (torch.optim.Adam, {"capturable": True}),
        (torch.optim.AdamW, {}),
    ],
)
def test_step_and_clear_grads_on_cuda_change_parameters_and_state_exactly_as_the_methods(
    cls, kwargs
):
    differences, fast, fast_net = _stepped_both_ways(cls, kwargs, "cuda")
    assert differences == []
    optimizers.clear_grads(fast)
    assert all(p.grad is None for p in fast_net.parameters())


def test_step_runs_the_hooks_the_profiler_ranges_and_replaced_steps_as_the_method_does():
    (net, _), (optimizer, _) = _trained_pair(torch.optim.Adam)
    net(torch.ones(1, 3)).sum().backward()
    calls = []
    handle = optimizer.register_step_post_hook(lambda *_: calls.append("own"))
    optimizers.step(optimizer)
    handle.remove()
    handle = register_optimizer_step_pre_hook(lambda *_: calls.append("global"))
    optimizers.step(optimizer)
    handle.remove()
    optimizers.step(optimizer)
    assert calls == ["own", "global"]
    with torch.profiler.profile() as profile:
        optimizers.step(optimizer)
        optimizers.clear_grads(optimizer)
    names = {event.name for event in profile.events()}
    assert {"Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad"} <= names
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=1
    )  # replaces optimizer.step to count it
    net(torch.ones(1, 3)).sum().backward()
    optimizers.step(optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # torch warns when the scheduler steps before the optimizer did
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.001)


def test_optimizers_of_their_own_kind_are_called_as_they_are():
    class Counting:  # duck-typed, as A3C's gradient-pushing optimizer
        param_groups: list = []

        def __init__(self):
            self.calls = []

        def step(self):
            self.calls.append("step")

        def zero_grad(self, set_to_none=True):
            self.calls.append(("zero_grad", set_to_none))

    class OwnZeroGrad(torch.optim.SGD):
        def zero_grad(self, set_to_none=True):
            counting.calls.append("own zero_grad")
            super().zero_grad(set_to_none)

    counting = Counting()
    optimizers.step(counting)
    optimizers.clear_grads(counting)
    optimizers.clear_grads(OwnZeroGrad(nn.Linear(2, 2).parameters(), lr=0.1))
    assert counting.calls == ["step", ("zero_grad", True), "own zero_grad"]
