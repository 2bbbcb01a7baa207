"""Array-module-generic helpers shared by the algorithms of every backend.

All take a :class:`~cupyconv.core.ConvProblem` and logical channels-first
arrays (``x`` ``(N, C, *S)``, ``w`` ``(K, C/G, *KS)``, ``y`` ``(N, K, *O)``)
of NumPy or CuPy (the module is taken from the array).
"""
from __future__ import annotations

import threading

import numpy as np

from .._dtypes import is_half_float, is_inexact
from .._kernels import program
from .._lru import LRU
from .._kernels.scan_result import ScanResult
from ..core.args import array_module_of

__all__ = ["reused", "constant_value", "REUSE_FROM_BYTES", "all_finite", "max_magnitude",
           "host_scan", "to_tf32", "in_float32", "pad_input", "fold_padding", "oriented_weights",
           "grouped_weights", "zeros_result", "axis_index"]


#: Bytes of all threads' :func:`reused` buffers together; a buffer past the bound is
#: made afresh each call.
REUSED_BYTES = 64 << 20
#: Least bytes of a temporary worth a :func:`reused` buffer: glibc serves smaller blocks
#: from its heap (below its default mmap threshold), where a fresh one costs less than
#: the reuse's own bookkeeping.
REUSE_FROM_BYTES = 128 << 10
_REUSED = LRU(64, maxbytes=REUSED_BYTES, size=lambda a: a.nbytes)


def reused(role, shape, dtype, grow=False):
    """An uninitialised NumPy array of ``shape`` and ``dtype`` that the calling thread
    gets again on its next request with the same ``role`` (the use: buffers alive at
    once take different roles), least recently used dropped past :data:`REUSED_BYTES`
    (``cupyconv.clear_caches`` drops them all).  For a call's temporaries of a few
    megabytes: glibc maps such blocks afresh and unmaps them at each free, and their page
    faults cost as much as the work on few-channel 4-D layers.  Never a result: the
    caller's next call overwrites it.

    ``grow``: the leading ``shape[0]`` rows of the thread's buffer of ``role`` with the
    same trailing shape, made afresh (in its place) when it has fewer rows: a block
    loop's buffer, whose last block may be shorter."""
    rows, dtype = shape[0] if grow else None, np.dtype(dtype)
    key = (threading.get_ident(), role, tuple(shape[1:] if grow else shape), dtype)
    buf = _REUSED.get(key)
    if buf is None or (grow and len(buf) < rows):
        buf = np.empty(shape, dtype)
        _REUSED.put(key, buf)
    return buf[:rows] if grow else buf


def constant_value(problem, dtype):
    """The constant boundary's value written into an array of ``dtype``: ``cval``, its
    real part unless ``dtype`` is complex."""
    return problem.cval if np.dtype(dtype).kind == "c" else np.real(problem.cval)


def pad_input(problem, x):
    """``x`` extended by the problem's padding and boundary mode (no copy without padding)."""
    if not any(b or a for b, a in problem.padding):
        return x
    xp = array_module_of(x=x)
    pads = ((0, 0), (0, 0)) + tuple(problem.padding)
    if problem.padding_mode == "constant":
        return xp.pad(x, pads, mode="constant",
                      constant_values=constant_value(problem, x.dtype))
    return xp.pad(x, pads, mode=problem.padding_mode)


def axis_index(axis, index):
    """Index tuple selecting ``index`` on ``axis`` (all of the leading axes)."""
    return (slice(None),) * axis + (index,)


def fold_padding(problem, xpad):
    """Adjoint of :func:`pad_input`'s linear part: ``(N, C, *padded)`` -> ``(N, C, *S)``.

    Each padded position adds onto the source element :func:`numpy.pad` read
    it from (per axis: ``numpy.pad(arange(S), pads, mode)`` is that map, so
    repeated reflections of pads wider than the axis fold back exactly);
    constant padding contributes nothing.  Axes fold one after another, in a
    fixed order, so the result is bitwise reproducible.
    """
    xp = array_module_of(x=xpad)
    out = xpad
    for i, (pb, pa) in enumerate(problem.padding):
        if not (pb or pa):
            continue
        axis, s = 2 + i, problem.in_shape[i]
        center = out[axis_index(axis, slice(pb, pb + s))]
        if problem.padding_mode == "constant":
            out = center
            continue
        source = np.pad(np.arange(s), (pb, pa), mode=problem.padding_mode)
        res = center.copy()
        for j in list(range(pb)) + list(range(pb + s, pb + s + pa)):
            res[axis_index(axis, int(source[j]))] += out[axis_index(axis, j)]
        out = res
    return xp.ascontiguousarray(out)


