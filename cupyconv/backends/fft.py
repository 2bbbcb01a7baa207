"""Pruned multi-dimensional FFTs for convolution (NumPy and CuPy).

A convolution transforms operands that fill only part of the transform box
(a 7^3 kernel inside a 70^3 box) and needs only part of the inverse (the
``same``/``valid`` window).  Doing the n-D transform one axis at a time
lets each 1-D pass skip the all-zero lines of axes not yet transformed, and
lets the inverse drop unwanted lines before the next axis:

- forward: real FFT along the last axis on the operand's own extent, then a
  complex FFT along each other axis, zero-extended to its length only when
  that axis is transformed (the kernel's forward transform shrinks to about
  one full-size pass instead of ``ndim``);
- inverse: complex inverse FFTs along the leading axes, each followed by
  keeping only the output indices wanted there, then the real inverse along
  the last axis on the surviving lines.

The results equal ``rfftn(a, s=L)`` and ``irfftn(F, s=L)[window]``.

On NumPy the spectra go into buffers each thread reuses from call to call
(:func:`.arrays.reused`, :func:`forward_into`, :func:`inverse_from`): the passes run
in place there, zero-extending each axis just before its pass.  A fresh
spectrum per call is memory the allocator maps and unmaps each time (glibc
returns large freed blocks to the system), and its page faults cost as much
as the transforms on few-channel 4-D layers.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import fft as sfft
from scipy.fftpack import next_fast_len
from scipy.signal import oaconvolve

from .arrays import reused

__all__ = ["fast_len", "fft_window", "pruned_forward", "pruned_inverse", "forward_prunes",
           "inverse_prunes", "little_to_prune", "spectrum_shape", "forward_into", "inverse_from",
           "overlap_add_applies", "overlap_add"]

#: Transforms of at least this many points (all lines together) use every
#: core; below it, thread start-up costs more than it saves (measured on the
#: 2-core development VM: a 256x256 rfft takes 0.2 ms on one thread, 0.5 ms on two).
THREADED_FFT_POINTS = 1 << 20


def fast_len(n):
    """Smallest 2,3,5-smooth length >= ``n``.

    ``scipy.fft.next_fast_len`` also admits factors 7 and 11, which pocketfft
    runs 20-50% slower per point than 5-smooth lengths (measured: a 264x264
    rfft takes 0.43 ms, 270x270 0.32 ms); ``scipy.fftpack.next_fast_len`` is
    the 5-smooth one.
    """
    return next_fast_len(int(n))


def fft_window(problem, src_shape, shift, span):
    """Transform lengths and wanted output indices of a circular convolution.

    The linear convolution ``c`` of the source (length ``S'``) with the
    dilated kernel (span ``KD``) is supported on ``[0, S'+KD-2]``; output
    ``o`` reads ``c[KD-1-shift + stride*o]`` (``shift`` = implicit leading
    zero padding).  A circular transform of length ``L`` returns those
    entries unaliased when ``L > max(S'+KD-2 - j_min, j_max)``, which for
    ``same``/``valid`` modes is shorter than the full ``S'+KD-1``.

    Returns ``(lengths, index)``: per axis a slice, or an index array taken
    modulo ``L`` when the window starts before 0.
    """
    lengths, index = [], []
    for n, kd, sh, st, o in zip(src_shape, span, shift, problem.stride, problem.out_shape):
        j0 = kd - 1 - sh
        j1 = j0 + st * (o - 1)
        length = fast_len(max(n + kd - 2 - j0, j1) + 1)
        lengths.append(length)
        index.append(slice(j0, j1 + 1, st) if j0 >= 0
                     else np.arange(j0, j1 + 1, st) % length)
    return tuple(lengths), index


def _module(xp, points):
    """``(fft module, extra kwargs)`` for the array module."""
    if xp is np:
        return sfft, {"workers": -1 if points >= THREADED_FFT_POINTS else 1}
    import cupyx.scipy.fft as cfft  # optional dependency: only reached with CuPy arrays
    return cfft, {}


def forward_prunes(shape, lengths, xp):
    """Whether :func:`pruned_forward` of an array of ``shape`` prunes (1-D passes)."""
    r = len(lengths)
    points = math.prod(lengths) * math.prod(shape[:-r])
    return not little_to_prune(shape[-r:-1], lengths[:-1], xp, points)


def inverse_prunes(shape, lengths, index, xp):
    """Whether :func:`pruned_inverse` of a spectrum of ``shape`` prunes (1-D passes)."""
    r = len(lengths)
    points = math.prod(lengths) * math.prod(shape[:-r])
    wanted = [len(range(*i.indices(n))) if isinstance(i, slice) else len(i)
              for i, n in zip(index[:-1], lengths[:-1])]
    return not little_to_prune(wanted, lengths[:-1], xp, points)


def pruned_forward(a, lengths, complex_input, xp, prune=None):
    """``rfftn(a, s=lengths)`` (``fftn`` if complex) over the trailing axes; ``prune``:
    :func:`forward_prunes` (decided here when ``None``; a program decides it once)."""
    r = len(lengths)
    mod, kw = _module(xp, math.prod(lengths) * math.prod(a.shape[:-r]))
    axes = tuple(range(-r, 0))
    if not (forward_prunes(a.shape, lengths, xp) if prune is None else prune):
        return (mod.fftn if complex_input else mod.rfftn)(a, s=lengths, axes=axes, **kw)
    last = mod.fft if complex_input else mod.rfft
    out = last(a, n=lengths[-1], axis=-1, **kw)
    for axis in range(-2, -r - 1, -1):
        out = mod.fft(out, n=lengths[axis], axis=axis, overwrite_x=True, **kw)
    return out


def pruned_inverse(f, lengths, index, complex_output, xp, out=None, prune=None):
    """``irfftn(f, s=lengths)[..., *index]`` (``ifftn`` if complex), written into ``out``
    when given (the caller's array: a cast happens there).  An index array of ``index``
    must be an array of ``xp`` (a program's device constant: never copied per call).
    ``prune``: :func:`inverse_prunes` (decided here when ``None``)."""
    r = len(lengths)
    mod, kw = _module(xp, math.prod(f.shape))
    if not (inverse_prunes(f.shape, lengths, index, xp) if prune is None else prune):
        full = (mod.ifftn if complex_output else mod.irfftn)(
            f, s=lengths, axes=tuple(range(-r, 0)), **kw)
        for axis in range(-r, 0):
            full = _take(full, index[axis], axis, xp)
        return _written(full, out, xp)
    res = f
    for axis in range(-r, -1):
        res = mod.ifft(res, n=lengths[axis], axis=axis, overwrite_x=res is not f, **kw)
        res = _take(res, index[axis], axis, xp)
    last = mod.ifft if complex_output else mod.irfft
    res = last(res, n=lengths[-1], axis=-1, overwrite_x=res is not f, **kw)
    return _written(_take(res, index[-1], -1, xp), out, xp)


def spectrum_shape(lengths, complex_input):
    """The trailing shape of ``rfftn(..., s=lengths)`` (``fftn``'s if complex): the last
    axis halved plus one for real input."""
    return tuple(lengths[:-1]) + (lengths[-1] if complex_input else lengths[-1] // 2 + 1,)


def forward_into(a, lengths, complex_input, role, prune=True):
    """``rfftn(a, s=lengths)`` (``fftn`` if complex) over the trailing axes of a NumPy
    array, in a :func:`.arrays.reused` buffer of ``role``: ``a`` cropped to ``lengths`` (as
    ``s=`` crops), the last axis's transform on its extent copied into the buffer's corner, then a complex pass in place along each
    other axis over the lines that hold data, its zero extension written just before.
    The passes run in :func:`pruned_forward`'s order where ``prune`` (:func:`forward_prunes`),
    else in ``rfftn``'s or ``fftn``'s (the leading axis first; ``fftn``'s last axis too),
    so that the results are theirs bitwise."""
    r = len(lengths)
    lead = a.ndim - r
    if any(e > n for e, n in zip(a.shape[lead:], lengths)):    # rfftn's s= crops, too
        a = a[(Ellipsis,) + tuple(slice(0, n) for n in lengths)]
    spectrum = spectrum_shape(lengths, complex_input)
    out = reused(role, a.shape[:lead] + spectrum, np.result_type(a.dtype, np.complex64))
    workers = _module(np, math.prod(lengths) * math.prod(a.shape[:lead]))[1]["workers"]
    if complex_input and not prune:         # fftn's order: every axis, the leading first
        extent, order = list(a.shape[lead:]), range(r)
        out[(Ellipsis,) + tuple(slice(0, e) for e in extent)] = a
    else:
        extent = list(a.shape[lead:-1]) + [spectrum[-1]]
        order = range(r - 2, -1, -1) if prune else range(r - 1)
        out[(Ellipsis,) + tuple(slice(0, e) for e in extent)] = (
            sfft.fft if complex_input else sfft.rfft)(a, n=lengths[-1], axis=-1,
                                                      workers=workers)
    for k in order:
        view = out[(Ellipsis,) + tuple(slice(None) if j == k else slice(0, e)
                                       for j, e in enumerate(extent))]
        view[(slice(None),) * (lead + k) + (slice(extent[k], None),)] = 0
        sfft.fft(view, axis=lead + k, overwrite_x=True, workers=workers)
        extent[k] = lengths[k]
    return out


def inverse_from(f, lengths, index, complex_output, out, prune=True):
    """:func:`pruned_inverse` of a NumPy spectrum ``f`` that it may overwrite (a
    :func:`.arrays.reused` buffer): the leading axes' inverse passes run in place, each on
    the lines the previous passes kept.  Where not ``prune`` (:func:`inverse_prunes`) the
    ``1/N`` is applied once, where ``irfftn``/``ifftn`` apply it (the last pass of a real
    output, the first of a complex one), so that the results are theirs bitwise."""
    r = len(lengths)
    workers = _module(np, math.prod(f.shape))[1]["workers"]
    whole = not prune and r > 1
    norm = "forward" if whole else "backward"       # "forward": the inverse unscaled
    fct = _norm_factor(lengths, f.real.dtype) if whole else None
    res = f
    for axis in range(-r, -1):
        res = sfft.ifft(res, axis=axis, overwrite_x=True, norm=norm, workers=workers)
        if whole and complex_output and axis == -r:
            res *= fct
        res = _take(res, index[axis], axis, np)
    last = sfft.ifft if complex_output else sfft.irfft
    res = _take(last(res, n=lengths[-1], axis=-1, overwrite_x=True, norm=norm,
                     workers=workers), index[-1], -1, np)
    if whole and not complex_output:
        if out is None:
            return res * fct
        np.multiply(res, fct, out=out)
        return out
    return _written(res, out, np)


def _norm_factor(lengths, dtype):
    """pocketfft's ``1/N`` of an inverse over ``lengths``: ``N`` divided in long double,
    rounded once to ``dtype``."""
    return (np.longdouble(1) / np.longdouble(math.prod(lengths))).astype(dtype)


def _written(a, out, xp):
    if out is None:
        return xp.ascontiguousarray(a)
    out[...] = a
    return out


#: Prune only when the kept lines are below this fraction of the box: each
#: extra 1-D pass costs a library call (~15 us), which a near-full operand
#: (the input in ``same`` mode) does not win back.
PRUNE_BELOW = 0.75
#: On the GPU a transform of fewer points than this is never pruned: each 1-D pass is a
#: cuFFT call from Python (plan lookup, allocation, launch: tens of microseconds of host
#: time) while the device transforms such a box in about as long (an H200 moves 4 TB/s:
#: 4M complex64 points, read and written per axis, take ~10 us), so the one n-D call
#: wins; the skipped zero lines only pay on larger boxes.  Chosen by counting, not yet
#: timed (an FFT call of the 2026-11-30 run spent ~1.1 ms on the host).
DEVICE_PRUNE_POINTS = 1 << 22


def little_to_prune(kept, lengths, xp=np, points=0):
    """Whether the n-D transform is cheaper than pruned 1-D passes: the kept lines
    fill most of the box, or (CuPy) the transform has fewer than
    :data:`DEVICE_PRUNE_POINTS` points in all."""
    if xp is not np and points < DEVICE_PRUNE_POINTS:
        return True
    return int(np.prod(kept)) >= PRUNE_BELOW * int(np.prod(lengths))


def _take(a, idx, axis, xp):
    if isinstance(idx, slice):
        return a[(Ellipsis, idx) + (slice(None),) * (-axis - 1)]
    return xp.take(a, idx, axis=axis)



#: Overlap-add replaces one long transform by many short ones when the
#: signal is this many times longer than the kernel (1-D only: measured on
#: the development VM, ``oaconvolve`` beats ``fftconvolve`` 3-5x for 1-D
#: signals of 64k-1M points with kernels of 31-4096 taps, and loses for
#: 2-D/3-D volumes of a few hundred points per axis).
OVERLAP_ADD_RATIO = 16
OVERLAP_ADD_MIN_LENGTH = 4096


def overlap_add_applies(problem, src_shape, span, index=None):
    """Whether :func:`overlap_add` should run this problem.

    ``index`` (from :func:`fft_window`), when given, must also select outputs
    inside the full linear convolution (true for full/same/valid modes).
    """
    long_1d = (problem.ndim == 1 and problem.in_channels == problem.groups
               and problem.out_channels == problem.groups
               and src_shape[0] >= max(OVERLAP_ADD_MIN_LENGTH, OVERLAP_ADD_RATIO * span[0]))
    if not long_1d or index is None:
        return long_1d
    return isinstance(index[0], slice) and index[0].stop - 1 <= src_shape[0] + span[0] - 2


def overlap_add(src, kernel, index, xp):
    """Windowed linear convolution of ``src`` ``(N, G, S)`` with ``kernel`` ``(G, K)``.

    One kernel per group, broadcast over the batch, through
    ``scipy.signal.oaconvolve``; ``index`` selects the wanted outputs of the
    full convolution.
    """
    full = oaconvolve(src, kernel[None], mode="full", axes=-1)
    return xp.ascontiguousarray(full[..., index[0]])
