"""``conv`` and ``conv_transpose`` on torch tensors: arguments as ``cupyconv``'s, autograd."""
from __future__ import annotations

import torch

from cupyconv._vocabulary import MAX_RANK
from cupyconv.core.args import normalize_transpose_padding
from cupyconv.core import args

from . import _bridge, _ops

__all__ = ["conv", "conv_transpose"]


def _autocast(x, w, bias):
    """The operands cast as ``torch.nn.functional.conv3d``'s under ``torch.autocast``.

    When autocast is on for the tensors' device, float16/bfloat16/float32 operands are
    cast to its dtype (float64 stays, as autocast leaves double precision alone).
    """
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


def _prepare(x, w, bias, stride, dilation, groups, layout, what):
    """Checked operands and the shared geometry: ``(x, w, bias, unbatched, r, cl, ...)``."""
    x, w, bias = _autocast(x, w, bias)
    _bridge.device_of((x, w, bias), ("x", "w", "bias"))
    unbatched = x.ndim == w.ndim - 1
    if unbatched:                          # PyTorch's unbatched (C, *S): a batch of one
        x = x.unsqueeze(0)
    r = w.ndim - 2
    if x.ndim != w.ndim or not 1 <= r <= MAX_RANK:
        raise ValueError(
            f"x must be (N, C, *spatial) or unbatched (C, *spatial) and w {what} with 1 to "
            f"{MAX_RANK} spatial axes; got x.ndim={x.ndim + (-1 if unbatched else 0)}, "
            f"w.ndim={w.ndim}")
    cl = args.normalize_layout(layout) == "channels_last"
    stride = args.normalize_per_axis(stride, r, "stride")
    dilation = args.normalize_per_axis(dilation, r, "dilation")
    groups = args.as_int(groups, "groups", minimum=1)
    return x, w, bias, unbatched, cl, stride, dilation, groups


def _flat(pairs):
    return [int(p) for pair in pairs for p in pair]


def _spatial(t, cl):
    return tuple(t.shape[1:-1]) if cl else tuple(t.shape[2:])


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
    x, w, bias, unbatched, cl, stride, dilation, groups = _prepare(
        x, w, bias, stride, dilation, groups, layout, "(C_out, C_in/groups, *K)")
    pads = args.normalize_padding(padding, len(stride), _spatial(x, cl), _spatial(w, cl),
                                  stride, dilation)
    mode = args.normalize_padding_mode(padding_mode)
    if isinstance(cval, bool) or not isinstance(cval, (int, float)):
        raise TypeError(f"cval must be a real number; got {cval!r}")
    y = _ops.run(_ops.conv, x, w, bias, list(stride), _flat(pads), list(dilation), groups,
                 mode, float(cval), cl)
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
    x, w, bias, unbatched, cl, stride, dilation, groups = _prepare(
        x, w, bias, stride, dilation, groups, layout, "(C_in, C_out/groups, *K)")
    pads, out_pad = normalize_transpose_padding(padding, output_padding, _spatial(x, cl),
                                                 _spatial(w, cl), stride, dilation)
    y = _ops.run(_ops.conv_transpose, x, w, bias, list(stride), _flat(pads), list(out_pad),
                 list(dilation), groups, cl)
    return y[0] if unbatched else y
