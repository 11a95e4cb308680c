"""One call that seeds every random number generator a training run uses."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["seed"]


def seed(value: int, *envs: Any) -> None:
    """Seed Python's ``random``, numpy's global generator, torch (CPU and CUDA) and environments.

    Args:
        value: The seed, a non-negative integer.
        *envs: Gymnasium environments (or anything with ``reset(seed=...)``); the ``i``-th
            is reset with ``value + i`` and its action space seeded likewise, so parallel
            copies of an environment do not replay the same episodes.

    Raises:
        ValueError: When ``value`` is not a non-negative integer.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"seed must be a non-negative integer, got {value!r}")
    value = int(value)
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.manual_seed(value)  # also seeds every CUDA device
    for offset, env in enumerate(envs):
        env.reset(seed=value + offset)
        space = getattr(env, "action_space", None)
        if space is not None and hasattr(space, "seed"):
            space.seed(value + offset)
