"""SASS floors of the multistage implicit-GEMM tiles (issue 26 items 3, 4), sm_90, rank 3,
32-bit indices, NVRTC 12 (the figures of docs/kernels_sass.md)."""
from __future__ import annotations

import pytest

from cupyconv._compile import sass
from cupyconv._kernels import registry

from toolchain_support import nvrtc_available

FAMILY = "implicit_gemm_fma_dmma"


@pytest.fixture(scope="module")
def fma_dmma_sm90(tmp_path_factory):
    """(instructions, usage) of both multistage tiles' rank-3 int kernels on sm_90."""
    from cupyconv._compile import compile_group, nvrtc_version
    from cupyconv._compile.build import parse_ptxas_log
    if not nvrtc_available():
        pytest.skip("NVRTC unavailable")
    why = sass.disassembler_reason()
    if why is not None:
        pytest.skip(f"SASS needs the disassembler: {why}")
    if nvrtc_version()[0] != 12:
        pytest.skip(f"the floors are pinned for NVRTC 12.x (CI); this is {nvrtc_version()}")
    root = tmp_path_factory.mktemp("sass-multistage")
    out = {}
    for dtype in ("float32", "float64"):
        for tile in registry.tiles_for(FAMILY, dtype, 3):
            name = registry.name_expression(FAMILY, dtype, 3, False, tile)
            path, meta, _, _ = compile_group(registry.FAMILIES[FAMILY].source, [name], "sm_90",
                                             root=root)
            symbol = meta["lowered"][name]
            out[tile] = (tile, sass.disassemble(path)[symbol], parse_ptxas_log(meta["log"])[symbol])
    return out


def _hot(instrs):
    loop = sass.hot_loop(instrs, "math").instructions(instrs)
    return loop, sass.loop_stats(loop), [i.opcode.split(".")[0] for i in loop]


def _two_ctas(tile, usage):
    """Both limits of 2 CTAs per sm_90 SM: the tile's registers at its block size, and its
    dynamic shared memory (72 KiB: 3 stages of (128 + 64) x 16 doubles)."""
    from cupyconv._compile.occupancy import ctas_per_sm
    threads = registry.block_threads(FAMILY, tile)
    smem = registry.gemm_dynamic_smem(tile, "float64")
    assert threads == 128 and smem == 73728
    assert ctas_per_sm("sm_90", 32, smem, threads) >= 2                 # shared memory
    assert ctas_per_sm("sm_90", usage["registers"], 0, threads) >= 2, usage   # registers
    assert ctas_per_sm("sm_90", usage["registers"], smem, threads) >= 2, usage


def test_dmma_tile_hot_loop(fma_dmma_sm90):
    """float64 128x64x16 (4 warps of 32x64): one slice per loop trip, 128 DMMA per warp (16 k
    x 32 x 64 / (8 x 8 x 4)), at most 4 instructions per DMMA (3.4 with NVRTC 12.9: the
    copies' addresses are running pointers, the fragment reads a base and constant offsets),
    24 LDS.128 (4 A and 8 B fragments per 8-deep half), one 8-byte LDGSTS per element
    copied (16 of A and 8 of B per thread), one barrier, no DFMA, no LDG, no local memory,
    no spills, and 2 CTAs per sm_90 SM (255 registers x 128 threads, 72 KiB)."""
    tile, instrs, usage = fma_dmma_sm90[(128, 64, 16, 6)]
    loop, st, ops = _hot(instrs)
    assert ops.count("DMMA") == 128 and "DFMA" not in ops, ops
    assert st.instructions <= 4 * ops.count("DMMA"), st
    assert st.shared_loads == 24 and st.shared_load_bits == (128,), st
    assert ops.count("LDGSTS") == 24 and "LDG" not in ops and ops.count("BAR") == 1, ops
    assert st.local_loads == st.local_stores == 0
    assert usage["spill_stores"] == usage["spill_loads"] == 0, usage
    _two_ctas(tile, usage)


