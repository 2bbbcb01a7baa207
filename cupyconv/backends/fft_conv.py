"""The ``fft`` algorithm for every operation, on NumPy or CuPy arrays.

The forward pass uses the pruned transforms of :mod:`.fft`.  The gradients
are the forward pass of their *whole* transposed problem
(:func:`cupyconv.core.transpose.transpose`, JAX's
``_conv_general_dilated_transpose_lhs/rhs``): one shape rule, one FFT code.

- input gradient: a stride-1 true convolution of ``dy`` upsampled by the
  stride with the channel-swapped weights, over the padded input extent,
  then folded back onto ``x`` (:func:`~.arrays.fold_padding`);
- weight gradient: a forward correlation whose "batch" is the input channel,
  whose reduction runs over the images and whose stride and dilation swap
  roles; the taps past ``KS`` are dropped.

Complex gradients use the adjoint (conjugated operand) unless the problem
says ``conjugate=False``.  Integer forward problems run in float64 and are
rounded back, as ``scipy.signal.fftconvolve`` does; the dispatcher only lets
them here when the result is exactly representable.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy.fft import next_fast_len

from .._kernels.program import Call, Program, execute
from .._lru import memoized

from .._vocabulary import FORWARD, GRAD_INPUT
from ..core.args import array_module_of
from ..core.transpose import forward_operands, transpose, weights_window
from . import fft
from .arrays import (REUSE_FROM_BYTES, fold_padding, oriented_weights, pad_input, reused,
                     zeros_result)

__all__ = ["transposed_forward", "transform_lengths", "workspace_bytes", "scipy_workspace_bytes",
           "forward_program", "clear_program_cache", "run"]


def transposed_forward(problem):
    """The forward problem whose FFT computes ``problem``: itself for ``forward``, else
    its whole transposition (:func:`~cupyconv.core.transpose.transpose`)."""
    return problem if problem.op == FORWARD else transpose(problem, whole=True).forward


def transform_lengths(problem):
    """The transform lengths of a forward ``problem``'s FFT (:func:`.fft.fft_window`: as
    short as the wanted outputs allow, not the full linear convolution)."""
    return fft.fft_window(problem, _source_shape(problem), _shift(problem), _span(problem))[0]


def workspace_bytes(problem):
    """Bytes the FFT of ``problem`` allocates besides its result, at its peak: the
    spectra at the lengths it transforms (:func:`transform_lengths`) in the
    transform's complex dtype, with the passes that make and invert them
    (:func:`_spectra_bytes`), the copies of the operands it makes (a padded or cast
    source, a dilated or cast kernel), and for a gradient the transposed operands it
    makes (``dy`` upsampled, weights conjugated) and the whole transposed problem's
    output it cuts the result from.  A long 1-D signal that NumPy runs by overlap-add
    (:func:`.fft.overlap_add_applies`) counts the larger of that and SciPy's full-length
    transforms (:func:`scipy_workspace_bytes`)."""
    t = None if problem.op == FORWARD else transpose(problem, whole=True)
    fwd = problem if t is None else t.forward
    work = _work_dtype(fwd.dtype)
    total = _spectra_bytes(fwd, work)
    if fft.overlap_add_applies(fwd, _source_shape(fwd), _span(fwd)):
        total = max(total, _full_length_bytes(fwd, work))
    total += _copies_bytes(fwd, work)
    return total if t is None else total + _transposition_bytes(problem, t)


def scipy_workspace_bytes(problem):
    """Bytes ``scipy.signal.fftconvolve`` (or ``oaconvolve``, which allocates less on
    the long 1-D signals it takes) allocates besides the result for a forward ``problem``
    of one image and channel: the spectra of both operands and of their product and the
    real inverse, at the full linear convolution's lengths (SciPy's
    ``next_fast_len``), and an integer result's rounding."""
    work = _work_dtype(problem.dtype)
    total = _full_length_bytes(problem, work)
    if work != problem.dtype:
        total += 2 * math.prod(problem.logical_result_shape) * work.itemsize
    return total


