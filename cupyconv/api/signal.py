"""SciPy-compatible ``convolve``, ``correlate`` and ``choose_conv_method``.

Each call is mapped onto one :class:`~cupyconv.core.ConvProblem` by
:func:`cupyconv.core.signal_map.signal_call` (memoised per signature) and
run by the dispatcher.
"""
from __future__ import annotations

from ..core import args
from ..core.signal_map import check_mode, signal_call
from ..dispatch import backend_for, choose, run
from ..dispatch.dispatcher import ranked_for_data
from ..dispatch.autotune import measure as measure_fn
from .calls import check_out, write_out

__all__ = ["convolve", "correlate", "choose_conv_method", "signal_problem"]


def signal_problem(in1, in2, mode, axes, correlate):
    """Validate a ``convolve``/``correlate`` call: ``(SignalCall, xp, in1, in2)``."""
    xp = args.array_module_of(in1=in1, in2=in2)
    in1, in2 = xp.asarray(in1), xp.asarray(in2)
    args.check_dtype(in1, "in1")
    args.check_dtype(in2, "in2")
    check_mode(mode)
    axes = None if in1.ndim == 0 else args.normalize_axes(axes, in1.ndim)
    call = signal_call(in1.shape, in1.dtype, in2.shape, in2.dtype, mode, axes, correlate)
    return call, xp, in1, in2


def _compute(call, xp, in1, in2, method, out=None):
    check_out(out, call.result_shape, call.result_dtype, in1=in1)
    if call.problem is None:                           # two 0-d operands
        res = in1 * (xp.conj(in2) if call.correlate else in2)
    else:
        y, _ = run(call.problem, call.operands(in1, in2, xp), backend_for(xp), method=method)
        res = call.finish(y, xp)
    return write_out(args.cast_result(res, call.result_dtype), out, xp)


def convolve(in1, in2, mode="full", method="auto", *, axes=None, out=None):
    """Convolve two N-dimensional arrays.

    Drop-in for :func:`scipy.signal.convolve` (and
    :func:`cupyx.scipy.signal.convolve`) for any rank, on NumPy or CuPy
    arrays.

    Parameters
    ----------
    in1 : array_like
        First input.
    in2 : array_like
        Second input, with the same number of dimensions as `in1`.
    mode : {'full', 'valid', 'same'}, optional
        ``full``: the full discrete linear convolution.  ``valid``: only
        elements that do not rely on zero-padding; one input must be at
        least as large as the other in every convolved dimension (the
        inputs are swapped when `in2` is the larger, as in scipy).
        ``same``: the size of `in1`, centred on the ``full`` output.
    method : {'auto', 'direct', 'fft', 'gemm', 'implicit_gemm'}, optional
        Algorithm.  ``auto`` chooses by a cost model (any rank); see
        :func:`choose_conv_method`.
    axes : int or sequence of int, optional
        Convolve only along these axes (as :func:`scipy.signal.fftconvolve`);
        the other axes must match or be 1 and are independent batch axes.
        Default: all axes.
    out : ndarray, optional
        Array of the result's shape to write into.

    Returns
    -------
    convolve : ndarray
        Discrete linear convolution of `in1` with `in2`, of dtype
        ``numpy.result_type(in1, in2)`` whatever the method (integers are
        computed exactly, with two's-complement wraparound as in scipy).

    Raises
    ------
    ValueError
        Unknown `mode`/`method`, different ranks, an empty convolution
        axis, or a ``valid`` mode where neither input covers the other.
    TypeError
        Unsupported dtypes (object, string, long double), or NumPy and CuPy
        arrays mixed.

    See Also
    --------
    correlate, choose_conv_method, conv

    Notes
    -----
    ``z[k] = sum_l in1[l] * in2[k - l]`` over every index where both exist.
    The FFT path spreads NaN/Inf through its transforms (every output, or the
    overlap-add blocks that hold them for long 1-D signals) and warns; ``auto`` never
    picks it for non-finite inputs.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> rng = np.random.default_rng(0)
    >>> vol = rng.standard_normal((12, 12, 12, 12))     # a 4-D array
    >>> psf = np.ones((3, 3, 3, 3)) / 81
    >>> cupyconv.convolve(vol, psf, mode="same").shape
    (12, 12, 12, 12)
    """
    args.normalize_method(method)
    return _compute(*signal_problem(in1, in2, mode, axes, False), method, out)


def correlate(in1, in2, mode="full", method="auto", *, axes=None, out=None):
    """Cross-correlate two N-dimensional arrays.

    Drop-in for :func:`scipy.signal.correlate`; parameters as in
    :func:`convolve`.

    Returns
    -------
    correlate : ndarray
        ``z[k] = sum_l in1[l] * conj(in2[l - k + N - 1])`` (scipy's
        definition), i.e. ``convolve(in1, conj(flip(in2)))``; in a swapped
        ``valid`` mode the result is therefore reversed and conjugated, as
        scipy documents.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> cupyconv.correlate(np.array([[1]]), np.array([[2j]]))
    array([[0.-2.j]])
    """
    args.normalize_method(method)
    return _compute(*signal_problem(in1, in2, mode, axes, True), method, out)


def choose_conv_method(in1, in2, mode="full", measure=False):
    """Find the fastest algorithm for ``convolve``/``correlate``.

    Parameters
    ----------
    in1, in2 : array_like
        The operands, as for :func:`convolve`.
    mode : {'full', 'valid', 'same'}, optional
    measure : bool, optional
        Time every candidate once (median of three runs after a warm-up)
        instead of using the cost model.

    Returns
    -------
    method : str
        The chosen algorithm name.
    times : dict, optional
        ``{method: seconds}``, only when `measure` is True.

    Notes
    -----
    Unlike :func:`cupyx.scipy.signal.choose_conv_method`, this works for
    every rank.  ``fft`` is never chosen for integer data whose result could
    exceed float64's exact range (scipy's guard) nor for non-finite data.
    The cost model counts multiply-adds, column-buffer elements and FFT
    points; docs/algorithms.md records how well it agrees with measurement.
    """
    call, xp, in1, in2 = signal_problem(in1, in2, mode, None, False)
    if call.problem is None:
        return ("direct", {"direct": 0.0}) if measure else "direct"
    backend = backend_for(xp)
    problem, operands = backend.prepare(call.problem, call.operands(in1, in2, xp))
    ranked = ranked_for_data(choose(problem, backend), problem, operands, every=measure)
    if not measure:
        return ranked[0]
    return measure_fn(lambda name: (_compute(call, xp, in1, in2, name), backend.synchronize()),
                      ranked)
