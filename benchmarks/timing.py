"""Timers: wall clock on the CPU, CUDA events on the GPU; medians after warm-up."""
from __future__ import annotations

import statistics
import time

__all__ = ["time_cpu", "time_cuda", "timer_for"]


def time_cpu(fn, repeat=5, warmup=1, budget=None):
    """Median seconds of ``fn()`` over ``repeat`` runs after ``warmup`` runs.

    ``budget`` (seconds) stops repeating early once exceeded (at least one
    timed run is always taken).
    """
    for _ in range(warmup):
        fn()
    samples = []
    start = time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if budget is not None and time.perf_counter() - start > budget:
            break
    return statistics.median(samples)


def time_cuda(fn, repeat=10, warmup=2, budget=None):
    """Median seconds of ``fn()`` timed with CUDA events on the current stream."""
    import cupy
    for _ in range(warmup):
        fn()
    stream = cupy.cuda.get_current_stream()
    stream.synchronize()
    samples = []
    start_wall = time.perf_counter()
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        if budget is not None and time.perf_counter() - start_wall > budget:
            break
    return statistics.median(samples)


def timer_for(xp):
    """The right timer for arrays of module ``xp``."""
    return time_cuda if xp.__name__ == "cupy" else time_cpu
