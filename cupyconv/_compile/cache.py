"""Versioned per-user cache of NVRTC binaries (cubins, and PTX for new GPUs).

Layout: ``$CUPYCONV_CACHE_DIR`` (default ``~/.cache/cupyconv``) /
``<package version>/<arch>/<source stem>-<key>.cubin`` (``.ptx`` when the
arch is ``compute_XY``) plus a JSON sidecar ``.json``.  The key hashes the
NVRTC version, the arch, the options, the name expressions and the contents
of the source file and of every header it includes (transitively).

The cache is a trust boundary: the binary runs on the GPU and the sidecar
says which symbol each kernel is.  So

* every cache directory is created 0700 and files 0600, and a directory or
  file another user could modify is refused with
  :class:`cupyconv._fsutil.InsecureCacheError` (:mod:`cupyconv._fsutil`);
* the sidecar binds itself to the entry: it holds the key, arch, source,
  lowered-name map, the binary's SHA-256 and size, and a digest over all of
  these.  :func:`read_entry` checks that the key, arch and source are the
  requested ones, that the map covers exactly the requested names, the
  digests and size, and that the binary is what the arch says (an ELF for
  ``EM_CUDA`` whose header names the same ``sm_XY`` and is arch-specific
  exactly when the arch is (``sm_90a``: :func:`elf_arch_specific`), or PTX whose
  ``.target`` is that arch) and defines every mapped symbol.  Anything else
  (a mismatch, an unreadable entry, a directory in place of a file, JSON of
  the wrong shape) reads as a miss and is recompiled; it never loads.

Writes are atomic (:func:`cupyconv._fsutil.atomic_write`), binary first and
sidecar last: the sidecar is the commit record.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence, Tuple

from .._fsutil import (atomic_write, check_private, clean_stale_tmp, existing_private_dir,
                       private_dir, scratch_for, sha256_bytes)
from .._paths import cache_root, cuda_src_dir
from .._version import __version__
from .compat import arch_parts

__all__ = ["cache_dir", "cuda_src_dir", "package_version", "source_digest", "include_closure",
           "entry_key", "entry_paths", "entry_digest", "read_entry", "write_entry",
           "validate_binary", "valid_names", "elf_sm", "lookup", "scratch_root", "ARCH_PATTERN",
           "entry_counts", "elf_arch_specific"]

#: An NVRTC ``-arch`` value this cache stores: ``sm_XY`` (cubin) or ``compute_XY`` (PTX),
#: and the arch-specific ``sm_XYa`` (:data:`cupyconv._compile.compat.ARCH_SPECIFIC` says
#: which are known; :func:`_arch_number` refuses the others).
ARCH_PATTERN = re.compile(r"(sm|compute)_(\d{2,3})(a?)")
#: Version of the sidecar layout (part of :func:`entry_digest`).
FORMAT = 2

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_SAFE_COMPONENT = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]*")
_SYMBOL = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]*")
_EM_CUDA = 190


def package_version() -> str:
    """Version of the installed cupyconv (a directory level of the cache).

    The distribution metadata, else :data:`cupyconv._version.__version__`
    (a source tree that is not installed).
    """
    try:
        version = metadata.version("cupyconv")
    except metadata.PackageNotFoundError:
        version = __version__
    if not isinstance(version, str) or not _SAFE_COMPONENT.fullmatch(version):
        version = __version__          # never a path separator or ".."
    return version


def cache_dir() -> Path:
    """Cache root for this package version (not created)."""
    return cache_root() / package_version()


def scratch_root(root: Optional[Path] = None, create: bool = True) -> Optional[Path]:
    """Where entries of cache ``root`` go when it is not writable (this process only).

    With ``create=False``, ``None`` while no entry has gone there.
    """
    return scratch_for(root if root is not None else cache_dir(), create)


def include_closure(source: Path) -> Dict[Path, bytes]:
    """A source file and every quoted header it includes, transitively: path -> bytes."""
    seen: Dict[Path, bytes] = {}
    todo = [Path(source)]
    while todo:
        path = todo.pop().resolve()
        if path in seen or not path.is_file():
            continue
        data = path.read_bytes()
        seen[path] = data
        for inc in _INCLUDE.findall(data.decode(errors="replace")):
            for base in (path.parent, cuda_src_dir()):
                if (base / inc).is_file():
                    todo.append(base / inc)
                    break
    return seen


def source_digest(source: Path) -> str:
    """SHA-256 over a source file and every quoted header it includes."""
    seen = include_closure(source)
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


def _arch_number(arch: str) -> Tuple[str, int, bool]:
    return arch_parts(arch)


def entry_paths(arch: str, source: Path, key: str, root: Optional[Path] = None):
    """``(binary_path, sidecar_path)`` of a cache entry (``.cubin`` or ``.ptx``)."""
    kind, _, _ = _arch_number(arch)
    if not re.fullmatch(r"[0-9a-f]{8,64}", key):
        raise ValueError(f"cache key must be hex, got {key!r}")
    d = (root or cache_dir()) / arch
    stem = f"{Path(source).stem}-{key}"
    return d / f"{stem}.{'cubin' if kind == 'sm' else 'ptx'}", d / f"{stem}.json"


def entry_digest(meta: dict) -> str:
    """Digest binding a sidecar's key, arch, source, names map and binary digest."""
    bound = {k: meta.get(k) for k in ("key", "arch", "source", "lowered", "sha256", "size")}
    bound["format"] = FORMAT
    return sha256_bytes(json.dumps(bound, sort_keys=True).encode())


