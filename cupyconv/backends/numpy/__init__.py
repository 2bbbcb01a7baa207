"""The NumPy (CPU) backend: ``direct`` and ``implicit_gemm`` (the tap loop),
``gemm`` and ``fft`` for every operation, ``separable`` (1-D passes) for outer-product
kernels."""
from __future__ import annotations

import functools
import math

import numpy as np
# bound at import: a caller that swaps scipy.signal's names for cupyconv's (SciPy's own
# test suite, tests/api/test_scipy_signaltools.py) must not route the engine back to itself
from scipy.signal import fftconvolve as scipy_fftconvolve, oaconvolve as scipy_oaconvolve

from ..._kernels import program
from ..._kernels.program import Program
from ..._lru import memoized
from ..._vocabulary import ALGORITHMS, FORWARD
from ...core.problem import Operands
from .. import fft, fft_conv, winograd_conv
from ..arrays import in_compute_dtype, in_float32
from ..base import Backend, host_available_memory
from ..separable_factors import terms_take
from . import cost, direct, gemm, separable

__all__ = ["NumpyBackend", "HOST_MEMORY_FRACTION"]

#: Fraction of the host's available memory one algorithm's workspace may use
#: when neither the call nor ``config.workspace_limit`` sets a limit.
HOST_MEMORY_FRACTION = 0.5


class NumpyBackend(Backend):
    """NumPy arrays on the CPU."""

    name = "numpy"
    xp = np

    def can_implement(self, problem, algorithm):
        why = ALGORITHMS[algorithm].refusal(problem.op, self.name)
        if why:
            return False, why
        if algorithm == "separable" and not separable.applies(problem):
            return False, ("separable needs one filter per input channel (single channel "
                           "or depthwise) and a kernel over two axes or more")
        if algorithm == "winograd":
            return winograd_conv.can_implement(problem)
        return True, ""

    def prepare(self, problem, operands):
        """float16 computes in float32 on the CPU (NumPy has no float-accumulating half
        arithmetic): the operands are cast once and rounded back once by the caller."""
        return in_float32(problem, operands)

    def host_program(self, problem, algorithm, workspace_limit):
        """``direct`` and ``implicit_gemm`` (the tap loop: no decision on the data), and
        ``fft`` on one signal (SciPy's transforms), as host programs, which a compiled
        call replays without the dispatcher."""
        if self.compile_refusal(problem, algorithm):
            return None
        if algorithm == "fft":
            return _signal_fft_program(problem)
        return _tap_loop_program(problem)

    def compile_refusal(self, problem, algorithm):
        if problem.op == FORWARD and algorithm in ("direct", "implicit_gemm"):
            return ""
        if algorithm == "fft" and direct.single_signal(problem):
            return ""
        return f"{algorithm} ({problem.op}) on the numpy backend is not a host program yet"

    def data_ok(self, problem, algorithm, operands, slack=math.inf):
        if algorithm == "winograd":
            program.host_read("whether winograd may run depends on the data",
                              operands.activation, operands.filter, operands.output)
            return winograd_conv.data_ok(operands)
        if algorithm != "separable":
            return True, ""
        try:
            terms = separable.kernel_terms(problem, operands.filter,
                                           separable.term_limit(problem, slack))
        except separable.NotSeparable as exc:
            _kernel_guard(operands.filter)        # decided by the kernel's values alone
            return False, str(exc)
        if len(terms) <= 1 or operands.activation is None:
            _kernel_guard(operands.filter)
        else:
            program.host_read("whether separable may run depends on the data",
                              operands.activation, operands.filter)
        return terms_take(len(terms), operands.activation)

    def min_workspace_bytes(self, problem, algorithm):
        if algorithm == "gemm":
            return gemm.min_workspace_bytes(problem)
        return self.workspace_bytes(problem, algorithm)

    def workspace_bytes(self, problem, algorithm, workspace_limit=None):
        if algorithm == "gemm":
            limit = self.default_workspace_limit() if workspace_limit is None else workspace_limit
            return gemm.workspace_bytes(problem, limit)
        if algorithm == "fft":
            return fft_conv.workspace_bytes(problem)
        if algorithm == "separable":
            return separable.workspace_bytes(problem)
        if algorithm == "winograd":
            return winograd_conv.workspace_bytes(problem)
        return 0

    def predict_times(self, problem, names):
        return cost.predict_times(problem, names)

    def default_workspace_limit(self):
        return int(host_available_memory() * HOST_MEMORY_FRACTION)

    def available_memory(self):
        return host_available_memory()

    def run(self, problem, algorithm, operands, workspace_limit, stats=None):
        stats = {} if stats is None else stats
        why = self.compile_refusal(problem, algorithm)
        if why:
            program.refuse(why)
        if algorithm in ("direct", "implicit_gemm"):
            return _tap_loop(problem, operands.activation, operands.filter)
        if algorithm != "separable":       # its SciPy passes read a narrower integer input
            operands = in_compute_dtype(problem, operands)
        if algorithm == "gemm":
            return gemm.run(problem, operands, workspace_limit, stats)
        if algorithm == "separable":
            return separable.run(problem, operands.activation, operands.filter)
        if algorithm == "winograd":
            return winograd_conv.run(problem, operands)
        if direct.single_signal(problem):
            return _signal_fft(problem, operands.activation, operands.filter)
        return fft_conv.run(problem, operands)


def _tap_loop(problem, x, w):
    """The NumPy tap loop on ``x`` and ``w`` (what :meth:`NumpyBackend.run` does for it)."""
    operands = in_compute_dtype(problem, Operands(activation=x, filter=w))
    return direct.conv_direct(problem, operands.activation, operands.filter)


#: Largest kernel whose bytes a compiled call compares to replay ``auto``'s decision on it.
KERNEL_GUARD_BYTES = 4096


def _kernel_guard(w):
    """``auto``'s decision on ``separable`` was the kernel's values alone: a compiled call
    replays while the kernel holds the same bytes (a small one; else the normal path)."""
    if w.nbytes <= KERNEL_GUARD_BYTES:
        program.guard(_bytes, (w,), w.tobytes())
    else:
        program.host_read("whether separable may run depends on the data", w)


def _bytes(a):
    return a.tobytes()


def _signal_fft(problem, x, w, cast=False):
    """One image, one channel: SciPy's own transforms, fewer calls than the pruned path
    (``cast``: the operands are not in the compute dtype yet)."""
    if cast:
        operands = in_compute_dtype(problem, Operands(activation=x, filter=w))
        x, w = operands.activation, operands.filter
    y = direct.scipy_window(problem, x, w, scipy_fftconvolve if (
        problem.ndim > 1 or not fft.overlap_add_applies(
            problem, problem.in_shape, problem.kernel_shape)) else scipy_oaconvolve)
    return np.rint(y).astype(x.dtype) if x.dtype.kind in "biu" else y.astype(
        x.dtype, copy=False)


@memoized()
def _signal_fft_program(problem):
    return Program("numpy fft", ("activation", "filter"), (), (), "y",
                   host=functools.partial(_signal_fft, problem, cast=True))


@memoized()
def _tap_loop_program(problem):
    return Program("numpy direct", ("activation", "filter"), (), (), "y",
                   host=functools.partial(_tap_loop, problem))

