"""The sm_90a wgmma tiles on a real device (issue 27; the device check's ``gpu-tests`` step
runs it): on compute capability 9.0, every tile of float32 (TF32) and float16 compiled by
NVRTC for sm_90a and launched through the CUDA loader, exact on small integers against the
NumPy reference (reflect padding, 2 groups, 70 output channels: partial row and column
tiles, more K-tiles than stages); elsewhere the loader refuses the group with the reason.
Skipped without a device."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cupyconv._compile import compat, loader
from cupyconv._kernels import registry, wgmma_launch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels"))
from kernel_reference import make_problem, ref_conv, small_ints, to_logical  # noqa: E402

pytestmark = pytest.mark.gpu


def _load(source, names):
    return loader.load_module(source, names)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: np.dtype(d).name)
def test_wgmma_tiles_on_the_device(cupy, dtype):
    dt = np.dtype(dtype)
    if cupy.cuda.Device().compute_capability != "90":
        source = registry.FAMILIES["implicit_gemm_wgmma"].source
        name = registry.name_expression("implicit_gemm_wgmma", dt, 2, False, registry.wgmma_tiles(dt)[0])
        with pytest.raises(compat.ArchSpecificUnavailable):
            loader.load_module(source, [name])
        assert any(source in key for key in loader.arch_specific_refusals())
        return
    rng = np.random.default_rng(3)
    for tile in registry.wgmma_tiles(dt):
        problem = make_problem(n=2, c=4 * tile[2], k=70, g=2, s=(9, 11), ks=(3, 3), stride=(1, 1),
                               dilation=(1, 1), padding=((2, 1), (1, 1)), mode="reflect",
                               layout="channels_last", dtype=dt)
        x = small_ints(rng, problem.x_shape, dt)
        w = small_ints(rng, problem.w_shape, dt, scope=2)
        y = cupy.zeros(problem.y_shape, dt)
        wgmma_launch.run_wgmma(_load, problem, cupy.asarray(x), cupy.asarray(w), y, tile=tile,
                               tf32=dt == np.float32)
        ref = ref_conv(problem, to_logical(x, problem.layout), to_logical(w, problem.layout))
        np.testing.assert_array_equal(to_logical(y.get(), problem.layout), ref, err_msg=str(tile))
