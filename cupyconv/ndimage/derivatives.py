"""``scipy.ndimage``'s derivative filters, built on the 1-D passes of :mod:`.filters`.

``sobel``, ``prewitt``, ``laplace``, ``generic_laplace``, ``gaussian_laplace``,
``generic_gradient_magnitude`` and ``gaussian_gradient_magnitude`` follow
``scipy/ndimage/_filters.py`` step by step: the same passes in the same order, each
stored into the output's dtype before the next reads it (integer outputs are truncated
between passes, as in SciPy), the per-axis terms accumulated into the output with
``+=`` in the output's dtype, and the gradient magnitude's square root taken in place
with NumPy's (or CuPy's) ``casting='unsafe'``.  Every pass is one problem of the
dispatcher (:func:`~cupyconv.ndimage.filters.correlate1d` or
:func:`~cupyconv.ndimage.filters.gaussian_filter`), so NumPy arrays run on the CPU and
CuPy arrays through the CUDA kernels.  The arrays allocated are SciPy's: the output,
and one term per further axis of a Laplace or gradient-magnitude sum; the Gaussian sums
also keep the input smoothed along the axes before the current term's, which the later
terms share (:func:`_shared_gaussian_terms`: the same passes, fewer of them).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .._kernels import program
from ..api.compiled import compiled
from ..core import args
from ..dispatch import device_constant
from .common import (AxisError, Fresh, between_passes, check_axes, copy_input, get_output,
                     normalize_axis, normalize_sequence)
from .filters import correlate1d, gaussian_filter, gaussian_filter1d
from .._typing import Array, ArrayLike, Axes, Extra, FloatOrSeq, Modes, Scalar

__all__ = ["sobel", "prewitt", "laplace", "generic_laplace", "gaussian_laplace",
           "generic_gradient_magnitude", "gaussian_gradient_magnitude"]

#: The 1-D taps, as SciPy writes them (correlations, float64 as SciPy casts them).
DIFFERENCE = np.array([-1.0, 0.0, 1.0])
SOBEL_SMOOTH = np.array([1.0, 2.0, 1.0])
PREWITT_SMOOTH = np.array([1.0, 1.0, 1.0])
SECOND_DIFFERENCE = np.array([1.0, -2.0, 1.0])


def _input(input):
    """``(xp, input)``; the dtype is checked by the first pass, as in SciPy."""
    xp = args.array_module_of(input=input)
    return xp, args.as_array(xp, input)


def _materialized(output, xp):
    """The output array SciPy allocates (``np.zeros``) where it is not the caller's."""
    return xp.zeros(output.shape, output.dtype) if isinstance(output, Fresh) else output


# ----------------------------------------------------------- Sobel and Prewitt
def _difference_then_smooth(input, axis, output, mode, cval, smooth):
    """SciPy's ``sobel``/``prewitt``: the central difference along `axis`, then the
    smoothing taps along every other axis, each pass stored into `output`'s dtype.

    SciPy runs the passes in place on `output`; here each pass between is a fresh array
    of that dtype (the same values, no copy back), and only the last writes into the
    caller's array.  A bool output holds SciPy's C cast, an unsigned char, which the next
    pass reads back as 0-255: uint8 between the passes.
    """
    xp, input = _input(input)
    axis = normalize_axis(axis, input.ndim)
    output = get_output(output, input, xp)
    modes = normalize_sequence(mode, input.ndim)
    passes = [(axis, DIFFERENCE)] + [(ii, smooth) for ii in range(input.ndim) if ii != axis]
    between = between_passes(output, input.shape)
    for i, (ax, taps) in enumerate(passes):
        target = output if i == len(passes) - 1 else between
        input = correlate1d(input, device_constant(xp, taps), ax, target, modes[ax], cval, 0)
    return input


@compiled
def sobel(input: ArrayLike, axis: int = -1, output: Any = None, mode: Modes = "reflect",
          cval: Scalar = 0.0) -> Array:
    """Sobel filter along one axis (:func:`scipy.ndimage.sobel`).

    Parameters
    ----------
    input : array_like
        NumPy or CuPy array (bool, integer, float16/32/64, complex64/128).
    axis : int, optional
        The axis of the derivative (the central difference ``[-1, 0, 1]``); every
        other axis is smoothed with ``[1, 2, 1]``.
    output : array or dtype, optional
        Array to write into (same shape as `input`) or the result dtype; default
        `input`'s dtype.  Each pass is stored into it with SciPy's C cast
        (integer outputs truncated, out of range as x86-64 converts; docs/semantics.md).
    mode : str or sequence of str, optional
        A ``scipy.ndimage`` boundary mode, or one per axis of `input`.
    cval : scalar, optional
        Fill value of ``constant``/``grid-constant``.

    Returns
    -------
    sobel : ndarray
        Same shape as `input`, in `output`'s dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.sobel(np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]]), axis=1)
    array([[0, 4, 4, 0],
           [1, 4, 3, 0],
           [3, 4, 1, 0]])
    """
    return _difference_then_smooth(input, axis, output, mode, cval, SOBEL_SMOOTH)


