"""``ConvNd``, ``Conv4d``, ``Conv5d``, ``ConvTransposeNd``: ``torch.nn.Conv3d``'s modules, any rank.

They are ``torch.nn.modules.conv._ConvNd`` / ``_ConvTransposeNd`` subclasses, as
``nn.Conv3d`` and ``nn.ConvTranspose3d`` are: the same parameters (``weight``, ``bias``),
the same ``reset_parameters`` (Kaiming-uniform weights with ``a=sqrt(5)``, a uniform bias
in ``+-1/sqrt(fan_in)``; the same random draws in the same order), ``extra_repr`` and
``state_dict`` keys.  A model that swaps ``nn.Conv3d(...)`` for ``ConvNd(..., ndim=3)``
under the same seed gets the same parameters and outputs.
"""
from __future__ import annotations

import numbers

from torch.nn.modules.conv import _ConvNd, _ConvTransposeNd

from cupyconv._vocabulary import MAX_RANK

from .functional import conv, conv_transpose

__all__ = ["ConvNd", "Conv4d", "Conv5d", "ConvTransposeNd"]


def _rank(kernel_size, ndim):
    """The spatial rank: ``ndim``, or the length of a sequence ``kernel_size``."""
    if ndim is None:
        if isinstance(kernel_size, numbers.Integral):
            raise ValueError("give ndim (the number of spatial axes) or a kernel_size "
                             "with one entry per axis")
        ndim = len(kernel_size)
    if not isinstance(ndim, numbers.Integral) or not 1 <= ndim <= MAX_RANK:
        raise ValueError(f"ndim must be an int from 1 to {MAX_RANK}; got {ndim!r}")
    return int(ndim)


def _tuple(value, ndim, name):
    """``torch.nn.modules.utils._ntuple``'s rule, with the length checked."""
    if isinstance(value, numbers.Integral):
        return (int(value),) * ndim
    value = tuple(value)
    if len(value) != ndim:
        raise ValueError(f"{name} must have {ndim} entries (one per spatial axis); "
                         f"got {value}")
    return value


class ConvNd(_ConvNd):
    """N-D convolution layer (1 to 8 spatial axes) with ``torch.nn.Conv3d``'s interface.

    Parameters
    ----------
    in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
    padding_mode, device, dtype
        As ``torch.nn.Conv3d``'s (``padding`` may be ``'same'`` or ``'valid'``;
        ``padding_mode`` one of ``'zeros'``, ``'reflect'``, ``'replicate'``,
        ``'circular'``).
    ndim : int, optional
        Number of spatial axes; needed when `kernel_size` is an int.

    Examples
    --------
    >>> import torch, cupyconv.torch as ct
    >>> ct.ConvNd(2, 3, (3, 3, 3, 3), padding=1)
    ConvNd(2, 3, kernel_size=(3, 3, 3, 3), stride=(1, 1, 1, 1), padding=(1, 1, 1, 1))
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None, *, ndim=None):
        ndim = _rank(kernel_size, ndim)
        super().__init__(
            in_channels, out_channels, _tuple(kernel_size, ndim, "kernel_size"),
            _tuple(stride, ndim, "stride"),
            padding if isinstance(padding, str) else _tuple(padding, ndim, "padding"),
            _tuple(dilation, ndim, "dilation"), False, _tuple(0, ndim, "output_padding"),
            groups, bias, padding_mode, device=device, dtype=dtype)

    def forward(self, input):
        return conv(input, self.weight, self.bias, stride=self.stride, padding=self.padding,
                    dilation=self.dilation, groups=self.groups,
                    padding_mode=self.padding_mode)


class Conv4d(ConvNd):
    """:class:`ConvNd` with four spatial axes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, ndim=4, **kwargs)


class Conv5d(ConvNd):
    """:class:`ConvNd` with five spatial axes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, ndim=5, **kwargs)


class ConvTransposeNd(_ConvTransposeNd):
    """N-D transposed convolution layer with ``torch.nn.ConvTranspose3d``'s interface.

    Parameters
    ----------
    in_channels, out_channels, kernel_size, stride, padding, output_padding, groups,
    bias, dilation, padding_mode, device, dtype
        As ``torch.nn.ConvTranspose3d``'s (``padding_mode`` must be ``'zeros'``).
    ndim : int, optional
        Number of spatial axes; needed when `kernel_size` is an int.

    ``forward(input, output_size=None)`` takes ``output_size`` as torch's does.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None, *, ndim=None):
        ndim = _rank(kernel_size, ndim)
        super().__init__(
            in_channels, out_channels, _tuple(kernel_size, ndim, "kernel_size"),
            _tuple(stride, ndim, "stride"), _tuple(padding, ndim, "padding"),
            _tuple(dilation, ndim, "dilation"), True,
            _tuple(output_padding, ndim, "output_padding"), groups, bias, padding_mode,
            device=device, dtype=dtype)

    def forward(self, input, output_size=None):
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size,
            len(self.kernel_size), self.dilation)
        return conv_transpose(input, self.weight, self.bias, stride=self.stride,
                              padding=self.padding, output_padding=output_padding,
                              groups=self.groups, dilation=self.dilation)
