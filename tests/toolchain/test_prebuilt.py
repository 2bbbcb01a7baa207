"""Prebuilt kernels: which binary loads where, packing, verification, build settings (issue 16).

The installed-wheel path is ``test_wheel.py``; here a tiny pack (vol2col,
rank 1, float32: an sm_80 cubin and compute_80 PTX) is written into a
temporary directory and looked up as the loader does, with NVRTC stubbed
out wherever it must not run.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import cupyconv
from cupyconv._compile import _nvrtc, cache, loader, packing, prebuilt
from cupyconv._compile.compat import select_packaged
from helpers import require_cuda
from cupyconv._kernels import registry
from limits import child_limit
from toolchain_support import nvrtc_available

ROOT = Path(__file__).resolve().parents[2]
NAMES = tuple(sorted(i.name for i in registry.group_instantiations("conv/vol2col.cu", "float32", 1)))
TINY = packing.PackSpec(archs=("sm_80",), ptx=("compute_80",), ranks=(1,), dtypes=("float32",),
                        families=("vol2col",), jobs=1)
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not available here")


def _load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- which packaged binary loads on which device (pure) ---------------------------------

@pytest.mark.parametrize("cc, driver, available, expected", [
    (90, (12, 4), [("sm_80", (12, 9)), ("sm_90", (12, 9))], "sm_90"),      # own arch
    (86, (12, 4), [("sm_80", (12, 9)), ("sm_90", (12, 9))], "sm_80"),      # same major, lower minor
    (89, (12, 4), [("sm_80", (12, 9)), ("sm_86", (12, 9))], "sm_86"),      # the newest such
    (80, (12, 4), [("sm_86", (12, 9)), ("sm_90", (12, 9))], None),         # never a newer minor
    (90, (12, 4), [("sm_80", (12, 9)), ("sm_89", (12, 9))], None),         # never across majors
    (100, (12, 9), [("sm_90", (12, 9)), ("compute_90", (12, 9))], "compute_90"),  # newer GPU: PTX
    (100, (12, 8), [("sm_90", (12, 9)), ("compute_90", (12, 9))], None),   # PTX needs driver >= NVRTC
    (90, (13, 0), [("sm_90", (12, 9))], "sm_90"),                          # newer driver, old cubin
    (90, (11, 8), [("sm_90", (12, 9)), ("compute_90", (12, 9))], None),    # older driver major
    (75, (12, 9), [("sm_80", (12, 9)), ("compute_80", (12, 9))], None),    # older GPU
    (90, (12, 9), [("compute_80", (12, 9)), ("compute_90", (12, 9))], "compute_90"),
])
def test_select_packaged(cc, driver, available, expected):
    assert select_packaged(cc, driver, available) == expected


# -- build settings ----------------------------------------------------------------------

def test_default_spec_is_the_issue_selection():
    spec = packing.spec_from_settings({})
    assert spec.archs == ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
    assert spec.ptx == ("compute_90",)          # PTX of the newest portable arch
    assert packing.spec_from_settings({"archs": "sm_90a"}).ptx == ()
    assert spec.ranks == (1, 2, 3, 4) and {"float32", "float64", "float16"} <= set(spec.dtypes)
    assert set(spec.dtypes) <= set(registry.DTYPES) and not spec.require


def test_settings_from_env_and_config_settings():
    env = {"CUPYCONV_PREBUILT_ARCHS": "sm_90", "CUPYCONV_PREBUILT_RANKS": "1-3",
           "CUPYCONV_PREBUILT_DTYPES": "float32", "CUPYCONV_PREBUILT": "require"}
    settings = packing.settings_from_env(env, {"cupyconv-ranks": "2", "dtypes": ["float64"]})
    spec = packing.spec_from_settings(settings)
    assert spec.archs == ("sm_90",) and spec.ptx == ("compute_90",) and spec.ranks == (2,)
    assert spec.dtypes == ("float64",) and spec.require
    assert packing.spec_from_settings({"prebuilt": "0"}) is None
    assert packing.spec_from_settings({"ptx": "none"}).ptx == ()


@pytest.mark.parametrize("settings, word", [
    ({"archs": "sm90"}, "sm_NN"), ({"ranks": "0-2"}, "1..8"), ({"ptx": "sm_90"}, "PTX"),
    ({"dtypes": "float128"}, "DTYPES"), ({"families": "fft"}, "FAMILIES"),
    ({"prebuilt": "maybe"}, "CUPYCONV_PREBUILT"), ({"jobs": "0"}, "JOBS"),
])
def test_bad_settings_name_the_setting(settings, word):
    with pytest.raises(ValueError, match=word):
        packing.spec_from_settings(settings)


def test_backend_asks_for_nvrtc_only_for_a_wheel_from_a_checkout(monkeypatch, tmp_path):
    backend = _load_file("cupyconv_build_test", ROOT / "build_backend" / "cupyconv_build.py")
    assert backend.SETTINGS == packing.SETTINGS
    monkeypatch.delenv("CUPYCONV_PREBUILT", raising=False)
    monkeypatch.chdir(ROOT)                                    # a checkout: no PKG-INFO
    # a default build (pip install ., python -m build --wheel): nothing more, seconds
    assert not any("nvrtc" in r for r in backend.get_requires_for_build_wheel())
    assert "nvidia-cuda-nvrtc-cu12" not in backend.get_requires_for_build_wheel({"prebuilt": "0"})
    for release in ({"prebuilt": "1"}, {"cupyconv-prebuilt": "require"}, {"prebuilt": "auto"}):
        assert "nvidia-cuda-nvrtc-cu12" in backend.get_requires_for_build_wheel(release)
    monkeypatch.setenv("CUPYCONV_PREBUILT", "1")               # the release build's variable
    assert "nvidia-cuda-nvrtc-cu12" in backend.get_requires_for_build_wheel()
    assert not any("nvrtc" in r for r in backend.get_requires_for_build_editable())
    assert not any("nvrtc" in r for r in backend.get_requires_for_build_sdist())
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\n")
    monkeypatch.chdir(tmp_path)                                # an unpacked sdist
    assert not any("nvrtc" in r for r in backend.get_requires_for_build_wheel())


def _build_py(tmp_path, monkeypatch, *, editable, commands):
    from setuptools.command.build_py import build_py
    from setuptools.dist import Distribution
    setup_mod = _load_file("cupyconv_setup_test", ROOT / "setup.py")
    packed = []
    monkeypatch.setattr(build_py, "run", lambda self: None)     # the package files: not needed
    monkeypatch.setattr(setup_mod.BuildPy, "_pack", lambda self, dest: packed.append(dest))
    cmd = setup_mod.BuildPy(Distribution({"name": "cupyconv"}))
    cmd.initialize_options()
    cmd.build_lib, cmd.editable_mode = str(tmp_path / "lib"), editable
    cmd.distribution.commands = commands
    cmd.run()
    return packed, setup_mod


def test_editable_install_compiles_and_copies_nothing(tmp_path, monkeypatch):
    packed, _ = _build_py(tmp_path, monkeypatch, editable=True, commands=["editable_wheel"])
    assert not packed and not (tmp_path / "lib").exists()


def test_wheel_build_ships_sources_and_packs(tmp_path, monkeypatch):
    packed, _ = _build_py(tmp_path, monkeypatch, editable=False, commands=["bdist_wheel"])
    assert (tmp_path / "lib/cupyconv/cuda_src/common/launch_config.cuh").is_file()
    assert packed == [tmp_path / "lib/cupyconv/_prebuilt"]
    packed, _ = _build_py(tmp_path, monkeypatch, editable=False, commands=["build"])
    assert not packed                                           # a plain build compiles nothing


def test_sdist_build_without_the_toolchain_writes_a_pure_index(tmp_path, monkeypatch, capsys):
    setup_mod = _load_file("cupyconv_setup_test2", ROOT / "setup.py")

    def no_numpy():
        raise ImportError("No module named 'numpy'")
    monkeypatch.setattr(setup_mod, "_packing_module", no_numpy)
    monkeypatch.setenv("CUPYCONV_PREBUILT", "1")               # a release build
    setup_mod.BuildPy._pack(None, tmp_path / "pre")
    index = prebuilt.read_index(tmp_path / "pre")
    assert index["entries"] == [] and "without NVRTC" in index["reason"]
    assert "WITHOUT prebuilt kernels" in capsys.readouterr().err


def test_default_wheel_build_packs_nothing_and_says_how(tmp_path, monkeypatch, capsys):
    """``pip install .`` / ``python -m build --wheel`` without the setting: no NVRTC, seconds."""
    setup_mod = _load_file("cupyconv_setup_test3", ROOT / "setup.py")

    def must_not_import():
        raise AssertionError("a default build imports no kernel toolchain")
    monkeypatch.setattr(setup_mod, "_packing_module", must_not_import)
    monkeypatch.delenv("CUPYCONV_PREBUILT", raising=False)
    setup_mod.BuildPy._pack(None, tmp_path / "pre")
    index = prebuilt.read_index(tmp_path / "pre")
    assert index["entries"] == [] and index["reason"] == setup_mod.DEFAULT_BUILD
    assert "CUPYCONV_PREBUILT=1 python -m build --wheel" in index["reason"]
    assert "WITHOUT prebuilt kernels" in capsys.readouterr().err


def test_release_build_runs_one_nvrtc_program_per_usable_core(tmp_path, monkeypatch, capsys):
    setup_mod = _load_file("cupyconv_setup_test4", ROOT / "setup.py")
    seen = []
    monkeypatch.setattr(packing, "pack", lambda dest, spec, **kw: seen.append(spec))
    monkeypatch.setattr(setup_mod, "_packing_module", lambda: packing)
    monkeypatch.setattr(setup_mod.os, "sched_getaffinity", lambda pid: {0, 1, 2, 5}, raising=False)
    monkeypatch.setenv("CUPYCONV_PREBUILT", "1")
    monkeypatch.delenv("CUPYCONV_PREBUILT_JOBS", raising=False)
    setup_mod.BuildPy._pack(None, tmp_path / "pre")
    assert seen[-1].jobs == 4 and "4 NVRTC programs at a time" in capsys.readouterr().err
    monkeypatch.setenv("CUPYCONV_PREBUILT_JOBS", "3")          # the user's choice stands
    setup_mod.BuildPy._pack(None, tmp_path / "pre")
    assert seen[-1].jobs == 3


# -- packing and finding -----------------------------------------------------------------

def test_pack_without_nvrtc_gives_a_pure_index_and_says_so(tmp_path, monkeypatch):
    def missing():
        raise _nvrtc.NvrtcUnavailable("NVRTC library not found")
    monkeypatch.setattr(packing, "nvrtc_version", missing)
    said = []
    index = packing.pack(tmp_path / "p", TINY, progress=False, log=said.append)
    assert index["entries"] == [] and "built without NVRTC" in index["reason"]
    assert "WITHOUT prebuilt kernels" in said[0] and "first use" in said[0]
    assert prebuilt.find("conv/vol2col.cu", NAMES, 80, (12, 9), tmp_path / "p") is None
    with pytest.raises(_nvrtc.NvrtcUnavailable, match="require"):
        packing.pack(tmp_path / "q", packing.PackSpec(require=True), progress=False, log=said.append)
    off = packing.pack(tmp_path / "r", None, progress=False, log=said.append)
    assert off["entries"] == [] and "switched off" in off["reason"]


@pytest.fixture(scope="module")
def tiny_pack(tmp_path_factory):
    if not nvrtc_available():
        pytest.skip("NVRTC is not available here")
    dest = tmp_path_factory.mktemp("pack") / "_prebuilt"
    packing.pack(dest, TINY, progress=False, log=lambda m: None)
    return dest


@pytest.fixture
def pack_copy(tiny_pack, tmp_path):
    dest = tmp_path / "_prebuilt"
    shutil.copytree(tiny_pack, dest)
    return dest


@pytest.fixture
def no_nvrtc(monkeypatch):
    """Every NVRTC call fails the test (all go through ``_nvrtc._lib``)."""
    def stub():
        raise AssertionError("NVRTC was called")
    _nvrtc.nvrtc_version.cache_clear()
    _nvrtc.supported_archs.cache_clear()
    monkeypatch.setattr(_nvrtc, "_lib", stub)
    yield
    _nvrtc.nvrtc_version.cache_clear()
    _nvrtc.supported_archs.cache_clear()


def test_index_records_arch_family_dtype_rank_digest(tiny_pack):
    index = prebuilt.read_index(tiny_pack)
    assert sorted(e["arch"] for e in index["entries"]) == ["compute_80", "sm_80"]
    for e in index["entries"]:
        assert (e["families"], e["dtype"], e["rank"]) == (["vol2col"], "float32", 1)
        assert tuple(e["names"]) == NAMES and e["entry_digest"] == cache.entry_digest(e)
        assert (tiny_pack / e["file"]).stat().st_size == e["size"]


@pytest.mark.parametrize("cc, driver, arch", [
    (80, (12, 9), "sm_80"), (86, (12, 0), "sm_80"), (90, (12, 9), "compute_80"),
    (90, (12, 0), None), (75, (12, 9), None)])
def test_find_picks_the_binary_for_the_device_without_nvrtc(tiny_pack, no_nvrtc, cc, driver, arch):
    built = tuple(prebuilt.read_index(tiny_pack)["nvrtc"])
    if arch == "compute_80" and driver < built:
        pytest.skip("this NVRTC is newer than the driver of the case")
    hit = prebuilt.find("conv/vol2col.cu", NAMES, cc, driver, tiny_pack)
    assert (hit and hit.arch) == arch
    if hit:
        assert set(hit.lowered) == set(NAMES) and hit.path.parent.parent == tiny_pack
    assert prebuilt.find("conv/vol2col.cu", NAMES[:1], 80, (12, 9), tiny_pack) is None  # not a group


def _entry(dest, arch):
    index = json.loads((dest / "index.json").read_text())
    (entry,) = [e for e in index["entries"] if e["arch"] == arch]
    return index, entry


def test_a_corrupt_cubin_is_not_loaded_and_ptx_serves(pack_copy, no_nvrtc):
    _, entry = _entry(pack_copy, "sm_80")
    path = pack_copy / entry["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.warns(prebuilt.PackagedKernelWarning, match="SHA-256"):
        hit = prebuilt.find("conv/vol2col.cu", NAMES, 80, (99, 0), pack_copy)
    assert hit.arch == "compute_80"


@pytest.mark.parametrize("edit, why", [
    (lambda e: e["lowered"].update({e["names"][0]: "_Z3evilv"}), "digest"),
    (lambda e: e.update(file="../../evil.cubin"), "no valid file"),
    (lambda e: e.update(nvrtc="12.9"), "malformed"),
])
def test_a_tampered_index_entry_is_not_used(pack_copy, no_nvrtc, edit, why):
    index, entry = _entry(pack_copy, "sm_80")
    edit(entry)
    (pack_copy / "index.json").write_text(json.dumps(index))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hit = prebuilt.find("conv/vol2col.cu", NAMES, 80, (12, 0), pack_copy)
    assert hit is None or hit.arch != "sm_80"
    if why != "malformed":          # a malformed nvrtc field drops the entry from the choice
        assert any(why in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_kernels_of_other_sources_are_silently_unused(pack_copy, tmp_path, monkeypatch, no_nvrtc):
    src = tmp_path / "cuda_src"
    shutil.copytree(cupyconv._paths.cuda_src_dir(), src)
    with open(src / "conv" / "vol2col.cu", "a") as fh:
        fh.write("\n// edited\n")
    monkeypatch.setenv("CUPYCONV_CUDA_SRC", str(src))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert prebuilt.find("conv/vol2col.cu", NAMES, 80, (12, 9), pack_copy) is None
    assert prebuilt.summary(pack_copy)["matches_sources"] is False


def test_unreadable_index(tmp_path):
    (tmp_path / "index.json").write_text("{not json")
    assert prebuilt.find("conv/vol2col.cu", NAMES, 80, (12, 9), tmp_path) is None
    info = prebuilt.summary(tmp_path)
    assert info["present"] and "unreadable index" in info["error"]
    assert prebuilt.read_index(tmp_path / "absent") is None


def test_loader_prefers_the_package_and_clear_caches_keeps_it(pack_copy, monkeypatch, no_nvrtc):
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(pack_copy))
    before = sorted(p.name for p in pack_copy.rglob("*"))
    res = loader.resolve_group("conv/vol2col.cu", NAMES, 80, (12, 9))
    assert res.origin == "package" and res.arch == "sm_80" and res.path.parent.parent == pack_copy
    cupyconv.clear_caches()
    assert sorted(p.name for p in pack_copy.rglob("*")) == before
    assert loader.resolve_group("conv/vol2col.cu", NAMES, 80, (12, 9)).origin == "package"


@needs_nvrtc
def test_loader_falls_back_to_nvrtc_then_the_cache(pack_copy, monkeypatch, tmp_path):
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(pack_copy))
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "cache"))
    names = tuple(sorted(i.name for i in registry.group_instantiations("conv/vol2col.cu", "float64", 1)))
    assert loader.resolve_group("conv/vol2col.cu", names, 80, (12, 9)).origin == "nvrtc"
    assert loader.resolve_group("conv/vol2col.cu", names, 80, (12, 9)).origin == "cache"


def test_no_nvrtc_and_not_packaged_says_what_to_install(pack_copy, monkeypatch):
    def missing():
        raise _nvrtc.NvrtcUnavailable("NVRTC library not found")
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(pack_copy))
    _nvrtc.nvrtc_version.cache_clear()
    monkeypatch.setattr(_nvrtc, "_lib", missing)
    loader.nvrtc_target.cache_clear()
    try:
        with pytest.raises(_nvrtc.NvrtcUnavailable) as info:
            loader.resolve_group("conv/vol2col.cu", NAMES, 90, (12, 0))   # nothing packaged loads
    finally:
        _nvrtc.nvrtc_version.cache_clear()
        loader.nvrtc_target.cache_clear()
    msg = str(info.value)
    assert "pip install nvidia-cuda-nvrtc-cu12" in msg and "packaged kernels" in msg
    assert "python -m cupyconv info" in msg


def test_info_reports_the_pack_and_what_is_missing(tiny_pack, monkeypatch, capsys):
    from cupyconv import _cli
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(tiny_pack))
    assert _cli.info() == 0
    out = capsys.readouterr().out
    assert f"packaged in the wheel: {len(NAMES) * 2} kernels in 2 files" in out
    assert "cubins sm_80 + PTX compute_80; float32; ranks 1" in out
    assert "kernels come from, in this order:" in out and "2. user cache" in out
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(_cli.importlib.util, "find_spec",
                        lambda name, *a: None if name == "cupy" else real_find_spec(name, *a))

    def missing():
        raise _nvrtc.NvrtcUnavailable("NVRTC library not found")
    monkeypatch.setattr(_cli, "nvrtc_version", missing)
    monkeypatch.delenv("CUPYCONV_PREBUILT_DIR")
    _cli.info()
    out = capsys.readouterr().out
    assert 'CuPy: not installed. For the GPU: pip install -e ".[cuda12]"' in out
    assert "NVRTC: not found" in out and "pip install nvidia-cuda-nvrtc-cu12" in out
    assert "packaged in the wheel: none (a source checkout" in out


def test_info_says_what_to_install_without_a_driver(capsys):
    pytest.importorskip("cupy")
    from cupyconv import _cli
    cupy, lines = _cli._cupy_status()
    if cupy is None or cupy.cuda.runtime.driverGetVersion():
        pytest.skip("this machine has a CUDA driver")
    assert any("CUDA driver: none found. Install the NVIDIA driver: >= 525.60.13" in line
               for line in lines)


def test_setup_imports_the_packer_without_scipy():
    """A wheel build needs NumPy and NVRTC only: the packer imports with SciPy blocked."""
    code = ("import sys; sys.modules['scipy'] = None; sys.path.insert(0, sys.argv[1]); "
            "import setup; m = setup._packing_module(); print(m.__file__)")
    res = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                         timeout=child_limit(), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(ROOT / "cupyconv" / "_compile" / "packing.py")


@pytest.mark.gpu
def test_packaged_kernels_load_on_the_gpu(tmp_path, monkeypatch):
    """A pack for this GPU's arch loads through cupy.RawModule with origin "package"."""
    require_cuda()
    arch = loader.device_arch()
    if int(arch[3:]) not in (_nvrtc.supported_archs() or ()):
        pytest.skip(f"this NVRTC cannot build {arch}")
    dest = tmp_path / "_prebuilt"
    spec = packing.PackSpec(archs=(arch,), ptx=(), ranks=(1,), dtypes=("float32",),
                            families=("vol2col",))
    packing.pack(dest, spec, progress=False, log=lambda m: None)
    monkeypatch.setenv("CUPYCONV_PREBUILT_DIR", str(dest))
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "cache"))
    loader.clear_module_cache()
    try:
        mod = loader.load_module("vol2col", NAMES)
        for name in NAMES:
            assert mod.origin(name) == "package" and mod.get_function(name) is not None
        assert loader.loaded_origins()["package"] == 1
    finally:
        loader.clear_module_cache()
