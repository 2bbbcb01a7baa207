"""Fixtures for the toolchain tests: caches, read-only caches, NVRTC availability.

``read_only(path)`` makes a cache tree read-only (directories 0500, files
0400).  The tests run as root, where the mode bits do not stop writes; when
a probe write still succeeds, the fixture also makes the ``os`` calls that
create, rename or remove entries under ``path`` fail with ``EACCES``, which
is exactly what the kernel does for an ordinary user, so the tests exercise
the same code path either way.  Everything is restored afterwards.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """A fresh ``$CUPYCONV_CACHE_DIR`` for this test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(root))
    return root


def _inside(path, root: str) -> bool:
    try:
        p = os.path.abspath(os.fspath(path))
    except TypeError:               # a file descriptor
        return False
    return p == root or p.startswith(root + os.sep)


@pytest.fixture
def read_only(monkeypatch):
    """``read_only(path) -> bool``: make ``path`` read-only; True if simulated (root)."""
    roots = []

    def apply(path: Path) -> bool:
        path = Path(path)
        for d, _, files in os.walk(path, topdown=False):
            for f in files:
                os.chmod(os.path.join(d, f), 0o400)
            os.chmod(d, 0o500)
        roots.append(path)
        probe = path / ".write-probe"
        try:
            probe.touch()
        except PermissionError:
            return False            # the mode bits are enforced: a real read-only cache
        probe.unlink()
        root = os.path.abspath(path)

        def denied(what):
            return PermissionError(errno.EACCES, os.strerror(errno.EACCES), what)

        real_open, real_mkdir = os.open, os.mkdir
        real = {name: getattr(os, name) for name in ("replace", "rename", "unlink", "rmdir",
                                                     "chmod")}

        def fake_open(file, flags, *args, **kwargs):
            writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
            if flags & writes and _inside(file, root):
                raise denied(file)
            return real_open(file, flags, *args, **kwargs)

        def fake_mkdir(p, *args, **kwargs):
            if _inside(p, root):
                if os.path.lexists(p):
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), p)
                raise denied(p)
            return real_mkdir(p, *args, **kwargs)

        def guard(name):
            def call(*args, **kwargs):
                if any(_inside(a, root) for a in args[:2] if isinstance(a, (str, os.PathLike))):
                    raise denied(args[0])
                return real[name](*args, **kwargs)
            return call

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "mkdir", fake_mkdir)
        for name in real:
            monkeypatch.setattr(os, name, guard(name))
        return True

    yield apply
    monkeypatch.undo()
    for path in roots:
        for d, _, _ in os.walk(path):
            os.chmod(d, 0o700)
