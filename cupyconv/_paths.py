"""Where the kernel sources and the per-user caches live (one place).

Both caches derive from :func:`cache_root`: the NVRTC binaries in
``<root>/<package version>/`` (:mod:`cupyconv._compile.cache`) and the
emulation libraries in ``<root>/emu/`` (:mod:`cupyconv._emulation._build`).
Their directories are created 0700 and checked by
:func:`cupyconv._fsutil.private_dir`, which refuses a cache another user
could write.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cuda_src_dir", "cache_root"]


def cuda_src_dir() -> Path:
    """Directory holding the CUDA sources (``platform.cuh``, ``conv/``, ``emu/``...).

    ``$CUPYCONV_CUDA_SRC`` overrides the default, ``cuda_src/`` next to the
    ``cupyconv`` package directory.
    """
    env = os.environ.get("CUPYCONV_CUDA_SRC")
    if env:
        return Path(env).resolve()
    return (Path(__file__).resolve().parent.parent / "cuda_src").resolve()


def cache_root() -> Path:
    """``$CUPYCONV_CACHE_DIR``, else ``~/.cache/cupyconv`` (not created).

    A shared, prebuilt cache may be read-only (hits load; a miss is compiled
    into a private temporary directory) and may belong to root, but must
    not be group/world-writable.
    """
    root = os.environ.get("CUPYCONV_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "cupyconv"
