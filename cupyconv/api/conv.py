"""``conv``: batched multi-channel N-D convolution, deep-learning style (no flip)."""
from __future__ import annotations

import numpy as np

from .._lru import memoized
from ..core import args
from ..core.problem import ConvProblem, Operands
from ..dispatch import backend_for, precheck, run
from .compiled import compiled
from .calls import check_bias, check_out, finish, logical_views, with_precision

__all__ = ["conv", "prepare_conv", "conv_problem"]


@memoized()
def conv_problem(x_shape, x_dtype, w_shape, w_dtype, bias_dtype, stride, padding, dilation,
                 groups, padding_mode, cval, layout, out_dtype=None):
    """``(problem, result dtype)`` of one ``conv`` signature (validates; memoised)."""
    dtypes = [x_dtype, w_dtype] + ([bias_dtype] if bias_dtype is not None else [])
    result = np.dtype(out_dtype) if out_dtype is not None else args.result_dtype(*dtypes)
    if len(x_shape) != len(w_shape):
        raise ValueError(
            f"x and w must have the same number of dimensions; got x.ndim={len(x_shape)} "
            f"and w.ndim={len(w_shape)} (x is (N, C_in, *spatial), w is "
            "(C_out, C_in/groups, *kernel))")
    problem = ConvProblem.create(
        x_shape=x_shape, w_shape=w_shape, stride=stride, padding=padding,
        dilation=dilation, groups=groups, padding_mode=padding_mode, cval=cval,
        layout=layout, dtype=args.problem_dtype(result), flip=False)
    return problem, result


def prepare_conv(x, w, bias, *, stride, padding, dilation, groups, padding_mode, cval,
                 layout, out_dtype=None):
    """Validate a ``conv`` call; returns ``(problem, result dtype, xp, x, w, bias)``."""
    xp = args.array_module_of(x=x, w=w, bias=bias)
    x, w = args.as_array(xp, x), args.as_array(xp, w)
    args.check_dtype(x, "x")
    args.check_dtype(w, "w")
    bias = None if bias is None else args.as_array(xp, bias)
    if bias is not None:
        args.check_dtype(bias, "bias")
    problem, result = conv_problem(
        x.shape, x.dtype, w.shape, w.dtype, None if bias is None else bias.dtype, stride,
        padding, dilation, groups, padding_mode, cval, layout, out_dtype)
    return problem, result, xp, x, w, check_bias(bias, problem.out_channels, xp)


@compiled
def conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
         padding_mode="constant", cval=0, layout="channels_first", method="auto",
         out=None, workspace_limit=None, precision=None):
    """Batched multi-channel N-D convolution (cross-correlation, no flip).

    Parameters
    ----------
    x : ndarray
        Input, ``(N, C_in, *S)`` for ``channels_first`` or ``(N, *S, C_in)``
        for ``channels_last``.  Any strides (views, transposes, negative or
        zero strides) are accepted.  An unbatched input, ``(C_in, *S)`` or
        ``(*S, C_in)``, is recognised by ``x.ndim == w.ndim - 1`` and gives
        an unbatched result, as in PyTorch.
    w : ndarray
        Weights, ``(C_out, C_in/groups, *K)`` or ``(C_out, *K, C_in/groups)``.
    bias : ndarray, optional
        ``(C_out,)``, added to every output position.
    stride, dilation : int or sequence of int, optional
        Per spatial axis, >= 1.
    padding : int, sequence, sequence of (before, after), 'valid' or 'same', optional
        ``'same'`` is JAX's and TensorFlow's ``SAME`` for any stride (PyTorch refuses
        it with a stride > 1): ``ceil(S / stride)`` outputs from a total padding of
        ``max((ceil(S / stride) - 1) * stride + dilation * (K - 1) + 1 - S, 0)``,
        ``total // 2`` before and the rest after (``jax.lax.padtype_to_pads``).
    groups : int, optional
        ``C_in`` and ``C_out`` must both be divisible by it.
    padding_mode : {'constant', 'reflect', 'symmetric', 'wrap', 'edge'}, optional
        :func:`numpy.pad` boundary names; ``constant`` fills with `cval`.
        PyTorch's ``'zeros'``, ``'replicate'`` and ``'circular'`` are
        accepted for ``constant``, ``edge`` and ``wrap`` (docs/semantics.md
        has the table of every library's names).
    cval : scalar, optional
        Fill value of ``padding_mode='constant'`` (a nonzero `cval` with
        another mode is a ``ValueError``: it would be ignored).
    layout : {'channels_first', 'channels_last'}, optional
    method : {'auto', 'direct', 'gemm', 'implicit_gemm', 'fft', 'separable', 'winograd'}, optional
        ``separable`` (single channel or depthwise) needs kernels that are outer
        products of 1-D factors (``auto`` checks the data before choosing it);
        ``winograd`` (float data; NumPy or the GPU's transform kernels) runs Winograd
        tiles within an error gate (docs/winograd.md).
    out : ndarray, optional
        Array of the output's shape to write into.
    workspace_limit : int, optional
        Bytes the algorithm may allocate beyond x, w and y (``gemm`` chunks
        its column buffer to fit; ``auto`` honours it).

    Returns
    -------
    y : ndarray
        ``(N, C_out, *O)`` or ``(N, *O, C_out)`` (without ``N`` for an
        unbatched `x`), with
        ``O_i = floor((S_i + pb_i + pa_i - dilation_i*(K_i-1) - 1) / stride_i) + 1``.

    Raises
    ------
    ValueError
        Bad geometry (names the argument and axis), a channel mismatch, an
        empty output, a spatial rank above ``cupyconv.MAX_RANK``.
    TypeError
        Unsupported dtypes, or NumPy and CuPy arrays mixed.
    MemoryError
        When no algorithm fits the memory available (the message names the
        bytes and what to do).

    Examples
    --------
    >>> import numpy as np, cupyconv
    >>> x = np.ones((2, 4, 9, 9, 9))            # N, C_in, D, H, W
    >>> w = np.ones((8, 4, 3, 3, 3))            # C_out, C_in, kD, kH, kW
    >>> cupyconv.conv(x, w, stride=2, padding=1).shape
    (2, 8, 5, 5, 5)
    """
    args.normalize_method(method)
    unbatched = np.ndim(x) == np.ndim(w) - 1 >= 1
    if unbatched:                        # PyTorch's unbatched (C, *S): a batch of one
        x = args.as_array(args.array_module_of(x=x, w=w), x)[None]
    problem, result, xp, x, w, bias = prepare_conv(
        x, w, bias, stride=stride, padding=padding, dilation=dilation, groups=groups,
        padding_mode=padding_mode, cval=cval, layout=layout)
    problem = with_precision(problem, precision, result)
    check_out(out, problem.y_shape[1:] if unbatched else problem.y_shape, result, x=x)
    choice = precheck(problem, backend_for(xp), method, workspace_limit)   # before any cast
    views = logical_views(problem, xp, activation=x, filter=w)
    y, _ = run(problem, Operands(**views), backend_for(xp), method=method,
               workspace_limit=workspace_limit, choice=choice)
    if not unbatched:
        return finish(y, problem, xp, result, out, bias)
    res = finish(y, problem, xp, result, None if out is None else out[None], bias)
    return res[0] if out is None else out
