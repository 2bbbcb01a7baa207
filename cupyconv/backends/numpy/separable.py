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

from ..arrays import zeros_result
from ..separable_factors import (ROUNDOFF_UNITS, NotSeparable, applies, clear_cache, factor,
                                 kernel_factors)
from .direct import chunks

__all__ = ["applies", "factor", "kernel_factors", "run", "workspace_bytes", "clear_cache",
           "ROUNDOFF_UNITS", "NotSeparable"]


def _pass(a, taps, axis, pads, mode, cval, stride, dilation, out_len):
    """One 1-D correlation of ``a`` ``(N, G, *S)`` along spatial ``axis`` with per-group
    ``taps`` ``(G, K)``: pad that axis, then one multiply-add per tap."""
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
    for part in chunks(y.shape, other):          # in cache across the taps (direct.CHUNK)
        yc, ac = y[part], a[part]
        tmp = np.empty_like(yc)
        for t in range(k):
            start = t * dilation
            sl = (slice(None),) * ax + (slice(start, start + stride * (out_len - 1) + 1,
                                              stride),)
            np.multiply(ac[sl], taps[:, t].reshape(bcast), out=yc if t == 0 else tmp)
            if t:
                yc += tmp
    return y


def run(problem, x, w):
    """``y`` ``(N, K, *O)`` of an :func:`applies` problem by one 1-D pass per kernel axis."""
    if problem.is_empty:
        return zeros_result(problem, np, x.dtype)
    per_group = kernel_factors(problem, w)
    g = problem.groups
    a = x                                                    # (N, G, *S): C_in == G
    cval = problem.cval if problem.dtype.kind == "c" else np.real(problem.cval)
    scale = 1
    for axis in range(problem.ndim):
        taps = np.stack([per_group[i][axis] for i in range(g)]).astype(problem.dtype)
        a = _pass(a, taps, axis, problem.padding[axis], problem.padding_mode,
                  cval * scale, problem.stride[axis], problem.dilation[axis],
                  problem.out_shape[axis])
        if problem.padding_mode == "constant" and cval != 0:
            scale = scale * taps[0].sum()       # a constant line filters to cval * sum
    return a.astype(problem.dtype, copy=False)


def workspace_bytes(problem):
    """The padded copy, the pass result and its temporary, at the largest pass."""
    padded = math.prod(problem.padded_shape())
    biggest = max(padded, math.prod(problem.in_shape))
    return 3 * problem.batch * problem.in_channels * biggest * problem.dtype.itemsize

