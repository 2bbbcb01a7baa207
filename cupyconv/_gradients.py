"""Gradients of :func:`cupyconv.conv`, and ``conv_transpose``.

Validation reuses :meth:`ConvProblem.create` (the forward problem the
gradient belongs to) and the ``_args`` normalisers; the work runs on the
backend in force: :mod:`cupyconv._numpy_grad` for NumPy arrays,
:mod:`cupyconv._engine.grad` for the ``cuda`` and ``emulated`` backends.
"""
from __future__ import annotations

import numpy as np

from . import _args, _numpy_grad
from ._backend import get_backend
from ._conv import _check_cval, finish_conv, logical_views
from ._problem import ConvProblem

__all__ = ["conv_grad_input", "conv_grad_weight", "conv_grad_bias", "conv_transpose",
           "GRAD_METHODS"]

#: ``method=`` values of the gradient functions: the column-buffer GEMM
#: (``gemm``) is the one algorithm; ``auto`` picks it.
GRAD_METHODS = ("auto", "gemm")


def _float_result(*dtypes):
    """Result dtype of a gradient: as ``conv``'s, but integers give float64."""
    dtype = _args.result_dtype(*dtypes)
    return np.dtype(np.float64) if dtype.kind in "biu" else dtype


def _shape_arg(shape, name, ndim, other):
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {shape!r}") from None
    if len(shape) != ndim:
        raise ValueError(
            f"{name} must have {ndim} entries (the rank of {other}); got {name}={shape}")
    out = []
    for i, s in enumerate(shape):
        s = _args._as_int(s, f"{name}[{i}]")
        if s < 0:
            raise ValueError(f"{name}[{i}] must be >= 0, got {s}")
        out.append(s)
    return tuple(out)


def _problem(name, shape, *, x_shape, w_shape, dtype, geometry):
    """The forward problem; its errors name the shape argument being checked."""
    try:
        return ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=dtype, **geometry)
    except ValueError as exc:
        raise ValueError(f"{name}={shape} does not fit this convolution: {exc}") from None


def _check_dy(problem, dy, name, shape):
    if tuple(dy.shape) != tuple(problem.y_shape):
        raise ValueError(
            f"dy has shape {tuple(dy.shape)}, but the convolution with {name}={shape} "
            f"produces outputs of shape {tuple(problem.y_shape)}; {name} is inconsistent "
            "with dy (or the geometry is)")


def _run(kind, problem, a, b, xp, *, conjugate, workspace_limit):
    """Dispatch like ``_dispatch.execute``: NumPy backend, or the CUDA engine."""
    if problem.is_empty:
        shape = ((problem.batch, problem.in_channels) + problem.in_shape if kind == "input"
                 else (problem.out_channels, problem.in_channels // problem.groups)
                 + problem.kernel_shape)
        return xp.zeros(shape, dtype=problem.dtype)
    backend = get_backend(xp)
    if backend != "numpy" or xp is not np:
        from ._engine import grad as engine_grad
        return engine_grad.execute(kind, problem, a, b, conjugate=conjugate,
                                   workspace_limit=workspace_limit, xp=xp, backend=backend)
    return _numpy_grad.run(kind, problem.with_(layout="channels_first"), a, b,
                           conjugate=conjugate, workspace_limit=workspace_limit)


def _geometry(stride, padding, dilation, groups, padding_mode, cval, layout):
    return dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                padding_mode=padding_mode, cval=cval, layout=layout)


def _grad_input(dy, w, input_shape, geometry, *, method, names=("dy", "w"), bias=None):
    """Validate a ``dy -> dx`` call; returns ``(problem, dy, w, bias, xp, result)``."""
    _args.normalize_method(method, GRAD_METHODS)
    xp = _args.array_module_of(**{names[0]: dy, names[1]: w}, bias=bias)
    dy, w = xp.asarray(dy), xp.asarray(w)
    _args.check_dtype(dy, names[0])
    _args.check_dtype(w, names[1])
    dtypes = [dy.dtype, w.dtype]
    if bias is not None:
        bias = xp.asarray(bias)
        _args.check_dtype(bias, "bias")
        dtypes.append(bias.dtype)
    result = _float_result(*dtypes)
    input_shape = _shape_arg(input_shape, "input_shape", w.ndim, names[1])
    problem = _problem("input_shape", input_shape, x_shape=input_shape, w_shape=w.shape,
                       dtype=_args.compute_dtype(result), geometry=dict(geometry, cval=0))
    return problem, dy, w, bias, xp, result


