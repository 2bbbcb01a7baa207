"""The ``separable`` algorithm on the CPU: a kernel that is an outer product of 1-D
factors runs as one 1-D pass per axis.

A 7^4 Gaussian costs 2,401 multiply-adds per output as one N-D kernel and 28 as four
1-D passes.  Whether a kernel is such an outer product, and its factors, is decided by
the backend-agnostic :mod:`cupyconv.backends.separable_factors` (shared with the CUDA
path; its names are re-exported here: :func:`factor`, :func:`kernel_factors`,
:func:`applies`, :class:`NotSeparable`, :func:`clear_cache`, :data:`ROUNDOFF_UNITS`).

The passes (:func:`run`) apply the problem's padding and boundary mode one axis at a time:
for the reflecting, periodic and edge modes the padding of one axis commutes with a filter
along another, and a constant ``cval`` is scaled by the sums of the factors already
applied (the filtered padding of an earlier axis), so the result is the N-D problem's.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.ndimage

from ..._vocabulary import NDIMAGE_NAMES
from ..arrays import constant_value, max_magnitude, zeros_result
from ..separable_factors import (ROUNDOFF_UNITS, NotSeparable, applies, clear_cache, factor,
                                 kernel_factors, kernel_terms, term_limit)
from .direct import line_chunks, scipy_line_faster

__all__ = ["applies", "factor", "kernel_factors", "kernel_terms", "term_limit", "run",
           "workspace_bytes", "clear_cache", "ROUNDOFF_UNITS", "NotSeparable"]




def scipy_pass_applies(pads, k, stride, dilation):
    """Data-free: a pass ``scipy.ndimage.correlate1d`` can run without a padded copy (stride
    and dilation 1, at most ``k - 1`` padding on the axis: the output is a prefix of
    SciPy's same-size one, the boundary extended on the fly in every mode)."""
    return stride == 1 and dilation == 1 and pads[0] + pads[1] <= k - 1


def _scipy_pass(a, taps, axis, pads, mode, cval, out_len, dtype):
    """The pass as ``scipy.ndimage.correlate1d`` (one call per group) into ``dtype``, then
    the prefix."""
    ax, k = 2 + axis, taps.shape[1]
    y = np.empty(a.shape, dtype=dtype)
    for g in range(taps.shape[0]):
        scipy.ndimage.correlate1d(a[:, g], taps[g].astype(np.float64), axis=ax - 1,
                                  output=y[:, g], mode=NDIMAGE_NAMES[mode],
                                  cval=float(np.real(cval)), origin=pads[0] - k // 2)
    return y[(slice(None),) * ax + (slice(0, out_len),)]


def _pass(a, taps, axis, pads, mode, cval, stride, dilation, out_len, bound=None, last=None):
    """One 1-D correlation of ``a`` ``(N, G, *S)`` along spatial ``axis`` with per-group
    ``taps`` ``(G, K)``: SciPy's compiled 1-D correlation (no padded copy) for float64 and
    integer data where it applies, integers while every sum is exact in SciPy's double and
    stored in int32 when they fit (half the memory traffic of int64), the last pass
    (``last``: the result dtype) straight into the result dtype; else pad that axis
    and one multiply-add per tap (float32 stays in float32 arithmetic: faster than SciPy's
    double line buffers, measured 21 vs 35 ms on the 40^4 7^4 Gaussian)."""
    if scipy_pass_applies(pads, taps.shape[1], stride, dilation) and taps.dtype.kind in "fiu":
        if a.dtype == np.float64 and scipy_line_faster(a.shape, 2 + axis, 8):
            return _scipy_pass(a, taps, axis, pads, mode, cval, out_len, np.dtype(np.float64))
        if a.dtype.kind in "iu" and taps.dtype.kind in "iu":
            bound = max_magnitude(a) if bound is None else bound      # max|a| (cval included)
            bound = bound * float(np.abs(taps.astype(np.float64)).sum(axis=1).max())
            if bound < 2.0**53:
                dtype = np.dtype(np.int32 if bound < 2.0**31 else np.int64)
                if last is not None and last.kind == "i" and last.itemsize >= dtype.itemsize:
                    dtype = last           # no widening copy after the last pass (signed:
                    # unsigned and narrower results wrap, which SciPy's stores would not)
                return _scipy_pass(a, taps, axis, pads, mode, cval, out_len, dtype)
    ax = 2 + axis
    if pads != (0, 0):
        widths = [(0, 0)] * a.ndim
        widths[ax] = pads
        extra = {"constant_values": cval} if mode == "constant" else {}
        a = np.pad(a, widths, mode=mode, **extra)
    k = taps.shape[1]
    shape = list(a.shape)
    shape[ax] = out_len
    y = np.empty(shape, dtype=np.result_type(a.dtype, taps.dtype))
    g = taps.shape[0]
    bcast = (1, g) + (1,) * (a.ndim - 2)
    other = [0] + [i for i in range(2, a.ndim) if i != ax]
    # pieces in cache across the taps (direct.CHUNK), contiguous slabs (line_chunks)
    for part, off in line_chunks(y.shape, ax, other):
        yc = y[part]
        ac, first, m = (a[part], 0, out_len) if off is None else (a, off * stride, yc.shape[ax])
        tmp = np.empty_like(yc)
        for t in range(k):
            start = first + t * dilation
            sl = (slice(None),) * ax + (slice(start, start + stride * (m - 1) + 1, stride),)
            np.multiply(ac[sl], taps[:, t].reshape(bcast), out=yc if t == 0 else tmp)
            if t:
                yc += tmp
    return y


def run(problem, x, w):
    """``y`` ``(N, K, *O)`` of an :func:`applies` problem by one 1-D pass per kernel axis
    (per outer product, summed, when the kernel is a short sum of them:
    :func:`~..separable_factors.kernel_terms`)."""
    if problem.is_empty:
        return zeros_result(problem, np)
    terms = kernel_terms(problem, w, term_limit(problem))
    y = _run_term(problem, x, terms[0])
    for per_group in terms[1:]:
        y += _run_term(problem, x, per_group)
    return y


def _run_term(problem, x, per_group):
    """The passes of one outer product ``per_group[g][axis]``."""
    g = problem.groups
    a = x                                                    # (N, G, *S): C_in == G
    cval = constant_value(problem, problem.dtype)
    scale = 1
    # integer data: max|a| once, then each pass's bound follows from the taps (no rescan)
    bound = (max(max_magnitude(x), abs(int(np.real(cval)))) if problem.dtype.kind in "iu"
             and np.isfinite(np.real(cval)) else None)
    for axis in range(problem.ndim):
        taps = np.stack([per_group[i][axis] for i in range(g)]).astype(problem.dtype)
        a = _pass(a, taps, axis, problem.padding[axis], problem.padding_mode,
                  cval * scale, problem.stride[axis], problem.dilation[axis],
                  problem.out_shape[axis], bound,
                  problem.dtype if axis == problem.ndim - 1 else None)
        if bound is not None:
            bound *= float(np.abs(taps.astype(np.float64)).sum(axis=1).max())
        if problem.padding_mode == "constant" and cval != 0:
            scale = scale * taps[0].sum()       # a constant line filters to cval * sum
    return a.astype(problem.dtype, copy=False)


def workspace_bytes(problem):
    """The padded copy, the pass result and its temporary, at the largest pass."""
    padded = math.prod(problem.padded_shape())
    biggest = max(padded, math.prod(problem.in_shape))
    return 3 * problem.batch * problem.in_channels * biggest * problem.dtype.itemsize

