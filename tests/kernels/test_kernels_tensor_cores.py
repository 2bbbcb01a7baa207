"""The tensor-core implicit-GEMM tiles (variant 2) under the CPU emulation.

float64 runs DMMA m8n8k4, float32 the TF32 m16n8k8 atom (``precision="tf32"`` only),
float16 m16n8k16 with float accumulation and its fragments through ``ldmatrix.trans``,
bfloat16 the same tiles with the m16n8k16 bf16 atom (issue 26; where ml_dtypes is installed:
small-integer sums are exact in float32, so the one rounding to bfloat16 of the reference
computed in float64 is the kernels' result bit for bit).
Each atom is the emulator's warp collective with the PTX ISA fragment layouts and the
H200's accumulation (tests/emulation/test_emu_mma.py checks the atoms alone, with a
planted register swap).  Small integers are exact in every atom, so the geometry tests
compare exactly; the numerics tests use random data against a float64 reference with
the bounds stated at each test.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._dtypes import BFLOAT16
from cupyconv._emulation import emulation_available
from cupyconv._kernels import launch, registry
from cupyconv.backends.arrays import to_tf32

from kernel_reference import (LEAN_SHAPES, MODES, check_forward, emu_loader, make_problem,
                              mode_case, ref_conv, spy_kernels)

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

F16, F32, F64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64))
#: the tensor-core dtypes (bfloat16 where ml_dtypes is installed: the m16n8k16 bf16 atom)
TC_DTYPES = (F64, F32, F16) + ((BFLOAT16,) if BFLOAT16 is not None else ())
#: every compiled tensor-core tile, with its dtype
#: (bfloat16: the 64x64 tile only -- its 128x128 tiles are float16's code with the other
#: atom, which the 64x64 one exercises -- to keep the suite's time down)
TC_TILES = [(dt, t) for dt in TC_DTYPES for t in registry.gemm_tiles(dt)
            if t[3] == 2 and (dt != BFLOAT16 or t[0] == 64)]
#: the channels-last variant (16-byte channel copies) of the tensor-core tiles
NHWC_TILES = [(dt, t) for dt in TC_DTYPES for t in registry.gemm_tiles(dt)
              if t[3] == 3 and (dt != BFLOAT16 or t[0] == 64)]
#: spatial extents per rank: M and K/G are non-multiples of every tile
SHAPES = {1: (37,), 2: (9, 11), 3: (5, 6, 7), 4: (3, 4, 3, 4)}


def _rel(got, ref):
    """Relative-norm error of ``got`` against the float64 ``ref``."""
    return float(np.linalg.norm(got.astype(F64) - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,tile", TC_TILES, ids=lambda v: str(v))
def test_tensor_core_tiles_match_reference(dtype, tile, mode):
    """Every tensor-core tile, every padding mode; ranks 1-4 and both layouts across the
    modes; groups, flipped/strided views, bias, beta and cval (the :data:`LEAN_SHAPES`:
    M still off every tile)."""
    layout = ("channels_first", "channels_last")[MODES.index(mode) % 2]
    rank, problem = mode_case(mode, 2 * tile[2], dtype, layout, shapes=LEAN_SHAPES)
    check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(rank),
                  x_view="flipped", w_view="strided", bias=True, beta=1, tile=tile)


@pytest.mark.parametrize("dtype,tile", TC_TILES, ids=lambda v: str(v))
def test_reverse_schedule_matches_normal(dtype, tile):
    """A missing barrier around the shared slices would change the result."""
    problem = make_problem(n=2, c=2 * tile[2], k=10, g=2, s=(7, 9), ks=(3, 2), stride=(2, 1),
                           dilation=(1, 2), padding=((3, 1), (2, 2)), mode="wrap", dtype=dtype)
    outs = [check_forward("implicit_gemm_fprop", problem, emu_loader(mode),
                          np.random.default_rng(11), bias=True, tile=tile)
            for mode in ("normal", "reverse")]
    np.testing.assert_array_equal(outs[0], outs[1])


def _random_case(dtype, rng, c=64, k=24):
    problem = make_problem(n=2, c=c, k=k, g=1, s=(10, 9), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 1), (1, 1)), mode="reflect", dtype=dtype)
    x = rng.standard_normal(problem.x_shape).astype(dtype)
    w = rng.standard_normal(problem.w_shape).astype(dtype)
    return problem, x, w


def _run(problem, x, w, tile):
    y = np.zeros(problem.y_shape, problem.dtype)
    launch.run_implicit_gemm_fprop(emu_loader(), problem, x, w, y, tile=tile)
    return y


@pytest.mark.parametrize("tile", [t for d, t in TC_TILES if d == F32])
def test_tf32_tiles_round_operands_to_tf32(tile):
    """The TF32 tiles compute the float32 convolution of the tf32-rounded operands
    (cvt.rna, emulated bit-exactly): against that float64 reference, only the float32
    accumulation errs (K = 576 terms, truncated sums: <= 2e-5 relative norm).  Against
    the exact operands they are within the TF32 bound (each product off by <= 2 * 2**-11
    relative: 2**-10) and measurably less accurate than the float32 FMA tile on the
    same data (more than 30x: TF32 really ran)."""
    problem, x, w = _random_case(F32, np.random.default_rng(5))
    got = _run(problem, x, w, tile)
    rounded = ref_conv(problem.with_(dtype=F64), to_tf32(x).astype(F64), to_tf32(w).astype(F64))
    exact = ref_conv(problem.with_(dtype=F64), x.astype(F64), w.astype(F64))
    assert _rel(got, rounded) <= 2e-5
    fma = _run(problem, x, w, (128, 128, 8, 1))
    assert _rel(got, exact) <= 2.0 ** -10
    assert _rel(got, exact) > 30 * _rel(fma, exact)


@pytest.mark.parametrize("tile", [t for d, t in TC_TILES if d == F32])
def test_tf32_tiles_skip_rounding_operands_said_rounded(tile):
    """With ``tf32=True`` (precision="tf32": the dispatcher has rounded the operands) the
    TF32 tile stages them as they are: on unrounded data the tensor core then reads their
    top 19 bits (truncation), which the result shows -- it matches the truncated
    operands' convolution and not the rounded ones' (so the flag reaches the kernel)."""
    problem, x, w = _random_case(F32, np.random.default_rng(6))
    y = np.zeros(problem.y_shape, problem.dtype)
    launch.run_implicit_gemm_fprop(emu_loader(), problem, x, w, y, tile=tile, tf32=True)

    def truncated(a):
        return (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(F64)
    trunc = ref_conv(problem.with_(dtype=F64), truncated(x), truncated(w))
    rounded = ref_conv(problem.with_(dtype=F64), to_tf32(x).astype(F64), to_tf32(w).astype(F64))
    assert _rel(y, trunc) <= 2e-5 < _rel(y, rounded)
    # on operands rounded beforehand both paths agree
    y2 = np.zeros(problem.y_shape, problem.dtype)
    launch.run_implicit_gemm_fprop(emu_loader(), problem, to_tf32(x), to_tf32(w), y2, tile=tile,
                                   tf32=True)
    assert _rel(y2, rounded) <= 2e-5


@pytest.mark.parametrize("tile", [t for d, t in TC_TILES if d == F16])
def test_float16_tiles_within_one_rounding(tile):
    """float16 tiles: half operands (exact in the atom), float32 accumulation, one
    rounding to half at the end: relative-norm error <= 2**-11 (the final rounding) +
    2e-5 (the float32 sum of 576 terms), as the FMA half tile."""
    problem, x, w = _random_case(F16, np.random.default_rng(6), c=64)
    exact = ref_conv(problem.with_(dtype=F64), x.astype(F64), w.astype(F64))
    for t in (tile, (64, 64, 8, 0)):
        assert _rel(_run(problem, x, w, t), exact) <= 2.0 ** -11 + 2e-5, t


@pytest.mark.parametrize("tile", [t for d, t in TC_TILES if d == F16])
def test_float16_tiles_accumulate_in_float(tile):
    """4096 products of 1 * 1: a half accumulator stalls at 2048 (2048 + 1 rounds back
    to 2048); the atoms' float accumulation reaches 4096, exact in half.  A sum of
    65536 overflows to +inf when stored as half."""
    c = taps = 64
    problem = make_problem(n=1, c=c, k=2, g=1, s=(taps,), ks=(taps,), stride=(1,),
                           dilation=(1,), padding=0, dtype=F16)
    x = np.ones((1, c, taps), F16)
    w = np.stack([np.ones((c, taps), F16), np.full((c, taps), 16, F16)])
    y = _run(problem, x, w, tile)
    assert y[0, 0, 0] == 4096 and np.isposinf(y[0, 1, 0])


def _chosen(problem, **flags):
    names = []

    def loader(source, wanted):
        names.extend(wanted)
        return emu_loader()(source, wanted)
    x = np.zeros(problem.x_shape, problem.dtype)
    w = np.zeros(problem.w_shape, problem.dtype)
    launch.run_implicit_gemm_fprop(loader, problem, x, w, np.zeros(problem.y_shape, problem.dtype),
                                   **flags)
    return registry.lookup(names[-1]).tile


@pytest.mark.parametrize("dtype", [F64, F32, F16])
def test_tensor_core_tile_choice(dtype):
    """A tensor-core tile only on a device with the atoms (``mma``), float32's only with
    ``tf32``; then it is preferred, and a channel count it cannot take falls back."""
    problem = make_problem(n=2, c=32, k=8, g=1, s=(20, 20), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 1), (1, 1)), dtype=dtype)
    assert _chosen(problem)[3] != 2
    assert (_chosen(problem, mma=True)[3] == 2) == (dtype != F32)
    assert _chosen(problem, mma=True, tf32=True)[3] == 2
    odd = make_problem(n=2, c=12, k=8, g=1, s=(20, 20), ks=(3, 3), stride=(1, 1),   # C/G % 8
                       dilation=(1, 1), padding=((1, 1), (1, 1)), dtype=dtype)
    assert _chosen(odd, mma=True, tf32=True)[3] == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,tile", NHWC_TILES, ids=lambda v: str(v))
def test_channels_last_tiles_match_reference(dtype, tile, mode):
    """The channels-last variant (tile variant 3: slices staged k-contiguous by 16-byte
    cp.async, float16 fragments by ldmatrix without .trans): every padding mode (cval
    filled by plain stores), ranks 1-4 across the modes, groups (the group's channel
    offset stays 16-byte aligned), bias, beta, M and K/G off the tile grid (the
    :data:`LEAN_SHAPES`)."""
    rank, problem = mode_case(mode, 4 * tile[2], dtype, shapes=LEAN_SHAPES)
    check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(rank),
                  bias=True, beta=1, tile=tile)


@pytest.mark.parametrize("dtype,tile", NHWC_TILES, ids=lambda v: str(v))
def test_channels_last_reverse_schedule_matches_normal(dtype, tile):
    problem = make_problem(n=2, c=2 * tile[2], k=10, g=2, s=(7, 9), ks=(3, 2), stride=(2, 1),
                           dilation=(1, 2), padding=((3, 1), (2, 2)), mode="wrap",
                           layout="channels_last", dtype=dtype)
    outs = [check_forward("implicit_gemm_fprop", problem, emu_loader(mode),
                          np.random.default_rng(12), bias=True, tile=tile)
            for mode in ("normal", "reverse")]
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("dtype", [F64, F32, F16])
def test_launcher_takes_channels_last_tiles_where_operands_allow(dtype, monkeypatch):
    """Without an explicit tile the launcher upgrades its tensor-core tile to variant 3 on
    contiguous channels-last operands, keeps variant 2 on a view whose channels are not
    contiguous (flipped), and refuses an explicit variant 3 it cannot run."""
    taken = spy_kernels(monkeypatch)
    flags = dict(mma=True, tf32=dtype == F32)
    for view, variant in (("contig", 3), ("flipped", 2)):   # C/G 16: no multistage K-tile
        problem = make_problem(n=2, c=16, k=16, g=1, s=(6, 5), ks=(3, 3), stride=(1, 1),
                               dilation=(1, 1), padding=((1, 1), (1, 1)), mode="reflect",
                               layout="channels_last", dtype=dtype)
        check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(3),
                      x_view=view, **flags)
        assert taken[-1][1][3] == variant, (view, taken)
    first = make_problem(n=1, c=32, k=16, g=1, s=(6, 5), ks=(3, 3), stride=(1, 1),
                         dilation=(1, 1), padding=((1, 1), (1, 1)), dtype=dtype)
    tile = next(t for d, t in NHWC_TILES if d == dtype)
    with pytest.raises(ValueError, match="channels-last"):
        check_forward("implicit_gemm_fprop", first, emu_loader(), np.random.default_rng(3),
                      tile=tile)
