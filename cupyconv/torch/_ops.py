"""The custom operators ``torch.ops.cupyconv.*``: real, fake and autograd implementations.

Every operator takes its geometry fully normalised (one int per spatial axis, padding as
``[before_0, after_0, before_1, ...]``, the engine's ``padding_mode`` name, a
``channels_last`` flag), so its schema is plain and ``torch.compile`` sees constants.
:mod:`cupyconv.torch.functional` normalises the user's arguments.

The backward of each operator is written with these operators, so it is itself
differentiable (double backward): with ``A_w x = conv(x, w)`` (the padding operator
included, ``cval`` excluded: the constant border does not depend on ``x``),

- ``conv``: ``dx = grad_input(dy, w) = A_w^T dy``, ``dw = grad_weight(x, dy)``, ``db =
  grad_bias(dy)``;
- ``grad_input(dy, w)`` is linear in ``dy`` and in ``w``: its vector-Jacobian products
  for a cotangent ``g`` are ``conv(g, w)`` (``cval`` 0) and ``grad_weight(g, dy)``;
- ``grad_weight(x, dy)`` (``cval`` multiplies the border): ``grad_input(dy, G)`` and
  ``conv(x, G)`` with the forward's ``cval``;
- ``grad_bias(dy)``: ``g`` broadcast back over ``dy``;
- ``conv_transpose(x, w) = A_w^T x``: ``dx = conv(dy, w)`` and ``dw = grad_weight(dy, x)``.

Only the gradients ``ctx.needs_input_grad`` asks for are computed.

:func:`run` calls an operator.  In plain eager mode (CPU or CUDA tensors of the plain
type, no ``torch.compile`` tracing, no dispatch mode or functorch transform) it calls the
operator's twin instead: a :class:`torch.autograd.Function` with the same implementation,
``setup_context`` and backward, which skips the dispatcher's custom-operator layers (their
Python autograd wrapper re-binds every argument against the schema on each call: about
0.1 ms per forward call on the CPU, the larger part of the adapter's cost on small
layers); with gradients off (a backward pass without ``create_graph``, ``torch.no_grad``)
it calls the implementation alone.  Everywhere else (FakeTensor, meta tensors, ``torch.compile``,
``torch.library.opcheck``, modes) the registered operator runs.  A backward of ``conv``
or ``conv_transpose`` (and of the gradient operators ``grad_input`` and ``grad_weight``: a
double backward's second pass) with gradients off in plain eager mode calls the
``cupyconv`` functions itself, on one array view of each tensor (:func:`_conv_gradients`,
:func:`_transpose_gradients`): the same calls the operators' implementations make.

:func:`call` is how :mod:`cupyconv.torch.functional` calls ``conv`` and
``conv_transpose``: with a plan of the geometry made once per distinct call
(:func:`conv_plan`: the operator's arguments, what its backward reads, ``cupyconv``'s
keywords) and operands already checked, a plain eager call runs a twin that takes the
plan as it is (no argument lists rebuilt, no keywords remade, no second check).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

import cupyconv
from cupyconv.api.conv import conv_problem
from cupyconv.core.args import output_shape
from cupyconv.core.transpose import conv_transpose_geometry

from . import _bridge

__all__ = ["conv", "conv_transpose", "grad_input", "grad_weight", "grad_bias", "run",
           "modes_or_transforms", "plain_eager", "conv_plan", "transpose_plan", "call"]


def _pairs(padding):
    return tuple((padding[2 * i], padding[2 * i + 1]) for i in range(len(padding) // 2))


def _spatial(shape, channels_last):
    return tuple(shape[1:-1]) if channels_last else tuple(shape[2:])


def _with_channels(n, spatial, c, channels_last):
    return [n, *spatial, c] if channels_last else [n, c, *spatial]


def _uniform(values):
    """``values`` as one int when all are equal (the form ``cupyconv`` checks fastest)."""
    first = values[0]
    return first if values.count(first) == len(values) else tuple(values)


def _geometry(stride, padding, dilation, groups, padding_mode, channels_last):
    """The keyword arguments of a ``cupyconv`` call for this geometry, defaults left out
    and a symmetric padding given per axis, each as one int where all axes agree (the
    short forms are the cheapest to check)."""
    geo = {}
    if stride.count(1) != len(stride):
        geo["stride"] = _uniform(stride)
    if any(padding):
        before, after = padding[0::2], padding[1::2]
        geo["padding"] = _uniform(before) if before == after else _pairs(padding)
    if dilation.count(1) != len(dilation):
        geo["dilation"] = _uniform(dilation)
    if groups != 1:
        geo["groups"] = groups
    if padding_mode != "constant":
        geo["padding_mode"] = padding_mode
    if channels_last:
        geo["layout"] = "channels_last"
    return geo


# --- conv -----------------------------------------------------------------------------

def _conv_keywords(stride, padding, dilation, groups, padding_mode, cval, channels_last):
    """``cupyconv.conv``'s keywords for the operator's geometry (:func:`_geometry`, and
    ``cval`` where not 0)."""
    geo = _geometry(stride, padding, dilation, groups, padding_mode, channels_last)
    if cval:
        geo["cval"] = cval
    return geo


def _conv_impl(x: Tensor, w: Tensor, bias: Optional[Tensor], stride: list[int],
               padding: list[int], dilation: list[int], groups: int, padding_mode: str,
               cval: float, channels_last: bool) -> Tensor:
    """``cupyconv.conv`` on tensors (normalised geometry; see the module docstring)."""
    return _bridge.call(cupyconv.conv, (x, w, bias), **_conv_keywords(
        stride, padding, dilation, groups, padding_mode, cval, channels_last))


conv = torch.library.custom_op("cupyconv::conv", _conv_impl, mutates_args=())


@conv.register_fake
def _(x, w, bias, stride, padding, dilation, groups, padding_mode, cval, channels_last):
    _bridge.check_tensors(x=x, w=w, bias=bias)
    shapes = (tuple(x.shape), tuple(w.shape))
    if all(isinstance(d, int) for s in shapes for d in s):   # same errors as a real run
        dtype = np.float64 if x.dtype == torch.float64 else np.float32
        conv_problem(x_shape=shapes[0], x_dtype=dtype, w_shape=shapes[1], w_dtype=dtype,
                     stride=tuple(stride), padding=_pairs(padding), dilation=tuple(dilation),
                     groups=groups, padding_mode=padding_mode, cval=cval,
                     layout="channels_last" if channels_last else "channels_first")
    out = output_shape(_spatial(x.shape, channels_last), _spatial(w.shape, channels_last),
                       _pairs(padding), stride, dilation)
    return x.new_empty(_with_channels(x.shape[0], out, w.shape[0], channels_last))


def _setup(ctx, inputs, output):
    """Saves the two tensor operands and the geometry (the arguments after the third)."""
    ctx.save_for_backward(inputs[0], inputs[1])
    geo = list(inputs[3:])
    ctx.cval = geo.pop(5) if len(geo) == 7 else 0.0       # the ops that take a cval
    ctx.geo = tuple(geo)          # (stride, padding, dilation, groups, padding_mode, cl)


def _conv(x, w, geo, cval=0.0):
    return run(conv, x, w, None, *geo[:5], cval, geo[5])


def _grad_input(dy, w, shape, geo):
    return run(grad_input, dy, w, list(shape), *geo)


def _grad_weight(x, dy, shape, geo, cval=0.0):
    return run(grad_weight, x, dy, list(shape), *geo[:5], cval, geo[5])


def _conv_gradients(dy, x, w, need, geo, cval):
    """The gradients of ``conv`` that ``need`` asks for, as its operators compute them
    (:func:`_input_gradient`, :func:`_weight_gradient`, :func:`_bias_gradient`), in one
    pass over the bridge (one array view of each tensor): a backward pass that records
    no graph needs no operator calls."""
    kw = _geometry(*geo)

    def gradients(dya, xa, wa):
        return (_input_gradient(dya, wa, xa.shape, kw) if need[0] else None,
                _weight_gradient(xa, dya, wa.shape, kw, cval) if need[1] else None,
                _bias_gradient(dya, geo[5]) if need[2] else None)
    return _bridge.call(gradients, (dy, x, w))


def _conv_backward(ctx, dy):
    x, w = ctx.saved_tensors
    need = ctx.needs_input_grad
    if not torch.is_grad_enabled() and plain_eager((dy, x, w)):
        return _conv_gradients(dy, x, w, need, ctx.geo, ctx.cval) + (None,) * 7
    dx = _grad_input(dy, w, x.shape, ctx.geo) if need[0] else None
    dw = _grad_weight(x, dy, w.shape, ctx.geo, ctx.cval) if need[1] else None
    db = run(grad_bias, dy, ctx.geo[5]) if need[2] else None
    return (dx, dw, db) + (None,) * 7


conv.register_autograd(_conv_backward, setup_context=_setup)


# --- grad_input -----------------------------------------------------------------------

def _grad_input_impl(dy: Tensor, w: Tensor, input_shape: list[int], stride: list[int],
                     padding: list[int], dilation: list[int], groups: int,
                     padding_mode: str, channels_last: bool) -> Tensor:
    """``cupyconv.conv_grad_input`` on tensors."""
    geo = _geometry(stride, padding, dilation, groups, padding_mode, channels_last)
    return _bridge.call(_input_gradient, (dy, w), tuple(input_shape), geo)


def _input_gradient(dy, w, input_shape, geo):
    """``cupyconv.conv_grad_input`` on arrays, ``geo`` the keywords of :func:`_geometry`."""
    return cupyconv.conv_grad_input(dy, w, input_shape, **geo)


grad_input = torch.library.custom_op("cupyconv::conv_grad_input", _grad_input_impl,
                                     mutates_args=())


@grad_input.register_fake
def _(dy, w, input_shape, stride, padding, dilation, groups, padding_mode, channels_last):
    return dy.new_empty(input_shape)


def _grad_input_backward(ctx, g):
    dy, w = ctx.saved_tensors
    need = ctx.needs_input_grad
    if not torch.is_grad_enabled() and plain_eager((g, dy, w)):
        kw = _geometry(*ctx.geo)

        def gradients(ga, dya, wa):        # one pass, as _conv and _grad_weight compute
            return (cupyconv.conv(ga, wa, **kw) if need[0] else None,
                    _weight_gradient(ga, dya, wa.shape, kw, 0.0) if need[1] else None)
        return _bridge.call(gradients, (g, dy, w)) + (None,) * 7
    ddy = _conv(g, w, ctx.geo) if need[0] else None
    dw = _grad_weight(g, dy, w.shape, ctx.geo) if need[1] else None
    return (ddy, dw) + (None,) * 7


grad_input.register_autograd(_grad_input_backward, setup_context=_setup)


# --- grad_weight ----------------------------------------------------------------------

def _grad_weight_impl(x: Tensor, dy: Tensor, weight_shape: list[int], stride: list[int],
                      padding: list[int], dilation: list[int], groups: int,
                      padding_mode: str, cval: float, channels_last: bool) -> Tensor:
    """``cupyconv.conv_grad_weight`` on tensors."""
    geo = _geometry(stride, padding, dilation, groups, padding_mode, channels_last)
    return _bridge.call(_weight_gradient, (x, dy), tuple(weight_shape), geo, cval)


def _weight_gradient(x, dy, weight_shape, geo, cval):
    """``cupyconv.conv_grad_weight`` on arrays, ``geo`` the keywords of :func:`_geometry`
    (``cval`` passed where not 0)."""
    if cval:
        return cupyconv.conv_grad_weight(x, dy, weight_shape, **geo, cval=cval)
    return cupyconv.conv_grad_weight(x, dy, weight_shape, **geo)


grad_weight = torch.library.custom_op("cupyconv::conv_grad_weight", _grad_weight_impl,
                                      mutates_args=())


@grad_weight.register_fake
def _(x, dy, weight_shape, stride, padding, dilation, groups, padding_mode, cval,
      channels_last):
    return x.new_empty(weight_shape)


def _grad_weight_backward(ctx, g):
    x, dy = ctx.saved_tensors
    need = ctx.needs_input_grad
    if not torch.is_grad_enabled() and plain_eager((g, x, dy)):
        kw = _geometry(*ctx.geo)
        conv_kw = _conv_keywords(*ctx.geo[:5], ctx.cval, ctx.geo[5])

        def gradients(ga, xa, dya):        # one pass, as _grad_input and _conv compute
            return (_input_gradient(dya, ga, xa.shape, kw) if need[0] else None,
                    cupyconv.conv(xa, ga, **conv_kw) if need[1] else None)
        return _bridge.call(gradients, (g, x, dy)) + (None,) * 8
    dx = _grad_input(dy, g, x.shape, ctx.geo) if need[0] else None
    ddy = _conv(x, g, ctx.geo, ctx.cval) if need[1] else None
    return (dx, ddy) + (None,) * 8


grad_weight.register_autograd(_grad_weight_backward, setup_context=_setup)


# --- grad_bias ------------------------------------------------------------------------

def _grad_bias_impl(dy: Tensor, channels_last: bool) -> Tensor:
    """``cupyconv.conv_grad_bias`` on tensors."""
    return _bridge.call(_bias_gradient, (dy,), channels_last)


def _bias_gradient(dy, channels_last):
    """``cupyconv.conv_grad_bias`` on an array."""
    return cupyconv.conv_grad_bias(
        dy, layout="channels_last" if channels_last else "channels_first")


grad_bias = torch.library.custom_op("cupyconv::conv_grad_bias", _grad_bias_impl,
                                    mutates_args=())


@grad_bias.register_fake
def _(dy, channels_last):
    return dy.new_empty(dy.shape[-1 if channels_last else 1])


def _grad_bias_setup(ctx, inputs, output):
    ctx.shape, ctx.cl = inputs[0].shape, inputs[1]


def _grad_bias_backward(ctx, g):
    n = len(ctx.shape)
    view = [1] * n
    view[n - 1 if ctx.cl else 1] = g.shape[0]
    return g.reshape(view).expand(ctx.shape), None


grad_bias.register_autograd(_grad_bias_backward, setup_context=_grad_bias_setup)


# --- conv_transpose -------------------------------------------------------------------

def _transpose_keywords(stride, padding, output_padding, dilation, groups, channels_last):
    """``cupyconv.conv_transpose``'s keywords for the operator's geometry."""
    return dict(_geometry(stride, padding, dilation, groups, "constant", channels_last),
                output_padding=tuple(output_padding))


def _transpose_impl(x: Tensor, w: Tensor, bias: Optional[Tensor], stride: list[int],
                    padding: list[int], output_padding: list[int], dilation: list[int],
                    groups: int, channels_last: bool) -> Tensor:
    """``cupyconv.conv_transpose`` on tensors."""
    return _bridge.call(cupyconv.conv_transpose, (x, w, bias), **_transpose_keywords(
        stride, padding, output_padding, dilation, groups, channels_last))


conv_transpose = torch.library.custom_op("cupyconv::conv_transpose", _transpose_impl,
                                         mutates_args=())


@conv_transpose.register_fake
def _(x, w, bias, stride, padding, output_padding, dilation, groups, channels_last):
    _bridge.check_tensors(x=x, w=w, bias=bias)
    shape, _ = conv_transpose_geometry(
        tuple(x.shape), tuple(w.shape), tuple(stride), _pairs(padding),
        tuple(output_padding), tuple(dilation), groups,
        "channels_last" if channels_last else "channels_first")
    return x.new_empty(shape)


def _transpose_setup(ctx, inputs, output):
    x, w, bias, stride, padding, output_padding, dilation, groups, cl = inputs
    ctx.save_for_backward(x, w)
    ctx.geo = (stride, padding, dilation, groups, "constant", cl)


def _edges(x, sizes, cl):
    """``x`` (a tensor or an array) cut (``sizes`` smaller) or zero-padded (larger) at
    the end of each spatial axis."""
    first = 1 if cl else 2
    cut = [slice(None)] * len(x.shape)
    for i, n in enumerate(sizes):
        if x.shape[first + i] > n:
            cut[first + i] = slice(0, n)
    if any(c.stop is not None for c in cut):
        x = x[tuple(cut)]
    extra = [n - x.shape[first + i] for i, n in enumerate(sizes)]
    if not any(extra):
        return x
    if not isinstance(x, Tensor):
        widths = [(0, 0)] * len(x.shape)
        widths[first:first + len(extra)] = [(0, e) for e in extra]
        return np.pad(x, widths)
    widths = [0, 0] if cl else []
    for e in reversed(extra):
        widths += [0, e]
    return torch.nn.functional.pad(x, widths)


def _conv_sizes(dy_shape, w_shape, geo):
    """The output sizes of the convolution that ``conv_transpose`` (geometry ``geo``)
    transposes, on an input of ``dy_shape``: its gradient's rows reach past ``x``'s end
    when ``output_padding >= stride``."""
    stride, padding, dilation, _, _, cl = geo
    return output_shape(_spatial(dy_shape, cl), _spatial(w_shape, cl), _pairs(padding),
                        stride, dilation)


def _transpose_gradients(dy, x, w, need, geo):
    """The gradients of ``conv_transpose`` that ``need`` asks for, as its backward's
    operators compute them, in one pass over the bridge (a backward pass that records no
    graph; as :func:`_conv_gradients` for ``conv``)."""
    kw = _geometry(*geo)
    cl = geo[5]

    def gradients(dya, xa, wa):
        dx = dw = db = None
        if need[0]:
            dx = _edges(cupyconv.conv(dya, wa, **kw), _spatial(xa.shape, cl), cl)
        if need[1]:
            dw = _weight_gradient(dya, _edges(xa, _conv_sizes(dya.shape, wa.shape, geo), cl),
                                  wa.shape, kw, 0.0)
        if need[2]:
            db = _bias_gradient(dya, cl)
        return dx, dw, db
    return _bridge.call(gradients, (dy, x, w))


def _transpose_backward(ctx, dy):
    x, w = ctx.saved_tensors
    cl = ctx.geo[5]
    need = ctx.needs_input_grad
    if not torch.is_grad_enabled() and plain_eager((dy, x, w)):
        return _transpose_gradients(dy, x, w, need, ctx.geo) + (None,) * 6
    dx = dw = db = None
    if need[0]:
        dx = _edges(_conv(dy, w, ctx.geo), _spatial(x.shape, cl), cl)
    if need[1]:
        dw = _grad_weight(dy, _edges(x, _conv_sizes(dy.shape, w.shape, ctx.geo), cl),
                          w.shape, ctx.geo)
    if need[2]:
        db = run(grad_bias, dy, cl)
    return (dx, dw, db) + (None,) * 6


conv_transpose.register_autograd(_transpose_backward, setup_context=_transpose_setup)


# --- plain eager calls ----------------------------------------------------------------

_PLAIN = (torch.Tensor, torch.nn.Parameter)


try:
    _DISPATCH_MODES = torch._C._len_torch_dispatch_stack
    _FUNCTORCH_LEVEL = torch._C._functorch.maybe_current_level
except AttributeError:             # pragma: no cover - a torch without these queries
    _DISPATCH_MODES = _FUNCTORCH_LEVEL = None
_COMPILING = torch.compiler.is_compiling
_HAS_TORCH_FUNCTION = torch.overrides.has_torch_function


def modes_or_transforms():
    """Whether a dispatch mode or a functorch transform (``vmap``, ``grad``) is active,
    or this torch cannot tell (then the registered operator runs)."""
    if _DISPATCH_MODES is None:    # pragma: no cover
        return True
    return _DISPATCH_MODES() > 0 or _FUNCTORCH_LEVEL() is not None


def plain_eager(args):
    """Whether a call with ``args`` may run the operator's twin (the module docstring):
    not traced by ``torch.compile``, every tensor a plain CPU or CUDA ``Tensor`` or
    ``Parameter`` with no ``__torch_function__`` override or mode, no dispatch mode and
    no functorch transform."""
    if _COMPILING() or modes_or_transforms():
        return False
    tensors = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if type(a) not in _PLAIN or not (a.is_cpu or a.is_cuda):
                return False
            tensors.append(a)
    return not _HAS_TORCH_FUNCTION(tensors)


def _twin(name, impl, setup, backward):
    """The :class:`torch.autograd.Function` of one operator: its implementation,
    ``setup_context`` and backward, as registered.  Its ``forward`` takes ``ctx`` and
    calls ``setup`` itself: a separate ``setup_context`` makes ``apply`` bind the
    arguments with :func:`inspect.signature` on every call (~0.1 ms)."""
    def forward(ctx, *args):
        out = impl(*args)
        setup(ctx, args, out)
        return out
    return type(name, (torch.autograd.Function,), {
        "__doc__": f"``{impl.__name__}`` with the autograd formula of its operator.",
        "forward": staticmethod(forward), "backward": staticmethod(backward),
        "impl": staticmethod(impl)})


_TWINS = {
    conv: _twin("Conv", _conv_impl, _setup, _conv_backward),
    grad_input: _twin("GradInput", _grad_input_impl, _setup, _grad_input_backward),
    grad_weight: _twin("GradWeight", _grad_weight_impl, _setup, _grad_weight_backward),
    grad_bias: _twin("GradBias", _grad_bias_impl, _grad_bias_setup, _grad_bias_backward),
    conv_transpose: _twin("ConvTranspose", _transpose_impl, _transpose_setup,
                          _transpose_backward),
}


def run(op, *args):
    """``op(*args)`` for one of this module's operators: in plain eager mode
    (:func:`plain_eager`) its autograd-function twin, or with gradients off (a backward
    pass without ``create_graph``, ``torch.no_grad``) its implementation alone; else the
    registered operator."""
    if not plain_eager(args):
        return op(*args)
    twin = _TWINS[op]
    return twin.apply(*args) if torch.is_grad_enabled() else twin.impl(*args)


# --- the functions' calls -------------------------------------------------------------

def conv_plan(stride, padding, dilation, groups, padding_mode, cval, channels_last):
    """``(arguments, geo, cval, keywords)`` of a ``conv`` call with this normalised
    geometry, made once per distinct call (:mod:`cupyconv.torch.functional` remembers
    it): the operator's arguments after the tensors, the ``ctx.geo`` and ``ctx.cval``
    its backward reads (as :func:`_setup` saves them) and ``cupyconv.conv``'s keywords
    (as :func:`_conv_impl` makes them)."""
    args = (list(stride), list(padding), list(dilation), groups, padding_mode, cval,
            channels_last)
    return args, (*args[:5], channels_last), cval, _conv_keywords(*args)


def transpose_plan(stride, padding, output_padding, dilation, groups, channels_last):
    """:func:`conv_plan` for ``conv_transpose`` (``cval`` 0; ``ctx.geo`` as
    :func:`_transpose_setup` saves it)."""
    args = (list(stride), list(padding), list(output_padding), list(dilation), groups,
            channels_last)
    return (args, (args[0], args[1], args[3], groups, "constant", channels_last), 0.0,
            _transpose_keywords(*args))


def _planned(name, function, backward):
    """The :class:`torch.autograd.Function` of a plain eager call of ``conv`` or
    ``conv_transpose`` with a plan (:func:`conv_plan`): the operator's twin
    (:func:`_twin`) with its geometry prepared once, ``cupyconv.<function>`` called on
    operands already checked, and the operator's backward (whose trailing ``None``
    gradients are those of the geometry arguments)."""
    def forward(ctx, x, w, bias, plan):
        ctx.geo, ctx.cval = plan[1], plan[2]
        ctx.save_for_backward(x, w)
        return _bridge.call_checked(getattr(cupyconv, function), (x, w, bias), **plan[3])

    def planned_backward(ctx, dy):
        return backward(ctx, dy)[:4]
    return type(name, (torch.autograd.Function,), {
        "__doc__": f"``cupyconv.{function}`` with the autograd formula of its operator.",
        "forward": staticmethod(forward), "backward": staticmethod(planned_backward)})


_PLANNED = {
    conv: ("conv", _planned("PlannedConv", "conv", _conv_backward)),
    conv_transpose: ("conv_transpose", _planned("PlannedConvTranspose", "conv_transpose",
                                                _transpose_backward)),
}


def call(op, plain, x, w, bias, plan):
    """``op`` (:data:`conv` or :data:`conv_transpose`) on operands that
    ``_bridge.device_of`` accepted, with the ``plan`` of its geometry: when ``plain``
    (:func:`plain_eager` of the operands) its planned autograd function, or with
    gradients off the ``cupyconv`` call alone; else the registered operator."""
    if not plain:
        return op(x, w, bias, *plan[0])
    function, planned = _PLANNED[op]
    if torch.is_grad_enabled():
        return planned.apply(x, w, bias, plan)
    return _bridge.call_checked(getattr(cupyconv, function), (x, w, bias), **plan[3])
