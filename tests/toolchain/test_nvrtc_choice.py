"""Which NVRTC library is loaded when several are installed beside CuPy."""
from __future__ import annotations

import pytest

from cupyconv._compile import _nvrtc


@pytest.mark.parametrize("path, major", [
    ("/x/nvidia/cu13/lib/libnvrtc.so.13", 13),
    ("/x/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", 12),
    ("/usr/lib/libnvrtc.so.12.9.86", 12),
    ("libnvrtc.so", None),
])
def test_soname_major_reads_the_cuda_major(path, major):
    assert _nvrtc._soname_major(path) == major


@pytest.mark.parametrize("cupy_major, first", [(12, "so.12"), (13, "so.13"), (None, "so.13")])
def test_the_nvrtc_of_cupys_cuda_major_comes_first(monkeypatch, cupy_major, first):
    found = ["/a/nvidia/cu13/lib/libnvrtc.so.13", "/a/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"]
    monkeypatch.delenv("CUPYCONV_NVRTC", raising=False)
    monkeypatch.setattr(_nvrtc, "_found", lambda: list(found))
    monkeypatch.setattr(_nvrtc, "_cupy_cuda_major", lambda: cupy_major)
    candidates = _nvrtc._candidates()
    assert sorted(candidates) == sorted(found)
    assert candidates[0].endswith(first)


def test_cupy_cuda_major_reads_the_installed_wheel():
    major = _nvrtc._cupy_cuda_major()
    assert major is None or 10 <= major < 100
