"""A shared table of Gaussian noise that every process rebuilds from a seed, and a sampler of its slices.

:class:`~machin.frame.algorithms.ars.ARS` draws its parameter perturbations as slices of a
:class:`NoiseTable`, so only a slice's start index travels between processes. Both classes
are also importable from ``machin.frame.algorithms.ars``, as in Machin 0.3.4.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Tuple, Union

import numpy as np
import torch

from ...parallel.exception import ValueAssertionError

__all__ = ["NoiseTable", "SharedNoiseSampler"]


class NoiseTable:
    """A 1-D table of ``size`` Gaussian values that any process can rebuild from ``seed``.

    Value ``i`` belongs to block ``i // block_size``; a block is drawn from its own
    generator (seeded with ``(seed, block)``), the first time a slice touches it, and
    recently used blocks are kept in a cache of ``cache_bytes`` at most. So a table of
    250 million values costs memory only for the parts in use, and two processes with
    the same seed read the same numbers at the same index.

    Supports ``len(table)`` and contiguous slicing ``table[a:b]``, which returns a new
    float64 tensor.

    Args:
        size: Number of values.
        std_dev: Standard deviation of the values.
        seed: Non-negative seed of the table.
        block_size: Values per generated block.
        cache_bytes: Memory the block cache may use.
    """

    def __init__(
        self,
        size: int,
        std_dev: float = 1.0,
        seed: int = 0,
        *,
        block_size: int = 1 << 14,
        cache_bytes: int = 64 << 20,
    ):
        for name, value in (("size", size), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.size, self.std_dev, self.seed = int(size), float(std_dev), int(seed)
        self.block_size = int(block_size)
        self._max_blocks = max(2, cache_bytes // (8 * self.block_size))
        self._blocks: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def _block(self, index: int) -> torch.Tensor:
        with self._lock:
            block = self._blocks.get(index)
            if block is not None:
                self._blocks.move_to_end(index)
                return block
        length = min(self.block_size, self.size - index * self.block_size)
        values = np.random.default_rng((self.seed, index)).standard_normal(length)
        block = torch.from_numpy(values).mul_(self.std_dev)
        with self._lock:
            self._blocks[index] = block
            while len(self._blocks) > self._max_blocks:
                self._blocks.popitem(last=False)
        return block

    def __getitem__(self, index: slice) -> torch.Tensor:
        if not isinstance(index, slice):
            raise TypeError(f"a NoiseTable is read with a slice such as table[a:b], got {index!r}")
        start, stop, step = index.indices(self.size)
        if step != 1:
            raise ValueError(f"a NoiseTable slice must be contiguous (step 1), got step {step}")
        if stop <= start:
            return torch.zeros(0, dtype=torch.float64)
        first, last = start // self.block_size, (stop - 1) // self.block_size
        offset = first * self.block_size
        if first == last:
            return self._block(first)[start - offset : stop - offset].clone()
        joined = torch.cat([self._block(b) for b in range(first, last + 1)])
        return joined[start - offset : stop - offset]

    def __repr__(self) -> str:
        return f"NoiseTable(size={self.size}, std_dev={self.std_dev}, seed={self.seed})"


class SharedNoiseSampler:
    """Draws slices of a shared noise table at random start indices.

    Processes that build the table and the sampler with the same seeds draw the same
    slices, and a slice is recovered from its start index alone (:meth:`get`).

    Args:
        noise: The table: a 1-D floating-point tensor or a :class:`NoiseTable`.
        seed: Seed of the start-index generator.

    Raises:
        ValueError: (also an ``AssertionError``) when ``noise`` is not a 1-D
            floating-point tensor or a :class:`NoiseTable`.
    """

    def __init__(self, noise: Union[torch.Tensor, NoiseTable], seed: int):
        if isinstance(noise, torch.Tensor):
            if noise.dim() != 1 or not noise.is_floating_point():
                raise ValueAssertionError(
                    f"noise must be a 1-D floating-point tensor (0.3.4 required float64), got shape "
                    f"{list(noise.shape)} and dtype {noise.dtype}"
                )
        elif not isinstance(noise, NoiseTable):
            raise ValueAssertionError(
                f"noise must be a torch.Tensor or a NoiseTable, got {type(noise).__name__}"
            )
        self.noise = noise
        self.rg = np.random.default_rng(seed)

    def _check(self, idx: int, size: int) -> None:
        if (
            isinstance(size, bool)
            or not isinstance(size, (int, np.integer))
            or not 0 < size <= len(self.noise)
        ):
            raise ValueError(
                f"size must be an int in [1, {len(self.noise)}] (the noise size), got {size!r}"
            )
        if not 0 <= idx <= len(self.noise) - size:
            raise ValueError(
                f"idx must be in [0, {len(self.noise) - size}] for a slice of {size} values of a noise "
                f"table of {len(self.noise)}, got {idx!r}"
            )

    def get(self, idx: int, size: int) -> torch.Tensor:
        """The ``size`` values starting at index ``idx``.

        Raises:
            ValueError: When the slice does not fit in the table.
        """
        self._check(idx, size)
        return self.noise[idx : idx + size]

    def sample(self, size: int) -> Tuple[int, torch.Tensor]:
        """Draw a start index and return ``(index, the size values there)``.

        Raises:
            ValueError: When ``size`` is larger than the table (the noise size is too small).
        """
        self._check(0, size)
        idx = int(self.rg.integers(0, len(self.noise) - size + 1))
        return idx, self.noise[idx : idx + size]
