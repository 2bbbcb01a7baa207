"""Batched multi-channel N-D convolution, deep-learning style (no flip)."""
from __future__ import annotations

import numpy as np

from . import _args, _dispatch
from ._problem import ConvProblem

__all__ = ["conv", "prepare_conv", "logical_views", "finish_conv"]


def _channels_first(a, layout, xp):
    """Logical ``(lead, C, *S)`` view of an array in ``layout`` (no copy)."""
    return a if layout == "channels_first" else xp.moveaxis(a, -1, 1)


def _check_cval(cval, compute):
    """``cval`` must be representable in the compute dtype: numpy.pad would
    silently drop an imaginary part or truncate a fraction."""
    try:
        c = complex(cval)
    except (TypeError, ValueError):
        raise TypeError(f"cval must be a number, got {cval!r}") from None
    if c.imag != 0 and compute.kind != "c":
        raise TypeError(
            f"cval={cval!r} is complex but the inputs are real ({compute}); "
            "pass complex x or w, or a real cval")
    if compute.kind in "biu" and not float(c.real).is_integer():
        raise TypeError(
            f"cval={cval!r} is not an integer but the inputs are integers ({compute}); "
            "it would be truncated")


def prepare_conv(x, w, bias, *, stride, padding, dilation, groups, padding_mode,
                 cval, layout, out_dtype=None):
    """Validate a ``conv`` call; return ``(problem, x_cf, w_cf, bias, xp)``.

    ``x_cf``/``w_cf`` are channels-first views in the compute dtype.
    """
    xp = _args.array_module_of(x=x, w=w, bias=bias)
    x, w = xp.asarray(x), xp.asarray(w)
    _args.check_dtype(x, "x")
    _args.check_dtype(w, "w")
    dtypes = [x.dtype, w.dtype]
    if bias is not None:
        bias = xp.asarray(bias)
        _args.check_dtype(bias, "bias")
        dtypes.append(bias.dtype)
    result = np.dtype(out_dtype) if out_dtype is not None else _args.result_dtype(*dtypes)
    compute = _args.compute_dtype(result)
    if x.ndim != w.ndim:
        raise ValueError(
            f"x and w must have the same number of dimensions; got x.ndim={x.ndim} "
            f"and w.ndim={w.ndim} (x is (N, C_in, *spatial), w is (C_out, C_in/groups, *kernel))")
    _check_cval(cval, compute)
    problem = ConvProblem.create(
        x_shape=x.shape, w_shape=w.shape, stride=stride, padding=padding,
        dilation=dilation, groups=groups, padding_mode=padding_mode, cval=cval,
        layout=layout, dtype=compute, flip=False)
    x_cf, w_cf, bias, xp = logical_views(problem, x, w, bias)
    return problem, x_cf, w_cf, bias, xp, result


def logical_views(problem, x, w, bias=None):
    """Channels-first views of ``x``/``w`` (and ``bias``) in the compute dtype.

    Returns ``(x_cf, w_cf, bias, xp)``; no copy unless a dtype cast is needed.
    """
    xp = _args.array_module_of(x=x, w=w, bias=bias)
    compute = problem.dtype
    x_cf = _channels_first(xp.asarray(x), problem.layout, xp).astype(compute, copy=False)
    w_cf = _channels_first(xp.asarray(w), problem.layout, xp).astype(compute, copy=False)
    if bias is not None:
        bias = xp.asarray(bias)
        if tuple(bias.shape) != (problem.out_channels,):
            raise ValueError(f"bias must have shape (C_out,) = ({problem.out_channels},); "
                             f"got {tuple(bias.shape)}")
        bias = bias.astype(compute, copy=False)
    return x_cf, w_cf, bias, xp


def finish_conv(y, problem, bias, xp, result, out):
    """Add ``bias``, restore the layout, cast to ``result`` and honour ``out=``."""
    from ._signal import _write_out
    if bias is not None:
        y += bias.reshape((1, -1) + (1,) * problem.ndim)
    if problem.layout == "channels_last":
        y = xp.ascontiguousarray(xp.moveaxis(y, 1, -1))
    y = _args.cast_result(y, result)
    return _write_out(y, out, xp)


def conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
         padding_mode="constant", cval=0, layout="channels_first", method="auto",
         out=None, workspace_limit=None):
    """Batched multi-channel N-D convolution (cross-correlation, no flip).

    Parameters
    ----------
    x : ndarray
        Input, ``(N, C_in, *S)`` for ``channels_first`` or ``(N, *S, C_in)``
        for ``channels_last``.  Any strides (views, transposes, negative or
        zero strides) are accepted.
    w : ndarray
        Weights, ``(C_out, C_in/groups, *K)`` or ``(C_out, *K, C_in/groups)``.
    bias : ndarray, optional
        ``(C_out,)``, added to every output position.
    stride, dilation : int or sequence of int, optional
        Per spatial axis, >= 1.
    padding : int, sequence, sequence of (before, after), 'valid' or 'same', optional
        ``same`` gives ``ceil(S / stride)`` outputs, extra padding after.
    groups : int, optional
        ``C_in`` and ``C_out`` must both be divisible by it.
    padding_mode : {'constant', 'reflect', 'symmetric', 'wrap', 'edge'}, optional
        :func:`numpy.pad` boundary names; ``constant`` fills with `cval`.
    cval : scalar, optional
    layout : {'channels_first', 'channels_last'}, optional
    method : {'auto', 'direct', 'gemm', 'implicit_gemm', 'fft'}, optional
    out : ndarray, optional
        Array of the output's shape to write into.
    workspace_limit : int, optional
        Bytes the algorithm may allocate beyond x, w and y (``gemm`` chunks
        its column buffer to fit; ``auto`` honours it).

    Returns
    -------
    y : ndarray
        ``(N, C_out, *O)`` or ``(N, *O, C_out)``, with
        ``O_i = floor((S_i + pb_i + pa_i - dilation_i*(K_i-1) - 1) / stride_i) + 1``.

    Raises
    ------
    ValueError
        Bad geometry (names the argument and axis), a channel mismatch, an
        empty output, a spatial rank above ``cupyconv.MAX_RANK``.
    TypeError
        Unsupported dtypes, or NumPy and CuPy arrays mixed.

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> x = np.ones((2, 4, 9, 9, 9))            # N, C_in, D, H, W
    >>> w = np.ones((8, 4, 3, 3, 3))            # C_out, C_in, kD, kH, kW
    >>> cupyconv.conv(x, w, stride=2, padding=1).shape
    (2, 8, 5, 5, 5)
    """
    _args.normalize_method(method)
    problem, x_cf, w_cf, bias, xp, result = prepare_conv(
        x, w, bias, stride=stride, padding=padding, dilation=dilation, groups=groups,
        padding_mode=padding_mode, cval=cval, layout=layout)
    from ._signal import _check_out
    _check_out(out, problem.y_shape, result, x=x_cf)
    y, _ = _dispatch.execute(problem, x_cf, w_cf, method=method,
                             workspace_limit=workspace_limit, xp=xp)
    return finish_conv(y, problem, bias, xp, result, out)