def _full_length_bytes(fwd, work):
    """SciPy's transforms of each of ``fwd``'s signals (one per image and channel) at the
    full linear convolution's lengths: three spectra and the real inverse."""
    cplx = work.kind == "c"
    lengths = [next_fast_len(n + k - 1, not cplx) for n, k in zip(_source_shape(fwd),
                                                                   _span(fwd))]
    points = math.prod(fft.spectrum_shape(lengths, cplx))
    per_signal = (3 * points * np.result_type(work, np.complex64).itemsize
                  + math.prod(lengths) * work.itemsize)
    return fwd.batch * fwd.in_channels * per_signal


def _spectra_bytes(fwd, work):
    """The spectra of the forward problem ``fwd`` alive at once, at the largest of three
    moments: an operand's transform (its spectrum, the last axis's pass and SciPy's
    zero-extended copy of its input, one spectrum each at most) after ``x``'s; the
    product (``y``'s spectrum, in ``x``'s where one channel meets one, else by
    ``einsum``, with its iterator's buffers where it sums one channel); the inverse (a
    ``y`` spectrum, the last axis's output at the full lengths and the wanted outputs
    taken from it)."""
    cplx = work.kind == "c"
    lengths = transform_lengths(fwd)
    item = np.result_type(work, np.complex64).itemsize
    points = math.prod(fft.spectrum_shape(lengths, cplx))
    cg, kg = fwd.in_channels // fwd.groups, fwd.out_channels // fwd.groups
    x = fwd.batch * fwd.in_channels * points * item
    w = fwd.out_channels * cg * points * item
    y = fwd.batch * fwd.out_channels * points * item
    product = 0
    if cg > 1 or kg > 1:     # one input channel per group: einsum buffers its two inputs
        product = y + (2 * min(np.getbufsize(), fwd.batch * fwd.out_channels * points) * item
                       if cg == 1 else 0)
    lines = fwd.batch * fwd.out_channels * (item if cplx else work.itemsize)
    inverse = (min(product, y) + y + lines * (math.prod(lengths) + math.prod(fwd.out_shape)))
    return max(3 * x, x + 3 * w, x + w + max(product, inverse))


