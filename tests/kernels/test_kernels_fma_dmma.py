"""The multistage implicit-GEMM tiles (issue 26 items 3, 4): float32 FMA and float64 DMMA,
128x128x16, three cp.async stages (cuda_src/conv/implicit_gemm_fma_dmma.cu).

The emulated tests run small integers (exact in float32 FMA and in the DMMA atom) against
the NumPy reference, as the other tiles' tests do.  The address model mirrors the shared
layouts of the kernel (``FmaStageLayout``, ``KContiguousStageLayout``) and counts the
wavefronts of every fragment read and loader store of one warp: the FMA tile's A
fragment reads take 2 (the 128x128x8 tile's take 4), and no access is bank-conflicted.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._emulation import emulation_available
from cupyconv._kernels import launch, registry

from kernel_reference import MODES, check_forward, emu_loader, make_problem, mode_case

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
#: every compiled multistage tile, with its dtype
MS_TILES = [(dt, t) for dt in (F32, F64) for t in registry.gemm_tiles(dt)
            if t[3] in registry.FMA_DMMA_VARIANTS]
emulated = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")


@emulated
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,tile", MS_TILES, ids=lambda v: str(v))
def test_fma_dmma_tiles_match_reference(dtype, tile, mode):
    """Every padding mode; ranks 1-4 and both layouts across the modes; groups, two taps'
    worth of channel slices, flipped/strided views, bias, beta and cval."""
    layout = ("channels_first", "channels_last")[MODES.index(mode) % 2]
    rank, problem = mode_case(mode, 2 * 32, dtype, layout)
    check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(rank),
                  x_view="flipped", w_view="strided", bias=True, beta=1, tile=tile)


@emulated
@pytest.mark.parametrize("dtype,tile", MS_TILES, ids=lambda v: str(v))
def test_fma_dmma_reverse_schedule_matches_normal(dtype, tile):
    """A missing wait or barrier around the stages would change the result."""
    problem = make_problem(n=2, c=2 * 16, k=10, g=2, s=(7, 9), ks=(3, 2), stride=(2, 1),
                           dilation=(1, 2), padding=((3, 1), (2, 2)), mode="wrap", dtype=dtype)
    outs = [check_forward("implicit_gemm_fprop", problem, emu_loader(mode),
                          np.random.default_rng(11), bias=True, tile=tile)
            for mode in ("normal", "reverse")]
    np.testing.assert_array_equal(outs[0], outs[1])


def test_fma_dmma_tiles_are_chosen_where_they_fit():
    """Many rows and C/G % 16 == 0: the multistage tile (float64 only on a device with the
    DMMA atom; float32 without TF32); otherwise the present tiles."""
    big = dict(n=16, k=128, g=1, s=(24, 24), ks=(3, 3), stride=(1, 1), dilation=(1, 1),
               padding=((1, 1), (1, 1)))
    f64 = make_problem(c=32, dtype=F64, **big)
    f32 = make_problem(c=32, dtype=F32, **big)
    assert launch.implicit_gemm_tile(f64, mma=True) == (128, 128, 16, 6)
    assert launch.implicit_gemm_tile(f64, mma=False)[3] != 6
    assert launch.implicit_gemm_tile(f32) == (128, 128, 16, 5)
    assert launch.implicit_gemm_tile(f32, mma=True, tf32=True)[3] == 2
    odd = make_problem(c=24, dtype=F64, **big)            # C/G % 16 != 0
    assert launch.implicit_gemm_tile(odd, mma=True)[3] != 6
    small = make_problem(c=32, dtype=F32, **dict(big, s=(6, 6)))
    assert launch.implicit_gemm_tile(small)[3] != 5
    # the m16n8k16 tile (sm_90 only) is never the automatic choice, and has no 64-bit build
    assert all(launch.implicit_gemm_tile(make_problem(c=c, dtype=F64, **dict(big, n=n)),
                                         mma=True)[3] != 7 for c in (16, 32) for n in (1, 16))
    assert not registry.tile_index64((128, 128, 16, 7)) and registry.tile_index64((128, 128, 16, 6))
    x = np.zeros(f64.x_shape)
    w = np.zeros(f64.w_shape)
    with pytest.raises(ValueError, match="32-bit indices only"):
        launch.run_implicit_gemm_fprop(emu_loader(), f64, x, w, np.zeros(f64.y_shape),
                                       tile=(128, 128, 16, 7), index64=True)


def test_fma_dmma_names_and_shared_bytes():
    """The name spells stages, warp/thread tile and math; the host's dynamic shared size is
    the kernel's (it traps on another, p.aux[1])."""
    name = registry.name_expression("implicit_gemm_fma_dmma", F64, 3, False, (128, 128, 16, 6))
    assert name == ("implicit_gemm_fma_dmma<double, double, 3, int, 128, 128, 16, 3, 32, 64, "
                    "cc::MmaF64_m8n8k4>")
    assert registry.gemm_family((128, 128, 16, 5)) == "implicit_gemm_fma_dmma"
    assert registry.gemm_family((128, 128, 8, 1)) == "implicit_gemm_fprop"
    assert registry.gemm_dynamic_smem((128, 128, 16, 5), F32) == 48 * 1024
    assert registry.gemm_dynamic_smem((128, 128, 16, 6), F64) == 96 * 1024
    assert registry.name_expression("implicit_gemm_fma_dmma", F64, 2, False,
                                    (128, 128, 16, 7)).endswith("32, 64, cc::MmaF64_m16n8k16>")
    assert registry.gemm_dynamic_smem((128, 128, 8, 1), F32) == 0


