"""The ``fft`` algorithm for every operation, on NumPy or CuPy arrays.

The forward pass uses the pruned transforms of :mod:`.fft`.  The gradients
are the forward pass of a *transposed* problem (JAX's
``_conv_general_dilated_transpose_lhs/rhs``): one shape rule, one FFT code.

- input gradient: ``dx_pad = dy_up (*) W'``, a stride-1 true convolution of
  ``dy`` upsampled by the stride (zeros between samples) with the dilated
  weights, channels swapped per group (``W'[g, c, k] = W[g, k, c]``), taken
  over the padded input extent, then folded back onto ``x``
  (:func:`~.arrays.fold_padding`);
- weight gradient: ``dw[k, c, t] = sum_{n, o} dy[n, k, o] x_pad[n, c, o*s + t*d]``,
  a forward correlation whose "batch" is the input channel, whose reduction
  runs over the images (as channels, grouped) and whose stride and dilation
  swap roles; the taps past ``KS`` are dropped.

Complex gradients use the adjoint (conjugated operand) unless the problem
says ``conjugate=False``.  Integer forward problems run in float64 and are
rounded back, as ``scipy.signal.fftconvolve`` does; the dispatcher only lets
them here when the result is exactly representable.
"""
from __future__ import annotations

import math

import numpy as np

from .._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT
from ..core.args import array_module_of
from . import fft
from .arrays import fold_padding, oriented_weights, pad_input, zeros_result

__all__ = ["transposed_forward", "workspace_bytes", "run"]


def transposed_forward(problem):
    """The forward problem whose FFT computes ``problem`` (itself for ``forward``)."""
    g = problem.groups
    cg, kg = problem.in_channels // g, problem.out_channels // g
    if problem.op == GRAD_INPUT:
        up = tuple((o - 1) * s + 1 for o, s in zip(problem.out_shape, problem.stride))
        padded = problem.padded_shape()
        pads = tuple(((k - 1) * d, p - u) for k, d, p, u in
                     zip(problem.kernel_shape, problem.dilation, padded, up))
        return problem.create(
            x_shape=(problem.batch, problem.out_channels) + up,
            w_shape=(problem.in_channels, kg) + problem.kernel_shape,
            padding=pads, dilation=problem.dilation, groups=g, dtype=problem.dtype,
            flip=not problem.flip)
    if problem.op == GRAD_WEIGHT:
        return problem.create(
            x_shape=(cg, g * problem.batch) + problem.in_shape,
            w_shape=(problem.out_channels, problem.batch) + problem.out_shape,
            stride=problem.dilation, dilation=problem.stride, padding=problem.padding,
            padding_mode=problem.padding_mode, cval=problem.cval, groups=g,
            dtype=problem.dtype)
    return problem


