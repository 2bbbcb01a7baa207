"""``scipy.ndimage``'s linear filters on NumPy and CuPy arrays: a drop-in.

``convolve``, ``correlate``, ``convolve1d``, ``correlate1d``,
``gaussian_filter``, ``gaussian_filter1d``, ``uniform_filter`` and
``uniform_filter1d``, and the derivative filters ``sobel``, ``prewitt``, ``laplace``,
``generic_laplace``, ``gaussian_laplace``, ``generic_gradient_magnitude`` and
``gaussian_gradient_magnitude`` (:mod:`.derivatives`), take SciPy's arguments and
follow its semantics (modes, ``origin``, ``axes``, ``output`` and its dtype rules); every pass is one
:class:`~cupyconv.ConvProblem` run by the dispatcher, so NumPy arrays run on
the CPU and CuPy arrays through the same CUDA kernels as ``conv``.  See
docs/semantics.md ("cupyconv.ndimage") for the mode table and the decisions.
"""
from .derivatives import (gaussian_gradient_magnitude, gaussian_laplace,
                          generic_gradient_magnitude, generic_laplace, laplace, prewitt, sobel)
from .filters import (convolve, convolve1d, correlate, correlate1d, gaussian_filter,
                      gaussian_filter1d, uniform_filter, uniform_filter1d)

__all__ = ["convolve", "correlate", "convolve1d", "correlate1d", "gaussian_filter",
           "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "sobel", "prewitt",
           "laplace", "generic_laplace", "gaussian_laplace", "generic_gradient_magnitude", "gaussian_gradient_magnitude"]
