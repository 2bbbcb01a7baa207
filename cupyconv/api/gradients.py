"""Gradients of :func:`cupyconv.conv`, and ``conv_transpose``.

Each function builds the forward geometry's :class:`~cupyconv.core.ConvProblem`
with the gradient's ``op`` (``grad_input`` or ``grad_weight``) and hands the
arrays to the one dispatcher by role: no separate gradient code path.
``conv_transpose`` is the input gradient of the convolution it transposes,
without conjugation.
"""
from __future__ import annotations

import functools
from typing import Optional

from .._kernels import program
from .._vocabulary import GRAD_INPUT, GRAD_WEIGHT
from ..core import args
from ..core.problem import ConvProblem, Operands
from ..core.transpose import conv_transpose_geometry
from ..dispatch import backend_for, precheck, run
from .compiled import compiled
from .calls import check_bias, finish, logical_views
from .._typing import Array, ArrayLike, IntOrSeq, Padding, Scalar, Shape

__all__ = ["conv_grad_input", "conv_grad_weight", "conv_grad_bias", "conv_transpose"]


def _problem(name, shape, **create):
    """The gradient problem; its geometry errors name the shape argument checked."""
    try:
        return ConvProblem.create(**create)
    except ValueError as exc:
        raise ValueError(f"{name}={shape} does not fit this convolution: {exc}") from None


def _check_dy(problem, dy, name, shape):
    if tuple(dy.shape) != tuple(problem.y_shape):
        raise ValueError(
            f"dy has shape {tuple(dy.shape)}, but the convolution with {name}={shape} "
            f"produces outputs of shape {tuple(problem.y_shape)}; {name} is inconsistent "
            "with dy (or the geometry is)")


def _geometry(stride, padding, dilation, groups, padding_mode, layout):
    return dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                padding_mode=padding_mode, layout=layout)


def _run(problem, xp, result, method, workspace_limit, bias=None, precision=None, **arrays):
    problem = args.with_precision(problem, precision, result, *arrays.values())
    backend = backend_for(xp)
    choice = precheck(problem, backend, method, workspace_limit)   # before any cast
    views = logical_views(problem, xp, **arrays)
    out, _ = run(problem, Operands(**views), backend, method=method,
                 workspace_limit=workspace_limit, choice=choice)
    return finish(out, problem, xp, result, None, bias)


@compiled
def conv_grad_input(dy: ArrayLike, w: ArrayLike, input_shape: Shape, *, stride: IntOrSeq = 1,
                    padding: Padding = 0, dilation: IntOrSeq = 1, groups: int = 1,
                    padding_mode: str = "constant", cval: Scalar = 0,
                    layout: str = "channels_first", method: str = "auto",
                    workspace_limit: Optional[int] = None,
                    precision: Optional[str] = None) -> Array:
    """Gradient of :func:`cupyconv.conv` with respect to its input ``x``.

    Parameters
    ----------
    dy : ndarray
        Gradient of the loss with respect to ``y = conv(x, w, ...)``, of
        ``y``'s shape: ``(N, C_out, *O)`` (``(N, *O, C_out)`` channels_last).
    w : ndarray
        The weights of the forward call.
    input_shape : tuple of int
        Shape of ``x`` (full, in `layout` order).
    stride, padding, dilation, groups, padding_mode, layout
        The forward call's geometry (see :func:`cupyconv.conv`).
    cval : scalar, optional
        Ignored: the constant fill does not depend on ``x`` (its gradient is 0).
    method : {'auto', 'gemm', 'fft', 'implicit_gemm', 'winograd'}, optional
        ``implicit_gemm`` (CUDA path, tensor-core tiles included): the forward kernel on
        ``dy`` and the flipped, channel-transposed kernel for stride 1 and constant
        padding, else the column buffer with the kernel as its GEMM.
    workspace_limit : int, optional
        Bytes the column buffer may use (chunked over images, at least one).
    precision : {'highest', 'tf32'}, optional
        Arithmetic of float32 data, as in :func:`cupyconv.conv` (``'tf32'``: operands
        rounded to TF32; ``None``: ``cupyconv.config.precision``).

    Returns
    -------
    dx : ndarray
        ``input_shape``; float64 for integer inputs, else ``conv``'s dtype.
        For complex data ``dx = A^H dy`` (the adjoint of ``x -> conv(x, w)``,
        PyTorch's convention), so ``<conv(x), dy> == <x, dx>`` with
        ``<a, b> = sum(conj(a) * b)``.  Reflect/symmetric/wrap/edge padding
        folds the gradient back onto the elements the padding copied.

    Raises
    ------
    ValueError
        ``input_shape`` of the wrong rank, channels that do not match ``w``,
        or an output shape different from ``dy.shape`` (the message names
        ``input_shape``); bad geometry as in ``conv``.
    """
    xp, dy, w, result, storage, input_shape = args.gradient_arguments(   # cval: ignored,
        method, GRAD_INPUT, "input_shape", input_shape, padding_mode, cval,   # still a number
        dy=dy, w=w)
    if len(input_shape) != w.ndim:
        raise ValueError(f"input_shape must have {w.ndim} entries (the rank of w); "
                         f"got input_shape={input_shape}")
    problem = _problem("input_shape", input_shape, x_shape=input_shape, w_shape=w.shape,
                       dtype=storage, op=GRAD_INPUT,
                       **_geometry(stride, padding, dilation, groups, padding_mode, layout))
    _check_dy(problem, dy, "input_shape", input_shape)
    return _run(problem, xp, result, method, workspace_limit, precision=precision, output=dy,
                filter=w)


