"""Residual networks (He et al., 2016) for image-like observations.

The layout follows the CIFAR-style ResNet, which suits the small images common in
reinforcement learning: a 3x3 stem convolution with 64 channels and stride 1,
four stages of residual blocks with 64, 128, 256 and 512 base channels (stages 2
to 4 halve the resolution), adaptive average pooling to ``out_pool_size`` and a
1x1 convolution to ``out_planes`` channels. Depths 18 and 34 use basic blocks
(two 3x3 convolutions), depths 50, 101 and 152 bottleneck blocks (1x1, 3x3, 1x1
convolutions with 4x expansion).

Normalization: ``"batch"`` puts a ``BatchNorm2d`` after every convolution,
``"weight"`` reparametrizes every convolution weight with
:func:`torch.nn.utils.parametrizations.weight_norm`, and ``"none"`` uses plain
convolutions with biases.
"""

from __future__ import annotations

from typing import Dict, List, Tuple, Type, Union

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from .base import NeuralNetworkModule

__all__ = ["ResNet"]

NORMS = ("none", "batch", "weight")


class _Norm:
    """Builds convolutions and the layers that follow them for one normalization method."""

    def __init__(self, norm: str):
        self.norm = norm

    def conv(self, in_planes: int, out_planes: int, kernel_size: int, stride: int = 1) -> nn.Module:
        conv = nn.Conv2d(
            in_planes,
            out_planes,
            kernel_size,
            stride=stride,
            padding=kernel_size // 2,
            bias=self.norm != "batch",
        )
        return weight_norm(conv) if self.norm == "weight" else conv

    def after(self, planes: int) -> nn.Module:
        return nn.BatchNorm2d(planes) if self.norm == "batch" else nn.Identity()


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int, norm: _Norm):
        super().__init__()
        out_planes = planes * self.expansion
        self.body = nn.Sequential(
            norm.conv(in_planes, planes, 3, stride),
            norm.after(planes),
            nn.ReLU(inplace=True),
            norm.conv(planes, out_planes, 3),
            norm.after(out_planes),
        )
        self.shortcut = _shortcut(in_planes, out_planes, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int, norm: _Norm):
        super().__init__()
        out_planes = planes * self.expansion
        self.body = nn.Sequential(
            norm.conv(in_planes, planes, 1),
            norm.after(planes),
            nn.ReLU(inplace=True),
            norm.conv(planes, planes, 3, stride),
            norm.after(planes),
            nn.ReLU(inplace=True),
            norm.conv(planes, out_planes, 1),
            norm.after(out_planes),
        )
        self.shortcut = _shortcut(in_planes, out_planes, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def _shortcut(in_planes: int, out_planes: int, stride: int, norm: _Norm) -> nn.Module:
    if stride == 1 and in_planes == out_planes:
        return nn.Identity()
    return nn.Sequential(norm.conv(in_planes, out_planes, 1, stride), norm.after(out_planes))


#: Block type and number of blocks per stage for each supported depth.
ARCHITECTURES: Dict[int, Tuple[Type[nn.Module], List[int]]] = {
    18: (_BasicBlock, [2, 2, 2, 2]),
    34: (_BasicBlock, [3, 4, 6, 3]),
    50: (_Bottleneck, [3, 4, 6, 3]),
    101: (_Bottleneck, [3, 4, 23, 3]),
    152: (_Bottleneck, [3, 8, 36, 3]),
}


def _positive_int(value: object, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{arg} must be a positive integer, got {value!r}")
    return value


class ResNet(NeuralNetworkModule):
    """A residual network mapping ``[B, in_planes, H, W]`` to ``[B, out_planes, *out_pool_size]``.

    The stem convolution is the input module and the final 1x1 convolution the
    output module (see :class:`~machin.model.nets.base.NeuralNetworkModule`).

    Args:
        in_planes: Number of input channels.
        depth: Number of layers: 18, 34, 50, 101 or 152.
        out_planes: Number of output channels.
        out_pool_size: Spatial size of the output, ``(height, width)`` or one int for both.
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
        if isinstance(depth, bool) or not isinstance(depth, int) or depth not in ARCHITECTURES:
            raise ValueError(f"depth must be one of {sorted(ARCHITECTURES)}, got {depth!r}")
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {list(NORMS)}, got {norm!r}")
        if isinstance(out_pool_size, int) and not isinstance(out_pool_size, bool):
            out_pool_size = (out_pool_size, out_pool_size)
        if not isinstance(out_pool_size, (tuple, list)) or len(out_pool_size) != 2:
            raise ValueError(
                f"out_pool_size must be an int or a (height, width) pair, got {out_pool_size!r}"
            )
        out_pool_size = tuple(_positive_int(size, "out_pool_size") for size in out_pool_size)

        self.depth = depth
        self.norm = norm
        block, counts = ARCHITECTURES[depth]
        builder = _Norm(norm)

        self.stem = builder.conv(in_planes, 64, 3)
        self.stem_norm = builder.after(64)
        stages = []
        planes_in = 64
        for index, (planes, count) in enumerate(zip((64, 128, 256, 512), counts)):
            blocks = []
            for block_index in range(count):
                stride = 2 if index > 0 and block_index == 0 else 1
                blocks.append(block(planes_in, planes, stride, builder))
                planes_in = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(out_pool_size)
        self.head = builder.conv(planes_in, out_planes, 1)

        self.set_input_module(self.stem)
        self.set_output_module(self.head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[B, in_planes, H, W]`` images to ``[B, out_planes, *out_pool_size]``.

        Args:
            x: The images, ``[B, in_planes, H, W]``.
        """
        x = torch.relu(self.stem_norm(self.stem(x)))
        return self.head(self.pool(self.stages(x)))
