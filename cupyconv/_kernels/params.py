"""Packing of ``cc::ConvParams<R>`` (cuda_src/common/conv_params.cuh).

The struct's layout is declared once, :data:`~.families.CONV_PARAMS`, which generates
the dtype (:func:`conv_params_dtype`).  :func:`pack_conv_params` turns a
:class:`~cupyconv._problem.ConvProblem`, the actual element strides of the arrays, an
epilogue and a batch chunk into a numpy structured scalar whose bytes equal the C++
struct; CuPy's RawKernel (and the emulator) pass it by value.

The fast-divmod multipliers for every divisor are computed here, once per
launch, never on the device (see cuda_src/common/fast_divmod.cuh).
"""
from __future__ import annotations

import math
import operator
from typing import Sequence, Tuple

import numpy as np

from .._lru import cached, memoized
from .._vocabulary import PADDING_MODES
from .families import CONV_PARAMS, FAST_DIVMOD_PARAMS

__all__ = [
    "PAD_MODES", "FAST_DIVMOD_DTYPE", "conv_params_dtype", "conv_params_words",
    "fast_divmod_params", "logical_strides", "operand_shape", "operand_strides",
    "input_strides", "y_strides", "contiguous_strides",
    "conv_strides",
    "pack_conv_params",
]

#: padding mode -> cc::PadMode value.
PAD_MODES = {mode: i for i, mode in enumerate(PADDING_MODES)}

#: Layout of ``cc::FastDivmodParams`` (:data:`~.families.FAST_DIVMOD_PARAMS`).
FAST_DIVMOD_DTYPE = FAST_DIVMOD_PARAMS.dtype()


def conv_params_words(rank: int) -> int:
    """8-byte words in ``ConvParams<rank>``; equals ``cc::conv_params_words``."""
    r = rank
    return 6 + 6 * r + 3 * (2 + r) + 2 + 2 + 8 + 4 * (3 * r + 8) + 4 + 6


@cached(maxsize=None)
def conv_params_dtype(rank: int) -> np.dtype:
    """Structured dtype of ``ConvParams<rank>``, generated from
    :data:`~.families.CONV_PARAMS` (field order, shapes and types of the C struct)."""
    r = int(rank)
    dt = CONV_PARAMS.dtype(r)
    if dt.itemsize != 8 * conv_params_words(r):
        raise RuntimeError(  # a programming error in the spec, not user input
            f"ConvParams<{r}> host layout has {dt.itemsize} bytes, expected {8 * conv_params_words(r)}")
    return dt


