"""The implicit GEMM's weight gradient computes only what the weights need.

It runs as a forward convolution whose first ``KS`` outputs are ``dw``; with a large
stride most of the input lies past what those read.  The memory the call allocates
(the call-accounting counters, not timing) must not grow with that unread tail, and
the result must equal the ``gemm`` algorithm's.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cupyconv
from cupyconv._kernels import program
from helpers import small_ints

pytestmark = pytest.mark.skipif("emulated" not in cupyconv.available_backends(),
                                reason="CUDA emulation unavailable")

C, K, TAPS = 8, 8, 3


def _allocated(x, dy, method, **geometry):
    with cupyconv.use_backend("emulated"), program.accounting() as counts:
        dw = cupyconv.conv_grad_weight(x, dy, (K, C, TAPS), method=method, **geometry)
    return dw, counts["allocated_bytes"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("padding,padding_mode", [(0, "constant"), (1, "constant"),
                                                  (2, "reflect"), (1, "edge")])
def test_a_strided_weight_gradient_allocates_nothing_for_the_unread_input(
        rng, dtype, padding, padding_mode):
    used = {}
    for length in (4096, 16384):                 # the same dy, four times the unread tail
        stride = length // 2 + 2 * padding      # two output positions
        x = small_ints(rng, (1, C, length), dtype)
        dy = small_ints(rng, (1, K, 2), dtype)
        geometry = dict(stride=stride, padding=padding, padding_mode=padding_mode)
        dw, used[length] = _allocated(x, dy, "implicit_gemm", **geometry)
        want, _ = _allocated(x, dy, "gemm", **geometry)
        np.testing.assert_array_equal(dw, want)   # small integers: exact sums
    assert used[4096] == used[16384]
    # dw, the forward output (the first TAPS positions of every (c, k) pair) and at most
    # the re-laid x and dy cut to those positions: a few kilobytes, not the input's size
    assert used[16384] < 16384 * C * np.dtype(dtype).itemsize // 4


def test_a_wrapped_weight_gradient_keeps_the_whole_input(rng):
    """``wrap``'s left padding reads the axis' end: the input is not cut there, and the
    result still equals ``gemm``'s."""
    x = small_ints(rng, (1, C, 64), np.float64)
    dy = small_ints(rng, (1, K, 2), np.float64)
    geometry = dict(stride=34, padding=2, padding_mode="wrap")      # two outputs
    dw, _ = _allocated(x, dy, "implicit_gemm", **geometry)
    want, _ = _allocated(x, dy, "gemm", **geometry)
    np.testing.assert_array_equal(dw, want)


@settings(max_examples=30)
@given(length=st.integers(1, 24), taps=st.integers(1, 4), stride=st.integers(1, 9),
       dilation=st.integers(1, 3), pad=st.tuples(st.integers(0, 5), st.integers(0, 5)),
       mode=st.sampled_from(["constant", "reflect", "symmetric", "edge", "wrap"]))
def test_a_cut_weight_gradient_equals_gemm_for_every_boundary(length, taps, stride,
                                                              dilation, pad, mode):
    """Wherever the input is cut (or, where a boundary mode reads past the cut, is not),
    the implicit GEMM's weight gradient equals ``gemm``'s exactly (small integers)."""
    geometry = dict(stride=stride, dilation=dilation, padding=[pad], padding_mode=mode)
    span = dilation * (taps - 1) + 1
    if length + sum(pad) < span:
        return                                    # no output: nothing to cut
    out = (length + sum(pad) - span) // stride + 1
    rng = np.random.default_rng(length * 1000 + stride)
    x = small_ints(rng, (2, 2, length), np.float64)
    dy = small_ints(rng, (2, 3, out), np.float64)
    with cupyconv.use_backend("emulated"):
        try:
            want = cupyconv.conv_grad_weight(x, dy, (3, 2, taps), method="gemm", **geometry)
        except ValueError:                        # a boundary mode this extent cannot pad
            return
        got = cupyconv.conv_grad_weight(x, dy, (3, 2, taps), method="implicit_gemm",
                                        **geometry)
    np.testing.assert_array_equal(got, want)
