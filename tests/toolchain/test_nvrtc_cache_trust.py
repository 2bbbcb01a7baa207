"""The NVRTC cache as a trust boundary: a sidecar is bound to its entry.

Every damaged, mismatching or malformed entry must read as a miss (and be
recompiled), never crash and never load; a cache another user could write
is refused.  Skipped without NVRTC.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import time
import warnings
from importlib import metadata

import numpy as np
import pytest
from toolchain_support import nvrtc_available

from cupyconv import _version
from cupyconv._compile import cache, compile_group
from cupyconv._fsutil import STALE_TMP_SECONDS, InsecureCacheError, ReadOnlyCacheWarning
from cupyconv._kernels import registry

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC unavailable")

SOURCE = "conv/vol2col.cu"


def _names(rank=1):
    return [i.name for i in registry.group_instantiations(SOURCE, np.float32, rank)]


def _entry(root, arch="sm_90", rank=1):
    """Compile one group; ``(binary_path, sidecar_path, meta, names)``."""
    names = _names(rank)
    path, meta, cached, _ = compile_group(SOURCE, names, arch, root=root)
    assert not cached
    return path, path.with_suffix(".json"), meta, names


def _rewrite(sidecar, meta, rebind=True):
    """Write a sidecar; with ``rebind`` its size/digests made consistent again."""
    meta = dict(meta)
    if rebind:
        meta["entry_digest"] = cache.entry_digest(meta)
    sidecar.write_text(json.dumps(meta))


def _recompiled(root, names, arch="sm_90"):
    path, meta, cached, _ = compile_group(SOURCE, names, arch, root=root)
    return path, meta, cached


@pytest.mark.parametrize("rebind", [False, True], ids=["copied", "copied+rebound"])
def test_sm80_pair_in_sm90_slot_is_a_miss(tmp_path, rebind):
    p80, s80, meta80, names = _entry(tmp_path, "sm_80")
    p90, s90, meta90, _ = _entry(tmp_path, "sm_90")
    shutil.copyfile(p80, p90)
    if rebind:      # the sidecar even claims the sm_90 key and arch: the ELF header says sm_80
        _rewrite(s90, dict(meta80, key=meta90["key"], arch="sm_90"))
    else:
        shutil.copyfile(s80, s90)
    path, meta, cached = _recompiled(tmp_path, names)
    assert not cached and path == p90
    assert cache.elf_sm(path.read_bytes()) == 90 and meta["arch"] == "sm_90"


@pytest.mark.parametrize("rebind", [False, True], ids=["edited", "edited+rebound"])
def test_renamed_symbol_is_a_miss(tmp_path, rebind):
    path, sidecar, meta, names = _entry(tmp_path)
    lowered = dict(meta["lowered"], **{names[0]: meta["lowered"][names[0]] + "x"})
    _rewrite(sidecar, dict(meta, lowered=lowered), rebind)
    _, meta2, cached = _recompiled(tmp_path, names)
    assert not cached and meta2["lowered"] == meta["lowered"]


def test_swapped_symbols_are_a_miss(tmp_path):
    path, sidecar, meta, names = _entry(tmp_path)
    a, b = names
    swapped = dict(meta["lowered"], **{a: meta["lowered"][b], b: meta["lowered"][a]})
    _rewrite(sidecar, dict(meta, lowered=swapped), rebind=False)
    _, meta2, cached = _recompiled(tmp_path, names)
    assert not cached and meta2["lowered"] == meta["lowered"]


def test_empty_cubin_with_matching_json_is_a_miss(tmp_path):
    path, sidecar, meta, names = _entry(tmp_path)
    path.write_bytes(b"")
    _rewrite(sidecar, dict(meta, size=0, sha256=cache.sha256_bytes(b"")))
    _, meta2, cached = _recompiled(tmp_path, names)
    assert not cached and path.stat().st_size == meta2["size"] > 0


@pytest.mark.parametrize("which", ["cubin", "sidecar"])
def test_directory_in_place_of_a_file_is_a_miss(tmp_path, which):
    path, sidecar, meta, names = _entry(tmp_path)
    victim = path if which == "cubin" else sidecar
    victim.unlink()
    (victim / "sub").mkdir(parents=True)          # not even an empty directory
    assert cache.lookup("sm_90", SOURCE, meta["key"], names, tmp_path) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReadOnlyCacheWarning)  # the entry cannot be replaced
        got, meta2, cached = _recompiled(tmp_path, names)
    assert not cached and got.read_bytes().startswith(b"\x7fELF")
    assert meta2["lowered"] == meta["lowered"]


def test_other_key_in_this_slot_is_a_miss(tmp_path):
    p1, s1, _, names1 = _entry(tmp_path, rank=1)
    p2, s2, _, names2 = _entry(tmp_path, rank=2)
    shutil.copyfile(p2, p1)
    shutil.copyfile(s2, s1)
    _, meta, cached = _recompiled(tmp_path, names1)
    assert not cached and set(meta["lowered"]) == set(names1)


BAD_SIDECARS = {
    "list": lambda m: [],
    "null": lambda m: None,
    "lowered_list": lambda m: dict(m, lowered=list(m["lowered"].values())),
    "lowered_extra_name": lambda m: dict(m, lowered=dict(m["lowered"], extra="_Z5extrav")),
    "lowered_missing_name": lambda m: dict(m, lowered=dict(list(m["lowered"].items())[:1])),
    "lowered_duplicate_symbol": lambda m: dict(m, lowered={k: "vol2col" for k in m["lowered"]}),
    "lowered_not_symbol": lambda m: dict(m, lowered={k: 7 for k in m["lowered"]}),
    "size_string": lambda m: dict(m, size=str(m["size"])),
    "size_bool": lambda m: dict(m, size=True),
    "no_key": lambda m: {k: v for k, v in m.items() if k != "key"},
    "other_source": lambda m: dict(m, source="conv/col2vol.cu"),
    "log_not_text": lambda m: dict(m, log=["x"]),
}


@pytest.mark.parametrize("damage", sorted(BAD_SIDECARS))
def test_malformed_sidecar_is_a_miss(tmp_path, damage):
    path, sidecar, meta, names = _entry(tmp_path)
    bad = BAD_SIDECARS[damage](dict(meta))
    if isinstance(bad, dict):
        bad["entry_digest"] = cache.entry_digest(bad)     # consistent, yet wrong
    sidecar.write_text(json.dumps(bad))
    assert cache.read_entry(path, sidecar, key=meta["key"], arch="sm_90", source=SOURCE,
                            names=names) is None
    _, _, cached = _recompiled(tmp_path, names)
    assert not cached


@pytest.mark.parametrize("raw", [b"[" * 100000 + b"]" * 100000, b"\xff\xfe{", b"", b"{\"a\": NaN"])
def test_unparsable_sidecar_is_a_miss(tmp_path, raw):
    path, sidecar, meta, names = _entry(tmp_path)
    sidecar.write_bytes(raw)
    assert cache.read_entry(path, sidecar, key=meta["key"], arch="sm_90", source=SOURCE,
                            names=names) is None


def test_read_entry_checks_what_was_asked(tmp_path):
    path, sidecar, meta, names = _entry(tmp_path)
    ok = dict(key=meta["key"], arch="sm_90", source=SOURCE, names=names)
    assert cache.read_entry(path, sidecar, **ok) == meta
    for wrong in (dict(key="0" * 32), dict(arch="sm_80"), dict(names=names[:1]),
                  dict(names=names + ["vol2col<float, 1, short>"]), dict(source="x.cu")):
        assert cache.read_entry(path, sidecar, **dict(ok, **wrong)) is None, wrong


def test_ptx_entry_roundtrip_and_validation(tmp_path):
    path, sidecar, meta, names = _entry(tmp_path, "compute_90")
    text = path.read_text()
    assert path.suffix == ".ptx" and ".target sm_90" in text
    assert all(f".entry {s}(" in text for s in meta["lowered"].values())
    assert _recompiled(tmp_path, names, "compute_90")[2]          # a hit
    path.write_text(text.replace(".target sm_90", ".target sm_80"))
    _rewrite(sidecar, dict(meta, size=path.stat().st_size,
                           sha256=cache.sha256_bytes(path.read_bytes())))
    assert not _recompiled(tmp_path, names, "compute_90")[2]


def test_elf_header_names_the_arch_for_every_supported_arch():
    """Guards elf_sm: a new header layout must not turn every entry into a miss."""
    from cupyconv._compile import _nvrtc
    src = 'extern "C" __global__ void k(float* p) { p[0] = 1.0f; }\n'
    for arch in _nvrtc.supported_archs() or (80, 90):
        binary, _, lowered = _nvrtc.compile_program(src, "k.cu", [f"-arch=sm_{arch}"], ["k"])
        assert cache.elf_sm(binary) == arch
        assert cache.validate_binary(binary, f"sm_{arch}", lowered.values()) is None


def test_cache_is_private_and_stale_tmp_is_cleaned(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "c"))
    names = _names(1)
    compile_group(SOURCE, names, "sm_90")
    arch_dir = cache.cache_dir() / "sm_90"
    for d in (tmp_path / "c", cache.cache_dir(), arch_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in arch_dir.iterdir()} == {0o600}
    stale = arch_dir / ".x.cubin.abc.tmp"
    stale.write_bytes(b"partial")
    past = time.time() - 2 * STALE_TMP_SECONDS
    os.utime(stale, (past, past))
    compile_group(SOURCE, _names(2), "sm_90")     # a miss writes, and cleans
    assert not stale.exists()


@pytest.mark.parametrize("where", ["root", "arch"])
def test_cache_writable_by_others_is_refused(tmp_path, monkeypatch, where):
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path / "c"))
    names = _names(1)
    path, _, _, _ = compile_group(SOURCE, names, "sm_90")
    victim = tmp_path / "c" if where == "root" else path.parent
    os.chmod(victim, 0o777)
    with pytest.raises(InsecureCacheError, match="group/world-writable") as info:
        compile_group(SOURCE, names, "sm_90")
    assert str(victim) in str(info.value) and "CUPYCONV_CACHE_DIR" in str(info.value)


def test_group_writable_entry_is_refused(tmp_path):
    path, _, _, names = _entry(tmp_path)
    os.chmod(path, 0o666)
    with pytest.raises(InsecureCacheError, match="chmod 600"):
        compile_group(SOURCE, names, "sm_90", root=tmp_path)


def test_package_version_without_metadata(monkeypatch):
    assert cache.package_version() == metadata.version("cupyconv")

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert cache.package_version() == _version.__version__
    monkeypatch.setattr(metadata, "version", lambda name: "../../escape")
    assert cache.package_version() == _version.__version__
