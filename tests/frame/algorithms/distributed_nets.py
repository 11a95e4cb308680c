"""Old name of the distributed tests' helper module: ``pull_until`` now lives in ``loops.py``."""

from .loops import pull_until

__all__ = ["pull_until"]
