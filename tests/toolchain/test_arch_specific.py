"""Arch-specific targets (sm_90a) through the toolchain: ELF mark, build, cache, pack, loader.

An arch-specific kernel family (``KernelFamily.arch_specific``) is built for its target
only, validated by the arch-specific mark of the ELF, chosen only on compute capability 9.0
and refused elsewhere with a reason.  The compile tests run the same body with NVRTC 12
(CuPy's) and NVRTC 13 (``.nvrtc13/``, selected in a subprocess by ``CUPYCONV_NVRTC``, as in
test_nvrtc13.py) on a stand-in family whose source is ``kernels/wgmma_probe.cu`` (raw
inline-PTX wgmma).  The selection runs on stand-in devices (compute capability and driver
given), so no GPU is needed.
"""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from toolchain_support import nvrtc_available, run_with_nvrtc

from cupyconv._compile import ArchSpecificUnavailable, cache, compat, loader, prebuilt
from cupyconv._compile.build import group_work, parse_archs
from cupyconv._kernels import registry

PROBE = Path(__file__).resolve().parent / "kernels" / "wgmma_probe.cu"
FAMILY = registry.KernelFamily("wgmma_probe", "wgmma_probe.cu", "wgmma_probe<{T}, {R}, {I}>",
                               False, False, ("sm_90a",))
NAMES = ["wgmma_probe<float, 1, int>", "wgmma_probe<float, 1, long long>"]
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC unavailable")

# The compile body: the probe for sm_90a (mark set, validates as sm_90a only, HGMMA in SASS
# when a disassembler is there), ptxas refusing sm_90, and the mark of every arch this NVRTC
# builds, plain and arch-specific.
_BODY = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from cupyconv._compile import _nvrtc, cache
    probe, out = Path(sys.argv[1]), Path(sys.argv[2])
    names = ["wgmma_probe<float, 1, int>"]
    opts = ["-std=c++17", "--ptxas-options=-v"]
    binary, log, lowered = _nvrtc.compile_program(probe.read_text(), str(probe),
                                                  opts + ["-arch=sm_90a"], names)
    out.write_bytes(binary)
    try:
        _nvrtc.compile_program(probe.read_text(), str(probe), opts + ["-arch=sm_90"], names)
        refused = ""
    except _nvrtc.KernelCompileError as exc:
        refused = exc.log
    marks = {}
    tiny = 'extern "C" __global__ void k(float* p) { p[0] = 1.0f; }'
    for number in _nvrtc.supported_archs():
        for suffix in ("", "a"):
            try:
                b, _, _ = _nvrtc.compile_program(tiny, "k.cu", [f"-arch=sm_{number}{suffix}"], [])
            except _nvrtc.KernelCompileError:
                continue            # no arch-specific variant of this arch
            marks[f"sm_{number}{suffix}"] = [cache.elf_sm(b), cache.elf_arch_specific(b)]
    print(json.dumps({"version": list(_nvrtc.nvrtc_version()), "symbol": lowered[names[0]],
                      "valid_90a": cache.validate_binary(binary, "sm_90a", lowered.values()),
                      "valid_90": cache.validate_binary(binary, "sm_90", lowered.values()),
                      "refused": refused, "marks": marks}))
