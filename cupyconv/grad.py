"""Gradients: vector-Jacobian products of the SciPy-style functions, the
``conv`` gradient helpers and the convolution linear operator.

Convention (PyTorch's; JAX's ``vjp`` of the conjugated cotangent)
-----------------------------------------------------------------
For a real-valued loss ``L`` and the cotangent ``g = dL/dRe(z) + i dL/dIm(z)``
of the result ``z``, the gradients returned are ::

    g1 = dL/dRe(in1) + i dL/dIm(in1)        (real inputs: the real part only)

i.e. the adjoint (conjugate transpose) of the linear map applied to ``g``:
``g1 = A_{in2}^H g``.  With ``L = Re(sum(conj(g) * z))`` that is exactly
the gradient of ``L`` with respect to the real and imaginary parts of
``in1``, which the tests check against finite differences.  For
``z = convolve(in1, in2, 'full')`` this gives
``g1 = correlate(g, in2, 'valid')`` and ``g2 = correlate(g, in1, 'valid')``;
``same``/``valid`` results are windows of the full one, so ``g`` is first
embedded (zeros elsewhere) in the full result.  ``correlate(in1, in2)`` is
``convolve(in1, conj(flip(in2)))``, so its ``g2`` is ``conj(flip(.))`` of
the convolution's.  Broadcast batch axes (``axes=``) are summed back to
size 1 where an input had size 1.
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import numpy as np

from ._kernels import program
from .api.compiled import compiled
from .api.gradients import conv_grad_bias, conv_grad_input, conv_grad_weight, conv_transpose
from .api.operator import ConvOperator, convolution_adjoint
from .api.signal import signal_problem
from .core import args
from ._typing import Array, ArrayLike, Axes

__all__ = ["convolve_vjp", "correlate_vjp", "conv_grad_input", "conv_grad_weight",
           "conv_grad_bias", "conv_transpose", "ConvOperator"]


def _as_gradient(res, like):
    """Real part for real inputs; the input's float dtype (float64 for integers): a host
    step (a compiled call replays it)."""
    dtype = args.gradient_dtype(like.dtype, res.dtype)
    if like.dtype.kind != "c":
        dtype = np.finfo(dtype).dtype
    return program.host_step("gradient", functools.partial(
        _projected, like.dtype.kind == "c", dtype, tuple(like.shape)), res)


def _projected(complex_, dtype, shape, res):
    if not complex_ and res.dtype.kind == "c":
        res = res.real
    return res.astype(dtype, copy=False).reshape(shape)


def _flip(xp, a, axes):
    if a.ndim == 0:
        return a
    return xp.flip(a, axis=tuple(range(a.ndim)) if axes is None else axes)


def _conj(xp, a):
    """``conj(a)`` for complex ``a`` as a host step, else ``a``."""
    if a.dtype.kind != "c":
        return a
    return program.host_step("conj", xp.conj, a)


def _vjp(in1, in2, g, mode, axes, correlate_, method):
    """``(g1, g2)``: each one compiled call (:func:`_vjp_part`), so a repeated vjp replays
    both without validation or the dispatcher."""
    return (_vjp_part(in1, in2, g, mode, axes, correlate_, method, False),
            _vjp_part(in1, in2, g, mode, axes, correlate_, method, True))


@compiled
def _vjp_part(in1, in2, g, mode, axes, correlate_, method, second):
    """``g2`` (``second``) or ``g1`` of :func:`convolve_vjp`/:func:`correlate_vjp`."""
    xp = args.array_module_of(in1=in1, in2=in2, g=g)
    g = args.as_array(xp, g)
    args.check_dtype(g, "g")
    call, xp, in1, in2 = signal_problem(in1, in2, mode, axes, correlate_)   # validates
    if tuple(g.shape) != tuple(call.result_shape):
        raise ValueError(f"g must have the shape of the result, {tuple(call.result_shape)}; "
                         f"got g.shape={tuple(g.shape)}")
    axes = None if in1.ndim == 0 else call.axes
    b = in2
    if correlate_:      # correlate(in1, in2) == convolve(in1, conj(flip(in2)))
        b = _conj(xp, _flip(xp, in2, axes))
    if not second:
        return _as_gradient(convolution_adjoint(tuple(in1.shape), b, g, mode, axes, method),
                            in1)
    gb = convolution_adjoint(tuple(b.shape), in1, g, mode, axes, method, swapped=True)
    if correlate_:
        gb = _flip(xp, _conj(xp, gb), axes)
    return _as_gradient(gb, in2)


def convolve_vjp(in1: ArrayLike, in2: ArrayLike, g: ArrayLike, mode: str = "full",
                 axes: Optional[Axes] = None, *, method: str = "auto") -> Tuple[Array, Array]:
    """Vector-Jacobian product of :func:`cupyconv.convolve`.

    Parameters
    ----------
    in1, in2 : ndarray
        The forward call's operands.
    g : ndarray
        Cotangent of the result ``z = convolve(in1, in2, mode, axes=axes)``
        (``dL/dRe(z) + i dL/dIm(z)``), of ``z``'s shape.
    mode : {'full', 'same', 'valid'}, optional
    axes : int or sequence of int, optional
    method : str, optional
        Algorithm of the correlations that compute the products.

    Returns
    -------
    g1, g2 : ndarray
        ``dL/dRe(in_k) + i dL/dIm(in_k)`` (the module docstring states the
        convention); real for real inputs, of the input's shape and float
        dtype (float64 for integer inputs).

    Raises
    ------
    ValueError
        Whatever ``convolve`` raises for these operands, or ``g`` of the
        wrong shape.
    """
    return _vjp(in1, in2, g, mode, axes, False, method)


def correlate_vjp(in1: ArrayLike, in2: ArrayLike, g: ArrayLike, mode: str = "full",
                  axes: Optional[Axes] = None, *, method: str = "auto") -> Tuple[Array, Array]:
    """Vector-Jacobian product of :func:`cupyconv.correlate`; see :func:`convolve_vjp`.

    ``correlate`` conjugates ``in2``, so its gradient is anti-linear there:
    ``g2 = conj(flip(A_{in1}^H g))``, still ``dL/dRe(in2) + i dL/dIm(in2)``.
    """
    return _vjp(in1, in2, g, mode, axes, True, method)
