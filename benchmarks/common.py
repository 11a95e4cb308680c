"""Timing helpers shared by the benchmark modules.

A benchmark compares a library operation with a *floor*: the same work written by
hand with bare PyTorch (or numpy), measured in the same run. The figure that
matters is the ratio library / floor, which is far less sensitive to the machine
than either time alone. Times are the CPU time of the calling thread
(``time.thread_time``), not wall-clock time, so other processes sharing the
machine disturb them less; with ``torch.set_num_threads(1)`` all the work of an
operation runs on that thread.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Callable, List

import torch

__all__ = ["time_once", "compare", "setup_torch"]


def setup_torch() -> None:
    """One intra-op thread (the ratios are for single-threaded work) and a fixed seed."""
    torch.set_num_threads(1)
    torch.manual_seed(0)


def time_once(fn: Callable[[], object], number: int) -> float:
    """Thread CPU seconds per call of ``fn``, averaged over ``number`` back-to-back calls."""
    start = time.thread_time()
    for _ in range(number):
        fn()
    return (time.thread_time() - start) / number


def compare(
    name: str,
    library: Callable[[], object],
    floor: Callable[[], object],
    *,
    number: int = 200,
    repeats: int = 15,
    warmup: int = 2,
) -> float:
    """Time ``library`` against ``floor`` and print one line; return the ratio.

    Both are first run ``warmup`` times (untimed, ``number`` calls each). Then each
    repeat times ``number`` calls of the floor and ``number`` calls of the library,
    alternating, so that a slow phase of the machine hits both. The medians over
    the repeats are reported as milliseconds per call, with the ratio of the medians::

        name: library X ms, floor Y ms, ratio Z (N repeats)

    Args:
        name: Label of the line.
        library: The library operation (one call).
        floor: The hand-written equivalent (one call).
        number: Calls per timed repeat.
        repeats: Timed repeats; the median is reported.
        warmup: Untimed repeats before timing.

    Returns:
        The ratio ``median(library) / median(floor)``.
    """
    for _ in range(warmup):
        time_once(floor, number)
        time_once(library, number)
    lib_times: List[float] = []
    floor_times: List[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            floor_times.append(time_once(floor, number))
            lib_times.append(time_once(library, number))
    finally:
        if gc_was_enabled:
            gc.enable()
    lib, flo = statistics.median(lib_times), statistics.median(floor_times)
    ratio = lib / flo
    print(
        f"{name}: library {lib * 1e3:.4f} ms, floor {flo * 1e3:.4f} ms, ratio {ratio:.2f} ({repeats} repeats)"
    )
    return ratio