def conv_grad_input(dy, w, input_shape, *, stride=1, padding=0, dilation=1, groups=1,
                    padding_mode="constant", cval=0, layout="channels_first",
                    method="auto", workspace_limit=None):
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
    method : {'auto', 'gemm'}, optional
    workspace_limit : int, optional
        Bytes the column buffer may use (chunked over images, at least one).

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
    geometry = _geometry(stride, padding, dilation, groups, padding_mode, cval, layout)
    problem, dy, w, _, xp, result = _grad_input(dy, w, input_shape, geometry, method=method)
    _check_dy(problem, dy, "input_shape", tuple(input_shape))
    dy_cf, w_cf, _, _ = logical_views(problem, dy, w)
    dx = _run("input", problem, dy_cf, w_cf, xp, conjugate=True,
              workspace_limit=workspace_limit)
    return finish_conv(dx, problem, None, xp, result, None)


def conv_grad_weight(x, dy, weight_shape, *, stride=1, padding=0, dilation=1, groups=1,
                     padding_mode="constant", cval=0, layout="channels_first",
                     method="auto", workspace_limit=None):
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
    method : {'auto', 'gemm'}, optional
    workspace_limit : int, optional

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
    _args.normalize_method(method, GRAD_METHODS)
    xp = _args.array_module_of(x=x, dy=dy)
    x, dy = xp.asarray(x), xp.asarray(dy)
    _args.check_dtype(x, "x")
    _args.check_dtype(dy, "dy")
    result = _float_result(x.dtype, dy.dtype)
    compute = _args.compute_dtype(result)
    _check_cval(cval, compute)
    weight_shape = _shape_arg(weight_shape, "weight_shape", x.ndim, "x")
    geometry = _geometry(stride, padding, dilation, groups, padding_mode, cval, layout)
    problem = _problem("weight_shape", weight_shape, x_shape=x.shape, w_shape=weight_shape,
                       dtype=compute, geometry=geometry)
    _check_dy(problem, dy, "weight_shape", weight_shape)
    x_cf, dy_cf, _, _ = logical_views(problem, x, dy)
    dw = _run("weight", problem, x_cf, dy_cf, xp, conjugate=True,
              workspace_limit=workspace_limit)
    return finish_conv(dw, problem, None, xp, result, None)


def conv_grad_bias(dy, *, layout="channels_first"):
    """Gradient of :func:`cupyconv.conv` with respect to ``bias``: ``dy`` summed
    over the batch and spatial axes, shape ``(C_out,)``."""
    layout = _args.normalize_layout(layout)
    xp = _args.array_module_of(dy=dy)
    dy = xp.asarray(dy)
    _args.check_dtype(dy, "dy")
    if dy.ndim < 3:
        raise ValueError(
            f"dy must have shape (N, C_out, *spatial) (channels_last: (N, *spatial, C_out)) "
            f"with at least one spatial axis; got dy.ndim={dy.ndim}")
    result = _float_result(dy.dtype)
    channel = 1 if layout == "channels_first" else dy.ndim - 1
    axes = tuple(a for a in range(dy.ndim) if a != channel)
    return dy.sum(axis=axes, dtype=_args.compute_dtype(result)).astype(result, copy=False)


