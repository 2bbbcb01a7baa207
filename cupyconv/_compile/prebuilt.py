"""Kernels packaged in a wheel, looked up first by the loader (the run side).

A wheel build packs them (:mod:`cupyconv._compile.packing`) into
``cupyconv/_prebuilt/``: the binaries under ``<arch>/`` and ``index.json``,
which records the pack's selection, the NVRTC version, and one entry per
group and arch: ``arch`` (``sm_XY`` cubin or ``compute_XY`` PTX),
``families``, ``dtype``, ``rank``, ``source``, ``names``, ``file``,
``lowered`` (name expression -> symbol), ``key``, ``sha256``, ``size``,
``nvrtc``, ``options`` and ``entry_digest``.  A wheel built without NVRTC
has an index with no entries and the reason.

:func:`find` returns the packaged binary of one group for a device (chosen
by :func:`cupyconv._compile.compat.select_packaged`), verified as a cached
one is: the entry's key is recomputed from the installed sources, the
compile options of today and the entry's NVRTC version (so a kernel built
from other sources is never used); the entry digest binds key, arch,
source, names map, binary digest and size
(:func:`cupyconv._compile.cache.entry_digest`); the file's size and SHA-256
must match; and the binary must be what the arch says and define every
mapped symbol (:func:`cupyconv._compile.cache.validate_binary`).  An entry
that fails is not used (one :class:`PackagedKernelWarning`; the loader falls
back to the user cache and NVRTC).  It never calls NVRTC.

The packaged files are part of the installed package, trusted as its Python
files are: unlike the user cache they need not be private (site-packages is
often root-owned and world-readable).  Nothing here writes, moves or
deletes them; :func:`cupyconv.clear_caches` leaves them alone.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .._fsutil import sha256_bytes
from .._paths import cuda_src_dir, prebuilt_dir
from . import cache, compat
from .build import compile_options
from .._lru import cached

__all__ = ["INDEX_NAME", "FORMAT", "PackagedKernelWarning", "Hit", "read_index", "find", "summary",
           "packaged_archs"]

#: File name of the index inside the prebuilt directory.
INDEX_NAME = "index.json"
#: Version of the index layout.
FORMAT = 1

_FILE = re.compile(r"(sm|compute)_\d{2,3}a?/[0-9A-Za-z_.+-]+\.(cubin|ptx)")


class PackagedKernelWarning(RuntimeWarning):
    """A packaged kernel failed verification and was not used."""


@dataclasses.dataclass(frozen=True)
class _Index:
    directory: Path
    data: dict
    #: (source, names) -> {arch: entry}
    groups: Dict[Tuple[str, Tuple[str, ...]], Dict[str, dict]]
    error: str = ""


@cached(maxsize=8, keep=True)
def _load(directory: str, stamp: Tuple[int, int]) -> _Index:
    path = Path(directory) / INDEX_NAME
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a format-{FORMAT} index")
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise ValueError("entries is not a list")
    except (OSError, ValueError, RecursionError) as exc:
        return _Index(Path(directory), {}, {}, f"unreadable index {path}: {exc}")
    groups: Dict[Tuple[str, Tuple[str, ...]], Dict[str, dict]] = {}
    for e in entries:
        if (isinstance(e, dict) and isinstance(e.get("source"), str) and isinstance(e.get("arch"), str)
                and isinstance(e.get("names"), list) and all(isinstance(n, str) for n in e["names"])):
            groups.setdefault((e["source"], tuple(sorted(e["names"]))), {})[e["arch"]] = e
    return _Index(Path(directory), data, groups)


def _index(directory=None) -> Optional[_Index]:
    directory = Path(directory) if directory is not None else prebuilt_dir()
    try:
        st = os.stat(directory / INDEX_NAME)
    except OSError:
        return None
    return _load(str(directory), (st.st_mtime_ns, st.st_size))


def read_index(directory=None) -> Optional[dict]:
    """The index of the packaged kernels (``None`` when there is none, as in a source checkout)."""
    idx = _index(directory)
    return None if idx is None else idx.data


@dataclasses.dataclass(frozen=True)
class Hit:
    """A verified packaged binary of one group."""

    path: Path
    lowered: Dict[str, str]
    arch: str


_warned = set()
_warn_lock = threading.Lock()


def _warn_once(path: Path, why: str) -> None:
    with _warn_lock:
        if path in _warned:
            return
        _warned.add(path)
    warnings.warn(f"packaged kernel {path} was not used: {why}; the kernel group is loaded from "
                  "the user cache or compiled with NVRTC instead (reinstall cupyconv to repair)",
                  PackagedKernelWarning, stacklevel=4)


def _expected_key(entry: dict, source: str, names: Sequence[str]) -> str:
    return cache.entry_key(nvrtc_version=entry["nvrtc"], arch=entry["arch"],
                           options=compile_options(entry["arch"]),
                           source=cuda_src_dir() / source, name_expressions=names)


def _verify(idx: _Index, entry: dict, source: str, names: Sequence[str]) -> Optional[Hit]:
    arch = entry["arch"]
    rel = entry.get("file")
    if not isinstance(rel, str) or not _FILE.fullmatch(rel) or not rel.startswith(arch + "/"):
        _warn_once(idx.directory / str(rel), "the index names no valid file")
        return None
    path = idx.directory / rel
    nvrtc = entry.get("nvrtc")
    if (not isinstance(nvrtc, list) or len(nvrtc) != 2 or not all(isinstance(v, int) for v in nvrtc)
            or not cache.valid_names(entry.get("lowered"), names)):
        _warn_once(path, "its index entry is malformed")
        return None
    if entry.get("key") != _expected_key(entry, source, names):
        return None     # built from other sources or options: not for this install, no warning
    if entry.get("entry_digest") != cache.entry_digest(entry):
        _warn_once(path, "its index entry does not match its digest")
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        _warn_once(path, f"unreadable ({exc.__class__.__name__})")
        return None
    if entry.get("size") != len(data) or entry.get("sha256") != sha256_bytes(data):
        _warn_once(path, "its size or SHA-256 differs from the index")
        return None
    problem = cache.validate_binary(data, arch, entry["lowered"].values())
    if problem is not None:
        _warn_once(path, problem)
        return None
    return Hit(path, dict(entry["lowered"]), arch)


def find(source: str, names: Sequence[str], device_cc: int, driver: Tuple[int, int],
         directory=None) -> Optional[Hit]:
    """The verified packaged binary of the group ``(source, names)`` for a device, or ``None``.

    Parameters
    ----------
    source : str
        File relative to ``cuda_src/``.
    names : sequence of str
        Every name expression of the group (exactly the packed set).
    device_cc : int
        The device's ``XY``.
    driver : (int, int)
        CUDA version of the driver.
    directory : path-like, optional
        Default :func:`cupyconv._paths.prebuilt_dir`.

    Never calls NVRTC.
    """
    idx = _index(directory)
    if idx is None or not idx.groups:
        return None
    names = tuple(sorted(set(names)))
    by_arch = idx.groups.get((source, names))
    if not by_arch:
        return None
    available = [(arch, _built(e)) for arch, e in by_arch.items() if _built(e) is not None]
    while available:
        arch = compat.select_packaged(device_cc, driver, available)
        if arch is None:
            return None
        hit = _verify(idx, by_arch[arch], source, names)
        if hit is not None:
            return hit
        available = [a for a in available if a[0] != arch]
    return None


def _built(entry: dict) -> Optional[Tuple[int, int]]:
    built = entry.get("nvrtc")
    if isinstance(built, list) and len(built) == 2 and all(isinstance(v, int) for v in built):
        return tuple(built)
    return None


def packaged_archs(source: str, directory=None) -> List[Tuple[str, Tuple[int, int]]]:
    """``(arch, NVRTC version)`` of every packaged binary of any group of ``source``
    (unverified: what ``info`` reports; :func:`find` verifies what loads)."""
    idx = _index(directory)
    if idx is None:
        return []
    found = {(arch, _built(e)) for (src, _), by_arch in idx.groups.items() if src == source
             for arch, e in by_arch.items() if _built(e) is not None}
    return sorted(found)


def summary(directory=None, device_cc: Optional[int] = None,
            driver: Optional[Tuple[int, int]] = None) -> dict:
    """What is packaged, for ``python -m cupyconv info``.

    Returns
    -------
    dict
        ``dir``, ``present`` (an index exists), ``reason`` (why there are
        no kernels), ``error``, ``nvrtc``, ``archs``, ``ptx``, ``ranks``,
        ``dtypes``, ``families``, ``groups``, ``kernels``, ``bytes``,
        ``matches_sources`` (a sample entry's key matches the installed
        sources), ``arch_specific`` (arch-specific target -> the sources packed
        for it), and with ``device_cc`` and ``driver``: ``device_arch``, the
        packaged portable arch that device would load (or ``None``).
    """
    directory = Path(directory) if directory is not None else prebuilt_dir()
    idx = _index(directory)
    out = {"dir": str(directory), "present": idx is not None, "reason": None, "error": "",
           "nvrtc": None, "archs": [], "ptx": [], "ranks": [], "dtypes": [], "families": [],
           "groups": 0, "kernels": 0, "bytes": 0, "matches_sources": None, "arch_specific": {}}
    if idx is None:
        return out
    data = idx.data
    out["error"] = idx.error
    for key in ("reason", "nvrtc", "archs", "ptx", "ranks", "dtypes", "families", "groups",
                "kernels", "bytes"):
        if key in data:
            out[key] = data[key]
    specific: Dict[str, set] = {}
    for (source, _), by_arch in idx.groups.items():
        for arch in by_arch:
            if arch.endswith("a"):
                specific.setdefault(arch, set()).add(source)
    out["arch_specific"] = {a: sorted(s) for a, s in sorted(specific.items())}
    if idx.groups:
        (source, names), by_arch = next(iter(idx.groups.items()))
        entry = next(iter(by_arch.values()))
        try:
            out["matches_sources"] = entry.get("key") == _expected_key(entry, source, names)
        except (OSError, ValueError, KeyError, TypeError):
            out["matches_sources"] = False
    if device_cc is not None and driver is not None and out["nvrtc"]:
        built = tuple(out["nvrtc"])
        portable = [a for a in list(out["archs"]) + list(out["ptx"]) if not a.endswith("a")]
        out["device_arch"] = compat.select_packaged(device_cc, driver,
                                                    [(a, built) for a in portable])
    return out
