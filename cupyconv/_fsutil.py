"""File-system helpers shared by the two on-disk caches.

The NVRTC cubin cache (:mod:`cupyconv._compile.cache`) and the emulation
library cache (:mod:`cupyconv._emulation._build`) both hold code that this
process runs (a cubin on the GPU, a ``.so`` through ``dlopen``), so their
directories are a trust boundary:

* :func:`private_dir` creates each cache directory with mode 0700 and
  refuses (:class:`InsecureCacheError`) an existing directory that is not
  owned by the current user (or root) or that is group/world-writable;
  :func:`existing_private_dir` does the same check without creating.
  :func:`check_private` applies the rule to one file or directory.
* :func:`atomic_write` writes a file (mode 0600) through a temporary file in
  the same directory, ``fsync`` and ``os.replace``: readers never see a
  partial file.
* :func:`sha256_bytes` / :func:`sha256_file` are the one digest.
* :func:`clean_stale_tmp` removes ``*.tmp`` files left by a crashed writer.
* :func:`scratch_dir`, :func:`scratch_for` and :func:`warn_read_only` serve
  a read-only cache (a shared, prebuilt one): a miss is compiled into a
  private temporary directory of this process (one per cache directory) and
  a warning is issued once per cache.

Root-owned directories are trusted as well as the user's own: root can
already replace the interpreter, so trusting it adds no exposure, and a
root-owned, read-only cache is the shared ahead-of-time use case.  Files are
written 0600, so a cache built for others must be opened up for reading
(``chmod -R a+rX``): read access for others is accepted, write access is not.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import List, Optional, Set, Union

try:
    import pwd
except ImportError:  # not POSIX: no owner/mode model to check
    pwd = None

__all__ = [
    "InsecureCacheError", "ReadOnlyCacheWarning", "check_private", "private_dir",
    "existing_private_dir", "atomic_write", "sha256_bytes", "sha256_file", "clean_stale_tmp",
    "scratch_dir", "scratch_for", "warn_read_only", "STALE_TMP_SECONDS",
]

#: Age after which a ``*.tmp`` file in a cache directory is considered abandoned.
STALE_TMP_SECONDS = 3600.0

PathLike = Union[str, "os.PathLike[str]"]

_lock = threading.Lock()
_scratch: List[Path] = []
_warned: Set[str] = set()


class InsecureCacheError(RuntimeError):
    """A cache directory or file could be modified by another user.

    Deliberately not an ``OSError``: it must never be mistaken for a
    read-only cache and silently worked around.
    """


class ReadOnlyCacheWarning(UserWarning):
    """A cache could not be written; compiled code is kept for this process only."""


def _user(uid: int) -> str:
    """Login name of ``uid``, else the number."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (AttributeError, KeyError):
        return str(uid)


def _owner(uid: int) -> str:
    return f"{_user(uid)} (uid {uid})"


def check_private(path: PathLike, st: Optional[os.stat_result] = None) -> os.stat_result:
    """Refuse a cache file or directory that another user could modify.

    Parameters
    ----------
    path : path-like
    st : os.stat_result, optional
        ``os.stat(path)`` when already known.

    Returns
    -------
    os.stat_result

    Raises
    ------
    InsecureCacheError
        If ``path`` is owned by neither the current user nor root, or is
        group- or world-writable.  The message names the path, the owner and
        mode found and the fix.
    OSError
        If ``path`` cannot be stat'ed.
    """
    st = os.stat(path) if st is None else st
    if not hasattr(os, "geteuid"):  # Windows: ACLs, not POSIX owner/mode bits
        return st
    me = os.geteuid()
    problems = []
    if st.st_uid not in (me, 0):
        problems.append(f"it is owned by {_owner(st.st_uid)}, not by you ({_owner(me)})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append("it is group/world-writable")
    if problems:
        is_dir = stat.S_ISDIR(st.st_mode)
        raise InsecureCacheError(
            f"refusing to use the cupyconv cache {'directory' if is_dir else 'file'} {path}: "
            f"{' and '.join(problems)} (owner {_owner(st.st_uid)}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}); code loaded from it could be replaced by "
            f"another user.  Fix: `chown {_user(me)} {path}` and "
            f"`chmod {'700' if is_dir else '600'} {path}`, or set CUPYCONV_CACHE_DIR to a "
            f"private directory.")
    return st


def _chain(path: Path, root: Optional[PathLike]) -> List[Path]:
    """``root`` and every directory below it down to ``path`` (just ``path`` without root)."""
    if root is None:
        return [path]
    root = Path(root)
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise ValueError(f"{path} is not inside {root}") from None
    return [root] + [root.joinpath(*rel.parts[:i + 1]) for i in range(len(rel.parts))]


def private_dir(path: PathLike, root: Optional[PathLike] = None) -> Path:
    """Create (mode 0700) and check a cache directory.

    Parameters
    ----------
    path : path-like
        The directory.
    root : path-like, optional
        A directory above ``path`` (the cache root): every directory from
        ``root`` down to ``path`` is created and checked.  Directories above
        ``root`` are created with the default mode if missing.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    InsecureCacheError
        If a directory of the chain exists but fails :func:`check_private`.
    OSError
        If a directory cannot be created (e.g. a read-only cache) or a path
        of the chain is not a directory.
    """
    path = Path(path)
    chain = _chain(path, root)
    chain[0].parent.mkdir(parents=True, exist_ok=True)
    for d in chain:
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(d, 0o700)          # whatever the umask
        st = os.stat(d)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"cupyconv cache path {d} exists and is not a directory")
        check_private(d, st)
    return path