# ---------------------------------------------------------------------------
# Address model of the shared layouts (banks of 4 bytes, 32 banks)
# ---------------------------------------------------------------------------

def fma_a(k, m, bm=128):
    """FmaStageLayout::a, element offset."""
    return k * bm + m


def fma_b(k, n, bn=128):
    """FmaStageLayout::b: n's bits 2-4 XOR (k & 7)."""
    return k * bn + (n ^ ((k & 7) << 2))


def kc_swz(r):
    """KContiguousStageLayout::swz."""
    return ((r & 1) << 2) | ((r >> 1) & 3)


def kc_row(r, k, bk=16):
    """KContiguousStageLayout::row (a(k, m) = row(m, k), b(k, n) = row(n, k))."""
    return r * bk + ((((k >> 1) ^ kc_swz(r)) << 1) | (k & 1))


def wavefronts(byte_addresses, width):
    """Shared-memory wavefronts of one warp access: lanes' ``width``-byte accesses at
    ``byte_addresses``; the largest number of distinct 4-byte words any bank serves, at
    least the access's bytes over 128 (lanes reading the same word share it)."""
    words = {a // 4 + i for a in byte_addresses for i in range(width // 4)}
    per_bank = {}
    for wd in words:
        per_bank.setdefault(wd % 32, set()).add(wd)
    return max(max(len(v) for v in per_bank.values()), -(-len(words) * 4 // 128))


def test_fma_fragment_reads_take_two_wavefronts():
    """The multistage FMA tile's A fragment reads (rows 4 tm.. and 64 + 4 tm..): 2 wavefronts
    per LDS.128; the 128x128x8 tile's (8 contiguous rows per thread, 32-byte lane stride): 4.
    B's (columns 4 tn.. and 64 + 4 tn.., swizzled): at most 2, for every k and warp."""
    for warp in range(8):
        lanes = range(32 * warp, 32 * warp + 32)
        for kk in range(16):
            for half in (0, 64):
                a = [4 * fma_a(kk, half + 4 * (t % 16)) for t in lanes]
                b = [4 * fma_b(kk, half + 4 * (t // 16)) for t in lanes]
                assert wavefronts(a, 16) == 2
                assert wavefronts(b, 16) <= 2
            old = [4 * (kk * 128 + 8 * (t % 16)) for t in lanes]   # 128x128x8: TM = 8 rows
            assert wavefronts(old, 16) == 4


def test_fma_loader_stores_are_conflict_free():
    """A: lane = row; B: lanes (k0 = lane % 8, n = lane // 8 + 4 warp), 4-byte cp.async."""
    for warp in range(8):
        lanes = range(32 * warp, 32 * warp + 32)
        for j in range(8):
            a = [4 * fma_a(t // 128 + 2 * j, t % 128) for t in lanes]
            assert wavefronts(a, 4) == 1
            r, q = j % 2, j // 2
            b = [4 * fma_b(t % 8 + 8 * r, t // 8 + 32 * q) for t in lanes]
            assert wavefronts(b, 4) == 1


def test_dmma_fragment_reads_and_stores_are_conflict_free():
    """The DMMA tile's LDS.128 of A (lane (g, t): row 8 i + g, k pair 2 t of half h) and of
    B: 4 wavefronts (512 bytes, the minimum); the gather's 8-byte stores of A (lane
    pairs share a row, k-rows lane % 2 + 2 j; consecutive rows would take 4) and B (lane: k = lane % 16, column lane // 16): 2 (256 bytes, the minimum).
    Every (row, k) of a stage is written exactly once by the A loader."""
    for warp in range(8):
        wm0, wn0 = (warp % 4) * 32, (warp // 4) * 64
        for h in range(2):
            for i in range(4):
                a = [8 * kc_row(wm0 + 8 * i + (ln >> 2), 8 * h + 2 * (ln & 3)) for ln in range(32)]
                assert wavefronts(a, 16) == 4
            for j in range(8):
                b = [8 * kc_row(wn0 + 8 * j + (ln >> 2), 8 * h + 2 * (ln & 3)) for ln in range(32)]
                assert wavefronts(b, 16) == 4
        lanes = range(32 * warp, 32 * warp + 32)
        for j in range(8):
            a = [8 * kc_row(t // 2, t % 2 + 2 * j) for t in lanes]
            assert wavefronts([8 * kc_row(t % 128, t // 128 + 2 * j) for t in lanes], 8) == 4
            assert wavefronts(a, 8) == 2
            b = [8 * kc_row(t // 16 + 16 * j, t % 16) for t in lanes]
            assert wavefronts(b, 8) == 2
    # without the swizzle the gather's stores (32 rows, one k) would hit one bank pair
    assert wavefronts([8 * (m * 16) for m in range(32)], 8) == 32
    # the kernel's A destinations: row(m, a_k + 2 j) == row(m, a_k) ^ 2 j
    assert all(kc_row(m, a_k + 2 * j) == kc_row(m, a_k) ^ (2 * j)
               for m in range(128) for a_k in (0, 1) for j in range(8))
    # every (row, k) of a stage has its own word
    assert sorted(kc_row(r, k) for r in range(128) for k in range(16)) == list(range(2048))
