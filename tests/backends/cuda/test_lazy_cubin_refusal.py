"""A refused sm_90a cubin on a real driver: ``cupy.RawModule(path=...)`` loads lazily, so
the refusal (``CUDADriverError``) surfaces when the first kernel is fetched.  The loader
turns it into ``ArchSpecificUnavailable`` there, keeps the reason for ``info``, and the
call runs the portable tiles.  Here CuPy is a stand-in whose module constructor succeeds
and whose ``get_function`` raises, as the driver does."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from cupyconv._compile import loader
from cupyconv._compile.compat import ArchSpecificUnavailable
from cupyconv._emulation import emulation_available

sys.path.insert(0, __import__("os").path.dirname(__file__))
from test_wgmma_wiring import WGMMA_SOURCE, StandIn, _run  # noqa: E402

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")


class CUDADriverError(RuntimeError):
    """CuPy's driver error type, as the stand-in raises it."""


def _lazy_cupy(fetched):
    """A CuPy stand-in: ``RawModule(path=...)`` succeeds; ``get_function`` raises."""
    class RawModule:
        def __init__(self, path=None, **kwargs):
            self.path = path

        def get_function(self, symbol):
            fetched.append(symbol)
            raise CUDADriverError("CUDA_ERROR_NO_BINARY_FOR_GPU: no kernel image is available")

    class Device:
        def __init__(self, _id):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False
    return types.SimpleNamespace(RawModule=RawModule, cuda=types.SimpleNamespace(Device=Device))


@pytest.fixture
def refusing_driver(monkeypatch, tmp_path):
    loader.clear_module_cache()
    fetched = []
    monkeypatch.setitem(sys.modules, "cupy", _lazy_cupy(fetched))
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(tmp_path / "no-prebuilt"))
    monkeypatch.setattr(loader, "device_properties", lambda device=None: (0, 90, (12, 9)))
    monkeypatch.setattr(loader.compat, "select_specific", lambda *a, **k: types.SimpleNamespace(
        arch="sm_90a", reason=""))
    monkeypatch.setattr(loader, "compile_group", lambda source, names, arch, *a, **k: (
        tmp_path / "wgmma.cubin", {"lowered": {n: n for n in names}}, True, None))
    yield fetched
    loader.clear_module_cache()


def test_get_function_refusal_is_arch_specific_unavailable(refusing_driver):
    names = [n for n in loader.registry.instantiations(["implicit_gemm_wgmma"])][:1]
    module = loader.load_module(WGMMA_SOURCE, [names[0].name], device=0)
    with pytest.raises(ArchSpecificUnavailable, match="driver refused the sm_90a cubin"):
        module.get_function(names[0].name)
    (key, why), = loader.arch_specific_refusals().items()
    assert key == f"sm_90 {WGMMA_SOURCE}" and "NO_BINARY_FOR_GPU" in why


def test_call_falls_back_to_the_portable_tiles(refusing_driver, monkeypatch):
    """The wgmma tile is chosen, its kernel fetch is refused, the multistage tile runs
    (exact against the float64 reference: ``_run``); the second call does not fetch again."""
    runner = StandIn(90, refuse=True)
    assert _run(runner, monkeypatch) == ["implicit_gemm_wgmma", "implicit_gemm_multistage"]
    fetches = len(refusing_driver)
    assert fetches == 1
    _run(runner, monkeypatch)
    assert len(refusing_driver) == fetches     # refused once per process: not fetched again
    assert np.all([("refused" in why) for why in loader.arch_specific_refusals().values()])
