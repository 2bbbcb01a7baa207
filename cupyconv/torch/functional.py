"""``conv`` and ``conv_transpose`` on torch tensors: arguments as ``cupyconv``'s, autograd."""
from __future__ import annotations

import torch

from cupyconv._lru import LRU, clears
from cupyconv._vocabulary import MAX_RANK
from cupyconv.core.args import normalize_transpose_padding
from cupyconv.core import args

from . import _bridge, _ops

__all__ = ["conv", "conv_transpose"]


#: Whether autocast is on for any device (one query; ``True`` where torch cannot tell).
_ANY_AUTOCAST = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _autocast(x, w, bias):
    """The operands cast as ``torch.nn.functional.conv3d``'s under ``torch.autocast``.

    When autocast is on for the tensors' device, float16/bfloat16/float32 operands are
    cast to its dtype (float64 stays, as autocast leaves double precision alone).
    """
    if not _ANY_AUTOCAST():
        return x, w, bias
    device = getattr(x, "device", None)
    if device is None or device.type not in ("cpu", "cuda") or not \
            torch.is_autocast_enabled(device.type):
        return x, w, bias
    dtype = torch.get_autocast_dtype(device.type)

    def cast(t):
        eligible = (isinstance(t, torch.Tensor) and t.is_floating_point()
                    and t.dtype != torch.float64)
        return t.to(dtype) if eligible else t
    return cast(x), cast(w), cast(bias)


def _shapes(x_shape, w_shape, stride, dilation, groups, layout, what):
    """``(unbatched, x_shape, cl, stride, dilation, groups)``: the geometry both
    functions share, checked, ``x_shape`` with its batch axis."""
    unbatched = len(x_shape) == len(w_shape) - 1
    if unbatched:                          # PyTorch's unbatched (C, *S): a batch of one
        x_shape = (1, *x_shape)
    r = len(w_shape) - 2
    if len(x_shape) != len(w_shape) or not 1 <= r <= MAX_RANK:
        raise ValueError(
            f"x must be (N, C, *spatial) or unbatched (C, *spatial) and w {what} with 1 to "
            f"{MAX_RANK} spatial axes; got x.ndim={len(x_shape) - unbatched}, "
            f"w.ndim={len(w_shape)}")
    cl = args.normalize_layout(layout) == "channels_last"
    stride = args.normalize_per_axis(stride, r, "stride")
    dilation = args.normalize_per_axis(dilation, r, "dilation")
    groups = args.as_int(groups, "groups", minimum=1)
    return unbatched, x_shape, cl, stride, dilation, groups


def _flat(pairs):
    return tuple(int(p) for pair in pairs for p in pair)


def _spatial(shape, cl):
    return tuple(shape[1:-1]) if cl else tuple(shape[2:])


def _conv_geometry(x_shape, w_shape, stride, padding, dilation, groups, padding_mode, cval,
                   layout):
    """``(unbatched, plan)``: ``plan`` the geometry of ``torch.ops.cupyconv.conv``
    prepared for its calls (:func:`cupyconv.torch._ops.conv_plan`)."""
    unbatched, x_shape, cl, stride, dilation, groups = _shapes(
        x_shape, w_shape, stride, dilation, groups, layout, "(C_out, C_in/groups, *K)")
    pads = args.normalize_padding(padding, len(stride), _spatial(x_shape, cl),
                                  _spatial(w_shape, cl), stride, dilation)
    mode = args.normalize_padding_mode(padding_mode)
    if isinstance(cval, bool) or not isinstance(cval, (int, float)):
        raise TypeError(f"cval must be a real number; got {cval!r}")
    return unbatched, _ops.conv_plan(stride, _flat(pads), dilation, groups, mode,
                                     float(cval), cl)


def _transpose_geometry(x_shape, w_shape, stride, padding, output_padding, dilation, groups,
                        layout):
    """``(unbatched, plan)`` of ``torch.ops.cupyconv.conv_transpose``
    (:func:`cupyconv.torch._ops.transpose_plan`)."""
    unbatched, x_shape, cl, stride, dilation, groups = _shapes(
        x_shape, w_shape, stride, dilation, groups, layout, "(C_in, C_out/groups, *K)")
    pads, out_pad = normalize_transpose_padding(padding, output_padding,
                                                 _spatial(x_shape, cl), _spatial(w_shape, cl),
                                                 stride, dilation)
    return unbatched, _ops.transpose_plan(stride, _flat(pads), out_pad, dilation, groups, cl)


#: ``(function, its arguments, their types) -> its result`` of the two functions above:
#: a layer calls with the same arguments and shapes every time (emptied by
#: ``cupyconv.clear_caches``).
_NORMALISED = LRU(256)

#: ``(function, x shape, w shape, the other arguments' ids) -> (those arguments, the
#: result)``: the calls of :data:`_NORMALISED` whose other arguments are all immutable
#: (numbers, strings, tuples of them), found again by identity when a caller passes the
#: same objects (a layer its own attributes, a call site its literals), without the
#: typed key.  It holds the arguments, so no other object takes their ids.
_BY_IDENTITY = {}

#: The types of an immutable argument (a tuple's elements too) for :data:`_BY_IDENTITY`.
_IMMUTABLE = frozenset((int, float, str, bool, type(None)))


