"""``precision=``: TF32 numerics (operands rounded as cvt.rna.tf32.f32, float32 sums) on
every algorithm and backend; ``"highest"`` by default; errors for other dtypes."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv import config
from cupyconv.backends.arrays import to_tf32

from helpers import ref_conv

F32 = np.float32


def _bits(v):
    return np.asarray(v, F32).view(np.uint32)


@pytest.mark.parametrize("x, expected", [
    (1 + 2.0**-11, 1 + 2.0**-10),          # a tie rounds away from zero
    (-(1 + 2.0**-11), -(1 + 2.0**-10)),
    (1 + 2.0**-11 - 2.0**-23, 1.0),         # below the tie
    (1 + 3 * 2.0**-11, 1 + 2 * 2.0**-10),   # a tie between odd and even: still away
    (np.finfo(F32).max, np.inf),            # rounds past the largest TF32 value
    (np.inf, np.inf), (-np.inf, -np.inf), (0.0, 0.0), (-0.0, -0.0),
    (2.0**-130, 2.0**-130),                 # a denormal on the TF32 grid
    (2.0**-140, 0.0),                       # a denormal below half the TF32 spacing
])
def test_to_tf32_rounds_as_cvt_rna(x, expected):
    got = to_tf32(np.array([x], F32))
    assert _bits(got)[0] == _bits(np.array([expected], F32))[0]


def test_to_tf32_keeps_nan_and_clears_13_bits():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(10000).astype(F32) * rng.choice([1e-30, 1.0, 1e30], 10000).astype(F32)
    y = to_tf32(x)
    assert not (_bits(y) & 0x1FFF).any()
    assert np.all(np.abs(y - x) <= np.abs(x) * 2.0**-11)
    assert np.isnan(to_tf32(np.array([np.nan], F32)))[0]


def _layer(rng):
    x = rng.standard_normal((2, 16, 12, 12)).astype(F32)
    w = rng.standard_normal((8, 16, 3, 3)).astype(F32)
    return x, w, ref_conv(x, w, padding=1, dtype=np.float64)


def _err(y, ref):
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("backend", ["numpy", "emulated"])
@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm", "fft"])
def test_tf32_is_within_its_bound_and_less_accurate_than_float32(backend, method, rng):
    """Bound: TF32 operands carry a relative error of 2**-11 each, so a product's is
    <= 2**-10; summed with random signs over K = 144 products the relative-norm error
    stays well under c * 2**-10 (c = 2), far above float32's ~1e-7 (which proves TF32 ran)."""
    if backend not in cupyconv.available_backends():
        pytest.skip(f"{backend} backend unavailable")
    x, w, ref = _layer(rng)
    with cupyconv.use_backend(backend):
        high = cupyconv.conv(x, w, padding=1, method=method)
        tf32 = cupyconv.conv(x, w, padding=1, method=method, precision="tf32")
    assert tf32.dtype == F32
    assert _err(tf32, ref) <= 2 * 2.0**-10
    assert _err(tf32, ref) > 30 * _err(high, ref)
    # the same numbers as float32 arithmetic on the rounded operands
    np.testing.assert_allclose(tf32, cupyconv.conv(to_tf32(x), to_tf32(w), padding=1,
                                                   method=method), rtol=1e-5, atol=1e-5)


def test_every_entry_point_takes_precision(rng):
    x, w, ref = _layer(rng)
    dy = rng.standard_normal(ref.shape).astype(F32)
    calls = {
        "convolve": lambda p: cupyconv.convolve(x[0, 0], w[0, 0], precision=p),
        "correlate": lambda p: cupyconv.correlate(x[0, 0], w[0, 0], precision=p),
        "grad_input": lambda p: cupyconv.conv_grad_input(dy, w, x.shape, padding=1, precision=p),
        "grad_weight": lambda p: cupyconv.conv_grad_weight(x, dy, w.shape, padding=1, precision=p),
        "transpose": lambda p: cupyconv.conv_transpose(dy, w, padding=1, precision=p),
        "plan": lambda p: cupyconv.plan_conv(x.shape, w.shape, F32, padding=1,
                                             precision=p)(x, w),
        "operator": lambda p: cupyconv.ConvOperator.from_conv(w, x.shape, padding=1,
                                                              precision=p).matvec(x.ravel()),
    }
    for name, call in calls.items():
        assert not np.array_equal(call("tf32"), call("highest")), name


def test_precision_errors_and_the_default():
    x64 = np.ones((1, 1, 8, 8))
    with pytest.raises(ValueError, match="precision='tf32' computes float32"):
        cupyconv.conv(x64, np.ones((1, 1, 3, 3)), precision="tf32")
    with pytest.raises(ValueError, match="precision must be one of"):
        cupyconv.conv(x64, np.ones((1, 1, 3, 3)), precision="fast")
    rng = np.random.default_rng(1)
    x, w, _ = _layer(rng)
    high = cupyconv.conv(x, w, padding=1)
    try:
        config.precision = "tf32"        # process-wide default: float32 only
        assert not np.array_equal(cupyconv.conv(x, w, padding=1), high)
        cupyconv.conv(x64, np.ones((1, 1, 3, 3)))            # float64 unaffected
        np.testing.assert_array_equal(cupyconv.conv(x, w, padding=1, precision="highest"), high)
    finally:
        config.precision = "highest"