""")


@pytest.mark.parametrize("major", [12, 13])
def test_wgmma_probe_builds_for_sm_90a_only_and_carries_the_mark(major, tmp_path):
    cubin = tmp_path / "probe.cubin"
    out = run_with_nvrtc(major, _BODY, str(PROBE), str(cubin))
    assert out["valid_90a"] is None
    assert out["valid_90"] == "built for sm_90a, not sm_90"
    for instruction in ("wgmma.fence", "wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group"):
        assert f"Instruction '{instruction}" in out["refused"]
        assert "not supported on .target 'sm_90'" in out["refused"]
    marks = out["marks"]
    assert marks["sm_90a"] == [90, True] and marks["sm_90"] == [90, False]
    assert {a: m for a, m in marks.items() if m != [int(a[3:].rstrip("a")), a.endswith("a")]} == {}
    from cupyconv._compile import sass
    if sass.disassembler_reason() is None:
        ops = [i.opcode for i in sass.disassemble(cubin)[out["symbol"]]]
        assert {"WARPGROUP.ARRIVE", "HGMMA.64x8x16.F32", "HGMMA.64x8x8.F32.TF32"} <= set(ops)
        assert any(op.startswith("WARPGROUP.DEPBAR") for op in ops)


# -- the selection, on stand-in devices ------------------------------------------------

ARCHS_12_9 = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121)


@pytest.mark.parametrize("cc, driver, nvrtc, packaged, arch, why", [
    (90, (12, 9), (12, 9), (), "sm_90a", "NVRTC 12.9"),
    (90, (12, 2), (12, 9), (), "sm_90a", "NVRTC 12.9"),               # minor version compat
    (90, (12, 9), None, [("sm_90a", (12, 9))], "sm_90a", "packaged"),
    (90, (12, 9), None, (), None, "no NVRTC"),
    (90, (12, 9), (11, 8), (), None, "needs NVRTC >= 12.0"),
    (90, (12, 9), (13, 0), (), None, "newer CUDA major release"),
    (90, (12, 9), (13, 0), [("sm_90a", (13, 0))], None, "newer CUDA major release"),
    (80, (12, 9), (12, 9), [("sm_90a", (12, 9))], None, "the device is sm_80"),
    (100, (12, 9), (12, 9), [("sm_90a", (12, 9))], None, "the device is sm_100"),
    (89, (12, 9), (12, 9), (), None, "sm_90a on compute capability 9.0 only"),
])
def test_select_specific(cc, driver, nvrtc, packaged, arch, why):
    choice = compat.select_specific(cc, ("sm_90a",), driver, nvrtc, ARCHS_12_9 if nvrtc else None,
                                    packaged)
    assert choice.arch == arch and why in choice.reason
    if arch is None:
        assert "portable kernels run instead" in choice.reason


@pytest.mark.parametrize("cc, available, expected", [
    (90, [("sm_90a", (12, 9)), ("sm_90", (12, 9))], "sm_90a"),
    (90, [("sm_90a", (12, 9))], "sm_90a"),
    (80, [("sm_90a", (12, 9))], None),
    (100, [("sm_90a", (12, 9)), ("compute_90", (12, 9))], "compute_90"),
    (90, [("sm_90a", (13, 0)), ("sm_90", (12, 9))], "sm_90"),        # 12.x driver: no 13 cubin
    (86, [("sm_80a", (12, 9)), ("sm_80", (12, 9))], "sm_80"),        # unknown target: ignored
])
def test_select_packaged_takes_sm_90a_only_on_9_0(cc, available, expected):
    assert compat.select_packaged(cc, (12, 9), available) == expected


@pytest.mark.parametrize("arch, parts", [("sm_90a", ("sm", 90, True)), ("sm_90", ("sm", 90, False)),
                                         ("compute_90a", ("compute", 90, True)),
                                         ("compute_100", ("compute", 100, False))])
def test_arch_parts(arch, parts):
    assert compat.arch_parts(arch) == parts


BAD_ARCHS = ["sm_80a", "sm_9a", "sm_90b", "sm90a", "", None, "sm_1000"]


@pytest.mark.parametrize("bad", BAD_ARCHS)
def test_unknown_arch_specific_targets_are_refused(bad):
    with pytest.raises(ValueError, match="arch-specific"):
        compat.arch_parts(bad)
    if isinstance(bad, str) and bad:
        with pytest.raises(Exception, match="sm_90a"):
            parse_archs(f"sm_90,{bad}")


# -- build, cache, pack, loader with a stand-in arch-specific family ------------------------

@pytest.fixture
def probe_family(tmp_path, monkeypatch):
    """The probe as a registered arch-specific family, its source in a private cuda_src/
    (beside links to the real sources)."""
    from cupyconv._paths import cuda_src_dir
    src = tmp_path / "cuda_src"
    src.mkdir()
    for child in cuda_src_dir().iterdir():       # the real sources beside the probe
        (src / child.name).symlink_to(child)
    shutil.copyfile(PROBE, src / FAMILY.source)
    monkeypatch.setenv("CUPYCONV_CUDA_SRC", str(src))
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(tmp_path / "no-prebuilt"))
    monkeypatch.setitem(registry.FAMILIES, FAMILY.name, FAMILY)
    loader.clear_module_cache()
    yield FAMILY
    loader.clear_module_cache()


def test_build_pairs_arch_specific_families_with_their_target_only(probe_family):
    work = group_work(["sm_80", "sm_90", "sm_90a", "compute_90"], (1,),
                      ["wgmma_probe", "vol2col"], ["float32"])
    pairs = {(arch, members[0].family) for arch, _, members in work}
    assert pairs == {("sm_90a", "wgmma_probe"), ("sm_80", "vol2col"), ("sm_90", "vol2col"),
                     ("compute_90", "vol2col")}
    assert parse_archs("sm_90,sm_90a") == ["sm_90", "sm_90a"]


@needs_nvrtc
def test_loader_builds_caches_and_refuses_on_stand_in_devices(probe_family, tmp_path):
    res = loader.resolve_group(FAMILY.source, NAMES, 90, (12, 9))
    assert (res.arch, res.origin) == ("sm_90a", "nvrtc") and res.path.parent.name == "sm_90a"
    assert cache.elf_arch_specific(res.path.read_bytes()) is True
    assert cache.entry_counts() == {"sm_90a": 1}
    assert loader.resolve_group(FAMILY.source, NAMES, 90, (12, 9)).origin == "cache"
    assert loader.specific_choice(FAMILY.source, 90, (12, 9)).arch == "sm_90a"
    for cc in (80, 100):
        with pytest.raises(ArchSpecificUnavailable, match=f"the device is sm_{cc}"):
            loader.resolve_group(FAMILY.source, NAMES, cc, (12, 9))
        assert loader.specific_choice(FAMILY.source, cc, (12, 9)).arch is None
    refusals = loader.arch_specific_refusals()
    assert set(refusals) == {"sm_80 wgmma_probe.cu", "sm_100 wgmma_probe.cu"}
    from cupyconv import _cli          # what `python -m cupyconv info` prints on such devices
    lines = _cli._specific_lines(prebuilt.summary(), [(0, "H200", 90, 132, 140.0),
                                                      (1, "A100", 80, 108, 80.0)], (12, 9))
    lines = [line for line in lines if "wgmma_probe" in line]     # (the kernel family has its own)
    assert lines[0].startswith("device 0 uses sm_90a for wgmma_probe.cu: sm_90: sm_90a cubin")
    assert lines[1].startswith("device 1 does not use it for wgmma_probe.cu: wgmma_probe: the "
                               "device is sm_80")
    assert any(line.startswith("not loaded here: sm_100 wgmma_probe.cu: ") for line in lines)
    # the same cubin with its arch-specific mark cleared no longer validates as sm_90a
    binary = res.path.read_bytes()
    portable = binary[:48] + (int.from_bytes(binary[48:52], "little") & ~0x808).to_bytes(4, "little") \
        + binary[52:]
    assert cache.validate_binary(portable, "sm_90a", res.lowered.values()) is not None


@needs_nvrtc
def test_a_build_that_fails_is_a_refusal_with_the_reason(probe_family, monkeypatch):
    from cupyconv._compile import KernelCompileError

    def broken(*args, **kwargs):
        raise KernelCompileError("NVRTC failed to compile wgmma_probe.cu")
    monkeypatch.setattr(loader, "compile_group", broken)
    with pytest.raises(ArchSpecificUnavailable, match="building the sm_90a cubin failed"):
        loader.resolve_group(FAMILY.source, NAMES, 90, (12, 9))
    choice = loader.specific_choice(FAMILY.source, 90, (12, 9))
    assert choice.arch is None and "NVRTC failed" in choice.reason


@needs_nvrtc
def test_pack_carries_sm_90a_beside_portable_kernels(probe_family, tmp_path, monkeypatch, capsys):
    from cupyconv._compile.packing import PackSpec, pack
    dest = tmp_path / "prebuilt"
    spec = PackSpec(archs=("sm_90", "sm_90a"), ptx=(), ranks=(1,), dtypes=("float32",),
                    families=("wgmma_probe", "vol2col"))
    index = pack(dest, spec, progress=False, log=lambda s: None)
    assert sorted((e["arch"], e["families"][0]) for e in index["entries"]) == [
        ("sm_90", "vol2col"), ("sm_90a", "wgmma_probe")]
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(dest))
    hit = prebuilt.find(FAMILY.source, NAMES, 90, (12, 9))
    assert hit is not None and hit.arch == "sm_90a" and hit.path.parent.name == "sm_90a"
    assert prebuilt.find(FAMILY.source, NAMES, 80, (12, 9)) is None
    assert loader.resolve_group(FAMILY.source, NAMES, 90, (12, 9)).origin == "package"
    summary = prebuilt.summary(device_cc=90, driver=(12, 9))
    assert summary["arch_specific"] == {"sm_90a": [FAMILY.source]}
    assert summary["device_arch"] == "sm_90"          # what the portable groups load
    from cupyconv import _cli
    _cli.info()
    text = capsys.readouterr().out
    assert "arch-specific wgmma_probe.cu: sm_90a on compute capability 9.0 only (packaged: " \
           "sm_90a)" in text
