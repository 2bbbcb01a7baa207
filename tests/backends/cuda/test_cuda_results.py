"""The CUDA path (emulated or real) against the NumPy backend and references.

Small-integer inputs make direct / gemm / implicit_gemm results exact, so
those compare with ``array_equal``; FFT results compare normwise (reason:
transform rounding grows like log(n) * u, see tests/helpers.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cupyconv
from helpers import ref_conv, ref_convolve, small_ints, valid_mode_rejects

EXACT_METHODS = ("direct", "gemm", "implicit_gemm")
#: FFT in float64 on small-integer data: normwise error ~ log2(n) * 1.1e-16;
#: 1e-12 leaves three orders of magnitude of slack and still catches any
#: indexing error (which is O(1)).
FFT_RTOL = 1e-12


def _check(dev, y, ref, method):
    y = dev.to_host(y)
    assert y.shape == ref.shape
    if method in EXACT_METHODS or ref.dtype.kind in "iu":
        np.testing.assert_array_equal(y, ref)
    else:
        err = np.linalg.norm((y - ref).ravel()) / max(np.linalg.norm(ref.ravel()), 1e-300)
        assert err < FFT_RTOL


SIGNAL_CASES = [
    # (in1 shape, in2 shape, axes)                           why
    ((9,), (4,), None),                                      # 1-D, even kernel
    ((7, 5), (3, 6), None),                                  # kernel wider than input
    ((5, 4, 6), (2, 3, 3), None),                            # 3-D
    ((3, 4, 3, 5), (2, 2, 3, 1), None),                      # 4-D with a size-1 axis
    ((3, 2, 3, 2, 4), (2, 1, 2, 2, 3), None),                # 5-D
    ((3, 9, 7), (1, 3, 2), (1, 2)),                          # batch axis, shared kernel
    ((3, 9, 7), (3, 3, 2), (1, 2)),                          # batch axis, per-row kernel
]


@pytest.mark.parametrize("shapes", SIGNAL_CASES, ids=lambda c: f"{c[0]}*{c[1]}ax{c[2]}")
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("method", ["direct", "gemm", "implicit_gemm", "fft", "auto"])
def test_convolve_correlate_float64(dev, rng, shapes, mode, method):
    s1, s2, axes = shapes
    a, b = small_ints(rng, s1, np.float64), small_ints(rng, s2, np.float64)
    for correlate, fn in ((False, cupyconv.convolve), (True, cupyconv.correlate)):
        if valid_mode_rejects(s1, s2, mode, axes):
            with pytest.raises(ValueError, match="For 'valid' mode"), dev.scope():
                fn(dev.to_dev(a), dev.to_dev(b), mode, method, axes=axes)
            continue
        ref = ref_convolve(a, b, mode, axes=axes, correlate=correlate)
        with dev.scope():
            y = fn(dev.to_dev(a), dev.to_dev(b), mode, method, axes=axes)
        _check(dev, y, ref.astype(np.float64), method if method != "auto" else "fft")


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64, np.float32, np.int64, np.int16])
@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm"])
def test_dtypes_exact(dev, rng, dtype, method):
    a, b = small_ints(rng, (6, 5), dtype), small_ints(rng, (3, 2), dtype)
    for correlate, fn in ((False, cupyconv.convolve), (True, cupyconv.correlate)):
        ref = ref_convolve(a, b, "full", correlate=correlate)
        with dev.scope():
            y = fn(dev.to_dev(a), dev.to_dev(b), "full", method)
        assert y.dtype == np.result_type(a, b)
        np.testing.assert_array_equal(dev.to_host(y), ref.astype(y.dtype))


@st.composite
def conv_geometry(draw, max_rank=3):
    rank = draw(st.integers(1, max_rank))
    groups = draw(st.sampled_from([1, 2]))
    cg, kg = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    ks = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    pads = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(rank))
    mode = draw(st.sampled_from(["constant", "reflect", "symmetric", "wrap", "edge"]))
    s = []
    for k, d, (pb, pa) in zip(ks, dil, pads):
        lo = max(1, d * (k - 1) + 1 - pb - pa)
        if mode == "reflect":
            lo = max(lo, 2)
        s.append(draw(st.integers(lo, lo + 5)))
    return dict(x_shape=(draw(st.integers(1, 2)), cg * groups) + tuple(s),
                w_shape=(kg * groups, cg) + ks, stride=stride, dilation=dil, padding=pads,
                groups=groups, padding_mode=mode,
                cval=draw(st.sampled_from([0.0, 2.0])) if mode == "constant" else 0.0,
                layout=draw(st.sampled_from(["channels_first", "channels_last"])),
                bias=draw(st.booleans()))


def _conv_operands(rng, g):
    x = small_ints(rng, g["x_shape"], np.float64)
    w = small_ints(rng, g["w_shape"], np.float64)
    if g["layout"] == "channels_last":
        x, w = np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy()
    b = small_ints(rng, (g["w_shape"][0],), np.float64) if g["bias"] else None
    return x, w, b


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])  # `dev` holds no state
@given(g=conv_geometry(), method=st.sampled_from(EXACT_METHODS + ("fft", "auto")),
       seed=st.integers(0, 2**16))
def test_conv_geometry(dev, g, method, seed):
    rng = np.random.default_rng(seed)
    x, w, b = _conv_operands(rng, g)
    geo = {k: g[k] for k in ("stride", "dilation", "padding", "groups", "padding_mode",
                             "cval", "layout")}
    ref = ref_conv(x, w, b, **geo)
    fft_ok = g["padding_mode"] == "constant" and g["cval"] == 0
    with dev.scope():
        if method == "fft" and not fft_ok:
            with pytest.raises(ValueError, match="FFT path supports zero constant padding"):
                cupyconv.conv(dev.to_dev(x), dev.to_dev(w), dev.to_dev(b), method=method,
                              **geo)
            return
        y = cupyconv.conv(dev.to_dev(x), dev.to_dev(w), dev.to_dev(b), method=method, **geo)
    _check(dev, y, ref, method if method != "auto" else "fft")


@pytest.mark.parametrize("rank", [4, 5])
@pytest.mark.parametrize("method", EXACT_METHODS)
def test_conv_high_rank(dev, rng, rank, method):
    x = small_ints(rng, (1, 2) + (4,) * rank, np.float64)
    w = small_ints(rng, (3, 2) + (2,) * rank, np.float64)
    geo = dict(stride=2, padding=1, padding_mode="wrap")
    with dev.scope():
        y = cupyconv.conv(dev.to_dev(x), dev.to_dev(w), method=method, **geo)
    np.testing.assert_array_equal(dev.to_host(y), ref_conv(x, w, **geo))


def test_conv_out_and_views(dev, rng):
    """out=, flipped / sliced / transposed views (results equal the contiguous ones)."""
    x = small_ints(rng, (2, 3, 9, 8), np.float64)
    w = small_ints(rng, (4, 3, 3, 2), np.float64)
    ref = ref_conv(x, w, padding=1)
    views = {
        "flipped": (x[:, :, ::-1], w[:, :, ::-1],
                    ref_conv(x[:, :, ::-1], w[:, :, ::-1], padding=1)),
        "sliced": (x[:, :, 1:8:2], w, ref_conv(x[:, :, 1:8:2], w, padding=1)),
        "fortran": (np.asfortranarray(x), np.asfortranarray(w), ref),
        "broadcast_w": (x, np.broadcast_to(w[:1], w.shape), ref_conv(
            x, np.broadcast_to(w[:1], w.shape).copy(), padding=1)),
    }
    for name, (xv, wv, r) in views.items():
        for method in EXACT_METHODS:
            out = dev.xp.empty(r.shape)
            with dev.scope():
                y = cupyconv.conv(dev.to_dev(xv) if dev.name == "emulated" else dev.xp.asarray(xv),
                                  dev.to_dev(wv), padding=1, method=method, out=out)
            assert y is out
            np.testing.assert_array_equal(dev.to_host(y), r, err_msg=f"{name} {method}")


def test_plan_runs_on_backend(dev, rng):
    x = small_ints(rng, (2, 3, 6, 5, 4), np.float64)
    w = small_ints(rng, (4, 3, 3, 1, 2), np.float64)
    plan = cupyconv.plan_conv(x.shape, w.shape, np.float64, padding="same",
                              backend=dev.name)
    assert plan.backend == dev.name and repr(plan).startswith("ConvPlan(3-D conv")
    y = plan(dev.to_dev(x), dev.to_dev(w))
    np.testing.assert_array_equal(dev.to_host(y), ref_conv(
        x, w, padding=((1, 1), (0, 0), (0, 1))))
