"""cupyconv: N-dimensional convolution and correlation for NVIDIA GPUs and NumPy.

Array in, array out: NumPy arrays run on the CPU, CuPy arrays on the GPU
(raw CUDA C++ kernels loaded through ``cupy.RawModule``).  See README.md
and docs/ (docs/architecture.md for the layers) for the tour.
"""
from . import config
from ._version import __version__
from ._vocabulary import MAX_RANK
from .api.conv import conv
from .api.gradients import conv_grad_bias, conv_grad_input, conv_grad_weight, conv_transpose
from .api.operator import ConvOperator
from .api.plan import ConvPlan, plan_conv
from .api.signal import choose_algorithm, choose_conv_method, convolve, correlate
from .api.signal_parity import convolve2d, correlate2d, fftconvolve, oaconvolve
from .backends.base import OutOfMemoryError
from .clear import clear_caches
from .core.problem import ConvProblem
from .dispatch import available_backends, get_backend, use_backend
from . import grad, ndimage

__all__ = [
    "convolve", "correlate", "choose_conv_method", "choose_algorithm", "fftconvolve",
    "oaconvolve", "convolve2d", "correlate2d", "conv", "ConvProblem",
    "plan_conv", "ConvPlan", "OutOfMemoryError", "clear_caches",
    "use_backend", "get_backend", "available_backends", "config", "MAX_RANK",
    "conv_grad_input", "conv_grad_weight", "conv_grad_bias", "conv_transpose",
    "ConvOperator", "grad", "ndimage", "__version__",
]
