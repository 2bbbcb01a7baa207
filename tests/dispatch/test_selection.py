"""Algorithm selection: ``choose_conv_method``, ``measure=True``, the
workspace limit (gemm chunking, auto honouring it) and ``config.autotune``.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv import _conv, _dispatch, _numpy_backend, _select
from helpers import random_array, small_ints

CANDIDATES = {"direct", "gemm", "fft"}

#: (in1 shape, in2 shape) for ranks 1-6: CuPy's choose_conv_method raises
#: for N-D input, ours must answer for every rank.
ND_SHAPES = [((40,), (5,)), ((9, 8), (3, 3)), ((6, 5, 4), (2, 3, 2)),
             ((4, 3, 4, 3), (2, 2, 2, 2)), ((3, 3, 2, 3, 2), (2, 1, 2, 2, 1)),
             ((2, 3, 2, 2, 3, 2), (1, 2, 2, 1, 2, 2))]


@pytest.mark.parametrize("s1,s2", ND_SHAPES)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("dtype", ["float64", "complex64", "int32"])
def test_choose_returns_a_method_for_every_rank(s1, s2, mode, dtype, rng):
    a, b = random_array(rng, s1, dtype), random_array(rng, s2, dtype)
    m = cupyconv.choose_conv_method(a, b, mode)
    assert isinstance(m, str) and m in CANDIDATES
    # and the named method runs and agrees with direct (small ints: exact)
    ai, bi = small_ints(rng, s1, "int64"), small_ints(rng, s2, "int64")
    np.testing.assert_array_equal(cupyconv.convolve(ai, bi, mode, method=m),
                                  cupyconv.convolve(ai, bi, mode, method="direct"))


@pytest.mark.parametrize("s1,s2", ND_SHAPES[::2])
def test_measure_times_every_candidate(s1, s2, rng):
    a, b = random_array(rng, s1, "float64"), random_array(rng, s2, "float64")
    name, times = cupyconv.choose_conv_method(a, b, measure=True)
    assert set(times) == CANDIDATES
    assert all(isinstance(t, float) and t > 0 for t in times.values())
    assert name == min(times, key=times.get)


def test_measure_leaves_out_inexact_candidates():
    """Non-finite or huge-integer data: FFT is not even timed."""
    a = np.arange(30.0)
    a[3] = np.nan
    name, times = cupyconv.choose_conv_method(a, np.ones(4), measure=True)
    assert set(times) == {"direct", "gemm"} and name in times
    big = np.full(30, 2**52, np.int64)
    assert set(cupyconv.choose_conv_method(big, big[:3], measure=True)[1]) == {"direct", "gemm"}


def test_measure_zero_rank():
    assert cupyconv.choose_conv_method(2.0, 3.0) == "direct"
    name, times = cupyconv.choose_conv_method(2.0, 3.0, measure=True)
    assert name in times


# ---------------------------------------------------------------- workspace

def _plan(x, w, **kw):
    geo = dict(stride=1, padding=0, dilation=1, groups=1, padding_mode="constant", cval=0,
               layout="channels_first")
    geo.update(kw)
    problem, xc, wc, _, _, _ = _conv.prepare_conv(x, w, None, **geo)
    return problem, xc, wc


#: (x shape, w shape, geometry): multi-channel, grouped, strided 3-D, and
#: output extents 7/13 that do not divide into the chunk runs.
CHUNK_CASES = [
    ((2, 4, 7, 13), (5, 4, 3, 2), dict(padding=1)),
    ((3, 6, 9, 7), (4, 3, 2, 2), dict(groups=2, stride=2)),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(dilation=(1, 2, 1))),
]


@pytest.mark.parametrize("x_shape,w_shape,geo", CHUNK_CASES)
@pytest.mark.parametrize("positions", [1, 3, 7, 50])
def test_gemm_chunks_under_the_limit(x_shape, w_shape, geo, positions, rng):
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem, xc, wc = _plan(x, w, **geo)
    per_position = problem.dtype.itemsize * problem.groups * problem.gemm_k
    limit = positions * per_position
    unlimited = {}
    want = _numpy_backend.conv_gemm(problem, xc, wc, stats=unlimited)
    stats = {}
    got = _numpy_backend.conv_gemm(problem, xc, wc, workspace_limit=limit, stats=stats)
    assert 0 < stats["peak_workspace"] <= limit
    if limit < problem.column_bytes():
        assert stats["peak_workspace"] < unlimited["peak_workspace"]   # it did chunk
    np.testing.assert_array_equal(got, want)
    # through the public API as well
    np.testing.assert_array_equal(
        cupyconv.conv(x, w, method="gemm", workspace_limit=limit, **geo), want)


def test_gemm_limit_below_one_position_is_a_memory_error(rng):
    x, w = small_ints(rng, (1, 4, 6), np.float64), small_ints(rng, (2, 4, 3), np.float64)
    problem, xc, wc = _plan(x, w)
    with pytest.raises(MemoryError, match=r"workspace_limit=8 bytes cannot hold the columns "
                                          r"of one output position \(96 bytes\)"):
        _numpy_backend.conv_gemm(problem, xc, wc, workspace_limit=8)


def test_auto_never_picks_gemm_when_one_position_does_not_fit(rng, restore_config):
    x = random_array(rng, (4, 32, 16, 16), "float64")
    w = random_array(rng, (32, 32, 3, 3), "float64")
    problem, xc, wc = _plan(x, w, padding=1)
    assert _dispatch.select_algorithm(problem, xc, wc) == "gemm"      # the limit matters
    tiny = problem.dtype.itemsize * problem.gemm_k - 1
    assert _dispatch.select_algorithm(problem, xc, wc, workspace_limit=tiny) not in (
        "gemm", "fft")
    want = cupyconv.conv(x, w, padding=1, method="direct")
    np.testing.assert_array_equal(
        cupyconv.conv(x, w, padding=1, workspace_limit=tiny), want)
    cupyconv.config.workspace_limit = tiny                           # the global default
    assert _dispatch.select_algorithm(problem, xc, wc) not in ("gemm", "fft")
    np.testing.assert_array_equal(cupyconv.conv(x, w, padding=1), want)


def test_choose_respects_limit_for_fft():
    """With a limit between gemm's per-position need and fft's spectra, fft
    is never picked; with no fitting candidate, direct is the fallback."""
    x = np.ones((1, 1, 4000))
    w = np.ones((1, 1, 400))
    problem, _, _ = _plan(x, w)
    assert _select.choose(problem, ["direct", "gemm", "fft"]) == "fft"
    limit = problem.workspace_bytes("fft") - 1
    assert _select.choose(problem, ["direct", "gemm", "fft"], limit) != "fft"
    assert _select.choose(problem, ["gemm", "fft"], 1) == "gemm"      # first as last resort
    assert _select.choose(problem, ["direct", "gemm", "fft"], 1) == "direct"


# ----------------------------------------------------------------- autotune

def test_autotune_caches_the_winner(restore_config, monkeypatch, rng):
    calls = []
    real_measure = _select.measure

    def counting_measure(run, candidates, repeat=3):
        calls.append(tuple(candidates))
        return real_measure(run, candidates, repeat)

    monkeypatch.setattr(_select, "measure", counting_measure)
    x = random_array(rng, (2, 3, 9, 9), "float64")
    w = random_array(rng, (4, 3, 3, 3), "float64")
    restore_config.autotune = True
    y1 = cupyconv.conv(x, w)
    assert len(calls) == 1 and set(calls[0]) == CANDIDATES
    assert len(_select._autotune_cache) == 1
    y2 = cupyconv.conv(x, w)                         # cache hit: no new timing
    assert len(calls) == 1
    winner = next(iter(_select._autotune_cache.values()))
    np.testing.assert_array_equal(y2, cupyconv.conv(x, w, method=winner))
    assert y1.shape == y2.shape
    cupyconv.conv(x[:1], w)                          # a new problem is timed once
    assert len(calls) == 2
    restore_config.autotune = False
    cupyconv.conv(x, w)
    assert len(calls) == 2                           # off: the cost model decides


def test_autotune_cache_is_bounded(restore_config, monkeypatch):
    monkeypatch.setattr(_select, "_CACHE_SIZE", 3)
    restore_config.autotune = True
    for n in range(1, 6):
        cupyconv.convolve(np.ones(n + 4), np.ones(2))
    assert len(_select._autotune_cache) == 3
    _select.clear_cache()
    assert not _select._autotune_cache
