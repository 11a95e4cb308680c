"""Cost of calling a network through ``safe_call`` instead of calling it directly.

A small CPU MLP (4 -> 64 -> 64 -> 2, one sample) is called as
``safe_call(mlp, {"state": x})`` and, for the floor, as ``mlp(state=x)``. The
difference is what keyword matching and device handling add per call.

Run with ``python -m benchmarks.safe_call``.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from machin.frame.algorithms.utils import safe_call

from .common import compare, setup_torch


class MLP(nn.Module):
    """The network of a CartPole Q function; declares its input device like a wrapped module."""

    input_device = torch.device("cpu")

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 2)

    def forward(self, state):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(state)))))


class PlainMLP(MLP):
    """The same network without a declared input device (found from its parameters)."""

    input_device = None


def main() -> None:
    """Print the safe_call overhead for a declared and an auto-detected input device."""
    setup_torch()
    x = torch.randn(1, 4)
    with torch.no_grad():
        mlp = MLP()
        state = {"state": x}
        compare(
            "safe_call small MLP", lambda: safe_call(mlp, state), lambda: mlp(state=x), number=2000
        )
        plain = PlainMLP()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compare(
                "safe_call small MLP, device from parameters (info)",
                lambda: safe_call(plain, state),
                lambda: plain(state=x),
                number=2000,
            )


if __name__ == "__main__":
    main()
