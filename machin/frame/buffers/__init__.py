"""Replay buffers: plain, prioritized, and (in ``buffer_d`` / ``prioritized_buffer_d``) distributed."""

from .buffer import Buffer
from .buffer_d import DistributedBuffer
from .prioritized_buffer import PrioritizedBuffer, WeightTree
from .prioritized_buffer_d import DistributedPrioritizedBuffer
from .sequence_buffer import SequenceBatch, SequenceBuffer

__all__ = ["Buffer", "PrioritizedBuffer", "WeightTree", "DistributedBuffer", "DistributedPrioritizedBuffer",
           "SequenceBuffer", "SequenceBatch"]
