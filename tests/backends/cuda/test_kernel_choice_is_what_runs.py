"""The implicit GEMM's one kernel selection is what the launcher builds: the record
``plan.explain()`` prints for a plan's operands (C-contiguous in its layout) names the
tile that runs on them, and the builder builds a record's tile as it is."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import launch, registry
from cupyconv._kernels.kernel_config import gemm_config
from cupyconv.backends.cuda import CudaBackend
from cupyconv.backends.cuda.runners import StandInRunner
from cupyconv.core.problem import ConvProblem
from cupyconv.dispatch import backends
from helpers import spy_kernels

pytestmark = pytest.mark.skipif("emulated" not in cupyconv.available_backends(),
                                reason="needs the emulated CUDA backend")

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def _gemm_kernel(taken):
    """``(family, tile)`` of the last implicit-GEMM kernel fetched."""
    return [t for t in taken if t[0].startswith("implicit_gemm")][-1]


def _shapes(layout, c, k):
    x, w = (2, c, 6, 5), (k, c, 3, 3)
    if layout == "channels_last":
        return (2, 6, 5, c), (k, 3, 3, c)
    return x, w


# (dtype, precision): float16 on HMMA, float32 under TF32, float64 on DMMA/FMA; channel
# counts that do (64) and do not (16) give the multistage tiles whole K-tiles.
CASES = [(F16, None), (F32, "tf32"), (F64, None)]


@pytest.mark.parametrize("dtype, precision", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
@pytest.mark.parametrize("channels", [16, 64])
def test_explained_kernel_is_the_one_launched(monkeypatch, dtype, precision, layout, channels):
    xs, ws = _shapes(layout, channels, channels)
    plan = cupyconv.plan_conv(xs, ws, dtype, padding=1, layout=layout, precision=precision,
                              method="implicit_gemm", backend="emulated")
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, xs).astype(dtype)
    w = rng.integers(-2, 3, ws).astype(dtype)
    taken = spy_kernels(monkeypatch)
    plan(x, w)
    family, tile = _gemm_kernel(taken)
    line = plan.explain().splitlines()[-1]
    shown = f"kernel: {family}, {'x'.join(map(str, tile[:3]))} variant {tile[3]},"
    assert line.startswith(shown), (line, family, tile)


@pytest.mark.parametrize("dtype, precision", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("channels", [16, 64])
def test_explained_kernel_is_the_one_launched_on_9_0(monkeypatch, dtype, precision, channels):
    """On a compute capability 9.0 stand-in, channels-last operands read as they are: the
    wgmma tile where it applies (whole 128-byte K-tiles), else the channels-last twin."""
    backend = CudaBackend(StandInRunner(90))
    monkeypatch.setattr(backends, "_emulated_backend", lambda: backend)
    test_explained_kernel_is_the_one_launched(monkeypatch, dtype, precision, "channels_last",
                                              channels)


class _Module:
    """A module-like stand-in: the builder only fetches kernels from it."""

    def get_function(self, name):
        return type("Kernel", (), {})()


@pytest.mark.parametrize("dtype", [F16, F64])
def test_builder_builds_the_record_it_is_given(monkeypatch, dtype):
    """A record's tile is built as it is (not re-derived: the automatic choice here is
    another tile), and a record whose tile the operands cannot run is refused, as an
    explicit tile is."""
    problem = ConvProblem.create(x_shape=(2, 32, 6, 5), w_shape=(32, 32, 3, 3),
                                 padding=((1, 1), (1, 1)), dtype=dtype)
    x, w = np.ones(problem.x_shape, dtype), np.ones(problem.w_shape, dtype)
    auto = launch.implicit_gemm_tile(problem)
    other = next(t for t in registry.gemm_tiles(dtype) if t != auto
                 and not registry.tile_variant(t).channels_last and registry.gemm_tile_fits(t, 32))
    taken = spy_kernels(monkeypatch)
    launch.implicit_gemm_program(_Module(), problem, x, w,
                                 config=gemm_config(other, dtype, "sm_80-89"))
    assert {tile for _, tile in taken} == {other}
    twin = next(t for t in registry.gemm_tiles(dtype) if registry.tile_variant(t).channels_last
                and not registry.is_multistage(t))
    with pytest.raises(ValueError, match="channels-last"):      # x is channels-first
        launch.implicit_gemm_program(_Module(), problem, x, w,
                                     config=gemm_config(twin, dtype, "sm_80-89"))


@pytest.mark.parametrize("dtype, precision", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("channels", [16, 64])
def test_explained_kernel_is_the_one_launched_on_9_0_verified_only(
        monkeypatch, restore_config, dtype, precision, channels):
    """Where the evidence ledger keeps the choice to verified kernels, the priced record
    and the launched one leave out the same unverified tiles (the wgmma tile on 9.0)."""
    restore_config.kernels = "verified"
    test_explained_kernel_is_the_one_launched_on_9_0(monkeypatch, dtype, precision, channels)
