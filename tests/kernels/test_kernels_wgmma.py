"""The warp-specialised warpgroup-MMA implicit GEMM (family ``implicit_gemm_wgmma``, tile
variant ``registry.WGMMA``, sm_90a) under the CPU emulation.

The kernel (cuda_src/conv/implicit_gemm_wgmma.cu) has a producer warpgroup copy
channels-last K-tiles of 128 bytes (32 TF32 channels, 64 float16 / bfloat16) into four
128-byte-swizzled stages and two consumer warpgroups run wgmma on them through shared-memory
descriptors, handing stages back and forth with mbarriers.  The emulator
(cuda_src/emu/emu_wgmma.cuh) checks the asynchrony: a stage read by a wgmma without a
fence.proxy.async after its copies landed, or overwritten before the wgmma's wait, is an
error; the accumulators are poisoned between a wgmma and its wait; a barrier that never
completes is a deadlock error.  Small integers are exact in every type (the float sums of
integers are exact; float16 and bfloat16 round once in the epilogue, as the float64
reference cast), so the geometry tests compare exactly against the NumPy reference
(kernel_reference.ref_conv, which shares no index math with the kernel).
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._dtypes import BFLOAT16
from cupyconv._emulation import EmulationError, emulation_available
from cupyconv._kernels import launch, registry, wgmma_launch
from cupyconv._paths import cuda_src_dir

from kernel_reference import (LEAN_SHAPES, MODES, RANDOM_BOUND, check_forward, check_refusals,
                              emu_loader, make_problem, mode_case, random_error, ref_conv,
                              small_ints, to_logical)

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
DTYPES = [F32, F16] + ([BFLOAT16] if BFLOAT16 is not None else [])
#: every compiled wgmma tile, with its dtype
WG_TILES = [(dt, t) for dt in DTYPES for t in registry.wgmma_tiles(dt)]
#: (dtype, tile, mode): every mode on the 128x64 tiles (ranks 1-4 across the modes), two
#: on the 128x128 ones (the builds stay at four groups per dtype)
MODE_CASES = [(dt, t, m) for dt, t in WG_TILES for m in (MODES if t[1] == 64 else MODES[:2])]

emulated = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")


def _flags(dtype):
    """float32 runs only on operands rounded to TF32 beforehand (the small integers are)."""
    return {"tf32": dtype == F32}


def _check(problem, loader, rng, tile, **kwargs):
    return check_forward("implicit_gemm_wgmma", problem, loader, rng, tile=tile,
                         run=wgmma_launch.run_wgmma, **_flags(problem.dtype), **kwargs)


@emulated
@pytest.mark.parametrize("dtype,tile,mode", MODE_CASES, ids=lambda v: str(v))
def test_wgmma_tiles_match_reference(dtype, tile, mode):
    """Every padding mode (cval -2 stored by plain shared stores, then fenced), ranks 1-4
    across the modes, 2 groups (each group's channels start on a K-tile), bias, beta, M and
    K/G off the tile grid (70 output channels: a partial column tile), more K-tiles than
    stages (2 channel tiles x 3-9 taps at ranks 1-2, 1 x 16-27 at ranks 3-4: the barriers'
    phases wrap; the :data:`LEAN_SHAPES`), y through a strided view (the epilogue writes
    the caller's layout)."""
    rank = 1 + MODES.index(mode) % 4
    _, problem = mode_case(mode, (4 if rank <= 2 else 2) * tile[2], dtype, shapes=LEAN_SHAPES)
    _check(problem, emu_loader(), np.random.default_rng(rank), tile, bias=True, beta=1,
           y_layout_view="strided")


@emulated
@pytest.mark.parametrize("dtype,tile", [c for c in WG_TILES if c[1][1] == 64], ids=lambda v: str(v))
def test_wgmma_reverse_schedule_matches_normal(dtype, tile):
    """The reverse fiber schedule (stride, dilation, uneven pads, wrap, groups): a stage
    handed on before its copies landed or released before its wgmma completed would
    change the result or fail."""
    problem = make_problem(n=2, c=2 * tile[2], k=10, g=2, s=(7, 9), ks=(3, 2), stride=(2, 1),
                           dilation=(1, 2), padding=((3, 1), (2, 2)), mode="wrap",
                           layout="channels_last", dtype=dtype)
    outs = [_check(problem, emu_loader(mode), np.random.default_rng(12), tile, bias=True)
            for mode in ("normal", "reverse")]
    np.testing.assert_array_equal(outs[0], outs[1])


@emulated
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_wgmma_random_data_within_bounds(dtype):
    """Random data (reflect padding, 2 x 9 K-tiles) within :data:`RANDOM_BOUND` of the
    float64 convolution of the (TF32-rounded) operands."""
    tile = registry.wgmma_tiles(dtype)[1]
    problem = make_problem(n=2, c=2 * tile[2], k=24, g=1, s=(10, 9), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 1), (1, 1)), mode="reflect",
                           layout="channels_last", dtype=dtype)

    def run(x, w, y):
        wgmma_launch.run_wgmma(emu_loader(), problem, x, w, y, tile=tile, **_flags(dtype))
    assert random_error(problem, run, np.random.default_rng(5)) <= RANDOM_BOUND[dtype]


