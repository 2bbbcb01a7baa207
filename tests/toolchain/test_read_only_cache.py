"""A read-only cache (a shared, prebuilt one): hits load, misses still work.

A miss is compiled into a private temporary directory of the process, with
one ReadOnlyCacheWarning per cache, and the cache is left untouched.  See
``conftest.read_only`` for how this stays meaningful when run as root.
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from toolchain_support import nvrtc_available

from cupyconv._compile import cache, compile_group
from cupyconv._fsutil import ReadOnlyCacheWarning, scratch_dir
from cupyconv._kernels import registry

SOURCE = "conv/vol2col.cu"


def _names(rank, dtype=np.float64):
    return [i.name for i in registry.group_instantiations(SOURCE, dtype, rank)]


def _snapshot(root):
    return sorted((os.path.relpath(os.path.join(d, f), root), os.path.getsize(os.path.join(d, f)))
                  for d, _, files in os.walk(root) for f in files)


def _read_only_warnings(caught):
    return [w for w in caught if issubclass(w.category, ReadOnlyCacheWarning)]


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC unavailable")
def test_nvrtc_read_only_cache(cache_root, read_only):
    hit_names = _names(3)
    first, _, cached, _ = compile_group(SOURCE, hit_names, "sm_90")
    assert not cached
    read_only(cache_root)
    before = _snapshot(cache_root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path, meta, cached, _ = compile_group(SOURCE, hit_names, "sm_90")
        assert cached and path == first                      # a hit still loads
        assert not _read_only_warnings(caught)
        miss, meta, cached, _ = compile_group(SOURCE, _names(4), "sm_90")   # arch dir exists
        assert not cached and miss.read_bytes().startswith(b"\x7fELF")
        other, _, cached, _ = compile_group(SOURCE, _names(3), "sm_80")     # new arch dir
        assert not cached and cache.elf_sm(other.read_bytes()) == 80
        again, _, cached, _ = compile_group(SOURCE, _names(4), "sm_90")
        assert cached and again == miss                       # the private copy is reused
    assert len(_read_only_warnings(caught)) == 1             # warned once
    message = str(_read_only_warnings(caught)[0].message)
    assert str(cache.cache_dir()) in message and "not writable" in message
    for p in (miss, other):
        assert scratch_dir() in p.parents and cache_root not in p.parents
    assert _snapshot(cache_root) == before                   # nothing written to the cache


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC unavailable")
def test_nvrtc_missing_cache_under_read_only_parent(tmp_path, monkeypatch, read_only):
    parent = tmp_path / "ro"
    parent.mkdir()
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(parent / "cache"))
    read_only(parent)
    with pytest.warns(ReadOnlyCacheWarning):
        path, _, cached, _ = compile_group(SOURCE, _names(5), "sm_90")
    assert not cached and path.is_file() and not (parent / "cache").exists()


SCALE = """
#include "platform.cuh"
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= FACTOR;
}
"""


def _scale(factor):
    from cupyconv._emulation import EmulatedModule
    mod = EmulatedModule(code=SCALE, options=(f"-DFACTOR={factor}",), name_expressions=["scale"])
    x = np.arange(8, dtype=np.float32)
    mod.get_function("scale")(1, 32, (x, np.int32(8)))
    np.testing.assert_array_equal(x, np.arange(8) * factor)
    return mod.library_path


def test_emulation_read_only_cache(cache_root, read_only):
    from cupyconv._emulation import build_stats, emulation_available
    if not emulation_available():
        pytest.skip("CUDA emulation unavailable")
    hit = _scale(7)
    read_only(cache_root)
    before = _snapshot(cache_root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiles = build_stats()["compiles"]
        assert _scale(7) == hit and build_stats()["compiles"] == compiles   # hit, no rebuild
        assert not _read_only_warnings(caught)
        miss1, miss2 = _scale(11), _scale(13)                               # built privately
        assert build_stats()["compiles"] == compiles + 2
        assert _scale(11) == miss1 and build_stats()["compiles"] == compiles + 2
    assert len(_read_only_warnings(caught)) == 1
    for p in (miss1, miss2):
        assert scratch_dir() in p.parents and cache_root not in p.parents
        assert (os.stat(p).st_mode & 0o777) == 0o600
    assert _snapshot(cache_root) == before
