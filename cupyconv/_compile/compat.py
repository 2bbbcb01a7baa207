"""Which binary to build for a device: NVRTC, driver and GPU versions (pure functions).

Two mismatches break a cubin build (the loader feeds these functions the
versions of the running system; they are unit-tested without a GPU):

* **NVRTC newer than the driver.**  Within one CUDA major release a cubin
  (SASS) built by a newer NVRTC still loads on an older driver ("minor
  version compatibility", CUDA 11+:
  https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html),
  but PTX does not: NVRTC 11.3+ emits PTX that needs a driver at least as
  new as its own CUDA release (NVRTC User Guide, "Versioning",
  https://docs.nvidia.com/cuda/archive/11.3.0/nvrtc/index.html#versioning;
  CuPy compiles to cubins for the same reason, ``cupy/cuda/compiler.py``).
  Across major releases neither loads.
* **A GPU newer than NVRTC knows** (``-arch=sm_120`` with NVRTC 12.6): no
  cubin can be built.  PTX for the newest ``compute_XY`` that NVRTC knows
  and that is not above the device's arch is JIT-compiled by the driver for
  the device (PTX is forward compatible), provided the driver can read that
  PTX, i.e. is at least as new as NVRTC.

:func:`select_target` decides (cubin, PTX fallback, or a clear
:class:`ToolchainMismatch` naming both versions); the archs NVRTC supports
come from ``nvrtcGetSupportedArchs`` when available, else from
:func:`known_archs`.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

__all__ = ["Target", "ToolchainMismatch", "split_driver_version", "known_archs",
           "select_target", "format_version", "select_packaged", "MIN_LINUX_DRIVER",
           "GPU_INSTALL", "ARCH_SPECIFIC", "ArchSpecificUnavailable", "SpecificChoice",
           "select_specific", "arch_parts"]

Version = Tuple[int, int]

# sm_XY -> (NVRTC version that added it, version that dropped it or None).
# Sources: the "Supported Compile Options" (--gpu-architecture) section of each
# NVRTC User Guide release, https://docs.nvidia.com/cuda/archive/<version>/nvrtc/
# (sm_3x dropped in 12.0, pre-Turing archs dropped and sm_101 renamed sm_110 in
# 13.0), cross-checked with CuPy's cupy/cuda/compiler.py::_get_max_compute_capability
# and, in the test suite, with nvrtcGetSupportedArchs of the installed NVRTC.
_ARCH_SPAN = {
    35: ((11, 0), (12, 0)), 37: ((11, 0), (12, 0)),
    **{a: ((11, 0), (13, 0)) for a in (50, 52, 53, 60, 61, 62, 70, 72)},
    75: ((11, 0), None), 80: ((11, 0), None), 86: ((11, 1), None), 87: ((11, 4), None),
    89: ((11, 8), None), 90: ((11, 8), None), 100: ((12, 8), None), 101: ((12, 8), (13, 0)),
    120: ((12, 8), None), 103: ((12, 9), None), 121: ((12, 9), None), 110: ((13, 0), None),
}


#: Arch-specific targets a kernel family may declare: arch -> (the one compute capability
#: whose devices load it, the NVRTC version that added it).  An ``sm_90a`` cubin (Hopper's
#: ``wgmma``, ``setmaxnreg``) loads only on compute capability 9.0 (H100/H200), not on 9.x
#: nor 10.0 (PTX ISA, "Architecture-specific features"; CUDA C++ Programming Guide,
#: "Feature availability"); NVRTC 12.0 added it.  No PTX is built for them: ``compute_90a``
#: PTX also JIT-compiles only for 9.0, so it would add nothing to the cubin.
ARCH_SPECIFIC = {"sm_90a": (90, (12, 0))}


#: Oldest Linux NVIDIA driver of each CUDA major release (CUDA Toolkit release notes,
#: "CUDA Toolkit and Corresponding Driver Versions"; 12.x runs on any 12.0 driver by minor
#: version compatibility, except PTX, which needs a driver as new as its NVRTC).
MIN_LINUX_DRIVER = {12: "525.60.13", 13: "580.65.06"}
#: What to install for the GPU: the one hint of ``python -m cupyconv info`` and of
#: ``use_backend("cuda")`` without CuPy (README, docs/install.md).
GPU_INSTALL = (
    'pip install -e ".[cuda12]" (NVIDIA driver >= {d12}) or -e ".[cuda13]" (driver >= {d13}); '
    "from a wheel: pip install \"cupyconv[cuda12]\"; docs/install.md".format(
        d12=MIN_LINUX_DRIVER[12], d13=MIN_LINUX_DRIVER[13]))


class ToolchainMismatch(RuntimeError):
    """NVRTC, the CUDA driver and the GPU cannot produce a loadable kernel together."""


class ArchSpecificUnavailable(RuntimeError):
    """An arch-specific kernel group (``sm_90a``) cannot run on this device; the message
    says why.  The launcher takes the portable kernels instead."""


@dataclasses.dataclass(frozen=True)
class Target:
    """What to compile for one device.

    Attributes
    ----------
    arch : str
        The NVRTC ``-arch``: ``"sm_90"`` (a cubin) or ``"compute_90"`` (PTX).
    device_arch : str
        The device's ``"sm_XY"``.
    note : str
        Why PTX was chosen (empty for a cubin).
    """

    arch: str
    device_arch: str
    note: str = ""

    @property
    def ptx(self) -> bool:
        """Whether the target is PTX for the driver to JIT-compile."""
        return self.arch.startswith("compute_")


@dataclasses.dataclass(frozen=True)
class SpecificChoice:
    """Whether a family's arch-specific target is used on one device, and why (or why not).

    Attributes
    ----------
    arch : str or None
        ``"sm_90a"``, or ``None``: the launcher falls back to the portable kernels.
    reason : str
        One sentence for ``python -m cupyconv info`` and the fallback's record.
    """

    arch: Optional[str]
    reason: str


def arch_parts(arch: str) -> Tuple[str, int, bool]:
    """``"sm_90a"`` -> ``("sm", 90, True)``; ``"compute_90"`` -> ``("compute", 90, False)``.

    Raises
    ------
    ValueError
        For anything else than ``sm_XY``, ``compute_XY`` or an arch-specific target of
        :data:`ARCH_SPECIFIC` (or its ``compute_`` PTX spelling).
    """
    kind, _, rest = arch.partition("_") if isinstance(arch, str) else ("", "", "")
    specific = rest.endswith("a")
    number = rest[:-1] if specific else rest
    if (kind not in ("sm", "compute") or not number.isdigit() or not 2 <= len(number) <= 3
            or (specific and f"sm_{rest}" not in ARCH_SPECIFIC)):
        raise ValueError(f"arch must look like sm_90, compute_90 or one of the arch-specific "
                         f"targets {sorted(ARCH_SPECIFIC)}; got {arch!r}")
    return kind, int(number), specific


def select_specific(device_cc: int, declared: Sequence[str], driver: Version, nvrtc: Optional[Version],
                    supported: Optional[Sequence[int]] = None,
                    packaged: Sequence[Tuple[str, Version]] = ()) -> SpecificChoice:
    """Which of a family's arch-specific targets a device runs, or why none.

    Parameters
    ----------
    device_cc : int
        The device's compute capability as ``XY``.
    declared : sequence of str
        The family's arch-specific targets (``KernelFamily.arch_specific``).
    driver : (int, int)
        CUDA version of the driver.
    nvrtc : (int, int) or None
        NVRTC version (``None``: no NVRTC loads).
    supported : sequence of int, optional
        The ``XY`` NVRTC compiles for (default :func:`known_archs`).
    packaged : sequence of (str, (int, int))
        ``(arch, NVRTC version that built it)`` of the group's packaged binaries.

    Returns
    -------
    SpecificChoice
        ``sm_90a`` only on compute capability 9.0, when a packaged cubin loads on this
        driver or NVRTC can build one; else ``arch=None`` with the reason.
    """
    if isinstance(device_cc, bool) or not isinstance(device_cc, int) or device_cc <= 0:
        raise ValueError(f"device_cc must be a positive int such as 90, got {device_cc!r}")
    driver = tuple(driver)[:2]
    dev = f"sm_{device_cc}"
    runs = [a for a in declared if a in ARCH_SPECIFIC and ARCH_SPECIFIC[a][0] == device_cc]
    if not runs:
        where = ", ".join(f"{a} on compute capability {ARCH_SPECIFIC[a][0] // 10}."
                          f"{ARCH_SPECIFIC[a][0] % 10}" for a in declared if a in ARCH_SPECIFIC)
        return SpecificChoice(None, f"the device is {dev}; {where or 'no known target'} only; "
                                    f"the portable kernels run instead")
    arch = runs[0]
    if any(a == arch and tuple(b)[:2][0] <= driver[0] for a, b in packaged):
        return SpecificChoice(arch, f"{dev}: packaged {arch} cubin")
    if nvrtc is None:
        return SpecificChoice(None, f"{dev}: no packaged {arch} cubin and no NVRTC to build one; "
                                    f"the portable kernels run instead")
    nvrtc = tuple(nvrtc)[:2]
    archs = known_archs(nvrtc) if supported is None else tuple(int(a) for a in supported)
    if nvrtc < ARCH_SPECIFIC[arch][1] or ARCH_SPECIFIC[arch][0] not in archs:
        return SpecificChoice(None, f"{dev}: NVRTC {format_version(nvrtc)} cannot build {arch} "
                                    f"(needs NVRTC >= {format_version(ARCH_SPECIFIC[arch][1])}); "
                                    f"the portable kernels run instead")
    if nvrtc[0] > driver[0]:
        return SpecificChoice(None, f"{dev}: NVRTC {format_version(nvrtc)} is from a newer CUDA "
                                    f"major release than the driver ({format_version(driver)}), "
                                    f"which cannot load its {arch} cubin; the portable kernels "
                                    f"run instead")
    return SpecificChoice(arch, f"{dev}: {arch} cubin from the user cache or NVRTC "
                                f"{format_version(nvrtc)}")


def format_version(version: Sequence[int]) -> str:
    """``(12, 4)`` -> ``"12.4"``."""
    return ".".join(str(int(v)) for v in version)


def split_driver_version(code: int) -> Version:
    """``cudaDriverGetVersion`` code to ``(major, minor)``: ``12040`` -> ``(12, 4)``.

    Raises
    ------
    ValueError
        For a code that is not a positive integer.
    """
    if isinstance(code, bool) or not isinstance(code, int) or code <= 0:
        raise ValueError(f"CUDA driver version must be a positive int such as 12040, got {code!r}")
    return code // 1000, (code % 1000) // 10


def known_archs(nvrtc: Version) -> Tuple[int, ...]:
    """The ``XY`` of every ``sm_XY`` NVRTC ``nvrtc`` accepts, from a table.

    The fallback for an NVRTC without ``nvrtcGetSupportedArchs`` (added in
    CUDA 11.2); see the sources cited at ``_ARCH_SPAN``.  Empty for an NVRTC
    older than 11.0.
    """
    nvrtc = tuple(nvrtc)[:2]
    return tuple(sorted(a for a, (added, dropped) in _ARCH_SPAN.items()
                        if added <= nvrtc and (dropped is None or nvrtc < dropped)))


def select_target(device_cc: int, driver: Version, nvrtc: Version,
                  supported: Optional[Sequence[int]] = None) -> Target:
    """The NVRTC arch to build for a device, or why none will load.

    Parameters
    ----------
    device_cc : int
        The device's compute capability as ``XY`` (``90`` for sm_90).
    driver : (int, int)
        CUDA version of the driver (:func:`split_driver_version`).
    nvrtc : (int, int)
        NVRTC version.
    supported : sequence of int, optional
        The archs NVRTC accepts (``nvrtcGetSupportedArchs``); default
        :func:`known_archs`.

    Returns
    -------
    Target
        ``sm_<device_cc>`` when NVRTC knows the device; else PTX for the
        newest ``compute_XY <= device_cc`` NVRTC knows.

    Raises
    ------
    ToolchainMismatch
        NVRTC is of a newer CUDA major release than the driver; or the
        device is newer than NVRTC knows and the driver is older than NVRTC
        (it cannot JIT that PTX); or the device is older than every arch
        NVRTC supports.
    """
    if isinstance(device_cc, bool) or not isinstance(device_cc, int) or device_cc <= 0:
        raise ValueError(f"device_cc must be a positive int such as 90, got {device_cc!r}")
    driver, nvrtc = tuple(driver)[:2], tuple(nvrtc)[:2]
    archs = sorted(int(a) for a in (known_archs(nvrtc) if supported is None else supported))
    dev = f"sm_{device_cc}"
    names = f"NVRTC {format_version(nvrtc)} and CUDA driver {format_version(driver)}"
    if nvrtc[0] > driver[0]:
        raise ToolchainMismatch(
            f"{names}: NVRTC is from a newer CUDA major release than the driver, which can "
            f"load neither its cubins nor its PTX.  Update the NVIDIA driver to CUDA "
            f"{nvrtc[0]}.x, or install the NVRTC/CuPy of CUDA {driver[0]}.x "
            f"(e.g. cupy-cuda{driver[0]}x, nvidia-cuda-nvrtc-cu{driver[0]}).")
    if device_cc in archs:
        return Target(dev, dev)
    lower = [a for a in archs if a < device_cc]
    if not lower:
        oldest = f"sm_{archs[0]}" if archs else "none"
        raise ToolchainMismatch(
            f"{names}: the GPU ({dev}) is older than every arch this NVRTC supports (oldest "
            f"{oldest}); install an older CUDA toolkit's NVRTC/CuPy for this GPU.")
    best = lower[-1]
    if driver < nvrtc:
        raise ToolchainMismatch(
            f"{names}: the GPU ({dev}) is newer than this NVRTC knows (newest sm_{archs[-1]}), "
            f"so only PTX can be built, and PTX from NVRTC {format_version(nvrtc)} needs a "
            f"driver for CUDA >= {format_version(nvrtc)}.  Update the NVIDIA driver, or "
            f"install an NVRTC that supports {dev}.")
    return Target(f"compute_{best}", dev,
                  f"{names}: the GPU ({dev}) is newer than this NVRTC knows (newest "
                  f"sm_{archs[-1]}); using PTX for compute_{best}, JIT-compiled by the driver")


def select_packaged(device_cc: int, driver: Version,
                    available: Sequence[Tuple[str, Version]]) -> Optional[str]:
    """Which packaged (prebuilt) binary of one kernel group loads on a device, if any.

    Parameters
    ----------
    device_cc : int
        The device's compute capability as ``XY``.
    driver : (int, int)
        CUDA version of the driver.
    available : sequence of (str, (int, int))
        ``(arch, NVRTC version that built it)`` of every packaged binary of
        the group: ``sm_XY`` cubins (``sm_90a`` too) and ``compute_XY`` PTX.

    Returns
    -------
    str or None
        In this order: an arch-specific cubin (``sm_90a``) when the device is
        its one compute capability; the cubin for the device's own arch; a cubin of the
        same major and a lower minor arch (a cubin for ``sm_XY`` runs on
        ``sm_XZ`` with ``Z >= Y``: CUDA C++ Programming Guide, "Binary
        compatibility"), the newest such; PTX for the newest ``compute_XY``
        not above the device, which the driver JIT-compiles.  A cubin needs
        a driver of at least its NVRTC's major release (minor version
        compatibility), PTX a driver at least as new as its NVRTC (see the
        module docstring).  ``None`` when nothing packaged would load.
    """
    driver = tuple(driver)[:2]
    major = device_cc // 10
    cubins, ptx = [], []
    for arch, built in available:
        try:
            kind, cc, specific = arch_parts(arch)
        except ValueError:
            continue
        built = tuple(built)[:2]
        if specific:        # an arch-specific cubin: its one compute capability, first
            if kind == "sm" and ARCH_SPECIFIC[arch][0] == device_cc and built[0] <= driver[0]:
                cubins.append((cc + 0.5, arch))
        elif kind == "sm" and cc // 10 == major and cc <= device_cc and built[0] <= driver[0]:
            cubins.append((cc, arch))
        elif kind == "compute" and cc <= device_cc and built <= driver:
            ptx.append((cc, arch))
    if cubins:
        return max(cubins)[1]
    return max(ptx)[1] if ptx else None
