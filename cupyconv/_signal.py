"""SciPy-compatible ``convolve``, ``correlate`` and ``choose_conv_method``.

Each call is mapped onto one :class:`~cupyconv._problem.ConvProblem`:
the non-convolved (``axes``) dimensions broadcast and become the batch
(one shared kernel) or the groups (one kernel per batch element), the mode
becomes padding, and ``correlate(a, b)`` is ``convolve(a, conj(flip(b)))``,
which reproduces scipy's results for every mode, including the swapped
``valid`` case.
"""
from __future__ import annotations

import numpy as np

from . import _args, _dispatch, _select
from ._problem import ConvProblem

__all__ = ["convolve", "correlate", "choose_conv_method"]

_MODES = ("full", "same", "valid")
_SIGNAL_METHODS = ("auto", "direct", "fft", "gemm", "implicit_gemm")


def _check_mode(mode):
    if mode not in _MODES:
        raise ValueError(
            f"Acceptable mode flags are 'valid', 'same', or 'full', not mode={mode!r}")


def _normalize_axes(axes, ndim):
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    axes = list(axes)
    if not axes:
        raise ValueError("when provided, axes cannot be empty")
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or isinstance(a, (bool, np.bool_)):
            raise TypeError(f"axes must be integers, got {a!r}")
        if not -ndim <= a < ndim:
            raise ValueError(f"axes entry {a} is out of range for arrays with {ndim} dimensions")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axes must be unique, got {axes}")
    return tuple(sorted(out))


