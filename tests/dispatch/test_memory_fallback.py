"""Memory: workspace limits in the choice, and the dispatcher's fallback when an
algorithm runs out of memory while running (on the emulated CUDA path, whose
runner can be given a memory limit: ``EmulatedRunner(memory_limit=)``).
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.base import OutOfMemoryError
from cupyconv.backends.cuda import CudaBackend, EmulatedRunner
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backends, dispatcher
from helpers import ref_conv, small_ints


def _problem(x, w, **geo):
    return ConvProblem.create(x_shape=x.shape, w_shape=w.shape, dtype=x.dtype, **geo)


class TightRunner(EmulatedRunner):
    """Reports the nominal (roomy) device to the chooser, but every workspace
    allocation above ``memory_limit`` fails: an out-of-memory at run time."""

    device = EmulatedRunner.NOMINAL


@pytest.fixture
def emulated():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    return CudaBackend(EmulatedRunner())


def test_auto_with_tiny_limit_picks_zero_workspace(emulated, rng):
    x = small_ints(rng, (2, 2, 7, 6), np.float64)
    w = small_ints(rng, (2, 2, 3, 3), np.float64)
    p = _problem(x, w, padding=1)
    assert {"gemm", "fft"} <= set(dispatcher.choose(p, emulated).ranked)
    choice = dispatcher.choose(p, emulated, 16)
    assert emulated.workspace_bytes(p, choice.algorithm, 16) == 0
    assert set(choice.ranked) == {"direct", "implicit_gemm"}
    y, name = dispatcher.run(p, Operands(activation=x, filter=w), emulated, workspace_limit=16)
    assert name == choice.algorithm
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=1))


def test_simulated_oom_falls_back_and_is_right(emulated, rng):
    x = small_ints(rng, (2, 2, 7, 6), np.float64)
    w = small_ints(rng, (3, 2, 3, 3), np.float64)
    p = _problem(x, w, padding=1)
    one_image = p.column_bytes(1)         # gemm fits this limit; fft's spectra do not
    assert emulated.workspace_bytes(p, "fft") > one_image
    tight = CudaBackend(TightRunner(memory_limit=64))          # every workspace fails
    stats = {}
    y, name = dispatcher.run(p, Operands(activation=x, filter=w), tight, method="gemm",
                             workspace_limit=one_image, stats=stats)
    assert name in ("direct", "implicit_gemm") and stats["algorithm"] == name
    assert len(stats["fallbacks"]) == 1 and stats["fallbacks"][0].startswith("gemm:")
    assert "exceeds the emulated memory limit (64 bytes)" in stats["fallbacks"][0]
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=1))


def test_simulated_oom_through_the_public_api(rng, monkeypatch):
    """The same fallback through ``conv`` on the ``emulated`` backend (its backend
    object replaced by one with a tight runner)."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    x = small_ints(rng, (2, 2, 7, 6), np.float64)
    w = small_ints(rng, (3, 2, 3, 3), np.float64)
    tight = CudaBackend(TightRunner(memory_limit=64))
    monkeypatch.setattr(backends, "_emulated_backend", lambda: tight)
    limit = _problem(x, w, padding=1).column_bytes(1)
    with cupyconv.use_backend("emulated"):
        y = cupyconv.conv(x, w, padding=1, method="gemm", workspace_limit=limit)
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=1))


def test_gradient_oom_halves_the_chunk(rng):
    """The gradients' column buffer halves its image chunk on out-of-memory
    (down to one image) instead of giving up."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    x = small_ints(rng, (4, 2, 6, 5), np.float64)
    w = small_ints(rng, (3, 2, 3, 2), np.float64)
    p = _problem(x, w, padding=1, op="grad_weight")
    dy = small_ints(rng, (4, 3) + p.out_shape, np.float64)
    runner = TightRunner(memory_limit=2 * p.column_bytes(1))     # 2 of the 4 images fit
    stats = {}
    dw, name = dispatcher.run(p, Operands(activation=x, output=dy), CudaBackend(runner),
                              method="gemm", stats=stats)
    assert name == "gemm" and not stats["fallbacks"]
    assert stats["peak_workspace"] == 2 * p.column_bytes(1)
    want, _ = dispatcher.run(p, Operands(activation=x, output=dy), backends.backend_for(np),
                             method="gemm")
    np.testing.assert_array_equal(dw, want)


def test_oom_everywhere_raises_with_bytes(emulated, rng, monkeypatch):
    x = small_ints(rng, (1, 1, 6), np.float64)
    w = small_ints(rng, (1, 1, 3), np.float64)
    p = _problem(x, w)

    def no_memory(self, problem, algorithm, *args, **kwargs):
        raise OutOfMemoryError(f"{algorithm}: workspace of 123 bytes: injected")
    monkeypatch.setattr(CudaBackend, "run", no_memory)
    with pytest.raises(cupyconv.OutOfMemoryError, match="every algorithm ran out of memory") \
            as info:
        dispatcher.run(p, Operands(activation=x, filter=w), emulated)
    tried = dispatcher.choose(p, emulated).ranked
    assert len(tried) == 5                 # direct, implicit_gemm, gemm, winograd, fft
    for name in tried:                     # each candidate was tried, and says so
        assert f"{name}: {name}: workspace of 123 bytes" in str(info.value)
    assert isinstance(info.value, MemoryError)       # OutOfMemoryError is a MemoryError