def elf_sm(data: bytes) -> Optional[int]:
    """The ``XY`` of ``sm_XY`` recorded in a CUDA ELF header, or None if unknown.

    Two header layouts are known (checked by the test suite against every
    arch NVRTC supports): ``EI_OSABI`` 0x33 (``e_flags & 0xff``) and 0x41
    (``(e_flags >> 8) & 0xff``, sm_100 and newer).
    """
    if len(data) < 64:
        return None
    osabi = data[7]
    flags = struct.unpack_from("<I", data, 48)[0]
    if osabi == 0x33:
        return flags & 0xFF
    if osabi == 0x41:
        return (flags >> 8) & 0xFF
    return None


_NV_COMPAT = b".nv.compat"
#: ``.nv.compat`` attribute that NVRTC 13 sets to 1 for an arch-specific cubin.
_COMPAT_ARCH_SPECIFIC = 0x09


def _section(data: bytes, wanted: bytes) -> Optional[bytes]:
    """The contents of the ELF section named ``wanted``, or None (absent, malformed)."""
    try:
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
        if entsize < 64 or not count or names >= count:
            return None
        def header(i):
            return struct.unpack_from("<IIQQQQ", data, shoff + i * entsize)
        name_off = header(names)[4]
        for i in range(count):
            name, _, _, _, off, size = header(i)
            start = name_off + name
            if data[start:start + len(wanted) + 1] == wanted + b"\0":
                return data[off:off + size] if off + size <= len(data) else None
    except struct.error:
        return None
    return None


def _compat_attributes(section: bytes) -> Dict[int, int]:
    """The one-byte and two-byte attributes of a ``.nv.compat`` section (its
    ``.nv.info`` record layout: format byte, attribute byte, then a value: 1 none,
    2 a byte, 3 a half-word, 4 a half-word size and that many bytes)."""
    out: Dict[int, int] = {}
    pos = 0
    while pos + 4 <= len(section):
        fmt, attr = section[pos], section[pos + 1]
        if fmt == 2:
            out[attr] = section[pos + 2]
        elif fmt == 3:
            out[attr] = struct.unpack_from("<H", section, pos + 2)[0]
        elif fmt == 4:
            pos += struct.unpack_from("<H", section, pos + 2)[0]
        elif fmt != 1:
            break
        pos += 4
    return out


def elf_arch_specific(data: bytes) -> Optional[bool]:
    """Whether a CUDA ELF is an arch-specific (``sm_XYa``) cubin; None for an unknown layout.

    Three encodings are known (the test suite checks them with NVRTC 12 and 13 on every
    arch they build): ``EI_OSABI`` 0x33 sets bit 0x800 of ``e_flags``; 0x41 from NVRTC
    12 sets bit 0x8; 0x41 from NVRTC 13 leaves ``e_flags`` alone (an ``sm_90a`` header
    equals the ``sm_90`` one) and sets attribute 0x09 of the ``.nv.compat`` section.
    """
    if len(data) < 64:
        return None
    flags = struct.unpack_from("<I", data, 48)[0]
    if data[7] == 0x33:
        return bool(flags & 0x800)
    if data[7] == 0x41:
        if flags & 0x8:
            return True
        section = _section(data, _NV_COMPAT)
        return bool(section and _compat_attributes(section).get(_COMPAT_ARCH_SPECIFIC))
    return None


def validate_binary(data: bytes, arch: str, symbols: Iterable[str]) -> Optional[str]:
    """Why ``data`` is not a binary for ``arch`` defining ``symbols`` (None if it is)."""
    kind, number, specific = _arch_number(arch)
    if not data:
        return "empty"
    if kind == "sm":
        if len(data) < 64 or not data.startswith(b"\x7fELF") or data[4] != 2:
            return "not a 64-bit ELF file"
        if struct.unpack_from("<H", data, 18)[0] != _EM_CUDA:
            return "not a CUDA ELF file"
        found, found_specific = elf_sm(data), elf_arch_specific(data)
        if found is not None and (found, found_specific) != (number, specific):
            return f"built for sm_{found}{'a' if found_specific else ''}, not {arch}"
        missing = [s for s in symbols if b"\0" + s.encode() + b"\0" not in data]
    else:
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            return "not PTX text"
        target = re.search(r"^\s*\.target\s+sm_(\d+)(a?)\b", text, re.MULTILINE)
        if (".version" not in text or target is None or int(target.group(1)) != number
                or bool(target.group(2)) != specific):
            return f"not PTX for {arch}"
        missing = [s for s in symbols if not re.search(rf"\.entry\s+{re.escape(s)}\s*\(", text)]
    return f"symbols missing: {missing}" if missing else None


