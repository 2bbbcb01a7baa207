"""``cupyconv._compile.sass``: SASS parsing, the hot-loop finder and occupancy on fixed
snippets (no tools needed), and the floors the real kernels must keep (NVRTC 12.x +
``cuobjdump``, skipped with a message without them)."""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._compile import occupancy, sass, sass_report
from cupyconv._dtypes import BFLOAT16
from cupyconv._kernels import registry
from toolchain_support import nvrtc_available


def _line(addr: int, text: str) -> str:
    return f"        /*{addr:04x}*/  {text:<60} /* 0x000fe20000000f00 */\n" \
           "                                                          /* 0x000fe20000000f00 */"


def listing(name: str, body) -> str:
    """A ``cuobjdump -sass`` function listing of ``body`` (one instruction per 16 bytes)."""
    head = f"\n\tcode for sm_90\n\t\tFunction : {name}\n\t.headerflags\t@\"EF_CUDA_SM90\"\n"
    return head + "\n".join(_line(16 * i, t) for i, t in enumerate(body)) + "\n"


# Two nested loops.  Inner loop: header 0x50, back edge at 0xe0; its body has an out-of-line
# block at 0x120 (after EXIT) that jumps back to 0xb0 -- counted in the inner loop, and not a
# loop of its own.  Outer loop: header 0x40, back edge at 0x100.  The self-loop at 0x140
# after the last EXIT is unreachable padding.
NESTED = [
    "LDC R1, c[0x0][0x28] ;",                        # 0x00
    "S2R R0, SR_TID.X ;",                            # 0x10
    "ISETP.GE.AND P0, PT, R0, 0x10, PT ;",           # 0x20
    "@P0 EXIT ;",                                    # 0x30
    "MOV R2, RZ ;",                                  # 0x40  outer header
    "LDS.128 R4, [R0] ;",                            # 0x50  inner header
    "LDG.E.64.CONSTANT R8, desc[UR4][R2.64] ;",      # 0x60
    "FFMA R10, R4, R5, R10 ;",                       # 0x70
    "HFMA2.MMA R11, -RZ, RZ, 0, 0 ;",                # 0x80  move idiom, not math
    "DFMA R12, R8, R8, R12 ;",                       # 0x90
    "@!P1 BRA 0x120 ;",                              # 0xa0  to the out-of-line block
    "IADD3 R2, R2, 0x1, RZ ;",                       # 0xb0
    "ISETP.NE.AND P2, PT, R2, 0x8, PT ;",            # 0xc0
    "LDS.U16 R13, [R0+0x4] ;",                       # 0xd0
    "@P2 BRA 0x50 ;",                                # 0xe0  inner back edge
    "FFMA R14, R10, R10, R14 ;",                     # 0xf0
    "@P3 BRA 0x40 ;",                                # 0x100 outer back edge
    "EXIT ;",                                        # 0x110
    "LDL R20, [R1] ;",                               # 0x120 out-of-line block
    "BRA 0xb0 ;",                                    # 0x130 jumps back into the inner loop
    "BRA 0x140 ;",                                   # 0x140 padding self-loop
    "NOP ;",                                         # 0x150 dropped
]


@pytest.fixture
def nested():
    funcs = sass.parse_sass(listing("_Z6nestedPf", NESTED))
    return funcs["_Z6nestedPf"]


def test_parse_sass_fields(nested):
    assert len(nested) == len(NESTED) - 1              # the NOP is dropped
    first, exit_ = nested[0], nested[3]
    assert (first.address, first.predicate, first.opcode) == (0, "", "LDC")
    assert first.operands == ("R1", "c[0x0][0x28]")
    assert (exit_.predicate, exit_.base, exit_.unconditional) == ("P0", "EXIT", False)
    ldg = nested[6]
    assert ldg.base == "LDG" and ldg.modifiers == ("E", "64", "CONSTANT")
    assert ldg.operands == ("R8", "desc[UR4][R2.64]")
    assert nested[10].predicate == "!P1" and nested[10].branch_target == 0x120
    assert nested[19].branch_target == 0xb0 and nested[19].unconditional


def test_parse_sass_splits_functions():
    text = listing("_Z1av", ["EXIT ;"]) + listing("_Z1bv", ["MOV R0, RZ ;", "EXIT ;"])
    funcs = sass.parse_sass(text)
    assert list(funcs) == ["_Z1av", "_Z1bv"]
    assert [len(v) for v in funcs.values()] == [1, 2]


