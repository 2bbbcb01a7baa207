"""Every kernel family once under AddressSanitizer (emulated, in a subprocess).

The problems use awkward views (negative strides, slices of larger buffers)
and boundary modes whose index math reaches far outside the axis, so an
off-by-one in an offset shows up as a heap-buffer-overflow report.
"""
from __future__ import annotations

import os
import textwrap

import pytest

from emulation_support import asan_available

pytestmark = pytest.mark.skipif(not asan_available(), reason="ASan emulation unavailable")

_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    import numpy as np
    from cupyconv._kernels import launch
    from kernel_reference import (emu_loader, make_problem, make_view, ref_col2vol, ref_conv,
                                  ref_vol2col, small_ints, to_logical, to_physical)

    load = emu_loader("asan")
    rng = np.random.default_rng(0)
    for mode, layout, dtype in [("reflect", "channels_last", np.float64)]:
        p = make_problem(n=2, c=4, k=6, g=2, s=(5, 4, 3), ks=(3, 2, 2), stride=(2, 1, 2),
                         dilation=(1, 2, 1), padding=((4, 1), (0, 3), (1, 1)), mode=mode,
                         layout=layout, dtype=dtype, flip=True)
        xl = small_ints(rng, (2, 4, 5, 4, 3), dtype)
        wl = small_ints(rng, (6, 2, 3, 2, 2), dtype)
        x = make_view(to_physical(xl, layout), "flipped")
        w = make_view(to_physical(wl, layout), "strided")
        col = np.zeros((p.in_channels * p.taps, p.gemm_m), dtype)
        launch.run_vol2col(load, p, x, col)
        assert np.array_equal(col, ref_vol2col(p, xl)), "vol2col"
        dx = make_view(to_physical(np.zeros_like(xl), layout), "strided")
        launch.run_col2vol(load, p, col, dx)
        assert np.array_equal(to_logical(dx, layout), ref_col2vol(p, col)), "col2vol"
        for run in (launch.run_implicit_gemm_fprop, launch.run_direct):
            y = make_view(to_physical(np.zeros(p.y_shape if layout == "channels_first" else
                                               (2, 6) + p.out_shape, dtype), layout), "flipped")
            run(load, p, x, w, y, bias=np.arange(12, dtype=dtype)[::2])
            ref = ref_conv(p, xl, wl, np.arange(12, dtype=dtype)[::2])
            assert np.array_equal(to_logical(y, layout), ref), run.__name__
    # the tap-aligned implicit GEMM (C/G = 8): taps outer, channel slices inner
    p = make_problem(n=2, c=16, k=6, g=2, s=(5, 4, 3), ks=(3, 2, 2), stride=(2, 1, 2),
                     dilation=(1, 2, 1), padding=((4, 1), (0, 3), (1, 1)), mode="symmetric",
                     layout="channels_last", dtype=np.float64, flip=True)
    xl = small_ints(rng, (2, 16, 5, 4, 3), np.float64)
    wl = small_ints(rng, (6, 8, 3, 2, 2), np.float64)
    x = make_view(to_physical(xl, "channels_last"), "flipped")
    w = make_view(to_physical(wl, "channels_last"), "strided")
    y = to_physical(np.zeros((2, 6) + p.out_shape, np.float64), "channels_last")
    launch.run_implicit_gemm_fprop(load, p, x, w, y, tile=(64, 64, 8, 1))
    assert np.array_equal(to_logical(y, "channels_last"), ref_conv(p, xl, wl)), "tap-aligned"
    y = to_physical(np.zeros((2, 6) + p.out_shape, np.float64), "channels_last")
    launch.run_implicit_gemm_fprop(load, p, x, w, y, tile=(64, 64, 8, 2))
    assert np.array_equal(to_logical(y, "channels_last"), ref_conv(p, xl, wl)), "tensor-core"
    # the TF32 and float16 tensor-core tiles (C/G = 16; f16 through ldmatrix)
    p = make_problem(n=2, c=32, k=6, g=2, s=(5, 4, 3), ks=(3, 2, 2), stride=(2, 1, 2),
                     dilation=(1, 2, 1), padding=((4, 1), (0, 3), (1, 1)), mode="reflect",
                     layout="channels_last", dtype=np.float32, flip=True)
    for dtype, tiles in ((np.float32, [(128, 128, 8, 2), (64, 64, 8, 2)]),
                         (np.float16, [(128, 128, 16, 2), (64, 64, 16, 2)])):
        p = p.with_(dtype=np.dtype(dtype))
        xl = small_ints(rng, (2, 32, 5, 4, 3), dtype)
        wl = small_ints(rng, (6, 16, 3, 2, 2), dtype)
        x = make_view(to_physical(xl, "channels_last"), "flipped")
        w = make_view(to_physical(wl, "channels_last"), "strided")
        for tile in tiles:
            y = to_physical(np.zeros((2, 6) + p.out_shape, dtype), "channels_last")
            launch.run_implicit_gemm_fprop(load, p, x, w, y, tile=tile)
            assert np.array_equal(to_logical(y, "channels_last"), ref_conv(p, xl, wl)), tile
    # the channels-last tensor-core tiles (variant 3): 16-byte copies of contiguous
    # channels; arrays of exactly their size, so a copy past a row's end overflows
    for dtype, tiles in ((np.float64, [(64, 64, 8, 3)]),
                         (np.float32, [(128, 128, 8, 3), (64, 64, 8, 3)]),
                         (np.float16, [(128, 128, 16, 3), (64, 64, 16, 3)])):
        p = p.with_(dtype=np.dtype(dtype))
        xl = small_ints(rng, (2, 32, 5, 4, 3), dtype)
        wl = small_ints(rng, (6, 16, 3, 2, 2), dtype)
        x = np.ascontiguousarray(to_physical(xl, "channels_last"))
        w = np.ascontiguousarray(to_physical(wl, "channels_last"))
        for tile in tiles:
            y = to_physical(np.zeros((2, 6) + p.out_shape, dtype), "channels_last")
            launch.run_implicit_gemm_fprop(load, p, x, w, y, tile=tile)
            assert np.array_equal(to_logical(y, "channels_last"), ref_conv(p, xl, wl)), tile
    print("ASAN-KERNELS-OK")
""")


def test_all_kernel_families_under_asan():
    from emulation_support import run_in_asan_subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    proc = run_in_asan_subprocess(_SCRIPT.format(here=here), timeout=600,
                                  cwd=os.path.dirname(os.path.dirname(here)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ASAN-KERNELS-OK" in proc.stdout
    assert "AddressSanitizer" not in proc.stderr
