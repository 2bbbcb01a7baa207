"""The taps ``scipy.ndimage.correlate`` and ``convolve`` leave out, left out here too.

SciPy's N-D correlation (``NI_Correlate``) sums only the taps whose float64 weight is
above ``DBL_EPSILON`` in magnitude: a zero, a weight of ``1e-20`` and a NaN weight add
nothing, not even ``0 * inf`` or ``0 * nan`` (complex weights: their real and
imaginary parts each on their own, as SciPy filters them one after the other).  Its
1-D passes (``correlate1d``, the Gaussian, uniform and derivative filters) keep every
tap, and so does the engine.

- :func:`kept_weights`: the left-out taps made zero, which on finite data is leaving
  them out;
- :func:`kept_sum`: where the input or the constant border holds a NaN or an infinity
  and a tap is left out, the sum over the kept taps alone (the engine's sum multiplied
  the zero taps too), in SciPy's order.

NumPy arrays only (the CPU and the emulated backends).  On CuPy arrays the first would
add elementwise launches to every call and the second a device synchronisation, so
there every tap counts, as IEEE arithmetic has it (docs/semantics.md).  Both are host
steps (:func:`~cupyconv._kernels.program.host_step`): a compiled call
replays them on each call's arrays.
"""
from __future__ import annotations

import functools

import numpy as np

from .._dtypes import is_half_float
from .._kernels import program
from ..backends.arrays import pad_input

__all__ = ["DROP_AT_MOST", "kept_weights", "kept_sum"]

#: A weight whose magnitude (as float64) is not above this is left out (``DBL_EPSILON``).
DROP_AT_MOST = float(np.finfo(np.float64).eps)


def kept_weights(weights):
    """``weights`` with the taps SciPy leaves out made zero (integer and bool weights
    are returned as they are: only their zeros are left out, and they are zero; CuPy
    weights too)."""
    inexact = weights.dtype.kind in "fc" or is_half_float(weights.dtype)
    if not (inexact and weights.size and isinstance(weights, np.ndarray)):
        return weights
    return program.host_step("footprint", _kept, weights)


def _kept(w):
    if w.dtype.kind == "c":
        out = np.empty_like(w)
        out.real[...] = _kept(w.real)
        out.imag[...] = _kept(w.imag)
        return out
    return np.where(np.abs(w.astype(np.float64)) > DROP_AT_MOST, w, np.zeros_like(w))


def kept_sum(problem, y, x, w):
    """``y``, the engine's correlation of ``x`` with ``w`` (the problem's ``(N, 1, *S)``
    input and ``(1, 1, *KS)`` kernel, left-out taps zero), or on NumPy arrays where a
    left-out tap meets a NaN or an infinity, the sum over the nonzero taps alone."""
    if not isinstance(y, np.ndarray):
        return y
    return program.host_step("footprint sum", functools.partial(_kept_sum, problem), y, x, w)


def _kept_sum(problem, y, x, w):
    taps = w[0, 0]
    if taps.all():
        return y
    border = problem.padding_mode == "constant" and not np.isfinite(problem.cval)
    if not border and np.isfinite(x).all():
        return y
    padded = pad_input(problem, x)
    out = np.zeros(y.shape, y.dtype)                       # SciPy's sums start from +0.0
    for tap in zip(*np.nonzero(taps)):                     # in C order, as SciPy's loop
        window = tuple(slice(t, t + n) for t, n in zip(tap, problem.out_shape))
        out += taps[tap] * padded[(slice(None), slice(None)) + window]
    return out
