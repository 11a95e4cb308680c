"""Timing helpers shared by the benchmark modules.

A benchmark compares a library operation with a *floor*: the same work written by
hand with bare PyTorch (or numpy), measured in the same run. The figure that
matters is the ratio library / floor, which is far less sensitive to the machine
than either time alone. Times are the CPU time of the calling thread
(``time.thread_time``), not wall-clock time, so other processes sharing the
machine disturb them less; with ``torch.set_num_threads(1)`` all the work of an
operation runs on that thread. Work on a GPU runs outside the calling thread, so a
benchmark on a GPU times with the wall clock instead (``clock_for``).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from typing import Callable, Iterable, List, Optional

import torch

__all__ = ["time_once", "compare", "setup_torch", "clock_for", "floor_adam", "FLOOR_ADAM_FUSED"]


def setup_torch() -> None:
    """One intra-op thread (the ratios are for single-threaded work) and a fixed seed."""
    torch.set_num_threads(1)
    torch.manual_seed(0)


#: Whether the floors' Adam is torch's fused one (the fastest a careful engineer writes, and what the
#: library builds): ``MACHIN_BENCH_FLOOR_ADAM=default`` gives the floors torch's default Adam instead.
FLOOR_ADAM_FUSED = os.environ.get("MACHIN_BENCH_FLOOR_ADAM", "fused") != "default"


def floor_adam(
    params: Iterable[torch.Tensor], lr: float, fused: Optional[bool] = None
) -> torch.optim.Adam:
    """The floors' Adam: ``fused=True`` (``FLOOR_ADAM_FUSED`` when ``fused`` is ``None``) where torch has the kernel."""
    params = list(params)
    fused = FLOOR_ADAM_FUSED if fused is None else fused
    if fused:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        fused = all(p.device.type in _get_fused_kernels_supported_devices() for p in params)
    return torch.optim.Adam(params, lr=lr, fused=fused)


def clock_for(device) -> Callable[[], float]:
    """The clock to time work on ``device`` with: thread CPU time on the CPU, wall time on a GPU.

    Each timed GPU call ends in a synchronising read (a loss as a Python number), so the
    wall time of a call includes its kernels.
    """
    return time.thread_time if torch.device(device).type == "cpu" else time.perf_counter


def time_once(
    fn: Callable[[], object], number: int, clock: Callable[[], float] = time.thread_time
) -> float:
    """Seconds of ``clock`` per call of ``fn``, averaged over ``number`` back-to-back calls."""
    start = clock()
    for _ in range(number):
        fn()
    return (clock() - start) / number


def compare(
    name: str,
    library: Callable[[], object],
    floor: Callable[[], object],
    *,
    number: int = 200,
    repeats: int = 15,
    warmup: int = 2,
    clock: Callable[[], float] = time.thread_time,
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
        clock: What is timed: the thread's CPU time (default) or, for work on a GPU,
            the wall clock (``time.perf_counter``, see ``clock_for``).

    Returns:
        The ratio ``median(library) / median(floor)``.
    """
    for _ in range(warmup):
        time_once(floor, number, clock)
        time_once(library, number, clock)
    lib_times: List[float] = []
    floor_times: List[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            floor_times.append(time_once(floor, number, clock))
            lib_times.append(time_once(library, number, clock))
    finally:
        if gc_was_enabled:
            gc.enable()
    lib, flo = statistics.median(lib_times), statistics.median(floor_times)
    ratio = lib / flo
    what = "" if clock is time.thread_time else ", wall"
    print(
        f"{name}: library {lib * 1e3:.4f} ms, floor {flo * 1e3:.4f} ms, ratio {ratio:.2f} ({repeats} repeats{what})"
    )
    return ratio
