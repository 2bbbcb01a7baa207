"""Issue 24 part 2: the compiled-call cache is bounded by the device bytes its entries hold
(``config.compiled_call_bytes``) as well as by entries.

The LRU itself is tested on plain values with stated sizes; the compiled calls on the
emulated runner, where a Gaussian filter's entry holds its taps (device constants in the
compute dtype: 3 passes x 9 float32 taps for sigma in [1, 1.125), one kernel group).
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import given, strategies as st

import cupyconv
from cupyconv import config, ndimage
from cupyconv._lru import LRU
from cupyconv.api import compiled
from cupyconv.api.compiled import CompiledCall, NotCompiled, lookup
from helpers import called_twice, in_threads

F32 = np.dtype(np.float32)
#: sigmas whose taps have 9 entries (radius int(4 sigma + 0.5) = 4): one kernel group.
SIGMAS = [1.0 + 0.01 * i for i in range(12)]


class _Held:
    def __init__(self, nbytes):
        self.nbytes = nbytes


def _lru(maxsize, maxbytes):
    return LRU(maxsize, maxbytes=maxbytes, size=lambda v: v.nbytes)


@given(sizes=st.lists(st.integers(0, 64), min_size=1, max_size=40),
       bound=st.integers(0, 128), maxsize=st.integers(1, 8))
def test_the_bound_holds_under_many_keys(sizes, bound, maxsize):
    cache = _lru(maxsize, bound)
    for i, n in enumerate(sizes):
        stored = cache.put(i, _Held(n))
        assert stored == (n <= bound)
        assert cache.nbytes == sum(v.nbytes for v in cache.values()) <= bound
        assert len(cache) <= maxsize
        if stored:                                   # the newest stays
            assert cache.keys()[-1] == i


def test_eviction_drops_the_least_recently_used_first():
    cache = _lru(10, 100)
    for k in "abc":
        cache.put(k, _Held(30))
    cache.get("a")                                   # a is now the most recent
    cache.put("d", _Held(30))                        # 120 > 100: b goes
    assert cache.keys() == ["c", "a", "d"] and cache.nbytes == 90
    cache.put("e", _Held(70))                        # c and a go
    assert cache.keys() == ["d", "e"] and cache.nbytes == 100
    assert not cache.put("d", _Held(101))            # too large alone: forgotten
    assert cache.keys() == ["e"] and cache.nbytes == 70
    cache.clear()
    assert cache.nbytes == 0 and len(cache) == 0


def test_the_bound_is_read_as_it_stores():
    bound = [100]
    cache = LRU(10, maxbytes=lambda: bound[0], size=lambda v: v.nbytes)
    cache.put("a", _Held(60))
    bound[0] = 50
    cache.put("b", _Held(10))                        # a no longer fits
    assert cache.keys() == ["b"]
    bound[0] = None
    cache.put("c", _Held(10**9))
    assert cache.keys() == ["b", "c"]


def test_the_last_hit_never_outlives_a_store_or_a_clear():
    """``get`` answers the key it read last without the dict (a plan's cache asks for one
    key over and over); a store of that key, an eviction and a clear must be seen."""
    cache = _lru(2, None)
    cache.put("a", _Held(1))
    first = cache.get("a")
    assert cache.get("a") is first                   # the remembered hit
    cache.put("a", _Held(2))                         # replaced: the new value
    assert cache.get("a").nbytes == 2
    cache.put("b", _Held(3))
    cache.put("c", _Held(4))                         # maxsize 2: "a" is the oldest, dropped
    assert cache.get("a") is None and cache.keys() == ["b", "c"]
    assert cache.get("c").nbytes == 4
    cache.clear()
    assert cache.get("c") is None and cache.get("c", "none") == "none"


def test_the_settings_id_names_the_settings_and_is_never_reused(restore_config):
    """A compiled call's key holds ``config.in_force_id``: equal settings give equal ids,
    other settings other ids, and an id is not given again once its table is emptied."""
    saved = config.precision
    start = config.in_force_id
    config.precision = "tf32" if saved != "tf32" else "highest"
    other = config.in_force_id
    assert other != start
    config.precision = saved                          # back to the same settings
    assert config.in_force_id == start
    config._SETTINGS_IDS.clear()                      # as when it outgrows its bound
    config.precision = saved
    assert config.in_force_id not in (start, other)


def test_eight_threads_keep_the_count_and_the_bound():
    cache = _lru(64, 500)

    def work(t):
        for i in range(300):
            cache.put((t, i % 13), _Held((t * 7 + i) % 90))
            cache.get((7 - t, i % 13))
    assert not in_threads(work)
    assert cache.nbytes == sum(v.nbytes for v in cache.values()) <= 500


# ------------------------------------------------------------ compiled calls
@pytest.fixture
def emulated_bound():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    saved = config.compiled_call_bytes
    cupyconv.clear_caches()
    with cupyconv.use_backend("emulated"):
        yield
    config.compiled_call_bytes = saved
    cupyconv.clear_caches()


def _normal(call):
    saved = config.compiled_calls
    config.compiled_calls = False
    try:
        return call()
    finally:
        config.compiled_calls = saved


def test_compiled_calls_stay_within_the_byte_bound(emulated_bound, rng):
    v = rng.standard_normal((9, 8, 7)).astype(F32)
    called_twice(ndimage.gaussian_filter, v, SIGMAS[0])
    held = lookup(ndimage.gaussian_filter, v, SIGMAS[0]).device_bytes
    assert held == 3 * 9 * F32.itemsize                      # the three passes' taps
    config.compiled_call_bytes = 4 * held                    # room for four of them
    for s in SIGMAS:
        called_twice(ndimage.gaussian_filter, v, s)
        assert compiled._cache.nbytes <= 4 * held
    kept = [s for s in SIGMAS if isinstance(lookup(ndimage.gaussian_filter, v, s),
                                            CompiledCall)]
    assert kept == SIGMAS[-4:]                               # the least recent went first
    for s in SIGMAS[-4:]:
        np.testing.assert_array_equal(ndimage.gaussian_filter(v, s),
                                      _normal(lambda: ndimage.gaussian_filter(v, s)))
    cupyconv.clear_caches()
    assert compiled._cache.nbytes == 0 and len(compiled._cache) == 0


def test_an_evicted_call_frees_what_it_held(emulated_bound, rng):
    v = rng.standard_normal((9, 8, 7)).astype(F32)
    config.compiled_call_bytes = 3 * 9 * F32.itemsize        # one Gaussian at a time
    called_twice(ndimage.gaussian_filter, v, SIGMAS[0])
    gone = weakref.ref(lookup(ndimage.gaussian_filter, v, SIGMAS[0]))
    called_twice(ndimage.gaussian_filter, v, SIGMAS[1])
    gc.collect()
    assert gone() is None
    assert lookup(ndimage.gaussian_filter, v, SIGMAS[0]) is None


def test_a_call_larger_than_the_bound_takes_the_normal_path_and_says_why(emulated_bound, rng):
    v = rng.standard_normal((9, 8, 7)).astype(F32)
    config.compiled_call_bytes = 100                         # the taps hold 108
    ref = _normal(lambda: ndimage.gaussian_filter(v, 1.0))
    ys = [ndimage.gaussian_filter(v, 1.0) for _ in range(3)]   # noted, recorded, normal
    entry = lookup(ndimage.gaussian_filter, v, 1.0)
    assert isinstance(entry, NotCompiled)
    assert "108 bytes of device memory" in entry.reason
    assert "config.compiled_call_bytes = 100" in entry.reason
    for y in ys:
        np.testing.assert_array_equal(y, ref)
    x, w = np.ones((1, 2, 6, 6), F32), np.ones((3, 2, 3, 3), F32)
    config.compiled_call_bytes = 0                           # holds nothing: still kept
    called_twice(cupyconv.conv, x, w, padding=1)
    assert isinstance(lookup(cupyconv.conv, x, w, padding=1), CompiledCall)
    plan = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, method="direct",
                              backend="emulated")
    called_twice(plan, x, w)
    assert "; repeated calls replay (CompiledCall(" in plan.explain()


def test_eight_threads_under_the_byte_bound_give_the_sequential_results(emulated_bound, rng):
    v = rng.standard_normal((9, 8, 7)).astype(F32)
    refs = {s: _normal(lambda s=s: ndimage.gaussian_filter(v, s)) for s in SIGMAS[:6]}
    config.compiled_call_bytes = 3 * 3 * 9 * F32.itemsize    # three of six at a time

    def work(t):
        with cupyconv.use_backend("emulated"):
            return [(t, s) for s in (SIGMAS[(t + i) % 6] for i in range(6))
                    if not np.array_equal(ndimage.gaussian_filter(v, s), refs[s])]
    assert not in_threads(work)
    assert compiled._cache.nbytes <= config.compiled_call_bytes
