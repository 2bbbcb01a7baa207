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

A single-channel problem whose kernel extends over one axis only (a 1-D pass
along any axis: ``cupyconv.ndimage``'s 1-D filters, a separable pass) runs
:func:`conv_line`, which reads the input without a padded copy (only the
boundary rows are gathered) and sums in ``scipy.ndimage.correlate1d``'s order: an
exactly symmetric (antisymmetric) odd kernel folds the pairs of taps,
``y = w_c x_c + sum_t (x_t +- x_{K-1-t}) w_t``, one multiply per pair; any
other kernel starts from its last tap.  Float64 results are then bitwise
SciPy's, which matters where they are truncated to integers.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided
# SciPy's functions bound at import: a caller who swaps cupyconv.ndimage into
# scipy.ndimage (a drop-in, or tests/scipy_suite) must not have them call back into it
from scipy.ndimage import correlate as scipy_correlate, correlate1d as scipy_correlate1d

from ..._vocabulary import NDIMAGE_NAMES
from ..arrays import (constant_value, grouped_weights, oriented_weights, pad_input,
                      zeros_result)
from .threads import Scratch, parallel_map

__all__ = ["windows", "operand_views", "conv_direct", "compiled_applies", "scipy_window",
           "single_signal", "line_axis", "conv_line", "scipy_line_applies", "scipy_nd_applies",
           "CHUNK", "SCIPY_STRIDE_BYTES", "chunks", "line_chunks", "scipy_line_faster",
           "tap_slices", "plane_blocks", "conv_depthwise", "PLANE_CHUNK",
           "DEPTHWISE_THREADED", "flat_geometry"]


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


def line_axis(problem):
    """The one spatial axis a single-channel, stride-1, undilated forward problem's
    kernel extends over, with no padding on the others; ``None`` otherwise."""
    if not (problem.op == "forward" and problem.in_channels == 1 and problem.out_channels == 1
            and all(s == 1 for s in problem.stride) and all(d == 1 for d in problem.dilation)):
        return None
    axes = [i for i, k in enumerate(problem.kernel_shape) if k > 1]
    if len(axes) != 1 or any(problem.padding[i] != (0, 0) for i in range(problem.ndim)
                             if i != axes[0]):
        return None
    return axes[0]


def _symmetry(taps):
    """+1 for an exactly symmetric odd kernel, -1 antisymmetric, 0 otherwise."""
    k = taps.shape[0]
    if k % 2 == 0 or k < 3:
        return 0
    left, right = taps[:k // 2], taps[k // 2 + 1:][::-1]
    if np.array_equal(left, right):
        return 1
    if np.array_equal(left, -right):
        return -1
    return 0


#: Output elements per chunk of the single-channel tap loops: a chunk's slabs stay in the
#: L2 cache across its taps (measured 1.3-2x faster than whole-array passes from 2^20
#: elements up; ~2 us of Python per chunk and tap).
CHUNK = 1 << 15


def line_chunks(shape, axis, other):
    """``[(index, offset), ...]``: the pieces of a 1-D pass's output of ``shape`` along
    ``axis``.  Along the outermost of ``other`` longer than 1 (:func:`chunks`; ``offset``
    ``None``: the input piece is the same index) unless ``axis`` itself is outer to all
    of them: then along ``axis`` (``offset``: the piece's first output position there;
    the input rows it reads start there), so every piece is a contiguous slab."""
    longer = [a for a in other if shape[a] > 1]
    total = math.prod(shape)
    if shape[axis] > 1 and total > 2 * CHUNK and (not longer or axis < longer[0]):
        step = max(1, CHUNK // (total // shape[axis]))
        return [((slice(None),) * axis + (slice(i, i + step),), i)
                for i in range(0, shape[axis], step)]
    return [(part, None) for part in chunks(shape, other)]


def scipy_line_faster(shape, axis, itemsize):
    """Whether ``scipy.ndimage.correlate1d`` beats the NumPy pass (contiguous slabs,
    :func:`line_chunks`) along ``axis`` of a C-ordered array of ``shape``: the axis'
    stride is at most :data:`SCIPY_STRIDE_BYTES`."""
    return math.prod(shape[axis + 1:]) * itemsize <= SCIPY_STRIDE_BYTES


def chunks(shape, axes):
    """Index tuples splitting arrays of ``shape`` into pieces of about :data:`CHUNK`
    elements along the outermost of ``axes`` longer than 1 (one piece when small)."""
    total = math.prod(shape)
    axes = [a for a in axes if shape[a] > 1]
    if total <= 2 * CHUNK or not axes:
        return [()]
    a = axes[0]
    step = max(1, CHUNK // (total // shape[a]))
    return [(slice(None),) * a + (slice(i, i + step),) for i in range(0, shape[a], step)]


#: A float64 1-D pass runs in ``scipy.ndimage``'s compiled line loops when its axis'
#: stride is at most this many bytes: SciPy copies each line into a buffer, cheap for
#: near-contiguous lines (the last axis of 1024^2 and 128^3: 1.6-2.5x faster than the
#: NumPy passes; 32^4's third axis, 256 B: 1.3-1.5x from 9 taps, even at 3), 8-11 ns
#: per element from 1 KiB strides on, where the NumPy passes, streaming contiguous
#: slabs (:func:`line_chunks`), are 2-13x faster (1024^2 and 4096x256 axis 0, 128^3
#: axes 0 and 1, 32^4 axis 1; 3-17 taps).
SCIPY_STRIDE_BYTES = 512


def _scipy_agrees(taps):
    """``scipy.ndimage`` sums exactly as this module: its kernel-symmetry test (within
    DBL_EPSILON) gives the same answer as the exact one here."""
    k = taps.shape[0]
    if k % 2 == 0 or _symmetry(taps):
        return True
    left, right = taps[:k // 2], taps[k // 2 + 1:][::-1]
    eps = np.finfo(np.float64).eps
    return bool((np.abs(left - right) > eps).any() and (np.abs(left + right) > eps).any())


def _ndimage_origins(problem):
    """SciPy's origins of a same-size problem (``pb = K//2 + origin``), else ``None``."""
    if problem.out_shape != problem.in_shape:
        return None
    return [pb - k // 2 for (pb, _), k in zip(problem.padding, problem.kernel_shape)]


def _ndimage_kw(problem):
    mode = NDIMAGE_NAMES[problem.padding_mode]
    return dict(mode=mode, cval=float(np.real(problem.cval)) if mode == "constant" else 0.0)


def scipy_line_applies(problem):
    """Whether a 1-D pass (:func:`line_axis`) may run ``scipy.ndimage.correlate1d``:
    float64, same-size output, where it is faster (:func:`scipy_line_faster`; the
    kernel's symmetry is checked on the data, :func:`conv_line`)."""
    axis = line_axis(problem)
    return (axis is not None and problem.dtype == np.float64
            and _ndimage_origins(problem) is not None
            and scipy_line_faster((problem.batch, 1) + tuple(problem.in_shape), 2 + axis, 8))


def scipy_nd_applies(problem):
    """Whether a problem's geometry and dtype let ``scipy.ndimage.correlate`` run it
    (float64, one channel, stride 1, undilated, same-size output; the taps are checked on
    the data, :func:`conv_direct`)."""
    return (problem.dtype == np.float64 and problem.op == "forward"
            and problem.in_channels == 1 and problem.out_channels == 1
            and all(s == 1 for s in problem.stride) and all(d == 1 for d in problem.dilation)
            and _ndimage_origins(problem) is not None)


def conv_line(problem, x, w, axis):
    """A 1-D pass along spatial ``axis`` (:func:`line_axis`) in SciPy's summation order,
    read from the input itself (no padded copy): the outputs whose taps all fall inside
    the input as contiguous runs (:func:`_interior_pieces`), the few rows at each end
    from the boundary rows gathered (:func:`_boundary_rows`)."""
    k, n = problem.kernel_shape[axis], problem.out_shape[axis]
    taps = oriented_weights(problem, w).reshape(k)
    origins = _ndimage_origins(problem)
    if x.dtype == np.float64 and scipy_line_applies(problem) and _scipy_agrees(taps):
        y = np.empty((problem.batch, 1) + problem.out_shape, dtype=x.dtype)
        scipy_correlate1d(x, np.ascontiguousarray(taps), axis=2 + axis, output=y,
                          origin=origins[axis], **_ndimage_kw(problem))
        return y
    y = np.empty((problem.batch, 1) + problem.out_shape, dtype=x.dtype)
    if y.size == 0:
        return y
    m, (pb, _) = problem.in_shape[axis], problem.padding[axis]
    if m == 0:                   # constant padding only: the padded input is all cval
        x, m, pb = pad_input(problem, x), sum(problem.padding[axis]), 0
    outer = problem.batch * math.prod(problem.out_shape[:axis])
    s = math.prod(problem.out_shape[axis + 1:])
    x3, y3 = np.ascontiguousarray(x).reshape(outer, m, s), y.reshape(outer, n, s)
    lo = min(pb, n)                          # rows [lo, hi): every tap inside the input
    hi = max(lo, min(n, m - k + 1 + pb))
    sym = _symmetry(taps)
    tmp = np.empty(CHUNK, dtype=x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):     # SciPy's loops never warn
        for out, source in (_interior_pieces(x3, y3, lo, hi, pb, s) if hi > lo else ()):
            _tap_sum(out, source, taps, sym, tmp)
        for first, stop in ((0, lo), (hi, n)):
            for out, source, store in _boundary_rows(problem, x3, y3, axis, first, stop):
                _tap_sum(out, source, taps, sym, tmp)
                store()
    return y


def _tap_sum(out, source, taps, sym, tmp):
    """``out = sum_t taps[t] * source(t)`` in ``scipy.ndimage.correlate1d``'s order: a
    symmetric (antisymmetric, ``sym`` -1) odd kernel from its centre tap, then
    ``(x_t +- x_{K-1-t}) * w_t`` per pair; any other from its last tap, then the others
    in order.  ``tmp``: a flat scratch array (a larger one is made if ``out`` needs it)."""
    k = taps.shape[0]
    tmp = (tmp[:out.size] if tmp.size >= out.size else np.empty(out.size, out.dtype)
           ).reshape(out.shape)
    if sym:
        c = k // 2
        np.multiply(source(c), taps[c], out=out)
        fold = np.add if sym > 0 else np.subtract
        for t in range(c):
            fold(source(t), source(k - 1 - t), out=tmp)
            tmp *= taps[t]
            out += tmp
    else:
        np.multiply(source(k - 1), taps[k - 1], out=out)
        for t in range(k - 1):
            np.multiply(source(t), taps[t], out=tmp)
            out += tmp


def _interior_pieces(x3, y3, lo, hi, pb, s):
    """``(out, source)`` pieces of about :data:`CHUNK` outputs covering rows ``[lo, hi)``
    of every plane of ``y3`` ``(outer, n, s)``, ``source(t)`` the input that tap ``t``
    reads (``x3`` ``(outer, m, s)`` C-contiguous).  Where input and output planes are
    the same size the rows of all planes form one contiguous run (the rows between the
    planes' interiors are computed too, from the wrong plane, and then overwritten by
    :func:`_boundary_rows`); else one run per plane."""
    outer, n, _ = y3.shape
    m = x3.shape[1]
    if n == m:
        yr, xr = y3.reshape(1, -1), x3.reshape(1, -1)
        first, length = lo * s, (outer - 1) * n * s + (hi - lo) * s
        base = (lo - pb) * s - first     # tap 0 of output column j reads column j + base
    else:
        yr, xr = y3.reshape(outer, -1), x3.reshape(outer, -1)
        first, length, base = lo * s, (hi - lo) * s, (lo - pb) * s - lo * s
    rows, cols = max(1, CHUNK // length), min(length, CHUNK)
    for r in range(0, yr.shape[0], rows):
        for c in range(first, first + length, cols):
            stop = min(first + length, c + cols)
            out = yr[r:r + rows, c:stop]

            def source(t, r=r, c=c, stop=stop):
                return xr[r:r + rows, c + base + t * s:stop + base + t * s]
            yield out, source


def _boundary_rows(problem, x3, y3, axis, first, stop):
    """``(out, source, store)`` pieces of rows ``[first, stop)`` of every plane of ``y3``
    from the input rows their taps read, gathered with the boundary mode's map
    (``numpy.pad`` of ``arange``, as :func:`~cupyconv.backends.arrays.pad_input` pads;
    constant padding: ``cval``) into ``(rows, planes, s)`` blocks of about
    :data:`CHUNK` elements, whose long axes are the inner ones; ``store()`` writes
    ``out`` back into ``y3``."""
    if stop <= first:
        return
    k, m = problem.kernel_shape[axis], problem.in_shape[axis]
    pads = problem.padding[axis]
    constant = problem.padding_mode == "constant"
    index = (np.pad(np.arange(m), pads, mode="constant", constant_values=-1) if constant
             else np.pad(np.arange(m), pads, mode=problem.padding_mode))[first:stop + k - 1]
    outside = index < 0
    index = np.where(outside, 0, index)
    outer, _, s = y3.shape
    rows = index.shape[0]
    per_plane = rows * s
    step, cols = ((max(1, CHUNK // per_plane), s) if per_plane <= CHUNK
                  else (1, max(1, CHUNK // rows)))
    xt = x3.transpose(1, 0, 2)
    for o in range(0, outer, step):
        for c in range(0, s, cols):
            src = xt[index, o:o + step, c:c + cols]
            if constant and outside.any():
                src[outside] = constant_value(problem, src.dtype)
            out = np.empty((stop - first,) + src.shape[1:], src.dtype)

            def source(t, src=src):
                return src[t:t + stop - first]

            def store(out=out, o=o, c=c):
                y3[o:o + step, first:stop, c:c + cols] = out.transpose(1, 0, 2)
            yield out, source, store


def _scipy_correlate_applies(problem, x, w):
    """A float64 single-channel, same-size, stride-1 problem whose every tap exceeds
    DBL_EPSILON: ``scipy.ndimage.correlate`` sums it in this module's order (C-order
    taps from 0) but skips smaller taps, so only then is it the same tap loop, compiled
    (1.3-1.8x faster than the NumPy passes, measured 512^2 5^2, 64^3 5^3, 24^4 3^4)."""
    if not (x.dtype == np.float64 and scipy_nd_applies(problem)):
        return False
    return bool((np.abs(w) > np.finfo(np.float64).eps).all())


def conv_direct(problem, x, w):
    """Tap loop: ``y += w[:, :, t] . x[window t]`` for every kernel tap ``t``.

    No workspace beyond ``y``; each output accumulates its taps in a fixed
    order, so NaN/Inf stay local to the outputs that see them.
    """
    if problem.is_empty:
        return zeros_result(problem, np, x.dtype)
    if compiled_applies(problem):
        return scipy_window(problem, x, w, np.convolve)
    axis = line_axis(problem)
    if axis is not None:
        return conv_line(problem, x, w, axis)
    if _scipy_correlate_applies(problem, x, w):
        y = np.empty((problem.batch, 1) + problem.out_shape, dtype=x.dtype)
        weights = np.ascontiguousarray(oriented_weights(problem, w)[0, 0])
        scipy_correlate(x[:, 0], weights[None], output=y[:, 0],
                        origin=[0] + _ndimage_origins(problem), **_ndimage_kw(problem))
        return y
    g = problem.groups
    if problem.out_channels == g and problem.in_channels == g:   # one filter per channel
        return conv_depthwise(problem, x, w)
    y = zeros_result(problem, np, x.dtype)
    view, wg, yg = operand_views(problem, x, w, y)
    for tap in np.ndindex(*problem.kernel_shape):
        slab = view[(Ellipsis,) + tap]            # (N, G, Cg, *O)
        wt = wg[(Ellipsis,) + tap]                # (G, Kg, Cg)
        yg += np.einsum("ngc...,gkc->ngk...", slab, wt)
    return y


def tap_slices(problem, tap):
    """The strided slice of the padded input that kernel tap ``tap`` reads."""
    return tuple(slice(t * d, t * d + st * (o - 1) + 1, st)
                 for t, d, st, o in zip(tap, problem.dilation, problem.stride,
                                        problem.out_shape))


#: Output elements per block of :func:`conv_depthwise` (measured on 8 x 64 x 56^2 3x3,
#: float32, median of 7 on the loaded 2-core VM: 2^13 38 ms, 2^15 22 ms, 2^16 16 ms,
#: 2^17 16 ms; the padded block, its temporary and outputs stay within one core's L2).
PLANE_CHUNK = 1 << 16


def plane_blocks(batch, channels, plane):
    """``[(images, channels), ...]`` slices splitting ``(N, C)`` planes of ``plane``
    outputs into blocks of about :data:`PLANE_CHUNK` outputs: whole images when one
    fits, else runs of one image's channels (at least one plane)."""
    per_image = channels * plane
    if per_image <= PLANE_CHUNK:
        step = max(1, PLANE_CHUNK // max(per_image, 1))
        return [(slice(n, min(batch, n + step)), slice(None)) for n in range(0, batch, step)]
    step = max(1, PLANE_CHUNK // max(plane, 1))
    return [(slice(n, n + 1), slice(c, min(channels, c + step)))
            for n in range(batch) for c in range(0, channels, step)]


def flat_geometry(problem):
    """``(offsets, length, pst)`` of the stride-1 depthwise loop over flattened padded
    planes (:func:`_flat_taps`): each tap's offset into a plane, the "wide" run's length
    and the padded plane's strides in elements; the same for every block of a call."""
    padded = problem.padded_shape()
    pst = [math.prod(padded[i + 1:]) for i in range(len(padded))]
    length = sum((o - 1) * st for o, st in zip(problem.out_shape, pst)) + 1
    offsets = [sum(t * d * st for t, d, st in zip(tap, problem.dilation, pst))
               for tap in np.ndindex(*problem.kernel_shape)]
    return offsets, length, pst


def _flat_taps(geometry, xc, wc):
    """``(sources, weights)`` of a stride-1 block: each tap's input as one contiguous run
    per channel plane of the flattened padded block ``xc`` (the "wide" outputs: every
    padded row position, of which the valid ones are read back through
    :func:`_valid_outputs`) at :func:`flat_geometry`'s offsets, and the weights
    ``(planes, taps)``."""
    offsets, length, _ = geometry
    flat = xc.reshape(xc.shape[0] * xc.shape[1], -1)
    weights = wc if xc.shape[0] == 1 else np.tile(wc, (xc.shape[0], 1))
    return [flat[:, o:o + length] for o in offsets], weights


def _valid_outputs(problem, wide, shape, pst):
    """The valid outputs ``shape`` ``(n, c, *O)`` of the wide rows ``wide``."""
    item = wide.itemsize
    return as_strided(wide, shape=shape, strides=(shape[1] * wide.strides[0],
                                                  wide.strides[0])
                      + tuple(st * item for st in pst), writeable=False)


def _padded_block(problem, xb, buffers):
    """:func:`~cupyconv.backends.arrays.pad_input` of a block, C-contiguous; constant
    padding by one copy into a buffer whose border was filled once (``numpy.pad``'s
    Python per block was a quarter of the depthwise loop's time on 8 x 64 x 56^2 3x3)."""
    if problem.padding_mode != "constant" or not any(b or a for b, a in problem.padding):
        return np.ascontiguousarray(pad_input(problem, xb))
    shape = (xb.shape[0] * xb.shape[1],) + problem.padded_shape()
    out = buffers.take("padded", shape, xb.dtype, fill=constant_value(problem, xb.dtype))
    out = out.reshape(xb.shape[:2] + shape[1:])
    out[(slice(None), slice(None)) + tuple(slice(b, b + n) for (b, _), n in
                                            zip(problem.padding, problem.in_shape))] = xb
    return out


#: Outputs per block from which the depthwise blocks run on one thread per core.  Below
#: it they run one after another: each block is some 20 NumPy calls of ~10 us, and two
#: threads trading the GIL at that rate were slower than one (quiet 2-core VM, load 0.2,
#: 8 x 64 x 56^2 3x3 float32, blocks of 2-32 planes: 4.3-8.4 ms on one thread, 4.9-10.5
#: on two; the lead's table: 5.2 ms on one core, 8.4 on two).
DEPTHWISE_THREADED = 1 << 22


def conv_depthwise(problem, x, w):
    """One filter per channel (depthwise, or a single channel): a tap loop per block of
    channel planes (:func:`plane_blocks`), each block padded on its own into a reused
    buffer and its taps summed in cache; the blocks run one after another, or on one
    thread per core when a block holds :data:`DEPTHWISE_THREADED` outputs
    (:func:`~cupyconv.backends.numpy.threads.parallel_map`).  Stride 1 sums over the
    flattened planes (one contiguous run per plane and tap, :func:`_flat_taps`; single
    core, 8 x 64 x 56^2 3x3 float32: 38 ms as strided rows); a stride reads strided
    slices.  Each output sums its taps in C order from the first, whatever the blocks."""
    y = np.empty(problem.logical_result_shape, dtype=x.dtype)
    r = problem.ndim
    wts = oriented_weights(problem, w).reshape(problem.out_channels, -1)   # (C, taps)
    taps = list(np.ndindex(*problem.kernel_shape))
    flat = all(s == 1 for s in problem.stride)
    geometry = flat_geometry(problem) if flat else None
    buffers = Scratch()

    def block(index):
        images, chans = index
        xc = _padded_block(problem, x[images, chans], buffers)
        yc = y[images, chans]
        wc = wts[chans]
        if flat:
            sources, weights = _flat_taps(geometry, xc, wc)
            acc = buffers.take("acc", (weights.shape[0], geometry[1]), y.dtype)
            columns = weights.T[:, :, None]            # (taps, planes, 1), one view
        else:
            sources = [xc[(slice(None), slice(None)) + tap_slices(problem, tap)]
                       for tap in taps]
            acc = yc
            columns = wc.T.reshape((len(taps), 1, -1) + (1,) * r)
        tmp = buffers.take("tmp", acc.shape, y.dtype).reshape(acc.shape)
        np.multiply(sources[0], columns[0], out=acc)
        for src, col in zip(sources[1:], columns[1:]):
            np.multiply(src, col, out=tmp)
            acc += tmp
        if flat:
            yc[...] = _valid_outputs(problem, acc, yc.shape, geometry[2])

    plane = math.prod(problem.out_shape)
    indices = plane_blocks(problem.batch, problem.out_channels, plane)
    images, chans = indices[0]
    first = len(range(*images.indices(problem.batch))) * len(
        range(*chans.indices(problem.out_channels))) * plane
    lanes = None if first >= DEPTHWISE_THREADED else 1
    parallel_map(block, indices, lanes)
    return y