@clears
def _clear_by_identity():
    _BY_IDENTITY.clear()


def _kinds(value):
    """``value``'s type, or its elements' for a tuple: a cache key part that tells ``1``
    from ``True`` and ``1.0``, which compare equal but normalise differently."""
    return tuple(map(_kinds, value)) if type(value) is tuple else type(value)


def _immutable(value):
    if type(value) is tuple:
        return all(map(_immutable, value))
    return type(value) in _IMMUTABLE


def _normalised(plain, fn, x_shape, w_shape, *geometry):
    """``fn(x_shape, w_shape, *geometry)``, remembered in :data:`_NORMALISED` when the
    arguments are hashable and the call is ``plain``
    (:func:`cupyconv.torch._ops.plain_eager`: not while ``torch.compile`` traces or a
    mode runs, where shapes may be symbolic), and in :data:`_BY_IDENTITY` when
    ``geometry`` is immutable; errors are raised every time."""
    if not plain:
        return fn(x_shape, w_shape, *geometry)
    ids = (fn, x_shape, w_shape, *map(id, geometry))
    hit = _BY_IDENTITY.get(ids)
    if hit is not None:            # the same immutable objects: the same values and types
        return hit[1]
    arguments = (x_shape, w_shape, *geometry)
    try:
        key = (fn, arguments, _kinds(arguments))
        hit = _NORMALISED.get(key)
    except TypeError:                      # a list, or another unhashable argument
        return fn(*arguments)
    if hit is None:
        hit = fn(*arguments)
        _NORMALISED.put(key, hit)
    if all(map(_immutable, geometry)):
        if len(_BY_IDENTITY) >= 256:
            _BY_IDENTITY.clear()
        _BY_IDENTITY[ids] = (geometry, hit)
    return hit


def _checked(x, w, bias):
    """The operands cast under autocast (:func:`_autocast`), checked."""
    x, w, bias = _autocast(x, w, bias)
    _bridge.device_of((x, w, bias), ("x", "w", "bias"))
    return x, w, bias


def conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
         padding_mode="zeros", cval=0, layout="channels_first"):
    """Batched N-D convolution of torch tensors (:func:`cupyconv.conv`), differentiable.

    Parameters
    ----------
    x : torch.Tensor
        ``(N, C_in, *S)`` (``layout='channels_last'``: ``(N, *S, C_in)``), or unbatched
        without ``N``; any strides.  CPU or CUDA; float16, bfloat16, float32 or float64.
    w : torch.Tensor
        ``(C_out, C_in/groups, *K)`` (channels_last: ``(C_out, *K, C_in/groups)``), 1 to
        8 spatial axes, the device and dtype of `x`.
    bias : torch.Tensor, optional
        ``(C_out,)``.
    stride, padding, dilation, groups, padding_mode, cval, layout
        As in :func:`cupyconv.conv`; `padding_mode` takes PyTorch's names (``'zeros'``,
        the default, ``'reflect'``, ``'replicate'``, ``'circular'``) and NumPy's.

    Returns
    -------
    y : torch.Tensor
        Contiguous, on `x`'s device, of its dtype (autocast's under ``torch.autocast``).
        Gradients flow to `x`, `w` and `bias`, twice over (double backward).

    Raises
    ------
    TypeError
        A dtype other than those above (integers included), or operands of different
        dtypes.
    RuntimeError
        Operands on different devices, or a device other than the CPU and CUDA.
    ValueError
        Bad geometry, as :func:`cupyconv.conv`.
    """
    x, w, bias = _checked(x, w, bias)
    plain = _ops.plain_eager((x, w, bias))
    unbatched, plan = _normalised(
        plain, _conv_geometry, x.shape, w.shape, stride, padding, dilation, groups,
        padding_mode, cval, layout)
    y = _ops.call(_ops.conv, plain, x.unsqueeze(0) if unbatched else x, w, bias, plan)
    return y[0] if unbatched else y


def conv_transpose(x, w, bias=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                   groups=1, layout="channels_first"):
    """Transposed N-D convolution of torch tensors (:func:`cupyconv.conv_transpose`).

    Parameters
    ----------
    x : torch.Tensor
        ``(N, C_in, *S)`` (channels_last ``(N, *S, C_in)``) or unbatched.
    w : torch.Tensor
        ``(C_in, C_out/groups, *K)`` as in PyTorch (channels_last
        ``(C_in, *K, C_out/groups)``).
    bias : torch.Tensor, optional
        ``(C_out,)``.
    stride, padding, output_padding, dilation, groups, layout
        As in :func:`cupyconv.conv_transpose`.

    Returns
    -------
    y : torch.Tensor
        ``O_i = (S_i - 1)*stride_i - pb_i - pa_i + dilation_i*(K_i - 1) +
        output_padding_i + 1``; differentiable twice, as :func:`conv`.
    """
    x, w, bias = _checked(x, w, bias)
    plain = _ops.plain_eager((x, w, bias))
    unbatched, plan = _normalised(
        plain, _transpose_geometry, x.shape, w.shape, stride, padding, output_padding,
        dilation, groups, layout)
    y = _ops.call(_ops.conv_transpose, plain, x.unsqueeze(0) if unbatched else x, w, bias,
                  plan)
    return y[0] if unbatched else y
