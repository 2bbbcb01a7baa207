"""The multistage tensor-core implicit GEMM (tile variant 4, family
``implicit_gemm_multistage``) under the CPU emulation, and the address model of its
swizzled shared memory.

The kernel (cuda_src/conv/implicit_gemm_multistage.cu) reads channels-last operands in
K-tiles of 128 bytes (32 TF32 channels, 64 float16), 3-4 of them in flight in dynamic
shared memory past 48 KiB, fragments by ldmatrix (TF32 as pairs of .b16).  Small
integers are exact in every atom (float16 and bfloat16: the float sum rounds once, as the
reference cast of the float64 sum), so the geometry tests compare exactly.  bfloat16 runs
float16's loop with the bf16 atom: it takes the float16 cases where a case checks the data
path (every mode and rank, views, the re-layout), not the loop's schedule again.  The emulator lands a cp.async only at its wait
and poisons dynamic shared memory per block, so a missing wait or barrier, a wrong
swizzle on one side or a swapped ldmatrix matrix changes these results.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._dtypes import BFLOAT16
from cupyconv._emulation import emulation_available
from cupyconv._kernels import launch, registry

from kernel_reference import (LEAN_SHAPES, MODES, RANDOM_BOUND, TILE_SHAPES, check_forward,
                              check_refusals, emu_loader, make_problem, mode_case, random_error,
                              small_ints, spy_kernels)

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
#: the multistage dtypes: TF32, float16, bfloat16 (with ml_dtypes)
DTYPES = [F32, F16] + ([BFLOAT16] if BFLOAT16 is not None else [])
#: every compiled multistage tile, with its dtype
MS_TILES = [(dt, t) for dt in DTYPES for t in registry.gemm_tiles(dt)
            if t[3] == registry.MULTISTAGE]
#: the small (64x64) tiles: the loop unrolled by its stages
SMALL_TILES = [c for c in MS_TILES if c[1][0] * c[1][1] < 128 * 128]
#: (dtype, tile, mode): every mode on the small tiles (ranks 1-4 across the modes), two on
#: the 128x128 ones (constant at rank 1: the cval stores; symmetric at rank 3): the tile
#: shape changes the loop, not the tap walk, which is the same function at every rank
MODE_CASES = [(dt, t, m) for dt, t in MS_TILES
              for m in (MODES if (dt, t) in SMALL_TILES else ("constant", "symmetric"))]

emulated = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")


def _flags(dtype):
    """float32 runs only on operands rounded to TF32 beforehand (the small integers are)."""
    return {"tf32": True} if dtype == F32 else {}


@emulated
@pytest.mark.parametrize("dtype,tile,mode", MODE_CASES, ids=lambda v: str(v))
def test_multistage_tiles_match_reference(dtype, tile, mode):
    """Every padding mode (cval stored by plain shared stores), ranks 1-4 across the
    modes (one rank per mode keeps the builds to four groups per dtype), groups (each
    group's channels start on a K-tile), bias, beta, M and K/G off the tile grid, more
    K-tiles than stages (2 channel tiles x 3-9 taps at ranks 1-2, 1 x 16-27 at ranks 3-4,
    on the :data:`LEAN_SHAPES`), a y view (the epilogue writes the caller's layout)."""
    rank = 1 + MODES.index(mode) % 4
    _, problem = mode_case(mode, (4 if rank <= 2 else 2) * tile[2], dtype, shapes=LEAN_SHAPES)
    check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(rank),
                  bias=True, beta=1, tile=tile, y_layout_view="strided", **_flags(dtype))


#: K-tile counts of a small tile's loop around its unroll by STAGES (4) K-tiles: fewer
#: K-tiles than stages (only the one-at-a-time tail), exactly one unrolled pass, a pass and
#: a tail of 1 and of 3
SMALL_TILE_SLICES = (1, 2, 3, 4, 5, 7)


@emulated
@pytest.mark.parametrize("slices", SMALL_TILE_SLICES)
@pytest.mark.parametrize("dtype,tile", [c for c in SMALL_TILES if c[0] != BFLOAT16],
                         ids=lambda v: str(v))
def test_small_tiles_any_k_tile_count(dtype, tile, slices):
    """One channel tile per tap and ``slices`` taps (rank 1, constant padding with cval):
    the unrolled pass and its tail hand the stages over in the right order for every
    remainder, exact on small integers."""
    problem = make_problem(n=2, c=tile[2], k=70, g=1, s=TILE_SHAPES[1], ks=(slices,),
                           stride=(1,), dilation=(1,), padding=((2, 1),), mode="constant",
                           layout="channels_last", dtype=dtype, flip=True, cval=-2)
    check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(slices),
                  bias=True, tile=tile, **_flags(dtype))