@compiled
def conv_grad_weight(x: ArrayLike, dy: ArrayLike, weight_shape: Shape, *, stride: IntOrSeq = 1,
                     padding: Padding = 0, dilation: IntOrSeq = 1, groups: int = 1,
                     padding_mode: str = "constant", cval: Scalar = 0,
                     layout: str = "channels_first", method: str = "auto",
                     workspace_limit: Optional[int] = None,
                     precision: Optional[str] = None) -> Array:
    """Gradient of :func:`cupyconv.conv` with respect to its weights ``w``.

    Parameters
    ----------
    x : ndarray
        The forward call's input.
    dy : ndarray
        Gradient of the loss with respect to ``y``, of ``y``'s shape.
    weight_shape : tuple of int
        Shape of ``w`` (full, in `layout` order).
    stride, padding, dilation, groups, padding_mode, cval, layout
        The forward call's geometry; ``cval`` matters here (the constant
        border multiplies the weights).
    method : {'auto', 'gemm', 'fft', 'implicit_gemm'}, optional
        ``implicit_gemm`` (CUDA path: the forward kernel, tensor-core tiles included,
        with the images as the reduction; any stride, dilation and padding mode).
    workspace_limit : int, optional
    precision : {'highest', 'tf32'}, optional
        Arithmetic of float32 data, as in :func:`cupyconv.conv` (``'tf32'``: operands
        rounded to TF32; ``None``: ``cupyconv.config.precision``).

    Returns
    -------
    dw : ndarray
        ``weight_shape``: ``dw = sum over batch chunks of dy . cols^H`` (one
        GEMM per group; chunks summed in a fixed order, bitwise reproducible).

    Raises
    ------
    ValueError
        ``weight_shape`` of the wrong rank, a channel count that does not
        match ``x``/``groups``, or an output shape different from
        ``dy.shape`` (the message names ``weight_shape``).
    """
    xp, x, dy, result, storage, weight_shape = args.gradient_arguments(
        method, GRAD_WEIGHT, "weight_shape", weight_shape, x=x, dy=dy)
    if len(weight_shape) != x.ndim:
        raise ValueError(f"weight_shape must have {x.ndim} entries (the rank of x); "
                         f"got weight_shape={weight_shape}")
    problem = _problem("weight_shape", weight_shape, x_shape=x.shape, w_shape=weight_shape,
                       dtype=storage, op=GRAD_WEIGHT, cval=cval,
                       **_geometry(stride, padding, dilation, groups, padding_mode, layout))
    _check_dy(problem, dy, "weight_shape", weight_shape)
    return _run(problem, xp, result, method, workspace_limit, precision=precision,
                activation=x, output=dy)


@compiled
def conv_grad_bias(dy: ArrayLike, *, layout: str = "channels_first") -> Array:
    """Gradient of :func:`cupyconv.conv` with respect to ``bias``.

    Parameters
    ----------
    dy : ndarray
        Gradient of the loss with respect to ``y``: ``(N, C_out, *O)``
        (``(N, *O, C_out)`` channels_last).
    layout : {'channels_first', 'channels_last'}, optional

    Returns
    -------
    db : ndarray
        ``dy`` summed over the batch and spatial axes, shape ``(C_out,)``, in the
        gradient dtype (float64 for integer ``dy``); the sum runs in the compute dtype (a
        host step: a compiled call replays it).

    Raises
    ------
    ValueError
        ``dy`` with fewer than three axes.
    """
    layout = args.normalize_layout(layout)
    xp = args.array_module_of(dy=dy)
    dy = args.as_array(xp, dy)
    args.check_dtype(dy, "dy")
    if dy.ndim < 3:
        raise ValueError(
            f"dy must have shape (N, C_out, *spatial) (channels_last: (N, *spatial, C_out)) "
            f"with at least one spatial axis; got dy.ndim={dy.ndim}")
    result = args.gradient_dtype(dy.dtype)
    channel = 1 if layout == "channels_first" else dy.ndim - 1
    axes = tuple(a for a in range(dy.ndim) if a != channel)
    return program.host_step("grad_bias", functools.partial(
        _summed, axes, args.compute_dtype(result), result), dy)


