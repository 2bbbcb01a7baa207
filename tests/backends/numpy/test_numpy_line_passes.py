"""The CPU's 1-D passes in pieces: ``direct.line_chunks`` and who runs a float64 pass.

A pass whose axis is outer to every other long axis (the first axis of an image) is cut
into slabs along that axis itself, each reading its own rows of the input (the stride
and dilation of the pass included); otherwise along the outermost other axis, as before.
Both pieces must give the whole-array result: the arrays here are past
``2 * direct.CHUNK`` elements, so they are cut.  A float64 pass runs in
``scipy.ndimage.correlate1d`` only along axes whose stride is at most
``SCIPY_STRIDE_BYTES`` (docs/algorithms.md), and the NumPy passes sum in SciPy's order,
so the results stay bitwise SciPy's either way.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage

import cupyconv
from cupyconv.backends.numpy import direct
from cupyconv.ndimage.filters import gaussian_kernel1d


def test_pieces_along_the_pass_axis_when_it_is_outermost():
    pieces = direct.line_chunks((1, 1, 800, 200), 2, [0, 3])
    assert [off for _, off in pieces][:2] == [0, 163] and len(pieces) == 5
    assert pieces[-1][0][2] == slice(652, 815)
    inner = direct.line_chunks((1, 1, 800, 200), 3, [0, 2])          # along axis 2
    assert all(off is None for _, off in inner) and inner[0][0][2] == slice(0, 163)
    assert direct.line_chunks((1, 1, 10, 10), 2, [0, 3]) == [((), None)]   # one piece
    deep = direct.line_chunks((2, 1, 64, 64, 64), 3, [0, 2, 4])     # batch outermost
    assert all(off is None for _, off in deep)


def test_who_runs_a_float64_pass():
    assert direct.scipy_line_faster((1, 1, 1024, 1024), 3, 8)        # the last axis
    assert direct.scipy_line_faster((1, 1, 32, 32, 32, 32), 4, 8)    # 256-byte stride
    assert not direct.scipy_line_faster((1, 1, 1024, 1024), 2, 8)    # 8 KiB stride
    assert not direct.scipy_line_faster((1, 1, 128, 128, 128), 3, 8)


@pytest.mark.parametrize("shape", [(900, 300), (300, 900), (40, 60, 50)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_passes_in_pieces_match_scipy(shape, dtype, rng):
    """Every axis, a symmetric, an antisymmetric and a general kernel: float64 bitwise
    SciPy's (the pieces do not change the order of the sums), float32 within its
    rounding."""
    x = rng.standard_normal(shape)
    kernels = (gaussian_kernel1d(1.5, 0, 4), np.array([1.0, -2.0, 0.0, 2.0, -1.0]),
               rng.standard_normal(6))
    for axis in range(len(shape)):
        for w in kernels:
            ref = scipy.ndimage.correlate1d(x, w, axis=axis, mode="mirror")
            got = cupyconv.ndimage.correlate1d(x.astype(dtype), w, axis=axis, mode="mirror")
            if dtype == np.float64:
                np.testing.assert_array_equal(got, ref)
            else:
                np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * np.abs(ref).max())


@pytest.mark.parametrize("stride,dilation", [(1, 1), (2, 1), (1, 2), (3, 2)])
def test_separable_pieces_with_stride_and_dilation(stride, dilation, rng):
    """The separable passes cut along the pass axis read the strided, dilated rows of
    their own piece."""
    x = rng.standard_normal((1, 1, 800, 200))
    w = np.multiply.outer(rng.standard_normal(5), rng.standard_normal(4))[None, None]
    kw = dict(stride=(stride, 1), dilation=(dilation, 1), padding=((2, 1), (1, 2)),
              padding_mode="reflect")
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        got = cupyconv.conv(x.astype(dtype), w.astype(dtype), method="separable", **kw)
        ref = cupyconv.conv(x, w, method="direct", **kw)
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("mode", ["reflect", "constant", "nearest", "mirror", "wrap"])
def test_integer_moving_averages_on_strided_axes_are_scipys(dtype, mode, rng, monkeypatch):
    """8/16-bit moving averages along an axis with a stride past 512 bytes are the
    engine's float32 tap sums (``common.ENGINE_WINDOW``), not SciPy's running sum: the
    same truncated integers, every window up to the limit, both origins' ends, a cval."""
    from cupyconv.ndimage import common
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -3000), min(info.max, 3000) + 1, (300, 700)).astype(dtype)
    calls = []
    real = scipy.ndimage.uniform_filter1d
    monkeypatch.setattr(common, "scipy_uniform_filter1d",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    for size in (2, 3, 8, 9, common.ENGINE_WINDOW):
        for origin in (-(size // 2), 0, (size - 1) // 2):
            got = cupyconv.ndimage.uniform_filter1d(x, size, axis=0, mode=mode, cval=7,
                                                    origin=origin)
            ref = real(x, size, axis=0, mode=mode, cval=7, origin=origin)
            np.testing.assert_array_equal(got, ref, err_msg=f"{size} {origin}")
    assert calls == []                                    # the engine ran every one
    cupyconv.ndimage.uniform_filter1d(x, 9, axis=1, mode=mode)      # the last axis: SciPy
    cupyconv.ndimage.uniform_filter1d(x, common.ENGINE_WINDOW + 2, axis=0, mode=mode)
    assert len(calls) == 2


@pytest.mark.parametrize("shape", [(7,), (3, 200, 1), (40, 5, 50), (2, 3), (300, 70)])
@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
def test_passes_without_padded_copy_are_scipys_at_every_boundary(shape, mode, rng,
                                                                   monkeypatch):
    """The NumPy pass reads the unpadded input and gathers only the boundary rows: along
    every axis (axes shorter than the kernel included), every origin, odd and even,
    symmetric, antisymmetric and general kernels, float64 results are SciPy's bit for
    bit (the NumPy pass runs along the contiguous axes too here)."""
    monkeypatch.setattr(direct, "scipy_line_applies", lambda problem: False)
    x = rng.standard_normal(shape)
    half = rng.standard_normal(2)
    kernels = (rng.standard_normal(1), rng.standard_normal(4), np.r_[half, 1.5, half[::-1]],
               np.r_[half, 0.0, -half[::-1]], gaussian_kernel1d(1.5, 0, 6))
    for axis in range(len(shape)):
        for w in kernels:
            k = w.shape[0]
            for origin in sorted({-(k // 2), 0, (k - 1) // 2}):
                kw = dict(axis=axis, mode=mode, cval=2.5, origin=origin)
                np.testing.assert_array_equal(cupyconv.ndimage.correlate1d(x, w, **kw),
                                              scipy.ndimage.correlate1d(x, w, **kw),
                                              err_msg=f"{axis} {k} {kw}")


@pytest.mark.parametrize("padding", [((0, 0),), ((2, 1),), ((6, 0),), ((0, 4),)])
@pytest.mark.parametrize("padding_mode", ["constant", "reflect", "wrap", "edge"])
def test_passes_with_other_output_sizes(padding, padding_mode, rng):
    """A pass whose output rows differ from the input's (not SciPy's same size) runs one
    run per plane: the tap loop agrees with the FFT."""
    x = rng.standard_normal((3, 1, 40, 50))
    for ks in ((5, 1), (1, 5)):
        pads = padding + ((0, 0),) if ks[0] > 1 else ((0, 0),) + padding
        w = rng.standard_normal((1, 1) + ks)
        kw = dict(padding=pads, padding_mode=padding_mode)
        got = cupyconv.conv(x, w, method="direct", **kw)
        ref = cupyconv.conv(x, w, method="fft", **kw)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
