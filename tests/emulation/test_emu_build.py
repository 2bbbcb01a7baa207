"""Build pipeline: cache, rebuild of corrupt libraries, options, fallbacks, cache trust."""
import os
import stat
import time

import numpy as np
import pytest

from cupyconv._emulation import (EmulatedModule, EmulationCompileError, _build, build_module,
                                 build_stats, cuda_src_dir, emulation_available)
from emulation_support import require_emulation
from cupyconv._fsutil import STALE_TMP_SECONDS, InsecureCacheError

SCALE_SOURCE = """
#include "platform.cuh"
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= FACTOR;
}
"""


@pytest.fixture
def private_cache(tmp_path, monkeypatch, emulation):
    """An empty cache directory for this test."""
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    return tmp_path / "emu"


def _run_scale(module, n=10):
    x = np.arange(n, dtype=np.float32)
    module.get_function("scale")(1, 32, (x, np.int32(n)))
    return x


def test_second_construction_uses_cache(private_cache):
    before = build_stats()["compiles"]
    first = EmulatedModule(code=SCALE_SOURCE, options=("-DFACTOR=3",), name_expressions=["scale"])
    assert build_stats()["compiles"] == before + 1
    second = EmulatedModule(code=SCALE_SOURCE, options=("-DFACTOR=3",),
                            name_expressions=["scale"])
    assert build_stats()["compiles"] == before + 1
    assert first.library_path == second.library_path
    assert first.library_path.parent == private_cache
    np.testing.assert_array_equal(_run_scale(second), np.arange(10) * 3)


