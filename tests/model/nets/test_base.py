import copy
import pickle

import pytest
import torch
from torch import nn

from machin.model.nets import (
    NeuralNetworkModule,
    ResNet,
    dynamic_module_wrapper,
    static_module_wrapper,
)
from machin.model.nets.base import DynamicModuleWrapper, ModuleWrapper, StaticModuleWrapper

# "meta" is a second device that exists on every machine; CUDA is used when present.
OTHER_DEVICE = "cuda" if torch.cuda.is_available() else "meta"


def _move(module, device):
    """``module.to(device)``; a module on the meta device has no data to copy, so it is re-created empty."""
    if any(t.is_meta for t in module.state_dict().values()):
        return module.to_empty(device=device)
    return module.to(device)


class Two(NeuralNetworkModule):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 4)
        self.last = nn.Linear(4, 2)

    def forward(self, x):
        return self.last(self.first(x).to(self.last.weight.device))


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, some_state, scale=1.0):
        return self.bn(self.fc1(some_state)) * scale


def test_exports():
    import machin.model.nets as nets

    assert {
        "NeuralNetworkModule",
        "ResNet",
        "static_module_wrapper",
        "dynamic_module_wrapper",
    } <= set(nets.__all__)
    assert issubclass(ResNet, NeuralNetworkModule)


def test_devices_follow_the_parameters():
    net = Two()
    assert net.input_device == torch.device("cpu")
    assert net.output_device == torch.device("cpu")
    net.to(OTHER_DEVICE)
    assert net.input_device.type == OTHER_DEVICE
    assert net.output_device.type == OTHER_DEVICE
    _move(net, "cpu")
    assert net.input_device == net.output_device == torch.device("cpu")


def test_input_and_output_modules_decide_the_devices():
    net = Two()
    net.last.to(OTHER_DEVICE)
    # Unset: the first parameter gives the input device, the last one the output device.
    assert net.input_device.type == "cpu" and net.output_device.type == OTHER_DEVICE
    net.set_input_module(net.last)
    net.set_output_module(net.first)
    assert net.input_device.type == OTHER_DEVICE
    assert net.output_device.type == "cpu"
    assert (
        "last" in dict(net.named_children()) and len(list(net.children())) == 2
    )  # nothing registered twice
    assert set(net.state_dict()) == {"first.weight", "first.bias", "last.weight", "last.bias"}


def test_set_module_validation():
    net = Two()
    with pytest.raises(TypeError, match="input_module must be a torch.nn.Module, got str"):
        net.set_input_module("first")
    net.set_input_module(net)  # the module itself is allowed
    assert net.input_device == torch.device("cpu")
    assert net.input_module is net and net.output_module is None


def test_a_module_outside_the_network_is_registered():
    # As in Machin 0.3.4: it becomes the child "output_module" and is saved with the network.
    net = Two()
    extra = nn.Linear(1, 1)
    net.set_output_module(extra)
    assert net.output_module is extra
    assert dict(net.named_children())["output_module"] is extra
    assert "output_module.weight" in net.state_dict()


def test_module_without_tensors_reports_cpu_and_buffers_count():
    class Empty(NeuralNetworkModule):
        def forward(self, x):
            return x

    assert Empty().input_device == torch.device("cpu")
    empty = Empty()
    empty.register_buffer("running", torch.zeros(1, device=OTHER_DEVICE))
    assert empty.input_device.type == OTHER_DEVICE


def test_forward_must_be_implemented():
    class NoForward(NeuralNetworkModule):
        pass

    module = NoForward()  # instantiable, as in Machin 0.3.4
    with pytest.raises(NotImplementedError, match="NoForward .*without a forward"):
        module(torch.zeros(1))
    assert isinstance(NeuralNetworkModule(), nn.Module)


def test_find_child():
    seq = nn.Sequential(
        nn.Sequential(nn.Linear(1, 2), nn.ReLU()),
        nn.Linear(2, 3),
        nn.Sequential(nn.Tanh(), nn.Sequential(nn.Linear(3, 1))),
    )
    assert NeuralNetworkModule.find_child(seq) is seq[0][0]
    assert NeuralNetworkModule.find_child(seq, is_first=False) is seq[2][1][0]
    leaf = nn.Linear(1, 1)
    assert NeuralNetworkModule.find_child(leaf) is leaf
    assert Two.find_child(Two(), is_first=False) is not None
    with pytest.raises(TypeError, match="seq must be a torch.nn.Module, got list"):
        NeuralNetworkModule.find_child([leaf])


