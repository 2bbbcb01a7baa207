"""``cupyconv.config.cpu_threads`` (and its context manager ``cpu_threads_limit``) caps
the NumPy backend's block pool, seen from the public API: the threads that run a
``conv``'s gemm blocks are counted, on a machine made to look like four cores."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import cupyconv
from cupyconv import config
from cupyconv.backends.numpy import gemm, threads
from helpers import ref_conv, small_ints

pytest.importorskip("threadpoolctl")         # without it the blocks run serially anyway


@pytest.fixture
def block_threads(monkeypatch):
    """The set of threads that ran gemm blocks (filled by the calls that follow)."""
    seen = set()
    real = gemm.parallel_map

    def spy(fn, items, lanes=None):
        def recorded(item):
            seen.add(threading.get_ident())
            return fn(item)
        return real(recorded, items, lanes)
    monkeypatch.setattr(threads, "_cores", lambda: 4)
    monkeypatch.setattr(gemm, "parallel_map", spy)
    return seen


def _layer(rng):
    x, w = small_ints(rng, (4, 8, 24, 24), np.float64), small_ints(rng, (16, 8, 3, 3), np.float64)
    return x, w, ref_conv(x, w, padding=1)


def _run(x, w):
    # a workspace of a few blocks' columns: several blocks, so several lanes can run
    return cupyconv.conv(x, w, padding=1, method="gemm", workspace_limit=2**17)


def test_one_thread_runs_every_block_on_the_calling_thread(block_threads, rng):
    x, w, ref = _layer(rng)
    with config.cpu_threads_limit(1):
        assert config.cpu_threads == 1 and threads.workers() == 1
        np.testing.assert_array_equal(_run(x, w), ref)
    assert block_threads == {threading.get_ident()}
    assert config.cpu_threads is None                     # restored


def test_the_limit_caps_the_lanes_and_none_uses_every_core(block_threads, rng):
    x, w, ref = _layer(rng)
    with config.cpu_threads_limit(2):
        assert threads.workers() == 2
        _, lanes = gemm.plan_blocks(_problem(x, w), 2**17)
        assert lanes <= 2
        np.testing.assert_array_equal(_run(x, w), ref)
    assert len(block_threads) <= 2
    assert threads.workers() == 4                          # None: every core
    assert gemm.plan_blocks(_problem(x, w), 2**17)[1] > 2


def test_the_setting_is_validated_and_restored_after_an_error():
    with pytest.raises(ValueError, match=r"cupyconv.config.cpu_threads must be None or an "
                                         r"int >= 1, got 0"):
        config.cpu_threads = 0
    with pytest.raises(TypeError, match="cpu_threads must be None or an int"):
        config.cpu_threads = 1.5
    with pytest.raises(RuntimeError, match="inside"):
        with config.cpu_threads_limit(3):
            raise RuntimeError("inside")
    assert config.cpu_threads is None


def _problem(x, w):
    return cupyconv.api.conv.conv_problem(x.shape, x.dtype, w.shape, w.dtype, 1, 1, 1, 1,
                                          "constant", 0, "channels_first")[0]
