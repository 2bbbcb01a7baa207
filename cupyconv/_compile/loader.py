"""CuPy loader: packaged kernels first, then the user cache, then NVRTC.

``load_module(source, name_expressions, device=None)`` returns a module-like
object whose ``get_function(name_expression)`` gives a ``cupy.RawKernel``.
Names declared in the registry are grouped exactly as :func:`build` groups
them (source, dtype, rank).  Each group is resolved by :func:`resolve_group`:

1. the kernels packaged in the wheel (:mod:`cupyconv._compile.prebuilt`,
   verified by digest; no NVRTC needed): the device's own cubin, a cubin of
   a lower arch of the same major, or the packaged PTX for a newer GPU;
2. the per-user cache (:mod:`cupyconv._compile.cache`);
3. NVRTC, whose output is stored in the cache.

Loaded modules are memoised per device in a bounded LRU cache
(:func:`clear_module_cache` empties it; files on disk are kept, packaged
ones included); each knows where it came from (``origin``: ``"package"``,
``"cache"`` or ``"nvrtc"``), which :func:`loaded_origins` counts.

What NVRTC builds for a device is decided once per device by
:func:`nvrtc_target` from the driver version
(``cupy.cuda.runtime.driverGetVersion``), the NVRTC version and the archs
NVRTC supports, through the pure :func:`cupyconv._compile.compat.select_target`:
a cubin for the device's ``sm_XY``; PTX for the newest ``compute_XY`` NVRTC
knows when the GPU is newer than NVRTC (the driver JIT-compiles it; one
warning); or a :class:`~cupyconv._compile.compat.ToolchainMismatch` naming
both versions when nothing built here could load.

A group of an arch-specific family (``KernelFamily.arch_specific``, e.g.
``sm_90a``) is resolved the same way for its arch-specific target, chosen by
:func:`cupyconv._compile.compat.select_specific`: only on the compute
capability that runs it (9.0 for sm_90a), never as PTX.  Elsewhere, and when
its cubin is missing, fails to build or is refused by the driver, loading
raises :class:`~cupyconv._compile.compat.ArchSpecificUnavailable` with the
reason, which is also recorded for :func:`arch_specific_refusals`
(``python -m cupyconv info`` prints them); the launcher then runs the
portable kernels.  :func:`specific_choice` tells beforehand.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import warnings
from pathlib import Path
from typing import Dict, Iterable, Tuple

from .._kernels import registry
from . import compat, prebuilt
from .build import compile_group
from ._nvrtc import KernelCompileError, NvrtcUnavailable, nvrtc_version, supported_archs
from .._lru import cached, clears

__all__ = ["CubinModule", "Resolved", "load_module", "clear_module_cache", "device_arch",
           "device_target", "nvrtc_target", "device_properties", "resolve_group",
           "loaded_origins", "MODULE_CACHE_SIZE", "ORIGINS", "declared_specific",
           "specific_choice", "arch_specific_refusals"]

#: Loaded (device, group) modules kept alive.
MODULE_CACHE_SIZE = 256
#: Where a kernel group can come from, in the order the loader looks.
ORIGINS = ("package", "cache", "nvrtc")

_lock = threading.Lock()
_modules: "collections.OrderedDict[tuple, CubinModule]" = collections.OrderedDict()
#: (device cc, source) -> why its arch-specific group did not load (this process).
_refusals: Dict[Tuple[int, str], str] = {}


class CubinModule:
    """A ``cupy.RawModule`` loaded from a cubin or PTX file, addressed by name expression.

    Parameters
    ----------
    path : path-like
    lowered : dict
        Name expression -> symbol.
    device_id : int, optional
        Load the module on this device (default: the current one).
    origin : str
        ``"package"``, ``"cache"`` or ``"nvrtc"``.
    arch : str
        The binary's ``sm_XY`` or ``compute_XY``.
    refuse : callable, optional
        ``refuse(driver error) -> exception`` for an arch-specific binary: ``RawModule(path=...)``
        loads lazily, so the driver's refusal (``CUDADriverError``) surfaces in
        :meth:`get_function`, which raises what ``refuse`` returns
        (``ArchSpecificUnavailable``, recorded for ``info``) instead.
    """

    def __init__(self, path, lowered: Dict[str, str], device_id=None, origin: str = "",
                 arch: str = "", refuse=None):
        import cupy
        self.path = str(path)
        self.lowered = dict(lowered)
        self.origin = origin
        self.arch = arch
        self._refuse = refuse
        if device_id is None:
            self._raw = cupy.RawModule(path=self.path)
        else:
            with cupy.cuda.Device(device_id):
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
            try:
                fn = self._raw.get_function(symbol)
            except Exception as exc:   # noqa: BLE001 - the driver's error type is CuPy's
                if self._refuse is None:
                    raise
                raise self._refuse(exc) from exc
            self._functions[name] = fn
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

    def origin(self, name: str) -> str:
        """Where the kernel ``name`` came from: ``"package"``, ``"cache"`` or ``"nvrtc"``."""
        return self._by_name[name].origin

    def module(self, name: str) -> CubinModule:
        """The group module serving ``name``."""
        return self._by_name[name]


def device_arch(device=None) -> str:
    """``"sm_XY"`` of a CuPy device (current device by default)."""
    import cupy
    dev = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
    return f"sm_{dev.compute_capability}"


def _query(device_id: int) -> Tuple[int, Tuple[int, int]]:
    import cupy
    cc = int(cupy.cuda.Device(device_id).compute_capability)
    return cc, compat.split_driver_version(cupy.cuda.runtime.driverGetVersion())


@cached(maxsize=None)
def _properties(device_id: int) -> Tuple[int, Tuple[int, int]]:
    return _query(device_id)


def device_properties(device=None) -> Tuple[int, int, Tuple[int, int]]:
    """``(device id, compute capability XY, driver (major, minor))`` of a CuPy device.

    The capability and the driver version are queried once per device.
    """
    import cupy
    dev = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
    cc, driver = _properties(dev.id)
    return dev.id, cc, driver


def _select(device_cc: int, driver: Tuple[int, int]) -> compat.Target:
    target = compat.select_target(device_cc, driver, nvrtc_version(), supported_archs())
    if target.ptx:
        warnings.warn(target.note, RuntimeWarning, stacklevel=3)
    return target


@cached(maxsize=None)
def nvrtc_target(device_cc: int, driver: Tuple[int, int]) -> compat.Target:
    """What NVRTC compiles for a device (cubin or PTX), decided once per (arch, driver).

    Raises
    ------
    cupyconv._compile.compat.ToolchainMismatch
        When no binary built by this NVRTC would load on this driver and GPU.
    NvrtcUnavailable
        When no NVRTC library loads.
    """
    return _select(device_cc, tuple(driver))


@cached(maxsize=None)
def device_target(device_id: int) -> compat.Target:
    """:func:`nvrtc_target` of a CuPy device, decided once per device."""
    return _select(*_query(int(device_id)))


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Where one kernel group is loaded from."""

    path: Path
    lowered: Dict[str, str]
    arch: str
    #: ``"package"``, ``"cache"`` or ``"nvrtc"``.
    origin: str


