"""Where the kernel sources and the per-user caches live (one place).

Both caches derive from :func:`cache_root`: the NVRTC binaries in
``<root>/<package version>/`` (:mod:`cupyconv._compile.cache`) and the
emulation libraries in ``<root>/emu/`` (:mod:`cupyconv._emulation._build`).
Their directories are created 0700 and checked by
:func:`cupyconv._fsutil.private_dir`, which refuses a cache another user
could write.

An installed wheel carries the kernel sources as package data
(``cupyconv/cuda_src/``) and, when it was built with NVRTC, prebuilt
kernels (``cupyconv/_prebuilt/``, :mod:`cupyconv._compile.prebuilt`); a
source checkout or an editable install uses ``cuda_src/`` of the checkout
and has no prebuilt kernels.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cuda_src_dir", "cache_root", "prebuilt_dir", "PACKAGE_DIR"]

#: The installed ``cupyconv`` package directory.
PACKAGE_DIR = Path(__file__).resolve().parent


def cuda_src_dir() -> Path:
    """Directory holding the CUDA sources (``platform.cuh``, ``conv/``, ``emu/``...).

    ``$CUPYCONV_CUDA_SRC`` overrides the default: ``cupyconv/cuda_src/`` in
    an installed wheel (package data), else ``cuda_src/`` next to the
    ``cupyconv`` package directory (a source checkout, an editable install).
    """
    env = os.environ.get("CUPYCONV_CUDA_SRC")
    if env:
        return Path(env).resolve()
    packaged = PACKAGE_DIR / "cuda_src"
    if packaged.is_dir():
        return packaged
    return (PACKAGE_DIR.parent / "cuda_src").resolve()


def prebuilt_dir() -> Path:
    """Where a wheel keeps its prebuilt kernels (``cupyconv/_prebuilt/``; may not exist).

    ``$CUPYCONV_PREBUILT_DIR`` overrides it (to try a pack before building
    a wheel with it, and in tests).
    """
    env = os.environ.get("CUPYCONV_PREBUILT_DIR")
    return Path(env).resolve() if env else PACKAGE_DIR / "_prebuilt"


def cache_root() -> Path:
    """``$CUPYCONV_CACHE_DIR``, else ``~/.cache/cupyconv`` (not created).

    A shared, prebuilt cache may be read-only (hits load; a miss is compiled
    into a private temporary directory) and may belong to root, but must
    not be group/world-writable.
    """
    root = os.environ.get("CUPYCONV_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "cupyconv"
