"""NVRTC ahead-of-time compilation, the cubin cache and the CuPy loader.

>>> from cupyconv._compile import build, format_report
>>> print(format_report(build(archs=("sm_90",), ranks=(3,))))   # doctest: +SKIP
"""
from ._nvrtc import KernelCompileError, NvrtcUnavailable, nvrtc_version
from .build import DEFAULT_ARCHS, KernelReport, build, compile_group, format_report, main, parse_ptxas_log
from .cache import cache_dir
from .loader import clear_module_cache, load_module

__all__ = [
    "KernelCompileError", "NvrtcUnavailable", "nvrtc_version", "DEFAULT_ARCHS", "KernelReport",
    "build", "compile_group", "format_report", "main", "parse_ptxas_log", "cache_dir",
    "load_module", "clear_module_cache",
]