def _summed(axes, compute, result, dy):
    return dy.sum(axis=axes, dtype=compute).astype(result, copy=False)


def _padded(xp, widths, a):
    return xp.pad(a, widths)


@compiled
def conv_transpose(x: ArrayLike, w: ArrayLike, bias: Optional[ArrayLike] = None, *,
                   stride: IntOrSeq = 1, padding: Padding = 0, output_padding: IntOrSeq = 0,
                   dilation: IntOrSeq = 1, groups: int = 1, layout: str = "channels_first",
                   method: str = "auto", workspace_limit: Optional[int] = None,
                   precision: Optional[str] = None) -> Array:
    """Transposed convolution (PyTorch ``ConvTransposeNd`` semantics), any rank.

    Every input element scatters ``x[n, i, s] * w[i, o, t]`` onto output
    position ``s * stride - padding_before + t * dilation``; computed as
    :func:`conv_grad_input` of the forward convolution it transposes
    (without conjugating complex weights).

    Parameters
    ----------
    x : ndarray
        ``(N, C_in, *S)`` (channels_last: ``(N, *S, C_in)``).
    w : ndarray
        ``(C_in, C_out/groups, *K)`` as in PyTorch (channels_last:
        ``(C_in, *K, C_out/groups)``).
    bias : ndarray, optional
        ``(C_out,)``, cast to the result dtype of `x` and `w` as in :func:`cupyconv.conv`.
    stride, dilation : int or sequence of int, optional
    padding : int, sequence of int, sequence of (before, after), 'valid' or 'same', optional
        Removed from the output borders.  ``'valid'`` removes nothing;
        ``'same'`` gives ``S * stride`` outputs (TensorFlow's ``SAME``), the
        odd element removed after, and needs ``output_padding=0``.
    output_padding : int or sequence of int, optional
        Extra outputs at the end of each axis; must be smaller than
        ``max(stride, dilation)`` on that axis.
    groups, layout, method, workspace_limit
        As in :func:`conv_grad_input`.
    precision : {'highest', 'tf32'}, optional
        Arithmetic of float32 data, as in :func:`cupyconv.conv` (``'tf32'``: operands
        rounded to TF32; ``None``: ``cupyconv.config.precision``).

    Returns
    -------
    y : ndarray
        ``(N, C_out, *O)`` with
        ``O_i = (S_i - 1)*stride_i - pb_i - pa_i + dilation_i*(K_i - 1) + output_padding_i + 1``.
    """
    args.normalize_method(method, GRAD_INPUT)
    args.array_module_of(x=x, w=w, bias=bias)      # the bias is checked after the geometry
    xp, x, w = args.checked_arrays(x=x, w=w)
    layout = args.normalize_layout(layout)
    input_shape, geometry = conv_transpose_geometry(x.shape, w.shape, stride, padding,
                                                    output_padding, dilation, groups, layout)
    c_out = input_shape[-1 if layout == "channels_last" else 1]
    result, storage = args.result_dtypes(x.dtype, w.dtype, gradient=True)   # (bias cast to it)
    problem = _problem("input_shape", input_shape, x_shape=input_shape, w_shape=w.shape,
                       dtype=storage, op=GRAD_INPUT, conjugate=False,
                       layout=layout, **geometry)
    bias = check_bias(bias, c_out, xp, result)
    computed = args.with_precision(problem, precision, result, x, w)
    backend = backend_for(xp)
    choice = precheck(computed, backend, method, workspace_limit)   # before any cast
    views = logical_views(problem, xp, output=x, filter=w)
    # output_padding >= stride (allowed below dilation) gives the forward conv more
    # outputs than x has positions: those receive no input (zero gradient).
    extra = [(0, o - n) for o, n in zip(problem.out_shape, views["output"].shape[2:])]
    if any(a for _, a in extra):
        views["output"] = program.host_step("pad", functools.partial(
            _padded, xp, ((0, 0), (0, 0)) + tuple(extra)), views["output"])
    y, _ = run(computed, Operands(**views), backend, method=method,
               workspace_limit=workspace_limit, choice=choice)
    return finish(y, problem, xp, result, None, bias)
