"""The ``direct`` algorithm on the CPU: a tap loop, or SciPy's compiled loop.

Every function takes a forward :class:`~cupyconv.core.ConvProblem` and the
logical channels-first views ``x`` ``(N, C, *S)`` and ``w`` ``(K, C/G, *KS)``
(any strides; layout transposes are views) in the compute dtype, and returns
``y`` ``(N, K, *O)``.  On the CPU the boundary is materialised once with
:func:`numpy.pad` (the GPU kernels resolve it in their index math instead).

A 1-D single-image, single-channel problem with stride 1, dilation 1 and
zero constant padding of at most ``K-1`` per side is a window of
``numpy.convolve``: it runs in NumPy's compiled loop (measured 0.13-0.45 ns
per multiply-add and ~1 us per call here, against ~4 us per tap for the
Python tap loop).  SciPy's N-D compiled ``direct`` runs at ~11 ns per
multiply-add, slower than the tap loop, so N-D problems keep the loop.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..arrays import grouped_weights, oriented_weights, pad_input, zeros_result

__all__ = ["windows", "operand_views", "conv_direct", "compiled_applies", "scipy_window",
           "single_signal"]


def windows(problem, xpad):
    """Strided view ``(N, G, C/G, *O, *KS)`` of every (output, tap) pair of the padded input."""
    g = problem.groups
    cg = problem.in_channels // g
    sn, sc = xpad.strides[:2]
    sp = xpad.strides[2:]
    shape = ((problem.batch, g, cg) + tuple(problem.out_shape) + tuple(problem.kernel_shape))
    strides = ((sn, cg * sc, sc)
               + tuple(st * s for st, s in zip(problem.stride, sp))
               + tuple(d * s for d, s in zip(problem.dilation, sp)))
    return as_strided(xpad, shape=shape, strides=strides, writeable=False)


def operand_views(problem, x, w, y):
    """Window view of the padded input, grouped oriented weights, grouped ``y``.

    Shapes ``(N, G, C/G, *O, *KS)``, ``(G, K/G, C/G, *KS)``, ``(N, G, K/G, *O)``.
    """
    view = windows(problem, pad_input(problem, x))
    wg = grouped_weights(problem, oriented_weights(problem, w))
    yg = y.reshape((problem.batch, problem.groups, problem.gemm_n) + tuple(problem.out_shape))
    return view, wg, yg


def single_signal(problem):
    """A forward problem that is one window of SciPy's ``convolve(x, w)``: one image,
    one channel, stride 1, dilation 1, zero constant padding of at most ``K-1``."""
    return (problem.op == "forward" and problem.batch == 1 and problem.in_channels == 1
            and problem.out_channels == 1
            and problem.padding_mode == "constant" and problem.cval == 0
            and all(s == 1 for s in problem.stride) and all(d == 1 for d in problem.dilation)
            and all(pb < k and pa < k for (pb, pa), k in
                    zip(problem.padding, problem.kernel_shape)))


def compiled_applies(problem):
    """Whether :func:`conv_direct` runs in NumPy's compiled ``convolve`` (1-D)."""
    return problem.ndim == 1 and single_signal(problem)


def scipy_window(problem, x, w, convolve):
    """``y`` of a :func:`single_signal` problem through ``convolve(a, k, mode)``
    (``numpy.convolve``, ``scipy.signal.fftconvolve``, ``oaconvolve``): the SciPy
    mode the padding spells (``valid``/``same``), else ``full`` and a window."""
    a, k = x[0, 0], oriented_weights(problem, w, flip=not problem.flip)[0, 0]
    pads, ks = problem.padding, problem.kernel_shape
    if all(p == (0, 0) for p in pads):
        mode = "valid"
    elif all(p == (n // 2, (n - 1) // 2) for p, n in zip(pads, ks)) and all(
            sa >= sk for sa, sk in zip(a.shape, k.shape)):
        mode = "same"      # (numpy's 'same' keeps the longer operand's length)
    else:
        mode = "full"
    full = convolve(a, k, mode)
    if mode == "full":
        full = full[tuple(slice(n - 1 - pb, n - 1 - pb + o)
                          for n, (pb, _), o in zip(ks, pads, problem.out_shape))]
    return full.reshape((1, 1) + full.shape)


def conv_direct(problem, x, w):
    """Tap loop: ``y += w[:, :, t] . x[window t]`` for every kernel tap ``t``.

    No workspace beyond ``y``; each output accumulates its taps in a fixed
    order, so NaN/Inf stay local to the outputs that see them.
    """
    if problem.is_empty:
        return zeros_result(problem, np, x.dtype)
    if compiled_applies(problem):
        return scipy_window(problem, x, w, np.convolve)
    y = zeros_result(problem, np, x.dtype)
    view, wg, yg = operand_views(problem, x, w, y)
    g, kg, cg = wg.shape[:3]
    r = problem.ndim
    single = kg == 1 and cg == 1
    for tap in np.ndindex(*problem.kernel_shape):
        slab = view[(Ellipsis,) + tap]            # (N, G, Cg, *O)
        wt = wg[(Ellipsis,) + tap]                # (G, Kg, Cg)
        if single:
            yg += slab * wt.reshape((1, g, 1) + (1,) * r)
        else:
            yg += np.einsum("ngc...,gkc->ngk...", slab, wt)
    return y
