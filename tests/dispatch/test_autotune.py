"""``config.autotune``: ``auto`` times the candidates once per problem and reuses
the winner (``cupyconv.dispatch.autotune``), on the NumPy backend and on the
emulated CUDA path; the cache is bounded and cleared with the dispatcher's.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.cuda import CudaBackend
from cupyconv.dispatch import autotune
from helpers import random_array, small_ints

#: Every forward algorithm the NumPy backend has (implicit_gemm runs its tap loop).
CANDIDATES = {"direct", "implicit_gemm", "gemm", "fft", "winograd"}


@pytest.fixture
def timed(monkeypatch):
    """The candidate lists ``autotune.measure`` is asked to time."""
    calls = []
    real_measure = autotune.measure

    def counting_measure(run, candidates, repeat=3):
        calls.append(tuple(candidates))
        return real_measure(run, candidates, repeat)

    monkeypatch.setattr(autotune, "measure", counting_measure)
    return calls


def test_autotune_caches_the_winner(restore_config, timed, rng):
    x = random_array(rng, (2, 3, 9, 9), "float64")
    w = random_array(rng, (4, 3, 3, 3), "float64")
    restore_config.autotune = True
    y1 = cupyconv.conv(x, w)
    assert len(timed) == 1 and set(timed[0]) == CANDIDATES
    assert len(autotune._winners) == 1
    y2 = cupyconv.conv(x, w)                         # cache hit: no new timing
    assert len(timed) == 1
    winner = next(iter(autotune._winners.values()))
    assert winner in CANDIDATES
    np.testing.assert_array_equal(y2, cupyconv.conv(x, w, method=winner))
    assert y1.shape == y2.shape
    cupyconv.conv(x[:1], w)                          # a new problem is timed once
    assert len(timed) == 2
    restore_config.autotune = False
    cupyconv.conv(x, w)
    assert len(timed) == 2                           # off: the cost model decides


def test_autotune_cache_is_bounded(restore_config, monkeypatch):
    monkeypatch.setattr(autotune._winners, "maxsize", 3)
    restore_config.autotune = True
    for n in range(1, 6):
        cupyconv.convolve(np.ones(n + 4), np.ones(2))
    assert len(autotune._winners) == 3
    cupyconv.clear_caches()                          # the public reset clears it too
    assert not autotune._winners


def test_explicit_method_is_never_autotuned(restore_config, timed, rng):
    restore_config.autotune = True
    x, w = random_array(rng, (1, 2, 8), "float64"), random_array(rng, (3, 2, 3), "float64")
    cupyconv.conv(x, w, method="gemm")
    assert not timed and not autotune._winners


@pytest.mark.parametrize("bad", ["nan", "big_int"])
def test_autotune_never_times_fft_on_data_it_cannot_take(restore_config, timed, bad, rng):
    """The data rules hold under autotuning too: FFT on non-finite data (or integers
    past float64's exact range) is not a candidate, so it can never be the winner
    that ``auto`` runs."""
    restore_config.autotune = True
    if bad == "nan":
        a = rng.standard_normal(300)
        a[17] = np.nan
        b = rng.standard_normal(40)
    else:
        a = np.full(300, 2**40, np.int64)
        b = np.full(40, 2**20, np.int64)
    y = cupyconv.convolve(a, b)
    assert timed and all("fft" not in c for c in timed), timed
    np.testing.assert_array_equal(y, cupyconv.convolve(a, b, method="direct"))


def test_autotune_on_the_emulated_path(rng, restore_config, monkeypatch):
    """Every candidate is timed once, then the cached winner runs alone."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    x = small_ints(rng, (1, 2, 6, 6), np.float64)
    w = small_ints(rng, (2, 2, 3, 3), np.float64)
    calls = []
    real = CudaBackend.run

    def counting(self, problem, algorithm, *args, **kwargs):
        calls.append(algorithm)
        return real(self, problem, algorithm, *args, **kwargs)
    monkeypatch.setattr(CudaBackend, "run", counting)
    restore_config.autotune = True
    with cupyconv.use_backend("emulated"):
        y1 = cupyconv.conv(x, w, padding=1)
        first = len(calls)
        y2 = cupyconv.conv(x, w, padding=1)
    assert set(calls) == {"direct", "implicit_gemm", "gemm", "fft", "winograd"}   # every candidate
    assert first == 2 * 5 + 1              # warm-up + one timed run each, then the winner
    assert calls[first:] == [calls[first - 1]]     # the winner again, alone
    np.testing.assert_array_equal(y1, y2)
