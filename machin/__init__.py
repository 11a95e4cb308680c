"""machin: reinforcement learning algorithms, buffers and parallel tools for PyTorch."""

from . import env, frame, model, parallel, utils

__version__ = "0.4.0"
__all__ = ["env", "frame", "model", "parallel", "utils", "__version__"]
