"""The NumPy backend's algorithm table: one class per ``method=`` name.

``direct`` and ``implicit_gemm`` are the tap loop (a host program a compiled call
replays), ``gemm`` the column buffer and BLAS (a host program too), ``fft`` the pruned
transforms (SciPy's own for one signal, a host program), ``separable`` 1-D passes of an
outer-product kernel, ``winograd`` the NumPy Winograd
(:mod:`cupyconv.backends.winograd_conv`, or along the last axis only,
:mod:`.winograd_axis`).
"""
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
from ..._vocabulary import FORWARD
from ...core.problem import Operands
from ...core.roles import ROLES
from .. import fft, fft_conv, winograd_conv
from ..arrays import all_finite, in_compute_dtype
from ..base import Algorithm
from ..separable_factors import term_count, terms_take
from . import cost, direct, gemm, separable, winograd_axis

__all__ = ["TABLE", "KERNEL_GUARD_BYTES"]


class _NumpyAlgorithm(Algorithm):
    """An algorithm on the CPU: priced by ``backends/numpy/cost.py``; its operands in
    the compute dtype (an integer activation widened once)."""

    #: ``cost.CPU`` keys whose sum the cost model's prediction never goes below.
    fixed_costs = ("call",)

    def predict(self, problem):
        return cost.predict(problem, self.name)

    def floor(self, problem):
        return sum(map(cost.CPU.__getitem__, self.fixed_costs))

    def compile_refusal(self, problem):
        return f"{self.name} ({problem.op}) on the numpy backend is not a host program yet"

    def run(self, problem, operands, workspace_limit, stats=None):
        why = self.compile_refusal(problem)
        if why:
            program.refuse(why)
        return self.compute(problem, in_compute_dtype(problem, operands), workspace_limit,
                            {} if stats is None else stats)

    def compute(self, problem, operands, workspace_limit, stats):
        """The result from operands in the compute dtype."""
        raise NotImplementedError


class Direct(_NumpyAlgorithm):
    """The tap loop: no decision on the data, so a host program a compiled call replays."""

    name = "direct"

    def floor(self, problem):
        return min(cost.CPU["compiled_call"], cost.CPU["call"])

    def compile_refusal(self, problem):
        return "" if problem.op == FORWARD else super().compile_refusal(problem)

    def host_program(self, problem, workspace_limit):
        return None if self.compile_refusal(problem) else _tap_loop_program(problem)

    def run(self, problem, operands, workspace_limit, stats=None):
        why = self.compile_refusal(problem)
        if why:
            program.refuse(why)
        return _tap_loop(problem, operands.activation, operands.filter)


class ImplicitGemm(Direct):
    """On the CPU the implicit GEMM is the tap loop (forward only)."""

    name = "implicit_gemm"


class Gemm(_NumpyAlgorithm):
    """Column buffer and BLAS, chunked to the workspace limit: a host program of every
    operation (``gemm.run`` decides on the data, whether operands are finite, inside it,
    so again on every replay)."""

    name = "gemm"
    fixed_costs = ("call", "gemm_call")

    def workspace(self, problem, workspace_limit=None):
        limit = (self.backend.default_workspace_limit() if workspace_limit is None
                 else workspace_limit)
        return gemm.workspace_bytes(problem, limit)

    def min_workspace(self, problem):
        return gemm.min_workspace_bytes(problem)

    def compile_refusal(self, problem):
        return ""

    def host_program(self, problem, workspace_limit):
        return _roles_program("numpy gemm", gemm.run, problem, workspace_limit)

    def compute(self, problem, operands, workspace_limit, stats):
        return gemm.run(problem, operands, workspace_limit, stats)


class Fft(_NumpyAlgorithm):
    """The pruned transforms; one image and channel: SciPy's own transforms (a host
    program)."""

    name = "fft"
    fixed_costs = ("call", "fft_call")

    def workspace(self, problem, workspace_limit=None):
        if direct.single_signal(problem):           # SciPy's own transforms
            return fft_conv.scipy_workspace_bytes(problem)
        return fft_conv.workspace_bytes(problem)

    def compile_refusal(self, problem):
        return "" if direct.single_signal(problem) else super().compile_refusal(problem)

    def host_program(self, problem, workspace_limit):
        return None if self.compile_refusal(problem) else _signal_fft_program(problem)

    def compute(self, problem, operands, workspace_limit, stats):
        if direct.single_signal(problem):
            return _signal_fft(problem, operands.activation, operands.filter)
        return fft_conv.run(problem, operands)


