"""The warp-level MMA atoms (cuda_src/common/mma_atoms.cuh) under NVRTC: real tensor-core
instructions in SASS, no spills, and a compile-time error -- not wrong code -- on an arch
without them.  Needs NVRTC (skips otherwise); the SASS checks need cuobjdump."""
from __future__ import annotations

from pathlib import Path

import pytest

from toolchain_support import nvrtc_available

KERNEL = Path(__file__).resolve().parents[1] / "emulation" / "kernels" / "mma.cu"
LDMATRIX = [f"ldmatrix_dump<{n}, {t}>" for n in (1, 2, 4) for t in ("false", "true")]
NAMES = ["mma_f64", "mma_tf32", "mma_f16", "mma_f16_ldmatrix", *LDMATRIX, "to_tf32_bits",
         "fragment_maps", "mma_lane_exits", "mma_divergent", "mma_meets_syncwarp",
         "ldmatrix_from_global", "ldmatrix_misaligned"]


@pytest.fixture(scope="module")
def nvrtc():
    if not nvrtc_available():
        pytest.skip("NVRTC unavailable")
    from cupyconv._compile import _nvrtc
    return _nvrtc


def _options(arch):
    from cupyconv._compile.build import compile_options
    from cupyconv._paths import cuda_src_dir
    return compile_options(arch) + (f"-I{cuda_src_dir()}",)


def _require_arch(nvrtc, arch):
    archs = nvrtc.supported_archs()
    if archs is not None and int(arch[3:]) not in archs:
        pytest.skip(f"this NVRTC does not compile for {arch}")


def _compile(nvrtc, arch, source=None, names=NAMES, filename=str(KERNEL)):
    _require_arch(nvrtc, arch)
    return nvrtc.compile_program(KERNEL.read_text() if source is None else source, filename,
                                 _options(arch), names)


def _sass(binary, tmp_path, arch):
    from cupyconv._compile import sass
    reason = sass.disassembler_reason()
    if reason is not None:
        pytest.skip(f"compiled; SASS not checked: {reason}")
    cubin = tmp_path / f"mma_{arch}.cubin"
    cubin.write_bytes(binary)
    return sass.disassemble(cubin)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_atoms_are_tensor_core_instructions(nvrtc, arch, tmp_path):
    from cupyconv._compile.build import parse_ptxas_log
    binary, log, lowered = _compile(nvrtc, arch)
    assert set(lowered) == set(NAMES)
    usage = parse_ptxas_log(log)
    spills = {n: (usage[lowered[n]]["spill_stores"], usage[lowered[n]]["spill_loads"]) for n in NAMES}
    assert {n: s for n, s in spills.items() if s != (0, 0)} == {}
    funcs = _sass(binary, tmp_path, arch)
    ops = {n: [i.opcode for i in funcs[lowered[n]]] for n in NAMES}
    base = {n: {op.split(".", 1)[0] for op in v} for n, v in ops.items()}
    # f64: DMMA (DMMA.884 on sm_80, DMMA.8x8x4 on sm_90), one per atom call, no HMMA / DFMA
    assert sum(op.startswith("DMMA") for op in ops["mma_f64"]) == 1
    assert not {"HMMA", "DFMA"} & base["mma_f64"]
    # tf32: one HMMA.1688.F32.TF32; f16: one HMMA.16816.F32; no scalar FMA fallback
    assert [op for op in ops["mma_tf32"] if op.startswith("HMMA")] == ["HMMA.1688.F32.TF32"]
    assert [op for op in ops["mma_f16"] if op.startswith("HMMA")] == ["HMMA.16816.F32"]
    assert not {"FFMA", "DMMA"} & (base["mma_tf32"] | base["mma_f16"])
    # ldmatrix: LDSM with the right count and transpose
    for name in LDMATRIX:
        num, trans = int(name[14]), "true" in name
        want = "LDSM.16." + ("MT88" if trans else "M88") + ("" if num == 1 else f".{num}")
        assert [op for op in ops[name] if op.startswith("LDSM")] == [want], name
    assert sorted(op for op in ops["mma_f16_ldmatrix"] if op.startswith(("LDSM", "HMMA"))) == [
        "HMMA.16816.F32", "LDSM.16.M88.4", "LDSM.16.MT88.2"]
    # cvt.rna.tf32.f32 is bit arithmetic in SASS (add 0x1000 unless |x| >= Inf or NaN, mask)
    assert "LOP3" in base["to_tf32_bits"] and "FSETP" in base["to_tf32_bits"]


SM75_OK = r"""
#include "platform.cuh"
#include "common/mma_atoms.cuh"
// Maps, to_tf32 and ldmatrix work below sm_80; cc::kHasMma says the atoms do not.
__global__ void maps_and_ldmatrix(const float* x, unsigned* y) {
  CUPYCONV_STATIC_SHARED(unsigned short, s, [8][8]);
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 64; e += 32) s[e / 8][e % 8] = static_cast<unsigned short>(e);
  __syncwarp();
  unsigned r[1];
  cc::ldmatrix<1, false>(r, &s[cc::LdmatrixM8n8::src_row(lane)][0]);
  const cc::MmaCoord p = cc::MmaTf32_m16n8k8::a_coord(lane, 3);
  y[lane] = r[0] + cc::to_tf32(x[lane]) + p.row * 16 + p.col + (cc::kHasMma ? 1000000u : 0u);
}
"""

