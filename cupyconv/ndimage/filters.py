"""``scipy.ndimage``'s linear filters: each pass one problem, run by the dispatcher.

The functions mirror ``scipy/ndimage/_filters.py`` argument by argument (the
order of the checks, the exception types, the ``output`` rules), so that code
written for SciPy runs unchanged.  What differs is how a pass is computed: one
:class:`~cupyconv.core.ConvProblem` (:func:`cupyconv.core.ndimage_map.filter_call`, driven by :mod:`.common`)
run by the dispatcher on the backend of the arrays, in the compute dtype of
:func:`compute_dtype`, and stored into ``output`` with SciPy's C cast
(truncation toward zero for integer outputs).
"""
from __future__ import annotations

import numbers
import operator
from typing import Any, Optional

import numpy as np

from ..api.compiled import compiled
from ..core import args
from ..core.ndimage_map import engine_mode
from ..dispatch import device_constant
from .common import (as_arrays, between_passes, check_axes, check_complex_cval, check_cval, check_origin,
                     compute_dtype, copy_input, empty_result, get_output, normalize_axis,
                     normalize_origin, normalize_sequence, run_filter)
from .._typing import Array, ArrayLike, Axes, FloatOrSeq, IntOrSeq, Modes, Scalar

__all__ = ["correlate", "convolve", "correlate1d", "convolve1d", "gaussian_filter",
           "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "compute_dtype",
           "gaussian_kernel1d"]

def _correlate_or_convolve(input, weights, output, mode, cval, origin, convolution, axes):
    xp, input, weights = as_arrays(input, weights)
    cplx = input.dtype.kind == "c" or weights.dtype.kind == "c"
    if weights.dtype.kind == "c" and not convolution:
        weights = xp.conj(weights)         # as numpy.correlate: conjugate the weights
    if cplx:                               # SciPy's order of checks, path by path
        output = get_output(output, input, xp, complex_output=True)
        check_complex_cval(cval, input)
    axes = check_axes(axes, input.ndim)
    if len(axes) < input.ndim:
        if weights.ndim != len(axes):
            raise RuntimeError(f"weights.ndim ({weights.ndim}) must match len(axes) "
                               f"({len(axes)})")
        weights = xp.expand_dims(weights, tuple(a for a in range(input.ndim) if a not in axes))
    origins = normalize_sequence(origin, len(axes))
    if len(axes) < input.ndim:
        full = [0] * input.ndim
        for o, ax in zip(origins, axes):
            full[ax] = o
        origins = full
    origins = [normalize_origin(o) for o in origins]
    wshape = [n for n in weights.shape if n > 0]
    if len(wshape) != input.ndim:
        raise RuntimeError(f"weights.ndim ({len(wshape)}) must match len(axes) ({len(axes)})")
    if convolution:
        weights = weights[(slice(None, None, -1),) * weights.ndim]
        origins = [-o - (0 if n & 1 else 1) for o, n in zip(origins, weights.shape)]
    for o, n in zip(origins, wshape):
        check_origin(o, n, "weights.shape[k]")
    if not cplx:
        output = get_output(output, input, xp)
    engine = engine_mode(mode)
    check_cval(cval, input)
    if input.size == 0:     # SciPy's N-D correlate returns before it looks at the dtypes
        return empty_result(output, xp)
    return run_filter(xp, input, weights, origins, engine, cval, output, plus_zero=True,
                      footprint=True)