class Separable(_NumpyAlgorithm):
    """1-D passes per axis of a kernel that is a short sum of outer products."""

    name = "separable"
    fixed_costs = ("call", "separable_call")

    def applies(self, problem):
        if not separable.applies(problem):
            return False, ("separable needs one filter per input channel (single channel "
                           "or depthwise) and a kernel over two axes or more")
        return True, ""

    def workspace(self, problem, workspace_limit=None):
        return separable.workspace_bytes(problem)

    def run(self, problem, operands, workspace_limit, stats=None):
        program.refuse(self.compile_refusal(problem))
        # its SciPy passes read a narrower integer input as it is
        return separable.run(problem, operands.activation, operands.filter)

    def data_ok(self, problem, operands, slack=math.inf):
        count, why = term_count(problem, operands.filter, separable.term_limit(problem, slack))
        if count <= 1 or operands.activation is None:
            _kernel_guard(operands.filter)        # decided by the kernel's values alone
        else:
            program.host_read("whether separable may run depends on the data",
                              operands.activation, operands.filter)
        return terms_take(count, operands.activation) if count else (False, why)


class Winograd(_NumpyAlgorithm):
    """Winograd minimal filtering on NumPy arrays, on the problems the N-D tiles of
    :mod:`cupyconv.backends.winograd_conv` take: along the last axis with the other taps
    by the gemm engine (:mod:`.winograd_axis`) where the cost model prices that path at
    most the N-D tiles' time, else by those tiles."""

    name = "winograd"
    fixed_costs = ("call", "winograd_piece")

    def applies(self, problem):
        return winograd_conv.can_implement(problem)

    def workspace(self, problem, workspace_limit=None):
        if cost.winograd_axis_pays(problem):
            return winograd_axis.workspace_bytes(problem, (
                self.backend.default_workspace_limit() if workspace_limit is None
                else workspace_limit))
        return winograd_conv.workspace_bytes(problem)

    def min_workspace(self, problem):
        if cost.winograd_axis_pays(problem):
            return winograd_axis.workspace_bytes(problem, 0)
        return winograd_conv.workspace_bytes(problem)

    def data_ok(self, problem, operands, slack=math.inf):
        arrays = [a for a in (operands.activation, operands.filter, operands.output)
                  if a is not None]
        ok = winograd_conv.data_ok(operands)
        if cost.winograd_axis_pays(problem):      # a host program: replayed while alike
            program.guard(_all_finite, arrays, ok[0])
        else:
            program.host_read("whether winograd may run depends on the data", *arrays)
        return ok

    def compile_refusal(self, problem):
        return "" if cost.winograd_axis_pays(problem) else super().compile_refusal(problem)

    def host_program(self, problem, workspace_limit):
        if self.compile_refusal(problem):
            return None
        return _roles_program("numpy winograd", winograd_axis.run, problem, workspace_limit)

    def compute(self, problem, operands, workspace_limit, stats):
        if cost.winograd_axis_pays(problem):
            return winograd_axis.run(problem, operands, workspace_limit, stats)
        return winograd_conv.run(problem, operands)


#: The table, in the vocabulary's order.
TABLE = (Direct, ImplicitGemm, Gemm, Fft, Separable, Winograd)


def _tap_loop(problem, x, w):
    """The NumPy tap loop on ``x`` and ``w`` (what ``direct`` runs)."""
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


def _on_roles(run, problem, workspace_limit, a, b):
    """``run(problem, operands, workspace_limit, stats)`` on the operands of
    ``problem.op``'s GEMM roles ``a`` and ``b``."""
    roles = ROLES[problem.op]
    operands = in_compute_dtype(problem, Operands(**{roles.a: a, roles.b: b}))
    return run(problem, operands, workspace_limit, {})


@memoized()
def _roles_program(name, run, problem, workspace_limit):
    """The host program of ``run`` (:func:`_on_roles`) on ``problem``."""
    roles = ROLES[problem.op]
    return Program(name, (roles.a, roles.b), (), (), "y",
                   host=functools.partial(_on_roles, run, problem, workspace_limit))


def _all_finite(*arrays):
    return all(all_finite(a) for a in arrays)


@memoized()
def _tap_loop_program(problem):
    return Program("numpy direct", ("activation", "filter"), (), (), "y",
                   host=functools.partial(_tap_loop, problem))