class _SignalCall:
    """Everything derived from one ``convolve``/``correlate`` call."""

    def __init__(self, in1, in2, mode, axes, correlate):
        self.xp = xp = _args.array_module_of(in1=in1, in2=in2)
        in1, in2 = xp.asarray(in1), xp.asarray(in2)
        _args.check_dtype(in1, "in1")
        _args.check_dtype(in2, "in2")
        _check_mode(mode)
        self.result_dtype = _args.result_dtype(in1.dtype, in2.dtype)
        self.scalar = None
        if in1.ndim == in2.ndim == 0:
            self.scalar = in1 * (xp.conj(in2) if correlate else in2)
            return
        if in1.ndim != in2.ndim:
            raise ValueError("in1 and in2 should have the same dimensionality")
        nd = in1.ndim
        self.axes = axes = _normalize_axes(axes, nd)
        if correlate:   # flip the convolved axes only: batch axes keep their order
            in2 = xp.flip(in2, axis=axes)
            in2 = xp.conj(in2) if in2.dtype.kind == "c" else in2
        for a in axes:
            if in1.shape[a] == 0 or in2.shape[a] == 0:
                raise ValueError(
                    f"in1 and in2 must be non-empty along the convolution axes; got "
                    f"in1.shape={in1.shape}, in2.shape={in2.shape} (axis {a})")
        batch_axes = [a for a in range(nd) if a not in axes]
        for a in batch_axes:
            if in1.shape[a] != in2.shape[a] and 1 not in (in1.shape[a], in2.shape[a]):
                raise ValueError(
                    f"incompatible shapes for in1 and in2: {in1.shape} and {in2.shape} "
                    f"(axis {a} is not convolved and must match or be 1)")
        s1 = [in1.shape[a] for a in axes]
        s2 = [in2.shape[a] for a in axes]
        if mode == "valid":
            if not all(a >= b for a, b in zip(s1, s2)):
                if all(b >= a for a, b in zip(s1, s2)):
                    in1, in2, s1, s2 = in2, in1, s2, s1       # scipy's swap
                else:
                    raise ValueError(
                        "For 'valid' mode, one must be at least as large as the other "
                        f"in every dimension; got in1.shape={tuple(in1.shape)}, "
                        f"in2.shape={tuple(in2.shape)}")
        # broadcast: a 1 takes the other extent, including 0 (an empty batch)
        self.batch_shape = tuple(in1.shape[a] if in2.shape[a] == 1 else in2.shape[a]
                                 for a in batch_axes)
        nb = int(np.prod(self.batch_shape, dtype=np.int64))
        # (an empty batch needs no kernels: run it as an empty shared-kernel batch)
        per_kernel = nb > 0 and any(in2.shape[a] != 1 for a in batch_axes)
        order = batch_axes + list(axes)
        x = xp.broadcast_to(xp.transpose(in1, order), self.batch_shape + tuple(s1))
        w = xp.transpose(in2, order)
        if per_kernel:            # one kernel per batch element: groups
            w = xp.broadcast_to(w, self.batch_shape + tuple(s2))
            x = x.reshape((1, nb) + tuple(s1))
            w = w.reshape((nb, 1) + tuple(s2))
        else:                     # one shared kernel: batch
            x = x.reshape((nb, 1) + tuple(s1))
            w = (w.reshape((1, 1) + tuple(s2)) if w.size
                 else xp.zeros((1, 1) + tuple(s2), dtype=w.dtype))
        if mode == "full":
            padding = tuple((k - 1, k - 1) for k in s2)
        elif mode == "same":
            padding = tuple((k // 2, (k - 1) // 2) for k in s2)
        else:
            padding = 0
        compute = _args.compute_dtype(self.result_dtype)
        self.x = x.astype(compute, copy=False)
        self.w = w.astype(compute, copy=False)
        self.problem = ConvProblem.create(
            x_shape=x.shape, w_shape=w.shape, padding=padding,
            groups=nb if per_kernel else 1, dtype=compute, flip=True)
        self.order = order

    def finish(self, y, out):
        """Reshape ``(N, K, *O)`` back to the caller's axes and dtype."""
        xp = self.xp
        if self.scalar is not None:
            res = self.scalar
        else:
            o = self.problem.out_shape
            res = y.reshape(self.batch_shape + tuple(o))
            res = xp.transpose(res, np.argsort(self.order))
        res = _args.cast_result(res, self.result_dtype)
        return _write_out(res, out, xp)

    def result_shape(self):
        if self.scalar is not None:
            return tuple(self.scalar.shape)
        full = tuple(self.batch_shape) + tuple(self.problem.out_shape)
        return tuple(full[i] for i in np.argsort(self.order))

    def run(self, method, out=None):
        _check_out(out, self.result_shape(), self.result_dtype,
                   in1=self.x if self.scalar is None else self.scalar)
        if self.scalar is not None:
            return self.finish(None, out)
        y, _ = _dispatch.execute(self.problem, self.x, self.w, method=method, xp=self.xp)
        return self.finish(y, out)


def _check_out(out, shape, dtype, **arrays):
    """Validate ``out=`` against the result's shape and dtype (before any work)."""
    if out is None:
        return
    dtype = np.dtype(dtype)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if dtype.kind == "c" and out.dtype.kind != "c":
        raise TypeError(
            f"out has real dtype {out.dtype} but the result is complex ({dtype})")
    if not np.can_cast(dtype, out.dtype, casting="same_kind"):
        raise TypeError(f"cannot write a {dtype} result into out of dtype {out.dtype}")
    _args.array_module_of(out=out, **arrays)


def _write_out(res, out, xp):
    """Copy ``res`` into ``out`` (already validated by :func:`_check_out`)."""
    if out is None:
        return res
    xp.copyto(out, res, casting="same_kind")
    return out


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
    The FFT path spreads NaN/Inf to every output and warns; ``auto`` never
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
    _args.normalize_method(method, _SIGNAL_METHODS)
    return _SignalCall(in1, in2, mode, axes, correlate=False).run(method, out)


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
    _args.normalize_method(method, _SIGNAL_METHODS)
    return _SignalCall(in1, in2, mode, axes, correlate=True).run(method, out)


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
    call = _SignalCall(in1, in2, mode, None, correlate=False)
    if call.scalar is not None:
        return ("direct", {"direct": 0.0}) if measure else "direct"
    names, chosen = _dispatch.model_choice(call.problem, call.x, call.w, call.xp)
    if not measure:
        return chosen
    sync = (call.xp.cuda.get_current_stream().synchronize if call.xp is not np
            else (lambda: None))
    return _select.measure(lambda name: (call.run(name), sync()), names)