@compiled
def correlate(input: ArrayLike, weights: ArrayLike, output: Any = None,
              mode: Modes = "reflect", cval: Scalar = 0.0, origin: IntOrSeq = 0, *,
              axes: Optional[Axes] = None) -> Array:
    """Multidimensional correlation (:func:`scipy.ndimage.correlate`).

    Parameters
    ----------
    input : array_like
        NumPy or CuPy array (bool, integer, float16/32/64, complex64/128).
    weights : array_like
        Kernel with ``len(axes)`` (default ``input.ndim``) dimensions.
    output : array or dtype, optional
        Array to write into (same shape as `input`) or the result dtype;
        default `input`'s dtype (complex input or weights: complex).
    mode : {'reflect', 'constant', 'nearest', 'mirror', 'wrap', 'grid-constant', \
'grid-mirror', 'grid-wrap'}, optional
        The boundary (docs/semantics.md maps each onto ``numpy.pad``'s names).
    cval : scalar, optional
        Fill value of ``constant``/``grid-constant``.
    origin : int or sequence of int, optional
        Kernel centre at ``weights.shape[k] // 2 + origin[k]``; must satisfy
        ``-(w // 2) <= origin <= (w - 1) // 2``.
    axes : int or sequence of int, optional
        Axes to filter (default all).

    Returns
    -------
    output : ndarray
        ``output[i] = sum_j weights[j] * input_ext[i + j - (w // 2 + origin)]``,
        complex weights conjugated (as :func:`numpy.correlate`).

    Notes
    -----
    Integer outputs are truncated toward zero, as SciPy's C cast (out of range: as
    x86-64 converts a double, docs/semantics.md "Output casting").  Integer inputs with
    integer-valued weights are computed exactly (int64); float weights on integer data run
    in float64 with a tap-sum algorithm (never FFT), so a value within a few roundoff units
    of an integer may truncate differently from SciPy's own summation order.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.correlate(np.arange(5.0), np.array([1.0, 2.0, 3.0]), mode="nearest")
    array([ 3.,  8., 14., 20., 23.])
    """
    return _correlate_or_convolve(input, weights, output, mode, cval, origin, False, axes)


@compiled
def convolve(input: ArrayLike, weights: ArrayLike, output: Any = None, mode: Modes = "reflect",
             cval: Scalar = 0.0, origin: IntOrSeq = 0, *,
             axes: Optional[Axes] = None) -> Array:
    """Multidimensional convolution (:func:`scipy.ndimage.convolve`).

    The correlation of `input` with the flipped `weights`; for an even kernel extent
    the centre moves as in SciPy (``origin -> -origin - 1``).  Parameters as in
    :func:`correlate`; complex weights are not conjugated.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.convolve(np.arange(5.0), np.array([1.0, 2.0, 3.0]), mode="constant")
    array([ 1.,  4., 10., 16., 17.])
    """
    return _correlate_or_convolve(input, weights, output, mode, cval, origin, True, axes)


# ------------------------------------------------------------- 1-D correlation
@compiled
def correlate1d(input: ArrayLike, weights: ArrayLike, axis: int = -1, output: Any = None,
                mode: Modes = "reflect", cval: Scalar = 0.0, origin: IntOrSeq = 0) -> Array:
    """1-D correlation along one axis (:func:`scipy.ndimage.correlate1d`).

    Parameters as in :func:`correlate`, with 1-D `weights` and one `axis`.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.correlate1d(np.array([2, 8, 0, 4, 1, 9, 9, 0]), [1, 3])
    array([ 8, 26,  8, 12,  7, 28, 36,  9])
    """
    xp, input, weights = as_arrays(input, weights)
    cplx = input.dtype.kind == "c" or weights.dtype.kind == "c"
    if weights.dtype.kind == "c":
        weights = xp.conj(weights).astype(np.complex128, copy=False)
    output = get_output(output, input, xp, complex_output=cplx)
    if cplx:
        check_complex_cval(cval, input)
    if weights.ndim != 1 or weights.shape[0] < 1:
        raise RuntimeError("no filter weights given")
    axis = normalize_axis(axis, input.ndim)
    origin = normalize_origin(origin)
    check_origin(origin, weights.shape[0], "len(weights)")
    engine = engine_mode(mode)
    check_cval(cval, input)
    shape = [1] * input.ndim
    shape[axis] = weights.shape[0]
    origins = [0] * input.ndim
    origins[axis] = origin
    return run_filter(xp, input, weights.reshape(shape), origins, engine, cval, output)


