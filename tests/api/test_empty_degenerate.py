"""Empty and degenerate shapes (reliability.md items 8, 9).

Empty batch / channels / spatial axes give an empty (or all-bias) result of
the right shape for every method; 0-d inputs give the product; 1-element
inputs, 1x1 kernels, even kernels with ``same`` and stride > kernel work.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from helpers import dual_run, ref_conv, ref_convolve, small_ints, valid_mode_rejects

METHODS = ("direct", "gemm", "fft", "auto", "implicit_gemm")

#: (x_shape, w_shape, kwargs, expected y shape); channels_first.
EMPTY_CONV_CASES = [
    # empty batch
    ((0, 2, 5), (3, 2, 2), {}, (0, 3, 4)),
    ((0, 4, 6, 6), (4, 2, 3, 3), dict(groups=2, padding=1), (0, 4, 6, 6)),
    # C_in = 0: the reduction is empty, y = 0 (+ bias)
    ((2, 0, 5), (3, 0, 2), {}, (2, 3, 4)),
    ((2, 0, 5), (4, 0, 2), dict(groups=2), (2, 4, 4)),
    # C_out = 0
    ((2, 4, 5), (0, 4, 2), {}, (2, 0, 4)),
    # zero-size spatial axis, with and without enough padding for the kernel
    ((1, 1, 0), (1, 1, 3), {}, (1, 1, 0)),
    ((1, 2, 0, 4), (2, 2, 2, 2), {}, (1, 2, 0, 3)),
    ((1, 1, 0), (2, 1, 3), dict(padding=2, cval=1.5), (1, 2, 2)),
]


@pytest.mark.parametrize("x_shape,w_shape,kw,y_shape", EMPTY_CONV_CASES)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_empty_conv(x_shape, w_shape, kw, y_shape, method, with_bias, rng):
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    bias = small_ints(rng, (w_shape[0],), np.float64) + 10 if with_bias else None
    y = cupyconv.conv(x, w, bias, method=method, **kw)
    assert y.shape == y_shape and y.dtype == np.float64
    np.testing.assert_array_equal(y, ref_conv(x, w, bias, **kw))
    if x_shape[1] == 0 and y.size:           # C_in = 0: exactly the bias (or 0)
        want = 0.0 if bias is None else bias.reshape(1, -1, 1)
        np.testing.assert_array_equal(y, np.broadcast_to(want, y_shape))
    # channels_last gives the same, transposed
    yl = cupyconv.conv(np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1), bias, method=method,
                       layout="channels_last", **kw)
    assert yl.shape == y_shape[:1] + y_shape[2:] + y_shape[1:2]


@pytest.mark.parametrize("mode", ["reflect", "symmetric", "wrap", "edge"])
def test_empty_spatial_axis_cannot_be_extended(mode):
    with pytest.raises(ValueError, match=rf"padding_mode='{mode}' cannot extend the empty "
                                          r"spatial axis 0"):
        cupyconv.conv(np.ones((1, 1, 0)), np.ones((1, 1, 3)), padding=2, padding_mode=mode)


#: (in1 shape, in2 shape, axes, expected full shape): a 0-length batch axis
EMPTY_BATCH_SIGNAL = [
    ((0, 5), (1, 3), 1, (0, 7)),
    ((1, 5), (0, 3), -1, (0, 7)),
    ((0, 5), (0, 3), [1], (0, 7)),
    ((2, 0, 5), (2, 0, 3), 2, (2, 0, 7)),
    ((3, 0, 4), (2, 1, 2), [0, 2], (4, 0, 5)),
]


@pytest.mark.parametrize("s1,s2,axes,want", EMPTY_BATCH_SIGNAL)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fn", ["convolve", "correlate"])
def test_empty_batch_axis_signal(s1, s2, axes, want, method, fn):
    y = getattr(cupyconv, fn)(np.ones(s1), np.ones(s2), method=method, axes=axes)
    assert y.shape == want


@pytest.mark.parametrize("s1,s2", [((0,), (3,)), ((3,), (0,)), ((4, 0), (2, 2)),
                                   ((0, 0), (1, 1))])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_empty_convolution_axis_is_a_value_error(s1, s2, method, mode):
    """Documented decision (convolve docstring, Raises): an empty *convolved*
    axis is a ValueError for every method and mode.  scipy is inconsistent
    here (direct returns (0, 4) for (0, 3)*(1, 2), fft raises IndexError,
    1-D direct raises ValueError), so there is nothing single to match."""
    for fn in (cupyconv.convolve, cupyconv.correlate):
        with pytest.raises(ValueError, match="must be non-empty along the convolution axes"):
            fn(np.ones(s1), np.ones(s2), mode, method=method)


# --------------------------------------------------------------------- 0-d

@pytest.mark.parametrize("a,b", [(2.0, 3j), (np.float32(1.5), np.float32(-2)), (3, 4),
                                 (np.array(2 + 1j), np.array(1 - 2j)), (True, False)])
@pytest.mark.parametrize("fn", ["convolve", "correlate"])
@pytest.mark.parametrize("method", METHODS)
def test_zero_rank_is_the_product(a, b, fn, method):
    res = dual_run(lambda sig, m: getattr(sig, fn)(a, b, method=m), method)
    ys, yc = res
    assert np.ndim(yc) == 0 and np.asarray(yc).dtype == np.asarray(ys).dtype
    want = a * (np.conj(b) if fn == "correlate" else b)
    assert yc == want == ys


def test_correlate_zero_rank_conjugates():
    assert cupyconv.correlate(2.0, 3j) == -6j
    assert cupyconv.convolve(2.0, 3j) == 6j


# --------------------------------------------------------- degenerate sizes

#: (in1 shape, in2 shape): 1-element inputs, 1x1 kernels, even kernels,
#: a kernel larger than the input on one or all axes.
DEGENERATE_SIGNAL = [
    ((1,), (1,)), ((1, 1, 1), (1, 1, 1)), ((5,), (1,)), ((1,), (5,)), ((4, 6), (1, 1)),
    ((6,), (2,)), ((7, 5), (4, 2)), ((3, 4), (6, 6)), ((2, 9), (5, 2)), ((1, 7), (2, 1)),
]


@pytest.mark.parametrize("s1,s2", DEGENERATE_SIGNAL)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fn", ["convolve", "correlate"])
def test_degenerate_signal_shapes_exact(s1, s2, mode, method, fn, rng):
    """Small integers as int64: exact for every method, against scipy and
    the reference (both must raise ValueError in the invalid valid cases)."""
    a, b = small_ints(rng, s1, np.int64), small_ints(rng, s2, np.int64)
    res = dual_run(lambda sig, m: getattr(sig, fn)(a, b, mode, method=m), method)
    if valid_mode_rejects(s1, s2, mode):
        assert res is None, "valid mode with neither input covering the other must raise"
        return
    assert res is not None, "both raised on operands scipy accepts"
    ys, yc = res
    np.testing.assert_array_equal(yc, ys)
    np.testing.assert_array_equal(yc, ref_convolve(a, b, mode, correlate=fn == "correlate",
                                                   dtype=object).astype(np.int64))


#: (S, K, stride): stride larger than the kernel, 1x1 kernels with stride,
#: stride larger than the input (a single output).
STRIDE_CASES = [(9, 2, 3), (10, 1, 4), (7, 3, 5), (4, 2, 9), (13, 1, 13)]


@pytest.mark.parametrize("s,k,stride", STRIDE_CASES)
@pytest.mark.parametrize("method", METHODS)
def test_stride_larger_than_kernel(s, k, stride, method, rng):
    x = small_ints(rng, (2, 3, s, s), np.int64)
    w = small_ints(rng, (2, 3, k, k), np.int64)
    y = cupyconv.conv(x, w, stride=stride, method=method)
    assert y.shape[2:] == ((s - k) // stride + 1,) * 2
    np.testing.assert_array_equal(y, ref_conv(x, w, stride=stride, dtype=object)
                                  .astype(np.int64))


@pytest.mark.parametrize("method", METHODS)
def test_one_by_one_kernel_is_a_channel_matmul(method, rng):
    x = small_ints(rng, (2, 5, 3, 4), np.int64)
    w = small_ints(rng, (7, 5, 1, 1), np.int64)
    y = cupyconv.conv(x, w, method=method)
    np.testing.assert_array_equal(y, np.einsum("kc,nchw->nkhw", w[:, :, 0, 0], x))