def conv_transpose(x, w, bias=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                   groups=1, layout="channels_first", method="auto", workspace_limit=None):
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
        ``(C_out,)``.
    stride, dilation : int or sequence of int, optional
    padding : int, sequence of int, or sequence of (before, after), optional
        Removed from the output borders (no ``'same'``/``'valid'``).
    output_padding : int or sequence of int, optional
        Extra outputs at the end of each axis; must be smaller than
        ``max(stride, dilation)`` on that axis.
    groups, layout, method, workspace_limit
        As in :func:`conv_grad_input`.

    Returns
    -------
    y : ndarray
        ``(N, C_out, *O)`` with
        ``O_i = (S_i - 1)*stride_i - pb_i - pa_i + dilation_i*(K_i - 1) + output_padding_i + 1``.
    """
    xp = _args.array_module_of(x=x, w=w, bias=bias)
    x, w = xp.asarray(x), xp.asarray(w)
    layout = _args.normalize_layout(layout)
    if x.ndim != w.ndim or x.ndim < 3:
        raise ValueError(
            f"x must be (N, C_in, *spatial) and w (C_in, C_out/groups, *kernel) of the same "
            f"rank >= 3; got x.ndim={x.ndim}, w.ndim={w.ndim}")
    r = x.ndim - 2
    if isinstance(padding, str):
        raise ValueError(f"conv_transpose takes explicit padding (int, per-axis ints or "
                         f"(before, after) pairs); got padding={padding!r}")
    stride = _args.normalize_per_axis(stride, r, "stride")
    dilation = _args.normalize_per_axis(dilation, r, "dilation")
    pads = _args.normalize_padding(padding, r, None, None, stride, dilation)
    out_pad = _args.normalize_per_axis(output_padding, r, "output_padding", minimum=0)
    cl = layout == "channels_last"
    n, c_in, s = x.shape[0], x.shape[-1 if cl else 1], x.shape[1:-1] if cl else x.shape[2:]
    wc, cog, ks = w.shape[0], w.shape[-1 if cl else 1], w.shape[1:-1] if cl else w.shape[2:]
    if wc != c_in:
        raise ValueError(f"w has {wc} input channels (axis 0) but x has C_in={c_in}")
    out = []
    for i in range(r):
        if out_pad[i] >= max(stride[i], dilation[i]):
            raise ValueError(
                f"output_padding must be smaller than either stride or dilation; got "
                f"output_padding[{i}]={out_pad[i]}, stride[{i}]={stride[i]}, "
                f"dilation[{i}]={dilation[i]}")
        o = ((s[i] - 1) * stride[i] - sum(pads[i]) + dilation[i] * (ks[i] - 1)
             + out_pad[i] + 1)
        if o < 1:
            raise ValueError(f"empty output on spatial axis {i}: size {o} from input size "
                             f"{s[i]}, padding {pads[i]} and kernel {ks[i]}")
        out.append(o)
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if c_in % groups:
        raise ValueError(f"x has C_in={c_in} channels, not divisible by groups={groups}")
    c_out = cog * int(groups)
    input_shape = ((n,) + tuple(out) + (c_out,)) if cl else ((n, c_out) + tuple(out))
    geometry = _geometry(stride, pads, dilation, groups, "constant", 0, layout)
    problem, x, w, bias, xp, result = _grad_input(x, w, input_shape, geometry, method=method,
                                                  names=("x", "w"), bias=bias)
    if bias is not None:
        if tuple(bias.shape) != (c_out,):
            raise ValueError(f"bias must have shape (C_out,) = ({c_out},); got {tuple(bias.shape)}")
        bias = bias.astype(problem.dtype, copy=False)
    x_cf, w_cf, _, _ = logical_views(problem, x, w)
    # output_padding >= stride (allowed below dilation) gives the forward conv more
    # outputs than x has positions: those receive no input (zero gradient).
    extra = [(0, o - si) for o, si in zip(problem.out_shape, s)]
    if any(a for _, a in extra):
        x_cf = xp.pad(x_cf, ((0, 0), (0, 0)) + tuple(extra))
    y = _run("input", problem, x_cf, w_cf, xp, conjugate=False,
             workspace_limit=workspace_limit)
    return finish_conv(y, problem, bias, xp, result, None)