@pytest.mark.parametrize("text, bits", [
    ("LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;", 128), ("LDG.E R4, desc[UR4][R2.64] ;", 32),
    ("LDG.E.U16.CONSTANT R4, desc[UR4][R2.64] ;", 16), ("LDS R4, [R0] ;", 32),
    ("LDS.64 R4, [R0] ;", 64), ("LDS.128 R4, [R0] ;", 128), ("LDS.U8 R4, [R0] ;", 8),
    ("LDSM.16.M88.4 R4, [R0] ;", 128), ("LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;", 128),
])
def test_width_bits(text, bits):
    (ins,) = sass.parse_sass(listing("f", [text]))["f"]
    assert ins.width_bits == bits


@pytest.mark.parametrize("text, math", [
    ("FFMA R1, R2, R3, R1 ;", True), ("DFMA R2, R4, R6, R2 ;", True),
    ("FFMA.FTZ R1, R2, R3, R1 ;", True), ("HFMA2 R1, R2, R3, R1 ;", True),
    ("HMMA.16816.F32 R4, R8, R12, R4 ;", True), ("DMMA.884 R4, R8, R12, R4 ;", True),
    ("HFMA2.MMA R5, -RZ, RZ, 1.875, 0 ;", False), ("FMUL R1, R2, R3 ;", False),
    ("FADD R1, R2, R3 ;", False), ("IMAD R1, R2, R3, R1 ;", False),
])
def test_math_opcodes(text, math):
    (ins,) = sass.parse_sass(listing("f", [text]))["f"]
    assert ins.is_math is math


def test_find_loops_natural_bodies(nested):
    loops = {lp.header: lp for lp in sass.find_loops(nested)}
    assert sorted(loops) == [0x40, 0x50]               # not 0xb0 (no dominance), not 0x140
    inner, outer = loops[0x50], loops[0x40]
    addrs = sorted(nested[i].address for i in inner.body)
    assert addrs == list(range(0x50, 0xf0, 0x10)) + [0x120, 0x130]   # out-of-line block in
    assert inner.body < outer.body and inner.latches == (0xe0,)
    assert {nested[i].address for i in outer.body} >= {0x40, 0xf0, 0x100}


def test_hot_loop_is_innermost_with_most_math(nested):
    lp = sass.hot_loop(nested)
    assert lp.header == 0x50                            # the outer loop holds more math but nests it
    stats = sass.loop_stats(lp.instructions(nested))
    assert (stats.instructions, stats.math, stats.shared_loads) == (12, 2, 2)
    assert stats.math_share == pytest.approx(2 / 12)
    assert stats.math_per_shared_load == pytest.approx(1.0)
    assert stats.global_load_bits == (64,) and stats.shared_load_bits == (16, 128)
    assert (stats.local_loads, stats.local_stores) == (1, 0)


def test_hot_loop_prefers_more_math_then_smaller_body():
    body = [
        "MOV R0, RZ ;",                       # 0x00
        "FFMA R1, R2, R3, R1 ;",              # 0x10 loop A: 1 FFMA
        "@P0 BRA 0x10 ;",                     # 0x20
        "FFMA R1, R2, R3, R1 ;",              # 0x30 loop B: 2 FFMA (the hot one)
        "FFMA R4, R2, R3, R4 ;",              # 0x40
        "@P1 BRA 0x30 ;",                     # 0x50
        "FFMA R1, R2, R3, R1 ;",              # 0x60 loop C: 2 FFMA, larger
        "IADD3 R5, R5, 0x1, RZ ;",            # 0x70
        "FFMA R4, R2, R3, R4 ;",              # 0x80
        "@P2 BRA 0x60 ;",                     # 0x90
        "EXIT ;",
    ]
    instrs = sass.parse_sass(listing("f", body))["f"]
    assert sass.hot_loop(instrs).header == 0x30


