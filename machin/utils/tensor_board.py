"""A holder for one global tensorboardX ``SummaryWriter``.

Code that wants to log scalars without passing a writer around uses
:data:`default_board`: the application calls ``default_board.init(logdir)`` once,
then any module can write through ``default_board.writer`` after checking
``default_board.is_initiated()``.
"""

from __future__ import annotations

from typing import Any, Optional

from tensorboardX import SummaryWriter

__all__ = ["TensorBoard", "default_board"]


class TensorBoard:
    """Holds a tensorboardX ``SummaryWriter`` once :meth:`init` has created it.

    Attributes:
        writer: The ``SummaryWriter``, ``None`` until :meth:`init` is called.
    """

    def __init__(self):
        self.writer: Optional[SummaryWriter] = None

    def init(self, *writer_args: Any, **writer_kwargs: Any) -> None:
        """Create the writer with ``SummaryWriter(*writer_args, **writer_kwargs)``.

        Raises:
            RuntimeError: When the board already has a writer.
        """
        if self.writer is not None:
            raise RuntimeError(
                f"Writer has been initialized: this TensorBoard already has a writer "
                f"(logging to {self.writer.logdir!r}); init() may only be called once"
            )
        self.writer = SummaryWriter(*writer_args, **writer_kwargs)

    def is_initiated(self) -> bool:
        """Return whether :meth:`init` has created the writer."""
        return self.writer is not None

    def is_inited(self) -> bool:
        """Same as :meth:`is_initiated` (the name Machin 0.3.4 used)."""
        return self.is_initiated()


#: The global board.
default_board = TensorBoard()
