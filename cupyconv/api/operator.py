"""Convolution as a linear operator with an exact adjoint.

``ConvOperator(kernel, input_shape, mode)`` is ``x -> convolve(x, kernel,
mode)`` on flattened vectors; ``rmatvec`` is its adjoint ``A^H`` (a
``valid`` correlation of the cotangent embedded in the full result, see
:func:`convolution_adjoint`).  ``ConvOperator.from_conv(w, input_shape,
**geometry)`` wraps :func:`cupyconv.conv` and :func:`cupyconv.conv_grad_input`
instead.  ``aslinearoperator()`` hands either to SciPy's or CuPy's
iterative solvers (CG on the normal equations, LSQR, ...).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Optional

import numpy as np

from .._kernels import program
from ..core import args
from ..core.problem import ConvProblem
from ..core.signal_map import check_mode, signal_call
from .compiled import compiled_method
from .gradients import conv_grad_input
from .conv import conv
from .signal import convolve, correlate
from .._typing import Array, ArrayLike, Axes, DTypeLike, IntOrSeq, Padding, Shape

__all__ = ["ConvOperator", "convolution_adjoint"]


def _window(n1, n2, mode):
    """Start and length, in the full result, of the ``mode`` result on one axis."""
    if mode == "full":
        return 0, n1 + n2 - 1
    if mode == "same":
        return (n2 - 1) // 2, n1
    return min(n1, n2) - 1, abs(n1 - n2) + 1          # valid (either operand larger)


def convolution_adjoint(shape1, in2, g, mode, axes, method="auto", swapped=False,
                        precision=None):
    """``A^H g`` for ``A: in1 -> convolve(in1, in2, mode, axes=axes)``, shape ``shape1``.

    ``swapped``: the forward call was ``convolve(in2, in1, mode)`` (the
    gradient with respect to its second operand); ``full`` and ``valid``
    are symmetric, ``same`` keeps the window of the first operand.
    ``axes`` are the convolved axes (``None``: all).  ``g`` has the result's
    shape; the computation runs in the promoted dtype of ``in2`` and ``g``
    (no real projection: callers with a real ``in1`` take the real part).
    Broadcast batch axes are summed back to ``shape1``.
    """
    xp = args.array_module_of(in2=in2, g=g)
    nd = len(shape1)
    work = args.gradient_dtype(in2.dtype, g.dtype)
    if nd == 0:
        return (g * xp.conj(in2)).astype(work, copy=False)
    conv_axes = list(range(nd)) if axes is None else sorted(a % nd for a in np.atleast_1d(axes))
    full_shape, window = list(g.shape), [slice(None)] * nd
    for a in conv_axes:
        sizes = (in2.shape[a], shape1[a]) if swapped else (shape1[a], in2.shape[a])
        start, length = _window(*sizes, mode)
        full_shape[a] = shape1[a] + in2.shape[a] - 1
        window[a] = slice(start, start + length)
    if tuple(full_shape) == tuple(g.shape):
        embedded = _cast(work, g)
    else:      # host steps (an allocation and a copy): a compiled call replays them
        embedded = program.host_step("embed", functools.partial(
            _embedded, xp, tuple(full_shape), work, tuple(window)), g)
    res = correlate(embedded, _cast(work, in2), mode="valid", method=method,
                    axes=conv_axes, precision=precision)
    summed = tuple(a for a in range(nd) if a not in conv_axes and shape1[a] != res.shape[a])
    if summed:
        res = program.host_step("sum", functools.partial(_summed, summed), res)
    return res


def _cast(dtype, a):
    """``a`` in ``dtype``: itself, or a host step's copy (a compiled call replays it)."""
    if a.dtype == dtype:
        return a
    return program.host_step("cast", functools.partial(_astype, dtype), a)


def _astype(dtype, a):
    return a.astype(dtype)


def _embedded(xp, shape, dtype, window, g):
    out = xp.zeros(shape, dtype=dtype)
    out[window] = g
    return out


def _summed(axes, a):
    return a.sum(axis=axes, keepdims=True)


