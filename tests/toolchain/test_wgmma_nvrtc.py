"""The warpgroup-MMA API (cuda_src/common/wgmma.cuh) under NVRTC: the kernels the emulator
tests run (tests/emulation/kernels/wgmma.cu) compile for sm_90a with NVRTC 12 and 13 to the
real instructions (HGMMA, WARPGROUP.ARRIVE / DEPBAR, FENCE.VIEW.ASYNC, SYNCS for the
mbarriers when a disassembler is there), and using the API for sm_90 is a compile-time
error naming sm_90a -- one spelling for a kernel on both sides."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from toolchain_support import run_with_nvrtc

KERNEL = Path(__file__).resolve().parents[1] / "emulation" / "kernels" / "wgmma.cu"

_BODY = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path[:0] = ["tests/emulation", "tests"]
    from test_emu_wgmma import NAMES
    from cupyconv._compile import _nvrtc
    from cupyconv._compile.build import compile_options, parse_ptxas_log
    from cupyconv._paths import cuda_src_dir
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    def build(arch, names):
        opts = compile_options(arch) + (f"-I{cuda_src_dir()}",)
        return _nvrtc.compile_program(source.read_text(), str(source), opts, names)
    binary, log, lowered = build("sm_90a", NAMES)
    out.write_bytes(binary)
    usage = parse_ptxas_log(log)
    try:
        build("sm_90", ["wg_ss<1, 16, 0, 0>"])
        refused = ""
    except _nvrtc.KernelCompileError as exc:
        refused = exc.log
    print(json.dumps({"version": list(_nvrtc.nvrtc_version()), "lowered": lowered, "names": NAMES,
                      "spills": {n: usage[s]["spill_stores"] + usage[s]["spill_loads"]
                                 for n, s in lowered.items()},
                      "refused": refused}))
""")


@pytest.mark.parametrize("major", [12, 13])
def test_wgmma_api_compiles_for_sm_90a(major, tmp_path):
    cubin = tmp_path / "wgmma.cubin"
    out = run_with_nvrtc(major, _BODY, str(KERNEL), str(cubin))
    assert set(out["lowered"]) == set(out["names"]) and len(out["names"]) == 15
    assert {n: s for n, s in out["spills"].items() if s} == {}
    assert "cc::wgmma needs sm_90a" in out["refused"]
    from cupyconv._compile import cache, sass
    assert cache.validate_binary(cubin.read_bytes(), "sm_90a", out["lowered"].values()) is None
    if sass.disassembler_reason() is not None:
        pytest.skip(f"compiled; SASS not checked: {sass.disassembler_reason()}")
    funcs = sass.disassemble(cubin)
    ops = {n: {i.opcode for i in funcs[s]} for n, s in out["lowered"].items()}
    want = {"wg_ss<1, 16, 0, 0>": "HGMMA.64x16x16.F32", "wg_ss<2, 16, 0, 0>": "HGMMA.64x16x16.F32.BF16",
            "wg_ss<3, 16, 0, 0>": "HGMMA.64x16x8.F32.TF32", "wg_ss<1, 64, 0, 0>": "HGMMA.64x64x16.F32",
            "wg_rs<3, 16, 0>": "HGMMA.64x16x8.F32.TF32", "wg_pipeline<16>": "HGMMA.64x16x16.F32"}
    for name, opcode in want.items():
        assert opcode in ops[name], (name, sorted(ops[name]))
        assert {"WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR.LE", "FENCE.VIEW.ASYNC.S"} <= ops[name]
    assert {"SYNCS.PHASECHK.TRANS64.TRYWAIT", "SYNCS.EXCH.64"} <= ops["wg_pipeline<16>"]