def existing_private_dir(path: PathLike, root: Optional[PathLike] = None) -> bool:
    """Check a cache directory chain without creating anything.

    Returns
    -------
    bool
        ``False`` if some directory of the chain does not exist (or is not a
        directory), ``True`` when all exist and pass :func:`check_private`.

    Raises
    ------
    InsecureCacheError
        If an existing directory of the chain fails :func:`check_private`.
    """
    for d in _chain(Path(path), root):
        try:
            st = os.stat(d)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        check_private(d, st)
    return True


def atomic_write(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, mode 0600.

    A temporary file in the same directory is written, flushed, ``fsync``'ed
    and renamed over ``path`` (``os.replace``); on any failure it is removed.

    Raises
    ------
    TypeError
        If ``data`` is not bytes.
    OSError
        If the directory is not writable (a read-only cache) or ``path`` is a
        directory.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"atomic_write takes bytes, got {type(data).__name__}")
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:       # mkstemp: mode 0600, this user
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


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: PathLike) -> str:
    """Hex SHA-256 of a file's contents (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def clean_stale_tmp(directory: PathLike, max_age: float = STALE_TMP_SECONDS) -> int:
    """Remove this user's ``*.tmp`` files older than ``max_age`` seconds.

    Never raises for file-system errors (a read-only or vanished directory
    just cleans nothing).

    Returns
    -------
    int
        Number of files removed.
    """
    removed = 0
    cutoff = time.time() - max_age
    me = os.geteuid() if hasattr(os, "geteuid") else None
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.endswith(".tmp"):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and me in (None, st.st_uid) and st.st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


def scratch_dir(create: bool = True) -> Optional[Path]:
    """This process's private temporary directory (mode 0700, removed at exit).

    Used in place of a cache that cannot be written.  With ``create=False``,
    ``None`` until some caller has created it.
    """
    with _lock:
        if not _scratch and create:
            path = Path(tempfile.mkdtemp(prefix="cupyconv-"))
            _scratch.append(path)
            atexit.register(shutil.rmtree, path, True)
        return _scratch[0] if _scratch else None


def scratch_for(cache: PathLike, create: bool = True) -> Optional[Path]:
    """The private stand-in of one unwritable cache directory, inside :func:`scratch_dir`.

    Each cache directory gets its own (named by a hash of its absolute
    path), so entries never leak from one cache root to another.  With
    ``create=False``, ``None`` unless it exists already.
    """
    base = scratch_dir(create)
    if base is None:
        return None
    path = base / sha256_bytes(os.path.abspath(cache).encode())[:16]
    if create:
        private_dir(path, base)
    return path if path.is_dir() else None


def warn_read_only(cache: PathLike, exc: BaseException) -> None:
    """Warn, once per cache directory and process, that ``cache`` is not writable."""
    key = os.path.abspath(cache)
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(
        f"the cupyconv cache {cache} is not writable ({exc.__class__.__name__}: {exc}); "
        f"code compiled on a cache miss is kept in {scratch_dir()} for this process only "
        f"(set CUPYCONV_CACHE_DIR to a writable directory to keep it)",
        ReadOnlyCacheWarning, stacklevel=3)
