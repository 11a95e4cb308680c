"""Gymnasium helpers and parallel environment wrappers."""

from . import utils, wrappers

__all__ = ["utils", "wrappers"]