@emulated
@pytest.mark.parametrize("dtype,tile", [c for c in MS_TILES if c[0] != BFLOAT16]
                         + [c for c in SMALL_TILES if c[0] == BFLOAT16], ids=lambda v: str(v))
def test_multistage_reverse_schedule_matches_normal(dtype, tile):
    """The reverse fiber schedule: a missing barrier before a stage is refilled, or a
    wait that lets a K-tile be read before it landed, would change the result."""
    problem = make_problem(n=2, c=2 * tile[2], k=10, g=2, s=(7, 9), ks=(3, 2), stride=(2, 1),
                           dilation=(1, 2), padding=((3, 1), (2, 2)), mode="wrap",
                           layout="channels_last", dtype=dtype)
    outs = [check_forward("implicit_gemm_fprop", problem, emu_loader(mode),
                          np.random.default_rng(12), bias=True, tile=tile, **_flags(dtype))
            for mode in ("normal", "reverse")]
    np.testing.assert_array_equal(outs[0], outs[1])


@emulated
@pytest.mark.parametrize("dtype,tile", [c for c in MS_TILES if c[0] != BFLOAT16]
                         + [c for c in SMALL_TILES if c[0] == BFLOAT16], ids=lambda v: str(v))
def test_multistage_random_data_within_bounds(dtype, tile):
    """Random data (reflect padding, 2 x 9 K-tiles) within :data:`RANDOM_BOUND` of the
    float64 convolution of the (TF32-rounded) operands: float32 accumulation and one
    rounding."""
    problem = make_problem(n=2, c=2 * tile[2], k=24, g=1, s=(10, 9), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 1), (1, 1)), mode="reflect",
                           layout="channels_last", dtype=dtype)

    def run(x, w, y):
        launch.run_implicit_gemm_fprop(emu_loader(), problem, x, w, y, tile=tile, **_flags(dtype))
    assert random_error(problem, run, np.random.default_rng(5)) <= RANDOM_BOUND[dtype]


@emulated
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_launcher_takes_multistage_tiles_where_they_fit(dtype, monkeypatch):
    """Without an explicit tile the launcher takes the multistage tile on contiguous
    channels-last operands with whole K-tiles per group (the small tile for a small
    problem), the variant-3 twin when C/G is not a multiple of BK, variant 2 on a
    flipped view; float32 only with tf32 (operands rounded beforehand)."""
    taken = spy_kernels(monkeypatch)
    bk = 128 // dtype.itemsize
    flags = dict(mma=True, tf32=dtype == F32)
    for c, view, want in ((bk, "contig", (64, 64, bk, 4)), (bk // 2, "contig", None),
                          (bk, "flipped", None)):
        problem = make_problem(n=1, c=c, k=16, g=1, s=(6, 5), ks=(3, 3), stride=(1, 1),
                               dilation=(1, 1), padding=((1, 1), (1, 1)), mode="reflect",
                               layout="channels_last", dtype=dtype)
        check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(3),
                      x_view=view, **flags)
        family, tile = taken[-1]
        if want is None:
            assert family == "implicit_gemm_fprop" and tile[3] == (3 if view == "contig" else 2)
        else:
            assert (family, tile) == ("implicit_gemm_multistage", want)
    big = make_problem(n=2, c=bk, k=128, g=1, s=(64, 64), ks=(3, 3), stride=(1, 1),
                       dilation=(1, 1), padding=((1, 1), (1, 1)), layout="channels_last",
                       dtype=dtype)
    assert launch.multistage_tile(big, tf32=True) == (128, 128, bk, 4)
    if dtype == F32:
        assert launch.multistage_tile(big, tf32=False) is None


