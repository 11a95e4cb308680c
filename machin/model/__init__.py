"""Network base classes, device wrappers and stock networks."""

from . import nets

__all__ = ["nets"]