@cached(maxsize=4096, keep=True)
def fast_divmod_params(divisor: int) -> Tuple[int, int, int, int]:
    """``(divisor, mul32, mul64, shift)`` for ``cc::FastDivmod``.

    For ``d > 1`` and ``l = ceil(log2 d)``: ``mul32 = ceil(2**(31+l) / d)``,
    ``mul64 = ceil(2**(63+l) / d)`` (stored as a signed bit pattern) and
    ``shift = l - 1``; ``d == 1`` is special-cased on the device.  Memoised (a pure
    function of the divisor; a launch packs a dozen of them).
    """
    d = int(divisor)
    if d < 1:
        raise ValueError(f"fast divmod divisor must be >= 1; got {d}")
    if d == 1:
        return (1, 0, 0, 0)
    l = (d - 1).bit_length()
    mul32 = -(-(1 << (31 + l)) // d) if d < 2**31 else 0
    mul64 = -(-(1 << (63 + l)) // d)
    if mul64 >= 2**63:
        mul64 -= 2**64
    return (d, mul32, mul64, l - 1)


def logical_strides(array, layout: str, ndim: int) -> Tuple[int, int, Tuple[int, ...]]:
    """Element strides ``(lead, channel, spatial)`` of an x/w/y array.

    ``lead`` is the batch (x, y) or output-channel (w) axis.  Works for any
    view (negative and zero strides); only ``.strides``, ``.itemsize`` and
    ``.shape`` are read.

    Raises
    ------
    ValueError
        If the rank does not match or a stride is not a multiple of the itemsize.
    """
    if len(array.shape) != ndim + 2:
        raise ValueError(f"expected an array with {ndim + 2} dimensions; got shape {tuple(array.shape)}")
    item = int(array.itemsize)
    strides = []
    for ax, s in enumerate(array.strides):
        if int(s) % item:
            raise ValueError(
                f"stride {s} of axis {ax} is not a multiple of the itemsize {item}; copy the array first")
        strides.append(int(s) // item)
    if layout == "channels_first":
        return strides[0], strides[1], tuple(strides[2:])
    return strides[0], strides[-1], tuple(strides[1:-1])


def operand_shape(problem, which: str):
    """``(lead, channels, spatial shape)`` of operand ``which`` (``"x"``, ``"w"`` or
    ``"y"``) of ``problem``."""
    if which == "x":
        return problem.batch, problem.in_channels, problem.in_shape
    if which == "w":
        return problem.out_channels, problem.in_channels // problem.groups, problem.kernel_shape
    return problem.batch, problem.out_channels, problem.out_shape


def operand_strides(problem, array, which: str):
    """``(logical element strides, (lead, channels, spatial shape))`` of operand ``which``
    (``"x"``, ``"w"`` or ``"y"``) of ``problem`` as the kernels index it."""
    st = logical_strides(array, problem.layout, problem.ndim)
    return st, operand_shape(problem, which)


def input_strides(problem, x, w):
    """``(xs, ws)``: :func:`operand_strides` of ``x`` and ``w``."""
    return operand_strides(problem, x, "x"), operand_strides(problem, w, "w")


def y_strides(problem, y):
    """:func:`operand_strides` of ``y``, or of the contiguous ``y`` a program allocates."""
    if y is not None:
        return operand_strides(problem, y, "y")
    return contiguous_strides(problem, "y")


def contiguous_strides(problem, which: str):
    """:func:`operand_strides` of a C-contiguous channels-first operand ``which`` (``"x"``,
    ``"w"`` or ``"y"``): a program's own buffer, a constant."""
    lead, chan, spatial = operand_shape(problem, which)
    shape = (lead, chan) + tuple(spatial)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return (strides[0], strides[1], tuple(strides[2:])), (lead, chan, spatial)


def pack_conv_params(problem, *, x_strides, w_strides=None, y_strides=None,
                     n0: int = 0, n_count=None, g0: int = 0,
                     alpha=1, beta=0, bias_stride: int = 0, has_bias: bool = False,
                     grid_divisors: Sequence[int] = (1, 1, 1),
                     aux: Sequence[int] = (0, 0, 0, 0)) -> np.void:
    """Pack the kernel parameter struct of one launch.

    Parameters
    ----------
    problem : ConvProblem
        Geometry, padding mode, ``cval``, ``flip``.
    x_strides, w_strides, y_strides : tuple
        ``(lead, channel, spatial)`` element strides from :func:`logical_strides`;
        ``None`` leaves the operand's strides zero (unused by the kernel).
    n0, n_count : int
        Batch chunk of this launch (default: the whole batch).
    g0 : int
        First group of this launch (kernels add ``blockIdx.z``).
    alpha, beta : scalar
        Epilogue ``y = alpha * conv + beta * y``; ``beta == 0`` never reads ``y``.
    bias_stride, has_bias
        Bias vector element stride and presence.
    grid_divisors, aux
        Family-specific launch data (see the kernels' headers).

    Returns
    -------
    numpy.void
        Scalar of :func:`conv_params_dtype` ``(problem.ndim)``.  Packing is memoised per
        argument set (the launchers pack on every call), so the scalar may be shared:
        pass it to a launch, never modify it.
    """
    return _pack(problem, _hashable(x_strides), _hashable(w_strides), _hashable(y_strides),
                 int(n0), n_count if n_count is None else int(n_count), int(g0), alpha, beta,
                 int(bias_stride), bool(has_bias), tuple(map(int, grid_divisors)),
                 tuple(map(int, aux)))


def _hashable(strides):
    if strides is None:
        return None
    lead, chan, spatial = strides
    return int(lead), int(chan), tuple(map(int, spatial))


@memoized()
def _pack(problem, x_strides, w_strides, y_strides, n0, n_count, g0, alpha, beta, bias_stride,
          has_bias, grid_divisors, aux):
    r = problem.ndim
    p = np.zeros((), dtype=conv_params_dtype(r))
    n_count = problem.batch - n0 if n_count is None else int(n_count)
    c, k, g = problem.in_channels, problem.out_channels, problem.groups
    taps = math.prod(problem.kernel_shape)
    in_size = math.prod(problem.in_shape)
    out_size = math.prod(problem.out_shape)
    p["N"], p["C"], p["K"], p["G"] = problem.batch, c, k, g
    p["cpg"], p["kpg"] = c // g, k // g
    p["in_ext"], p["k_ext"], p["out_ext"] = problem.in_shape, problem.kernel_shape, problem.out_shape
    p["stride"], p["dilation"] = problem.stride, problem.dilation
    p["pad_before"] = list(map(operator.itemgetter(0), problem.padding))
    for name, st in (("x", x_strides), ("w", w_strides), ("y", y_strides)):
        if st is None:
            continue
        lead, chan, spatial = st
        p[f"{name}_stride_{'k' if name == 'w' else 'n'}"] = lead
        p[f"{name}_stride_{'c' if name != 'y' else 'k'}"] = chan
        p[f"{name}_stride"] = spatial
    p["bias_stride"], p["has_bias"] = int(bias_stride), int(bool(has_bias))
    p["pad_mode"] = PAD_MODES[problem.padding_mode]
    p["flip"] = int(bool(problem.flip))
    p["n0"], p["n_count"], p["g0"] = int(n0), n_count, int(g0)
    p["in_size"], p["taps"], p["out_size"] = in_size, taps, out_size
    p["gemm_k"], p["gemm_m"] = (c // g) * taps, n_count * out_size
    # An extent of 0 (an empty input axis, which constant padding may still
    # extend to a non-empty output) divides nothing: no kernel thread maps to an
    # element of it, so its divisor is packed as 1 instead of rejected.
    for i in range(r):
        p["div_in"][i] = fast_divmod_params(max(problem.in_shape[i], 1))
        p["div_k"][i] = fast_divmod_params(max(problem.kernel_shape[i], 1))
        p["div_out"][i] = fast_divmod_params(max(problem.out_shape[i], 1))
    p["div_in_size"] = fast_divmod_params(max(in_size, 1))
    p["div_taps"] = fast_divmod_params(max(taps, 1))
    p["div_out_size"] = fast_divmod_params(max(out_size, 1))
    p["div_C"] = fast_divmod_params(max(c, 1))
    p["div_kpg"] = fast_divmod_params(max(k // max(g, 1), 1))
    for i, d in enumerate(grid_divisors):
        p["div_grid"][i] = fast_divmod_params(max(int(d), 1))
    p["aux"] = aux
    for name, value in (("cval", problem.cval), ("alpha", alpha), ("beta", beta)):
        z = complex(value)
        p[f"{name}_re"], p[f"{name}_im"] = z.real, z.imag
    return p[()]


def conv_strides(problem, x, w, y):
    """``(xs, ws, ys)``: :func:`input_strides` of ``x`` and ``w``, :func:`y_strides` of
    ``y``."""
    return operand_strides(problem, x, "x"), operand_strides(problem, w, "w"), y_strides(problem, y)
