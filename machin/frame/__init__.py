"""Algorithms, replay buffers, exploration noise, transitions, the vectorised sampler and the trainer."""

from . import algorithms, buffers, callbacks, noise, sampler, trainer, transition

__all__ = ["algorithms", "buffers", "callbacks", "noise", "sampler", "trainer", "transition"]