@compiled
def convolve1d(input: ArrayLike, weights: ArrayLike, axis: int = -1, output: Any = None,
               mode: Modes = "reflect", cval: Scalar = 0.0, origin: IntOrSeq = 0) -> Array:
    """1-D convolution along one axis (:func:`scipy.ndimage.convolve1d`).

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.convolve1d(np.array([2, 8, 0, 4, 1, 9, 9, 0]), [1, 3])
    array([14, 24,  4, 13, 12, 36, 27,  0])
    """
    xp = args.array_module_of(input=input, weights=weights)
    weights = args.as_array(xp, weights)[::-1]
    origin = -normalize_origin(origin)
    if not weights.shape[0] & 1:
        origin -= 1
    if weights.dtype.kind == "c":
        weights = xp.conj(weights)         # undone by correlate1d's conjugation
    return correlate1d(input, weights, axis, output, mode, cval, origin)


# -------------------------------------------------------------------- Gaussian
def gaussian_kernel1d(sigma, order, radius):
    """The Gaussian (or its ``order``-th derivative) taps at ``-radius..radius``,
    computed as SciPy does (bitwise the same weights)."""
    if order < 0:
        raise ValueError("order must be non-negative")
    exponent_range = np.arange(order + 1)
    sigma2 = sigma * sigma
    x = np.arange(-radius, radius + 1)
    phi_x = np.exp(-0.5 / sigma2 * x ** 2)
    phi_x = phi_x / phi_x.sum()
    if order == 0:
        return phi_x
    # f(x) = q(x) phi(x); f'(x) = (q'(x) + q(x) p'(x)) phi(x) with p'(x) = -x / sigma**2
    q = np.zeros(order + 1)
    q[0] = 1
    derivative = np.diag(exponent_range[1:], 1) + np.diag(np.ones(order) / -sigma2, -1)
    for _ in range(order):
        q = derivative.dot(q)
    q = (x[:, None] ** exponent_range).dot(q)
    return q * phi_x


@compiled
def gaussian_filter1d(input: ArrayLike, sigma: FloatOrSeq, axis: int = -1, order: IntOrSeq = 0,
                      output: Any = None, mode: Modes = "reflect", cval: Scalar = 0.0,
                      truncate: float = 4.0, *, radius: Optional[IntOrSeq] = None) -> Array:
    """1-D Gaussian filter (:func:`scipy.ndimage.gaussian_filter1d`).

    The kernel has ``2 * radius + 1`` taps, ``radius = int(truncate * sigma + 0.5)``
    unless given; ``order`` > 0 takes derivatives of the Gaussian.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.gaussian_filter1d(np.array([1.0, 2.0, 3.0, 4.0, 5.0]), 1)
    array([1.42704095, 2.06782203, 3.        , 3.93217797, 4.57295905])
    """
    sd = float(sigma)
    lw = int(truncate * sd + 0.5)
    if radius is not None:
        lw = radius
    if not isinstance(lw, numbers.Integral) or lw < 0:
        raise ValueError("Radius must be a nonnegative integer.")
    weights = gaussian_kernel1d(sigma, order, lw)[::-1]   # correlate, not convolve
    xp = args.array_module_of(input=input)
    return correlate1d(input, device_constant(xp, weights), axis, output, mode, cval, 0)


