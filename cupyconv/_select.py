"""Algorithm selection: a cost model from counted work, and measurement.

``auto`` ranks the candidate algorithms by predicted time, skipping any
whose workspace exceeds ``workspace_limit`` and, for exactness, the FFT
path on integer data that could round and on non-finite data (FFT spreads
NaN/Inf to every output).  ``measure=True`` / ``config.autotune`` times the
candidates once and caches the winner per problem.
"""
from __future__ import annotations

import collections
import math
import time

import numpy as np

from . import config

__all__ = ["predict_times", "choose", "measure"]

# CPU constants (seconds), fitted on the development machine (2-core x86-64
# VM, OpenBLAS); see docs/algorithms.md for how they were measured.
_CPU = dict(
    tap_overhead=4e-6,      # Python + NumPy dispatch per kernel tap (direct)
    elem=0.6e-9,            # one multiply-add streamed through NumPy (direct)
    copy=3.0e-9,            # one element gathered into the column buffer
    blas=1.0 / 8e9,         # one GEMM multiply-add in BLAS (float64)
    nonblas=1.0e-9,         # one integer matmul multiply-add (no BLAS)
    fft=0.2e-9,             # per point * log2(line length) of one real FFT pass
    fft_line=14000,         # line length at which a pass costs twice per point
    fft_elem=1.0e-9,        # per point per array: products, padding, gathers
    fft_einsum=4.0e-9,      # per complex multiply-add of the channel contraction
    call=3e-5,              # fixed per-call overhead
    gemm_call=2.5e-5,       # extra fixed cost of gemm: buffer, transposes, matmul
    fft_call=4e-5,          # extra fixed cost of fft: three transforms, windowing
)

_CACHE_SIZE = 256
_autotune_cache: "collections.OrderedDict" = collections.OrderedDict()


def predict_times(problem, candidates=("direct", "gemm", "fft")):
    """Predicted seconds per algorithm on the CPU backend.

    Counts multiply-adds, column-buffer elements and FFT points from the
    problem description; returns ``{name: seconds}``.
    """
    c = _CPU
    macs = problem.groups * problem.gemm_m * problem.gemm_n * problem.gemm_k
    cplx = 4.0 if problem.is_complex else 1.0
    single = problem.gemm_n == 1 and problem.in_channels == problem.groups
    times = {}
    if "direct" in candidates:
        per_mac = c["elem"] if single else c["elem"] * 0.5
        times["direct"] = c["call"] + problem.taps * c["tap_overhead"] + cplx * macs * per_mac
    if "gemm" in candidates:
        mac = c["nonblas"] if problem.dtype.kind in "biu" else c["blas"]
        if problem.dtype == np.float32 or problem.dtype == np.complex64:
            mac *= 0.5
        cols = problem.groups * problem.gemm_k * problem.gemm_m
        times["gemm"] = c["call"] + c["gemm_call"] + cols * c["copy"] + cplx * macs * mac
    if "fft" in candidates:
        from ._fft import fast_len, overlap_add_applies
        lengths = [fast_len(s + pb + pa)
                   for s, (pb, pa) in zip(problem.in_shape, problem.padding)]
        npts = math.prod(lengths)
        span = [d * (k - 1) + 1 for d, k in zip(problem.dilation, problem.kernel_shape)]
        if overlap_add_applies(problem, problem.in_shape, span):
            lengths = [fast_len(2 * span[0])]      # overlap-add: blocks of ~2 kernels
            npts = 2 * lengths[0] * -(-problem.in_shape[0] // lengths[0])
        # one pass per axis; long lines fall out of cache (fitted: a 65536-point
        # 1-D rfft costs ~5x more per point*log2 than the lines of a 60^3 one)
        per_point = sum(math.log2(max(n, 2)) * (1 + n / c["fft_line"]) for n in lengths)
        cg, kg = problem.in_channels // problem.groups, problem.gemm_n
        transforms = (problem.batch * problem.in_channels + problem.out_channels * cg
                      + problem.batch * problem.out_channels)
        products = problem.batch * problem.groups * kg * cg
        product = c["fft_elem"] if single else c["fft_einsum"]
        times["fft"] = c["call"] + c["fft_call"] + cplx * npts * (
            transforms * per_point * c["fft"] + transforms * c["fft_elem"] + products * product)
    return times


def _key(problem, extra=()):
    return (problem, tuple(extra))


def choose(problem, candidates, workspace_limit=None):
    """Cheapest candidate by :func:`predict_times` that fits the workspace.

    ``gemm`` fits whenever one output position's columns fit (it chunks).
    """
    fitting = []
    for name in candidates:
        if workspace_limit is not None:
            if name == "gemm":
                position = problem.dtype.itemsize * problem.groups * problem.gemm_k
                if position > workspace_limit:
                    continue
            elif problem.workspace_bytes(name) > workspace_limit:
                continue
        fitting.append(name)
    if not fitting:
        fitting = ["direct"] if "direct" in candidates else list(candidates[:1])
    times = predict_times(problem, fitting)
    return min(fitting, key=lambda n: times.get(n, math.inf))


def measure(run, candidates, repeat=3):
    """Time ``run(name)`` for each candidate; median of ``repeat`` runs.

    Returns ``(best, {name: seconds})``.
    """
    times = {}
    for name in candidates:
        run(name)                              # warm-up (and plan caches)
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            run(name)
            samples.append(time.perf_counter() - t0)
        times[name] = float(np.median(samples))
    best = min(times, key=times.get)
    return best, times


def autotuned(problem, candidates, run, extra=()):
    """Winner cached per problem when ``config.autotune`` is on, else None."""
    if not config.autotune:
        return None
    key = _key(problem, (tuple(candidates),) + tuple(extra))
    hit = _autotune_cache.get(key)
    if hit is None:
        hit, _ = measure(run, candidates, repeat=1)
        _autotune_cache[key] = hit
        while len(_autotune_cache) > _CACHE_SIZE:
            _autotune_cache.popitem(last=False)
    else:
        _autotune_cache.move_to_end(key)
    return hit


def clear_cache():
    """Forget every autotuned choice."""
    _autotune_cache.clear()
