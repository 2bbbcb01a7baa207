"""Measurement: time candidate algorithms, and the autotune cache of winners.

``config.autotune`` makes ``auto`` time every candidate the first time it
sees a problem (per backend and workspace limit) and reuse the winner; the
cache is a bounded LRU.  ``choose_conv_method(measure=True)`` uses
:func:`measure` directly.
"""
from __future__ import annotations

import time

import numpy as np

from .._lru import LRU

__all__ = ["measure", "winner", "clear_cache", "CACHE_SIZE"]

#: Autotuned winners kept.
CACHE_SIZE = 256

_winners = LRU(CACHE_SIZE)


def measure(run, candidates, repeat=3):
    """Time ``run(name)`` for each candidate: one warm-up, median of ``repeat`` runs.

    Returns ``(best, {name: seconds})``.
    """
    times = {}
    for name in candidates:
        run(name)                              # warm-up (kernel compiles, FFT plans)
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            run(name)
            samples.append(time.perf_counter() - t0)
        times[name] = float(np.median(samples))
    return min(times, key=times.get), times


def winner(key, candidates, run):
    """The measured winner among ``candidates`` for ``key`` (measured once, then cached)."""
    return _winners.get_or_compute((key, tuple(candidates)),
                                   lambda: measure(run, candidates, repeat=1)[0])


def clear_cache():
    """Forget every autotuned winner."""
    _winners.clear()
