"""The CUDA backend's choice of the sm_90a wgmma tile and its fallback (issue 27 part 3),
on the CPU: the emulated runner stands in for devices of compute capability 9.0 and 8.0,
and for a 9.0 device whose driver refuses the cubin (the real loader, its cubin load
failing).  The implicit GEMM takes the wgmma tile only on 9.0 with the cubin loadable;
else the portable multistage tile runs and the loader keeps the reason
(``loader.arch_specific_refusals()``, shown by ``info``).  Results exact on small integers
against the float64 convolution (float16 rounds once, as the reference cast).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cupyconv._compile import loader
from cupyconv._emulation import emulation_available
from cupyconv._kernels import registry
from cupyconv.backends.cuda import algorithms, cost, pricing
from cupyconv.backends.cuda.runners import StandInRunner
from cupyconv.core.problem import ConvProblem

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels"))
from kernel_reference import ref_conv, small_ints, spy_kernels  # noqa: E402

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

F16 = np.dtype(np.float16)
WGMMA_SOURCE = registry.FAMILIES["implicit_gemm_wgmma"].source


class StandIn(StandInRunner):
    """The emulated runner as a device of compute capability ``arch``; ``refuse``: the
    wgmma group goes through the real CUDA loader, whose cubin load fails."""

    def __init__(self, arch, refuse=False):
        super().__init__(arch)
        self.refuse = refuse

    def loader(self, source, names):
        if self.refuse and source == WGMMA_SOURCE:
            return loader.load_module(source, names, device=0)
        return super().loader(source, names)


def _case(rng):
    """A forward float16 problem with one K-tile of channels (64), channels-last operands
    seen as the channels-first logical views the algorithms take."""
    problem = ConvProblem.create(x_shape=(1, 64, 6, 5), w_shape=(16, 64, 3, 3), stride=(1, 1),
                                 padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1,
                                 padding_mode="reflect", cval=0, layout="channels_first",
                                 dtype=F16)
    xl, wl = small_ints(rng, problem.x_shape, F16), small_ints(rng, problem.w_shape, F16, scope=2)
    cl = [np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 1, -1)), -1, 1) for a in (xl, wl)]
    return problem, xl, wl, cl[0], cl[1]


def _run(runner, monkeypatch):
    taken = spy_kernels(monkeypatch)
    problem, xl, wl, x, w = _case(np.random.default_rng(4))
    y = algorithms.run(problem, x, w, "implicit_gemm", runner)
    ref = ref_conv(problem.with_(dtype=np.dtype(np.float64)), xl.astype(np.float64),
                   wl.astype(np.float64)).astype(F16)
    np.testing.assert_array_equal(y, ref)
    return [family for family, _ in taken]


@pytest.fixture
def fresh_loader():
    loader.clear_module_cache()
    yield
    loader.clear_module_cache()


def test_wgmma_tile_on_compute_capability_9_0(monkeypatch, fresh_loader):
    assert _run(StandIn(90), monkeypatch) == ["implicit_gemm_wgmma"]
    assert loader.arch_specific_refusals() == {}


def test_multistage_tile_on_compute_capability_8_0(monkeypatch, fresh_loader):
    assert _run(StandIn(80), monkeypatch) == ["implicit_gemm_multistage"]


def test_refused_cubin_falls_back_with_the_reason_kept(monkeypatch, tmp_path, fresh_loader):
    """The driver refuses the sm_90a cubin: the call runs the multistage tile, the reason
    is in ``arch_specific_refusals`` for ``info``, and the next call does not try again."""
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(tmp_path / "no-prebuilt"))
    monkeypatch.setattr(loader, "device_properties", lambda device=None: (0, 90, (12, 9)))
    builds = []

    def fake_compile(source, names, arch, *args, **kwargs):
        builds.append(arch)
        return tmp_path / "wgmma.cubin", {"lowered": {n: n for n in names}}, True, None

    def refuse(*args, **kwargs):
        raise RuntimeError("CUDA_ERROR_NO_BINARY_FOR_GPU")
    monkeypatch.setattr(loader, "compile_group", fake_compile)
    monkeypatch.setattr(loader, "CubinModule", refuse)
    runner = StandIn(90, refuse=True)
    for _ in range(2):
        assert _run(runner, monkeypatch) == ["implicit_gemm_wgmma", "implicit_gemm_multistage"]
    assert len(builds) <= 1          # no NVRTC here: refused before a build, else built once
    (key, why), = loader.arch_specific_refusals().items()
    assert key == f"sm_90 {WGMMA_SOURCE}" and "implicit_gemm_wgmma" in why
    assert ("driver refused" in why) == bool(builds)


def test_cost_model_names_the_wgmma_estimate_on_9_0():
    """On 9.0 the implicit GEMM's prediction reads the wgmma entry (an estimate for the
    device check), on 8.0 the multistage one."""
    problem = ConvProblem.create(x_shape=(8, 64, 32, 32), w_shape=(128, 64, 3, 3), stride=(1, 1),
                                 padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1,
                                 padding_mode="constant", cval=0, layout="channels_first",
                                 dtype=F16)
    h200 = StandIn(90).static
    assert pricing.efficiency_key(problem, h200, "implicit_gemm") == "implicit_gemm_wg_float16"
    assert pricing.efficiency_key(problem, StandIn(80).static, "implicit_gemm") == "implicit_gemm_ms_float16"
    assert "implicit_gemm_wg_tf32" in cost.EFFICIENCY