@compiled
def gaussian_filter(input: ArrayLike, sigma: FloatOrSeq, order: IntOrSeq = 0,
                    output: Any = None, mode: Modes = "reflect", cval: Scalar = 0.0,
                    truncate: float = 4.0, *, radius: Optional[IntOrSeq] = None,
                    axes: Optional[Axes] = None) -> Array:
    """Multidimensional Gaussian filter (:func:`scipy.ndimage.gaussian_filter`).

    One :func:`gaussian_filter1d` pass per axis (in the order of `axes`), each
    stored into `output` before the next, as SciPy does; `sigma`, `order`,
    `mode` and `radius` may be given per axis.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.gaussian_filter(np.arange(50, step=2).reshape((5, 5)), sigma=1)
    array([[ 4,  6,  8,  9, 11],
           [10, 12, 14, 15, 17],
           [20, 22, 24, 25, 27],
           [29, 31, 33, 34, 36],
           [35, 37, 39, 40, 42]])
    """
    xp, input, _ = as_arrays(input)
    output = get_output(output, input, xp)
    axes = check_axes(axes, input.ndim)
    n = len(axes)
    orders = normalize_sequence(order, n)
    sigmas = normalize_sequence(sigma, n, "sigma")
    modes = normalize_sequence(mode, n)
    radiuses = normalize_sequence(radius, n)
    passes = [(axes[i], sigmas[i], orders[i], modes[i], radiuses[i])
              for i in range(n) if sigmas[i] > 1e-15]
    if not passes:
        return copy_input(input, output, xp)
    between = between_passes(output, input.shape)
    for i, (axis, sd, od, md, rd) in enumerate(passes):
        last = i == len(passes) - 1
        input = gaussian_filter1d(input, sd, axis, od, output if last else between, md, cval,
                                  truncate, radius=rd)
    return input


# --------------------------------------------------------------------- uniform
@compiled
def uniform_filter1d(input: ArrayLike, size: IntOrSeq, axis: int = -1, output: Any = None,
                     mode: Modes = "reflect", cval: Scalar = 0.0,
                     origin: IntOrSeq = 0) -> Array:
    """1-D moving average (:func:`scipy.ndimage.uniform_filter1d`).

    The window sum is computed as a correlation with ones (exact for integer
    input) and divided by `size` once, as SciPy's running sum does.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.uniform_filter1d(np.array([2, 8, 0, 4, 1, 9, 9, 0]), size=3)
    array([4, 3, 4, 1, 4, 6, 6, 3])
    """
    xp, input, _ = as_arrays(input)
    axis = normalize_axis(axis, input.ndim)
    if size < 1:
        raise RuntimeError(f"incorrect filter size: size={size} (must be >= 1)")
    size = operator.index(size)
    output = get_output(output, input, xp, complex_output=input.dtype.kind == "c")
    origin = normalize_origin(origin)
    if size // 2 + origin < 0 or size // 2 + origin >= size:
        raise ValueError(f"invalid origin: origin={origin} for size={size}")
    engine = engine_mode(mode)
    check_cval(cval, input)
    shape = [1] * input.ndim
    shape[axis] = size
    origins = [0] * input.ndim
    origins[axis] = origin
    weights = device_constant(xp, np.ones(shape, dtype=np.int8))
    return run_filter(xp, input, weights, origins, engine, cval, output, divide=size)


@compiled
def uniform_filter(input: ArrayLike, size: IntOrSeq = 3, output: Any = None,
                   mode: Modes = "reflect", cval: Scalar = 0.0, origin: IntOrSeq = 0, *,
                   axes: Optional[Axes] = None) -> Array:
    """Multidimensional moving average (:func:`scipy.ndimage.uniform_filter`).

    One :func:`uniform_filter1d` pass per axis whose size is above 1, stored
    into `output` before the next, as SciPy does.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.uniform_filter(np.arange(16.0).reshape(4, 4), size=3, mode="nearest")[0]
    array([1.66666667, 2.33333333, 3.33333333, 4.        ])
    """
    xp, input, _ = as_arrays(input)
    output = get_output(output, input, xp, complex_output=input.dtype.kind == "c")
    axes = check_axes(axes, input.ndim)
    n = len(axes)
    sizes = normalize_sequence(size, n)
    origins = normalize_sequence(origin, n)
    modes = normalize_sequence(mode, n)
    passes = [(axes[i], sizes[i], origins[i], modes[i]) for i in range(n) if sizes[i] > 1]
    if not passes:
        return copy_input(input, output, xp)
    between = between_passes(output, input.shape)
    for i, (axis, sz, org, md) in enumerate(passes):
        last = i == len(passes) - 1
        input = uniform_filter1d(input, int(sz), axis, output if last else between, md, cval,
                                 org)
    return input

