"""Versioned per-user cubin cache.

Layout: ``$CUPYCONV_CACHE_DIR`` (default ``~/.cache/cupyconv``) /
``<package version>/<arch>/<source stem>-<key>.cubin`` plus a JSON sidecar
``.json`` holding the cubin's SHA-256 and size, the lowered names and the
ptxas log.  The key hashes the NVRTC version, the arch, the options, the
name expressions and the contents of the source file and of every header it
includes (transitively).

Writes go to a temporary file in the same directory followed by
``os.replace`` (cubin first, sidecar last: the sidecar is the commit
record).  A read verifies size and hash; a truncated, corrupt or
half-written entry reads as a miss and is rebuilt, never loaded.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence

from .._paths import cache_root, cuda_src_dir

__all__ = ["cache_dir", "package_version", "source_digest", "entry_key",
           "entry_paths", "read_entry", "write_entry"]


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def package_version() -> str:
    """Version of the installed cupyconv (subdirectory of the cache)."""
    try:
        from importlib.metadata import version
        return version("cupyconv")
    except Exception:  # noqa: BLE001 - not installed: use the source tree's version
        try:
            from .. import __version__
            return str(__version__)
        except Exception:  # noqa: BLE001
            return "0"


def cache_dir() -> Path:
    """Cache root for this package version (not created)."""
    return cache_root() / package_version()


def _closure(path: Path, seen: Dict[Path, bytes]) -> None:
    path = path.resolve()
    if path in seen or not path.is_file():
        return
    data = path.read_bytes()
    seen[path] = data
    for inc in _INCLUDE.findall(data.decode(errors="replace")):
        for base in (path.parent, cuda_src_dir()):
            cand = base / inc
            if cand.is_file():
                _closure(cand, seen)
                break


def source_digest(source: Path) -> str:
    """SHA-256 over a source file and every quoted header it includes."""
    seen: Dict[Path, bytes] = {}
    _closure(Path(source), seen)
    h = hashlib.sha256()
    for p in sorted(seen):
        rel = os.path.relpath(p, cuda_src_dir())
        h.update(rel.encode() + b"\0" + hashlib.sha256(seen[p]).digest())
    return h.hexdigest()


def entry_key(*, nvrtc_version: Sequence[int], arch: str, options: Iterable[str],
              source: Path, name_expressions: Iterable[str]) -> str:
    """Cache key of one compiled group."""
    payload = json.dumps({
        "nvrtc": list(nvrtc_version), "arch": arch, "options": list(options),
        "source": os.path.relpath(Path(source).resolve(), cuda_src_dir()),
        "digest": source_digest(source), "names": sorted(name_expressions),
    }, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def entry_paths(arch: str, source: Path, key: str, root: Optional[Path] = None):
    """``(cubin_path, sidecar_path)`` of a cache entry."""
    d = (root or cache_dir()) / arch
    stem = f"{Path(source).stem}-{key}"
    return d / f"{stem}.cubin", d / f"{stem}.json"


def read_entry(cubin_path: Path, meta_path: Path) -> Optional[dict]:
    """The verified sidecar of an entry, or ``None`` for a miss/corrupt entry."""
    try:
        meta = json.loads(meta_path.read_text())
        data = cubin_path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("size") != len(data):
        return None
    if meta.get("sha256") != hashlib.sha256(data).hexdigest():
        return None
    return meta


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_entry(cubin_path: Path, meta_path: Path, cubin: bytes, meta: dict) -> dict:
    """Store a cubin and its sidecar atomically; returns the sidecar dict."""
    meta = dict(meta, size=len(cubin), sha256=hashlib.sha256(cubin).hexdigest())
    _atomic_write(cubin_path, cubin)
    _atomic_write(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
    return meta