def oriented_weights(problem, w, flip=None):
    """``w`` with the taps reversed for true convolution (a view)."""
    if problem.flip if flip is None else flip:
        return w[(slice(None), slice(None)) + (slice(None, None, -1),) * problem.ndim]
    return w


def grouped_weights(problem, w):
    """``(G, K/G, C/G, *KS)`` view of ``w``."""
    g = problem.groups
    return w.reshape((g, problem.out_channels // g, problem.in_channels // g)
                     + tuple(problem.kernel_shape))


def zeros_result(problem, xp, dtype=None):
    """Zeros of the shape ``problem.op`` computes (logical channels-first)."""
    return xp.zeros(problem.logical_result_shape, dtype=problem.dtype if dtype is None else dtype)


def all_finite(a):
    """All elements finite: min/max reductions, no input-sized temporary."""
    if not is_inexact(a.dtype) or a.size == 0:
        return True
    parts = (a.real, a.imag) if a.dtype.kind == "c" else (a,)
    return all(bool(np.isfinite(float(p.min()))) and bool(np.isfinite(float(p.max())))
               for p in parts)


def max_magnitude(a):
    """``max |a|`` of integer data as a Python int, by a min/max scan (never ``abs``: it
    wraps at the most negative integer)."""
    if a.size == 0:
        return 0
    return max(-int(a.min()), int(a.max()))


def host_scan(arrays):
    """The :class:`~cupyconv._kernels.scan_launch.ScanResult` of ``arrays`` on the host
    (the NumPy backend's data scan): :func:`all_finite` per array, :func:`max_magnitude`
    of integer data (``None`` for floating data: no rule reads it on the host)."""
    return ScanResult(tuple(all_finite(a) for a in arrays),
                      tuple(max_magnitude(a) if a.dtype.kind in "biu" else None
                            for a in arrays))


def to_tf32(a):
    """float32 ``a`` rounded to TF32 as ``cvt.rna.tf32.f32`` on the GPU: 10 mantissa bits,
    round to nearest with ties away from zero (the magnitude bits plus half a unit, then
    the low 13 bits cleared: a carry rounds up the exponent, the largest values to Inf);
    Inf and NaN keep their top bits (a NaN whose payload is only in the low 13 bits
    becomes Inf, as the H200 does)."""
    xp = array_module_of(x=a)
    out = a.astype(np.float32, order="K", copy=True)   # the layout kept (channels-last
    bits = out.view(np.uint32)                         # stays channels-last: variant 3)
    finite = xp.isfinite(out)
    bits[...] = xp.where(finite, bits + np.uint32(0x1000), bits) & np.uint32(0xFFFFE000)
    return out


def in_compute_dtype(problem, operands):
    """``operands`` with an integer activation in the problem's compute dtype.

    ``convolve``/``correlate`` pass a narrower integer input as it is (for example int32
    data with an int64 kernel, an int64 result): the ``separable`` passes on the CPU read
    it directly, every other algorithm takes it widened once, here.
    """
    x = operands.activation
    if x is None or x.dtype == problem.dtype:
        return operands
    return operands.replace(activation=x.astype(problem.dtype))


def _float32(a):
    return a.astype(np.float32)


def in_float32(problem, operands):
    """``(problem, operands)`` of a float16 or bfloat16 problem computed in float32, else
    as given.

    The one widening of the 16-bit contract (docs/semantics.md, "Precision contract"):
    each operand present is cast to float32 once (exact: every float16 and bfloat16 is a
    float32), ``cval`` is rounded to the 16-bit type as padding its data with it would (the
    GPU's 16-bit kernels do the same), and the problem's dtype becomes float32, so the
    algorithm that runs it computes in float32 (a tap sum adds exact 16-bit products).  The
    result is float32; the public function rounds it to the 16-bit type once.
    """
    if not is_half_float(problem.dtype):
        return problem, operands
    arrays = {role: program.host_step("widen", _float32, operands.get(role))  # replayable
              for role in ("activation", "filter", "output") if operands.get(role) is not None}
    cval = problem.cval
    if cval != 0:
        with np.errstate(over="ignore"):         # beyond the type's range: inf, as padding is
            cval = float(np.asarray(np.real(cval), np.float64).astype(problem.dtype))
    return problem.with_(dtype=np.dtype(np.float32), cval=cval), operands.replace(**arrays)
