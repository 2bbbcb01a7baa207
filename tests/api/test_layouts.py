"""Memory layouts: every view of the same values gives bit-for-bit the
contiguous result of the same method (reliability.md items 10-12:
cupy#10303 flipped in1, pytorch#77299/#4500 stride-0 weights, Fortran order).

Random (not small-integer) data: equality must be bitwise, so any change of
summation order with the strides would show up.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from helpers import random_array

METHODS = ("direct", "gemm", "fft", "implicit_gemm")
DTYPES = ("float32", "complex128", "int64")


def flipped(a):
    """A negatively strided view holding ``a``'s values."""
    axes = tuple(range(a.ndim))
    return np.flip(np.flip(a, axes).copy(), axes)


def fortran(a):
    return np.asfortranarray(a)


def sliced(a):
    """A step-2 slice of a larger buffer (non-unit strides, offset base)."""
    big = np.zeros(tuple(2 * n + 1 for n in a.shape), dtype=a.dtype)
    view = big[(slice(1, None, 2),) * a.ndim]
    view[...] = a
    return view


def transposed(a):
    """Reversed axis order in memory, same logical shape."""
    return a.T.copy().T


VIEWS = {"flipped": flipped, "fortran": fortran, "sliced": sliced, "transposed": transposed}


def broadcast_along_first(a):
    """``(a[:1] broadcast to a.shape)`` as a stride-0 view, and its copy."""
    view = np.broadcast_to(a[:1], a.shape)
    assert view.strides[0] == 0
    return view, np.ascontiguousarray(view)


def _assert_bitwise(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8) if got.dtype.kind != "b" else got,
                                  want.view(np.uint8) if want.dtype.kind != "b" else want)


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("operand", ["in1", "in2", "both"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ["convolve", "correlate"])
def test_signal_views_bitwise(fn, dtype, method, operand, view, rng):
    a = random_array(rng, (5, 4, 6), dtype)
    b = random_array(rng, (3, 2, 4), dtype)
    f = getattr(cupyconv, fn)
    want = f(a, b, mode="same", method=method)
    va = VIEWS[view](a) if operand in ("in1", "both") else a
    vb = VIEWS[view](b) if operand in ("in2", "both") else b
    _assert_bitwise(f(va, vb, mode="same", method=method), want)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_signal_stride0_kernel_bitwise(method, dtype, rng):
    a = random_array(rng, (4, 7, 6), dtype)
    bv, bc = broadcast_along_first(random_array(rng, (3, 3, 2), dtype))
    _assert_bitwise(cupyconv.convolve(a, bv, method=method),
                    cupyconv.convolve(a, bc, method=method))
    # and a stride-0 batch axis under ``axes``
    av, ac = broadcast_along_first(a)
    _assert_bitwise(cupyconv.convolve(av, bc[:1], method=method, axes=[1, 2]),
                    cupyconv.convolve(ac, bc[:1], method=method, axes=[1, 2]))


def _conv_operands(rng, dtype):
    x = random_array(rng, (2, 4, 7, 5), dtype)
    w = random_array(rng, (6, 2, 3, 2), dtype)
    bias = random_array(rng, (6,), dtype)
    kw = dict(stride=(2, 1), padding=((1, 2), (0, 1)), dilation=(1, 2), groups=2)
    return x, w, bias, kw


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("operand", ["x", "w", "both"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_views_bitwise(dtype, method, operand, view, rng):
    x, w, bias, kw = _conv_operands(rng, dtype)
    want = cupyconv.conv(x, w, bias, method=method, **kw)
    vx = VIEWS[view](x) if operand in ("x", "both") else x
    vw = VIEWS[view](w) if operand in ("w", "both") else w
    _assert_bitwise(cupyconv.conv(vx, vw, VIEWS[view](bias), method=method, **kw), want)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_stride0_weights_bitwise(method, dtype, rng):
    """Weights expanded along C_out (torch ``expand``), and along a tap axis."""
    x, w, bias, kw = _conv_operands(rng, dtype)
    wv, wc = broadcast_along_first(w)
    _assert_bitwise(cupyconv.conv(x, wv, bias, method=method, **kw),
                    cupyconv.conv(x, wc, bias, method=method, **kw))
    wtap = np.broadcast_to(w[:, :, :1], w.shape)
    _assert_bitwise(cupyconv.conv(x, wtap, method=method, **kw),
                    cupyconv.conv(x, wtap.copy(), method=method, **kw))
    xb = np.broadcast_to(x[:, :, :, :1], x.shape)     # stride-0 spatial axis
    _assert_bitwise(cupyconv.conv(xb, w, method=method, **kw),
                    cupyconv.conv(xb.copy(), w, method=method, **kw))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_channels_last_views_bitwise(method, dtype, rng):
    """channels_last given as a moveaxis view of channels-first memory (and
    as a contiguous copy) equals the channels-first result, transposed."""
    x, w, bias, kw = _conv_operands(rng, dtype)
    want = cupyconv.conv(x, w, bias, method=method, **kw)
    xl, wl = np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1)
    for xx, ww in ((xl, wl), (np.ascontiguousarray(xl), np.ascontiguousarray(wl))):
        got = cupyconv.conv(xx, ww, bias, method=method, layout="channels_last", **kw)
        _assert_bitwise(np.ascontiguousarray(np.moveaxis(got, -1, 1)), want)


@pytest.mark.parametrize("method", METHODS)
def test_inputs_are_not_modified(method, rng):
    x, w, bias, kw = _conv_operands(rng, "float64")
    copies = [a.copy() for a in (x, w, bias)]
    cupyconv.conv(flipped(x), w, bias, method=method, **kw)
    cupyconv.correlate(x, flipped(w), method=method)
    for a, c in zip((x, w, bias), copies):
        np.testing.assert_array_equal(a, c)
