"""cupyconv: N-dimensional convolution and correlation for NVIDIA GPUs and NumPy.

Array in, array out: NumPy arrays run on the CPU, CuPy arrays on the GPU
(raw CUDA C++ kernels loaded through ``cupy.RawModule``).  See README.md
and docs/ for the tour.
"""
from . import config
from ._backend import available_backends, get_backend, use_backend
from ._conv import conv
from ._gradients import conv_grad_bias, conv_grad_input, conv_grad_weight, conv_transpose
from ._operator import ConvOperator
from ._engine import OutOfMemoryError, clear_caches as _clear_engine_caches
from ._plan import ConvPlan, plan_conv
from ._signal import choose_conv_method, convolve, correlate
from ._problem import ConvProblem, MAX_RANK
from . import grad
from ._version import __version__


def clear_caches():
    """Drop every cached plan choice, loaded kernel module and runner."""
    _clear_engine_caches()

__all__ = [
    "convolve", "correlate", "choose_conv_method", "conv", "ConvProblem",
    "plan_conv", "ConvPlan", "OutOfMemoryError", "clear_caches",
    "use_backend", "get_backend", "available_backends", "config", "MAX_RANK",
    "conv_grad_input", "conv_grad_weight", "conv_grad_bias", "conv_transpose",
    "ConvOperator", "grad", "__version__",
]
