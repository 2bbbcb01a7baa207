"""``scipy.ndimage``'s linear filters: each pass one problem, run by the dispatcher.

The functions mirror ``scipy/ndimage/_filters.py`` argument by argument (the
order of the checks, the exception types, the ``output`` rules), so that code
written for SciPy runs unchanged.  What differs is how a pass is computed: one
:class:`~cupyconv.core.ConvProblem` (:func:`cupyconv.core.ndimage_map.filter_call`)
run by the dispatcher on the backend of the arrays, in the compute dtype of
:func:`compute_dtype`, and stored into ``output`` with SciPy's C cast
(truncation toward zero for integer outputs).
"""
from __future__ import annotations

import numbers
import operator
import warnings

import numpy as np

from ..core import args
from ..core.ndimage_map import engine_mode, filter_call, invalid_origin
from ..dispatch import backend_for, choose, run
from ..dispatch.dispatcher import ranked_for_data

__all__ = ["correlate", "convolve", "correlate1d", "convolve1d", "gaussian_filter",
           "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "compute_dtype",
           "gaussian_kernel1d"]

#: Input dtypes a filter computes (SciPy's, plus float16, which runs in float32).
_INPUT_KINDS = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128))
_SINGLE = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.complex64))
#: Largest integer-valued weight computed exactly in int64.
_EXACT_WEIGHT = 2**31


# ------------------------------------------------------------------ arguments
def _arrays(input, weights=None):
    """``(xp, input, weights)`` as arrays of one module; unsupported dtypes raise."""
    xp = args.array_module_of(input=input, weights=weights)
    input = args.as_array(xp, input)
    if input.dtype not in _INPUT_KINDS:
        raise RuntimeError(
            f"array type not supported: input has dtype {input.dtype}; use bool, integer, "
            "float16/32/64 or complex64/128")
    if weights is not None:
        weights = args.as_array(xp, weights)
        if weights.dtype.kind not in "biufc":
            raise RuntimeError(f"array type not supported: weights have dtype {weights.dtype}")
    return xp, input, weights


class _Fresh:
    """An output SciPy would allocate (``output=None`` or a dtype): the result array is
    returned as computed instead of being copied into zeros first.  Between the passes of
    a multi-pass filter it stands for SciPy's output array (same dtype, same checks)."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)


def _get_output(output, input, xp, complex_output=False):
    """SciPy's ``_ni_support._get_output``: the user's array, or a :class:`_Fresh` one."""
    shape = input.shape
    if output is None:
        dtype = np.promote_types(input.dtype, np.complex64) if complex_output else input.dtype
        return _Fresh(dtype, shape)
    if isinstance(output, _Fresh):
        if complex_output and output.dtype.kind != "c":
            raise RuntimeError("output must have complex dtype")
        return output
    if isinstance(output, (type, np.dtype)):
        dtype = np.dtype(output)
        if complex_output and dtype.kind != "c":
            warnings.warn("promoting specified output dtype to complex", stacklevel=4)
            dtype = np.promote_types(dtype, np.complex64)
        return _Fresh(dtype, shape)
    if isinstance(output, str):
        dtype = np.dtype(output)
        if complex_output and dtype.kind != "c":
            raise RuntimeError("output must have complex dtype")
        if not issubclass(dtype.type, np.number):
            raise RuntimeError("output must have numeric dtype")
        return _Fresh(dtype, shape)
    args.array_module_of(input=input, output=output)
    output = args.as_array(xp, output)
    if tuple(output.shape) != tuple(shape):
        raise RuntimeError(f"output shape not correct: output has shape "
                           f"{tuple(output.shape)}, the input {tuple(shape)}")
    if complex_output and output.dtype.kind != "c":
        raise RuntimeError("output must have complex dtype")
    return output


def _copy_input(input, output, xp):
    """SciPy's ``output[...] = input[...]`` (no axis filtered)."""
    if isinstance(output, _Fresh):
        return input.astype(output.dtype, copy=True)
    output[...] = input[...]
    return output


def _normalize_sequence(value, rank):
    """One entry per axis (SciPy's ``_normalize_sequence``)."""
    if not isinstance(value, str) and np.iterable(value):
        values = list(value)
        if len(values) != rank:
            raise RuntimeError("sequence argument must have length equal to input rank")
        return values
    return [value] * rank