def test_hot_loop_memory_criterion():
    body = [
        "MOV R0, RZ ;",                       # 0x00
        "LDG.E R4, desc[UR4][R2.64] ;",       # 0x10 gather loop: the data-movement hot loop
        "FADD R5, R5, R4 ;",                  # 0x20
        "@P0 BRA 0x10 ;",                     # 0x30
        "FFMA R5, R6, R7, R5 ;",              # 0x40 epilogue FMA in the outer loop
        "STG.E desc[UR4][R8.64], R5 ;",       # 0x50
        "@P1 BRA 0x00 ;",                     # 0x60
        "EXIT ;",
    ]
    instrs = sass.parse_sass(listing("f", body))["f"]
    assert sass.hot_loop(instrs, "math").header == 0x00
    assert sass.hot_loop(instrs, "memory").header == 0x10
    assert sass.hot_loop(instrs).header == 0x00         # auto: math wherever there is some
    with pytest.raises(ValueError, match="criterion"):
        sass.hot_loop(instrs, "bogus")


def test_never_executed_placeholders_are_not_counted():
    """ptxas pads an LDGSTS with ``@!PT LDS RZ, [RZ]`` placeholders that never issue: they
    are no shared loads of the loop."""
    body = ["MOV R2, RZ ;", "@!PT LDS RZ, [RZ] ;", "@!PT LDS RZ, [RZ] ;",
            "@P5 LDGSTS.E [R83], desc[UR14][R68.64], !P0 ;", "LDS R4, [R0] ;",
            "FFMA R10, R4, R4, R10 ;", "@P2 BRA 0x10 ;", "EXIT ;"]
    instrs = sass.parse_sass(listing("_Z1fv", body))["_Z1fv"]
    stats = sass.loop_stats(sass.hot_loop(instrs).instructions(instrs))
    assert stats.shared_loads == 1 and stats.instructions == 4 and stats.global_loads == 1


def test_no_loop_and_subroutine_loops_ignored():
    body = [
        "CALL.REL.NOINC 0x30 ;",              # 0x00
        "FFMA R1, R2, R3, R1 ;",              # 0x10
        "EXIT ;",                             # 0x20
        "FFMA R1, R2, R3, R1 ;",              # 0x30 subroutine with a loop: not the kernel's
        "@P0 BRA 0x30 ;",                     # 0x40
        "RET.REL.NODEC R20 0x0 ;",            # 0x50
    ]
    instrs = sass.parse_sass(listing("f", body))["f"]
    assert sass.find_loops(instrs) == []
    assert sass.hot_loop(instrs) is None


@pytest.mark.parametrize("arch, regs, smem, ctas", [
    ("sm_90", 32, 0, 8),          # warp-limited: 64 warps / 8
    ("sm_90", 64, 0, 4),          # 2048 regs/warp: 8 warps per sub-partition
    ("sm_90", 72, 0, 3),          # 2304 regs/warp: 7 per sub-partition -> 28 warps
    ("sm_90", 128, 0, 2),
    ("sm_90", 255, 0, 1),         # 8192 regs/warp after rounding: 2 per sub-partition
    ("sm_90", 64, 100 * 1024, 2),  # 101 KB per CTA in 228 KB
    ("sm_80", 64, 100 * 1024, 1),  # ... in 164 KB
    ("sm_80", 40, 48 * 1024, 3),   # 49 KB per CTA in 164 KB
    ("sm_90", 32, 228 * 1024, 0),  # over the 227 KB a CTA may have
    ("sm_86", 32, 0, 6),           # 48 warps per SM
])
def test_ctas_per_sm(arch, regs, smem, ctas):
    assert occupancy.ctas_per_sm(arch, regs, smem, threads=256) == ctas


def test_ctas_per_sm_small_blocks_hit_the_cta_limit():
    assert occupancy.ctas_per_sm("sm_90", 16, 0, threads=32) == 32
    assert occupancy.ctas_per_sm("sm_86", 16, 0, threads=32) == 16


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_reference_dynamic_smem_is_the_launchers(rank, dtype):
    """The report's direct-kernel shared memory equals what the launcher allocates for a
    3^R kernel at stride 1 (the toolchain may not import the launcher; this pins them)."""
    from cupyconv._kernels import launch
    from cupyconv.core.problem import ConvProblem
    problem = ConvProblem.create(x_shape=(1, 1) + (40,) * rank, w_shape=(1, 1) + (3,) * rank,
                                 dtype=np.dtype(dtype))
    for inst in registry.instantiations(("direct_conv",), ranks=(rank,), dtypes=(dtype,),
                                        index64=(False,)):
        chunk = (3, 3) if rank >= 2 else (1, 3)
        expected = launch.direct_smem_layout(problem, inst.tile, *chunk)[1]
        assert sass_report.reference_dynamic_smem(inst) == expected, inst.name
    gemm = registry.instantiations(("implicit_gemm_fprop",), ranks=(rank,), dtypes=(dtype,))[0]
    assert sass_report.reference_dynamic_smem(gemm) == 0


