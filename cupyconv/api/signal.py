"""SciPy-compatible ``convolve``, ``correlate`` and ``choose_conv_method``
(``fftconvolve``, ``oaconvolve``, ``convolve2d``, ``correlate2d``: :mod:`.signal_parity`).

Each call is mapped onto one :class:`~cupyconv.core.ConvProblem` by
:func:`cupyconv.core.signal_map.signal_call` (memoised per signature) and
run by the dispatcher.  ``choose_conv_method`` answers in SciPy's vocabulary
(``"direct"``/``"fft"``); :func:`choose_algorithm` names the engine's choice.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ..core import args
from ..core.signal_map import checked_call
from ..dispatch import backend_for, choose, precheck, run
from ..dispatch.dispatcher import ranked_for_data
from ..dispatch.autotune import measure as measure_fn
from .compiled import compiled
from .calls import check_out, write_out
from .._typing import Array, ArrayLike, Axes

__all__ = ["convolve", "correlate", "choose_conv_method", "choose_algorithm", "signal_problem",
           "compute", "centered"]


def signal_problem(in1, in2, mode, axes, correlate, padding_mode="constant", cval=0,
                   same_after=False):
    """Validate a ``convolve``/``correlate`` call: ``(SignalCall, xp, in1, in2)``."""
    xp, in1, in2 = args.checked_arrays(in1=in1, in2=in2)
    call = checked_call(in1.shape, in1.dtype, in2.shape, in2.dtype, mode, axes, correlate,
                        padding_mode, cval, same_after)
    return call, xp, in1, in2


def compute(call, xp, in1, in2, method, out=None, precision=None, warn=True):
    """Run a validated :class:`SignalCall` (``signal_problem``) and shape the result
    (``warn``: as :func:`cupyconv.dispatch.run`'s)."""
    if out is not None:
        check_out(out, call.result_shape, call.result_dtype, in1=in1)
    problem = call.problem
    if problem is not None:
        problem = args.with_precision(problem, precision, call.result_dtype)
    if call.problem is None:                           # two 0-d operands
        res = in1 * (xp.conj(in2) if call.correlate else in2)
    elif method == "fft" and all(1 in (s, k) for s, k in zip(call.problem.in_shape,
                                                           call.problem.kernel_shape)):
        res = _broadcast_product(call, xp, in1, in2)
    else:
        backend = backend_for(xp)
        choice = precheck(problem, backend, method)    # before the operands are cast
        y, _ = run(problem, call.operands(in1, in2, xp), backend, method=method,
                   warn=warn, choice=choice)
        res = call.finish(y, xp)
    return write_out(args.cast_result(res, call.result_dtype), out, xp)


def _broadcast_product(call, xp, in1, in2):
    """A convolution without an axis where both operands are longer than 1: the exact
    broadcast product (what SciPy's FFT path computes then, exact for integers), its
    convolved axes cropped to ``same``'s window; the batch axes keep their broadcast
    extent (``scipy.signal.convolve``'s shape; ``fftconvolve`` crops those itself)."""
    if call.correlate:
        in2 = xp.flip(in2, axis=call.axes)
        in2 = xp.conj(in2) if in2.dtype.kind == "c" else in2
    res = in1 * in2
    if res.shape != call.result_shape:                                      # "same"
        res = centered(res, call.result_shape)
    return res


@compiled
def convolve(in1: ArrayLike, in2: ArrayLike, mode: str = "full", method: str = "auto", *,
             axes: Optional[Axes] = None, out: Optional[Array] = None,
             precision: Optional[str] = None) -> Array:
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
    method : {'auto', 'direct', 'fft', 'gemm', 'implicit_gemm', 'separable', 'winograd'}, optional
        Algorithm.  ``auto`` chooses by a cost model (any rank); see
        :func:`choose_algorithm`.  ``separable`` runs one 1-D pass per axis and
        needs a kernel that is an outer product of 1-D factors; ``winograd`` (float
        data, kernels up to 7 taps per axis; CPU or GPU) runs Winograd tiles within an
        error gate (docs/winograd.md).
    axes : int or sequence of int, optional
        Convolve only along these axes (as :func:`scipy.signal.fftconvolve`);
        the other axes must match or be 1 and are independent batch axes.
        Default: all axes.
    out : ndarray, optional
        Array of the result's shape to write into.
    precision : {'highest', 'tf32'}, optional
        Arithmetic of float32 data, as in :func:`cupyconv.conv` (``'tf32'``: operands
        rounded to TF32; ``None``: ``cupyconv.config.precision``).

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
    return compute(*signal_problem(in1, in2, mode, axes, False), method, out, precision)


@compiled
def correlate(in1: ArrayLike, in2: ArrayLike, mode: str = "full", method: str = "auto", *,
              axes: Optional[Axes] = None, out: Optional[Array] = None,
              precision: Optional[str] = None) -> Array:
    """Cross-correlate two N-dimensional arrays.

    Drop-in for :func:`scipy.signal.correlate`; parameters as in
    :func:`convolve` (`precision` included).

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
    return compute(*signal_problem(in1, in2, mode, axes, True), method, out, precision)


def _ranked(in1, in2, mode, axes, measure):
    """``(call, xp, in1, in2, backend, ranked)``: the engine's candidates, best first."""
    call, xp, in1, in2 = signal_problem(in1, in2, mode, axes, False)
    if call.problem is None:
        return call, xp, in1, in2, None, ["direct"]
    backend = backend_for(xp)
    problem, operands = backend.prepare(call.problem, call.operands(in1, in2, xp))
    ranked = ranked_for_data(choose(problem, backend), problem, operands, every=measure,
                             backend=backend)
    return call, xp, in1, in2, backend, ranked


def _timer(call, xp, in1, in2, backend):
    def run_once(name):
        compute(call, xp, in1, in2, name)
        if backend is not None:
            backend.synchronize()
    return run_once


def choose_algorithm(in1: ArrayLike, in2: ArrayLike, mode: str = "full", measure: bool = False,
                     *, axes: Optional[Axes] = None) -> Any:
    """The engine's algorithm for ``convolve``/``correlate``: what ``auto`` runs.

    Parameters
    ----------
    in1, in2 : array_like
        The operands, as for :func:`convolve`.
    mode : {'full', 'valid', 'same'}, optional
    measure : bool, optional
        Time every candidate once (median of three runs after a warm-up)
        instead of using the cost model.
    axes : int or sequence of int, optional
        The convolved axes, as for :func:`convolve`.

    Returns
    -------
    method : str
        An engine algorithm (``direct``, ``implicit_gemm``, ``gemm``, ``fft``,
        ``separable``, ``winograd``): the one ``auto`` runs on these operands (after
        the data rules), to pass as ``method=`` to run exactly it.
    times : dict, optional
        ``{method: seconds}``, only when `measure` is True.

    Notes
    -----
    ``fft`` is never chosen for integer data whose result could exceed
    float64's exact range (SciPy's guard) nor for non-finite data; with
    ``measure=True`` it is not even timed then.  The cost model counts
    multiply-adds, column-buffer elements and FFT points; docs/algorithms.md
    records how well it agrees with measurement.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> cupyconv.choose_algorithm(np.ones(10**4), np.ones(10**3))
    'fft'
    """
    call, xp, in1, in2, backend, ranked = _ranked(in1, in2, mode, axes, measure)
    if not measure:
        return ranked[0]
    if call.problem is None:
        return "direct", {"direct": 0.0}
    return measure_fn(_timer(call, xp, in1, in2, backend), ranked)


def choose_conv_method(in1: ArrayLike, in2: ArrayLike, mode: str = "full",
                       measure: bool = False, *, axes: Optional[Axes] = None) -> Any:
    """``"direct"`` or ``"fft"``, whichever is faster (:func:`scipy.signal.choose_conv_method`).

    SciPy's contract: the answer is ``"fft"`` or ``"direct"`` (a sum of
    products, exact for integers), to pass to ``method=``.  ``"fft"`` when the
    engine's cost model (or, with `measure`, the clock) puts the FFT first,
    else ``"direct"``; bool inputs and integer data whose result could exceed
    float64's exact range are always ``"direct"``, as in SciPy.
    It answers ``"direct"`` also where the engine runs ``gemm``, ``separable`` or
    ``winograd``, which may be many times faster than ``method="direct"``:
    :func:`choose_algorithm` names what actually runs.

    Parameters
    ----------
    in1, in2 : array_like
    mode : {'full', 'valid', 'same'}, optional
    measure : bool, optional
        Time ``method="fft"`` and the best direct algorithm (median of three
        runs after a warm-up) instead of predicting.
    axes : int or sequence of int, optional
        The convolved axes (an extension: SciPy's takes none).

    Returns
    -------
    method : {'direct', 'fft'}
    times : dict, optional
        ``{"direct": seconds, "fft": seconds}``, only when `measure` is True
        (``fft`` is infinite where the data rules forbid it).

    Notes
    -----
    Works for every rank (:func:`cupyx.scipy.signal.choose_conv_method`
    raises for N-D input).

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> cupyconv.choose_conv_method(np.ones(10**4), np.ones(10**3))
    'fft'
    >>> cupyconv.choose_conv_method(np.ones(10**4, bool), np.ones(10**3, bool))
    'direct'
    """
    call, xp, in1, in2, backend, ranked = _ranked(in1, in2, mode, axes, measure)
    if not measure:
        if in1.dtype == np.bool_ and in2.dtype == np.bool_:
            return "direct"
        return "fft" if ranked[0] == "fft" else "direct"
    if call.problem is None:
        return "direct", {"direct": 0.0, "fft": math.inf}
    direct = [n for n in ranked if n != "fft"][:1]
    _, times = measure_fn(_timer(call, xp, in1, in2, backend),
                          direct + (["fft"] if "fft" in ranked else []))
    times = {"direct": times[direct[0]] if direct else math.inf,
             "fft": times.get("fft", math.inf)}
    return ("fft" if times["fft"] < times["direct"] else "direct"), times


def centered(arr, shape):
    """The centred ``shape`` window of ``arr`` (SciPy's ``same`` from ``full``)."""
    start = [(n - m) // 2 for n, m in zip(arr.shape, shape)]
    return arr[tuple(slice(s, s + m) for s, m in zip(start, shape))]