def test_corrupt_library_is_rebuilt(private_cache):
    # build_module compiles without loading: a loaded library must never be
    # modified in place (the cache only ever replaces files atomically).
    lib = build_module(code=SCALE_SOURCE, options=("-DFACTOR=5",), name_expressions=["scale"])
    lib.write_bytes(lib.read_bytes()[: lib.stat().st_size // 2])  # truncated by a crash
    before = build_stats()["compiles"]
    again = EmulatedModule(code=SCALE_SOURCE, options=("-DFACTOR=5",),
                           name_expressions=["scale"])
    assert build_stats()["compiles"] == before + 1
    assert again.library_path == lib and _build.library_verified(lib)
    np.testing.assert_array_equal(_run_scale(again), np.arange(10) * 5)


def test_options_are_translated(emulation):
    mod = EmulatedModule(code=SCALE_SOURCE, name_expressions=["scale"],
                         options=("--define-macro=FACTOR=2", "-std=c++17", "-lineinfo",
                                  "--use_fast_math"))
    np.testing.assert_array_equal(_run_scale(mod), np.arange(10) * 2)
    with pytest.raises(ValueError, match="not supported"):
        EmulatedModule(code=SCALE_SOURCE, name_expressions=["scale"], options=("--bogus",))


def test_compile_error_carries_log_and_command(emulation):
    with pytest.raises(EmulationCompileError) as info:
        EmulatedModule(code=SCALE_SOURCE, name_expressions=["scale"])  # FACTOR undefined
    assert "FACTOR" in info.value.log
    assert info.value.command[0] == _build.find_compiler()


def test_ucontext_fallback(emulation, kernel_path):
    mod = EmulatedModule(path=kernel_path("warp.cu"), name_expressions=["block_sum"],
                         options=("-DCUPYCONV_EMU_FORCE_UCONTEXT",))
    assert mod.backend == "ucontext"
    x = np.arange(3000, dtype=np.float32)
    out = np.zeros(1, np.float32)
    mod.get_function("block_sum")(3, 128, (x, out, np.int32(x.size)))
    assert out[0] == x.sum(dtype=np.float64)


def test_argument_validation(emulation):
    with pytest.raises(ValueError, match="mode"):
        EmulatedModule(code=SCALE_SOURCE, name_expressions=["scale"], mode="fast")
    with pytest.raises(ValueError, match="name_expressions"):
        EmulatedModule(code=SCALE_SOURCE, name_expressions=[])
    with pytest.raises(TypeError, match="exactly one"):
        EmulatedModule(name_expressions=["scale"])
    with pytest.raises(FileNotFoundError):
        EmulatedModule(path="no/such/file.cu", name_expressions=["scale"])
    mod = EmulatedModule(code=SCALE_SOURCE, options=("-DFACTOR=3",), name_expressions=["scale"])
    with pytest.raises(ValueError, match="not one of"):
        mod.get_function("other")


def test_cuda_src_dir_override(monkeypatch, tmp_path):
    assert (cuda_src_dir() / "platform.cuh").is_file()
    monkeypatch.setenv("CUPYCONV_CUDA_SRC", str(tmp_path))
    assert cuda_src_dir() == tmp_path.resolve()


def test_unavailable_emulation_skips_and_raises(monkeypatch):
    monkeypatch.setattr(_build, "_probe", lambda: "no C++ compiler found (test)")
    assert not emulation_available()
    assert _build.emulation_unavailable_reason() == "no C++ compiler found (test)"
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        EmulatedModule(code=SCALE_SOURCE, name_expressions=["scale"])
    with pytest.raises(pytest.skip.Exception):
        require_emulation()


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_cache_is_private(private_cache):
    lib = build_module(code=SCALE_SOURCE, options=("-DFACTOR=17",), name_expressions=["scale"])
    assert _mode(private_cache) == 0o700 and _mode(private_cache.parent) == 0o700
    files = [lib, lib.with_suffix(".sha256"), lib.with_suffix(".cpp")]
    assert all(f.is_file() and _mode(f) == 0o600 for f in files)


@pytest.mark.parametrize("victim", ["root", "emu"])
def test_cache_dir_writable_by_others_is_refused(private_cache, victim):
    lib = build_module(code=SCALE_SOURCE, options=("-DFACTOR=19",), name_expressions=["scale"])
    d = private_cache if victim == "emu" else private_cache.parent
    os.chmod(d, 0o777)
    for make in (lambda: build_module(code=SCALE_SOURCE, options=("-DFACTOR=19",),
                                      name_expressions=["scale"]),       # a hit
                 lambda: EmulatedModule(code=SCALE_SOURCE, options=("-DFACTOR=23",),
                                        name_expressions=["scale"])):    # a miss
        with pytest.raises(InsecureCacheError) as info:
            make()
        msg = str(info.value)
        assert str(d) in msg and "0777" in msg and "chmod 700" in msg and "CUPYCONV_CACHE_DIR" in msg
    assert lib.exists()


def test_library_writable_by_others_is_refused(private_cache):
    lib = build_module(code=SCALE_SOURCE, options=("-DFACTOR=29",), name_expressions=["scale"])
    os.chmod(lib, 0o666)
    with pytest.raises(InsecureCacheError, match="chmod 600"):
        EmulatedModule(code=SCALE_SOURCE, options=("-DFACTOR=29",), name_expressions=["scale"])


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_library_owned_by_another_user_is_refused(private_cache):
    lib = build_module(code=SCALE_SOURCE, options=("-DFACTOR=31",), name_expressions=["scale"])
    os.chown(lib.with_suffix(".sha256"), 65534, 65534)
    with pytest.raises(InsecureCacheError, match="uid 65534"):
        build_module(code=SCALE_SOURCE, options=("-DFACTOR=31",), name_expressions=["scale"])


def test_probe_marker_is_keyed_on_source_and_flags(private_cache):
    """A remembered probe success only answers for the same compiler, source and flags."""
    cxx = _build.find_compiler()
    source = 'extern "C" int probe() { return 1; }\n'
    assert _build._probe_build("t", cxx, source, [])[0]
    assert len(list(private_cache.glob("probe-t-*.ok"))) == 1
    assert _build._probe_build("t", cxx, source, [])[0]               # from the marker
    assert not _build._probe_build("t", cxx, source, ["-lcupyconv_no_such_library"])[0]
    assert not _build._probe_build("t", cxx, "#error not this one\n", [])[0]
    assert len(list(private_cache.glob("probe-t-*.ok"))) == 1


def test_stale_tmp_files_are_cleaned_on_a_miss(private_cache):
    build_module(code=SCALE_SOURCE, options=("-DFACTOR=37",), name_expressions=["scale"])
    stale, fresh = private_cache / "x.so.abc.tmp", private_cache / "y.so.def.tmp"
    for p in (stale, fresh):
        p.write_bytes(b"partial")
    past = time.time() - 2 * STALE_TMP_SECONDS
    os.utime(stale, (past, past))
    build_module(code=SCALE_SOURCE, options=("-DFACTOR=41",), name_expressions=["scale"])
    assert not stale.exists() and fresh.exists()


def test_dependency_digest_is_the_same_in_every_checkout(monkeypatch, tmp_path):
    """Two checkouts of one tree hash alike (their libraries are shared), and a changed
    source changes the digest."""
    digests = []
    for name in ("one", "two"):
        root = tmp_path / name / "cuda_src"
        (root / "conv").mkdir(parents=True)
        (root / "platform.cuh").write_text("// platform\n")
        (root / "conv" / "k.cu").write_text('#include "platform.cuh"\n')
        monkeypatch.setattr(_build, "cuda_src_dir", lambda root=root: root)
        digests.append(_build._dependency_digest(root / "conv" / "k.cu"))
        assert _build._portable(f"-I{root}") == "-I<checkout>/cuda_src"
    assert digests[0] == digests[1]
    (root / "conv" / "k.cu").write_text('#include "platform.cuh"\n// changed\n')
    assert _build._dependency_digest(root / "conv" / "k.cu") != digests[0]