@compiled
def prewitt(input: ArrayLike, axis: int = -1, output: Any = None, mode: Modes = "reflect",
            cval: Scalar = 0.0) -> Array:
    """Prewitt filter along one axis (:func:`scipy.ndimage.prewitt`).

    As :func:`sobel`, with the smoothing taps ``[1, 1, 1]``: on an integer input, here
    along the first axis, ``(x[1] - x[0])`` summed over each column's neighbours.

    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.prewitt(np.array([[1, 2, 4], [8, 16, 32]]), axis=0)
    array([[28, 49, 70],
           [28, 49, 70]])
    """
    return _difference_then_smooth(input, axis, output, mode, cval, PREWITT_SMOOTH)


# ------------------------------------------------- sums of per-axis derivatives
def _sum_over_axes(input, derivative, output, mode, cval, extra_arguments, extra_keywords,
                   axes, square, returns_result=False):
    """SciPy's ``generic_laplace`` (``square=False``) and ``generic_gradient_magnitude``
    (``square=True``): the first axis's derivative into `output`, each further axis's
    derivative (a new array of `output`'s dtype) squared or not and added into it.

    `returns_result`: `derivative` is one of this module's, which takes a
    :class:`Fresh` output and returns its result (the output array is then the first
    pass's result instead of zeros written over); a user's callable gets an array, as
    in SciPy, and its return value is used only for the further axes.
    """
    extra_keywords = {} if extra_keywords is None else extra_keywords
    xp, input = _input(input)
    output = get_output(output, input, xp)
    axes = check_axes(axes, input.ndim)
    if not axes:
        return copy_input(input, output, xp)
    if not isinstance(output, Fresh):    # the passes write into it outside a program
        program.refuse("the output is the caller's array")
    if not returns_result:
        output = _materialized(output, xp)
    modes = normalize_sequence(mode, len(axes))

    def terms():
        first = derivative(input, axes[0], output, modes[0], cval, *extra_arguments,
                           **extra_keywords)
        yield first if returns_result else output
        for ii in range(1, len(axes)):
            yield derivative(input, axes[ii], output.dtype, modes[ii], cval,
                             *extra_arguments, **extra_keywords)
    return _accumulate(xp, terms(), square)


def _accumulate(xp, terms, square):
    """SciPy's sum of the per-axis ``terms`` (an iterator, each term computed when the
    sum reaches it): the first is the output, each further one (squared, with
    ``square``) added into it in place, then the square root with ``square``."""
    # the squares, sums and root run in place as host steps: a compiled call replays them
    square_ = functools.partial(_square, xp)
    output = next(terms)
    if square:
        output = program.host_step("square", square_, output)
    for term in terms:
        if square:
            term = program.host_step("square", square_, term)
        output = program.host_step("add", _add_into, output, term)
    if square:
        output = program.host_step("sqrt", functools.partial(_sqrt, xp), output)
    return output


def _square(xp, a):
    return xp.multiply(a, a, a)


def _add_into(a, b):
    a += b
    return a


def _sqrt(xp, a):
    return xp.sqrt(a, out=a, casting="unsafe")   # as SciPy, for integer outputs too


@compiled
def generic_laplace(input: ArrayLike, derivative2: Callable[..., Any], output: Any = None,
                    mode: Modes = "reflect", cval: Scalar = 0.0,
                    extra_arguments: Sequence[Any] = (),
                    extra_keywords: Optional[Extra] = None, *,
                    axes: Optional[Axes] = None) -> Array:
    """N-D Laplace filter from a given second derivative (:func:`scipy.ndimage.generic_laplace`).

    Parameters
    ----------
    input : array_like
        NumPy or CuPy array.
    derivative2 : callable
        ``derivative2(input, axis, output, mode, cval, *extra_arguments,
        **extra_keywords)``: the second derivative along `axis`, written into `output`
        when it is an array and returned (a dtype: a new array).
    output : array or dtype, optional
        Array to write into or the result dtype; default `input`'s dtype.
    mode : str or sequence of str, optional
        A boundary mode, or one per entry of `axes`.
    cval : scalar, optional
        Fill value of ``constant``/``grid-constant``.
    extra_arguments : sequence, optional
        Extra positional arguments of `derivative2`.
    extra_keywords : dict, optional
        Extra keyword arguments of `derivative2`.
    axes : int or sequence of int, optional
        Axes summed over (default all); none: `input` copied into `output`.

    Returns
    -------
    generic_laplace : ndarray
        The sum of the derivatives, accumulated in `output`'s dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> def d2(input, axis, output, mode, cval):
    ...     return ndimage.correlate1d(input, [1, -2, 1], axis, output, mode, cval, 0)
    >>> ndimage.generic_laplace(np.array([[0, 0, 0], [0, 4, 0], [0, 0, 0]]), d2)
    array([[  0,   4,   0],
           [  4, -16,   4],
           [  0,   4,   0]])
    """
    return _sum_over_axes(input, derivative2, output, mode, cval, extra_arguments,
                          extra_keywords, axes, square=False)


