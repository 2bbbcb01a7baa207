"""A wheel with prebuilt kernels, built and installed as a user would (issue 16).

One small wheel (every family, rank 1, float32, sm_80) is built from a copy
of this tree with ``pip wheel --no-build-isolation`` (the backend and
setup.py of the tree: ``build_py`` ships ``cuda_src/`` and packs the
kernels), installed into a temporary ``venv --system-site-packages`` with
``pip install --no-deps --no-index``, and checked there on this machine
without a GPU: ``import cupyconv`` works from the installed wheel (the
kernel registry reads ``launch_config.cuh`` from the packaged sources), the
loader resolves every name of the group from the package with an NVRTC stub
that fails when called, ``clear_caches`` leaves the packaged kernels alone,
a group that is not packaged asks for NVRTC and says what to install, and
``python -m cupyconv info`` says where kernels come from.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cupyconv._kernels import registry
from limits import child_limit
from toolchain_support import nvrtc_available

ROOT = Path(__file__).resolve().parents[2]
#: What the small wheel packs (one arch, one rank, one dtype, every family).
SMALL = {"CUPYCONV_PREBUILT": "require", "CUPYCONV_PREBUILT_ARCHS": "sm_80",
         "CUPYCONV_PREBUILT_PTX": "none", "CUPYCONV_PREBUILT_RANKS": "1",
         "CUPYCONV_PREBUILT_DTYPES": "float32", "CUPYCONV_PREBUILT_JOBS": "2"}
#: Files of the tree a wheel build reads.
TREE = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "cupyconv", "cuda_src",
        "build_backend")

#: The families an sm_80 wheel packs (the arch-specific ones build for sm_90a only).
PORTABLE = sorted(f for f, fam in registry.FAMILIES.items() if fam.builds_for("sm_80"))

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not available here")

CHECK = r'''
import json, sys
from pathlib import Path

import cupyconv
from cupyconv import _paths
from cupyconv._compile import _nvrtc, loader, prebuilt
from cupyconv._kernels import registry

calls = []


def nvrtc_stub(*args, **kwargs):           # every NVRTC call goes through _nvrtc._lib()
    calls.append(args)
    raise _nvrtc.NvrtcUnavailable("NVRTC stub: NVRTC must not be called")


_nvrtc._lib = nvrtc_stub
loader.device_properties = lambda device=None: (0, 80, (12, 9))    # an sm_80, CUDA 12.9 driver


class FakeModule:
    """Stands in for cupy.RawModule(path=...) (no GPU here)."""

    def __init__(self, path, lowered, device_id=None, origin="", arch="", refuse=None):
        self.path, self.lowered, self.origin, self.arch = str(path), dict(lowered), origin, arch

    def get_function(self, name):
        return ("kernel", self.lowered[name])


loader.CubinModule = FakeModule
index = prebuilt.read_index()
lowered = {n: s for e in index["entries"] for n, s in e["lowered"].items()}


def resolve_all():
    out = {}
    for fam in registry.FAMILIES:
        if registry.FAMILIES[fam].arch_specific:     # sm_90a only: not in an sm_80 wheel
            continue
        names = [i.name for i in registry.instantiations([fam], ranks=(1,), dtypes=("float32",))]
        mod = loader.load_module(fam, names, device=0)
        for n in names:
            out[n] = [mod.origin(n), mod.module(n).path, mod.get_function(n)[1] == lowered[n]]
    return out


first = resolve_all()
cupyconv.clear_caches()
files = sorted(str(p) for p in _paths.prebuilt_dir().rglob("*") if p.is_file())
second = resolve_all()
calls_packaged = len(calls)
try:
    loader.load_module("vol2col", [registry.name_expression("vol2col", "float32", 2, False)])
    missing = "loaded"
except _nvrtc.NvrtcUnavailable as exc:
    missing = str(exc)
print(json.dumps(dict(
    cupyconv=cupyconv.__file__, cuda_src=str(_paths.cuda_src_dir()), threads=registry.THREADS,
    prebuilt=str(_paths.prebuilt_dir()), first=first, second=second, files=files,
    files_after=sorted(str(p) for p in _paths.prebuilt_dir().rglob("*") if p.is_file()),
    calls_packaged=calls_packaged, calls_total=len(calls), missing=missing, kernels=index["kernels"],
    origins=loader.loaded_origins())))
'''


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CUPYCONV_CUDA_SRC", "CUPYCONV_PREBUILT_DIR")
           and not k.startswith("CUPYCONV_PREBUILT")}
    env.update(extra)
    return env


def _run(cmd, **kwargs):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=child_limit(start_s=60),
                         **kwargs)
    assert res.returncode == 0, f"{cmd} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def _install(tmp):
    """Build the small wheel from a copy of the tree and install it into a fresh venv."""
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")
    for name in TREE:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    _run([sys.executable, "-m", "pip", "wheel", str(src), "--no-build-isolation", "--no-deps",
          "--no-index", "-q", "-w", str(tmp / "dist")], env=_env(**SMALL), cwd=tmp)
    (wheel,) = (tmp / "dist").glob("cupyconv-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
          "--ignore-installed", str(wheel)], env=_env(), cwd=tmp)
    return python, wheel, tmp


def test_wheel_build_install_and_load_without_nvrtc(tmp_path):
    """One wheel build (the costly part) serves the three checks below."""
    installed = _install(tmp_path)
    check_wheel_ships_sources_and_an_index(installed)
    check_installed_wheel_loads_every_kernel_from_the_package_without_nvrtc(installed)
    check_info_from_the_installed_wheel_says_where_kernels_come_from(installed)


def check_wheel_ships_sources_and_an_index(installed):
    _, wheel, _ = installed
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        index = json.loads(zf.read("cupyconv/_prebuilt/index.json"))
    assert "cupyconv/cuda_src/common/launch_config.cuh" in names
    assert "cupyconv/cuda_src/conv/implicit_gemm_fprop.cu" in names
    assert {(e["arch"], e["dtype"], e["rank"]) for e in index["entries"]} == {("sm_80", "float32", 1)}
    assert sorted(f for e in index["entries"] for f in e["families"]) == PORTABLE
    for e in index["entries"]:
        assert f"cupyconv/_prebuilt/{e['file']}" in names
        assert len(e["sha256"]) == 64 and e["entry_digest"] and e["nvrtc"]
    assert index["kernels"] == sum(len(e["names"]) for e in index["entries"]) > 0


def check_installed_wheel_loads_every_kernel_from_the_package_without_nvrtc(installed):
    python, _, tmp = installed
    res = _run([str(python), "-c", CHECK], env=_env(CUPYCONV_CACHE_DIR=str(tmp / "cache")),
               cwd=tmp)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    site = str(tmp / "venv")
    assert out["cupyconv"].startswith(site), out["cupyconv"]          # the wheel, not the tree
    assert out["cuda_src"] == str(Path(out["cupyconv"]).parent / "cuda_src")
    assert out["threads"] > 0                                          # launch_config.cuh read
    assert out["prebuilt"].startswith(site)
    for run in ("first", "second"):                                    # before/after clear_caches
        assert len(out[run]) == out["kernels"] == len(registry.instantiations(
            PORTABLE, ranks=(1,), dtypes=("float32",)))
        for name, (origin, path, same_symbol) in out[run].items():
            assert origin == "package", (name, origin)
            assert path.startswith(out["prebuilt"]) and same_symbol, (name, path)
    assert out["calls_packaged"] == 0                                  # the stub never ran
    assert out["calls_total"] == 1                                     # the rank-2 miss asked
    assert "pip install nvidia-cuda-nvrtc-cu12" in out["missing"]
    sources = len({registry.FAMILIES[f].source for f in PORTABLE})     # one cubin each
    assert out["files"] == out["files_after"] and len(out["files"]) == sources + 1   # + index
    assert out["origins"]["package"] == sources


def check_info_from_the_installed_wheel_says_where_kernels_come_from(installed):
    python, _, tmp = installed
    res = _run([str(python), "-m", "cupyconv", "info"],
               env=_env(CUPYCONV_CACHE_DIR=str(tmp / "cache")), cwd=tmp)
    kernels = len(registry.instantiations(PORTABLE, ranks=(1,), dtypes=("float32",)))
    sources = len({registry.FAMILIES[f].source for f in PORTABLE})
    assert f"1. packaged in the wheel: {kernels} kernels in {sources} files" in res.stdout, res.stdout
    assert "cubins sm_80; float32; ranks 1; built by NVRTC" in res.stdout
    assert str(tmp / "venv") in res.stdout
