"""The NumPy (CPU) backend: ``direct`` and ``implicit_gemm`` (the tap loop),
``gemm`` and ``fft`` for every operation, ``separable`` (1-D passes) for outer-product
kernels, ``winograd``; one class each in :mod:`.table`."""
from __future__ import annotations

import numpy as np

from ..arrays import in_float32
from ..base import Backend, host_available_memory
from ..separable_factors import set_blas_guard
from . import threads
from .table import KERNEL_GUARD_BYTES, TABLE

set_blas_guard(threads.single_blas)      # the factoring's SVDs: BLAS at one thread

__all__ = ["NumpyBackend", "HOST_MEMORY_FRACTION", "KERNEL_GUARD_BYTES"]

#: Fraction of the host's available memory one algorithm's workspace may use
#: when neither the call nor ``config.workspace_limit`` sets a limit.
HOST_MEMORY_FRACTION = 0.5


class NumpyBackend(Backend):
    """NumPy arrays on the CPU."""

    name = "numpy"
    xp = np
    ALGORITHM_TABLE = TABLE

    def prepare(self, problem, operands):
        """float16 computes in float32 on the CPU (NumPy has no float-accumulating half
        arithmetic): the operands are cast once and rounded back once by the caller."""
        if problem.dtype.itemsize != 2:     # only a 2-byte dtype can be a 16-bit float
            return problem, operands
        return in_float32(problem, operands)

    def default_workspace_limit(self):
        return int(host_available_memory() * HOST_MEMORY_FRACTION)

    def available_memory(self):
        return host_available_memory()
