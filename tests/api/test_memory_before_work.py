"""Every path checks its result and workspace against the memory the backend has before
any work, and raises our ``MemoryError`` with advice.

The inputs are broadcast views (zero strides), so the calls allocate nothing big;
``tracemalloc`` (which NumPy reports its buffers to) shows that no array of the
input's size was made before the refusal.  The NumPy backend's available memory is
patched; the emulated backend reports its nominal device's 8 GiB.
"""
from __future__ import annotations

import contextlib
import tracemalloc

import numpy as np
import pytest

import cupyconv
import cupyconv.ndimage
from cupyconv.backends.base import Backend
from cupyconv.backends.numpy import NumpyBackend

#: Available memory the NumPy backend reports here.
AVAILABLE = 2**30
#: Elements of the broadcast inputs: a float32 result of this size is 16 GB, above both
#: the patched 1 GiB and the emulated device's 8 GiB.
HUGE = 4 * 10**9
#: Most bytes a refused call may allocate (its small arrays: weights, index tables).
SMALL = 2**20


def _backends():
    return ["numpy"] + (["emulated"] if "emulated" in cupyconv.available_backends() else [])


@pytest.fixture
def little_memory(monkeypatch):
    monkeypatch.setattr(NumpyBackend, "available_memory", lambda self: AVAILABLE)


@pytest.fixture(autouse=True)
def fresh_choices(restore_config):
    """Choices are cached per backend object: the patched memory must be read."""


@contextlib.contextmanager
def refused(match, advice_limit=False):
    """The body raises ``MemoryError`` matching ``match`` having allocated at most
    :data:`SMALL` bytes; ``advice_limit``: whether raising ``workspace_limit`` may be
    advised (never when the result or the workspace exceeds the memory itself)."""
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError, match=match) as info:
            yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < SMALL, f"{peak} bytes were allocated before the refusal"
    assert ("workspace_limit" in str(info.value)) == advice_limit, str(info.value)
    assert "cupyconv.dask" in str(info.value)


def _signal(dtype=np.float32):
    return np.broadcast_to(np.ones((), dtype), (HUGE,))


RESULT = r"the result alone needs \d+ bytes"


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("method", ["auto", "direct", "implicit_gemm", "gemm", "fft"])
def test_conv_result_beyond_memory_every_method(little_memory, backend, method):
    x = _signal()[None, None]
    with cupyconv.use_backend(backend), refused(RESULT):
        cupyconv.conv(x, np.ones((1, 1, 3), np.float32), method=method)


@pytest.mark.parametrize("backend", _backends())
def test_integer_input_refused_before_it_is_widened(little_memory, backend):
    """int8 data computed in float64 would be cast (a full copy) first."""
    x = _signal(np.int8)[None, None]
    with cupyconv.use_backend(backend), refused(RESULT):
        cupyconv.conv(x, np.ones((1, 1, 3)), method="direct")


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("method", ["auto", "fft", "direct"])
def test_convolve_result_beyond_memory(little_memory, backend, method):
    with cupyconv.use_backend(backend), refused(RESULT):
        cupyconv.convolve(_signal(np.int16), np.ones(5), method=method)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("name", ["fftconvolve", "oaconvolve"])
def test_fft_convolutions_refuse_before_casting(little_memory, backend, name):
    """``fftconvolve`` casts integers to float64 first: the check comes before."""
    with cupyconv.use_backend(backend), refused(RESULT):
        getattr(cupyconv, name)(_signal(np.int8), np.ones(3, np.int8), mode="valid")


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("method", ["auto", "gemm", "fft"])
def test_input_gradient_beyond_memory(little_memory, backend, method):
    dy = _signal()[None, None]
    with cupyconv.use_backend(backend), refused(RESULT):
        cupyconv.conv_grad_input(dy, np.ones((1, 1, 3), np.float32), (1, 1, HUGE + 2),
                                 method=method)


@pytest.mark.parametrize("backend", _backends())
def test_ndimage_pass_beyond_memory(little_memory, backend):
    image = np.broadcast_to(np.ones((), np.int16), (40000, 100000))
    with cupyconv.use_backend(backend), refused(RESULT):
        cupyconv.ndimage.correlate(image, np.ones((3, 3)), output=np.float64)


@pytest.mark.parametrize("backend", _backends())
def test_workspace_beyond_memory_names_the_method_not_the_limit(monkeypatch, backend):
    """A valid-mode FFT of a long signal against a long kernel: a small result, spectra
    beyond the memory.  Refused before the data scan of an explicit ``fft`` (which
    would warn about NaN), with no advice to raise ``workspace_limit``."""
    available = 2 * 10**8
    monkeypatch.setattr(NumpyBackend, "available_memory", lambda self: available)
    if backend == "emulated":
        from cupyconv.backends.cuda import CudaBackend
        monkeypatch.setattr(CudaBackend, "available_memory", lambda self: available)

    def no_scan(self, *args, **kwargs):
        raise AssertionError("the data were scanned before the memory check")
    monkeypatch.setattr(Backend, "scan", no_scan)
    x = np.broadcast_to(np.ones((), np.float64), (1, 1, 2 * 10**7))
    w = np.broadcast_to(np.ones((), np.float64), (1, 1, 2 * 10**7 - 5))
    with cupyconv.use_backend(backend), refused(r"method='fft' needs \d+ bytes \(result 48 "
                                                r"\+ workspace \d+\)"):
        cupyconv.conv(x, w, method="fft", workspace_limit=10**12)


def test_workspace_over_the_limit_falls_back_and_says_so(monkeypatch, rng):
    """An explicit method whose least workspace passes ``workspace_limit`` is not run:
    the call takes the next algorithm that fits, as after an out-of-memory, and the
    stats say why (the NumPy FFT honours the limit as the CUDA path's does)."""
    from cupyconv.core.problem import ConvProblem, Operands
    from cupyconv.dispatch import backend_for, dispatcher
    x, w = rng.standard_normal((1, 2, 50)), rng.standard_normal((3, 2, 9))
    problem = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, dtype=np.float64)
    backend = backend_for(np)
    limit = backend.min_workspace_bytes(problem, "fft") - 1
    stats = {}
    y, name = dispatcher.run(problem, Operands(activation=x, filter=w), backend,
                             method="fft", workspace_limit=limit, stats=stats)
    assert name != "fft" and stats["fallbacks"][0].startswith("fft: needs at least")
    want, _ = dispatcher.run(problem, Operands(activation=x, filter=w), backend,
                             method="direct")
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