def test_cli_rejects_bad_flags(capsys):
    with pytest.raises(SystemExit) as err:
        sass_report.main(["--arch", "90"])
    assert err.value.code == 2
    with pytest.raises(SystemExit):
        sass_report.main(["--ranks", "0"])


# ---------------------------------------------------------------------------
# The floors of the real kernels (NVRTC 12.x + cuobjdump)
# ---------------------------------------------------------------------------

def _tools_reason():
    if not nvrtc_available():
        return "NVRTC unavailable"
    return sass.disassembler_reason()


@pytest.fixture(scope="module")
def rank3_float32_sm90(tmp_path_factory):
    """Every family's rank-3 float32 kernels on sm_90 (4 NVRTC programs, ~5 s)."""
    why = _tools_reason()
    if why is not None:
        pytest.skip(f"SASS floors need NVRTC and the disassembler: {why}")
    from cupyconv._compile import nvrtc_version
    if nvrtc_version()[0] != 12:
        pytest.skip(f"the floors are pinned for NVRTC 12.x (CI); this is {nvrtc_version()}")
    root = tmp_path_factory.mktemp("sass-cache")
    reports = sass_report.analyze("sm_90", ranks=(3,), dtypes=("float32",), occupancy_archs=("sm_90",),
                           root=root)
    return {r.name: r for r in reports}


def test_every_kernel_has_a_hot_loop(rank3_float32_sm90):
    expected = [i for i in registry.instantiations(ranks=(3,), dtypes=("float32",))
                if registry.FAMILIES[i.family].builds_for("sm_90")]   # not the sm_90a family
    assert sorted(rank3_float32_sm90) == sorted(i.name for i in expected)
    for r in rank3_float32_sm90.values():
        assert r.loop is not None and r.loop.instructions > 0, r.name
        assert r.registers > 0 and r.ctas["sm_90"] >= 1, r


def test_no_spills(rank3_float32_sm90):
    assert {n: r.spill_bytes for n, r in rank3_float32_sm90.items() if r.spill_bytes} == {}


@pytest.mark.parametrize("family", sorted(registry.FAMILIES))
def test_no_local_memory_in_hot_loops(rank3_float32_sm90, family):
    """No LDL/STL in any hot loop (col2vol had them until its odometer was unrolled)."""
    bad = {n: (r.loop.local_loads, r.loop.local_stores) for n, r in rank3_float32_sm90.items()
           if r.family == family and (r.loop.local_loads or r.loop.local_stores)}
    assert bad == {}


def test_math_in_compute_hot_loops(rank3_float32_sm90):
    """The compute kernels' hot loop is the one with their FMAs: the implicit GEMM's
    K-loop holds BM*BN*BK / threads FFMA per thread (the tensor-core tiles' MMA counts:
    test_tensor_core_tiles_run_mma)."""
    for r in rank3_float32_sm90.values():
        if r.family == "implicit_gemm_fprop" and r.tile[3] < 2:
            bm, bn, bk = r.tile[:3]
            assert r.loop.math == bm * bn * bk // registry.THREADS, r.name
        elif r.family == "direct_conv":
            assert r.loop.math > 0, r.name


def test_main_tiles_meet_the_speed_floors(rank3_float32_sm90):
    """Issue 11's acceptance, on the tiles the launchers prefer (32-bit indices): the
    implicit GEMM's hot-loop math share >= 0.60 and the direct kernel's math per shared
    load >= 4, each with >= 2 resident CTAs per SM on sm_90."""
    first = registry.gemm_tiles("float32")[0]
    gemm = registry.name_expression(registry.gemm_family(first), "float32", 3, False, first)
    direct = registry.name_expression("direct_conv", "float32", 3, False, registry.direct_tiles(3)[0])
    g, d = rank3_float32_sm90[gemm], rank3_float32_sm90[direct]
    assert g.loop.math / g.loop.instructions >= 0.60, g
    assert d.loop.math / d.loop.shared_loads >= 4, d
    assert g.ctas["sm_90"] >= 2 and d.ctas["sm_90"] >= 2, (g.ctas, d.ctas)


