"""``conv``: batched multi-channel N-D convolution, deep-learning style (no flip)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .._lru import memoized
from ..core import args
from ..core.problem import ConvProblem, Operands
from ..dispatch import backend_for, precheck, run
from .compiled import compiled
from .calls import check_bias, check_out, finish, logical_views
from .._typing import Array, ArrayLike, IntOrSeq, Padding, Scalar

__all__ = ["conv", "prepare_conv", "conv_problem"]


@memoized()
def conv_problem(x_shape, x_dtype, w_shape, w_dtype, stride, padding, dilation,
                 groups, padding_mode, cval, layout, out_dtype=None):
    """``(problem, result dtype)`` of one ``conv`` signature (validates; memoised); the
    result dtype is that of x and w (a bias is cast to it)."""
    result, storage = (args.result_dtypes(x_dtype, w_dtype) if out_dtype is None
                       else (np.dtype(out_dtype), args.problem_dtype(out_dtype)))
    if len(x_shape) != len(w_shape):
        raise ValueError(
            f"x and w must have the same number of dimensions; got x.shape={tuple(x_shape)} "
            f"(ndim {len(x_shape)}) and w.shape={tuple(w_shape)} (ndim {len(w_shape)}) (x is "
            "(N, C_in, *spatial) or unbatched (C_in, *spatial), w is "
            "(C_out, C_in/groups, *kernel))")
    problem = ConvProblem.create(
        x_shape=x_shape, w_shape=w_shape, stride=stride, padding=padding,
        dilation=dilation, groups=groups, padding_mode=padding_mode, cval=cval,
        layout=layout, dtype=storage, flip=False)
    return problem, result


def prepare_conv(x, w, bias, *, stride, padding, dilation, groups, padding_mode, cval,
                 layout, out_dtype=None):
    """Validate a ``conv`` call; returns ``(problem, result dtype, xp, x, w, bias)``."""
    xp, x, w, bias = args.checked_arrays(("bias",), x=x, w=w, bias=bias)
    problem, result = conv_problem(
        x.shape, x.dtype, w.shape, w.dtype, stride, padding, dilation, groups, padding_mode,
        cval, layout, out_dtype)
    if bias is not None:
        bias = check_bias(bias, problem.out_channels, xp, result)
    return problem, result, xp, x, w, bias


@compiled
def conv(x: ArrayLike, w: ArrayLike, bias: Optional[ArrayLike] = None, *, stride: IntOrSeq = 1,
         padding: Padding = 0, dilation: IntOrSeq = 1, groups: int = 1,
         padding_mode: str = "constant", cval: Scalar = 0, layout: str = "channels_first",
         method: str = "auto", out: Optional[Array] = None,
         workspace_limit: Optional[int] = None, precision: Optional[str] = None) -> Array:
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
        ``(C_out,)``, added to every output position.  The result dtype is that of
        `x` and `w`; the bias is cast to it within its kind (a float64 bias on float32
        data is added in float32, as PyTorch and Flax layers do); a bias of another kind
        (float on integers, complex on real data) is a ``TypeError``.
    stride, dilation : int or sequence of int, optional
        Per spatial axis, >= 1.
    padding : int, sequence, sequence of (before, after), 'valid' or 'same', optional
        The two names in any case (TensorFlow's ``'SAME'``, ``'VALID'``).
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
    precision : {'highest', 'tf32'}, optional
        Arithmetic of float32 data: ``'highest'`` (float32 products and sums) or ``'tf32'``
        (both operands rounded to TF32, 10 mantissa bits, then float32 products and sums:
        the numerics of TF32 tensor cores, as PyTorch's ``allow_tf32``).  Other dtypes take
        ``'highest'`` only.  ``None``: ``cupyconv.config.precision`` for float32 data, else
        ``'highest'`` (docs/semantics.md, "Numerics", has the error bounds).

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
    problem = args.with_precision(problem, precision, result)
    if out is not None:
        check_out(out, problem.y_shape[1:] if unbatched else problem.y_shape, result, x=x)
    backend = backend_for(xp)
    choice = precheck(problem, backend, method, workspace_limit)   # before any cast
    views = logical_views(problem, xp, activation=x, filter=w)
    y, _ = run(problem, Operands(**views), backend, method=method,
               workspace_limit=workspace_limit, choice=choice)
    if not unbatched:
        return finish(y, problem, xp, result, out, bias)
    res = finish(y, problem, xp, result, None if out is None else out[None], bias)
    return res[0] if out is None else out
