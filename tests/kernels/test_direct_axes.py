"""The direct kernel's single-channel problems re-viewed on fewer, better-shaped axes
(``cupyconv/_kernels/direct_axes.py``): the plans, the cases left alone, and the results
on the emulated kernels against the NumPy backend for every padding mode and for views
whose strides do and do not merge."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cupyconv
import cupyconv.ndimage
from cupyconv._emulation import EmulatedFunction
from cupyconv._kernels import registry
from cupyconv._kernels.direct_axes import reduced
from cupyconv._kernels.launch import operand_strides
from cupyconv.core.problem import ConvProblem


def _reduce(x_shape, w_shape, x=None, **kw):
    """``(problem, reduced(...) or None)`` for arrays of these shapes (``x`` as given)."""
    p = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=np.float32, **kw)
    x = np.zeros(x_shape, np.float32) if x is None else x
    y = np.zeros((p.batch, p.out_channels) + p.out_shape, np.float32)
    w = np.zeros(w_shape, np.float32)
    strides = [operand_strides(p, a, which) for a, which in ((x, "x"), (w, "w"), (y, "y"))]
    return p, reduced(p, *strides, registry.MAX_RANK)


@pytest.mark.parametrize("x_shape,w_shape,padding,shape,kernel", [
    # a pass along the outer axis: H = that axis, W = the three others merged
    ((1, 1, 40, 40, 40, 40), (1, 1, 7, 1, 1, 1), ((3, 3), (0, 0), (0, 0), (0, 0)),
     (46, 64000), (7, 1)),
    # along a middle axis: the leading axis stays outer, the trailing two merge
    ((1, 1, 40, 40, 40, 40), (1, 1, 1, 7, 1, 1), ((0, 0), (3, 3), (0, 0), (0, 0)),
     (40, 46, 1600), (1, 7, 1)),
    # along the last axis: every other axis (the batch too) is H
    ((2, 1, 40, 40, 40), (1, 1, 1, 1, 7), ((0, 0), (0, 0), (3, 3)), (3200, 46), (1, 7)),
    # a rank-1 pass over many rows becomes rank 2 (rows as H)
    ((6400, 1, 40), (1, 1, 7), ((3, 3),), (6400, 46), (1, 7)),
])
def test_plans(x_shape, w_shape, padding, shape, kernel):
    p, (q, xs, ws, ys) = _reduce(x_shape, w_shape, padding=padding, padding_mode="reflect")
    assert q.padded_shape() == shape and q.kernel_shape == kernel and q.batch == 1
    assert xs[1] == (1, 1, q.in_shape) and ys[1] == (1, 1, q.out_shape)
    assert ws[1] == (1, 1, kernel) and q.padding_mode == "reflect"
    assert ys[0][2][-1] == 1 and xs[0][2][-1] == 1          # W: the contiguous axis


@pytest.mark.parametrize("x_shape,w_shape", [
    ((1, 1, 16, 16, 16), (1, 1, 3, 3, 3)),      # no one-tap axis: the problem as given
    ((4, 1, 16, 16, 16), (1, 1, 3, 3, 3)),      # the batch would raise the rank to 4
    ((3, 2, 16, 16), (1, 2, 1, 3)),             # two channels: the batch is tied to them
])
def test_left_alone(x_shape, w_shape):
    _, out = _reduce(x_shape, w_shape, padding=1)
    assert out is None


def test_channels_keep_the_batch_but_merge_spatial_axes():
    """Depthwise passes (the separable algorithm's, G > 1) and multi-channel problems:
    the trailing one-tap axes merge, the batch stays the batch."""
    _, (q, xs, ws, ys) = _reduce((2, 3, 20, 30, 40), (3, 1, 5, 1, 1), groups=3,
                                 padding=((2, 2), (0, 0), (0, 0)))
    assert (q.batch, q.in_shape, q.kernel_shape) == (2, (20, 1200), (5, 1))
    assert xs == ((72000, 24000, (1200, 1)), (2, 3, (20, 1200)))
    assert ws[1] == (3, 1, (5, 1)) and ys[1] == (2, 3, (20, 1200))


def test_only_strides_that_agree_merge():
    base = np.zeros((1, 1, 8, 9, 20), np.float32)
    x = base[..., :10]                         # rows of 10 every 20 elements: no merge
    _, out = _reduce(x.shape, (1, 1, 3, 1, 1), x=x, padding=((1, 1), (0, 0), (0, 0)))
    assert out is None                         # the axes as given: nothing merges
    _, (q, xs, _, _) = _reduce(x.shape, (1, 1, 3, 1, 1), x=base[..., ::2],
                               padding=((1, 1), (0, 0), (0, 0)))
    assert q.in_shape == (8, 90) and xs[0][2] == (180, 2)    # every other element


def _launched_ranks(fn):
    ranks, call = [], EmulatedFunction.__dict__["__call__"]

    def spy(self, *a, **kw):
        ranks.append(int(self.name.split(",")[2]))
        return call(self, *a, **kw)
    EmulatedFunction.__call__ = spy
    try:
        return fn(), ranks
    finally:
        EmulatedFunction.__call__ = call


@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
@pytest.mark.parametrize("view", ["contiguous", "reversed", "strided", "transposed"])
def test_emulated_passes_match_numpy(mode, view, rng):
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    x = rng.standard_normal((6, 7, 9))
    x = {"contiguous": x, "reversed": x[::-1, :, ::-1],
         "strided": np.repeat(x, 2, axis=1)[:, ::2], "transposed": x.transpose(2, 0, 1)}[view]
    ref = cupyconv.ndimage.gaussian_filter(x, 1.2, mode=mode, cval=0.5)
    with cupyconv.use_backend("emulated"):
        y, ranks = _launched_ranks(
            lambda: cupyconv.ndimage.gaussian_filter(x, 1.2, mode=mode, cval=0.5))
        k = rng.standard_normal((1, 5, 1))
        z = cupyconv.ndimage.correlate(x, k, mode=mode, cval=0.5)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(z, cupyconv.ndimage.correlate(x, k, mode=mode, cval=0.5),
                               rtol=1e-12, atol=1e-12)
    if view == "contiguous":          # the outer and the last pass ran as 2-D problems
        assert ranks[0] == 2 and ranks[-1] == 2, ranks


@pytest.mark.parametrize("groups,cin,cout,kernel", [(3, 3, 3, (5, 1, 1)), (1, 2, 4, (1, 3, 1)),
                                                    (2, 4, 2, (1, 1, 3)), (1, 1, 1, (3, 1, 1))])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "circular"])
def test_emulated_conv_matches_numpy(groups, cin, cout, kernel, padding_mode, rng):
    """Multi-channel and depthwise ``direct`` launches with one-tap axes (merged on the
    spatial side only) against the NumPy backend, on a non-contiguous batch."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    x = rng.standard_normal((4, cin, 5, 6, 7))[::2]
    w = rng.standard_normal((cout, cin // groups) + kernel)
    kw = dict(groups=groups, padding="same", padding_mode=padding_mode, method="direct")
    ref = cupyconv.conv(x, w, **kw)
    with cupyconv.use_backend("emulated"):
        np.testing.assert_allclose(cupyconv.conv(x, w, **kw), ref, rtol=1e-12, atol=1e-12)


@st.composite
def _one_tap_problems(draw):
    """Small problems with one-tap axes (merged or not), any padding mode, reversed and
    stepped views of ``x``, one channel or depthwise."""
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank))
    kernel = [draw(st.sampled_from((1, 1, 2, 3))) if n > 1 else 1 for n in shape]
    groups = draw(st.sampled_from((1, 1, 2)))
    batch = draw(st.integers(1, 3))
    steps = draw(st.lists(st.sampled_from((1, 1, -1, 2)), min_size=rank, max_size=rank))
    mode = draw(st.sampled_from(("zeros", "reflect", "replicate", "circular")))
    return batch, groups, shape, kernel, steps, mode


@settings(max_examples=30)
@given(case=_one_tap_problems())
def test_emulated_direct_on_reduced_axes_property(case):
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is not available here")
    batch, groups, shape, kernel, steps, mode = case
    rng = np.random.default_rng(0)
    big = rng.standard_normal((batch, groups) + tuple(n * abs(s) for n, s in zip(shape, steps)))
    x = big[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in steps)]
    x = x[(slice(None), slice(None)) + tuple(slice(0, n) for n in shape)]
    w = rng.standard_normal((groups, 1) + tuple(kernel))
    pad = [k // 2 for k in kernel]
    if mode in ("reflect", "circular") and any(p >= n for p, n in zip(pad, shape)):
        return                                     # beyond what those modes can pad
    kw = dict(groups=groups, padding=pad, padding_mode=mode, method="direct")
    ref = cupyconv.conv(x, w, **kw)
    with cupyconv.use_backend("emulated"):
        np.testing.assert_allclose(cupyconv.conv(x, w, **kw), ref, rtol=1e-12, atol=1e-12)