def test_fma_tile_hot_loop(fma_dmma_sm90):
    """float32 FMA 128x128x16: FFMA in the hot loop with 16 per LDS.128 (8 x 8 outputs per
    4 vector loads), math share >= 0.8 (the k-step pointers step a row: 149 instructions
    per 128 FFMA with NVRTC 12.9, 0.86; 0.74 when each k-step recomputed its addresses), no
    local memory, no spills, 2 CTAs per SM on sm_90 (128 registers, 48 KiB)."""
    from cupyconv._compile.occupancy import ctas_per_sm
    tile, instrs, usage = fma_dmma_sm90[(128, 128, 16, 5)]
    loop, st, ops = _hot(instrs)
    assert ops.count("FFMA") == st.math and st.math % 64 == 0 and st.math >= 128, ops
    assert st.shared_load_bits == (128,) and st.math == 16 * st.shared_loads, st
    assert st.math / st.instructions >= 0.8, st
    assert st.local_loads == st.local_stores == 0
    assert usage["spill_stores"] == usage["spill_loads"] == 0, usage
    smem = registry.gemm_dynamic_smem(tile, "float32")
    assert ctas_per_sm("sm_90", usage["registers"], smem, registry.THREADS) >= 2, usage


def test_dmma_k16_tile_hot_loop(fma_dmma_sm90):
    """The same tile on the sm_90 float64 m16n8k16 atom (DMMA.16x8x16, 8x the work of one
    m8n8k4): 16 per warp per slice, the same 24 LDS.128 and 24 LDGSTS, at most 4
    instructions per m8n8k4's worth of work (32 per DMMA.16x8x16; 22 with NVRTC 12.9), no
    spills, 2 CTAs per sm_90 SM."""
    tile, instrs, usage = fma_dmma_sm90[(128, 64, 16, 7)]
    loop, st, ops = _hot(instrs)
    dmma = [i for i in loop if i.base == "DMMA"]
    assert len(dmma) == 16 and all("16x8x16" in i.opcode for i in dmma), ops
    assert st.instructions <= 4 * 8 * len(dmma), st
    assert st.shared_loads == 24 and st.shared_load_bits == (128,), st
    assert ops.count("LDGSTS") == 24 and "LDG" not in ops and ops.count("BAR") == 1, ops
    assert st.local_loads == st.local_stores == 0
    assert usage["spill_stores"] == usage["spill_loads"] == 0, usage
    _two_ctas(tile, usage)


@pytest.mark.parametrize("variant", sorted(registry.FMA_DMMA_CHANNELS_LAST))
def test_dmma_channels_last_tile_hot_loop(fma_dmma_sm90, variant):
    """The channels-last twins (9: m8n8k4, 10: m16n8k16) of the DMMA tiles: the same
    fragments (24 LDS.128), 12 16-byte LDGSTS per thread per slice (8 of A, 4 of B: two
    channels each) where the channels-first tiles copy 24 of 8 bytes, fewer instructions
    per DMMA than their channels-first tiles (NVRTC 12.9: 356 for 128 DMMA, 2.78 per DMMA,
    against 430; 276 for 16 DMMA.16x8x16, 2.16 per m8n8k4's work, against 350), no spills,
    2 CTAs per sm_90 SM."""
    tile, instrs, usage = fma_dmma_sm90[(128, 64, 16, variant)]
    loop, st, ops = _hot(instrs)
    _, base, _ = _hot(fma_dmma_sm90[(128, 64, 16, registry.FMA_DMMA_CHANNELS_LAST[variant])][1])
    dmma = [i for i in loop if i.base == "DMMA"]
    work = len(dmma) * (8 if variant == 10 else 1)          # in m8n8k4 DMMA
    assert work == 128, ops
    assert st.instructions <= 3 * work and st.instructions < base.instructions, (st, base)
    assert st.shared_loads == 24 and st.shared_load_bits == (128,), st
    copies = [i for i in loop if i.base == "LDGSTS"]
    assert len(copies) == 12 and all(i.opcode.endswith(".128") for i in copies), ops
    assert "LDG" not in ops and ops.count("BAR") == 1, ops
    assert st.local_loads == st.local_stores == 0
    assert usage["spill_stores"] == usage["spill_loads"] == 0, usage
    _two_ctas(tile, usage)
