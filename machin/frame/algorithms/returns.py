"""Old home of the n-step returns, kept so that its import path keeps working.

The returns now live in :mod:`machin.frame.returns`, below both the buffers and the
algorithms; import them from there.
"""

from __future__ import annotations

from ..returns import n_step_episode, returns_and_advantages

__all__ = ["n_step_episode", "returns_and_advantages"]
