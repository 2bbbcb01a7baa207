"""The input gradient of a stride-1, constant-padded convolution as a forward problem.

``dx = correlate(dy, flip(W^T))``: the stride-1 forward correlation of ``dy`` with the
flipped, channel-transposed kernel, padded by ``dilation * (k - 1) - padding`` per side
(``cval`` does not enter a gradient).  Shared by the algorithms that compute the input
gradient with their forward machinery: ``winograd`` (:mod:`.winograd_conv`, the CUDA
path's :mod:`.cuda.winograd`) and the implicit GEMM (:mod:`.cuda.implicit_grads`).
"""
from __future__ import annotations

import numpy as np

from ..core import ConvProblem

__all__ = ["grad_input_forward", "grad_input_operands", "transposed_weights_into"]


def grad_input_forward(problem):
    """``(forward, crop)``: the stride-1 forward problem whose output is the input
    gradient of the stride-1, constant-padded ``problem``, and the slices of ``dy`` it reads.

    ``dx = correlate(dy, flip(W^T))`` with padding ``(d(k-1) - pb, d(k-1) - pa)`` per
    axis (full padding minus the forward padding, dilation carried over); a negative
    padding crops ``dy`` instead (outputs that read only padding contribute nothing).
    """
    crop, pads = [], []
    for k, d, (pb, pa), o in zip(problem.kernel_shape, problem.dilation, problem.padding,
                                 problem.out_shape):
        span = d * (k - 1)
        crop.append(slice(max(pb - span, 0), o - max(pa - span, 0)))
        pads.append((max(span - pb, 0), max(span - pa, 0)))
    g = problem.groups
    fwd = ConvProblem.create(
        x_shape=(problem.batch, problem.out_channels) + tuple(c.stop - c.start for c in crop),
        w_shape=(problem.in_channels, problem.out_channels // g) + problem.kernel_shape,
        padding=tuple(pads), dilation=problem.dilation, groups=g, dtype=problem.dtype,
        flip=not problem.flip, precision=problem.precision)
    if fwd.out_shape != problem.in_shape:
        raise RuntimeError(  # a programming error in this function, not user input
            f"input gradient as a forward problem: output {fwd.out_shape} != input {problem.in_shape}")
    return fwd, tuple(crop)


def grad_input_operands(problem, dy, w, xp=np):
    """``(forward, x, w)`` of :func:`grad_input_forward`: ``dy`` cropped (a view) and the
    weights ``W'[g*Cg + c, k] = W[g*Kg + k, c]`` (conjugated for the complex adjoint)."""
    fwd, crop = grad_input_forward(problem)
    wt = _swapped(problem, w).reshape(fwd.w_shape)
    if problem.conjugate and wt.dtype.kind == "c":
        wt = xp.conj(wt)
    return fwd, dy[(slice(None), slice(None)) + crop], wt


def transposed_weights_into(problem, w, out):
    """Write :func:`grad_input_operands`'s weights ``W'`` into ``out`` (C-contiguous, the
    forward problem's ``w_shape``): the step of a launch program (no allocation)."""
    view = out.reshape((problem.groups, problem.in_channels // problem.groups,
                        problem.out_channels // problem.groups) + problem.kernel_shape)
    view[...] = _swapped(problem, w)
    if problem.conjugate and out.dtype.kind == "c":
        out.imag *= -1
    return out


def _swapped(problem, w):
    """``w`` ``(K, C/G, *KS)`` as ``(G, C/G, K/G, *KS)`` (a view)."""
    g = problem.groups
    kg, cg = problem.out_channels // g, problem.in_channels // g
    return w.reshape((g, kg, cg) + problem.kernel_shape).swapaxes(1, 2)
