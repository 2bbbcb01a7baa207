"""Backend resolution (``cupyconv.dispatch.backends``): which backend runs which
arrays, ``use_backend`` scoping and errors, the memoised backend objects, and
``clear_caches`` dropping them with every other in-process cache.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.cuda import CudaBackend, runners
from cupyconv.backends.numpy import NumpyBackend
from cupyconv.dispatch import backends
from helpers import ref_conv, small_ints


def _need_emulation():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")


def test_reasons_cover_every_backend():
    reasons = backends.backend_reasons()
    assert set(reasons) == set(backends.BACKENDS) == {"numpy", "cuda", "emulated"}
    assert reasons["numpy"] is None
    assert cupyconv.available_backends() == [n for n in backends.BACKENDS if reasons[n] is None]
    for name, why in reasons.items():
        assert why is None or (isinstance(why, str) and why), name


def test_numpy_arrays_run_on_numpy_by_default():
    assert cupyconv.get_backend() == "numpy" and cupyconv.get_backend(np) == "numpy"
    be = backends.backend_for(np)
    assert isinstance(be, NumpyBackend) and be.name == "numpy" and be.xp is np
    assert backends.backend_for(np, "numpy") is be


def test_use_backend_is_scoped_and_nests():
    _need_emulation()
    with cupyconv.use_backend("emulated") as name:
        assert name == "emulated" and cupyconv.get_backend(np) == "emulated"
        be = backends.backend_for(np)
        assert isinstance(be, CudaBackend) and be.name == "emulated"
        assert isinstance(be.runner, runners.EmulatedRunner)
        assert backends.backend_for(np) is be                    # memoised
        with cupyconv.use_backend("numpy"):
            assert isinstance(backends.backend_for(np), NumpyBackend)
        assert cupyconv.get_backend() == "emulated"
    assert cupyconv.get_backend() == "numpy"


def test_use_backend_is_per_thread():
    _need_emulation()
    seen = []
    with cupyconv.use_backend("emulated"):
        t = threading.Thread(target=lambda: seen.append(cupyconv.get_backend()))
        t.start()
        t.join()
    assert seen == ["numpy"]


def test_use_backend_errors():
    with pytest.raises(ValueError, match=r"backend must be 'numpy', 'cuda' or 'emulated'; "
                                         r"got 'tpu'"):
        with cupyconv.use_backend("tpu"):
            pass
    why = backends.backend_reasons()["cuda"]
    if why is not None:
        with pytest.raises(ValueError, match=r"backend 'cuda' is not available here: "):
            with cupyconv.use_backend("cuda"):
                pass


def test_numpy_arrays_cannot_run_on_cuda():
    with pytest.raises(TypeError, match=r"the 'cuda' backend needs CuPy arrays; got NumPy"):
        backends.backend_for(np, "cuda")


def test_clear_caches_drops_backends_and_modules(rng):
    _need_emulation()
    x = small_ints(rng, (1, 1, 5), np.float64)
    w = small_ints(rng, (1, 1, 2), np.float64)
    with cupyconv.use_backend("emulated"):
        before = backends.backend_for(np)
        cupyconv.conv(x, w, method="direct")
    assert runners._emulated_group.cache_info().currsize > 0
    assert backends._emulated_backend.cache_info().currsize == 1
    cupyconv.clear_caches()
    assert runners._emulated_group.cache_info().currsize == 0
    assert backends._emulated_backend.cache_info().currsize == 0
    assert backends.backend_reasons.cache_info().currsize == 0
    with cupyconv.use_backend("emulated"):
        assert backends.backend_for(np) is not before                # a fresh object
        np.testing.assert_array_equal(cupyconv.conv(x, w, method="direct"), ref_conv(x, w))


def test_plan_backend_is_resolved_once(rng, monkeypatch):
    """A plan keeps the backend it was made for, whatever is in force when called."""
    _need_emulation()
    x = small_ints(rng, (1, 2, 6), np.float64)
    w = small_ints(rng, (3, 2, 2), np.float64)
    plan = cupyconv.plan_conv(x.shape, w.shape, np.float64, backend="emulated")
    assert plan.backend == "emulated"
    ran = []
    real = CudaBackend.run

    def spy(self, *args, **kwargs):
        ran.append(self.name)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(CudaBackend, "run", spy)
    with cupyconv.use_backend("numpy"):
        np.testing.assert_array_equal(plan(x, w), ref_conv(x, w))
    assert ran == ["emulated"]
    with pytest.raises(ValueError, match=r"backend 'tpu' is not available here; choose"):
        cupyconv.plan_conv(x.shape, w.shape, np.float64, backend="tpu")
