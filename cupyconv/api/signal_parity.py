"""SciPy's other convolution names: ``fftconvolve``, ``oaconvolve``, ``convolve2d`` and
``correlate2d``, with SciPy's signatures, result dtypes and boundary handling, on the
same problem mapping and dispatcher as :func:`cupyconv.convolve`."""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

from .._dtypes import is_half_float
from .._vocabulary import SIGNAL_BOUNDARIES, describe_choices
from ..core import args
from ..core.signal_map import check_mode, signal_call
from ..dispatch import backend_for, precheck
from .compiled import compiled
from .signal import centered, compute, signal_problem
from .._typing import Array, ArrayLike, Axes, Scalar

__all__ = ["fftconvolve", "oaconvolve", "convolve2d", "correlate2d"]

def _fft_dtype(dtype):
    """The dtype ``scipy.fft`` transforms an operand in: integers and bool in float64,
    float16 and bfloat16 in float32, the others as they are."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return np.dtype(np.float64)
    return np.dtype(np.float32) if is_half_float(dtype) else dtype


def _freq_conv(in1, in2, mode, axes):
    xp = args.array_module_of(in1=in1, in2=in2)
    in1, in2 = args.as_array(xp, in1), args.as_array(xp, in2)
    if in1.ndim == in2.ndim == 0:
        return in1 * in2
    if in1.ndim != in2.ndim:
        raise ValueError(f"in1 and in2 should have the same dimensionality; got in1.shape="
                         f"{in1.shape} and in2.shape={in2.shape}")
    if in1.size == 0 or in2.size == 0:
        return xp.asarray([])
    check_mode(mode)
    axes = args.normalize_axes(axes, in1.ndim)
    s1, s2 = in1.shape, in2.shape
    # axes where an operand has length 1 need no transform: they broadcast (SciPy)
    fft_axes = tuple(a for a in axes if s1[a] != 1 and s2[a] != 1)
    if not fft_axes:
        for a in range(in1.ndim):
            if s1[a] != s2[a] and 1 not in (s1[a], s2[a]):
                raise ValueError(f"incompatible shapes for in1 and in2: {s1} and {s2}")
        ret = in1 * in2                        # the exact product, in its own dtype
        return (centered(ret, s1) if mode == "same" else ret).copy()
    dtype = np.result_type(_fft_dtype(in1.dtype), _fft_dtype(in2.dtype))
    problem = signal_call(s1, dtype, s2, dtype, mode, fft_axes, False).problem
    if problem is not None:                     # before the operands are cast
        precheck(problem, backend_for(xp), "fft")
    in1, in2 = in1.astype(dtype, copy=False), in2.astype(dtype, copy=False)
    # SciPy's fftconvolve spreads NaN without a word: no warning, so no data scan
    res = compute(*signal_problem(in1, in2, mode, fft_axes, False), "fft", warn=False)
    # SciPy's "same" is in1's shape on every axis, broadcast ones included
    return centered(res, s1).copy() if mode == "same" and res.shape != s1 else res


@compiled
def fftconvolve(in1: ArrayLike, in2: ArrayLike, mode: str = "full",
                axes: Optional[Axes] = None) -> Array:
    """Convolve two N-dimensional arrays using FFT (:func:`scipy.signal.fftconvolve`).

    Parameters
    ----------
    in1, in2 : array_like
        Same number of dimensions; on the axes not convolved each extent is
        equal or 1 (broadcast).
    mode : {'full', 'valid', 'same'}, optional
    axes : int or sequence of int, optional
        Axes to convolve over (default all).  Axes where an operand has
        length 1 are multiplied, not transformed, as in SciPy.

    Returns
    -------
    out : ndarray
        The dtype of SciPy's transforms: float64 for integer and bool inputs,
        float32 for float16, the inputs' otherwise (complex if one is); with
        no axis left to transform, the exact product in the inputs' dtype.
        Empty inputs give an empty 1-D array, as SciPy.

    Notes
    -----
    Runs the engine's ``fft`` algorithm (pruned transforms, overlap-add for a
    long 1-D signal), so NaN/Inf spread as in SciPy (without a warning).

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> cupyconv.fftconvolve(np.array([1, 2, 3]), np.array([1, 1, 0.5])).round(12)
    array([1. , 3. , 5.5, 4. , 1.5])
    """
    return _freq_conv(in1, in2, mode, axes)


@compiled
def oaconvolve(in1: ArrayLike, in2: ArrayLike, mode: str = "full",
               axes: Optional[Axes] = None) -> Array:
    """Convolve two N-dimensional arrays using overlap-add (:func:`scipy.signal.oaconvolve`).

    The same result as :func:`fftconvolve` (parameters, dtypes and edge
    cases as there): the engine's FFT algorithm itself splits a long 1-D
    signal into overlap-add blocks where that is cheaper, so no separate
    blocking is done here.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> cupyconv.oaconvolve(np.ones(6), np.ones(3), mode="valid").round(12)
    array([3., 3., 3., 3.])
    """
    return _freq_conv(in1, in2, mode, axes)


# ------------------------------------------------------------------- 2-D calls
def _boundary(boundary):
    if isinstance(boundary, str) and boundary in SIGNAL_BOUNDARIES:
        return SIGNAL_BOUNDARIES[boundary]
    raise ValueError(f"Acceptable boundary flags are "
                     f"{describe_choices(tuple(SIGNAL_BOUNDARIES))}; got boundary={boundary!r}")


def _fillvalue(fillvalue, dtype):
    """``fillvalue`` converted to the result dtype as SciPy does (``numpy.array(fillvalue,
    dtype)``: a fraction truncates for integers; a value the dtype cannot hold, a NaN
    for integers or a complex value for real data is a ``ValueError``, after the
    ``ComplexWarning`` of SciPy's second try through complex), as a compute-dtype scalar."""
    dtype = np.dtype(dtype)
    try:
        value = np.array(fillvalue, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        try:
            value = np.array(fillvalue, dtype=np.complex128)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"`fillvalue` must be a number, got {fillvalue!r}") from exc
        if dtype.kind != "c":
            warnings.warn("Casting complex values to real discards the imaginary part",
                          np.exceptions.ComplexWarning, stacklevel=4)
        raise ValueError("could not cast `fillvalue` directly to the output type "
                         f"{dtype} (it was first converted to complex).") from None
    if value.size == 0:
        raise ValueError("`fillvalue` cannot be an empty array.")
    if value.size != 1:
        raise ValueError("`fillvalue` must be scalar or an array with one element.")
    return value.reshape(()).astype(args.compute_dtype(dtype)).item()


def _conv2d(in1, in2, mode, boundary, fillvalue, correlate, name):
    xp = args.array_module_of(in1=in1, in2=in2)
    in1, in2 = args.as_array(xp, in1), args.as_array(xp, in2)
    if not in1.ndim == in2.ndim == 2:
        raise ValueError(f"{name} inputs must both be 2-D arrays")
    if mode == "valid" and not (all(a >= b for a, b in zip(in1.shape, in2.shape))
                                or all(b >= a for a, b in zip(in1.shape, in2.shape))):
        raise ValueError("For 'valid' mode, one must be at least as large as the other in "
                         f"every dimension; got in1.shape={in1.shape}, in2.shape={in2.shape}")
    check_mode(mode)
    padding_mode = _boundary(boundary)
    args.check_dtype(in1, "in1")
    args.check_dtype(in2, "in2")
    cval = 0                               # SciPy reads fillvalue for 'fill' only
    if padding_mode == "constant":
        cval = _fillvalue(fillvalue, args.result_dtype(in1.dtype, in2.dtype))
    call, xp, in1, in2 = signal_problem(in1, in2, mode, None, correlate, padding_mode, cval,
                                        same_after=correlate)
    res = compute(call, xp, in1, in2, "auto")
    if correlate and call.swap and res.dtype.kind == "c":
        # SciPy's swapped correlate2d is correlate(in2, conj(in1)) reversed: the
        # conjugate of correlate's swapped result
        res = xp.conj(res)
    return res


@compiled
def convolve2d(in1: ArrayLike, in2: ArrayLike, mode: str = "full", boundary: str = "fill",
               fillvalue: Scalar = 0) -> Array:
    """Convolve two 2-D arrays with a boundary (:func:`scipy.signal.convolve2d`).

    Parameters
    ----------
    in1, in2 : array_like
        2-D arrays (``valid`` swaps them when `in2` is the larger, as SciPy).
    mode : {'full', 'valid', 'same'}, optional
    boundary : {'fill', 'wrap', 'symm'}, optional
        How `in1` extends beyond its edges: ``fill`` (alias ``pad``) with
        `fillvalue`, ``wrap`` (``circular``) periodically, ``symm``
        (``symmetric``) mirrored with the edge repeated (``numpy.pad``'s
        ``symmetric``; docs/semantics.md has every library's names).
    fillvalue : scalar, optional
        Fill value of ``boundary='fill'``, cast to the result dtype.

    Returns
    -------
    out : ndarray
        Of dtype ``result_type(in1, in2)``, integers exact.

    Notes
    -----
    ``auto`` chooses the algorithm, the boundary fused into it; bool and
    float16 inputs, which SciPy's ``convolve2d`` rejects, are accepted.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> cupyconv.convolve2d(np.eye(3), np.ones((2, 2)), mode="same", boundary="wrap")
    array([[2., 1., 1.],
           [1., 2., 1.],
           [1., 1., 2.]])
    """
    return _conv2d(in1, in2, mode, boundary, fillvalue, False, "convolve2d")


@compiled
def correlate2d(in1: ArrayLike, in2: ArrayLike, mode: str = "full", boundary: str = "fill",
                fillvalue: Scalar = 0) -> Array:
    """Cross-correlate two 2-D arrays with a boundary (:func:`scipy.signal.correlate2d`).

    Parameters and dtypes as in :func:`convolve2d`; `in2` is conjugated and
    not flipped.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> cupyconv.correlate2d(np.arange(4.0).reshape(2, 2), np.array([[1.0, 2.0]]), mode="same")
    array([[2., 1.],
           [8., 3.]])
    """
    return _conv2d(in1, in2, mode, boundary, fillvalue, True, "correlate2d")