def _missing_nvrtc(source: str, device_cc: int, exc: Exception) -> NvrtcUnavailable:
    info = prebuilt.summary()
    if not info["present"]:
        where = "this install has no packaged kernels (a source checkout or editable install)"
    elif not info["kernels"]:
        where = f"this wheel has no packaged kernels ({info['reason']})"
    else:
        where = (f"it is not among the packaged kernels ({', '.join(info['dtypes'])}; ranks "
                 f"{', '.join(map(str, info['ranks']))}; {', '.join(info['archs'] + info['ptx'])})")
    return NvrtcUnavailable(
        f"the kernel group {Path(source).stem} for sm_{device_cc} must be compiled, but {where} "
        f"and NVRTC is not available ({exc}). Install NVRTC: pip install nvidia-cuda-nvrtc-cu12 "
        f"(CUDA 12) or nvidia-cuda-nvrtc (CUDA 13), e.g. through the cuda12/cuda13 extra; "
        f"`python -m cupyconv info` shows what is installed.")


def declared_specific(source: str) -> Tuple[str, ...]:
    """The arch-specific targets declared by the families of ``source`` (empty: portable)."""
    return tuple(sorted({a for fam in registry.FAMILIES.values() if fam.source == source
                         for a in fam.arch_specific}))


def _nvrtc_or_none():
    try:
        return nvrtc_version(), supported_archs()
    except (NvrtcUnavailable, OSError, RuntimeError):
        return None, None


