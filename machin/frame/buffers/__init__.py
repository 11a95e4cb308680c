"""Replay buffers: plain, prioritized, and (in ``buffer_d`` / ``prioritized_buffer_d``) distributed."""

from .buffer import Buffer
from .prioritized_buffer import PrioritizedBuffer, WeightTree

__all__ = ["Buffer", "PrioritizedBuffer", "WeightTree"]
