"""Algorithms, replay buffers, exploration noise and transitions."""

from . import algorithms, buffers, noise, transition

__all__ = ["algorithms", "buffers", "noise", "transition"]
