"""Where the kernel sources and the per-user caches live (one place)."""
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
    """``$CUPYCONV_CACHE_DIR``, else ``~/.cache/cupyconv`` (not created)."""
    root = os.environ.get("CUPYCONV_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "cupyconv"