def valid_names(lowered, names: Sequence[str]) -> bool:
    """Whether ``lowered`` maps exactly ``names`` to distinct symbol strings."""
    if not isinstance(lowered, dict) or set(lowered) != set(names):
        return False
    symbols = list(lowered.values())
    if len(set(symbols)) != len(symbols):
        return False
    return all(isinstance(sym, str) and _SYMBOL.fullmatch(sym) for sym in symbols)


def _check_meta(meta, *, key: str, arch: str, source: str, names: Sequence[str]) -> bool:
    if not isinstance(meta, dict):
        return False
    size = meta.get("size")
    return (meta.get("key") == key and meta.get("arch") == arch and meta.get("source") == source
            and isinstance(size, int) and not isinstance(size, bool) and size > 0
            and isinstance(meta.get("sha256"), str) and isinstance(meta.get("log", ""), str)
            and valid_names(meta.get("lowered"), names)
            and meta.get("entry_digest") == entry_digest(meta))


def _read_private(path: Path) -> Optional[bytes]:
    """The bytes of a regular cache file (None if absent/not a file); refuses untrusted ones."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    check_private(path, st)
    return path.read_bytes()


def read_entry(binary_path: Path, meta_path: Path, *, key: str, arch: str, source: str,
               names: Sequence[str]) -> Optional[dict]:
    """The verified sidecar of an entry, or ``None`` for a miss.

    Parameters
    ----------
    binary_path, meta_path : Path
        From :func:`entry_paths`.
    key, arch, source : str
        What the caller asked for (``source`` relative to ``cuda_src/``).
    names : sequence of str
        The name expressions the entry must map, exactly.

    Returns
    -------
    dict or None
        ``None`` for an absent, unreadable, corrupt or mismatching entry.

    Raises
    ------
    cupyconv._fsutil.InsecureCacheError
        If an entry file is owned by another user or group/world-writable.
    """
    try:
        raw = _read_private(meta_path)
        data = _read_private(binary_path) if raw is not None else None
        if data is None:
            return None
        meta = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None
    if not _check_meta(meta, key=key, arch=arch, source=source, names=names):
        return None
    if meta["size"] != len(data) or meta["sha256"] != sha256_bytes(data):
        return None
    if validate_binary(data, arch, meta["lowered"].values()) is not None:
        return None
    return meta


def lookup(arch: str, source: str, key: str, names: Sequence[str],
           root: Optional[Path] = None) -> Optional[Tuple[Path, dict]]:
    """``(binary_path, meta)`` of a verified entry under ``root`` (default :func:`cache_dir`)."""
    top = Path(root) if root is not None else cache_root()
    binary, sidecar = entry_paths(arch, source, key, root)
    if not existing_private_dir(binary.parent, top):
        return None
    meta = read_entry(binary, sidecar, key=key, arch=arch, source=source, names=names)
    return None if meta is None else (binary, meta)


def write_entry(arch: str, source: str, key: str, binary: bytes, meta: dict,
                root: Optional[Path] = None) -> Tuple[Path, dict]:
    """Store a binary and its bound sidecar atomically under ``root``.

    Returns
    -------
    (binary_path, meta)

    Raises
    ------
    OSError
        If the cache cannot be written (read-only).  No partial file is
        left; a binary written without its sidecar reads as a miss.
    cupyconv._fsutil.InsecureCacheError
        If a cache directory is owned by another user or group/world-writable.
    """
    top = Path(root) if root is not None else cache_root()
    binary_path, meta_path = entry_paths(arch, source, key, root)
    meta = dict(meta, key=key, arch=arch, source=source, size=len(binary),
                sha256=sha256_bytes(binary))
    meta["entry_digest"] = entry_digest(meta)
    private_dir(binary_path.parent, top)
    clean_stale_tmp(binary_path.parent)
    atomic_write(binary_path, binary)
    atomic_write(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
    return binary_path, meta


def entry_counts(root: Optional[Path] = None) -> Dict[str, int]:
    """``{arch: number of entries}`` in the cache of this version (default :func:`cache_dir`).

    Counts committed entries (sidecars) by name only: nothing is read,
    verified or created.  Empty when the cache does not exist.
    """
    root = Path(root) if root is not None else cache_dir()
    out: Dict[str, int] = {}
    try:
        subdirs = sorted(p for p in root.iterdir() if ARCH_PATTERN.fullmatch(p.name) and p.is_dir())
    except OSError:
        return out
    for d in subdirs:
        try:
            n = sum(1 for f in d.iterdir() if f.suffix == ".json")
        except OSError:
            continue
        if n:
            out[d.name] = n
    return out
