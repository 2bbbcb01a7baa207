"""cupyconv._fsutil: the one set of file helpers behind both caches."""
from __future__ import annotations

import ast
import os
import stat
import time
import warnings
from pathlib import Path

import pytest

from cupyconv import _fsutil
from cupyconv._fsutil import (InsecureCacheError, ReadOnlyCacheWarning, atomic_write,
                              check_private, clean_stale_tmp, existing_private_dir, private_dir,
                              scratch_dir, sha256_bytes, sha256_file, warn_read_only)

PACKAGE = Path(_fsutil.__file__).resolve().parent


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_write_is_private_and_complete(tmp_path):
    target = tmp_path / "entry.bin"
    old = os.umask(0)                   # a permissive umask must not widen the mode
    try:
        atomic_write(target, b"abc")
        atomic_write(target, b"defg")   # replaces
    finally:
        os.umask(old)
    assert target.read_bytes() == b"defg" and _mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["entry.bin"]     # no temporary left


def test_atomic_write_failure_leaves_nothing(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError):
        atomic_write(tmp_path / "d", b"x")    # a directory in the way
    assert [p.name for p in tmp_path.iterdir()] == ["d"]
    with pytest.raises(TypeError):
        atomic_write(tmp_path / "s", "text")


def test_sha256_helpers_agree(tmp_path):
    data = os.urandom(3 << 20)
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == sha256_bytes(data)
    assert sha256_bytes(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize("umask", [0o022, 0o277])
def test_private_dir_creates_0700_chain(tmp_path, umask):
    old = os.umask(umask)
    try:
        leaf = private_dir(tmp_path / "root" / "a" / "b", root=tmp_path / "root")
    finally:
        os.umask(old)
    for d in (tmp_path / "root", tmp_path / "root" / "a", leaf):
        assert d.is_dir() and _mode(d) == 0o700
    assert existing_private_dir(leaf, tmp_path / "root")
    assert not existing_private_dir(leaf / "missing", tmp_path / "root")
    with pytest.raises(ValueError, match="not inside"):
        private_dir(tmp_path / "elsewhere", root=tmp_path / "root")


@pytest.mark.parametrize("mode", [0o770, 0o757, 0o1777])
def test_writable_by_others_is_refused(tmp_path, mode):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, mode)
    for call in (lambda: private_dir(d / "sub", root=d), lambda: existing_private_dir(d),
                 lambda: check_private(d)):
        with pytest.raises(InsecureCacheError) as info:
            call()
        msg = str(info.value)
        assert str(d) in msg and f"{mode & 0o7777:04o}" in msg and "group/world-writable" in msg
        assert "chmod 700" in msg and "CUPYCONV_CACHE_DIR" in msg
    assert not (d / "sub").exists()


def test_group_writable_file_is_refused(tmp_path):
    f = tmp_path / "lib.so"
    f.write_bytes(b"x")
    os.chmod(f, 0o664)
    with pytest.raises(InsecureCacheError, match="chmod 600"):
        check_private(f)
    os.chmod(f, 0o644)                 # readable by others is fine: a shared read-only cache
    check_private(f)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_foreign_owner_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(InsecureCacheError, match="owned by .*uid 65534.*not by you"):
        private_dir(d)
    os.chown(d, 0, 0)                  # root-owned: trusted (a shared prebuilt cache)
    assert private_dir(d) == d


def test_a_file_in_place_of_a_directory_is_an_oserror(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError):
        private_dir(tmp_path / "f")
    assert not existing_private_dir(tmp_path / "f")


def test_clean_stale_tmp(tmp_path):
    old, fresh, keep = tmp_path / ".a.x.tmp", tmp_path / ".b.y.tmp", tmp_path / "c.cubin"
    for p in (old, fresh, keep):
        p.write_bytes(b"")
    past = time.time() - 2 * _fsutil.STALE_TMP_SECONDS
    os.utime(old, (past, past))
    os.utime(keep, (past, past))
    assert clean_stale_tmp(tmp_path) == 1
    assert not old.exists() and fresh.exists() and keep.exists()
    assert clean_stale_tmp(tmp_path / "missing") == 0


def test_scratch_dir_and_single_warning(tmp_path):
    s = scratch_dir()
    assert s == scratch_dir() and s.is_dir() and _mode(s) == 0o700
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            warn_read_only(tmp_path / "ro", PermissionError(13, "Permission denied"))
    assert len(caught) == 1 and caught[0].category is ReadOnlyCacheWarning
    assert str(tmp_path / "ro") in str(caught[0].message) and str(s) in str(caught[0].message)


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield node, node.module or "", [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            yield node, None, [a.name for a in node.names]


TOOLCHAIN = sorted([*(PACKAGE / "_compile").glob("*.py"), PACKAGE / "_emulation" / "_build.py",
                    PACKAGE / "_fsutil.py", PACKAGE / "_paths.py"])


@pytest.mark.parametrize("path", TOOLCHAIN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_layering_and_no_private_names(path):
    """Only allowed package imports, all at module level, no private names imported."""
    allowed = ("cupyconv._compile", "cupyconv._emulation", "cupyconv._kernels.registry",
               "cupyconv._paths", "cupyconv._fsutil", "cupyconv._version", "cupyconv._lru")
    package = ["cupyconv"] + ([path.parent.name] if path.parent.name != "cupyconv" else [])
    tree = ast.parse(path.read_text())
    top_level = {id(n) for n in tree.body}
    for node, module, names in _imports(tree):
        if module is None:
            continue
        if node.level:
            base = package[:len(package) - node.level + 1]
            module = ".".join(base + ([module] if module else []))
        if module.split(".")[0] != "cupyconv":
            continue
        for t in (f"{module}.{n}" for n in names):
            assert t.startswith(allowed), f"{path.name} imports {t}"
        assert id(node) in top_level, f"{path.name}: function-local import of {module}"
        assert not [n for n in names if n.startswith("_") and n != "__version__"], \
            f"{path.name} imports private names {names} from {module}"
    assert "assert " not in path.read_text(), f"{path.name} uses assert for a check"
    assert len(path.read_text().splitlines()) <= 600, f"{path.name} is too long"