class ConvOperator:
    """``x -> convolve(x, kernel, mode, axes=axes)`` as a linear operator.

    Parameters
    ----------
    kernel : ndarray
        The convolution kernel (NumPy or CuPy: the operator runs there).
    input_shape : tuple of int
        Shape of ``x`` (same rank as `kernel`).
    mode : {'same', 'full', 'valid'}, optional
    axes : int or sequence of int, optional
        Convolved axes (others broadcast, as in :func:`cupyconv.convolve`).
    method : str, optional
        Algorithm of the forward and adjoint convolutions.
    dtype : dtype, optional
        Operator dtype; default the kernel's (float64 for integer kernels).
    precision : {'highest', 'tf32'}, optional
        Arithmetic of the convolutions, as in :func:`cupyconv.conv` (``None``:
        ``cupyconv.config.precision``; ``'tf32'`` is for float32 data).

    Attributes
    ----------
    shape : (int, int)
        ``(prod(output_shape), prod(input_shape))``.
    dtype : numpy.dtype
    input_shape, output_shape : tuple of int

    Notes
    -----
    ``A @ x``, ``A.dot(x)``, ``A.matmat(X)`` and ``A.rmatmat(X)`` behave as a
    ``scipy.sparse.linalg.LinearOperator``'s (``cupyx``'s for CuPy operators).

    The operator references its kernel live (the constructor's `kernel`, and
    :meth:`from_conv`'s ``w``; neither is copied): every ``matvec`` and ``rmatvec``
    reads it as it is then, so values written into it later are used.  ``matvec`` and
    ``rmatvec`` are compiled calls with a cache of the operator's own
    (:func:`~cupyconv.api.compiled.compiled_method`): the operator holds its kernel, so
    their programs keep it and read it by pointer on every call; where the host reads
    its values (the ``separable`` factors) a replay first compares them.  A repeated call
    replays the programs, the data scan of ``fft`` and ``winograd`` included, so each
    call warns of NaN or Inf data as :func:`cupyconv.convolve` does.

    ``rmatvec`` is the exact adjoint: ``vdot(A x, y) == vdot(x, A^H y)`` to
    rounding, for every mode and complex kernels (``A^H`` conjugates).
    """

    #: As ``LinearOperator``: ``x @ A`` with a NumPy ``x`` reaches :meth:`__rmatmul__`.
    __array_ufunc__ = None
    ndim = 2

    def __init__(self, kernel: ArrayLike, input_shape: Shape, mode: str = "same", *,
                 axes: Optional[Axes] = None, method: str = "auto",
                 dtype: Optional[DTypeLike] = None, precision: Optional[str] = None) -> None:
        xp = args.array_module_of(kernel=kernel)
        kernel = args.as_array(xp, kernel)
        args.check_dtype(kernel, "kernel")
        input_shape = args.normalize_shape(input_shape, "input_shape")
        if len(input_shape) != kernel.ndim:
            raise ValueError(f"input_shape must have kernel.ndim={kernel.ndim} entries; "
                             f"got input_shape={input_shape}")
        dtype = args.gradient_dtype(kernel.dtype) if dtype is None else np.dtype(dtype)
        check_mode(mode)
        conv_axes = None if kernel.ndim == 0 else args.normalize_axes(axes, kernel.ndim)
        call = signal_call(input_shape, kernel.dtype, kernel.shape, kernel.dtype, mode,
                           conv_axes, False)
        args.normalize_precision(precision, np.result_type(dtype, kernel.dtype),
                                 (dtype, kernel.dtype))

        def forward(x):
            return convolve(x, program.held(kernel), mode, method, axes=axes,
                            precision=precision)

        def adjoint(y):
            return convolution_adjoint(input_shape, program.held(kernel), y, mode,
                                       conv_axes, method, precision=precision)

        self._setup(xp, input_shape, call.result_shape, dtype, forward, adjoint)

    @classmethod
    def from_conv(cls, w: ArrayLike, input_shape: Shape, *, stride: IntOrSeq = 1,
                  padding: Padding = 0, dilation: IntOrSeq = 1, groups: int = 1,
                  padding_mode: str = "constant", layout: str = "channels_first",
                  method: str = "auto", dtype: Optional[DTypeLike] = None,
                  precision: Optional[str] = None) -> "ConvOperator":
        """``x -> conv(x, w, ...)`` (deep-learning geometry) with the adjoint
        :func:`cupyconv.conv_grad_input`.  Constant padding is zero padding
        here (a nonzero fill would make the map affine).

        `input_shape` is batched, ``(N, C_in, *S)``, or unbatched, ``(C_in, *S)``
        (``len(input_shape) == w.ndim - 1``, as :func:`cupyconv.conv` reads it); the
        output shape follows.  `precision` is as in :func:`cupyconv.conv` (``None``:
        ``cupyconv.config.precision``).

        The operator references ``w`` live, as the constructor does its kernel: every
        ``matvec`` and ``rmatvec`` reads ``w`` as it is then (docs/semantics.md,
        "Kernels referenced live").  For weights prepared once, use
        ``cupyconv.plan_conv(..., weights=w)``."""
        xp = args.array_module_of(w=w)
        w = args.as_array(xp, w)
        args.check_dtype(w, "w")
        geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                        padding_mode=padding_mode, layout=layout, method=method,
                        precision=precision)
        input_shape = args.normalize_shape(input_shape, "input_shape")
        unbatched = len(input_shape) == w.ndim - 1 >= 1
        batched_shape = (1,) + input_shape if unbatched else input_shape
        problem = ConvProblem.create(
            x_shape=batched_shape, w_shape=w.shape,
            **{k: v for k, v in geometry.items() if k not in ("method", "precision")})
        self = cls.__new__(cls)

        def forward(x):
            return conv(x, program.constant(w), **geometry)

        def adjoint(y):
            dx = conv_grad_input(y[None] if unbatched else y, program.constant(w),
                                 batched_shape, **geometry)
            return dx[0] if unbatched else dx

        dtype = args.gradient_dtype(w.dtype) if dtype is None else np.dtype(dtype)
        args.normalize_precision(precision, np.result_type(dtype, w.dtype), (dtype, w.dtype))
        output_shape = tuple(problem.y_shape)
        self._setup(xp, input_shape, output_shape[1:] if unbatched else output_shape, dtype,
                    forward, adjoint)
        return self

    def _setup(self, xp, input_shape, output_shape, dtype, forward, adjoint):
        self.xp = xp
        self.input_shape, self.output_shape = input_shape, output_shape
        self.shape = (int(math.prod(output_shape)), int(math.prod(input_shape)))
        self.dtype = np.dtype(dtype)
        self._forward, self._adjoint = forward, adjoint

    @staticmethod
    def _reshaped(v, shape, size, name):
        if int(math.prod(v.shape)) != size:
            raise ValueError(f"{name} expects a vector of {size} elements; got shape {v.shape}")
        return v.reshape(shape)

    @compiled_method(warns=True)
    def matvec(self, v: ArrayLike) -> Array:
        """``A v`` for a flat ``v`` of ``shape[1]`` elements (or ``(n, 1)``)."""
        v = args.as_array(self.xp, v)
        return self._forward(self._reshaped(v, self.input_shape, self.shape[1],
                                            "matvec")).ravel()

    @compiled_method(warns=True)
    def rmatvec(self, u: ArrayLike) -> Array:
        """``A^H u`` (exact adjoint) for a flat ``u`` of ``shape[0]`` elements."""
        u = args.as_array(self.xp, u)
        return self._adjoint(self._reshaped(u, self.output_shape, self.shape[0],
                                            "rmatvec")).ravel()

    def aslinearoperator(self) -> Any:
        """A ``scipy.sparse.linalg.LinearOperator`` (NumPy) or
        ``cupyx.scipy.sparse.linalg.LinearOperator`` (CuPy)."""
        if self.xp is np:
            from scipy.sparse.linalg import LinearOperator
        else:  # optional dependency: only reached for CuPy operators
            from cupyx.scipy.sparse.linalg import LinearOperator
        return LinearOperator(self.shape, matvec=self.matvec, rmatvec=self.rmatvec,
                              dtype=self.dtype)

    def _linear_operator(self):
        linop = self.__dict__.get("_linop")
        if linop is None:
            linop = self._linop = self.aslinearoperator()
        return linop

    def dot(self, x: ArrayLike) -> Any:
        """``A x`` for a vector (``(n,)`` or ``(n, 1)``) or a matrix of ``n`` rows (one
        ``matvec`` per column), as ``LinearOperator.dot``."""
        return self._linear_operator().dot(x)

    def matmat(self, X: ArrayLike) -> Any:
        """``A X`` for a matrix ``X`` of ``shape[1]`` rows, one ``matvec`` per column."""
        return self._linear_operator().matmat(X)

    def rmatmat(self, X: ArrayLike) -> Any:
        """``A^H X`` for a matrix ``X`` of ``shape[0]`` rows, one ``rmatvec`` per column."""
        return self._linear_operator().rmatmat(X)

    def __matmul__(self, x: ArrayLike) -> Any:
        """``A @ x``: as a ``LinearOperator``'s (vector, column or matrix; a scalar is a
        ``ValueError``; another operator gives their product operator)."""
        if isinstance(x, ConvOperator):
            x = x._linear_operator()
        return self._linear_operator() @ x

    def __rmatmul__(self, x: ArrayLike) -> Any:
        """``x @ A``, as a ``LinearOperator``'s."""
        return x @ self._linear_operator()

    def __repr__(self):
        return (f"ConvOperator(input_shape={self.input_shape}, "
                f"output_shape={self.output_shape}, dtype={self.dtype})")
