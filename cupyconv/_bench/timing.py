"""Timers, peak-memory probes and the measured roofline ceilings.

Timers return the median of ``repeat`` runs after ``warmup`` untimed runs:
CUDA events on the current stream for GPU work (:func:`time_cuda`),
``time.perf_counter`` otherwise (:func:`time_cpu`; callables that must
synchronise themselves, such as JAX with ``block_until_ready``, use it too).
"""
from __future__ import annotations

import statistics
import time
import tracemalloc

import numpy as np

__all__ = ["time_cpu", "time_cuda", "time_cuda_or_note", "host_device_split", "graph_time",
           "timer_for",
           "peak_memory",
           "measure_ceilings", "roofline"]


def _finish(samples, out):
    if out is not None:
        out.extend(samples)
    return statistics.median(samples)


def time_cpu(fn, repeat=5, warmup=1, budget=None, samples=None):
    """Median seconds of ``fn()`` over ``repeat`` runs after ``warmup`` runs.

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    repeat, warmup : int
    budget : float, optional
        Seconds after which repetition stops early (at least one timed run
        is always taken).
    samples : list, optional
        Receives every timed sample (seconds).
    """
    for _ in range(warmup):
        fn()
    taken = []
    start = time.perf_counter()
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        fn()
        taken.append(time.perf_counter() - t0)
        if budget is not None and time.perf_counter() - start > budget:
            break
    return _finish(taken, samples)


def time_cuda(fn, repeat=10, warmup=2, budget=None, samples=None):
    """Median seconds of ``fn()`` timed with CUDA events on the current stream.

    Work issued by libraries on the legacy default stream (CuPy's and
    PyTorch's defaults) is ordered with the events.  Arguments as
    :func:`time_cpu`.
    """
    import cupy
    for _ in range(warmup):
        fn()
    stream = cupy.cuda.get_current_stream()
    stream.synchronize()
    taken = []
    start_wall = time.perf_counter()
    for _ in range(max(repeat, 1)):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        taken.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        if budget is not None and time.perf_counter() - start_wall > budget:
            break
    return _finish(taken, samples)


def time_cuda_or_note(fn, budget, repeat=5, warmup=1):
    """``(median seconds, "")`` of :func:`time_cuda`, or ``(None, "Error: message")`` when
    ``fn`` raises: a method that cannot run is a recorded row, not a crash."""
    try:
        return time_cuda(fn, repeat=repeat, warmup=warmup, budget=budget), ""
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        return None, f"{type(exc).__name__}: {exc}"[:120]


def host_device_split(fn, repeat=10):
    """``(host seconds, device seconds)`` per call of ``fn``, means over ``repeat`` calls
    after one warm-up, from :func:`cupyx.profiler.benchmark`: the host's wall time of
    the call and the device time between events recorded before and after it.  Host time
    close to the device time means the call is bound by its Python and launches; device
    time well above it, by its kernels."""
    from cupyx.profiler import benchmark
    res = benchmark(fn, n_repeat=max(repeat, 1), n_warmup=1)
    return float(np.mean(res.cpu_times)), float(np.mean(res.gpu_times[0]))


def graph_time(fn, repeat=10):
    """``(seconds, None)``: the median replay time of ``fn``'s GPU work captured once as a
    CUDA graph, i.e. its kernels (and copies) with no host work between them; or
    ``(None, reason)`` when the call cannot be captured (a device-to-host copy or a
    synchronisation inside it, an allocation the pool cannot serve from its cache).

    Set against the call's own time (:func:`time_cuda`), it says how much of a call is
    host time: what a call costs beyond its replay is Python, launches and allocations.
    ``fn`` runs twice on the capture stream first, so the pool holds its buffers.
    """
    import cupy
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        fn()
        stream.synchronize()
        stream.begin_capture()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - reported, not raised: a diagnostic
            try:
                stream.end_capture()
            except Exception:  # noqa: BLE001 - the capture is already invalid
                pass
            return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        try:
            graph = stream.end_capture()
        except Exception as exc:  # noqa: BLE001
            return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        graph.launch(stream)
        stream.synchronize()
        taken = []
        for _ in range(max(repeat, 1)):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            taken.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return statistics.median(taken), None


def timer_for(xp):
    """The right timer for arrays of module ``xp``."""
    return time_cuda if xp.__name__ == "cupy" else time_cpu


