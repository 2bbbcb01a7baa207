"""NVRTC ahead-of-time compilation, the cubin cache and the CuPy loader.

``build`` compiles the registry into the per-user cache (``cache``: bound,
verified entries in private directories), ``load_module`` loads them for a
device, choosing cubin or PTX from the NVRTC/driver/GPU versions
(``compat``, pure functions).

>>> from cupyconv._compile import build, format_report
>>> print(format_report(build(archs=("sm_90",), ranks=(3,))))   # doctest: +SKIP
"""
from ._nvrtc import KernelCompileError, NvrtcUnavailable, nvrtc_version, supported_archs
from .build import DEFAULT_ARCHS, KernelReport, build, compile_group, format_report, main, parse_ptxas_log
from .cache import cache_dir
from .compat import Target, ToolchainMismatch, select_target
from .loader import clear_module_cache, device_target, load_module

__all__ = [
    "KernelCompileError", "NvrtcUnavailable", "nvrtc_version", "supported_archs", "DEFAULT_ARCHS",
    "KernelReport", "build", "compile_group", "format_report", "main", "parse_ptxas_log",
    "cache_dir", "Target", "ToolchainMismatch", "select_target", "device_target", "load_module",
    "clear_module_cache",
]
