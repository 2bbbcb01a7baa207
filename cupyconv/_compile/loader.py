"""CuPy loader for cached cubins.

``load_module(source, name_expressions, device=None)`` returns a module-like
object whose ``get_function(name_expression)`` gives a ``cupy.RawKernel``.
Names declared in the registry are grouped exactly as :func:`build` groups
them (source, dtype, rank), so AOT-built cubins are hit; a missing group is
compiled on first use and cached.  Loaded modules are memoised per device in
a bounded LRU cache (:func:`clear_module_cache` empties it).

What is built for a device is decided once per device by
:func:`device_target` from the driver version
(``cupy.cuda.runtime.driverGetVersion``), the NVRTC version and the archs
NVRTC supports, through the pure :func:`cupyconv._compile.compat.select_target`:
a cubin for the device's ``sm_XY``; PTX for the newest ``compute_XY`` NVRTC
knows when the GPU is newer than NVRTC (the driver JIT-compiles it; one
warning); or a :class:`~cupyconv._compile.compat.ToolchainMismatch` naming
both versions when nothing built here could load.
"""
from __future__ import annotations

import collections
import functools
import threading
import warnings
from typing import Dict, Iterable

from .._kernels import registry
from . import build as _build
from . import compat
from ._nvrtc import nvrtc_version, supported_archs

__all__ = ["CubinModule", "load_module", "clear_module_cache", "device_arch", "device_target",
           "MODULE_CACHE_SIZE"]

#: Loaded (device, arch, group) modules kept alive.
MODULE_CACHE_SIZE = 256

_lock = threading.Lock()
_modules: "collections.OrderedDict[tuple, CubinModule]" = collections.OrderedDict()


class CubinModule:
    """A ``cupy.RawModule`` loaded from a cached cubin or PTX file, addressed by name expression."""

    def __init__(self, path, lowered: Dict[str, str]):
        import cupy
        self.path = str(path)
        self.lowered = dict(lowered)
        self._raw = cupy.RawModule(path=self.path)
        self._functions: Dict[str, object] = {}

    def get_function(self, name: str):
        """The ``cupy.RawKernel`` of a name expression."""
        fn = self._functions.get(name)
        if fn is None:
            try:
                symbol = self.lowered[name]
            except KeyError:
                raise KeyError(f"{name!r} is not in module {self.path}") from None
            fn = self._functions[name] = self._raw.get_function(symbol)
        return fn


class _Dispatch:
    """Module-like union of several group modules."""

    def __init__(self, by_name: Dict[str, CubinModule]):
        self._by_name = by_name

    def get_function(self, name: str):
        try:
            return self._by_name[name].get_function(name)
        except KeyError:
            raise KeyError(f"{name!r} was not requested from load_module") from None


def device_arch(device=None) -> str:
    """``"sm_XY"`` of a CuPy device (current device by default)."""
    import cupy
    dev = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
    return f"sm_{dev.compute_capability}"


@functools.lru_cache(maxsize=None)
def device_target(device_id: int) -> compat.Target:
    """What to compile for a device (cubin or PTX), decided once per device.

    Raises
    ------
    cupyconv._compile.compat.ToolchainMismatch
        When no binary built by this NVRTC would load on this driver and GPU.
    """
    import cupy
    cc = int(cupy.cuda.Device(device_id).compute_capability)
    driver = compat.split_driver_version(cupy.cuda.runtime.driverGetVersion())
    target = compat.select_target(cc, driver, nvrtc_version(), supported_archs())
    if target.ptx:
        warnings.warn(target.note, RuntimeWarning, stacklevel=2)
    return target


def _load_group(device_id: int, arch: str, source: str, names: tuple) -> CubinModule:
    key = (device_id, arch, source, names)
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            _modules.move_to_end(key)
            return mod
    path, meta, _, _ = _build.compile_group(source, names, arch)
    import cupy
    with cupy.cuda.Device(device_id):
        mod = CubinModule(path, meta["lowered"])
    with _lock:
        _modules[key] = mod
        while len(_modules) > MODULE_CACHE_SIZE:
            _modules.popitem(last=False)
    return mod


def load_module(source: str, name_expressions: Iterable[str], device=None):
    """Load (compiling on a cache miss) the kernels ``name_expressions`` of ``source``.

    Parameters
    ----------
    source : str
        File relative to ``cuda_src/`` or a registry family name.
    name_expressions : iterable of str
    device : int or cupy.cuda.Device, optional
        Default: the current device.

    Returns
    -------
    module-like
        ``get_function(name_expression) -> cupy.RawKernel``.
    """
    import cupy
    if source in registry.FAMILIES:
        source = registry.FAMILIES[source].source
    dev = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
    arch = device_target(dev.id).arch
    by_name: Dict[str, CubinModule] = {}
    adhoc = []
    for name in name_expressions:
        inst = registry.lookup(name)
        if inst is None or inst.source != source:
            adhoc.append(name)
            continue
        members = tuple(sorted(i.name for i in registry.group_instantiations(*inst.group)))
        by_name[name] = _load_group(dev.id, arch, source, members)
    if adhoc:
        mod = _load_group(dev.id, arch, source, tuple(sorted(set(adhoc))))
        by_name.update({n: mod for n in adhoc})
    return _Dispatch(by_name)


def clear_module_cache() -> None:
    """Drop every loaded module (the on-disk cache is kept)."""
    with _lock:
        _modules.clear()
    device_target.cache_clear()
