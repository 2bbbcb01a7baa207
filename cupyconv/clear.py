"""``clear_caches``: drop every in-process cache the library keeps.

Each cache is declared where its thing is built (``functools.lru_cache`` or a
bounded LRU with its own ``clear``); this module only calls them.  The
on-disk kernel caches are kept.
"""
from __future__ import annotations

from ._compile import clear_module_cache
from ._kernels import launch, relayout_launch, scan_launch
from .api import compiled
from .api.conv import conv_problem
from .backends.cuda.cost import efficiencies
from .backends.cuda.runners import clear_module_caches
from .backends.cuda import (algorithms as cuda_algorithms, gradients as cuda_gradients,
                             winograd as cuda_winograd)
from .backends import fft_conv
from .backends.cuda import separable as cuda_separable
from .backends.numpy import separable
from .core.ndimage_map import filter_call
from .core.signal_map import signal_call
from .dispatch import backends, dispatcher

__all__ = ["clear_caches"]


def clear_caches() -> None:
    """Drop every cached choice, call signature, loaded kernel module and backend."""
    dispatcher.clear_cache()
    compiled.clear_cache()
    launch.clear_program_cache()
    scan_launch.clear_program_cache()
    relayout_launch.clear_program_cache()
    cuda_winograd.clear_program_cache()
    cuda_algorithms.clear_program_cache()
    cuda_gradients.clear_program_cache()
    conv_problem.cache_clear()
    signal_call.cache_clear()
    filter_call.cache_clear()
    separable.clear_cache()
    cuda_separable.pass_problems.cache_clear()
    cuda_separable.clear_program_cache()
    fft_conv.clear_program_cache()
    clear_module_caches()
    clear_module_cache()
    efficiencies.cache_clear()
    backends.reset()
