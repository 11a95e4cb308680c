"""Algorithms, replay buffers, exploration noise and transitions."""

from . import algorithms, buffers, noise, sampler, transition

__all__ = ["algorithms", "buffers", "noise", "sampler", "transition"]
