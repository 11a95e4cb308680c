"""Replay buffers: plain, prioritized, in shared memory, and (in ``buffer_d`` / ``prioritized_buffer_d``) distributed."""

from .buffer import Buffer
from .buffer_d import DistributedBuffer
from .episode_buffer_d import EpisodeDistributedBuffer
from .her import HindsightReplay
from .prioritized_buffer import PrioritizedBuffer, WeightTree
from .prioritized_buffer_d import DistributedPrioritizedBuffer
from .sequence_buffer import SequenceBatch, SequenceBuffer
from .shm_buffer import SHMBuffer

__all__ = [
    "Buffer",
    "PrioritizedBuffer",
    "WeightTree",
    "DistributedBuffer",
    "DistributedPrioritizedBuffer",
    "EpisodeDistributedBuffer",
    "SequenceBuffer",
    "SequenceBatch",
    "SHMBuffer",
    "HindsightReplay",
]
