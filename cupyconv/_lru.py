"""The in-process caches and their registry.

:class:`LRU` is one bounded, thread-safe LRU cache: the idiom of every in-process cache
whose key is not a plain function call; :func:`cached` (``functools.lru_cache``) and
:func:`memoized` serve the others.  Each registers itself as it is created, and so does
a cache's own clearing function (:func:`clears`): :func:`clear_registered` (what
``cupyconv.clear_caches`` runs) is a loop over them.  A cache of a fact of the process
(a compiler probe, a loaded library) is registered with ``keep=True`` and stays.
"""
from __future__ import annotations

import collections
import functools
import threading
import weakref

__all__ = ["LRU", "memoized", "cached", "clears", "clear_registered", "registered"]

#: ``(clear function, keep)`` of every registered cache and clearing function, in
#: registration (import) order; ``keep``: left alone by :func:`clear_registered`.
_REGISTRY = []
#: The live :class:`LRU` objects (a runner's holds its device constants).
_LRUS = weakref.WeakSet()
_registry_lock = threading.Lock()


def _register(clear, keep=False):
    with _registry_lock:
        _REGISTRY.append((clear, bool(keep)))


def clears(fn=None, *, keep=False):
    """Register ``fn`` (a function of no argument that drops a cache of its module) with
    :func:`clear_registered`; usable as a decorator.  Returns ``fn``."""
    def wrap(f):
        _register(f, keep)
        return f
    return wrap if fn is None else wrap(fn)


def cached(maxsize=128, typed=False, *, keep=False):
    """``functools.lru_cache(maxsize, typed)``, registered with :func:`clear_registered`
    (``keep=True``: a fact of the process, which ``clear_caches`` leaves)."""
    def wrap(fn):
        wrapper = functools.lru_cache(maxsize=maxsize, typed=typed)(fn)
        _register(wrapper.cache_clear, keep)
        return wrapper
    return wrap


def registered():
    """``(clearers, lrus)``: the registered ``(clear function, keep)`` pairs (a cache's
    ``cache_clear`` for :func:`cached` and :func:`memoized`) and the live :class:`LRU`
    objects."""
    with _registry_lock:
        return list(_REGISTRY), list(_LRUS)


def clear_registered():
    """Run every registered clearing function and empty every live :class:`LRU`, in
    registration order; the ``keep=True`` ones stay."""
    with _registry_lock:
        clearers = [clear for clear, keep in _REGISTRY if not keep]
        lrus = list(_LRUS)
    for clear in clearers:
        clear()
    for lru in lrus:
        lru.clear()


class LRU:
    """A mapping of at most ``maxsize`` entries; the least recently used goes first.

    ``get_or_compute(key, compute)`` returns the cached value or stores
    ``compute()``; ``compute`` runs outside the lock (two threads may both
    compute a missing entry; the last one stored wins).

    With ``size`` (``size(value)``: the bytes a value holds, asked once as it is
    stored) the entries are bounded by their bytes as well: ``maxbytes`` (an int,
    ``None`` for no bound, or a callable returning either, read at each store) bounds
    their sum, the least recently used dropped first; a value larger than the bound alone
    is not stored (:meth:`put` returns False).  Dropping an entry drops the cache's
    reference, so what it holds is freed once no caller still uses it.
    """

    def __init__(self, maxsize, maxbytes=None, size=None):
        self.maxsize = int(maxsize)
        self._data = collections.OrderedDict()
        self._lock = threading.Lock()
        self._size = size
        #: the bound read at each store: a callable, or the value itself
        self._maxbytes = maxbytes
        self._sizes = {}
        self._bytes = 0
        #: ``(key, value)`` of the last hit of :meth:`get` (the most recent entry), or None
        self._last = None
        with _registry_lock:
            _LRUS.add(self)

    @property
    def nbytes(self):
        """The bytes the stored values hold (0 without ``size``)."""
        return self._bytes

    def get_or_compute(self, key, compute):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        self.put(key, value)
        return value

    def get(self, key, default=None):
        """The value of ``key`` (now the most recently used), or ``default``.

        Without the lock (taking it is most of a hit's cost; a compiled call's replay
        reads one per call): the dict's ``get`` and ``move_to_end`` are each atomic, and an
        entry another thread dropped between the two is returned as it was read.  The key
        read last is compared before the dict is asked (a plan's cache asks for one key
        over and over, and hashing a compiled call's key twice, for ``get`` and
        ``move_to_end``, is most of a hit); every store forgets it."""
        last = self._last
        if last is not None and last[0] == key:     # already the most recent: no hashing
            return last[1]
        data = self._data
        value = data.get(key, default)
        if value is not default:
            try:
                data.move_to_end(key)
            except KeyError:            # dropped meanwhile by another thread's put/clear
                return value
            self._last = (key, value)
        return value

    def put(self, key, value, size=None):
        """Store ``value`` under ``key``, dropping the least recently used past ``maxsize``
        entries or the byte bound; returns False (and forgets ``key``) when ``value`` alone
        holds more bytes than the bound.  ``size``: the bytes ``value`` holds, where the
        caller has them (else the LRU's ``size`` function is asked)."""
        if size is None:
            size = 0 if self._size is None else int(self._size(value))
        bound = self._maxbytes() if callable(self._maxbytes) else self._maxbytes
        with self._lock:
            self._last = None
            self._bytes -= self._sizes.pop(key, 0)
            if bound is not None and size > bound:
                self._data.pop(key, None)
                return False
            self._data[key] = value
            self._data.move_to_end(key)
            if size:
                self._sizes[key] = size
                self._bytes += size
            while len(self._data) > self.maxsize or (bound is not None
                                                     and self._bytes > bound):
                old, _ = self._data.popitem(last=False)
                self._bytes -= self._sizes.pop(old, 0)
        return True

    def clear(self):
        with self._lock:
            self._last = None
            self._data.clear()
            self._sizes.clear()
            self._bytes = 0

    def values(self):
        with self._lock:
            return list(self._data.values())

    def keys(self):
        """The keys, least recently used first."""
        with self._lock:
            return list(self._data)

    def __len__(self):
        return len(self._data)


def memoized(maxsize=1024, *, keep=False):
    """``functools.lru_cache(maxsize, typed=True)`` that computes without caching when an
    argument is unhashable (geometry given as lists, say).  Typed: ``2.0`` must not hit
    the entry of ``2`` and skip the validation that rejects it.  Registered with
    :func:`clear_registered` as :func:`cached` is."""
    def wrap(fn):
        inner = functools.lru_cache(maxsize=maxsize, typed=True)(fn)

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            try:
                return inner(*a, **kw)
            except TypeError as exc:
                if "unhashable" not in str(exc):
                    raise
                return fn(*a, **kw)
        wrapper.cache_clear = inner.cache_clear
        wrapper.cache_info = inner.cache_info
        _register(wrapper.cache_clear, keep)
        return wrapper
    return wrap