#: (dtype, atom M x N x K, its SASS opcode, the FMA opcode it replaces)
_TC_ATOMS = {"float64": ((8, 8, 4), "DMMA", "DFMA"), "float32": ((16, 8, 8), "HMMA", "FFMA"),
             "float16": ((16, 8, 16), "HMMA", "FFMA")}


def _sm90_rank3(root, family, dtype, tiles):
    """``(tile, SASS instructions, ptxas usage)`` of each 32-bit-index rank-3 ``tile`` of
    ``family`` built for sm_90 into ``root`` (skips without NVRTC or the disassembler)."""
    why = _tools_reason()
    if why is not None:
        pytest.skip(f"SASS needs NVRTC and the disassembler: {why}")
    from cupyconv._compile import compile_group
    from cupyconv._compile.build import parse_ptxas_log
    names = [registry.name_expression(family, dtype, 3, False, t) for t in tiles]
    path, meta, _, _ = compile_group(registry.FAMILIES[family].source, names, "sm_90", root=root)
    disassembled, usage = sass.disassemble(path), parse_ptxas_log(meta["log"])
    return [(tile, disassembled[meta["lowered"][name]], usage[meta["lowered"][name]])
            for tile, name in zip(tiles, names)]


@pytest.mark.parametrize("dtype", sorted(_TC_ATOMS))
def test_tensor_core_tiles_run_mma(tmp_path, dtype):
    """Issue 12: every tensor-core tile's hot loop is the dtype's MMA (DMMA for float64,
    HMMA for TF32 and float16: one atom per warp per (atom M x N x K) of the slice, no
    FMA), float16's fragments through LDSM, float64's and TF32's operands through the
    cp.async pipeline (LDGSTS, one barrier per slice), the channels-last variant's through
    two 16-byte LDGSTS per thread; zero spills; two CTAs per SM on sm_90."""
    from cupyconv._compile.occupancy import ctas_per_sm
    (am, an, ak), mma, fma = _TC_ATOMS[dtype]
    tiles = [t for t in registry.gemm_tiles(dtype) if 2 <= t[3] <= 3]
    for tile, instrs, u in _sm90_rank3(tmp_path, "implicit_gemm_fprop", dtype, tiles):
        ops = [i.opcode.split(".")[0] for i in sass.hot_loop(instrs, "math").instructions(instrs)]
        bm, bn, bk = tile[:3]
        assert ops.count(mma) == bm * bn * bk // (am * an * ak) // 8 and fma not in ops, (tile, ops)
        if dtype == "float16":
            assert ops.count("LDSM") == (bm // 2 // am + bn // 4 // an) * bk // ak, (tile, ops)
        loop = sass.hot_loop(instrs, "math").instructions(instrs)
        if tile[3] == 3:   # channels-last: one 16-byte cp.async of A and one of B per thread
            copies = [i for i in loop if i.base == "LDGSTS"]
            assert len(copies) == 2 and {i.width_bits for i in copies} == {128}, (tile, ops)
            assert "LDG" not in ops and ops.count("BAR") == 1, (tile, ops)
        elif dtype != "float16":   # float64 / TF32: cp.async, one LDGSTS per element, no LDG
            assert ops.count("LDGSTS") == (bm + bn) * bk // registry.THREADS, (tile, ops)
            assert "LDG" not in ops and ops.count("BAR") == 1, (tile, ops)
        assert u["spill_stores"] == u["spill_loads"] == 0, (tile, u)
        assert ctas_per_sm("sm_90", u["registers"], u["smem_bytes"], registry.THREADS) >= 2, (tile, u)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_multistage_tiles_meet_the_issue_26_floors(tmp_path, dtype):
    """Issue 26: one K-tile of the multistage tiles' hot loop is (BM/2/16) x (BN/2/8) atoms
    per warp per k-step, BK / atom K k-steps; one ldmatrix.x4 per A atom and per pair of B
    atoms per k-step; (BM + BN) x 8 / 128 16-byte LDGSTS per thread; one barrier.  The
    128x128 tiles' loop is one K-tile, the small tiles' is one K-tile per stage (unrolled,
    so the stage addresses are constants).  Every tile: <= 4 instructions per HMMA
    (placeholders not counted), zero spills and >= 2 CTAs per sm_90 SM with its dynamic
    shared memory.  bfloat16 holds float16's floors (the same loop, the bf16 atom)."""
    from cupyconv._compile import nvrtc_version
    from cupyconv._compile.occupancy import ctas_per_sm
    if dtype == "bfloat16" and BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes (the bf16 extra)")
    (am, an, ak), mma, fma = _TC_ATOMS["float16" if dtype == "bfloat16" else dtype]
    tiles = [t for t in registry.gemm_tiles(dtype) if t[3] == registry.MULTISTAGE]
    for tile, instrs, u in _sm90_rank3(tmp_path, "implicit_gemm_multistage", dtype, tiles):
        loop = sass.hot_loop(instrs, "math").instructions(instrs)
        ops = [i.base for i in loop]
        bm, bn, bk = tile[:3]
        steps = bk // ak
        ktiles = 1 if bm * bn >= 128 * 128 else registry.multistage_stages(tile)
        assert ops.count(mma) == (bm // 2 // am) * (bn // 2 // an) * steps * ktiles and fma not in ops, tile
        assert ops.count("LDSM") == (bm // 2 // am + bn // 2 // an // 2) * steps * ktiles, (tile, ops)
        copies = [i for i in loop if i.base == "LDGSTS"]
        assert len(copies) == (bm + bn) * 8 // registry.MULTISTAGE_THREADS * ktiles, (tile, ops)
        assert {i.width_bits for i in copies} == {128} and ops.count("BAR") == ktiles, (tile, ops)
        stats = sass.loop_stats(loop)
        if nvrtc_version()[0] == 12:
            assert stats.instructions <= 4 * ops.count(mma), (tile, stats)
        assert stats.local_loads == stats.local_stores == 0, (tile, stats)
        assert u["spill_stores"] == u["spill_loads"] == 0, (tile, u)
        smem = u["smem_bytes"] + registry.multistage_smem_bytes(tile)
        assert ctas_per_sm("sm_90", u["registers"], smem, registry.MULTISTAGE_THREADS) >= 2, (tile, u)


def test_vector_loads_where_designed(rank3_float32_sm90):
    """16-byte shared loads (LDS.128) where the design has them: the direct kernel's 2-D
    tiles read their input windows and the implicit GEMM its contiguous A/B fragments with
    them.  Global loads are scalar gathers in every family on channels-first data (the
    float64/TF32 tensor-core tiles copy them with 4/8-byte cp.async); the channels-last
    tensor-core tiles (variant 3) copy 16 bytes (LDGSTS.128).  (The tensor-core tiles
    read one fragment element per lane per register, or LDSM.)"""
    for r in rank3_float32_sm90.values():
        if (r.family == "direct_conv" and r.tile[0] > 1) or (
                r.family == "implicit_gemm_fprop" and r.tile[3] < 2):
            assert 128 in r.loop.shared_load_bits, (r.name, r.loop)
        if r.family == "implicit_gemm_fprop" and r.tile[3] == 3:
            assert r.loop.global_load_bits == (128,), (r.name, r.loop)


def test_resource_tables_from_build_reports():
    from cupyconv._compile.build import KernelReport
    gemm = registry.name_expression("implicit_gemm_fprop", "float32", 3, False, (128, 64, 8, 0))
    direct = registry.name_expression("direct_conv", "float32", 3, False, registry.direct_tiles(3)[0])
    other = registry.name_expression("direct_conv", "float32", 2, False, registry.direct_tiles(2)[0])
    reports = [KernelReport("implicit_gemm_fprop", gemm, "sm_80", 100, 12288, 0, 0, 0, True, 0.0),
               KernelReport("implicit_gemm_fprop", gemm, "sm_90", 112, 12288, 0, 0, 0, True, 0.0),
               KernelReport("direct_conv", direct, "sm_90", 128, 0, 0, 4, 4, True, 0.0),
               KernelReport("direct_conv", other, "sm_90", 140, 0, 16, 0, 0, True, 0.0)]
    text = sass_report.format_resource_tables(reports)
    assert "Totals: 4 kernels; spill bytes over all kernels = 8; max static smem = 12288 B" in text
    assert "| direct_conv | sm_90 | 140 | 0 | 16 | 8 |" in text
    assert f"| `{gemm}` | 100 / 12288 / 0 | 112 / 12288 / 0 |" in text
    assert f"| `{direct}` | - | 128 / 0 / 8 |" in text
    assert other not in text                      # rank 2 is not a representative row


def test_main_dispatches_sass():
    from cupyconv.__main__ import main
    with pytest.raises(SystemExit) as err:
        main(["sass", "--arch", "sm90"])
    assert err.value.code == 2