def _check_axes(axes, ndim):
    """SciPy's ``_check_axes``: axes as given (order kept), non-negative, unique."""
    if axes is None:
        return tuple(range(ndim))
    if np.isscalar(axes):
        axes = (operator.index(axes),)
    elif np.iterable(axes):
        axes = tuple(operator.index(ax) for ax in axes)
        for ax in axes:
            if ax < -ndim or ax > ndim - 1:
                raise ValueError(f"specified axis: {ax} is out of range")
        axes = tuple(ax % ndim if ax < 0 else ax for ax in axes)
    else:
        raise ValueError("axes must be an integer, iterable of integers, or None")
    if len(set(axes)) != len(axes):
        raise ValueError("axes must be unique")
    return axes


_AxisError = getattr(np, "exceptions", np).AxisError


def _axis(axis, ndim):
    """``axis`` as a non-negative index (NumPy's ``AxisError`` out of range, as SciPy)."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise _AxisError(axis, ndim)
    return axis % ndim


def _origin(value):
    """An origin as an int; a fractional one is invalid (``ValueError``, as SciPy)."""
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(f"Invalid origin; origin must be an integer, got origin={value}")
        return int(value)
    return operator.index(value)


def _check_origin(origin, size, what):
    if invalid_origin(origin, size):
        raise ValueError(
            f"Invalid origin; origin must satisfy -({what} // 2) <= origin <= ({what}-1) // 2; "
            f"got origin={origin} for a kernel of size {size}")


def _check_complex_cval(cval, input):
    """A complex computation of a real input takes no complex ``cval`` (SciPy: ValueError)."""
    if input.dtype.kind != "c" and np.iscomplexobj(cval):
        raise ValueError("Cannot provide a complex-valued cval when the input is real.")


def _check_cval(cval, input):
    if isinstance(cval, (str, bytes)) or np.ndim(cval) != 0:
        raise TypeError(f"cval must be a real number, got {cval!r}")
    if input.dtype.kind != "c" and np.iscomplexobj(cval):
        raise TypeError(f"cval must be a real number for a real input, got {cval!r}")


# ------------------------------------------------------------------ one pass
def compute_dtype(in_dtype, weights, mode, cval, out_dtype, xp=np):
    """The dtype a pass computes in.

    Integer or bool input with integer-valued weights (and an integer ``cval`` where it
    is used) is exact: float32 for 8/16-bit data into an integer output while every sum
    stays below 2**24, int64 otherwise.  float32/complex64 when the input and the output
    are both single (or half) precision; float64/complex128 otherwise, as SciPy (which
    always accumulates in double).
    """
    in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
    cplx = in_dtype.kind == "c" or weights.dtype.kind == "c"
    if (not cplx and in_dtype.kind in "biu" and _integral(weights, xp)
            and (mode != "constant" or _integral_scalar(cval))):
        if out_dtype.kind in "biu" and in_dtype.itemsize <= 2:
            # 8/16-bit data: float32 holds every partial sum exactly while
            # max|x| * sum|w| < 2**24, and then a uniform filter's one division is
            # within 2**-24 * max|x| < 1 / size of the true quotient: the same
            # truncated integers as int64, at half the memory traffic
            info = np.iinfo(in_dtype) if in_dtype.kind != "b" else np.iinfo(np.uint8)
            m = max(-int(info.min), int(info.max), abs(int(np.real(cval))))
            if m * float(xp.abs(weights.astype(np.float64)).sum()) < 2**24:
                return np.dtype(np.float32)
        return np.dtype(np.int64)
    single = in_dtype in _SINGLE and out_dtype in _SINGLE
    if cplx:
        return np.dtype(np.complex64 if single else np.complex128)
    return np.dtype(np.float32 if single else np.float64)


def _integral(w, xp):
    if w.dtype.kind in "bu" or (w.dtype.kind == "i"):
        return w.size == 0 or int(xp.abs(w.astype(np.float64)).max()) < _EXACT_WEIGHT
    if w.dtype.kind != "f" or w.size == 0:
        return False
    return bool(xp.all(xp.trunc(w) == w)) and float(xp.abs(w).max()) < _EXACT_WEIGHT


def _integral_scalar(c):
    c = complex(c)
    return c.imag == 0 and np.isfinite(c.real) and c.real.is_integer() and abs(c.real) < 2**53


def _cval_for(cval, dtype):
    if dtype.kind == "c":
        return complex(cval)
    if dtype.kind in "iu":
        return int(np.real(cval))
    return float(np.real(cval))


def _tap_sum(problem, operands, backend):
    """The algorithm for a float result truncated to integers: ``direct`` (SciPy's
    summation order on the CPU) when it can run, else the best other tap sum; never
    the FFT, whose roundoff would turn an exact 3 into 2.9999... and then 2."""
    prepared, ops = backend.prepare(problem, operands)
    ranked = [n for n in ranked_for_data(choose(prepared, backend), prepared, ops,
                                         backend=backend) if n != "fft"]
    return "direct" if "direct" in ranked or not ranked else ranked[0]


def _store(y, output, xp):
    """``y`` in ``output``'s dtype with SciPy's C cast (truncation toward zero), written
    into ``output`` when it is the caller's array."""
    if output.dtype == np.bool_:
        value = (xp.trunc(y) != 0) if y.dtype.kind == "f" else (y != 0)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            value = y.astype(output.dtype, copy=False)
    if isinstance(output, _Fresh):
        return xp.ascontiguousarray(value)
    output[...] = value
    return output


