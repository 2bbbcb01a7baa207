"""NVRTC ahead-of-time compilation, the cubin cache, the packaged kernels and the CuPy loader.

``build`` compiles the registry into the per-user cache (``cache``: bound,
verified entries in private directories); ``packing`` packs kernels into a
wheel (``progress``: the build's progress bar) and ``prebuilt`` finds them
again; ``load_module`` loads a group for a device from
the packaged kernels, else the cache, else NVRTC, choosing cubin or PTX from
the NVRTC/driver/GPU versions (``compat``, pure functions), and an
arch-specific family's ``sm_90a`` cubin only on compute capability 9.0.

>>> from cupyconv._compile import build, format_report
>>> print(format_report(build(archs=("sm_90",), ranks=(3,))))   # doctest: +SKIP
"""
from ._nvrtc import KernelCompileError, NvrtcUnavailable, library_path, nvrtc_version, supported_archs
from .build import DEFAULT_ARCHS, KernelReport, build, compile_group, format_report, main, parse_ptxas_log
from .cache import cache_dir
from .compat import ArchSpecificUnavailable, Target, ToolchainMismatch, select_target
from .loader import (clear_module_cache, device_target, load_module, loaded_origins, resolve_group,
                     specific_choice)
from .packing import PackSpec, pack

__all__ = [
    "KernelCompileError", "NvrtcUnavailable", "library_path", "nvrtc_version", "supported_archs",
    "DEFAULT_ARCHS", "KernelReport", "build", "compile_group", "format_report", "main",
    "parse_ptxas_log",
    "cache_dir", "Target", "ToolchainMismatch", "select_target", "device_target", "load_module",
    "clear_module_cache", "loaded_origins", "resolve_group", "PackSpec", "pack",
    "ArchSpecificUnavailable", "specific_choice",
]
