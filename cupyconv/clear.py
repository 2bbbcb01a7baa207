"""``clear_caches``: drop every in-process cache the library keeps.

Each cache is declared where its thing is built (:func:`cupyconv._lru.cached`,
:func:`cupyconv._lru.memoized`, a :class:`cupyconv._lru.LRU`, or a clearing function
marked :func:`cupyconv._lru.clears`) and registers itself as its module is imported, so
this module imports none of them: a module never imported holds nothing to drop.  The
caches of facts of the process (compiler probes, loaded libraries) and the on-disk
kernel caches are kept.
"""
from __future__ import annotations

from ._lru import clear_registered

__all__ = ["clear_caches"]


def clear_caches() -> None:
    """Drop every cached choice, call signature, loaded kernel module and backend."""
    clear_registered()