# --------------------------------------------------------------------- memory
def peak_memory(fn, gpu):
    """Run ``fn()`` once; return ``(result, peak_bytes, source)``.

    ``peak_bytes`` is the high-water mark of memory allocated during the
    call above what was allocated before it, result included.  On the GPU it
    is CuPy's default pool (an allocator hook records ``used_bytes()`` after
    every allocation) plus PyTorch's caching allocator when PyTorch is
    loaded; on the CPU it is :mod:`tracemalloc`'s peak (NumPy reports its
    buffers to tracemalloc).  ``source`` names what was measured.
    """
    if not gpu:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            result = fn()
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        return result, int(peak), "tracemalloc peak (host, includes the result)"
    import sys
    import cupy
    pool = cupy.get_default_memory_pool()
    base = pool.used_bytes()
    high = [base]

    def hook(size):
        mem = pool.malloc(size)
        high[0] = max(high[0], pool.used_bytes())
        return mem

    torch = sys.modules.get("torch")
    torch_on = torch is not None and torch.cuda.is_available()
    if torch_on:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        torch_base = torch.cuda.memory_allocated()
    cupy.cuda.set_allocator(hook)
    try:
        result = fn()
        cupy.cuda.get_current_stream().synchronize()
    finally:
        cupy.cuda.set_allocator(pool.malloc)
    peak = high[0] - base
    source = "CuPy pool high-water (includes the result)"
    if torch_on:
        torch.cuda.synchronize()
        peak += max(torch.cuda.max_memory_allocated() - torch_base, 0)
        source += " + PyTorch max_memory_allocated"
    return result, int(peak), source


# ------------------------------------------------------------------ ceilings
def _gemm_flops(xp, dtype, n, timer, repeat):
    rng = np.random.default_rng(1)
    a = xp.asarray(rng.standard_normal((n, n)).astype(dtype))
    b = xp.asarray(rng.standard_normal((n, n)).astype(dtype))
    t = timer(lambda: xp.matmul(a, b), repeat=repeat, warmup=1)
    return 2.0 * n ** 3 / t


def _copy_bandwidth(xp, nbytes, timer, repeat):
    src = xp.ones(nbytes // 4, dtype=np.float32)
    dst = xp.empty_like(src)
    return 2.0 * nbytes / timer(lambda: xp.copyto(dst, src), repeat=repeat, warmup=1)


def measure_ceilings(xp, quick=False):
    """Measure the bandwidth and GEMM ceilings of this machine.

    Bandwidth: a large device-to-device (or host) copy, ``xp.copyto`` of a
    float32 array, counting the bytes read plus the bytes written.
    Compute: a large square ``xp.matmul`` (cuBLAS on the GPU, the BLAS NumPy
    links on the CPU) in float32 and float64; a multiply-add counts 2.

    Returns
    -------
    dict
        ``bandwidth`` (bytes/s), ``flops`` (``{"float32": ..., "float64":
        ...}`` in FLOP/s) and ``how`` (the sizes used, for the report).
    """
    gpu = xp.__name__ == "cupy"
    timer = timer_for(xp)
    if gpu:
        copy_bytes, n32, n64, repeat = 2**30, 8192, 8192, 10
    elif quick:
        copy_bytes, n32, n64, repeat = 64 * 2**20, 1536, 1024, 3
    else:
        copy_bytes, n32, n64, repeat = 256 * 2**20, 2048, 2048, 3
    bandwidth = _copy_bandwidth(xp, copy_bytes, timer, repeat)
    flops = {"float32": _gemm_flops(xp, np.float32, n32, timer, repeat),
             "float64": _gemm_flops(xp, np.float64, n64, timer, repeat)}
    if gpu:
        xp.get_default_memory_pool().free_all_blocks()
    how = (f"bandwidth: copyto of {copy_bytes // 2**20} MiB float32 "
           f"(read + write counted); compute: {'cupy' if gpu else 'numpy'}.matmul "
           f"{n32}^2 float32 and {n64}^2 float64; medians of {repeat}"
           + ("; TF32 off (CuPy default)" if gpu else ""))
    return dict(bandwidth=bandwidth, flops=flops, how=how)


def roofline(flops, nbytes, seconds, dtype, ceilings):
    """Achieved rates and the fraction of the roofline from counted work.

    The roof is ``min(peak_flops, intensity * bandwidth)`` with
    ``intensity = flops / nbytes``; complex dtypes use the ceiling of their
    real component (their FLOPs are counted as real operations).

    Returns
    -------
    dict
        ``flops_per_s``, ``bytes_per_s``, ``intensity``, ``roof_flops_per_s``,
        ``bound`` (``"memory"`` or ``"compute"``) and ``fraction``.
    """
    real = "float64" if np.dtype(dtype).char in "dD" else "float32"
    peak = ceilings["flops"][real]
    intensity = flops / max(nbytes, 1)
    mem_roof = intensity * ceilings["bandwidth"]
    roof = min(peak, mem_roof)
    achieved = flops / seconds
    return dict(flops_per_s=achieved, bytes_per_s=nbytes / seconds, intensity=intensity,
                roof_flops_per_s=roof, bound="memory" if mem_roof < peak else "compute",
                fraction=achieved / roof)