def specific_choice(source: str, device_cc: int, driver: Tuple[int, int]) -> compat.SpecificChoice:
    """Whether the arch-specific groups of ``source`` would run on a device, and why.

    Packaged cubins (any group of ``source``), NVRTC and the driver are considered
    (:func:`cupyconv._compile.compat.select_specific`), and a refusal recorded in this
    process for the device overrides a positive answer.

    Parameters
    ----------
    source : str
        File relative to ``cuda_src/`` of an arch-specific family.
    device_cc : int
        Compute capability ``XY`` (a stand-in device in tests).
    driver : (int, int)
        CUDA version of the driver.
    """
    declared = declared_specific(source)
    if not declared:
        return compat.SpecificChoice(None, f"{source} declares no arch-specific target")
    with _lock:
        refused = _refusals.get((device_cc, source))
    if refused is not None:
        return compat.SpecificChoice(None, refused)
    nvrtc, supported = _nvrtc_or_none()
    return compat.select_specific(device_cc, declared, driver, nvrtc, supported,
                                  prebuilt.packaged_archs(source))


def _refuse(device_cc: int, source: str, reason: str) -> compat.ArchSpecificUnavailable:
    with _lock:
        _refusals[(device_cc, source)] = reason
    return compat.ArchSpecificUnavailable(reason)


def _driver_refused(device_cc: int, source: str, arch: str, exc: Exception):
    """The recorded refusal of an arch-specific cubin the driver would not load (when the
    module loads, or lazily when its first kernel is fetched: the loaded module is
    forgotten, so the next load asks the refusal, not the driver)."""
    with _lock:
        for key in [k for k in _modules if k[1] == source]:
            del _modules[key]
    return _refuse(device_cc, source, f"{Path(source).stem}: the driver refused the {arch} "
                   f"cubin ({exc}); the portable kernels run instead")


def arch_specific_refusals() -> Dict[str, str]:
    """``{"sm_XY source": reason}`` for each arch-specific group that did not load here."""
    with _lock:
        return {f"sm_{cc} {source}": why for (cc, source), why in sorted(_refusals.items())}


def _resolve_specific(source: str, names: Tuple[str, ...], device_cc: int,
                      driver: Tuple[int, int], declared: Tuple[str, ...]) -> Resolved:
    with _lock:
        refused = _refusals.get((device_cc, source))
    if refused is not None:          # once per process: a refused group is not tried again
        raise compat.ArchSpecificUnavailable(refused)
    hit = prebuilt.find(source, names, device_cc, driver)
    if hit is not None:
        return Resolved(hit.path, hit.lowered, hit.arch, "package")
    nvrtc, supported = _nvrtc_or_none()
    choice = compat.select_specific(device_cc, declared, driver, nvrtc, supported)
    if choice.arch is None:
        raise _refuse(device_cc, source, f"{Path(source).stem}: {choice.reason}")
    try:
        path, meta, cached, _ = compile_group(source, names, choice.arch)
    except (KernelCompileError, NvrtcUnavailable) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _refuse(device_cc, source, f"{Path(source).stem}: building the {choice.arch} cubin "
                      f"failed ({first}); the portable kernels run instead") from exc
    return Resolved(Path(path), meta["lowered"], choice.arch, "cache" if cached else "nvrtc")