SM75_MMA = r"""
#include "platform.cuh"
#include "common/mma_atoms.cuh"
__global__ void uses_%(atom)s(float* y) {
  using Mma = cc::%(atom)s;
  Mma::FragA a = {};
  Mma::FragB b = {};
  Mma::FragC c = {};
  Mma::mma(c, a, b, c);
  y[threadIdx.x] = static_cast<float>(c[0]);
}
"""


def test_sm75_compiles_without_the_atoms(nvrtc, tmp_path):
    """The header builds for sm_75 (the project's oldest target): no mma.sync in the
    code, ldmatrix is LDSM, cc::to_tf32 is the same bit arithmetic."""
    binary, _, lowered = _compile(nvrtc, "sm_75", SM75_OK, ["maps_and_ldmatrix"], "sm75_ok.cu")
    funcs = _sass(binary, tmp_path, "sm_75")
    opcodes = {i.base for i in funcs[lowered["maps_and_ldmatrix"]]}
    assert "LDSM" in opcodes and not {"HMMA", "DMMA"} & opcodes


@pytest.mark.parametrize("atom", ["MmaF64_m8n8k4", "MmaTf32_m16n8k8", "MmaF16_m16n8k16"])
def test_sm75_using_an_atom_is_a_compile_error(nvrtc, atom):
    from cupyconv._compile import KernelCompileError
    source = SM75_MMA % {"atom": atom}
    name = f"uses_{atom}"
    with pytest.raises(KernelCompileError) as info:
        _compile(nvrtc, "sm_75", source, [name], "sm75_mma.cu")
    assert f"cc::{atom} needs sm_80 or newer" in info.value.log
    _compile(nvrtc, "sm_80", source, [name], "sm80_mma.cu")   # the same source is fine on sm_80


# --- issue 26: bf16 and f64 m16n8k16 atoms, 32-bit ldmatrix, the swizzled pipeline ------------

KERNEL_K16 = KERNEL.parent / "mma_k16.cu"
PIPELINES = [f"swizzled_pipeline<{t}, 3>" for t in ("float", "cc::half", "cc::bfloat16")]
NAMES_K16 = ["mma_bf16", "mma_f64_k16", "bf16_round_trip",
             "ldmatrix32_trans", "swizzle_map<3, 3, 3>", *PIPELINES]
#: the tensor-core instructions of each kernel of mma_k16.cu in sm_80 / sm_90 SASS
K16_OPS = {"mma_bf16": ["HMMA.16816.F32.BF16"], "mma_f64_k16": ["DMMA.16x8x16"],
           "ldmatrix32_trans": ["LDSM.16.MT88"],
           **{p: [atom, "LDSM.16.M88.2", "LDSM.16.M88.4"] for p, atom in zip(
               PIPELINES, ("HMMA.1688.F32.TF32", "HMMA.16816.F32", "HMMA.16816.F32.BF16"))}}


def k16_names(arch: str) -> list:
    """mma_k16.cu's kernels for `arch` (mma_f64_k16 only from sm_90)."""
    return [n for n in NAMES_K16 if arch == "sm_90" or n != "mma_f64_k16"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_k16_atoms_and_pipeline_in_sass(nvrtc, arch, tmp_path):
    from cupyconv._compile.build import parse_ptxas_log
    names = k16_names(arch)
    binary, log, lowered = _compile(nvrtc, arch, KERNEL_K16.read_text(), names, str(KERNEL_K16))
    usage = parse_ptxas_log(log)
    assert {n: usage[lowered[n]]["spill_stores"] for n in names if usage[lowered[n]]["spill_stores"]} == {}
    funcs = _sass(binary, tmp_path, arch)
    for name, want in K16_OPS.items():
        if name not in names:
            continue
        ops = [i.opcode for i in funcs[lowered[name]]]
        assert sorted({op for op in ops if op.startswith(("HMMA", "DMMA", "LDSM"))}) == sorted(want), name
        if name in PIPELINES:   # 16-byte cp.async, one wait (DEPBAR) + barrier per K-tile
            assert "LDGSTS.E.128" in ops and any(op.startswith("DEPBAR") for op in ops), name
    if arch == "sm_90":     # one DMMA.16x8x16 per atom call
        assert sum(i.opcode.startswith("DMMA") for i in funcs[lowered["mma_f64_k16"]]) == 1


@pytest.mark.parametrize("arch, atom, message", [
    ("sm_75", "MmaBf16_m16n8k16", "needs sm_80 or newer"),
    ("sm_80", "MmaF64_m16n8k16", "needs sm_90 or newer"),
])
def test_k16_atom_below_its_arch_is_a_compile_error(nvrtc, arch, atom, message):
    from cupyconv._compile import KernelCompileError
    source = SM75_MMA % {"atom": atom}
    name = f"uses_{atom}"
    with pytest.raises(KernelCompileError) as info:
        _compile(nvrtc, arch, source, [name], "k16_mma.cu")
    assert f"cc::{atom} {message}" in info.value.log
    _compile(nvrtc, "sm_90", source, [name], "k16_mma.cu")