def _second_difference(input, axis, output, mode, cval):
    xp = args.array_module_of(input=input)
    return correlate1d(input, device_constant(xp, SECOND_DIFFERENCE), axis, output, mode,
                       cval, 0)


@compiled
def laplace(input: ArrayLike, output: Any = None, mode: Modes = "reflect", cval: Scalar = 0.0,
            *, axes: Optional[Axes] = None) -> Array:
    """N-D Laplace filter from second differences (:func:`scipy.ndimage.laplace`).

    The sum over `axes` of ``correlate1d(input, [1, -2, 1], axis)``.  Parameters as in
    :func:`generic_laplace`.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.laplace(np.array([[0.0, 0, 0], [0, 1, 0], [0, 0, 0]]), mode="constant")
    array([[ 0.,  1.,  0.],
           [ 1., -4.,  1.],
           [ 0.,  1.,  0.]])
    """
    return _sum_over_axes(input, _second_difference, output, mode, cval, (), None, axes,
                          square=False, returns_result=True)


def _shared_gaussian_terms(xp, input, sigma, order, output, mode, cval, axes, kwargs):
    """The per-axis terms of :func:`gaussian_laplace` (``order`` 2) or
    :func:`gaussian_gradient_magnitude` (``order`` 1) with the smoothing passes they
    have in common computed once; ``None`` where that does not apply (then each term is
    its own :func:`gaussian_filter`).

    Term ``a`` is SciPy's ``gaussian_filter`` with ``order`` along axis ``a``: passes
    along axes ``0, 1, ...`` in turn, each stored into the output's dtype.  Its first
    ``a`` passes smooth, so the input smoothed along axes ``0..a-1`` is the same array
    in every term from ``a`` on: kept, it saves all but ``n - 1`` of those passes
    (``n (n + 1) / 2 + n - 1`` passes instead of ``n**2``: 8 instead of 9 in 3-D).  Each
    term's passes, values and order are SciPy's, so every term is SciPy's bit for bit.
    Applies where every axis is filtered in order, with one mode, no ``sigma`` that
    SciPy skips (``<= 1e-15``), ``truncate``/``radius`` the only keywords, into an
    output SciPy allocates (not bool, whose passes store raw bytes)."""
    n = input.ndim
    try:          # arguments the passes one by one would refuse: they raise SciPy's error
        if (n < 2 or input.size == 0 or set(kwargs) - {"truncate", "radius"}
                or check_axes(axes, n) != tuple(range(n))):
            return None
        output = get_output(output, input, xp)
        modes = normalize_sequence(mode, n)
        sigmas = normalize_sequence(sigma, n, "sigma")
        skipped = min(float(sd) for sd in sigmas) <= 1e-15
        radii = normalize_sequence(kwargs.get("radius"), n)
    except (TypeError, ValueError, RuntimeError, AxisError):
        return None
    if (not isinstance(output, Fresh) or output.dtype == np.bool_
            or len({str(m) for m in modes}) != 1 or skipped):
        return None
    mode, truncate = modes[0], kwargs.get("truncate", 4.0)

    def one_pass(a, axis, od):
        return gaussian_filter1d(a, sigmas[axis], axis, od, output, mode, cval, truncate,
                                 radius=radii[axis])

    def terms():
        smoothed = input                  # the input smoothed along axes 0..a-1
        for a in range(n):
            term = one_pass(smoothed, a, order)
            for b in range(a + 1, n):
                term = one_pass(term, b, 0)
            yield term
            if a + 1 < n:
                smoothed = one_pass(smoothed, a, 0)
    return terms()


def _gaussian_derivative(order):
    """The derivative callable of :func:`gaussian_laplace` (order 2) and
    :func:`gaussian_gradient_magnitude` (order 1): :func:`gaussian_filter` with that
    order along `axis` and 0 along the others, as SciPy."""
    def derivative(input, axis, output, mode, cval, sigma, **kwargs):
        orders = [0] * input.ndim
        orders[axis] = order
        return gaussian_filter(input, sigma, orders, output, mode, cval, **kwargs)
    return derivative


