"""NVRTC compilation of the kernel registry (no GPU needed).

Each test compiles its own small slice of the registry into a temporary
cache, so the tests are independent and spread well over pytest-xdist
workers.  Skipped when no NVRTC library can be loaded.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._kernels import registry

try:
    from cupyconv._compile import _nvrtc
    _nvrtc.nvrtc_version()
    HAVE_NVRTC = True
except Exception:  # noqa: BLE001 - any failure means "no NVRTC here"
    HAVE_NVRTC = False

pytestmark = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC unavailable")

ARCHS = ("sm_80", "sm_90")
RANKS = (1, 2, 3, 4)
DTYPES = ("float32", "float64")
#: Static shared memory every kernel must stay within (no opt-in needed).
SMEM_LIMIT = 48 * 1024


@pytest.mark.parametrize("family", sorted(registry.FAMILIES))
@pytest.mark.parametrize("arch", ARCHS)
def test_family_compiles_without_spills(arch, family, tmp_path):
    from cupyconv._compile import build
    reports = build(archs=(arch,), ranks=RANKS, families=(family,), dtypes=DTYPES,
                    root=tmp_path, progress=False, jobs=2)
    expected = registry.instantiations((family,), ranks=RANKS, dtypes=DTYPES)
    if not registry.FAMILIES[family].builds_for(arch):   # an arch-specific family (sm_90a)
        expected = []
    assert sorted(r.name for r in reports) == sorted(i.name for i in expected)
    for r in reports:
        assert r.registers > 0, r
        assert 0 <= r.smem_bytes <= SMEM_LIMIT, r
        if registry.FAMILIES[family].hot:
            assert r.spills == 0, f"{r.name} spills on {arch}: {r}"


def test_rank8_complex_compiles(tmp_path):
    """The largest params struct (rank 8) and the heaviest accumulator."""
    from cupyconv._compile import build
    reports = build(archs=("sm_90",), ranks=(8,), families=("implicit_gemm_fprop", "col2vol"),
                    dtypes=("complex128",), root=tmp_path, progress=False)
    assert len(reports) == 4
    assert all(r.registers > 0 and r.spill_stores == 0 for r in reports
               if r.family == "implicit_gemm_fprop")


def test_half_kernels_compile_without_spills(tmp_path):
    """float16 storage / float accumulation: PTX cvt conversions, no cuda_fp16.h."""
    from cupyconv._compile import build
    reports = build(archs=("sm_80", "sm_90"), ranks=(2,), dtypes=("float16",), root=tmp_path,
                    progress=False)
    with_half = {f for f in registry.FAMILIES if registry.tiles_for(f, np.float16, 2)
                 and registry.FAMILIES[f].builds_for("sm_90")}
    assert {r.family for r in reports} == with_half        # (the FMA/DMMA family has none)
    assert all(r.spills == 0 for r in reports if registry.FAMILIES[r.family].hot)


def _group(rank=1):
    insts = registry.group_instantiations("conv/vol2col.cu", np.float32, rank)
    return "conv/vol2col.cu", [i.name for i in insts]


def test_cache_roundtrip(tmp_path):
    from cupyconv._compile import compile_group
    source, names = _group()
    path1, meta1, cached1, _ = compile_group(source, names, "sm_90", root=tmp_path)
    path2, meta2, cached2, _ = compile_group(source, names, "sm_90", root=tmp_path)
    assert (cached1, cached2) == (False, True)
    assert path1 == path2 and path1.read_bytes().startswith(b"\x7fELF")
    assert meta1["lowered"] == meta2["lowered"] and set(meta1["lowered"]) == set(names)
    assert path1.stat().st_size == meta1["size"]  # the full cubin, last byte included
    other, _, _, _ = compile_group(source, names, "sm_80", root=tmp_path)
    assert other != path1  # the arch is part of the key


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "bad_sidecar", "missing_cubin"])
def test_corrupt_cache_entry_is_rebuilt(tmp_path, damage):
    from cupyconv._compile import compile_group
    source, names = _group()
    path, meta, _, _ = compile_group(source, names, "sm_90", root=tmp_path)
    good = path.read_bytes()
    sidecar = path.with_suffix(".json")
    if damage == "truncate":
        path.write_bytes(good[:-1])
    elif damage == "flip_byte":
        path.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])
    elif damage == "bad_sidecar":
        sidecar.write_text("{not json")
    else:
        path.unlink()
    path2, _, cached, _ = compile_group(source, names, "sm_90", root=tmp_path)
    assert not cached and path2 == path
    assert path.read_bytes() == good


def test_source_change_changes_key(tmp_path):
    from cupyconv._compile import cache
    source = cache.cuda_src_dir() / "conv/vol2col.cu"
    k1 = cache.entry_key(nvrtc_version=(12, 9), arch="sm_90", options=("-a",), source=source,
                         name_expressions=["x"])
    k2 = cache.entry_key(nvrtc_version=(13, 0), arch="sm_90", options=("-a",), source=source,
                         name_expressions=["x"])
    k3 = cache.entry_key(nvrtc_version=(12, 9), arch="sm_90", options=("-b",), source=source,
                         name_expressions=["x"])
    assert len({k1, k2, k3}) == 3
    digest = cache.source_digest(source)
    assert digest == cache.source_digest(source)
    # headers are part of the digest: the include closure reaches conv_params.cuh
    assert any(p.name == "conv_params.cuh" for p in cache.include_closure(source))


def test_compile_error_carries_log_and_options():
    from cupyconv._compile import KernelCompileError
    bad = '#include "platform.cuh"\n__global__ void broken(float* p) { p[0] = undefined_name; }\n'
    opts = ("-std=c++17", "-arch=sm_90", "-DCUPYCONV_NO_FP16")
    from cupyconv._paths import cuda_src_dir
    with pytest.raises(KernelCompileError) as info:
        _nvrtc.compile_program(bad, "broken.cu", opts + (f"-I{cuda_src_dir()}",), ["broken"])
    err = info.value
    assert "undefined_name" in err.log
    assert "-arch=sm_90" in err.options and "undefined_name" in str(err)


def test_parse_ptxas_log():
    from cupyconv._compile import parse_ptxas_log
    log = """ptxas info    : 2 bytes gmem
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
ptxas info    : Function properties for _Z3fooPf
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem
ptxas info    : Function properties for _Z6calleev
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z3barv' for 'sm_90'
ptxas info    : Function properties for _Z3barv
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
"""
    got = parse_ptxas_log(log)
    assert sorted(got) == ["_Z3barv", "_Z3fooPf"]   # a called function's lines are not the kernel's
    assert got["_Z3fooPf"] == dict(registers=40, smem_bytes=8192, stack_bytes=16,
                                   spill_stores=8, spill_loads=4)
    assert got["_Z3barv"]["registers"] == 12 and got["_Z3barv"]["smem_bytes"] == 0


def test_cli_main_and_report(tmp_path, monkeypatch, capsys):
    from cupyconv._compile import main
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    assert main(["--arch", "sm_90", "--ranks", "1-2", "--families", "vol2col",
                 "--dtypes", "float32"]) == 0
    out = capsys.readouterr().out
    assert "vol2col<float, 2, long long>" in out and "regs" in out
    assert any(tmp_path.rglob("*.cubin"))
    with pytest.raises(SystemExit):
        main(["--families", "nope", "--quiet"])


@pytest.mark.parametrize("family", sorted(registry.FAMILIES))
def test_kernels_take_launch_bounds_from_the_launch_config(family, tmp_path):
    """Every entry carries .maxntid of its family's block (``registry.block_threads``:
    CUPYCONV_BLOCK_THREADS, CUPYCONV_MULTISTAGE_THREADS for the multistage tiles), the
    minimum of resident blocks (1; 2 for the implicit GEMM's 32-bit-index tap-aligned
    tiles with a 4-byte accumulator, CUPYCONV_LAUNCH_BOUNDS_MIN, and for every multistage
    tile), and the blockDim check's trap (cuda_src/common/launch_config.cuh)."""
    import re
    from cupyconv._compile import compile_group
    source = registry.FAMILIES[family].source
    for dtype in (np.float32, np.float64):
        insts = [i for i in registry.group_instantiations(source, dtype, 2) if i.family == family]
        path, meta, _, _ = compile_group(source, [i.name for i in insts], "compute_90", root=tmp_path)
        entries = {body.split("(", 1)[0].strip(): body
                   for body in re.split(r"\.entry\s+", path.read_text())[1:]}
        assert len(entries) == len(insts) == len(meta["lowered"])
        for inst in insts:
            _check_launch_bounds(family, inst, entries[meta["lowered"][inst.name]])


def _check_launch_bounds(family, inst, body):
    import re
    symbol = inst.name
    small_acc = registry.dtype_spec(inst.dtype).accum_itemsize == 4
    min_blocks = 2 if (family in ("implicit_gemm_fprop", "implicit_gemm_fma_dmma")
                       and inst.tile[3] and not inst.index64 and small_acc) else 1
    threads = registry.block_threads(family, inst.tile)
    if family == "implicit_gemm_multistage" or (family == "implicit_gemm_fma_dmma" and threads == 128):
        min_blocks = 2      # the 4-warp float64 DMMA tiles: two CTAs of 255 registers
    assert re.search(rf"\.maxntid\s+{threads},\s*1,\s*1\b", body), symbol
    assert re.search(rf"\.minnctapersm\s+{min_blocks}\b", body), symbol
    assert re.search(r"\btrap;", body), symbol
