"""The wgmma implicit GEMM (cuda_src/conv/implicit_gemm_wgmma.cu) under NVRTC 12 and 13 for
sm_90a: every kernel of the float16 and float32 rank-2 groups compiles without spills and
without ptxas's "wgmma ... serialized" performance warning (no call in the consumer
warpgroups); where a disassembler is here, the hot loop is the consumers' K-tile: the
mbarrier wait (SYNCS), WARPGROUP.ARRIVE, BK / k HGMMA of the tile's N (64x128x16 for float16,
64x128x8.TF32 for TF32), WARPGROUP.DEPBAR (wait_group 1), and no CALL."""
from __future__ import annotations

import textwrap

import pytest
from toolchain_support import run_with_nvrtc

from cupyconv._kernels import registry

SOURCE = registry.FAMILIES["implicit_gemm_wgmma"].source
#: dtype -> the HGMMA opcode of its 128x128 tile, and of its 128x64 tile
OPCODES = {"float16": ("HGMMA.64x128x16.F32", "HGMMA.64x64x16.F32"),
           "float32": ("HGMMA.64x128x8.F32.TF32", "HGMMA.64x64x8.F32.TF32")}

_BODY = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from cupyconv._compile import _nvrtc
    from cupyconv._compile.build import compile_options, parse_ptxas_log
    from cupyconv._kernels import registry
    from cupyconv._paths import cuda_src_dir
    out, result = Path(sys.argv[1]), {"version": list(_nvrtc.nvrtc_version())}
    for dtype in ("float16", "float32"):
        insts = registry.group_instantiations(sys.argv[2], dtype, 2)
        names = [i.name for i in insts]
        path = cuda_src_dir() / sys.argv[2]
        opts = compile_options("sm_90a") + (f"-I{cuda_src_dir()}", f"-I{path.parent}")
        binary, log, lowered = _nvrtc.compile_program(path.read_text(), str(path), opts, names)
        (out / f"{dtype}.cubin").write_bytes(binary)
        usage = parse_ptxas_log(log)
        result[dtype] = {"lowered": lowered, "tiles": {i.name: list(i.tile) for i in insts},
                         "spills": {n: usage[s]["spill_stores"] + usage[s]["spill_loads"]
                                    for n, s in lowered.items()},
                         "warnings": [l for l in log.splitlines() if "warn" in l.lower()
                                      or "serializ" in l.lower()]}
    print(json.dumps(result))
""")


@pytest.mark.parametrize("major", [12, 13])
def test_wgmma_kernels_compile_to_hgmma_hot_loops(major, tmp_path):
    out = run_with_nvrtc(major, _BODY, str(tmp_path), SOURCE)
    from cupyconv._compile import cache, sass
    for dtype, (wide, narrow) in OPCODES.items():
        res = out[dtype]
        assert len(res["lowered"]) == 4                       # 2 tiles x 2 index types
        assert {n: s for n, s in res["spills"].items() if s} == {}
        assert res["warnings"] == []
        cubin = (tmp_path / f"{dtype}.cubin").read_bytes()
        assert cache.validate_binary(cubin, "sm_90a", res["lowered"].values()) is None
        if sass.disassembler_reason() is not None:
            continue
        funcs = sass.disassemble(tmp_path / f"{dtype}.cubin")
        for name, symbol in res["lowered"].items():
            body = sass.hot_loop(funcs[symbol], "math").instructions(funcs[symbol])
            ops = [i.opcode for i in body]
            want = wide if res["tiles"][name][1] == 128 else narrow
            assert sum(op.startswith(want) for op in ops) == 4, (name, ops)   # BK / k k-steps
            assert "WARPGROUP.ARRIVE" in ops and any(op.startswith("WARPGROUP.DEPBAR") for op in ops)
            assert any(op.startswith("SYNCS") for op in ops), name          # the mbarriers
            assert not any(op.startswith("CALL") for op in ops), name
    if sass.disassembler_reason() is not None:
        pytest.skip(f"compiled; SASS not checked: {sass.disassembler_reason()}")
