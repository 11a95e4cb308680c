"""Parallel execution wrappers: run several environments of one kind as a group."""

from . import base, openai_gym
from .base import ParallelWrapperBase
from .openai_gym import (
    GymTerminationError,
    GymWorkerError,
    ParallelWrapperDummy,
    ParallelWrapperSubProc,
)

__all__ = [
    "base",
    "openai_gym",
    "ParallelWrapperBase",
    "GymTerminationError",
    "GymWorkerError",
    "ParallelWrapperDummy",
    "ParallelWrapperSubProc",
]