def resolve_group(source: str, names: Iterable[str], device_cc: int,
                  driver: Tuple[int, int]) -> Resolved:
    """Find the binary of one group: packaged, else the user cache, else NVRTC.

    Parameters
    ----------
    source : str
        File relative to ``cuda_src/``.
    names : iterable of str
        Every name expression of the group.
    device_cc : int
        Compute capability ``XY`` of the device.
    driver : (int, int)
        CUDA version of the driver.

    Raises
    ------
    NvrtcUnavailable
        When the group is not packaged (for this device) and NVRTC cannot
        be loaded; the message says what to install.
    cupyconv._compile.compat.ArchSpecificUnavailable
        For a group of an arch-specific family that this device does not run
        (or whose cubin is missing and cannot be built); recorded with the reason.
    """
    names = tuple(sorted(set(names)))
    declared = declared_specific(source)
    if declared:
        return _resolve_specific(source, names, device_cc, tuple(driver), declared)
    hit = prebuilt.find(source, names, device_cc, driver)
    if hit is not None:
        return Resolved(hit.path, hit.lowered, hit.arch, "package")
    try:
        arch = nvrtc_target(device_cc, tuple(driver)).arch
        path, meta, cached, _ = compile_group(source, names, arch)
    except NvrtcUnavailable as exc:
        raise _missing_nvrtc(source, device_cc, exc) from exc
    return Resolved(Path(path), meta["lowered"], arch, "cache" if cached else "nvrtc")


def _load_group(device_id: int, device_cc: int, driver, source: str, names: tuple) -> CubinModule:
    key = (device_id, source, names)
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            _modules.move_to_end(key)
            return mod
    res = resolve_group(source, names, device_cc, driver)
    refuse = (functools.partial(_driver_refused, device_cc, source, res.arch)
              if compat.arch_parts(res.arch)[2] else None)
    try:
        mod = CubinModule(res.path, res.lowered, device_id, origin=res.origin, arch=res.arch,
                          refuse=refuse)
    except Exception as exc:   # noqa: BLE001 - the driver's error type is CuPy's
        if refuse is None:
            raise
        raise refuse(exc) from exc
    with _lock:
        _modules[key] = mod
        while len(_modules) > MODULE_CACHE_SIZE:
            _modules.popitem(last=False)
    return mod


def load_module(source: str, name_expressions: Iterable[str], device=None):
    """Load the kernels ``name_expressions`` of ``source``: packaged, cached or compiled.

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
        ``get_function(name_expression) -> cupy.RawKernel``;
        ``origin(name_expression)`` says where its group came from.
    """
    if source in registry.FAMILIES:
        source = registry.FAMILIES[source].source
    device_id, cc, driver = device_properties(device)
    by_name: Dict[str, CubinModule] = {}
    adhoc = []
    for name in name_expressions:
        group = registry.group_members(name)
        if group is None or group[0] != source:
            adhoc.append(name)
            continue
        by_name[name] = _load_group(device_id, cc, driver, source, group[1])
    if adhoc:
        mod = _load_group(device_id, cc, driver, source, tuple(sorted(set(adhoc))))
        by_name.update({n: mod for n in adhoc})
    return _Dispatch(by_name)


def loaded_origins() -> Dict[str, int]:
    """How many loaded kernel groups came from each origin (``package``, ``cache``, ``nvrtc``)."""
    with _lock:
        counts = collections.Counter(m.origin for m in _modules.values())
    return {o: counts.get(o, 0) for o in ORIGINS}


@clears
def clear_module_cache() -> None:
    """Drop every loaded module (files on disk, the cache and the packaged kernels, are kept)."""
    with _lock:
        _modules.clear()
        _refusals.clear()
    nvrtc_target.cache_clear()
    device_target.cache_clear()
    _properties.cache_clear()
