"""CPU emulation of cupyconv's CUDA kernels.

Kernel sources under ``cuda_src/`` are compiled with the host C++ compiler
against a CUDA emulation header (``cuda_src/emu/``) and run on the CPU, one
block at a time, one fiber per CUDA thread.  :class:`EmulatedModule` mirrors
``cupy.RawModule``; see ``docs/emulation.md``.
"""
from ._build import (
    EmulationCompileError,
    asan_preloaded,
    asan_runtime_path,
    build_stats,
    cache_dir,
    cuda_src_dir,
    emulation_available,
    emulation_unavailable_reason,
)
from ._module import EmulatedFunction, EmulatedModule, EmulationError, build_module

__all__ = [
    "EmulatedModule", "EmulatedFunction", "EmulationError", "EmulationCompileError", "build_module",
    "emulation_available", "emulation_unavailable_reason", "cuda_src_dir", "cache_dir",
    "build_stats", "asan_runtime_path", "asan_preloaded",
]