@compiled
def gaussian_laplace(input: ArrayLike, sigma: FloatOrSeq, output: Any = None,
                     mode: Modes = "reflect", cval: Scalar = 0.0, *,
                     axes: Optional[Axes] = None, **kwargs: Any) -> Array:
    """Laplace filter with Gaussian second derivatives (:func:`scipy.ndimage.gaussian_laplace`).

    Parameters
    ----------
    input : array_like
        NumPy or CuPy array.
    sigma : scalar or sequence of scalars
        The Gaussian's standard deviation, or one per entry of `axes`.
    output : array or dtype, optional
        Array to write into or the result dtype; default `input`'s dtype.
    mode : str or sequence of str, optional
        A boundary mode, or one per entry of `axes` (each axis's term smooths every
        filtered axis with that term's mode, as SciPy).
    cval : scalar, optional
        Fill value of ``constant``/``grid-constant``.
    axes : int or sequence of int, optional
        Axes filtered (default all).
    **kwargs
        Passed to :func:`gaussian_filter` (``truncate``, ``radius``).

    Returns
    -------
    gaussian_laplace : ndarray
        Same shape as `input`, in `output`'s dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.gaussian_laplace(np.array([0.0, 0, 1, 0, 0]), sigma=1, truncate=1.0)
    array([ 0.        ,  0.        , -0.45186276,  0.        ,  0.        ])
    """
    xp, input = _input(input)
    shared = _shared_gaussian_terms(xp, input, sigma, 2, output, mode, cval, axes, kwargs)
    if shared is not None:
        return _accumulate(xp, shared, square=False)
    axes = check_axes(axes, input.ndim)
    sigmas = normalize_sequence(sigma, len(axes), "sigma")
    if len(axes) < input.ndim:                  # sigma 0 on the axes not filtered
        full = [0] * input.ndim
        for s, ax in zip(sigmas, axes):
            full[ax] = s
        sigmas = full
    return _sum_over_axes(input, _gaussian_derivative(2), output, mode, cval, (sigmas,),
                          kwargs, axes, square=False, returns_result=True)


@compiled
def generic_gradient_magnitude(input: ArrayLike, derivative: Callable[..., Any],
                               output: Any = None, mode: Modes = "reflect", cval: Scalar = 0.0,
                               extra_arguments: Sequence[Any] = (),
                               extra_keywords: Optional[Extra] = None, *,
                               axes: Optional[Axes] = None) -> Array:
    """Gradient magnitude from a given first derivative
    (:func:`scipy.ndimage.generic_gradient_magnitude`).

    ``sqrt(sum over axes of derivative(input, axis) ** 2)``, squared, summed and rooted
    in place in `output`'s dtype (``casting='unsafe'``: integer outputs truncate).
    Parameters as in :func:`generic_laplace`, with `derivative` called as
    `derivative2` there.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.generic_gradient_magnitude(np.array([[0.0, 3, 0], [0, 4, 0]]),
    ...                                    ndimage.sobel, mode="nearest")
    array([[13.03840481,  2.        , 13.03840481],
           [15.03329638,  2.        , 15.03329638]])
    """
    return _sum_over_axes(input, derivative, output, mode, cval, extra_arguments,
                          extra_keywords, axes, square=True)


@compiled
def gaussian_gradient_magnitude(input: ArrayLike, sigma: FloatOrSeq, output: Any = None,
                                mode: Modes = "reflect", cval: Scalar = 0.0, *,
                                axes: Optional[Axes] = None, **kwargs: Any) -> Array:
    """Gradient magnitude with Gaussian derivatives
    (:func:`scipy.ndimage.gaussian_gradient_magnitude`).

    Each axis's term is :func:`gaussian_filter` with order 1 along it (and the same
    `sigma`, which is per axis of `input` as :func:`gaussian_filter` takes it).
    Parameters as in :func:`gaussian_laplace`.

    Examples
    --------
    >>> import numpy as np
    >>> from cupyconv import ndimage
    >>> ndimage.gaussian_gradient_magnitude(np.array([0.0, 0, 1, 0, 0]), sigma=1,
    ...                                     truncate=1.0)
    array([0.        , 0.27406862, 0.        , 0.27406862, 0.        ])
    """
    xp, input = _input(input)
    shared = _shared_gaussian_terms(xp, input, sigma, 1, output, mode, cval, axes, kwargs)
    if shared is not None:
        return _accumulate(xp, shared, square=True)
    return _sum_over_axes(input, _gaussian_derivative(1), output, mode, cval, (sigma,),
                          kwargs, axes, square=True, returns_result=True)