def test_static_wrapper_reports_exactly_the_given_devices():
    net = QNet()
    wrapped = static_module_wrapper(net, "cpu", "cpu")
    assert isinstance(wrapped, StaticModuleWrapper) and isinstance(wrapped, NeuralNetworkModule)
    assert wrapped.input_device == torch.device("cpu")
    assert wrapped.output_device == torch.device("cpu")
    other = static_module_wrapper(net, torch.device("cpu"), "cuda:1")
    assert other.output_device == torch.device("cuda:1")
    net.to("meta")  # static devices are not detected, even if the module is moved
    assert wrapped.input_device == torch.device("cpu")
    with pytest.raises(
        ValueError,
        match="input_device must be a torch.device or a device string such as 'cuda:0', got 'gpu please'",
    ):
        static_module_wrapper(QNet(), "gpu please", "cpu")
    with pytest.raises(ValueError, match="output_device must be"):
        static_module_wrapper(QNet(), "cpu", 3.5)


def test_dynamic_wrapper_follows_the_module():
    net = QNet()
    wrapped = dynamic_module_wrapper(net)
    assert isinstance(wrapped, DynamicModuleWrapper)
    assert wrapped.input_device == wrapped.output_device == torch.device("cpu")
    net.to(OTHER_DEVICE)  # moving the wrapped module
    assert wrapped.input_device.type == OTHER_DEVICE
    _move(wrapped, "cpu")  # or the wrapper
    assert wrapped.output_device == torch.device("cpu")
    assert net.fc1.weight.device == torch.device("cpu")


@pytest.mark.parametrize(
    "wrap", [lambda m: static_module_wrapper(m, "cpu", "cpu"), dynamic_module_wrapper]
)
def test_wrappers_are_transparent(wrap):
    net = QNet()
    attributes_before = set(vars(net))
    wrapped = wrap(net)
    assert set(vars(net)) == attributes_before  # nothing written onto the user's module
    assert not hasattr(net, "input_device")
    assert wrapped.module is net
    assert wrapped.fc1 is net.fc1  # attribute access falls through to the module
    x = torch.randn(5, 3)
    net.eval()
    assert torch.equal(wrapped(x, scale=2.0), net(x, scale=2.0))
    wrapped_params, own_params = list(wrapped.parameters()), list(net.parameters())
    assert len(wrapped_params) == len(own_params) == 4
    assert all(a is b for a, b in zip(wrapped_params, own_params))
    with pytest.raises(AttributeError, match="no_such_attribute"):
        _ = wrapped.no_such_attribute


def test_wrapper_checkpoints_match_the_bare_module():
    net = QNet()
    wrapped = static_module_wrapper(QNet(), "cpu", "cpu")
    with torch.no_grad():
        for param in wrapped.parameters():
            param.add_(1.0)
    state = wrapped.state_dict()
    assert list(state) == list(net.state_dict())
    net.load_state_dict(state)
    assert torch.equal(net.fc1.weight, wrapped.fc1.weight)

    fresh = dynamic_module_wrapper(QNet())
    fresh.load_state_dict(net.state_dict())
    assert torch.equal(fresh.fc1.bias, net.fc1.bias)
    with pytest.raises(RuntimeError, match="for QNet:\n\tsize mismatch for fc1.weight"):
        fresh.load_state_dict({**net.state_dict(), "fc1.weight": torch.zeros(2, 2)})

    parent = nn.Sequential(wrapped, nn.ReLU())
    keys = list(parent.state_dict())
    assert keys[:2] == ["0.fc1.weight", "0.fc1.bias"]
    parent.load_state_dict(parent.state_dict())


def test_rewrapping_replaces_instead_of_nesting():
    net = QNet()
    first = dynamic_module_wrapper(net)
    second = static_module_wrapper(first, "cpu", "meta")
    assert second.module is net
    assert second.output_device == torch.device("meta")
    assert dynamic_module_wrapper(second).module is net


def test_wrappers_copy_and_pickle():
    wrapped = static_module_wrapper(QNet(), "cpu", "cpu")
    for clone in (copy.deepcopy(wrapped), pickle.loads(pickle.dumps(wrapped))):
        assert clone.input_device == torch.device("cpu")
        assert clone.module is not wrapped.module
        assert list(clone.state_dict()) == list(wrapped.state_dict())
        assert torch.equal(clone.fc1.weight, wrapped.fc1.weight)
    dynamic = copy.deepcopy(dynamic_module_wrapper(QNet()))
    assert dynamic.input_device == torch.device("cpu")


def test_wrappers_reject_non_modules():
    for make in (
        lambda: static_module_wrapper(3, "cpu", "cpu"),
        lambda: dynamic_module_wrapper("net"),
        lambda: ModuleWrapper([]),
    ):
        with pytest.raises(TypeError, match="wrapped_module must be a torch.nn.Module"):
            make()
