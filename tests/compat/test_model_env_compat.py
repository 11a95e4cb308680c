"""Machin 0.3.4 behaviours of ``machin.model`` and ``machin.env`` that machin keeps."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from machin.env.wrappers import (
    GymTerminationError,
    GymWorkerError,
    ParallelWrapperBase,
    ParallelWrapperDummy,
    ParallelWrapperSubProc,
)
from machin.model.nets import NeuralNetworkModule, ResNet, dynamic_module_wrapper
from machin.model.nets.resnet import (
    BasicBlock,
    BasicBlockWN,
    Bottleneck,
    BottleneckWN,
    cfg,
    conv1x1,
    conv3x3,
    conv5x5,
    none_norm,
)
from machin.utils.compat import ExtraArgumentsWarning
from machin.utils.prepare import prep_load_state_dict

# -- machin.model.nets.resnet helpers ----------------------------------------------------


def test_conv_helpers():
    assert conv1x1(2, 3).kernel_size == (1, 1) and conv1x1(2, 3).bias is None
    three = conv3x3(2, 3, stride=2)
    assert three.kernel_size == (3, 3) and three.stride == (2, 2) and three.padding == (1, 1)
    five = conv5x5(2, 3)
    assert five.kernel_size == (5, 5) and five.stride == (2, 2) and five.padding == (2, 2)


def test_none_norm_takes_any_arguments_and_does_nothing():
    layer = none_norm(64, eps=1e-5)
    assert isinstance(layer, nn.Sequential) and len(layer) == 0
    x = torch.randn(2, 3)
    assert torch.equal(layer(x), x)


def test_cfg_errors():
    with pytest.raises(ValueError, match="Resnet depth should be either 18, 34, 50, 101, 152"):
        cfg(20)
    with pytest.raises(ValueError, match='Invalid normalization method: "layer"'):
        cfg(18, "layer")


@pytest.mark.parametrize(
    "block, norm_kwargs",
    [
        (BasicBlock, {}),
        (BasicBlock, {"norm_layer": none_norm}),
        (Bottleneck, {}),
        (BasicBlockWN, {}),
        (BottleneckWN, {}),
    ],
)
def test_blocks_keep_the_0_3_4_layout(block, norm_kwargs):
    torch.manual_seed(0)
    module = block(8, 4, 2, **norm_kwargs)
    assert isinstance(module, NeuralNetworkModule)
    out = module(torch.randn(2, 8, 6, 6))
    assert out.shape == (2, 4 * block.expansion, 3, 3)
    assert module.input_module is module.conv1
    assert any(key.startswith("shortcut.0.") for key in module.state_dict())


def test_blocks_ignore_extra_keywords_with_a_warning():
    with pytest.warns(ExtraArgumentsWarning, match="'norm_layer'"):
        BasicBlockWN(4, 4, 1, norm_layer=nn.BatchNorm2d)


def test_resnet_returns_one_vector_per_image():
    torch.manual_seed(0)
    net = ResNet(3, 18, 7)
    assert net(torch.randn(2, 3, 224, 224)).shape == (2, 7)
    assert net.output_module is net.fc and net.input_module is net.conv1


# -- NeuralNetworkModule and the wrappers -----------------------------------------------


def test_neural_network_module_is_instantiable():
    module = NeuralNetworkModule()
    assert module.input_module is None and module.output_module is None


def test_set_input_module_rejects_a_module_on_two_devices():
    net = NeuralNetworkModule()
    split = nn.Linear(2, 2)
    split.bias = nn.Parameter(torch.zeros(2, device="meta"))
    with pytest.raises(
        RuntimeError, match="must be another NeuralNetworkModule or locate on one single device"
    ):
        net.set_input_module(split)


def test_set_input_module_registers_an_outside_module():
    net = NeuralNetworkModule()
    layer = nn.Linear(2, 2)
    net.set_input_module(layer)
    assert net.input_module is layer
    assert "input_module.weight" in net.state_dict()


def test_a_network_input_module_gives_its_own_input_device():
    class Inner(NeuralNetworkModule):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2, device="meta")
            self.set_input_module(self.b)

        def forward(self, x):
            return x

    class Outer(NeuralNetworkModule):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.set_input_module(self.inner)

        def forward(self, x):
            return x

    assert Outer().input_device.type == "meta"


def test_find_child_descends_sequentials_only():
    inner = nn.Linear(1, 1)
    seq = nn.Sequential(nn.Sequential(inner, nn.ReLU()), nn.Tanh())
    assert NeuralNetworkModule.find_child(seq) is inner
    assert NeuralNetworkModule.find_child(seq, False).__class__ is nn.Tanh
    holder = nn.ModuleDict({"x": inner})
    assert NeuralNetworkModule.find_child(holder) is holder


def test_dynamic_wrapper_has_wrapped_module_and_reads_0_3_4_checkpoints():
    torch.manual_seed(0)
    source = nn.Linear(3, 2)
    wrapper = dynamic_module_wrapper(nn.Linear(3, 2))
    assert wrapper.wrapped_module is wrapper.module
    # 0.3.4's wrapper saved the module under "wrapped_module." and again as its
    # input and output module.
    legacy = {}
    for prefix in ("wrapped_module.", "input_module.", "output_module."):
        legacy.update({prefix + k: v for k, v in source.state_dict().items()})
    prep_load_state_dict(wrapper, legacy)
    assert torch.equal(wrapper.module.weight, source.weight)


# -- machin.env.wrappers ------------------------------------------------------------------


class Short(gym.Env):
    """Terminates after one step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, fail=False):
        self.fail = fail

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if self.fail:
            raise KeyError("env failure")
        return np.zeros(1, np.float32), 1.0, True, False, {}

    def render(self):
        return np.zeros((2, 2, 3), np.uint8)