def _copies_bytes(fwd, work):
    """The source and kernel copies of the forward problem ``fwd`` (:func:`_source`,
    :func:`_kernel`) and an integer result's rounding."""
    cast = work != fwd.dtype
    total = 0
    if not _zero_padded(fwd):
        total += fwd.batch * fwd.in_channels * math.prod(fwd.padded_shape()) * work.itemsize
    elif cast:
        total += fwd.batch * fwd.in_channels * math.prod(fwd.in_shape) * work.itemsize
    if cast or any(d > 1 for d in fwd.dilation):
        total += (fwd.out_channels * (fwd.in_channels // fwd.groups) * math.prod(_span(fwd))
                  * work.itemsize)
    if cast:
        total += math.prod(fwd.logical_result_shape) * work.itemsize
    return total


def _transposition_bytes(problem, t):
    """A gradient's arrays around the forward problem of its transposition ``t``
    (:func:`~cupyconv.core.transpose.forward_operands`): the forward output (the result is
    cut or folded from it); for the input gradient ``dy`` upsampled by the stride and the
    weights regrouped (a copy at most); for the weight gradient the input regrouped where
    its groups and images cannot be one view, or conjugated for the complex adjoint."""
    fwd = t.forward
    item = fwd.dtype.itemsize
    total = math.prod(fwd.logical_result_shape) * item
    if problem.op == GRAD_INPUT:
        if any(s > 1 for s in t.upsample):
            total += fwd.batch * fwd.in_channels * math.prod(
                (o - 1) * s + 1 for o, s in zip(problem.out_shape, t.upsample)) * item
        return total + math.prod(fwd.w_shape) * item
    if t.conjugate or (problem.groups > 1 and problem.batch > 1):
        total += math.prod(fwd.x_shape) * item
    return total


def _forward(problem, x, w, constant=None):
    """``y`` ``(N, K, *O)`` of a forward problem by the convolution theorem: the
    :func:`forward_program` executed on ``x``, ``w`` (NumPy's long 1-D signals by
    overlap-add instead)."""
    xp = array_module_of(x=x)
    if problem.is_empty:
        return zeros_result(problem, xp, x.dtype)
    if xp is np:
        src_shape, span = _source_shape(problem), _span(problem)
        _, index = fft.fft_window(problem, src_shape, _shift(problem), span)
        if fft.overlap_add_applies(problem, src_shape, span, index):
            return _overlap_add(problem, x, w, index)
    prog = forward_program(problem, xp, np.dtype(x.dtype),
                           xp.asarray if constant is None else constant)
    return execute(prog, xp, {"x": x, "w": w})["y"]


def _span(problem):
    return tuple(d * (k - 1) + 1 for d, k in zip(problem.dilation, problem.kernel_shape))


def _zero_padded(problem):
    """Whether the padding is zeros the transform length supplies (no padded copy)."""
    return problem.padding_mode == "constant" and problem.cval == 0


def _shift(problem):
    return tuple(pb for pb, _ in problem.padding) if _zero_padded(problem) else (0,) * problem.ndim


def _source_shape(problem):
    return tuple(problem.in_shape) if _zero_padded(problem) else tuple(problem.padded_shape())


def _work_dtype(y_dtype):
    """Integers transform in float64 and are rounded back (``scipy.signal.fftconvolve``)."""
    return np.dtype(np.float64) if y_dtype.kind in "biu" else y_dtype


@memoized(256)
def forward_program(problem, xp, y_dtype, constant):
    """The :class:`~cupyconv._kernels.program.Program` of a forward problem's FFT on
    arrays of ``xp`` (memoised per problem, result dtype and ``constant``, the maker of
    the device constants: a runner's, one per device): the operands padded and cast
    (``src``, ``wk``), their pruned forward transforms, the spectral product and the
    pruned inverse cropped into ``y`` (rounded there for integers).  Each step is a
    library call (cuFFT through ``cupyx.scipy.fft``, array-module operations); the
    crop's index arrays are program constants, made once."""
    work = _work_dtype(y_dtype)
    span, cplx = _span(problem), work.kind == "c"
    lengths, index = fft.fft_window(problem, _source_shape(problem), _shift(problem), span)
    constants, slots = [], []
    for i, idx in enumerate(index):
        if not isinstance(idx, slice):
            constants.append((f"index{i}", constant(np.ascontiguousarray(idx, np.intp))))
            slots.append(f"index{i}")
    src_shape = (problem.batch, problem.in_channels) + _source_shape(problem)
    w_shape = (problem.out_channels, problem.in_channels // problem.groups) + span
    y_shape = tuple(problem.logical_result_shape)
    spectrum = y_shape[:2] + fft.spectrum_shape(lengths, cplx)
    in_place = _reuses(xp, math.prod(spectrum), work)      # fy's bytes
    # the pruning decisions, once: each costs a few microseconds of host time per call
    steps = (
        Call(functools.partial(_source, problem, work), ("x",), "src"),
        Call(functools.partial(_kernel, problem, work, xp), ("w",), "wk"),
        _transform(xp, lengths, cplx, src_shape, "src", "fx", work),
        _transform(xp, lengths, cplx, w_shape, "wk", "fw", work),
        Call(functools.partial(_product, problem, xp, in_place), ("fx", "fw"), "fy"),
        Call(functools.partial(_inverse, lengths, tuple(index), cplx, y_dtype.kind in "biu",
                               xp, fft.inverse_prunes(spectrum, lengths, index, xp),
                               fft.inverse_from if in_place else
                               functools.partial(fft.pruned_inverse, xp=xp)),
             ("fy", "y") + tuple(slots)))
    return Program("fft", ("x", "w"), (("y", tuple(problem.logical_result_shape), y_dtype),),
                   steps, "y",
                   constants=tuple(constants))


def _transform(xp, lengths, cplx, shape, source, spectrum, work):
    """The program step computing ``spectrum`` from ``source`` (of ``shape``, in the
    ``work`` dtype): on NumPy, where the spectrum has :data:`.arrays.REUSE_FROM_BYTES` or
    more, into this thread's reused buffer (:func:`.fft.forward_into`), else by
    :func:`.fft.pruned_forward`; pruned (in that order) as :func:`.fft.forward_prunes`
    decides."""
    prune = fft.forward_prunes(shape, lengths, xp)
    if _reuses(xp, math.prod(shape[:2]) * math.prod(fft.spectrum_shape(lengths, cplx)), work):
        fn = functools.partial(fft.forward_into, lengths=lengths, complex_input=cplx,
                               role=spectrum, prune=prune)
    else:
        fn = functools.partial(fft.pruned_forward, lengths=lengths, complex_input=cplx, xp=xp,
                               prune=prune)
    return Call(fn, (source,), spectrum)


def _reuses(xp, points, work):
    """Whether a NumPy spectrum of ``points`` values of the ``work`` dtype's complex type
    takes a reused buffer and in-place passes (:data:`.arrays.REUSE_FROM_BYTES` or more)."""
    return xp is np and points * np.result_type(work, np.complex64).itemsize >= REUSE_FROM_BYTES


def clear_program_cache():
    """Forget the memoised fft programs (they hold device constants)."""
    forward_program.cache_clear()


def _source(problem, work, x):
    """``x`` padded by the boundary mode (zeros come from the transform length), in the
    transform's dtype."""
    src = x if _zero_padded(problem) else pad_input(problem, x)
    return src.astype(work, copy=False)


def _kernel(problem, work, xp, w):
    """The kernel dilated by inserting zeros, oriented as a convolution kernel."""
    wk = oriented_weights(problem, w, flip=not problem.flip).astype(work, copy=False)
    if any(d > 1 for d in problem.dilation):
        wd = xp.zeros(wk.shape[:2] + _span(problem), dtype=work)
        wd[(Ellipsis,) + tuple(slice(None, None, d) for d in problem.dilation)] = wk
        wk = wd
    return wk


def _product(problem, xp, reuse, fx, fw):
    """The spectra multiplied per group, summed over the input channels (into this
    thread's reused buffer where ``reuse``: :func:`_reuses`)."""
    g = problem.groups
    cg, kg = problem.in_channels // g, problem.out_channels // g
    fx = fx.reshape((problem.batch, g, cg) + fx.shape[2:])
    fw = fw.reshape((g, kg, cg) + fw.shape[2:])
    if cg == 1 and kg == 1:
        fx *= fw[:, :, 0][None]              # the Cg == 1 slot becomes Kg == 1
        fy = fx
    elif reuse:
        fy = reused("fy", (problem.batch, g, kg) + fx.shape[3:], fx.dtype)
        np.einsum("ngc...,gkc...->ngk...", fx, fw, out=fy)
    else:
        fy = xp.einsum("ngc...,gkc...->ngk...", fx, fw)
    return fy.reshape((problem.batch, problem.out_channels) + fy.shape[3:])


def _inverse(lengths, index, cplx, exact, xp, prune, invert, fy, y, *arrays):
    """The pruned inverse of ``fy`` cropped into ``y`` (the index arrays are the
    program's constants ``arrays``, in axis order) by ``invert``: on NumPy, where
    :func:`_reuses`, :func:`.fft.inverse_from` (in place: ``fy`` is this call's own), else
    :func:`.fft.pruned_inverse`."""
    given = iter(arrays)
    index = [i if isinstance(i, slice) else next(given) for i in index]
    if not exact:
        invert(fy, lengths, index, cplx, out=y, prune=prune)
    else:
        y[...] = xp.rint(invert(fy, lengths, index, cplx, out=None, prune=prune))


def _overlap_add(problem, x, w, index):
    """NumPy's long 1-D signals: :func:`.fft.overlap_add` (SciPy's ``oaconvolve``)."""
    work = _work_dtype(np.dtype(x.dtype))
    res = fft.overlap_add(_source(problem, work, x), _kernel(problem, work, np, w)[:, 0],
                          index, np)
    return np.rint(res).astype(x.dtype) if work != x.dtype else res


def _gradient(problem, operands, constant=None):
    """A gradient as the FFT of its whole transposed problem: the input gradient's output
    folded back onto ``x``, the weight gradient's cut to its window."""
    xp = array_module_of(x=operands.output)
    t = transpose(problem, whole=True)
    res = _forward(t.forward, *forward_operands(t, problem, operands, xp), constant)
    if problem.op == GRAD_INPUT:
        return fold_padding(problem, res)
    return xp.ascontiguousarray(weights_window(t, res))                 # res (Cg, K, *KS'')


def run(problem, operands, constant=None):
    """The result of ``problem.op`` (logical channels-first) by FFT; ``constant``: how the
    forward program's index arrays reach the device (a runner's ``constant``; default
    ``xp.asarray``)."""
    if problem.op == FORWARD:
        return _forward(problem, operands.activation, operands.filter, constant)
    return _gradient(problem, operands, constant)