def _filter(xp, input, weights, origins, mode, cval, output, divide=None):
    """One pass: correlate ``input`` with the same-rank ``weights`` (already flipped or
    conjugated as the caller needs) and store it into ``output``; ``divide`` scales the
    sum afterwards (the uniform filter's exact sum, then one division, as SciPy)."""
    if output.dtype.kind == "c" and input.dtype.kind != "c" and weights.dtype.kind != "c":
        raise RuntimeError(f"array type not supported: a real filter writes no complex output "
                           f"(output has dtype {output.dtype}), as in SciPy")
    if output.dtype not in _INPUT_KINDS:
        raise RuntimeError(f"array type not supported: output has dtype {output.dtype}")
    if input.size == 0:
        return xp.zeros(output.shape, output.dtype) if isinstance(output, _Fresh) else output
    dtype = compute_dtype(input.dtype, weights, mode, cval, output.dtype, xp)
    call = filter_call(tuple(input.shape), tuple(weights.shape), tuple(origins), mode,
                       _cval_for(cval, dtype) if mode == "constant" else 0, dtype)
    operands = call.operands(input, weights, xp)
    backend = backend_for(xp)
    method = "auto"
    if output.dtype.kind in "biu" and dtype.kind == "f":
        method = _tap_sum(call.problem, operands, backend)
    y, _ = run(call.problem, operands, backend, method=method)
    y = call.finish(y, xp)
    if divide is not None:
        y = y / divide
    return _store(y, output, xp)


# ------------------------------------------------------------ N-D correlation
def _correlate_or_convolve(input, weights, output, mode, cval, origin, convolution, axes):
    xp, input, weights = _arrays(input, weights)
    cplx = input.dtype.kind == "c" or weights.dtype.kind == "c"
    if weights.dtype.kind == "c" and not convolution:
        weights = xp.conj(weights)         # as numpy.correlate: conjugate the weights
    if cplx:                               # SciPy's order of checks, path by path
        output = _get_output(output, input, xp, complex_output=True)
        _check_complex_cval(cval, input)
    axes = _check_axes(axes, input.ndim)
    if len(axes) < input.ndim:
        if weights.ndim != len(axes):
            raise RuntimeError(f"weights.ndim ({weights.ndim}) must match len(axes) "
                               f"({len(axes)})")
        weights = xp.expand_dims(weights, tuple(a for a in range(input.ndim) if a not in axes))
    origins = _normalize_sequence(origin, len(axes))
    if len(axes) < input.ndim:
        full = [0] * input.ndim
        for o, ax in zip(origins, axes):
            full[ax] = o
        origins = full
    origins = [_origin(o) for o in origins]
    wshape = [n for n in weights.shape if n > 0]
    if len(wshape) != input.ndim:
        raise RuntimeError(f"weights.ndim ({len(wshape)}) must match len(axes) ({len(axes)})")
    if convolution:
        weights = weights[(slice(None, None, -1),) * weights.ndim]
        origins = [-o - (0 if n & 1 else 1) for o, n in zip(origins, weights.shape)]
    for o, n in zip(origins, wshape):
        _check_origin(o, n, "weights.shape[k]")
    if not cplx:
        output = _get_output(output, input, xp)
    engine = engine_mode(mode)
    _check_cval(cval, input)
    return _filter(xp, input, weights, origins, engine, cval, output)


def correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
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
    Integer outputs are truncated toward zero, as SciPy's C cast.  Integer inputs with
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


def convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
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
def correlate1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    """1-D correlation along one axis (:func:`scipy.ndimage.correlate1d`).

    Parameters as in :func:`correlate`, with 1-D `weights` and one `axis`.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.correlate1d(np.array([2, 8, 0, 4, 1, 9, 9, 0]), [1, 3])
    array([ 8, 26,  8, 12,  7, 28, 36,  9])
    """
    xp, input, weights = _arrays(input, weights)
    cplx = input.dtype.kind == "c" or weights.dtype.kind == "c"
    if weights.dtype.kind == "c":
        weights = xp.conj(weights).astype(np.complex128, copy=False)
    output = _get_output(output, input, xp, complex_output=cplx)
    if cplx:
        _check_complex_cval(cval, input)
    if weights.ndim != 1 or weights.shape[0] < 1:
        raise RuntimeError("no filter weights given")
    axis = _axis(axis, input.ndim)
    origin = _origin(origin)
    _check_origin(origin, weights.shape[0], "len(weights)")
    engine = engine_mode(mode)
    _check_cval(cval, input)
    shape = [1] * input.ndim
    shape[axis] = weights.shape[0]
    origins = [0] * input.ndim
    origins[axis] = origin
    return _filter(xp, input, weights.reshape(shape), origins, engine, cval, output)


def convolve1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
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
    origin = -_origin(origin)
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


def gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect", cval=0.0,
                      truncate=4.0, *, radius=None):
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
    return correlate1d(input, xp.asarray(weights), axis, output, mode, cval, 0)


def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0,
                    *, radius=None, axes=None):
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
    xp, input, _ = _arrays(input)
    output = _get_output(output, input, xp)
    axes = _check_axes(axes, input.ndim)
    n = len(axes)
    orders = _normalize_sequence(order, n)
    sigmas = _normalize_sequence(sigma, n)
    modes = _normalize_sequence(mode, n)
    radiuses = _normalize_sequence(radius, n)
    passes = [(axes[i], sigmas[i], orders[i], modes[i], radiuses[i])
              for i in range(n) if sigmas[i] > 1e-15]
    if not passes:
        return _copy_input(input, output, xp)
    between = _Fresh(output.dtype, input.shape)    # SciPy's output array between passes
    for i, (axis, sd, od, md, rd) in enumerate(passes):
        last = i == len(passes) - 1
        input = gaussian_filter1d(input, sd, axis, od, output if last else between, md, cval,
                                  truncate, radius=rd)
    return input


# --------------------------------------------------------------------- uniform
def uniform_filter1d(input, size, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
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
    xp, input, _ = _arrays(input)
    axis = _axis(axis, input.ndim)
    if size < 1:
        raise RuntimeError(f"incorrect filter size: size={size} (must be >= 1)")
    size = operator.index(size)
    output = _get_output(output, input, xp, complex_output=input.dtype.kind == "c")
    origin = _origin(origin)
    if size // 2 + origin < 0 or size // 2 + origin >= size:
        raise ValueError(f"invalid origin: origin={origin} for size={size}")
    engine = engine_mode(mode)
    _check_cval(cval, input)
    shape = [1] * input.ndim
    shape[axis] = size
    origins = [0] * input.ndim
    origins[axis] = origin
    weights = xp.ones(shape, dtype=np.int8)
    return _filter(xp, input, weights, origins, engine, cval, output, divide=size)


def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *,
                   axes=None):
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
    xp, input, _ = _arrays(input)
    output = _get_output(output, input, xp, complex_output=input.dtype.kind == "c")
    axes = _check_axes(axes, input.ndim)
    n = len(axes)
    sizes = _normalize_sequence(size, n)
    origins = _normalize_sequence(origin, n)
    modes = _normalize_sequence(mode, n)
    passes = [(axes[i], sizes[i], origins[i], modes[i]) for i in range(n) if sizes[i] > 1]
    if not passes:
        return _copy_input(input, output, xp)
    between = _Fresh(output.dtype, input.shape)    # SciPy's output array between passes
    for i, (axis, sz, org, md) in enumerate(passes):
        last = i == len(passes) - 1
        input = uniform_filter1d(input, int(sz), axis, output if last else between, md, cval,
                                 org)
    return input

