"""One bounded, thread-safe LRU cache: the idiom of every in-process cache whose
key is not a plain function call (``functools.lru_cache`` serves the others)."""
from __future__ import annotations

import collections
import functools
import threading

__all__ = ["LRU", "memoized"]


class LRU:
    """A mapping of at most ``maxsize`` entries; the least recently used goes first.

    ``get_or_compute(key, compute)`` returns the cached value or stores
    ``compute()``; ``compute`` runs outside the lock (two threads may both
    compute a missing entry; the last one stored wins).
    """

    def __init__(self, maxsize):
        self.maxsize = int(maxsize)
        self._data = collections.OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, key, compute):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value

    def get(self, key, default=None):
        """The value of ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            value = self._data.get(key, default)
            if value is not default:
                self._data.move_to_end(key)
            return value

    def put(self, key, value):
        """Store ``value`` under ``key``, dropping the least recently used past ``maxsize``."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self):
        with self._lock:
            self._data.clear()

    def values(self):
        with self._lock:
            return list(self._data.values())

    def __len__(self):
        return len(self._data)


def memoized(maxsize=1024):
    """``functools.lru_cache(maxsize, typed=True)`` that computes without caching when an
    argument is unhashable (geometry given as lists, say).  Typed: ``2.0`` must not hit
    the entry of ``2`` and skip the validation that rejects it."""
    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize, typed=True)(fn)

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            try:
                return cached(*a, **kw)
            except TypeError as exc:
                if "unhashable" not in str(exc):
                    raise
                return fn(*a, **kw)
        wrapper.cache_clear = cached.cache_clear
        return wrapper
    return wrap
