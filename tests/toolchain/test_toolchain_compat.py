"""NVRTC vs driver vs GPU: which binary to build (pure functions, no GPU needed)."""
from __future__ import annotations

import sys
import types

import pytest
from toolchain_support import nvrtc_available

from cupyconv._compile import compat, loader
from cupyconv._compile.compat import ToolchainMismatch, known_archs, select_target
from helpers import require_cuda

ARCHS_12_9 = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121)
ARCHS_12_6 = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90)


@pytest.mark.parametrize("code, expected", [(12040, (12, 4)), (12090, (12, 9)), (13000, (13, 0)),
                                            (11020, (11, 2))])
def test_split_driver_version(code, expected):
    assert compat.split_driver_version(code) == expected


@pytest.mark.parametrize("bad", [0, -1, True, "12040", 12.4])
def test_split_driver_version_rejects(bad):
    with pytest.raises(ValueError, match="driver version"):
        compat.split_driver_version(bad)


def test_known_archs_table():
    assert known_archs((12, 9)) == ARCHS_12_9
    assert known_archs((12, 6)) == ARCHS_12_6
    assert known_archs((11, 0))[-1] == 80 and 35 in known_archs((11, 8))
    assert 35 not in known_archs((12, 0)) and 75 == known_archs((13, 0))[0]
    assert 110 in known_archs((13, 0)) and 101 not in known_archs((13, 0))
    assert known_archs((10, 2)) == ()


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC unavailable")
def test_known_archs_table_matches_installed_nvrtc():
    from cupyconv._compile import nvrtc_version, supported_archs
    queried = supported_archs()
    if queried is None:
        pytest.skip("this NVRTC has no nvrtcGetSupportedArchs")
    assert known_archs(nvrtc_version()) == queried


@pytest.mark.parametrize("driver", [(12, 9), (12, 2), (13, 1)])
def test_known_device_gets_a_cubin(driver):
    """A cubin from a newer 12.x NVRTC loads on an older 12.x driver (minor version compat)."""
    t = select_target(90, driver, (12, 9), ARCHS_12_9)
    assert (t.arch, t.device_arch, t.ptx, t.note) == ("sm_90", "sm_90", False, "")


def test_device_newer_than_nvrtc_gets_ptx_when_driver_can_jit():
    t = select_target(120, (12, 8), (12, 6), ARCHS_12_6)
    assert t.ptx and t.arch == "compute_90" and t.device_arch == "sm_120"
    assert "NVRTC 12.6" in t.note and "driver 12.8" in t.note and "sm_120" in t.note
    # the newest arch NVRTC knows that is not above the device
    assert select_target(89, (12, 6), (12, 6), (80, 86, 90)).arch == "compute_86"
    assert select_target(120, (12, 6), (12, 6), None).arch == "compute_90"     # table fallback


def test_device_newer_than_nvrtc_and_old_driver_is_an_error():
    with pytest.raises(ToolchainMismatch) as info:
        select_target(120, (12, 4), (12, 6), ARCHS_12_6)
    msg = str(info.value)
    assert "NVRTC 12.6" in msg and "CUDA driver 12.4" in msg and "sm_120" in msg


def test_nvrtc_of_newer_major_than_driver_is_an_error():
    with pytest.raises(ToolchainMismatch) as info:
        select_target(90, (12, 8), (13, 0), known_archs((13, 0)))
    msg = str(info.value)
    assert "NVRTC 13.0" in msg and "CUDA driver 12.8" in msg and "cupy-cuda12x" in msg


def test_device_older_than_nvrtc_supports_is_an_error():
    with pytest.raises(ToolchainMismatch, match=r"sm_61\) is older.*oldest sm_75"):
        select_target(61, (13, 0), (13, 0), known_archs((13, 0)))


@pytest.mark.parametrize("bad", [0, True, "90", 9.0])
def test_select_target_rejects_bad_device(bad):
    with pytest.raises(ValueError, match="device_cc"):
        select_target(bad, (12, 9), (12, 9), ARCHS_12_9)


def _fake_cupy(monkeypatch, cc="120", driver=12080):
    """A cupy stand-in with one device: just what device_target reads."""
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(
        Device=lambda i=None: types.SimpleNamespace(id=i or 0, compute_capability=cc),
        runtime=types.SimpleNamespace(driverGetVersion=lambda: driver))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    loader.device_target.cache_clear()


def test_device_target_glue_without_gpu(monkeypatch):
    monkeypatch.setattr(loader, "nvrtc_version", lambda: (12, 6))
    monkeypatch.setattr(loader, "supported_archs", lambda: ARCHS_12_6)
    _fake_cupy(monkeypatch, cc="120", driver=12080)
    try:
        with pytest.warns(RuntimeWarning, match="using PTX for compute_90"):
            t = loader.device_target(0)
        assert t.arch == "compute_90"
        _fake_cupy(monkeypatch, cc="120", driver=12040)
        with pytest.raises(ToolchainMismatch, match="NVRTC 12.6 and CUDA driver 12.4"):
            loader.device_target(0)
        _fake_cupy(monkeypatch, cc="90", driver=12040)
        assert loader.device_target(0).arch == "sm_90"
    finally:
        loader.device_target.cache_clear()


@pytest.mark.gpu
def test_load_cubin_and_ptx_on_gpu(tmp_path):
    """The loader's files load through cupy.RawModule(path=...), cubin and PTX alike."""
    cupy = require_cuda()
    from cupyconv._compile import compile_group
    from cupyconv._kernels import registry
    import numpy as np
    names = [i.name for i in registry.group_instantiations("conv/vol2col.cu", np.float32, 1)]
    target = loader.device_target(cupy.cuda.Device().id)
    cc = int(target.device_arch[3:])
    for arch in {target.arch, f"compute_{min(cc, 90)}"}:
        path, meta, _, _ = compile_group("conv/vol2col.cu", names, arch, root=tmp_path)
        mod = loader.CubinModule(path, meta["lowered"])
        for name in names:
            assert mod.get_function(name) is not None
