"""A bias is cast to the result dtype of x and w (never promotes it), on every entry point.

``np.zeros(C)`` is float64: a float32 layer given it stays float32, as PyTorch's and
Flax's layers keep their parameter dtype.  A bias of another kind (float on integer data,
complex on real data) is refused.  Small integers keep every sum exact in float32, so the
reference (the tap loop of tests/helpers.py, bias cast first) compares exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from helpers import ref_conv, small_ints


def _operands(rng, dtype=np.float32):
    x = small_ints(rng, (2, 3, 6, 5), dtype)
    w = small_ints(rng, (4, 3, 3, 3), dtype)
    bias = small_ints(rng, (4,), np.float64)            # np.zeros(C)-style: float64
    return x, w, bias


def _transpose_reference(x, w, bias):
    """``conv_transpose`` as the adjoint tap loop: every input scatters its weights."""
    n, c_in, h, wd = x.shape
    c_out, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    y = np.zeros((n, c_out, h + kh - 1, wd + kw - 1), np.float64)
    for i, j in np.ndindex(kh, kw):
        y[:, :, i:i + h, j:j + wd] += np.einsum("nchw,co->nohw", x.astype(np.float64),
                                                w[:, :, i, j].astype(np.float64))
    return y + bias.reshape(1, -1, 1, 1)


def test_float64_bias_keeps_a_float32_conv_float32(any_dev, rng):
    x, w, bias = _operands(rng)
    ref = ref_conv(x, w, bias.astype(np.float32), padding=1)
    with any_dev.scope():
        y = cupyconv.conv(any_dev.to_dev(x), any_dev.to_dev(w), any_dev.to_dev(bias),
                          padding=1)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(any_dev.to_host(y), ref)


def test_float64_bias_keeps_a_float32_conv_transpose_float32(any_dev, rng):
    x, w, bias = _operands(rng)
    wt = small_ints(rng, (3, 4, 3, 3), np.float32)        # (C_in, C_out, *K)
    with any_dev.scope():
        y = cupyconv.conv_transpose(any_dev.to_dev(x), any_dev.to_dev(wt),
                                    any_dev.to_dev(bias))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(any_dev.to_host(y), _transpose_reference(x, wt, bias))


def test_float64_bias_keeps_a_float32_plan_float32(any_dev, rng):
    x, w, bias = _operands(rng)
    plan = cupyconv.plan_conv(x.shape, w.shape, np.float32, padding=1, backend=any_dev.name)
    with any_dev.scope():
        y = plan(any_dev.to_dev(x), any_dev.to_dev(w), any_dev.to_dev(bias))
        frozen = cupyconv.plan_conv(x.shape, w.shape, np.float32, padding=1,
                                    backend=any_dev.name, weights=any_dev.to_dev(w))
        yf = frozen(any_dev.to_dev(x), bias=any_dev.to_dev(bias))
    ref = ref_conv(x, w, bias.astype(np.float32), padding=1)
    for got in (y, yf):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(any_dev.to_host(got), ref)


def test_the_cast_bias_result_equals_a_bias_given_in_the_result_dtype(rng):
    """The cast is the only effect: a float32 bias and its float64 twin give the same bits."""
    x, w, bias = _operands(rng)
    bias = bias + 0.1                   # not exact in float32: the cast rounds once
    np.testing.assert_array_equal(cupyconv.conv(x, w, bias),
                                  cupyconv.conv(x, w, bias.astype(np.float32)))


def _refusals(rng):
    """``{name: call}`` of entry points given a bias of another kind than their result."""
    xi, wi, _ = _operands(rng, np.int32)
    x, w, _ = _operands(rng)
    wt = small_ints(rng, (3, 4, 3, 3), np.float32)
    plan = cupyconv.plan_conv(xi.shape, wi.shape, np.int32, backend="numpy")
    return {
        "conv float bias on int32": lambda: cupyconv.conv(xi, wi, np.zeros(4)),
        "conv complex bias on float32": lambda: cupyconv.conv(x, w, np.zeros(4, complex)),
        "plan float bias on int32": lambda: plan(xi, wi, np.zeros(4)),
        "conv_transpose complex bias on float32": lambda: cupyconv.conv_transpose(
            x, wt, np.zeros(4, complex)),
    }


@pytest.mark.parametrize("name", list(_refusals(np.random.default_rng(0))))
def test_a_bias_of_another_kind_is_refused(rng, name):
    with pytest.raises(TypeError, match=r"bias has dtype .* does not cast to the result"):
        _refusals(rng)[name]()


def test_an_integer_bias_on_float_data_is_cast(rng):
    x, w, _ = _operands(rng)
    y = cupyconv.conv(x, w, np.arange(4))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, ref_conv(x, w, np.arange(4.0, dtype=np.float32)))