@pytest.mark.parametrize("dtype,tile", MS_TILES, ids=lambda v: str(v))
def test_multistage_refusals_name_the_reason(dtype, tile):
    """An explicit multistage tile it cannot run is a ValueError with the reason:
    channels-first operands, C/G off the K-tile, float32 without the TF32 promise
    (checked before any kernel is loaded)."""
    cases = [(dict(c=tile[2], layout="channels_first"), "channels-last"),
             (dict(c=tile[2] // 2, layout="channels_last"), "multiple of")]
    if dtype == F32:
        cases.append((dict(c=tile[2], layout="channels_last", tf32=False), "rounded to TF32"))
    check_refusals(launch.run_implicit_gemm_fprop, tile, dtype, cases)


def test_multistage_shared_memory_opts_in_past_48k():
    """The 128x128 tiles' 3 stages need 96 KiB (two CTAs per sm_90 SM), the small tiles'
    4 stages 64 KiB: both past the 48 KiB a launch gets without the opt-in."""
    for dtype, tile in MS_TILES:
        smem = registry.multistage_smem_bytes(tile)
        assert smem == registry.multistage_stages(tile) * (tile[0] + tile[1]) * 128
        assert smem > launch.SHARED_MEMORY_LIMIT
        assert 2 * smem <= 227 * 1024 or tile[0] < 128


@emulated
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_channels_first_operands_are_relaid_for_the_multistage_tile(dtype, monkeypatch):
    """``conv`` on channels-first operands (x NCHW, w KCRS) with one K-tile of channels:
    the CUDA path re-lays them into channels-last memory (backends.cuda.relayout: the
    re-layout kernel's programs) and runs the multistage tile, whose epilogue writes
    the channels-first result; exact on small integers (float16, bfloat16: one rounding,
    as the float64 reference cast), also when the call repeats on new data.  (The re-layout is
    forced: at this size the cost model says it does not pay, ``implicit_choice.relayout_pays``.)"""
    import cupyconv
    from cupyconv.backends.cuda import implicit_choice
    monkeypatch.setattr(implicit_choice, "relayout_pays", lambda *args, **kwargs: True)
    from helpers import fresh_kernel_choices
    fresh_kernel_choices(monkeypatch)
    taken = spy_kernels(monkeypatch)
    bk = 128 // dtype.itemsize
    rng = np.random.default_rng(7)
    x = small_ints(rng, (1, bk, 6, 5), dtype)
    w = small_ints(rng, (16, bk, 3, 3), dtype, scope=2)
    precision = "tf32" if dtype == F32 else "highest"
    x2 = small_ints(rng, x.shape, dtype)
    with cupyconv.use_backend("emulated"):
        y = cupyconv.conv(x, w, padding=1, method="implicit_gemm", precision=precision)
        # the same call on new data (a compiled call replays the re-layout launches)
        y2 = cupyconv.conv(x2, w, padding=1, method="implicit_gemm", precision=precision)
    assert taken[-1] == ("implicit_gemm_multistage", (64, 64, bk, registry.MULTISTAGE))
    for xi, yi in ((x, y), (x2, y2)):
        ref = cupyconv.conv(xi.astype(np.float64), w.astype(np.float64), padding=1)
        np.testing.assert_array_equal(yi, ref.astype(dtype))
