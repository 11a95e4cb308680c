"""A replay buffer in shared memory, for samplers and learners in other processes.

:class:`SHMBuffer` is what :class:`~machin.frame.algorithms.maddpg.MADDPG` stores into
when its agents train in a process pool (Machin 0.3.4 offered it as
``machin.frame.algorithms.maddpg.SHMBuffer``, which still works).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Union

from ..transition import TransitionBase
from .buffer import DEFAULT_REQUIRED_ATTRS, Buffer

__all__ = ["SHMBuffer", "TransitionLike"]

#: What the buffers store: a transition, or a dict of its attributes.
TransitionLike = Union[TransitionBase, Dict[str, Any]]


class SHMBuffer(Buffer):
    """A :class:`~machin.frame.buffers.buffer.Buffer` whose storage lives in shared memory.

    After every write the column tensors of the buffer are moved to shared memory
    (``share_memory_()``; columns already there, and CUDA columns, are left as they
    are). Pickling the buffer for a worker of a
    :class:`~machin.parallel.pool.Pool` built with ``is_copy_tensor=False`` then
    sends handles instead of copies, so the worker samples the very storage the
    owner writes. Custom attributes that are not numbers live in Python lists and
    are copied when the buffer is pickled.
    :class:`~machin.frame.algorithms.maddpg.MADDPG` uses this buffer when its pool
    is a process pool.

    Takes the arguments of :class:`~machin.frame.buffers.buffer.Buffer`. Not
    thread-safe.
    """

    def extend(
        self,
        transitions: Iterable[TransitionLike],
        required_attrs: Iterable[str] = DEFAULT_REQUIRED_ATTRS,
    ) -> List[int]:
        """Store several transitions (see :meth:`Buffer.extend`), then share new storage.

        Args:
            transitions: The transitions (or dicts) to store.
            required_attrs: Attributes every transition must have.

        Returns:
            The storage positions used.
        """
        positions = super().extend(transitions, required_attrs)
        moved = False
        for column in self._columns():
            if column.tensor is not None and not column.tensor.is_shared():
                column.tensor.share_memory_()
                moved = True
        if moved:  # the storage moved: the fast path's cached numpy views point at the old memory
            self._forget_views()
        return positions
