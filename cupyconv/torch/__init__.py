"""PyTorch adapter: N-D convolution layers with autograd, ``torch.compile`` and zero copy.

``import cupyconv`` never imports PyTorch; importing this submodule does (install it
with ``pip install -e '.[torch]'`` from a checkout).  docs/torch.md is the guide.

- :func:`conv` and :func:`conv_transpose` take torch tensors and return one, with the
  arguments of :func:`cupyconv.conv` and :func:`cupyconv.conv_transpose`.
- They call custom operators (``torch.ops.cupyconv.conv``, ``conv_transpose`` and the
  three gradients), registered with :func:`torch.library.custom_op`: a fake
  implementation (meta tensors, FakeTensor, ``torch.compile``) and an autograd formula
  whose backward is made of the same differentiable operators, so double backward works.
- CPU tensors run on the NumPy backend through views of their memory; CUDA tensors go to
  CuPy by DLPack and run on torch's current stream.  No copy either way.
- :class:`ConvNd`, :class:`Conv4d`, :class:`Conv5d` and :class:`ConvTransposeNd` are
  modules with the parameters, initialisation, ``extra_repr`` and ``state_dict`` keys of
  ``torch.nn.Conv3d`` / ``torch.nn.ConvTranspose3d``.

Examples
--------
>>> import torch, cupyconv.torch as ct
>>> layer = ct.Conv4d(2, 4, kernel_size=3, padding=1)
>>> layer(torch.randn(1, 2, 5, 5, 5, 5)).shape
torch.Size([1, 4, 5, 5, 5, 5])
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "cupyconv.torch needs PyTorch: pip install torch (or, from a checkout, "
        "pip install -e '.[torch]')") from exc

from .functional import conv, conv_transpose
from .modules import Conv4d, Conv5d, ConvNd, ConvTransposeNd

__all__ = ["conv", "conv_transpose", "ConvNd", "Conv4d", "Conv5d", "ConvTransposeNd"]
