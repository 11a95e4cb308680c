"""Normalising states by running statistics: :class:`RunningStat` and :class:`MeanStdFilter`.

:class:`~machin.frame.algorithms.ars.ARS` normalises the states its perturbed policies
see with these, and merges the statistics of the processes of its group after every
round; both are also importable from ``machin.frame.algorithms.ars``, as in Machin 0.3.4.
Shape errors are :class:`~machin.parallel.exception.ValueAssertionError` (a
``ValueError`` and an ``AssertionError``: 0.3.4 used ``assert`` there).
"""

from __future__ import annotations

import math
from typing import Any, Sequence, Union

import numpy as np
import torch

from ..parallel.exception import ValueAssertionError

__all__ = ["RunningStat", "MeanStdFilter"]

ShapeLike = Union[int, Sequence[int], torch.Size]


def _as_shape(shape: ShapeLike) -> torch.Size:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        return torch.Size([int(shape)])
    try:
        return torch.Size([int(s) for s in shape])
    except (TypeError, ValueError):
        raise ValueAssertionError(
            f"shape must be an int or a sequence of ints, got {shape!r}"
        ) from None


def _as_array(x: Any) -> np.ndarray:
    """``x`` (a tensor, array or number) as a float64 numpy array on the CPU."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _as_tensor(x: Any) -> torch.Tensor:
    """A float64 tensor of ``x``: numpy turns 0-dimensional results into scalars, which
    ``torch.from_numpy`` refuses."""
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


class RunningStat:
    """Mean and variance of a stream of samples, updated one sample (or batch) at a time.

    Welford's update for single samples and Chan's pairwise formula for batches and
    for merging two estimators, in float64 on the CPU, so the statistics of many
    processes can be combined exactly (:meth:`update`). The statistics are returned
    as float64 tensors; pushing never modifies a tensor returned earlier.

    Args:
        shape: Shape of one sample.
    """

    def __init__(self, shape: ShapeLike):
        shape = tuple(_as_shape(shape))
        self._n = 0
        self._M = np.zeros(shape)  # mean
        self._S = np.zeros(shape)  # sum of squared deviations from the mean

    def copy(self) -> RunningStat:
        """An independent copy of this estimator."""
        other = RunningStat(self.shape)
        other._n, other._M, other._S = self._n, self._M.copy(), self._S.copy()
        return other

    def push(self, x: Any) -> None:
        """Add one sample of shape :attr:`shape`, or a batch of shape ``[B, *shape]``.

        Any real tensor, array or number is accepted (it is converted to float64).

        Args:
            x: One sample, or a batch of samples.

        Raises:
            ValueError: (also an ``AssertionError``, as in Machin 0.3.4) when the shape
                is neither a sample's nor a batch's.
        """
        x = _as_array(x)
        if x.ndim == self._M.ndim + 1 and x.shape[0] == 1:
            x = x[0]  # a batch of one: the cheaper single-sample update
        if x.shape == self._M.shape:
            # Welford; with n = 0 it sets the mean to x and leaves S at 0
            n = self._n + 1
            delta = x - self._M
            self._M = self._M + delta / n
            self._S = self._S + delta * delta * (self._n / n)
            self._n = n
        elif x.ndim == self._M.ndim + 1 and x.shape[1:] == self._M.shape:
            if x.shape[0]:
                mean = x.mean(axis=0)
                self._merge(x.shape[0], mean, np.square(x - mean).sum(axis=0))
        else:
            raise ValueAssertionError(
                f"Shape mismatch: RunningStat of sample shape {list(self.shape)} got a value of shape "
                f"{list(x.shape)} (expected {list(self.shape)} or [batch, *{list(self.shape)}])"
            )

    def update(self, other: RunningStat) -> None:
        """Merge the samples counted by ``other`` into this estimator.

        Raises:
            ValueError: (also an ``AssertionError``) when the shapes differ.
        """
        if other.shape != self.shape:
            raise ValueAssertionError(
                f"Shape mismatch: cannot merge a RunningStat of shape {list(other.shape)} into one of "
                f"shape {list(self.shape)}"
            )
        if other._n:
            self._merge(other._n, other._M, other._S)

    def _merge(self, count: int, mean: np.ndarray, sq_sum: np.ndarray) -> None:
        """Add ``count`` samples of mean ``mean`` whose squared deviations sum to ``sq_sum``."""
        total = self._n + count
        delta = mean - self._M
        self._M = self._M + delta * (count / total)
        self._S = self._S + sq_sum + delta * delta * (self._n * count / total)
        self._n = total

    def __repr__(self) -> str:
        return (
            f"RunningStat(shape={list(self.shape)}, n={self._n}, mean_mean={self._M.mean():.4g}, "
            f"mean_std={self.std.mean().item():.4g})"
        )

    @property
    def n(self) -> int:
        """Number of samples seen."""
        return self._n

    @property
    def mean(self) -> torch.Tensor:
        """Mean of the samples (zeros before the first)."""
        return _as_tensor(self._M)

    @property
    def var(self) -> torch.Tensor:
        """Sample variance (divisor ``n - 1``); with fewer than two samples, the squared mean (as 0.3.4)."""
        return _as_tensor(self._S / (self._n - 1) if self._n > 1 else np.square(self._M))

    @property
    def std(self) -> torch.Tensor:
        """Square root of :attr:`var`."""
        return self.var.sqrt()

    @property
    def shape(self) -> torch.Size:
        """Shape of one sample."""
        return torch.Size(self._M.shape)


class MeanStdFilter:
    """Normalises states with the running mean and standard deviation of the states seen.

    Two estimators are kept: ``rs`` (everything known, including the statistics of
    other processes once merged) and ``rs_local`` (only what this filter saw since
    :meth:`clear_local`, which is what a worker hands over for merging). The mean and
    standard deviation actually used (the tensors ``mean`` and ``std``) change only in
    :meth:`apply_stats`, so every perturbed policy of a round sees the same
    normalisation. Features whose standard deviation is below ``1e-7`` are mapped to 0.
    There is no clipping of the normalised values.

    Args:
        shape: Shape of one state (without the batch dimension).
    """

    def __init__(self, shape: ShapeLike):
        self.shape = _as_shape(shape)
        self.rs = RunningStat(self.shape)
        self.rs_local = RunningStat(self.shape)
        self.mean = torch.zeros(self.shape, dtype=torch.float64)
        self.std = torch.ones(self.shape, dtype=torch.float64)

    def clear_local(self) -> None:
        """Forget the local statistics (``rs_local``)."""
        self.rs_local = RunningStat(self.shape)

    def copy(self) -> MeanStdFilter:
        """An independent copy of the filter (estimators and normalisation in use)."""
        other = MeanStdFilter(self.shape)
        other.rs, other.rs_local = self.rs.copy(), self.rs_local.copy()
        other.mean, other.std = self.mean.clone(), self.std.clone()
        return other

    def collect(self, other: MeanStdFilter) -> None:
        """Merge the local statistics of ``other`` (a worker's filter) into ``rs``."""
        self.rs.update(other.rs_local)

    def sync(self, other: MeanStdFilter) -> None:
        """Take both estimators of ``other`` (call :meth:`apply_stats` to use them).

        Raises:
            ValueError: (also an ``AssertionError``) when the shapes differ.
        """
        if other.shape != self.shape:
            raise ValueAssertionError(
                f"Shape mismatch: cannot sync a MeanStdFilter of shape {list(self.shape)} from one of "
                f"shape {list(other.shape)}"
            )
        self.rs, self.rs_local = other.rs.copy(), other.rs_local.copy()

    def apply_stats(self) -> None:
        """Normalise with the current mean and standard deviation of ``rs`` from now on."""
        self.mean = self.rs.mean.clone()
        std = self.rs.std.clone()
        std[std < 1e-7] = math.inf  # constant features become 0
        self.std = std

    def filter(self, x: Any, update: bool = True) -> torch.Tensor:
        """Normalise a state (shape :attr:`shape`) or a batch of them (``[B, *shape]``).

        Args:
            x: The state; any real tensor or array.
            update: Add it to both estimators first (the normalisation in use does
                not change until :meth:`apply_stats`).

        Returns:
            ``(x - mean) / (std + 1e-8)`` as a float64 CPU tensor of ``x``'s shape.

        Raises:
            ValueError: (also an ``AssertionError``) when the shape does not fit.
        """
        x = _as_array(x)
        if update:
            self.rs.push(x)
            self.rs_local.push(x)
        elif x.shape != self.shape and x.shape[1:] != self.shape:
            raise ValueAssertionError(
                f"Shape mismatch: MeanStdFilter of state shape {list(self.shape)} got {list(x.shape)}"
            )
        return torch.from_numpy((x - self.mean.numpy()) / (self.std.numpy() + 1e-8))

    def __repr__(self) -> str:
        return f"MeanStdFilter(shape={list(self.shape)}, rs={self.rs}, rs_local={self.rs_local})"
