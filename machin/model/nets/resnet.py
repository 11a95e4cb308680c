"""Residual networks (He et al., 2016) and their building blocks.

:class:`ResNet` has the layout of Machin 0.3.4 (and of the original ImageNet
ResNet): a 7x7 stride-2 stem convolution with 64 channels, a 3x3 stride-2 max
pooling, four stages ``layer1`` .. ``layer4`` of residual blocks with 64, 128, 256
and 512 base channels (stages 2 to 4 halve the resolution), average pooling to
``out_pool_size`` and a linear layer ``fc`` to ``out_planes`` outputs. Depths 18 and
34 use :class:`BasicBlock` (two 3x3 convolutions), depths 50, 101 and 152
:class:`Bottleneck` (1x1, 3x3, 1x1 convolutions with 4x expansion). Images of any
size work; the pooling adapts to the size of the last stage.

Normalization: ``"batch"`` puts a ``BatchNorm2d`` after every convolution,
``"weight"`` reparametrizes every block convolution with
:func:`torch.nn.utils.parametrizations.weight_norm` (:class:`BasicBlockWN`,
:class:`BottleneckWN`), and ``"none"`` uses plain convolutions. As in 0.3.4, the
convolutions have no bias.

The blocks, the convolution helpers (:func:`conv1x1`, :func:`conv3x3`,
:func:`conv5x5`), :func:`none_norm` and :func:`cfg` are public, for building other
residual networks.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple, Type, Union

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from ...utils.compat import ignores_extra_args
from .base import NeuralNetworkModule

__all__ = [
    "BasicBlock",
    "BasicBlockWN",
    "Bottleneck",
    "BottleneckWN",
    "ResNet",
    "cfg",
    "conv1x1",
    "conv3x3",
    "conv5x5",
    "none_norm",
]

NORMS = ("none", "batch", "weight")
NormLayer = Callable[[int], nn.Module]


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """A 1x1 convolution without bias from ``in_planes`` to ``out_planes`` channels.

    Args:
        in_planes: Number of input channels.
        out_planes: Number of output channels.
        stride: Stride of the convolution.
    """
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """A 3x3 convolution without bias, padded to keep the size at stride 1.

    Args:
        in_planes: Number of input channels.
        out_planes: Number of output channels.
        stride: Stride of the convolution.
    """
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv5x5(in_planes: int, out_planes: int, stride: int = 2) -> nn.Conv2d:
    """A 5x5 convolution without bias, padded by 2; the stride defaults to 2.

    Args:
        in_planes: Number of input channels.
        out_planes: Number of output channels.
        stride: Stride of the convolution.
    """
    return nn.Conv2d(in_planes, out_planes, kernel_size=5, stride=stride, padding=2, bias=False)


def none_norm(*_: Any, **__: Any) -> nn.Module:
    """A normalization layer that does nothing, for ``norm_layer`` arguments.

    It takes the arguments of a normalization layer (such as the number of
    channels) and returns an empty ``nn.Sequential``, which passes its input through
    and has no parameters.
    """
    return nn.Sequential()


class _ResidualBlock(NeuralNetworkModule):
    """What the residual blocks share: optional weight norm and the shortcut."""

    expansion = 1
    # Subclasses that set this reparametrize every convolution with weight_norm.
    _weight_norm = False

    def _conv(self, conv: nn.Conv2d) -> nn.Module:
        return weight_norm(conv) if self._weight_norm else conv

    def _shortcut(
        self, in_planes: int, width: int, stride: int, norm_layer: NormLayer
    ) -> nn.Sequential:
        # Empty (the identity) unless the channels or the resolution change.
        if stride == 1 and in_planes == width:
            return nn.Sequential()
        return nn.Sequential(self._conv(conv1x1(in_planes, width, stride)), norm_layer(width))


class BasicBlock(_ResidualBlock):
    """The residual block of ResNet-18/34: two 3x3 convolutions and a shortcut.

    The output has ``expansion * out_planes`` channels; the resolution is divided
    by ``stride``. When either changes, the shortcut is a strided 1x1 convolution
    followed by a normalization layer, otherwise the identity.

    Args:
        in_planes: Number of input channels.
        out_planes: Number of output channels (before expansion).
        stride: Stride of the first convolution and of the shortcut.
        norm_layer: ``norm_layer(channels)`` builds the layer after each
            convolution; ``BatchNorm2d`` when ``None``, :func:`none_norm` for none.
    """

    #: Output channels per ``out_planes``.
    expansion = 1

    @ignores_extra_args
    def __init__(
        self,
        in_planes: int,
        out_planes: int,
        stride: int = 1,
        norm_layer: Union[NormLayer, None] = None,
    ):
        super().__init__()
        norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        width = self.expansion * out_planes
        self.conv1 = self._conv(conv3x3(in_planes, out_planes, stride))
        self.bn1 = norm_layer(out_planes)
        self.conv2 = self._conv(conv3x3(out_planes, width))
        self.bn2 = norm_layer(width)
        self.shortcut = self._shortcut(in_planes, width, stride, norm_layer)
        self.set_input_module(self.conv1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[B, in_planes, H, W]`` to ``[B, expansion * out_planes, H / stride, W / stride]``.

        Args:
            x: The input feature maps.
        """
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class Bottleneck(_ResidualBlock):
    """The residual block of ResNet-50/101/152: 1x1, 3x3 and 1x1 convolutions.

    The last convolution expands the channels four times; the resolution is divided
    by ``stride``, applied by the 3x3 convolution.

    Args:
        in_planes: Number of input channels.
        out_planes: Number of channels of the inner convolutions (the output has
            ``4 * out_planes``).
        stride: Stride of the 3x3 convolution and of the shortcut.
        norm_layer: ``norm_layer(channels)`` builds the layer after each
            convolution; ``BatchNorm2d`` when ``None``, :func:`none_norm` for none.
    """

    expansion = 4

    @ignores_extra_args
    def __init__(
        self,
        in_planes: int,
        out_planes: int,
        stride: int = 1,
        norm_layer: Union[NormLayer, None] = None,
    ):
        super().__init__()
        norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        width = self.expansion * out_planes
        self.conv1 = self._conv(conv1x1(in_planes, out_planes))
        self.conv2 = self._conv(conv3x3(out_planes, out_planes, stride))
        self.conv3 = self._conv(conv1x1(out_planes, width))
        self.bn1 = norm_layer(out_planes)
        self.bn2 = norm_layer(out_planes)
        self.bn3 = norm_layer(width)
        self.shortcut = self._shortcut(in_planes, width, stride, norm_layer)
        self.set_input_module(self.conv1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[B, in_planes, H, W]`` to ``[B, 4 * out_planes, H / stride, W / stride]``.

        Args:
            x: The input feature maps.
        """
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + self.shortcut(x))


class BasicBlockWN(BasicBlock):
    """:class:`BasicBlock` with weight-normalized convolutions and no normalization layers.

    Args:
        in_planes: Number of input channels.
        out_planes: Number of output channels.
        stride: Stride of the first convolution and of the shortcut.
    """

    _weight_norm = True

    @ignores_extra_args
    def __init__(self, in_planes: int, out_planes: int, stride: int = 1):
        super().__init__(in_planes, out_planes, stride, norm_layer=none_norm)


class BottleneckWN(Bottleneck):
    """:class:`Bottleneck` with weight-normalized convolutions and no normalization layers.

    Args:
        in_planes: Number of input channels.
        out_planes: Number of output channels (before the 4x expansion).
        stride: Stride of the 3x3 convolution and of the shortcut.
    """

    _weight_norm = True

    @ignores_extra_args
    def __init__(self, in_planes: int, out_planes: int, stride: int = 1):
        super().__init__(in_planes, out_planes, stride, norm_layer=none_norm)


_BLOCK_COUNTS: Dict[int, List[int]] = {
    18: [2, 2, 2, 2],
    34: [3, 4, 6, 3],
    50: [3, 4, 6, 3],
    101: [3, 4, 23, 3],
    152: [3, 8, 36, 3],
}


def cfg(depth: int, norm: str = "none") -> Tuple[Type[_ResidualBlock], List[int], Dict[str, Any]]:
    """Return the block type, the number of blocks per stage and the block keyword arguments.

    Args:
        depth: 18, 34, 50, 101 or 152.
        norm: ``"none"``, ``"batch"`` or ``"weight"`` (see the module description).

    Returns:
        ``(block, [n1, n2, n3, n4], kwargs)``; build a block with
        ``block(in_planes, out_planes, stride, **kwargs)``.

    Raises:
        ValueError: On another depth or normalization method.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth not in _BLOCK_COUNTS:
        raise ValueError(f"Resnet depth should be either 18, 34, 50, 101, 152, got {depth!r}")
    if norm not in NORMS:
        raise ValueError(
            f'Invalid normalization method: "{norm}"; norm must be one of {list(NORMS)}'
        )
    deep = depth >= 50
    if norm == "weight":
        return (BottleneckWN if deep else BasicBlockWN), list(_BLOCK_COUNTS[depth]), {}
    kwargs: Dict[str, Any] = {"norm_layer": none_norm} if norm == "none" else {}
    return (Bottleneck if deep else BasicBlock), list(_BLOCK_COUNTS[depth]), kwargs


def _positive_int(value: object, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{arg} must be a positive integer, got {value!r}")
    return value


class ResNet(NeuralNetworkModule):
    """A residual network mapping ``[B, in_planes, H, W]`` images to ``[B, out_planes]``.

    See the module description for the layout. The stem convolution ``conv1`` is
    the input module and ``fc`` the output module (see
    :class:`~machin.model.nets.base.NeuralNetworkModule`).

    Args:
        in_planes: Number of input channels.
        depth: Number of layers: 18, 34, 50, 101 or 152.
        out_planes: Number of outputs.
        out_pool_size: Spatial size the last stage is averaged down to before
            ``fc``, ``(height, width)`` or one int for both.
        norm: Normalization method: ``"none"``, ``"batch"`` or ``"weight"``.

    Raises:
        ValueError: On an unsupported ``depth`` or ``norm``, or a size that is not a
            positive integer.
    """

    def __init__(
        self,
        in_planes: int,
        depth: int,
        out_planes: int,
        out_pool_size: Union[int, Tuple[int, int]] = (1, 1),
        norm: str = "none",
    ):
        super().__init__()
        _positive_int(in_planes, "in_planes")
        _positive_int(out_planes, "out_planes")
        block, counts, block_kwargs = cfg(depth, norm)
        if isinstance(out_pool_size, int) and not isinstance(out_pool_size, bool):
            out_pool_size = (out_pool_size, out_pool_size)
        if not isinstance(out_pool_size, (tuple, list)) or len(out_pool_size) != 2:
            raise ValueError(
                f"out_pool_size must be an int or a (height, width) pair, got {out_pool_size!r}"
            )
        out_pool_size = tuple(_positive_int(size, "out_pool_size") for size in out_pool_size)

        self.norm = norm
        self.depth = depth
        self.in_planes = in_planes
        self.out_planes = out_planes
        self.out_pool_size = out_pool_size

        self.conv1 = nn.Conv2d(in_planes, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64) if norm == "batch" else none_norm()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        planes_in = 64
        for index, (planes, count) in enumerate(zip((64, 128, 256, 512), counts)):
            blocks = []
            for block_index in range(count):
                stride = 2 if index > 0 and block_index == 0 else 1
                blocks.append(block(planes_in, planes, stride, **block_kwargs))
                planes_in = planes * block.expansion
            self.add_module(f"layer{index + 1}", nn.Sequential(*blocks))
        self.pool = nn.AdaptiveAvgPool2d(out_pool_size)
        self.fc = nn.Linear(planes_in * out_pool_size[0] * out_pool_size[1], out_planes)

        self.set_input_module(self.conv1)
        self.set_output_module(self.fc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[B, in_planes, H, W]`` images to ``[B, out_planes]``.

        Args:
            x: The images, ``[B, in_planes, H, W]``.
        """
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.pool(x), 1))