@emulated
@pytest.mark.parametrize("dtype", [F16, F32], ids=str)
def test_wgmma_views_and_a_channels_first_result(dtype):
    """x a crop of a larger channels-last buffer (its start and strides still multiples of
    16 bytes), w a batch slice of a larger one, and y channels-first memory (the caller's
    layout) while x and w are channels-last: exact."""
    tile = registry.wgmma_tiles(dtype)[1]
    c, k = tile[2], 12
    problem = make_problem(n=2, c=c, k=k, g=1, s=(6, 7), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 1), (1, 1)), mode="symmetric",
                           layout="channels_last", dtype=dtype)
    rng = np.random.default_rng(9)
    x_big = small_ints(rng, (2, 8, 10, c), dtype)
    x = x_big[:, 1:7, 2:9, :]
    w_big = small_ints(rng, (2 * k, 3, 3, c), dtype, scope=2)
    w = w_big[k:]
    y_cf = np.zeros((2, k) + problem.out_shape, dtype)          # channels-first memory
    y = np.moveaxis(y_cf, 1, -1)                                 # as the channels-last y
    wgmma_launch.run_wgmma(emu_loader(), problem, x, w, y, tile=tile, **_flags(dtype))
    ref = ref_conv(problem, to_logical(x, problem.layout), to_logical(w, problem.layout))
    np.testing.assert_array_equal(y_cf, ref)


@pytest.mark.parametrize("dtype,tile", WG_TILES, ids=lambda v: str(v))
def test_wgmma_refusals_name_the_reason(dtype, tile):
    """A wgmma tile that cannot run the operands is a ValueError with the reason, before
    any kernel loads: channels-first operands, x with its channels reversed, C/G off the K-tile,
    float32 without the TF32 promise, a gradient problem."""
    cases = [(dict(c=tile[2], layout="channels_first"), "contiguous"),
             (dict(c=tile[2], layout="channels_last", x_channels="reversed"), "contiguous"),
             (dict(c=tile[2] // 2, layout="channels_last"), "multiple of")]
    if dtype == F32:
        cases.append((dict(c=tile[2], layout="channels_last", tf32=False), "rounded to TF32"))
    check_refusals(wgmma_launch.run_wgmma, tile, dtype, cases)
    grad = make_problem(n=1, c=tile[2], k=8, g=1, s=(5, 5), ks=(3, 3), stride=(1, 1),
                        dilation=(1, 1), padding=((1, 1), (1, 1)), layout="channels_last",
                        dtype=dtype).with_(op="grad_input")
    assert "forward" in wgmma_launch.wgmma_reason(grad, tile, True)


def test_wgmma_tile_choice_and_shared_memory():
    """The tile only for compute capability 9.0: 128x128 past 64 output channels per
    group, else 128x64; four stages of (BM + BN) 128-byte rows plus the 1 KiB that aligns
    them, past the 48 KiB opt-in line and within an H200 SM's 227 KiB."""
    def problem(k):
        return make_problem(n=1, c=64, k=k, g=1, s=(8, 8), ks=(3, 3), stride=(1, 1),
                            dilation=(1, 1), padding=((1, 1), (1, 1)), layout="channels_last",
                            dtype=F16)
    wide, narrow = problem(128), problem(64)
    assert wgmma_launch.wgmma_tile(wide, False, 90) == (128, 128, 64, registry.WGMMA)
    assert wgmma_launch.wgmma_tile(narrow, False, 90) == (128, 64, 64, registry.WGMMA)
    for arch in (80, 89, 100):
        assert wgmma_launch.wgmma_tile(wide, False, arch) is None
    assert wgmma_launch.wgmma_tile(wide.with_(dtype=F32), False, 90) is None   # no TF32 promise
    for dtype, tile in WG_TILES:
        smem = registry.gemm_dynamic_smem(tile, dtype)
        assert smem == registry.WGMMA_STAGES * (tile[0] + tile[1]) * 128 + 1024
        assert launch.SHARED_MEMORY_LIMIT < smem <= 227 * 1024
    assert registry.block_threads("implicit_gemm_wgmma") == 384
    assert registry.FAMILIES["implicit_gemm_wgmma"].arch_specific == ("sm_90a",)


#: Planted bugs (source line -> what replaces it) and the error the emulator must report.
PLANTED = {
    "no fence.proxy.async": ("      cc::fence_proxy_async();\n", "", "no fence.proxy.async"),
    "no wgmma wait before the release": ("      cc::wgmma_wait_group<1>();", "",
                                         "changed between its issue and the wgmma.wait_group"),
    "no wait on the empty barrier": ("      if (kt >= kStages) cc::mbarrier_wait_parity",
                                     "      if (false) cc::mbarrier_wait_parity", "deadlock"),
}


@emulated
@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_pipeline_bugs_fail(bug):
    """The kernel with one synchronisation step removed fails under the emulator: the
    async proxy never saw the copies, a stage overwritten before the wgmma reading it
    completed, the producer outrunning the consumers.  (A consumer that skips its wait on
    the `full` barrier is not caught: the emulator's schedules always let the producer
    finish a stage first.)"""
    from cupyconv._emulation import EmulatedModule
    old, new, match = PLANTED[bug]
    src = (cuda_src_dir() / "conv" / "implicit_gemm_wgmma.cu").read_text()
    assert src.count(old) == 1
    tile = registry.wgmma_tiles(F16)[1]
    name = registry.name_expression("implicit_gemm_wgmma", F16, 2, False, tile)
    mod = EmulatedModule(code=src.replace(old, new), options=[f"-I{cuda_src_dir() / 'conv'}"],
                         name_expressions=[name])
    problem = make_problem(n=2, c=tile[2], k=16, g=1, s=(9, 11), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 1), (1, 1)), layout="channels_last",
                           dtype=F16)
    rng = np.random.default_rng(1)
    x = small_ints(rng, problem.x_shape, F16)
    w = small_ints(rng, problem.w_shape, F16)
    with pytest.raises(EmulationError, match=match):
        wgmma_launch.run_wgmma(mod, problem, x, w, np.zeros(problem.y_shape, F16), tile=tile)
