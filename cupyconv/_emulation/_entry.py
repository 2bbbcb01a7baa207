"""One emulated cache entry: the digest and key string that bind a library to its name.

An entry is ``<stem>.so`` (the library, carrying the string :func:`entry_mark` of its
stem behind the exported ``emu_entry_key``) and ``<stem>.sha256`` (:func:`entry_digest`
of the stem and the library's bytes).  :func:`library_verified` checks both before a
library is loaded; :func:`evict` removes an entry that failed.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from .._fsutil import check_private, sha256_bytes

__all__ = ["FORMAT", "ENTRY_KEY_SYMBOL", "entry_digest", "entry_mark", "entry_source",
           "library_verified", "evict"]

#: Version of the entry layout (part of every key and of :func:`entry_digest`).
FORMAT = 2

#: The ``extern "C"`` function every library exports: its entry's key.
ENTRY_KEY_SYMBOL = "emu_entry_key"


def entry_digest(stem: str, data: bytes) -> str:
    """Digest binding a library's bytes to its entry's name (key and flavour)."""
    return sha256_bytes(f"cupyconv-emu\0{FORMAT}\0{stem}\0{sha256_bytes(data)}".encode())


def entry_mark(stem: str) -> str:
    """The key string a library of entry ``stem`` carries (and ``emu_entry_key`` returns)."""
    return f"cupyconv-emu-entry:{stem}"


def _regular_private(path: Path) -> bool:
    """Whether ``path`` is a regular file, not a symlink (refuses untrusted files)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        return False
    check_private(path, st)
    return True


def library_verified(lib: Path) -> bool:
    """Whether a cached library is bound to its entry (``lib``'s name).

    True when ``lib`` and its ``.sha256`` sidecar are regular files (a
    symbolic link is refused), the sidecar holds :func:`entry_digest` of the
    name and the bytes, and the bytes carry the library's key string.

    Raises
    ------
    cupyconv._fsutil.InsecureCacheError
        If the library or its sidecar could be modified by another user.
    """
    sidecar = lib.with_suffix(".sha256")
    try:
        if not (_regular_private(lib) and _regular_private(sidecar)):
            return False
        recorded = sidecar.read_text().strip()
        data = lib.read_bytes()
    except (OSError, UnicodeDecodeError):
        return False
    return (recorded == entry_digest(lib.stem, data)
            and (entry_mark(lib.stem) + "\0").encode() in data)


def evict(lib: Path) -> None:
    """Remove a cache entry (sidecar first, so a crash leaves a miss); never raises."""
    for path in (lib.with_suffix(".sha256"), lib):
        try:
            os.unlink(path)
        except OSError:
            pass


def entry_source(wrapper_source: str, stem: str) -> str:
    """The wrapper plus the export that names the entry it is compiled for."""
    return (f"{wrapper_source}\nextern \"C\" __attribute__((visibility(\"default\"))) const char* "
            f"{ENTRY_KEY_SYMBOL}() {{ return \"{entry_mark(stem)}\"; }}\n")
