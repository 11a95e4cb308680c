import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from machin.model.nets import ResNet
from machin.model.nets.resnet import (
    BasicBlock,
    BasicBlockWN,
    Bottleneck,
    BottleneckWN,
    cfg,
    none_norm,
)

EXPECTED = {
    18: (BasicBlock, [2, 2, 2, 2]),
    34: (BasicBlock, [3, 4, 6, 3]),
    50: (Bottleneck, [3, 4, 6, 3]),
    101: (Bottleneck, [3, 4, 23, 3]),
    152: (Bottleneck, [3, 8, 36, 3]),
}


def _convs(net):
    return [m for m in net.modules() if isinstance(m, nn.Conv2d)]


def _stages(net):
    return [net.layer1, net.layer2, net.layer3, net.layer4]


def test_resnet18_output_shape_and_devices():
    torch.manual_seed(0)
    net = ResNet(in_planes=3, depth=18, out_planes=10)
    out = net(torch.randn(1, 3, 32, 32))
    assert out.shape == (1, 10)
    assert torch.isfinite(out).all()
    assert net.input_device == torch.device("cpu") and net.output_device == torch.device("cpu")


def test_out_pool_size_sets_the_features_of_fc():
    torch.manual_seed(0)
    net = ResNet(1, 18, 4, out_pool_size=(2, 3))
    assert net.fc.in_features == 512 * 2 * 3
    assert net(torch.randn(2, 1, 64, 64)).shape == (2, 4)
    small = ResNet(1, 18, 4, out_pool_size=2)
    assert small.out_pool_size == (2, 2)
    assert small(torch.randn(1, 1, 8, 8)).shape == (1, 4)


@pytest.mark.parametrize("depth", sorted(EXPECTED))
def test_every_depth_builds_its_blocks(depth):
    # Built on the meta device: the structure without allocating the weights.
    with torch.device("meta"):
        net = ResNet(3, depth, 5)
    block, counts = EXPECTED[depth]
    assert [len(stage) for stage in _stages(net)] == counts
    assert all(type(b) is block for stage in _stages(net) for b in stage)
    assert net.fc.out_features == 5 and net.fc.in_features == 512 * block.expansion
    assert net.conv1.in_channels == 3 and net.conv1.kernel_size == (7, 7)
    # conv layers: stem + per-block convs + projection shortcuts (one per stage)
    per_block = 2 if block is BasicBlock else 3
    shortcuts = 3 if block is BasicBlock else 4
    assert len(_convs(net)) == 1 + per_block * sum(counts) + shortcuts
    assert net.input_device.type == "meta"


def test_bottleneck_forward():
    torch.manual_seed(0)
    net = ResNet(2, 50, 3, norm="batch")
    assert net(torch.randn(2, 2, 32, 32)).shape == (2, 3)


@pytest.mark.parametrize("depth", [0, 20, 1000, "18", True, [18], 18.0])
def test_unsupported_depth_raises(depth):
    with pytest.raises(
        ValueError, match=r"Resnet depth should be either 18, 34, 50, 101, 152, got"
    ):
        ResNet(3, depth, 10)


def test_norms():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32, 32)
    plain = ResNet(3, 18, 4, norm="none")
    assert not any(isinstance(m, nn.BatchNorm2d) for m in plain.modules())
    assert all(c.bias is None and not parametrize.is_parametrized(c) for c in _convs(plain))

    batch = ResNet(3, 18, 4, norm="batch")
    convs = _convs(batch)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in batch.modules()) == len(convs)
    assert all(c.bias is None for c in convs)

    weight = ResNet(3, 18, 4, norm="weight")
    assert all(
        parametrize.is_parametrized(c, "weight") for c in _convs(weight) if c is not weight.conv1
    )
    assert "layer1.0.conv1.parametrizations.weight.original0" in weight.state_dict()

    for net in (plain, batch, weight):
        out = net(x)
        assert out.shape == (2, 4)
        out.sum().backward()
    assert plain.conv1.weight.grad is not None and batch.conv1.weight.grad is not None
    block_conv = weight.layer1[0].conv1
    assert block_conv.parametrizations.weight.original0.grad is not None  # magnitude
    assert block_conv.parametrizations.weight.original1.grad is not None  # direction


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match=r'Invalid normalization method: "layer"'):
        ResNet(3, 18, 4, norm="layer")
    with pytest.raises(ValueError, match="in_planes must be a positive integer, got 0"):
        ResNet(0, 18, 4)
    with pytest.raises(ValueError, match="out_planes must be a positive integer, got -1"):
        ResNet(3, 18, -1)
    with pytest.raises(
        ValueError,
        match=r"out_pool_size must be an int or a \(height, width\) pair, got \(1, 2, 3\)",
    ):
        ResNet(3, 18, 4, out_pool_size=(1, 2, 3))
    with pytest.raises(ValueError, match="out_pool_size must be a positive integer, got 0"):
        ResNet(3, 18, 4, out_pool_size=(0, 1))


def test_cfg_matches_the_blocks_resnet_uses():
    assert cfg(18) == (BasicBlock, [2, 2, 2, 2], {"norm_layer": none_norm})
    assert cfg(50, "batch") == (Bottleneck, [3, 4, 6, 3], {})
    assert cfg(101, "weight") == (BottleneckWN, [3, 4, 23, 3], {})
    assert cfg(34, "weight")[0] is BasicBlockWN