def workspace_bytes(problem):
    """Bytes of the spectra (x, w and y transforms) of ``problem``'s FFT."""
    fwd = transposed_forward(problem)
    shape = [fft.fast_len(n + d * (k - 1)) for n, d, k in
             zip(fwd.padded_shape(), fwd.dilation, fwd.kernel_shape)]
    complex_ = fwd.is_complex
    spec = math.prod(shape[:-1]) * (shape[-1] if complex_ else shape[-1] // 2 + 1)
    cplx = fwd.dtype.itemsize if complex_ else 2 * max(fwd.dtype.itemsize, 4)
    arrays = (fwd.batch * fwd.in_channels + fwd.out_channels * (fwd.in_channels // fwd.groups)
              + fwd.batch * fwd.out_channels)
    return cplx * spec * arrays


def _forward(problem, x, w):
    """``y`` ``(N, K, *O)`` of a forward problem by the convolution theorem."""
    xp = array_module_of(x=x)
    y_dtype = x.dtype
    if problem.is_empty:
        return zeros_result(problem, xp, y_dtype)
    exact = y_dtype.kind in "biu"
    work = np.dtype(np.float64) if exact else y_dtype
    if problem.padding_mode == "constant" and problem.cval == 0:
        src, shift = x, tuple(pb for pb, _ in problem.padding)
    else:
        src, shift = pad_input(problem, x), (0,) * problem.ndim
    src = src.astype(work, copy=False)
    span = tuple(d * (k - 1) + 1 for d, k in zip(problem.dilation, problem.kernel_shape))
    cplx = work.kind == "c"
    lengths, index = fft.fft_window(problem, src.shape[2:], shift, span)
    # the kernel dilated by inserting zeros, oriented as a convolution kernel
    wk = oriented_weights(problem, w, flip=not problem.flip).astype(work, copy=False)
    if any(d > 1 for d in problem.dilation):
        wd = xp.zeros(wk.shape[:2] + span, dtype=work)
        wd[(Ellipsis,) + tuple(slice(None, None, d) for d in problem.dilation)] = wk
        wk = wd
    if xp is np and fft.overlap_add_applies(problem, src.shape[2:], span, index):
        res = fft.overlap_add(src, wk[:, 0], index, xp)
        return xp.rint(res).astype(y_dtype) if exact else res
    fx = fft.pruned_forward(src, lengths, cplx, xp)
    fw = fft.pruned_forward(wk, lengths, cplx, xp)
    g = problem.groups
    cg, kg = problem.in_channels // g, problem.out_channels // g
    fx = fx.reshape((problem.batch, g, cg) + fx.shape[2:])
    fw = fw.reshape((g, kg, cg) + fw.shape[2:])
    if cg == 1 and kg == 1:
        fx *= fw[:, :, 0][None]              # the Cg == 1 slot becomes Kg == 1
        fy = fx
    else:
        fy = xp.einsum("ngc...,gkc...->ngk...", fx, fw)
    fy = fy.reshape((problem.batch, problem.out_channels) + fy.shape[3:])
    res = fft.pruned_inverse(fy, lengths, index, cplx, xp)
    return xp.rint(res).astype(y_dtype) if exact else res


def _adjoint_operand(problem, a, xp):
    return xp.conj(a) if problem.conjugate and a.dtype.kind == "c" else a


def _grad_input(problem, dy, w):
    xp = array_module_of(x=dy)
    fwd = transposed_forward(problem)
    g = problem.groups
    kg, cg = problem.out_channels // g, problem.in_channels // g
    if any(s > 1 for s in problem.stride):
        up = xp.zeros(fwd.x_shape, dtype=dy.dtype)
        up[(Ellipsis,) + tuple(slice(None, None, s) for s in problem.stride)] = dy
        dy = up
    wt = w.reshape((g, kg, cg) + problem.kernel_shape).swapaxes(1, 2)
    wt = _adjoint_operand(problem, wt.reshape(fwd.w_shape), xp)
    return fold_padding(problem, _forward(fwd, dy, wt))


def _grad_weight(problem, x, dy):
    xp = array_module_of(x=x)
    fwd = transposed_forward(problem)
    g, n = problem.groups, problem.batch
    cg = problem.in_channels // g
    xt = x.reshape((n, g, cg) + problem.in_shape).transpose(
        (2, 1, 0) + tuple(range(3, 3 + problem.ndim)))
    xt = _adjoint_operand(problem, xt.reshape(fwd.x_shape), xp)
    dyt = dy.swapaxes(0, 1)
    res = _forward(fwd, xt, dyt)                                    # (Cg, K, *KS'')
    res = res[(slice(None), slice(None)) + tuple(slice(0, k) for k in problem.kernel_shape)]
    dw = oriented_weights(problem, res.swapaxes(0, 1))
    return xp.ascontiguousarray(dw)


def run(problem, operands):
    """The result of ``problem.op`` (logical channels-first) by FFT."""
    if problem.op == FORWARD:
        return _forward(problem, operands.activation, operands.filter)
    if problem.op == GRAD_INPUT:
        return _grad_input(problem, operands.output, operands.filter)
    return _grad_weight(problem, operands.activation, operands.output)
