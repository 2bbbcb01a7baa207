"""Every in-process cache of the package registers itself, and ``clear_caches`` empties
each registered one (the facts of the process, ``keep=True``, stay)."""
from __future__ import annotations

import functools
import importlib
import pkgutil

import numpy as np

import cupyconv
from cupyconv import _lru

#: Caches that cannot register: ``_vocabulary`` sits in ``_lru``'s own (independent)
#: import layer, and ``methods_for`` is a pure function of its constant tables.
UNREGISTERED = {"cupyconv._vocabulary.methods_for"}


def _package_modules():
    """Every module of the package, imported; one whose optional dependency is missing
    (an adapter's framework) is left out."""
    for info in pkgutil.walk_packages(cupyconv.__path__, "cupyconv."):
        if info.name.endswith("__main__"):
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError as exc:
            if (exc.name or "").startswith("cupyconv"):
                raise


def _caches(module):
    """``(qualified name, cache)`` of the module's ``lru_cache``/``memoized`` functions
    (module level and in its classes) and module-level :class:`~cupyconv._lru.LRU`."""
    scopes = [(module.__name__, vars(module))]
    scopes += [(f"{module.__name__}.{name}", vars(obj)) for name, obj in vars(module).items()
               if isinstance(obj, type) and obj.__module__ == module.__name__]
    for prefix, namespace in scopes:
        for name, obj in namespace.items():
            obj = getattr(obj, "__func__", obj)        # staticmethod / classmethod
            if isinstance(obj, _lru.LRU):
                yield f"{prefix}.{name}", obj
            elif callable(getattr(obj, "cache_clear", None)) and \
                    getattr(obj, "__module__", None) == module.__name__:
                yield f"{prefix}.{name}", obj


def test_every_cache_of_the_package_is_registered():
    caches = [named for module in list(_package_modules()) for named in _caches(module)]
    clearers, lrus = _lru.registered()      # after every module's import registered its own
    clear_functions = [clear for clear, _ in clearers]
    found, missing = [], []
    for name, cache in caches:
        found.append(name)
        ok = (any(cache is lru for lru in lrus) if isinstance(cache, _lru.LRU)
              else cache.cache_clear in clear_functions)
        if not ok and name not in UNREGISTERED:
            missing.append(name)
    assert len(found) > 60          # the walk reaches the package's caches
    assert not missing, f"caches not registered with cupyconv._lru: {missing}"
    assert isinstance(cupyconv._vocabulary.methods_for, functools._lru_cache_wrapper)


def test_an_unregistered_lru_cache_is_found():
    module = type(functools)("cupyconv._fake")
    module.f = functools.lru_cache(maxsize=4)(lambda n: n)
    module.f.__module__ = "cupyconv._fake"
    clear_functions = [clear for clear, _ in _lru.registered()[0]]
    names = [name for name, cache in _caches(module) if cache.cache_clear not in clear_functions]
    assert names == ["cupyconv._fake.f"]


def test_clear_caches_empties_every_registered_cache_but_the_kept():
    x, w = np.ones((1, 2, 9)), np.ones((3, 2, 3))
    cupyconv.conv(x, w)
    cupyconv.conv(x.astype(np.float32), w.astype(np.float32), method="gemm")
    for module in _package_modules():    # every module imported: its caches registered
        pass
    clearers, lrus = _lru.registered()
    sizes = {clear: clear.__self__.cache_info().currsize for clear, _ in clearers
             if hasattr(getattr(clear, "__self__", None), "cache_info")}
    assert sum(sizes.values()) > 0 and sum(len(lru) for lru in lrus) > 0
    kept = {clear: sizes[clear] for clear, keep in clearers if keep and clear in sizes}
    cupyconv.clear_caches()
    for clear, keep in clearers:
        if clear in sizes:
            left = clear.__self__.cache_info().currsize
            assert left == (kept[clear] if keep else 0), clear
    assert all(len(lru) == 0 for lru in lrus)


def test_registered_builders_and_lrus_are_cleared():
    calls = []

    @_lru.memoized(8)
    def built(n):
        calls.append(n)
        return n

    lru = _lru.LRU(4)
    lru.put("k", 1)
    built(1), built(1)
    cupyconv.clear_caches()
    built(1)
    assert calls == [1, 1] and len(lru) == 0