def test_gym_termination_error_needs_no_message():
    error = GymTerminationError()
    assert "have terminated, reset before continuing" in str(error)
    assert issubclass(GymWorkerError, GymTerminationError) and issubclass(
        GymWorkerError, RuntimeError
    )


def test_stepping_a_terminal_environment_raises_the_0_3_4_error():
    wrapper = ParallelWrapperDummy([lambda i: Short()] * 2)
    try:
        wrapper.reset()
        wrapper.step([0, 0])
        with pytest.raises(GymTerminationError, match="have terminated, reset before continuing"):
            wrapper.step([0, 0])
    finally:
        wrapper.close()


def test_action_count_mismatch_phrase():
    wrapper = ParallelWrapperDummy([lambda i: Short()] * 2)
    try:
        wrapper.reset()
        with pytest.raises(ValueError, match="Action number must match environment number"):
            wrapper.step([0])
    finally:
        wrapper.close()


def test_active_returns_an_index_array():
    wrapper = ParallelWrapperDummy([lambda i: Short()] * 3)
    try:
        wrapper.reset(idx=[0, 2])
        active = wrapper.active()
        assert isinstance(active, np.ndarray) and active.tolist() == [0, 2]
        assert active  # true when not empty, like a list
        wrapper.step([0], idx=active[:1])
        assert wrapper.active().tolist() == [2]
        wrapper.step([0], idx=2)
        assert not wrapper.active() and len(wrapper.active()) == 0
    finally:
        wrapper.close()


def test_render_ignores_extra_arguments_with_a_warning():
    wrapper = ParallelWrapperDummy([lambda i: Short()] * 2)
    try:
        wrapper.reset()
        with pytest.warns(ExtraArgumentsWarning, match="'mode'"):
            frames = wrapper.render(None, mode="rgb_array")
        assert len(frames) == 2
    finally:
        wrapper.close()


def test_wrapper_base_ignores_constructor_arguments_with_a_warning():
    class Minimal(ParallelWrapperDummy):
        def __init__(self, env_creators, extra_option):
            ParallelWrapperBase.__init__(self, env_creators, extra_option=extra_option)
            super().__init__(env_creators)

    with pytest.warns(ExtraArgumentsWarning, match="'extra_option'"):
        Minimal([lambda i: Short()], extra_option=1).close()


def test_dummy_environment_exception_is_the_cause():
    wrapper = ParallelWrapperDummy([lambda i: Short(fail=True)])
    try:
        wrapper.reset()
        with pytest.raises(GymTerminationError) as info:
            wrapper.step([0])
        assert isinstance(info.value.__cause__, KeyError)
    finally:
        wrapper.close()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_subproc_creation_failure_is_a_runtime_error():
    def creator(index):
        if index == 1:
            raise KeyError("cannot build")
        return Short()

    with pytest.raises(RuntimeError, match="failed to create environment 1") as info:
        ParallelWrapperSubProc([creator] * 2)
    assert isinstance(info.value, GymWorkerError)
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_subproc_environment_exception_is_the_cause():
    wrapper = ParallelWrapperSubProc([lambda i: Short(fail=True)])
    try:
        wrapper.reset()
        with pytest.raises(GymTerminationError, match="raised an exception") as info:
            wrapper.step([0])
        assert isinstance(info.value.__cause__, KeyError)
    finally:
        wrapper.close()
